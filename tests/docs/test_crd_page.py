"""The ConsumerGroup page documents every property of the CRD the chart installs, object by
object, with what the API server checks: types, defaults, bounds, required fields, CEL rules."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from docgen import crd, markdown
from tests.docs.pages import row, section


def openapi(manifest: Mapping[str, Any]) -> Any:
    """The schema of the CRD's one version."""
    return manifest["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def objects(schema: Mapping[str, Any], path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every object with properties, walked here apart from the generator's own walk."""
    if "properties" in schema:
        yield path, schema
        for name, sub in schema["properties"].items():
            yield from objects(sub, f"{path}.{name}")
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(schema.get(key), dict):
            yield from objects(schema[key], path + suffix)


def test_every_property_of_every_object_of_the_crd_is_on_the_page() -> None:
    manifest = crd.load()
    root = openapi(manifest)["properties"]
    text = crd.page(manifest)

    found = [o for top in ("spec", "status") for o in objects(root[top], top)]

    assert len(found) > 20
    for path, schema in found:
        heading = f"## `{path}`" if "." not in path and "[" not in path else f"### `{path}`"
        under = section(text, heading)
        for name in schema["properties"]:
            assert f"| `{name}`" in under or f"| [`{name}`]" in under, f"{path}.{name}"


def test_required_fields_defaults_bounds_and_enums_are_shown() -> None:
    text = crd.page(crd.load())
    spec = section(text, "## `spec`")

    assert "(required)" in row(spec, "`bootstrap_servers`")
    assert '`"consumer"`' in row(spec, "`group_type`")
    assert "≥ 1; ≤ 100000" in row(spec, "`max_poll_records`")
    assert "[`queue`](#specqueue)" in spec


def test_every_cel_rule_is_listed_with_its_message() -> None:
    manifest = crd.load()
    root = openapi(manifest)
    rules = [
        *root["x-kubernetes-validations"],
        *root["properties"]["spec"]["x-kubernetes-validations"],
    ]
    text = crd.page(manifest)

    assert len(rules) > 5
    for rule in rules:
        assert f"`{rule['rule']}`" in text
        assert f"- {markdown.prose(rule['message'])}" in text


def thing(spec: dict[str, Any]) -> dict[str, Any]:
    """A small CRD, kind Thing, whose ``spec`` has this schema."""
    root = {"type": "object", "properties": {"spec": spec}}
    version = {"name": "v1", "schema": {"openAPIV3Schema": root}}
    names = {"kind": "Thing", "plural": "things", "shortNames": ["th"]}
    return {"spec": {"group": "example.io", "names": names, "versions": [version]}}


PART = {"type": "object", "properties": {"name": {"type": "string"}}}
SPEC: dict[str, Any] = {
    "type": "object",
    "required": ["size"],
    "properties": {
        "size": {"type": "integer", "minimum": 0, "exclusiveMinimum": True, "default": 3},
        "tags": {"type": "object", "additionalProperties": {"type": "string"}},
        "parts": {"type": "array", "items": PART},
    },
}


def test_a_small_crd_reads_as_its_schema_says() -> None:
    text = crd.page(thing(SPEC))

    size = row(section(text, "## `spec`"), "`size`")
    assert "(required)" in size
    assert "> 0" in size
    assert "`3`" in size
    assert "`map of string to string`" in row(text, "`tags`")
    assert "[`parts`](#specparts)" in text
    assert "| `name` |" in section(text, "### `spec.parts[]`")

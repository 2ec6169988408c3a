"""The ConsumerGroup page documents every property of the CRD the chart installs, object by
object, with what the API server checks: types, defaults, bounds, required fields, CEL rules."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from docgen import crd
from tests.docs.pages import row, section


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
    root = manifest["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
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
    rules = manifest["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "x-kubernetes-validations"
    ]
    text = crd.page(manifest)

    for rule in rules:
        assert f"`{rule['rule']}`" in text


SMALL: dict[str, Any] = {
    "spec": {
        "group": "example.io",
        "names": {"kind": "Thing", "plural": "things", "shortNames": ["th"]},
        "versions": [
            {
                "name": "v1",
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {
                                        "type": "integer",
                                        "minimum": 0,
                                        "exclusiveMinimum": True,
                                        "default": 3,
                                    },
                                    "tags": {
                                        "type": "object",
                                        "additionalProperties": {"type": "string"},
                                    },
                                    "parts": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "properties": {"name": {"type": "string"}},
                                        },
                                    },
                                },
                            }
                        },
                    }
                },
            }
        ],
    }
}


def test_a_small_crd_reads_as_its_schema_says() -> None:
    text = crd.page(SMALL)

    size = row(section(text, "## `spec`"), "`size`")
    assert "(required)" in size
    assert "> 0" in size
    assert "`3`" in size
    assert "`map of string to string`" in row(text, "`tags`")
    assert "[`parts`](#specparts)" in text
    assert "| `name` |" in section(text, "### `spec.parts[]`")

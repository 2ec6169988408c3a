"""The ConsumerGroup resource's reference page, from the CustomResourceDefinition itself.

Owns: reading the CRD as the API server gets it (``crds/consumergroups.kafleet.io.yaml``, which
``python -m kafleet_operator.policy.crd`` writes from the pydantic models and a test keeps
equal to them) and writing its schema as tables, one per object (``spec``, ``spec.queue``, the
items of ``status.conditions``, ...): each field's type, default, bounds and allowed values,
description and whether it is required; the rules the API server checks across fields (CEL),
the printer columns and the scale subresource. ``page()`` is the Markdown.

Does not own the schema (``kafleet_operator/policy/crd.py`` and the models it joins) or the
worker's own configuration page (``configuration.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from docgen import markdown

__all__ = ["CRD", "Field", "Object", "fields", "load", "objects", "page"]

CRD = Path(__file__).resolve().parent.parent / "crds" / "consumergroups.kafleet.io.yaml"

Schema = Mapping[str, Any]


@dataclass(frozen=True)
class Field:
    """One property of an object of the schema, as the page shows it (Markdown cells)."""

    path: str  # spec.queue.max_records
    type: str
    default: str
    constraints: str
    description: str
    required: bool
    table: str | None  # the path of its own table (an object, its items or its values)


@dataclass(frozen=True)
class Object:
    """An object of the schema with properties of its own: ``spec``, ``status.conditions[]``."""

    path: str
    schema: Schema


def load(path: Path = CRD) -> dict[str, Any]:
    """The CRD manifest."""
    manifest: dict[str, Any] = yaml.safe_load(path.read_text())
    return manifest


def _inner(schema: Schema) -> tuple[str, Schema] | None:
    """The schema holding properties inside this one, with the suffix of its path: the object
    itself, an array's items (``[]``) or a map's values (``{}``)."""
    if "properties" in schema:
        return "", schema
    items = schema.get("items")
    if isinstance(items, Mapping):
        found = _inner(items)
        return None if found is None else ("[]" + found[0], found[1])
    values = schema.get("additionalProperties")
    if isinstance(values, Mapping):
        found = _inner(values)
        return None if found is None else ("{}" + found[0], found[1])
    return None


def objects(schema: Schema, path: str) -> Iterator[Object]:
    """This object and every object inside it, depth first, in the order of the properties."""
    yield Object(path, schema)
    for name, sub in (schema.get("properties") or {}).items():
        found = _inner(sub)
        if found is not None:
            yield from objects(found[1], f"{path}.{name}{found[0]}")


def type_text(schema: Schema) -> str:
    """``integer``, ``array of string``, ``map of string to string``, ``string | null``..."""
    if schema.get("x-kubernetes-int-or-string"):
        kind = "integer or string"
    elif "items" in schema:
        kind = f"array of {type_text(schema['items'])}"
    elif isinstance(schema.get("additionalProperties"), Mapping):
        kind = f"map of string to {type_text(schema['additionalProperties'])}"
    elif schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
        kind = "object (any fields)"
    else:
        kind = str(schema.get("type", "any"))
    if "format" in schema:
        kind += f" ({schema['format']})"
    return f"{kind} | null" if schema.get("nullable") else kind


def constraints(schema: Schema) -> str:
    """Bounds, lengths, sizes, the pattern and the allowed values, as Markdown."""
    found: list[str] = []
    if "minimum" in schema:
        sign = ">" if schema.get("exclusiveMinimum") else "≥"
        found.append(f"{sign} {markdown.literal(schema['minimum'])}")
    if "maximum" in schema:
        sign = "<" if schema.get("exclusiveMaximum") else "≤"
        found.append(f"{sign} {markdown.literal(schema['maximum'])}")
    for key, words in (
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
        ("minItems", "items ≥"),
        ("maxItems", "items ≤"),
    ):
        if key in schema:
            found.append(f"{words} {schema[key]}")
    if "pattern" in schema:
        found.append(f"matches {markdown.code(str(schema['pattern']))}")
    if "enum" in schema:
        found.append("one of " + ", ".join(markdown.code(str(v)) for v in schema["enum"]))
    return "; ".join(found)


def fields(obj: Object) -> list[Field]:
    """The properties of one object."""
    required = set(obj.schema.get("required") or [])
    out = []
    for name, sub in (obj.schema.get("properties") or {}).items():
        default = sub.get("default")
        inner = _inner(sub)
        out.append(
            Field(
                path=f"{obj.path}.{name}",
                type=markdown.code(type_text(sub)),
                default="" if default is None else markdown.code(markdown.literal(default)),
                constraints=constraints(sub),
                description=markdown.prose(str(sub.get("description", ""))),
                required=name in required,
                table=None if inner is None else f"{obj.path}.{name}{inner[0]}",
            )
        )
    return out


def _field_cell(field: Field) -> str:
    """The field's name, linked to its own table if it has one, and whether it is required."""
    name = markdown.code(field.path.rsplit(".", 1)[-1])
    if field.table is not None:
        name = f"[{name}](#{markdown.anchor(field.table)})"
    return name + " (required)" if field.required else name


def _rules(schema: Schema) -> str:
    rules = schema.get("x-kubernetes-validations") or []
    if not rules:
        return ""
    lines = ["Checked by the API server across fields (CEL), each refusal with its message:", ""]
    for rule in rules:
        where = f" (at {markdown.code(rule['fieldPath'])})" if "fieldPath" in rule else ""
        lines.append(f"- {markdown.prose(rule['message'])}{where}: {markdown.code(rule['rule'])}")
    return "\n".join(lines) + "\n"


HEAD = ["Field", "Type", "Default", "Allowed", "Description"]


def _object_section(obj: Object, heading: bool) -> str:
    rows = [[_field_cell(f), f.type, f.default, f.constraints, f.description] for f in fields(obj)]
    parts = [f"### `{obj.path}`\n"] if heading else []
    if obj.schema.get("description"):
        parts.append(markdown.prose(str(obj.schema["description"])) + "\n")
    parts.append(markdown.table(HEAD, rows))
    rules = _rules(obj.schema)
    return "\n".join([*parts, rules] if rules else parts)


def page(manifest: Mapping[str, Any]) -> str:
    """The ConsumerGroup resource's reference page, Markdown."""
    spec = manifest["spec"]
    version = spec["versions"][0]
    root = version["schema"]["openAPIV3Schema"]
    kind, group = spec["names"]["kind"], spec["group"]
    short = ", ".join(markdown.code(n) for n in spec["names"].get("shortNames", []))
    parts = [
        f"# The {kind} resource\n",
        f"`{group}/{version['name']}`, kind `{kind}`, namespaced; `kubectl get "
        f"{spec['names']['plural']}` (short names: {short}). Generated at each build of this "
        "site from the CustomResourceDefinition the chart installs "
        "(`crds/consumergroups.kafleet.io.yaml`, itself generated from the pydantic models "
        "that check a spec: `kafleet_operator/policy/crd.py`). The worker's fields in `spec` are "
        "the [worker's configuration](configuration.md), with the same names; the rest are "
        "the fleet's. A worker's field with no default here takes the worker's own (some "
        "depend on another field, such as `group_type`, which a schema's default cannot say).\n",
    ]
    rules = _rules(root)
    if rules:
        parts.append(rules)
    for top in ("spec", "status"):
        schema = root["properties"].get(top)
        if schema is None:
            continue
        parts.append(f"## `{top}`\n")
        if top == "status":
            parts.append("Written by the operator, never by hand (the `status` subresource).\n")
        parts += [_object_section(o, heading=n > 0) for n, o in enumerate(objects(schema, top))]
    parts.append(_printer_columns(version))
    return "\n".join(parts)


def _printer_columns(version: Mapping[str, Any]) -> str:
    columns = version.get("additionalPrinterColumns") or []
    scale = (version.get("subresources") or {}).get("scale")
    lines = ["## `kubectl get` and `kubectl scale`\n"]
    if columns:
        lines.append(
            "The columns of `kubectl get consumergroups` (those of priority 1 with `-o wide`):\n"
        )
        lines.append(
            markdown.table(
                ["Column", "Type", "From", "Wide only"],
                [
                    [c["name"], c["type"], markdown.code(c["jsonPath"]),
                     "yes" if c.get("priority", 0) else ""]
                    for c in columns
                ],
            )
        )  # fmt: skip
    if scale:
        lines.append(
            "The scale subresource: `kubectl scale` writes "
            f"{markdown.code(scale['specReplicasPath'])}, reads "
            f"{markdown.code(scale['statusReplicasPath'])} and the selector "
            f"{markdown.code(scale.get('labelSelectorPath', ''))} (what KEDA and an HPA use).\n"
        )
    return "\n".join(lines)

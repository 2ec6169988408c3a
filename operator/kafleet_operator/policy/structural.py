"""A pydantic model's JSON Schema as a Kubernetes structural schema (OpenAPI v3).

Owns: the translation, node by node: references inlined, ``X | None`` as ``nullable``, a union
of an integer and a string as ``x-kubernetes-int-or-string`` (as Kubernetes' quantities, the
pattern kept), a union of other scalars left to the model (unknown fields preserved), exclusive
bounds in OpenAPI's form, a ``const`` as a one-value ``enum``, titles, formats, discriminators
and ``None`` defaults dropped, ``additionalProperties`` left out where there are properties
(``extra="forbid"``: kubectl's strict field validation does that), and an object with no
properties (a free-form mapping) preserving unknown fields.

Does not own which models and fields make the CRD, its rules, status and columns, or rendering
it (``crd.py``).
"""

from __future__ import annotations

from typing import Any

DROP_KEYS = {"title", "format", "discriminator"}
PRESERVE = "x-kubernetes-preserve-unknown-fields"


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    """One JSON Schema node as a structural OpenAPI v3 node."""
    if isinstance(node, list):
        return [_structural(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].split("/")[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        nullable = len(options) < len(node["anyOf"])
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        kinds = {o.get("type") for o in options}
        if len(options) == 1:
            single: dict[str, Any] = _structural({**options[0], **rest}, defs)
        elif kinds == {"integer", "string"}:  # as Kubernetes' own quantities: pattern kept
            single = {**_structural(rest, defs), "x-kubernetes-int-or-string": True}
        else:  # a union of other scalars (librdkafka values): a schema cannot say which
            single = {**_structural(rest, defs), PRESERVE: True}
        if len(options) > 1:
            single.pop("type", None)
        if nullable:
            single["nullable"] = True
        return single
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in DROP_KEYS or key == "$defs" or (key == "default" and value is None):
            continue
        if key == "exclusiveMinimum":
            out["minimum"], out["exclusiveMinimum"] = value, True
        elif key == "exclusiveMaximum":
            out["maximum"], out["exclusiveMaximum"] = value, True
        elif key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out[key] = {k: _structural(v, defs) for k, v in value.items()}
        else:
            out[key] = _structural(value, defs)
    if "properties" in out:  # extra="forbid": kubectl's strict field validation does that
        out.pop("additionalProperties", None)
    if out.get("type") == "object" and "properties" not in out:
        values = out.get("additionalProperties")
        if not isinstance(values, dict) or not values or values.get(PRESERVE):
            out.pop("additionalProperties", None)
            out[PRESERVE] = True
    return out


def schema_of(model: type[Any]) -> dict[str, Any]:
    """``model``'s validation schema, structural."""
    raw = model.model_json_schema(mode="validation")
    return dict(_structural(raw, raw.get("$defs", {})))

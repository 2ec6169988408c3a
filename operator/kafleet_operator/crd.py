"""The ``ConsumerGroup`` CRD, made from the same pydantic models that validate a spec.

Owns: turning the JSON Schemas of ``FleetSettings`` and ``ConsumerConfig`` into one Kubernetes
structural schema (references inlined, ``X | None`` as ``nullable``, exclusive bounds in
OpenAPI's form, secrets left out: they come from Secrets), the CEL rules that span fields,
the ``status`` and ``scale`` subresources and the printer columns. ``python -m
kafleet_operator.crd`` prints the manifest; ``crds/consumergroups.kafleet.io.yaml`` is that
output, and a test keeps the two equal.

Does not own validating a spec at run time (``spec.py``) or installing the CRD.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from kafleet.config import ConsumerConfig
from kafleet_operator.spec import OPERATOR_OWNED, PER_POD, PER_POD_REASON, FleetSettings

GROUP, VERSION, PLURAL, KIND = "kafleet.io", "v1alpha1", "consumergroups", "ConsumerGroup"
DROP_KEYS = {"title", "format", "discriminator"}
PRESERVE = "x-kubernetes-preserve-unknown-fields"

RULES = [
    {
        "rule": "(has(self.topics) && size(self.topics) > 0) != has(self.topic_pattern)",
        "message": "give exactly one of topics and topic_pattern",
        "fieldPath": ".topics",
    },
    {
        "rule": "!has(self.max_poll_records) || !has(self.queue) || "
        "!has(self.queue.max_records) || self.max_poll_records <= self.queue.max_records",
        "message": "max_poll_records must not exceed queue.max_records",
        "fieldPath": ".max_poll_records",
    },
    {
        "rule": "!has(self.autoscaling) || !has(self.autoscaling.min_replicas) || "
        "!has(self.autoscaling.max_replicas) || "
        "self.autoscaling.min_replicas <= self.autoscaling.max_replicas",
        "message": "autoscaling.min_replicas must not exceed autoscaling.max_replicas",
        "fieldPath": ".autoscaling.min_replicas",
    },
    {
        "rule": "!has(self.autoscaling) || !has(self.autoscaling.fallback) || "
        "((!has(self.autoscaling.min_replicas) || "
        "self.autoscaling.fallback.replicas >= self.autoscaling.min_replicas) && "
        "(!has(self.autoscaling.max_replicas) || "
        "self.autoscaling.fallback.replicas <= self.autoscaling.max_replicas))",
        "message": "autoscaling.fallback.replicas must lie within min_replicas and max_replicas",
        "fieldPath": ".autoscaling.fallback.replicas",
    },
    {
        "rule": "!has(self.guarantee) || self.guarantee != 'exactly-once' || has(self.spark)",
        "message": "guarantee exactly-once needs spark with spark.table: the Delta table that "
        "stores the offsets with the output",
        "fieldPath": ".guarantee",
    },
    {
        "rule": "!has(self.guarantee) || self.guarantee != 'exactly-once' || !has(self.spark) || "
        "has(self.spark.table)",
        "message": "guarantee exactly-once needs spark.table, with spark.job too: the worker "
        "resumes from that Delta table's log",
        "fieldPath": ".spark.table",
    },
    {
        "rule": f"!has(self.{PER_POD})",
        "message": f"{PER_POD}: {PER_POD_REASON}",
        "fieldPath": f".{PER_POD}",
    },
]

STATUS = {
    "type": "object",
    "properties": {
        "observedGeneration": {"type": "integer", "format": "int64"},
        "appliedGeneration": {"type": "integer", "format": "int64"},
        "replicas": {"type": "integer"},
        "readyReplicas": {"type": "integer"},
        "labelSelector": {"type": "string"},
        "lag": {"type": "integer", "format": "int64"},
        "maxPartitionLag": {"type": "integer", "format": "int64"},
        "timeLagSeconds": {"type": "number"},
        "partitions": {"type": "integer"},
        "maxPollRecords": {
            "type": "integer",
            "description": "the max_poll_records the ConfigMap holds (asked of the workers)",
        },
        "tuning": {
            "type": "object",
            "nullable": True,
            "description": "max_poll_records tuning: where it started and what the pods applied",
            "properties": {
                "from": {"type": "integer", "description": "the spec value it started from"},
                "changedAt": {"type": "string"},
                "pods": {"type": "integer", "description": "ready pods reporting a value"},
                "appliedMin": {"type": "integer", "nullable": True},
                "appliedMax": {"type": "integer", "nullable": True},
                "pending": {
                    "type": "boolean",
                    "description": "the last change is not yet applied by every ready pod",
                },
                "latencySeconds": {"type": "number", "nullable": True},
                "rejected": {"type": "string", "nullable": True},
            },
        },
        "lastScaleTime": {"type": "string"},
        "lastScaleReason": {"type": "string"},
        "applyFailure": {
            "type": "object",
            "nullable": True,
            "description": "the refusal of a generation's objects: the API server's "
            "(ApplyFailed), or the operator's of an object it does not own (NotOwned)",
            "properties": {
                "generation": {"type": "integer", "format": "int64"},
                "message": {"type": "string"},
                "reason": {"type": "string"},
            },
        },
        "conditions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["type", "status"],
                "properties": {
                    "type": {"type": "string"},
                    "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                    "reason": {"type": "string"},
                    "message": {"type": "string"},
                    "lastTransitionTime": {"type": "string"},
                    "observedGeneration": {"type": "integer", "format": "int64"},
                },
            },
        },
    },
    # kopf keeps its own progress notes under status.kopf (see handlers.py: annotations).
    "x-kubernetes-preserve-unknown-fields": True,
}

COLUMNS = [
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
    },
    {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas"},
    {"name": "Min", "type": "integer", "jsonPath": ".spec.autoscaling.min_replicas"},
    {"name": "Max", "type": "integer", "jsonPath": ".spec.autoscaling.max_replicas"},
    {
        "name": "Active",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Active")].status',
    },
    {"name": "Lag", "type": "integer", "jsonPath": ".status.lag"},
    {"name": "MaxPollRecords", "type": "integer", "jsonPath": ".status.maxPollRecords"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Partitions", "type": "integer", "jsonPath": ".status.partitions", "priority": 1},
    {"name": "TimeLag", "type": "number", "jsonPath": ".status.timeLagSeconds", "priority": 1},
    {"name": "Reason", "type": "string", "jsonPath": ".status.lastScaleReason", "priority": 1},
    {
        "name": "Paused",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Paused")].status',
        "priority": 1,
    },
]


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


def _schema_of(model: type[Any]) -> dict[str, Any]:
    raw = model.model_json_schema(mode="validation")
    return dict(_structural(raw, raw.get("$defs", {})))


def spec_schema() -> dict[str, Any]:
    fleet = _schema_of(FleetSettings)
    worker = _schema_of(ConsumerConfig)
    properties = {
        name: schema for name, schema in worker["properties"].items() if name not in OPERATOR_OWNED
    }
    properties.update(fleet["properties"])
    # A worker in a pod always runs a handler, which is optional for the library alone.
    required = sorted({*worker.get("required", []), *fleet.get("required", []), "handler"})
    return {
        "type": "object",
        "description": "the worker's configuration (kafleet worker's fields) and the fleet's",
        "required": required,
        "properties": properties,
        "x-kubernetes-validations": copy.deepcopy(RULES),
    }


# The group's name is a label value of every pod it owns and names its Service `<name>-metrics`,
# a DNS-1035 label: 63 characters at most, so 55 for the name (CEL at the root sees metadata.name).
NAME_RULE = {
    "rule": "self.metadata.name.size() <= 55 && "
    "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
    "message": "metadata.name: at most 55 characters, lowercase letters, digits and '-', "
    "starting with a letter and ending with a letter or digit (it names the Service "
    "<name>-metrics, a DNS-1035 label of 63 at most, and labels every pod)",
}


def manifest() -> dict[str, Any]:
    schema = {
        "type": "object",
        "required": ["spec"],
        "x-kubernetes-validations": [NAME_RULE],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": STATUS,
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": PLURAL,
                "singular": "consumergroup",
                "kind": KIND,
                "listKind": f"{KIND}List",
                "shortNames": ["kcg"],
                "categories": ["kafleet"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.labelSelector",
                        },
                    },
                    "additionalPrinterColumns": COLUMNS,
                }
            ],
        },
    }


def render() -> str:
    header = (
        "# Generated by `python -m kafleet_operator.crd` from the pydantic models in\n"
        "# operator/kafleet_operator/spec.py and consumer/kafleet/config.py; do not edit.\n"
    )
    return header + yaml.safe_dump(manifest(), sort_keys=False, width=100)


if __name__ == "__main__":
    print(render(), end="")

"""The ``ConsumerGroup`` CRD, made from the same pydantic models that validate a spec.

Owns: joining the structural schemas of ``FleetSettings`` and ``ConsumerConfig`` into the
spec's (secrets left out: they come from Secrets, no default where the model's depends on
another field), the CEL rules that span fields, the ``status`` and ``scale`` subresources and
the printer columns. ``python -m kafleet_operator.policy.crd`` prints the manifest;
``crds/consumergroups.kafleet.io.yaml`` is that output, and a test keeps the two equal.

Does not own validating a spec at run time (``spec.py``), making a model's JSON Schema
structural (``structural.py``: references inlined, ``X | None`` as ``nullable``, exclusive
bounds in OpenAPI's form) or installing the CRD.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from kafleet.config.model import ConsumerConfig
from kafleet_operator.policy.spec import OPERATOR_OWNED, PER_POD, PER_POD_REASON, FleetSettings
from kafleet_operator.policy.structural import schema_of

GROUP, VERSION, PLURAL, KIND = "kafleet.io", "v1alpha1", "consumergroups", "ConsumerGroup"

# Worker fields whose default depends on another field, which a schema's default cannot say:
# with group_type share, ordering is unordered (not partition), processing_timeout_s 30 (not
# 300: it is the record lock, which brokers bound to 60 s) and max_poll_records concurrency /
# share.consumers (the API server would write the consumer group's defaults into every share
# group, which the model then refuses or the broker does).
DEPENDENT_DEFAULTS = ("ordering", "processing_timeout_s", "max_poll_records")
NOT_SHARE = "!has(self.group_type) || self.group_type != 'share'"
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
    # Share groups (KIP-932); spec.py says the same, and more (the worker's rules, the image).
    {
        "rule": f"{NOT_SHARE} || !has(self.static_membership) || !self.static_membership",
        "message": "static_membership: share groups have no static membership: leave it off",
        "fieldPath": ".static_membership",
    },
    {
        "rule": f"{NOT_SHARE} || !has(self.autoscaling) || "
        "!has(self.autoscaling.even_partitions) || !self.autoscaling.even_partitions",
        "message": "autoscaling.even_partitions: a share group's replicas share every "
        "partition, so there is nothing to even out: leave it off",
        "fieldPath": ".autoscaling.even_partitions",
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


def spec_schema() -> dict[str, Any]:
    fleet = schema_of(FleetSettings)
    worker = schema_of(ConsumerConfig)
    properties = {
        name: schema for name, schema in worker["properties"].items() if name not in OPERATOR_OWNED
    }
    for name in DEPENDENT_DEFAULTS:  # the model gives them; the API server must not
        properties[name] = {k: v for k, v in properties[name].items() if k != "default"}
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
        "# Generated by `python -m kafleet_operator.policy.crd` from the pydantic models in\n"
        "# operator/kafleet_operator/policy/spec.py and consumer/kafleet/config/; do not edit.\n"
    )
    return header + yaml.safe_dump(manifest(), sort_keys=False, width=100)


if __name__ == "__main__":
    print(render(), end="")

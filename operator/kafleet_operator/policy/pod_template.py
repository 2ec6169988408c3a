"""``spec.pod_template``: what a user adds to the fleet's pods, beside what the operator needs.

Owns: the template's typed shape, after Strimzi's ``template`` (Kubernetes' own camelCase names
inside it): the pods' ``metadata`` (labels and annotations, merged over the operator's),
``volumes`` (appended to the operator's), the pod-level fields the operator leaves to the user
(placement, scheduling, image pull secrets, identity, DNS), and, per container, ``worker`` and
``sidecar``: ``env``, ``envFrom`` and ``volumeMounts``. It refuses what the operator owns (the
containers, the pod's security context, the volumes ``config``, ``state`` and ``tmp`` and the
paths they are mounted at, ``KAFLEET_*`` variables, the labels that select the pods), each
with a reason, in the model (the operator and ``kafleet`` judge with it) and in CEL rules that
travel with the schema into the CRD (``crd.py``), so the API server says the same. Kubernetes'
own sub-objects (``affinity``, ``tolerations``, a volume's source) stay schemaless: the API
server judges them when the Deployment is applied.

Does not own merging the template into the pod (``pod_spec.py``) nor the rest of the spec
(``spec.py``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

_Strict = ConfigDict(frozen=True, extra="forbid")
# Bounds that keep the CEL rules' estimated cost within the API server's budget.
MAX_ITEMS = 64
MAX_NAME = 253

CONFIG_DIR = "/etc/kafleet"
STATE_DIR = "/var/run/kafleet"
TMP_DIR = "/tmp"  # the worker's own emptyDir, mounted over the read-only root
# The operator's volumes and where it mounts them.
OPERATOR_MOUNTS = {"config": CONFIG_DIR, "state": STATE_DIR, "tmp": TMP_DIR}
ENV_PREFIX = "KAFLEET_"  # the worker reads KAFLEET_* over its file: the operator sets those
SELECTOR_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
)
CONFIG_HASH = "kafleet.io/config-hash"
# Pod-level fields the operator sets itself, and why a template may not.
OWNED = {
    "containers": "the operator builds them; give the worker's and the sidecar's env, envFrom "
    "and volumeMounts under pod_template.worker and pod_template.sidecar",
    "initContainers": "the operator's native sidecar is one; a user's would run before it",
    "ephemeralContainers": "added by kubectl debug, never by a template",
    "securityContext": "the pods run restricted as kafleet's image user (fsGroup makes the "
    "volumes writable for it)",
    "terminationGracePeriodSeconds": "set from shutdown_grace_s",
    "shareProcessNamespace": "the sidecar watches the worker's process",
    "automountServiceAccountToken": "workers never call the Kubernetes API",
    "restartPolicy": "a Deployment's pods always restart",
    "hostNetwork": "the sidecar's port would collide between replicas on one node",
    "hostPID": "the restricted pod security profile forbids it",
    "hostIPC": "the restricted pod security profile forbids it",
}

ENV_RULE = f"!self.name.startsWith('{ENV_PREFIX}')"
ENV_MESSAGE = f"{ENV_PREFIX}* variables are set by the operator from the spec; use its fields"
PREFIX_RULE = f"!has(self.prefix) || !self.prefix.startsWith('{ENV_PREFIX}')"
OWNED_NAMES = "[" + ", ".join(f"'{n}'" for n in OPERATOR_MOUNTS) + "]"
OWNED_PATHS = "[" + ", ".join(f"'{p}'" for p in OPERATOR_MOUNTS.values()) + "]"
VOLUME_RULE = f"!({OWNED_NAMES}.exists(n, n == self.name))"
VOLUME_MESSAGE = f"the volumes {', '.join(OPERATOR_MOUNTS)} are the operator's: name yours else"
MOUNT_RULE = f"!({OWNED_PATHS}.exists(p, (self.mountPath + '/').startsWith(p + '/')))"
MOUNT_MESSAGE = f"the operator mounts {', '.join(OPERATOR_MOUNTS.values())}: mount elsewhere"
LABELS_RULE = (
    "!has(self.labels) || !("
    + "["
    + ", ".join(f"'{k}'" for k in SELECTOR_LABELS)
    + "]"
    + ".exists(k, k in self.labels))"
)
LABELS_MESSAGE = f"the labels {', '.join(SELECTOR_LABELS)} select the group's pods: the operator's"
ANNOTATIONS_RULE = f"!has(self.annotations) || !('{CONFIG_HASH}' in self.annotations)"


def _rules(*pairs: tuple[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in pairs]}


def _under_owned(path: str) -> bool:
    """As the CEL rule says it: the path is one the operator mounts, or lies under one."""
    return any((path + "/").startswith(owned + "/") for owned in OPERATOR_MOUNTS.values())


class PodMetadata(BaseModel):
    """Labels and annotations of every pod, merged over the operator's."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        json_schema_extra=_rules(
            (LABELS_RULE, LABELS_MESSAGE), (ANNOTATIONS_RULE, f"{CONFIG_HASH} is the operator's")
        ),
    )

    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _not_the_operators(self) -> PodMetadata:
        if any(key in self.labels for key in SELECTOR_LABELS):
            raise ValueError(f"labels: {LABELS_MESSAGE}")
        if CONFIG_HASH in self.annotations:
            raise ValueError(f"annotations: {CONFIG_HASH} is the operator's")
        return self


class LocalObjectReference(BaseModel):
    model_config = _Strict

    name: str = Field(min_length=1, max_length=MAX_NAME)
    optional: bool | None = None


class EnvVar(BaseModel):
    """One variable of a container, as Kubernetes spells it (``valueFrom`` schemaless)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_extra=_rules((ENV_RULE, ENV_MESSAGE))
    )

    name: str = Field(min_length=1, max_length=MAX_NAME)
    value: str | None = None
    valueFrom: dict[str, Any] | None = None  # noqa: N815 - Kubernetes' name

    @model_validator(mode="after")
    def _not_the_operators(self) -> EnvVar:
        if self.name.startswith(ENV_PREFIX):
            raise ValueError(f"name: {ENV_MESSAGE} (got {self.name!r})")
        return self


class EnvFromSource(BaseModel):
    """Variables from every key of a ConfigMap or a Secret; a ``prefix`` may not make them
    ``KAFLEET_*`` (keys of the source itself cannot be judged before the pod starts)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_extra=_rules((PREFIX_RULE, ENV_MESSAGE))
    )

    prefix: str | None = Field(None, max_length=MAX_NAME)
    configMapRef: LocalObjectReference | None = None  # noqa: N815 - Kubernetes' name
    secretRef: LocalObjectReference | None = None  # noqa: N815 - Kubernetes' name

    @model_validator(mode="after")
    def _not_the_operators(self) -> EnvFromSource:
        if self.prefix is not None and self.prefix.startswith(ENV_PREFIX):
            raise ValueError(f"prefix: {ENV_MESSAGE}")
        return self


class VolumeMount(BaseModel):
    """A volume of ``pod_template.volumes`` mounted into a container."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        json_schema_extra=_rules((VOLUME_RULE, VOLUME_MESSAGE), (MOUNT_RULE, MOUNT_MESSAGE)),
    )

    name: str = Field(min_length=1, max_length=MAX_NAME)
    mountPath: str = Field(min_length=1, max_length=4096)  # noqa: N815 - Kubernetes' name
    readOnly: bool | None = None  # noqa: N815 - Kubernetes' name
    subPath: str | None = None  # noqa: N815 - Kubernetes' name
    subPathExpr: str | None = None  # noqa: N815 - Kubernetes' name
    mountPropagation: Literal["None", "HostToContainer", "Bidirectional"] | None = None  # noqa: N815
    recursiveReadOnly: Literal["Disabled", "IfPossible", "Enabled"] | None = None  # noqa: N815

    @model_validator(mode="after")
    def _not_the_operators(self) -> VolumeMount:
        if self.name in OPERATOR_MOUNTS:
            raise ValueError(f"name: {VOLUME_MESSAGE} (got {self.name!r})")
        if _under_owned(self.mountPath):
            raise ValueError(f"mountPath: {MOUNT_MESSAGE} (got {self.mountPath!r})")
        return self


class ContainerTemplate(BaseModel):
    """What a user adds to one of the operator's containers."""

    model_config = _Strict

    env: list[EnvVar] = Field(default_factory=list, max_length=MAX_ITEMS)
    envFrom: list[EnvFromSource] = Field(default_factory=list, max_length=MAX_ITEMS)  # noqa: N815
    volumeMounts: list[VolumeMount] = Field(  # noqa: N815 - Kubernetes' name
        default_factory=list, max_length=MAX_ITEMS
    )


def _volume(value: dict[str, Any]) -> dict[str, Any]:
    name = value.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("a volume needs a name")
    if name in OPERATOR_MOUNTS:
        raise ValueError(f"{VOLUME_MESSAGE} (got {name!r})")
    return value


# A Kubernetes volume: its name typed, its source (secret, configMap, csi, ...) schemaless.
Volume = Annotated[
    dict[str, Any],
    AfterValidator(_volume),
    WithJsonSchema(
        {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string", "maxLength": MAX_NAME}},
            "x-kubernetes-preserve-unknown-fields": True,
            **_rules((VOLUME_RULE, VOLUME_MESSAGE)),
        }
    ),
]
K8sObject = dict[str, Any]  # schemaless: the API server judges it in the Deployment


class PodTemplate(BaseModel):
    """What a user adds to every pod of the fleet (Strimzi's ``template``, Kubernetes' names)."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        json_schema_extra=_rules(
            *(
                (
                    f"!has(self.{c}) || !has(self.{c}.volumeMounts) || self.{c}.volumeMounts"
                    ".all(m, has(self.volumes) && self.volumes.exists(v, v.name == m.name))",
                    f"{c}.volumeMounts[].name must name a volume of pod_template.volumes",
                )
                for c in ("worker", "sidecar")
            )
        ),
    )

    metadata: PodMetadata = Field(default_factory=PodMetadata)
    volumes: list[Volume] = Field(
        default_factory=list,
        max_length=MAX_ITEMS,
        description="appended to the operator's volumes (config, state, tmp)",
    )
    worker: ContainerTemplate = Field(default_factory=ContainerTemplate)
    sidecar: ContainerTemplate = Field(default_factory=ContainerTemplate)
    nodeSelector: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    tolerations: list[K8sObject] = Field(default_factory=list)
    affinity: K8sObject | None = None
    topologySpreadConstraints: list[K8sObject] | None = Field(  # noqa: N815
        None,
        description="replaces the operator's default spread (zones, then nodes, "
        "ScheduleAnyway); [] for none",
    )
    priorityClassName: str | None = None  # noqa: N815
    imagePullSecrets: list[LocalObjectReference] = Field(default_factory=list)  # noqa: N815
    serviceAccountName: str | None = Field(  # noqa: N815
        None, description="for a handler's cloud identity; the API token is still not mounted"
    )
    runtimeClassName: str | None = None  # noqa: N815
    schedulerName: str | None = None  # noqa: N815
    hostAliases: list[K8sObject] = Field(default_factory=list)  # noqa: N815
    dnsPolicy: Literal["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"] | None = None  # noqa: N815
    dnsConfig: K8sObject | None = None  # noqa: N815
    enableServiceLinks: bool | None = None  # noqa: N815

    @model_validator(mode="before")
    @classmethod
    def _not_the_operators(cls, data: Any) -> Any:
        if isinstance(data, dict):
            owned = [f"{key}: {OWNED[key]}" for key in OWNED if key in data]
            if owned:
                raise ValueError("set by the operator: " + "; ".join(owned))
        return data

    @model_validator(mode="after")
    def _mounts_name_volumes(self) -> PodTemplate:
        names = {volume["name"] for volume in self.volumes}
        for container in ("worker", "sidecar"):
            for mount in getattr(self, container).volumeMounts:
                if mount.name not in names:
                    raise ValueError(
                        f"{container}.volumeMounts: {mount.name!r} is not a volume of "
                        "pod_template.volumes"
                    )
        return self

    def pod_fields(self) -> dict[str, Any]:
        """The pod-level fields the template sets, as a pod spec spells them (volumes and
        the spread constraints left to the builder, which merges them)."""
        data = self.model_dump(
            mode="json",
            exclude_none=True,
            exclude={"metadata", "volumes", "worker", "sidecar", "topologySpreadConstraints"},
        )
        return {key: value for key, value in data.items() if value not in ({}, [])}

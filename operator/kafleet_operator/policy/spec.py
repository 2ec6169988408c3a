"""The ``ConsumerGroup`` resource's spec: the worker's configuration plus how to run the fleet.

Owns: the fields the operator adds to the worker's own (``image``, ``replicas``,
``autoscaling`` and ``tuning`` (their models in ``autopilot.py``), ``resources`` as Kubernetes
quantities, ``pod_template`` (its model in ``pod_template.py``),
``static_membership``, and ``security`` with every secret taken from a Kubernetes Secret,
never inlined), and ``parse_spec``, which validates a spec
into those settings and a ``kafleet.ConsumerConfig`` (from the spec alone: never from the
operator's own ``KAFLEET_*`` environment variables, which a worker's configuration would
otherwise read), with the rules that span both (``group_type: share``: no static membership,
no ``even_partitions``, an image with Java). The worker's fields keep their names
(``max_poll_records``, ``queue.max_records``, ``spark.table``, ...): a spec, a worker's YAML
file and ``kafleet worker``'s flags say the same thing the same way. The CRD's schema is made
from these models (``crd.py``).

Does not own building Kubernetes objects (``builders.py``) or any I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    WithJsonSchema,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from kafleet.config.loading import config_error
from kafleet.config.model import ConsumerConfig
from kafleet.errors import ConfigError, FieldProblem
from kafleet_operator.policy.autopilot import Autoscaling, Tuning
from kafleet_operator.policy.pod_template import STATE_DIR, PodTemplate

_Strict = ConfigDict(frozen=True, extra="forbid")

# Worker fields the operator sets itself: the state file lives on the pod's shared volume.
OPERATOR_OWNED = ("state_file", "state_interval_ms", "security")
STATE_FILE = f"{STATE_DIR}/state.json"
# A worker field the operator sets per pod, from the pod's name (``static_membership``).
PER_POD = "group_instance_id"
PER_POD_REASON = (
    "set per pod by the operator from the pod's name (static_membership); one id shared by "
    "several replicas would fence all but one: leave it out"
)

# Kubernetes' own syntax of a resource quantity (k8s.io/apimachinery, resource.Quantity).
QUANTITY = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


def _quantity(value: int | str) -> int | str:
    if isinstance(value, str) and not re.fullmatch(QUANTITY, value):
        raise ValueError("not a Kubernetes quantity (like 500m, 2, 1.5Gi, 512Mi)")
    return value


# As Kubernetes' own schema says it: an integer or a string of that syntax.
Quantity = Annotated[
    StrictInt | str,
    AfterValidator(_quantity),
    WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "string"}], "pattern": QUANTITY}),
]


class SecretKeyRef(BaseModel):
    model_config = _Strict

    name: str = Field(min_length=1, description="a Secret in the ConsumerGroup's namespace")
    key: str = Field(min_length=1, description="the key within the Secret")


class KafkaSecurity(BaseModel):
    """The worker's ``security`` settings; passwords come from Secrets, never from the spec."""

    model_config = _Strict

    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = None
    sasl_username: str | None = None
    sasl_password_secret: SecretKeyRef | None = Field(
        None, description="the SASL password, from a Secret"
    )
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password_secret: SecretKeyRef | None = Field(
        None, description="the SSL key's password, from a Secret"
    )


class Resources(BaseModel):
    """The worker container's requests and limits, checked here, not by a failing apply."""

    model_config = _Strict

    requests: dict[str, Quantity] = Field(
        default_factory=dict, description="cpu, memory, ...: what the scheduler reserves"
    )
    limits: dict[str, Quantity] = Field(
        default_factory=dict, description="cpu, memory, ...: the most the container may use"
    )


class FleetSettings(BaseModel):
    """What the operator needs besides the worker's configuration."""

    model_config = _Strict

    image: str = Field(min_length=1, description="the worker image (kafleet and the handler)")
    sidecar_image: str | None = Field(None, description="defaults to image")
    replicas: int = Field(1, ge=0, le=1000, description="set by autoscaling unless external")
    autoscaling: Autoscaling | None = None
    tuning: Tuning = Field(default_factory=Tuning)
    security: KafkaSecurity = Field(default_factory=KafkaSecurity)
    resources: Resources = Field(
        default_factory=Resources, description="the worker container's requests and limits"
    )
    static_membership: bool = Field(
        False,
        description="each pod joins as a static member (KIP-345) with its name as "
        "group_instance_id, so a worker restarted in its pod (its liveness probe) rejoins "
        "with its partitions and no rebalance; but a pod that goes for good (a scale-down, a "
        "rolling update) keeps its partitions, unconsumed, until session_timeout_ms passes "
        "(classic; the broker's group.consumer.session.timeout.ms with consumer). Off by "
        "default: scale-downs and rollouts are more common than hung workers",
    )
    partition_metrics: bool = Field(
        True,
        description="the sidecars export per-partition series (kafleet_partition_*) beside the "
        "group's aggregates; off for topics of hundreds of partitions (1,000 partitions: "
        "1.44 MB a scrape with, 7.9 kB without)",
    )
    pod_template: PodTemplate = Field(
        default_factory=PodTemplate,
        description="added to every pod, Strimzi's template in Kubernetes' names: metadata "
        "(merged), volumes (appended), placement and scheduling, and per container (worker, "
        "sidecar) env, envFrom and volumeMounts; what the operator sets is refused",
    )


FLEET_FIELDS = tuple(FleetSettings.model_fields)


@dataclass(frozen=True)
class ParsedSpec:
    fleet: FleetSettings
    worker: ConsumerConfig  # without secrets: those reach the pod from Secrets

    def worker_file(self) -> dict[str, Any]:
        """The worker's YAML file as the ConfigMap holds it (no secret: they come from env)."""
        data = self.worker.model_dump(mode="json", exclude={"security", "state_file"})
        data["state_file"] = STATE_FILE
        security = self.fleet.security.model_dump(
            mode="json",
            exclude_none=True,
            exclude={"sasl_password_secret", "ssl_key_password_secret"},
        )
        data["security"] = security
        return data


class SpecConfig(ConsumerConfig):
    """The worker's configuration as the spec says it, nothing else: a ``ConsumerConfig``
    reads ``KAFLEET_*`` environment variables over its sources, and the operator's own (its
    image's ``KAFLEET_SHARE__CLASSPATH``, say) are not the workers'."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


# kafleet's default image (``make image``): the worker without Java. ``kafleet-spark`` has a JRE,
# Kafka's Java client and JPype, and sets KAFLEET_SHARE__CLASSPATH.
JAVALESS_IMAGE = "kafleet"


def image_name(image: str) -> str:
    """An image reference's repository name, without registry, path, tag or digest."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[0]


def _share_problems(fleet: FleetSettings) -> list[FieldProblem]:
    """What a share group (``group_type: share``) cannot run with, of the fleet's settings."""
    problems = []
    if fleet.static_membership:
        problems.append(
            FieldProblem(
                "static_membership",
                "share groups have no static membership (KIP-932: members take records, not "
                "partitions, so a restarted member has nothing to keep): leave it off",
            )
        )
    if fleet.autoscaling is not None and fleet.autoscaling.even_partitions:
        problems.append(
            FieldProblem(
                "autoscaling.even_partitions",
                "a share group's replicas share every partition, so there is nothing to even "
                "out (its replicas go up to max_replicas, past the partition count): leave it off",
            )
        )
    if image_name(fleet.image) == JAVALESS_IMAGE:
        problems.append(
            FieldProblem(
                "image",
                f"{fleet.image} is kafleet's default image, which has no Java: a share group's "
                "worker runs Kafka's Java share client in-process; use the kafleet-spark image "
                "(a JRE, the client's jars, JPype and KAFLEET_SHARE__CLASSPATH), or an image "
                "built on it",
            )
        )
    return problems


def parse_spec(spec: Mapping[str, Any]) -> ParsedSpec:
    """Validate a ConsumerGroup spec; ``ConfigError`` names every bad field and why."""
    fleet_part = {k: v for k, v in spec.items() if k in FLEET_FIELDS}
    worker_part = {k: v for k, v in spec.items() if k not in FLEET_FIELDS}
    problems: list[FieldProblem] = []
    fleet: FleetSettings | None = None
    try:
        fleet = FleetSettings.model_validate(fleet_part)
    except ValidationError as exc:
        problems.extend(config_error(exc).problems)
    for owned in OPERATOR_OWNED:
        if owned in worker_part and owned != "security":
            problems.append(FieldProblem(owned, "set by the operator; leave it out"))
    if worker_part.get(PER_POD) is not None:
        problems.append(FieldProblem(PER_POD, PER_POD_REASON))
    worker_part = {k: v for k, v in worker_part.items() if k not in OPERATOR_OWNED and k != PER_POD}
    worker: ConsumerConfig | None = None
    try:
        worker = SpecConfig.model_validate(worker_part)
    except ValidationError as exc:
        problems.extend(config_error(exc).problems)
    if fleet is not None and worker is not None and worker.group_type == "share":
        problems.extend(_share_problems(fleet))
    if fleet is not None and fleet.security.protocol.startswith("SASL"):
        if fleet.security.sasl_mechanism is None:
            problems.append(FieldProblem("security.sasl_mechanism", "required with SASL"))
        elif fleet.security.sasl_mechanism != "OAUTHBEARER" and not (
            fleet.security.sasl_username and fleet.security.sasl_password_secret
        ):
            problems.append(
                FieldProblem(
                    "security.sasl_password_secret",
                    "sasl_username and sasl_password_secret (a Secret) are required",
                )
            )
    if problems or fleet is None or worker is None:
        raise ConfigError(problems, "ConsumerGroup spec")
    return ParsedSpec(fleet, worker)

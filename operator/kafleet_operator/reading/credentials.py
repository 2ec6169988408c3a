"""A ConsumerGroup's Kafka credentials, read from the Secrets its ``spec.security`` names.

Owns: turning the spec's ``security`` (``KafkaSecurity``: every password a reference to a key
of a Secret in the group's namespace) into the worker's own ``kafleet.config.security.Security``,
with the passwords read through the API, so that the operator's lag reader connects exactly
as the workers do (the workers get the same keys as environment variables); the error that
names a missing Secret or key (``CredentialsError``, for a Degraded condition); and how long a
read Secret is trusted.

KEDA resolves a TriggerAuthentication's Secrets once, when it builds a scaler, and kept using a
rotated password until the scaler was rebuilt (kedacore/keda#563, #7906). Here a Secret is read
again after ``SECRET_TTL_S`` and at once after Kafka refused the credentials (``forget``), so
a rotation is picked up within a minute, or on the next pass when the old password stops
working. The operator may ``get`` Secrets in the namespaces it watches, nothing more: no list,
no watch (it reads only the Secrets a ConsumerGroup names), so it cannot hear of a change and
reading again is how it finds one.

One read per Secret, one resolution per change: a Secret is read once per ``SECRET_TTL_S`` by
the whole process, however many groups name it (``SharedSecrets``, by namespace and name, with
the ``resourceVersion`` read); each group asks that cache at every pass (no read while it is
fresh) and resolves its credentials again only when a Secret it names comes back with another
``resourceVersion`` (or other data, for a reader that gives none). So every group naming a
rotated Secret moves to the new password on the same pass, never half of them a minute later
(two views of one cluster, ``snapshots.Target.key``, meanwhile), and no group uses a Secret
read more than ``SECRET_TTL_S`` ago.

Secret values are never logged and never put in an error, a status or an Event: errors name
the namespace, the Secret, the key and the spec field, not what the key holds.

Does not own connecting to Kafka (``lag_reader.py``) or the pods' environment (``pod_spec.py``).
"""

from __future__ import annotations

import base64
import binascii
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from kubernetes import client as k8s

from kafleet.config.security import Security
from kafleet.errors import KafleetError
from kafleet_operator.policy.spec import KafkaSecurity, SecretKeyRef

SECRET_TTL_S = 60.0
# (namespace, name) -> the Secret's data (base64 values, as the API gives them), None if absent.
SecretReader = Callable[[str, str], Mapping[str, str] | None]
Stamp = tuple[tuple[str, object], ...]  # each Secret a resolution used: (name, its version)
PASSWORDS = {  # Security's field -> KafkaSecurity's reference to it
    "sasl_password": "sasl_password_secret",
    "ssl_key_password": "ssl_key_password_secret",
}


class SecretData(dict[str, str]):
    """A Secret's data as read, with its ``resourceVersion`` (None: not known)."""

    def __init__(self, data: Mapping[str, str], version: str | None) -> None:
        super().__init__(data)
        self.version = version


def _version(data: Mapping[str, str] | None) -> object:
    """What tells one read of a Secret from another: its ``resourceVersion`` where the reader
    gives one, else its data (a reader of tests, say)."""
    if data is None:
        return None
    version = getattr(data, "version", None)
    return version if version is not None else tuple(sorted(data.items()))


class CredentialsError(KafleetError):
    """A Secret the spec names cannot give its key. ``reason`` is the condition's reason."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


def _value(read: SecretReader, namespace: str, field: str, ref: SecretKeyRef) -> str:
    where = f"Secret {namespace}/{ref.name}, key {ref.key!r} (spec.security.{field})"
    data = read(namespace, ref.name)
    if data is None:
        raise CredentialsError("SecretNotFound", f"{where}: the Secret does not exist")
    if ref.key not in data:
        raise CredentialsError("SecretKeyNotFound", f"{where}: the Secret has no such key")
    try:
        value = base64.b64decode(data[ref.key], validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise CredentialsError("SecretKeyInvalid", f"{where}: not UTF-8 text") from None
    if not value:
        raise CredentialsError("SecretKeyEmpty", f"{where}: the value is empty")
    return value


def resolve(security: KafkaSecurity, namespace: str, read: SecretReader) -> Security:
    """The workers' ``Security`` for this spec, passwords read from its Secrets."""
    fields = security.model_dump(exclude=set(PASSWORDS.values()), exclude_none=True)
    for target, source in PASSWORDS.items():
        ref = getattr(security, source)
        if ref is not None:
            fields[target] = _value(read, namespace, source, ref)
    return Security.model_validate(fields)


def secret_reader(api: k8s.ApiClient) -> SecretReader:
    """Reads one Secret with ``get`` (the only verb the operator has on Secrets)."""
    core = k8s.CoreV1Api(api)

    def read(namespace: str, name: str) -> Mapping[str, str] | None:
        try:
            secret = core.read_namespaced_secret(name, namespace)
        except k8s.ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 403:
                raise CredentialsError(
                    "SecretForbidden",
                    f"Secret {namespace}/{name}: the operator may not read it (RBAC: get "
                    "secrets in the watched namespaces)",
                ) from None
            raise CredentialsError(
                "SecretUnreadable", f"Secret {namespace}/{name}: HTTP {exc.status} {exc.reason}"
            ) from None
        data = {k: v if isinstance(v, str) else v.decode() for k, v in (secret.data or {}).items()}
        return SecretData(data, secret.metadata.resource_version if secret.metadata else None)

    return read


class SharedSecrets:
    """The Secrets every group of this process reads, by namespace and name, each read once
    per ``ttl_s`` however many groups name it (a team's one Kafka Secret named by its hundred
    groups is one read a minute, not a hundred), and again at once after ``drop``; kept as
    read (``SecretData``: with its ``resourceVersion``). An absent Secret and errors are not
    kept."""

    def __init__(
        self,
        read: SecretReader,
        ttl_s: float = SECRET_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read, self._ttl_s, self._clock = read, ttl_s, clock
        self._kept: dict[tuple[str, str], tuple[float, Mapping[str, str] | None]] = {}
        self._lock = threading.Lock()
        self.reads = 0  # Secrets read through the API, for the figures

    def __call__(self, namespace: str, name: str) -> Mapping[str, str] | None:
        now = self._clock()
        with self._lock:
            kept = self._kept.get((namespace, name))
        if kept is not None and now - kept[0] < self._ttl_s:
            return kept[1]
        data = self._read(namespace, name)
        with self._lock:
            self.reads += 1
            if data is not None:  # an absent Secret is read again at once: it may be made
                self._kept[(namespace, name)] = (now, data)
            for key in [k for k, (at, _) in self._kept.items() if now - at >= self._ttl_s]:
                del self._kept[key]
        return data

    def drop(self, namespace: str, names: Iterable[str]) -> None:
        with self._lock:
            for name in names:
                self._kept.pop((namespace, name), None)


class Credentials:
    """One ConsumerGroup's resolved credentials. With ``shared`` (the operator's way): its
    Secrets are asked of ``shared`` at every ``get`` (read through the API only when the
    process's copy is older than its TTL) and resolved again only when one comes back changed
    or the spec's references change. Without it: read again after ``ttl_s``. Either way also
    after ``forget`` (which drops its Secrets from ``shared``, so every group naming them
    reads them afresh). Errors are not kept: the next call reads again."""

    def __init__(
        self,
        read: SecretReader,
        ttl_s: float = SECRET_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        shared: SharedSecrets | None = None,
    ) -> None:
        self._read, self._ttl_s, self._clock = read, ttl_s, clock
        self._shared = shared
        self._of: tuple[str, KafkaSecurity] | None = None
        self._security: Security | None = None
        self._read_at = 0.0
        self._stamp: Stamp = ()
        self.resolved = 0  # resolutions, for the figures and the tests

    def get(self, security: KafkaSecurity, namespace: str) -> Security:
        if self._shared is not None:
            return self._get_shared(self._shared, security, namespace)
        now = self._clock()
        fresh = now - self._read_at < self._ttl_s
        if self._security is not None and self._of == (namespace, security) and fresh:
            return self._security
        self._of, self._security = None, None  # an error below keeps nothing
        resolved = resolve(security, namespace, self._read)
        self._of, self._security, self._read_at = (namespace, security), resolved, now
        self.resolved += 1
        return resolved

    def _get_shared(
        self, shared: SharedSecrets, security: KafkaSecurity, namespace: str
    ) -> Security:
        names = sorted(_names(security))
        seen = {name: shared(namespace, name) for name in names}  # a read only when stale
        stamp = tuple((name, _version(seen[name])) for name in names)
        if (
            self._security is not None
            and self._of == (namespace, security)
            and stamp == self._stamp
        ):
            return self._security
        self._of, self._security = None, None  # an error below keeps nothing
        resolved = resolve(security, namespace, lambda _, name: seen[name])
        self._of, self._security, self._stamp = (namespace, security), resolved, stamp
        self.resolved += 1
        return resolved

    def forget(self) -> None:
        """Read the Secrets again next time (Kafka refused what they said)."""
        if self._shared is not None and self._of is not None:
            namespace, security = self._of
            self._shared.drop(namespace, _names(security))
        self._of, self._security = None, None


def _names(security: KafkaSecurity) -> set[str]:
    """The Secrets the spec names."""
    refs = (getattr(security, source) for source in PASSWORDS.values())
    return {ref.name for ref in refs if ref is not None}

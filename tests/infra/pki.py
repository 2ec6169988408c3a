"""The TLS material of the Kubernetes test bed, made with ``openssl``.

Owns: a CA, the apiserver's serving certificate (valid for the loopback address and the
in-cluster names and address of the ``kubernetes`` service, and the real node's bridge gateway,
where pods reach the apiserver) and the service-account signing key pair; the front proxy's CA
and client certificate (CN ``front-proxy-client``), with which the apiserver proxies to
aggregated APIs (``front_proxy``); for the Kafka broker's TLS listener for pods, a CA of its own
and a broker certificate for the address pods dial (``broker``); and KEDA's certificate folder
(``keda``: one pair that both serves and authenticates its gRPC link).
Does not own: where they are used (``k8s.py`` passes them to the control plane's flags,
``kafka.py`` writes the broker's into its listener's properties, ``keda.py`` hands its folder
to KEDA's two processes).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.infra.kafka import POD_GATEWAY, TestbedError

# The control plane's Service range (kube-apiserver's --service-cluster-ip-range): a /16, so
# that a Service per ConsumerGroup fits for thousands of groups.
SERVICE_RANGE = "10.0.0.0/16"
# Its first address: the ``kubernetes`` Service, which in-cluster clients (the operator in a
# pod) dial.
KUBERNETES_SERVICE_IP = "10.0.0.1"
# The front proxy's client certificate's CN, which the apiserver's
# --requestheader-allowed-names names and aggregated API servers accept.
FRONT_PROXY_CLIENT = "front-proxy-client"


def _openssl(*args: str, cwd: Path) -> None:
    if shutil.which("openssl") is None:
        raise TestbedError(
            "'openssl' was not found on PATH; it makes the control plane's certificates "
            "(Debian: apt-get install openssl)"
        )
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise TestbedError(f"openssl {' '.join(args)} failed:\n{done.stderr[-2000:]}")


def _ca(folder: Path, name: str, days: str) -> None:
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        days,
        "-subj",
        f"/CN={name}",
        cwd=folder,
    )


def _signed(folder: Path, name: str, subject: str, extensions: str, days: str) -> None:
    """``<name>.key`` (unencrypted PKCS#8) and ``<name>.crt``, signed by ``ca.crt``."""
    (folder / f"{name}.ext").write_text(extensions)
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.csr",
        "-subj",
        subject,
        cwd=folder,
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        f"{name}.crt",
        "-days",
        days,
        "-extfile",
        f"{name}.ext",
        cwd=folder,
    )


def _alt_names(hosts: tuple[str, ...]) -> str:
    return ",".join(
        f"IP:{h}" if h.replace(".", "").isdigit() or ":" in h else f"DNS:{h}" for h in hosts
    )


def broker(folder: Path, hosts: tuple[str, ...]) -> None:
    """A CA (``ca.crt``: what a client trusts) and the broker's certificate and key
    (``broker.crt``, ``broker.key``) valid for ``hosts`` (IP addresses or DNS names), so a
    client that verifies the broker's name (librdkafka does by default) accepts it."""
    folder.mkdir(parents=True, exist_ok=True)
    _ca(folder, "kafleet-testbed-kafka-ca", "3650")
    names = _alt_names(hosts)
    _signed(
        folder,
        "broker",
        "/CN=kafleet-testbed-broker",
        f"subjectAltName={names}\nextendedKeyUsage=serverAuth\n"
        "keyUsage=digitalSignature,keyEncipherment\n",
        "3650",
    )


def front_proxy(folder: Path) -> None:
    """The front proxy's CA (``ca.crt``: the apiserver's --requestheader-client-ca-file, which
    aggregated API servers read back from ``kube-system/extension-apiserver-authentication``)
    and the client pair the apiserver presents to them (``client.crt``, ``client.key``)."""
    folder.mkdir(parents=True, exist_ok=True)
    _ca(folder, "kafleet-testbed-front-proxy-ca", "3650")
    _signed(
        folder,
        "client",
        f"/CN={FRONT_PROXY_CLIENT}",
        "extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n",
        "3650",
    )


def keda(folder: Path, hosts: tuple[str, ...]) -> None:
    """KEDA's certificate folder: ``ca.crt``, and ``tls.crt`` / ``tls.key`` valid for ``hosts``.
    The operator serves its gRPC with the pair and the adapter dials with the same pair as its
    client certificate (mutual TLS from one folder), so it is good for both uses."""
    folder.mkdir(parents=True, exist_ok=True)
    _ca(folder, "kafleet-testbed-keda-ca", "3650")
    _signed(
        folder,
        "tls",
        "/CN=keda-operator",
        f"subjectAltName={_alt_names(hosts)}\nextendedKeyUsage=serverAuth,clientAuth\n"
        "keyUsage=digitalSignature,keyEncipherment\n",
        "3650",
    )


def make(pki: Path) -> None:
    """A CA, a serving certificate for the apiserver, the service-account key pair, and the
    front proxy's CA and client pair (in ``front-proxy/``)."""
    pki.mkdir(parents=True, exist_ok=True)
    days = "3650"
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        days,
        "-subj",
        "/CN=kafleet-testbed-ca",
        cwd=pki,
    )
    (pki / "serving.ext").write_text(
        f"subjectAltName=IP:127.0.0.1,IP:{KUBERNETES_SERVICE_IP},IP:{POD_GATEWAY},DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc,"
        "DNS:kubernetes.default.svc.cluster.local\n"
        "extendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n"
    )
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "apiserver.key",
        "-out",
        "apiserver.csr",
        "-subj",
        "/CN=kube-apiserver",
        cwd=pki,
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        "apiserver.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "apiserver.crt",
        "-days",
        days,
        "-extfile",
        "serving.ext",
        cwd=pki,
    )
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
    front_proxy(pki / "front-proxy")

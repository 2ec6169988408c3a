"""The TLS material of the Kubernetes test bed, made with ``openssl``.

Owns: a CA, the apiserver's serving certificate (valid for the loopback address and the
in-cluster names and address of the ``kubernetes`` service, and the real node's bridge gateway,
where pods reach the apiserver) and the service-account signing key pair.
Does not own: where they are used (``k8s.py`` passes them to the control plane's flags).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.infra.kafka import POD_GATEWAY, TestbedError

# The first address of the control plane's service range: the ``kubernetes`` Service, which
# in-cluster clients (the operator in a pod) dial.
KUBERNETES_SERVICE_IP = "10.0.0.1"


def _openssl(*args: str, cwd: Path) -> None:
    if shutil.which("openssl") is None:
        raise TestbedError(
            "'openssl' was not found on PATH; it makes the control plane's certificates "
            "(Debian: apt-get install openssl)"
        )
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise TestbedError(f"openssl {' '.join(args)} failed:\n{done.stderr[-2000:]}")


def make(pki: Path) -> None:
    """A CA, a serving certificate for the apiserver, and the service-account key pair."""
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

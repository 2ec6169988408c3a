"""``kafleet operator``: run the operator (the same as ``kopf run -m kafleet_operator.handlers``).

Owns: the command line (which namespaces to watch, the liveness endpoint, the kubeconfig, how
to reach the sidecars, where Kafka's Java client is for share groups' lag) and starting kopf
with the handlers registered. Does not own any behaviour of the handlers (``handlers.py``).
kopf is imported only to run: ``kafleet worker`` builds the same command line and should not
pay for it.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import secrets
import socket
import sys
from typing import TYPE_CHECKING

from kafleet.config.share import CLASSPATH_ENV

if TYPE_CHECKING:
    from kafleet_operator.reconcile.elector import Elector

MAX_SHARDS = 256
IDENTITY = re.compile(r"[a-z0-9]([a-z0-9.-]{0,200}[a-z0-9])?")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="a namespace to watch (repeatable; a glob pattern is allowed); default: all",
    )
    parser.add_argument(
        "--liveness",
        default="http://0.0.0.0:8080/healthz",
        help="kopf's liveness endpoint, for the operator's own probe",
    )
    parser.add_argument(
        "--metrics-address",
        default="0.0.0.0:8081",
        help="where the operator serves its Prometheus /metrics: host:port ([::]:8081 for "
        "IPv6), or off",
    )
    parser.add_argument("--kubeconfig", help="default: in-cluster, else $KUBECONFIG")
    parser.add_argument(
        "--sidecar-url",
        default="http://{pod_ip}:8080",
        help="how to reach a pod's sidecar; {pod_ip} and {pod} are filled in",
    )
    parser.add_argument("--interval-s", type=float, default=5.0, help="how often to observe")
    parser.add_argument(
        "--share-classpath",
        default=os.environ.get(CLASSPATH_ENV) or None,
        help="Kafka's Java client's jars (DIR/* or a ':' list; `kafleet share-jars DIR` fetches "
        "them), with which share groups' lag is read (in a JVM of each cluster's reading "
        f"process: Java 11+ and JPype needed); default: ${CLASSPATH_ENV} (the kafleet-spark "
        "image sets it)",
    )
    parser.add_argument(
        "--shards",
        type=_shard_count,
        default=0,
        help="split the groups into this many shards, each led by one operator pod through a "
        "coordination.k8s.io Lease (kafleet-operator-<i>-of-<n>); the other pods stand by and "
        "take over a shard whose leader is gone; 0: no Leases, this is the only operator",
    )
    parser.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE") or None,
        help="where the shards' Leases are kept; default: $POD_NAMESPACE",
    )
    parser.add_argument(
        "--identity",
        default=None,
        help="this process's name in the Leases; default: $POD_NAME (else the host name) and "
        "a random suffix, new at every start, so a restarted container never takes a Lease of "
        "its previous life for its own (as controller-runtime names its candidates)",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])


def _shard_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number, not {text!r}") from None
    if not 0 <= count <= MAX_SHARDS:
        raise argparse.ArgumentTypeError(f"0 to {MAX_SHARDS}, not {count}")
    return count


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = args.kubeconfig
        # The client read $KUBECONFIG when it was imported (kopf's login and ours use it).
        from kubernetes.config import kube_config

        kube_config.KUBE_CONFIG_DEFAULT_LOCATION = args.kubeconfig
    from kafleet_operator.reconcile import metrics

    try:
        address = metrics.parse_address(args.metrics_address)
        if address is not None:
            metrics.serve(address)
    except (ValueError, OSError) as exc:
        print(f"error: --metrics-address {args.metrics_address}: {exc}", file=sys.stderr)
        return 2
    if args.identity is not None and not IDENTITY.fullmatch(args.identity):
        print(
            f"error: --identity {args.identity!r}: lowercase letters, digits, '-' and '.' "
            "(it names a Lease)",
            file=sys.stderr,
        )
        return 2
    if args.shards and not args.lease_namespace:
        print(
            "error: --shards needs --lease-namespace (or $POD_NAMESPACE): where the Leases are",
            file=sys.stderr,
        )
        return 2
    os.environ["KAFLEET_OPERATOR_SIDECAR_URL"] = args.sidecar_url
    os.environ["KAFLEET_OPERATOR_INTERVAL_S"] = str(args.interval_s)
    os.environ["KAFLEET_OPERATOR_CLUSTERWIDE"] = "0" if args.namespace else "1"
    if args.share_classpath:  # the reading processes (spawned) take it from there
        os.environ[CLASSPATH_ENV] = args.share_classpath
    import kopf

    from kafleet_operator import handlers  # registers the handlers, with the settings above
    from kafleet_operator.reconcile import leadership

    log = logging.getLogger("kafleet.operator")
    log.info(
        "watching %s every %g s; metrics on %s",
        args.namespace or "all namespaces",
        handlers.INTERVAL_S,
        args.metrics_address,
    )
    if args.shards:
        chosen = _elector(args)
        leadership.start(chosen, chosen.timing.retry_s)
    try:
        kopf.run(
            standalone=True,
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            liveness_endpoint=args.liveness,
        )
    finally:
        leadership.stop()
    return 0


def _elector(args: argparse.Namespace) -> Elector:
    """The Lease edge of this pod, started before kopf hands over any group."""
    from kubernetes import client as k8s

    from kafleet_operator.reconcile import elector, kube

    api = k8s.CoordinationV1Api(kube.client())
    if args.identity is None:
        args.identity = (
            f"{os.environ.get('POD_NAME') or socket.gethostname()}-{secrets.token_hex(4)}"
        )
    logging.getLogger("kafleet.operator").info(
        "%s: %d shards, Leases in %s", args.identity, args.shards, args.lease_namespace
    )
    return elector.Elector(args.identity, args.lease_namespace, args.shards, api)

"""The operator's calls to the API server give up: a connection that is accepted and never
answered (a half-open connection, a stuck proxy) raises after the read timeout instead of
holding a thread of kopf's pool, and the group's tuning lock, for ever (review of issue 21:
the client's own default is no timeout)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
import urllib3
from kubernetes import client as k8s

from kafleet_operator.reconcile import kube


@pytest.fixture
def silent_server() -> Iterator[str]:
    """An address that accepts connections and never says a word."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_call_to_a_server_that_never_answers_times_out(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube, "REQUEST_TIMEOUT_S", (1.0, 1.0))
    configuration = k8s.Configuration(host=silent_server)
    api = k8s.CoreV1Api(kube.TimedApiClient(configuration))
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            api.list_namespaced_pod("shop")
        except (urllib3.exceptions.HTTPError, k8s.ApiException, OSError) as exc:
            outcome.append(exc)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(15)  # far beyond the 1 s read timeout: a call that hangs is still here

    assert not worker.is_alive(), "the call still waits for an answer that never comes"
    assert isinstance(
        outcome[0], urllib3.exceptions.ReadTimeoutError | urllib3.exceptions.MaxRetryError
    )


def test_a_timeout_given_by_the_caller_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []
    monkeypatch.setattr(
        k8s.ApiClient, "call_api", lambda self, *a, **kw: seen.append(kw["_request_timeout"])
    )

    kube.TimedApiClient(k8s.Configuration()).call_api("GET", "/", _request_timeout=(1, 2))
    kube.TimedApiClient(k8s.Configuration()).call_api("GET", "/")

    assert seen == [(1, 2), kube.REQUEST_TIMEOUT_S]

"""When the operator applies a ConsumerGroup's objects again after the API server refused
them: never for objects the server judged wrong (an edit brings a new attempt), with backoff
for server failures, and with the longest backoff, not never, when the operator may not act
(an RBAC grant may arrive later) or the namespace is being deleted."""

from __future__ import annotations

import pytest

from kafleet_operator.policy.apply_retry import APPLY_BACKOFF_S, apply_retry_delay

FIRST, MOST = APPLY_BACKOFF_S


@pytest.mark.parametrize("status", [400, 422])
def test_objects_the_server_judged_wrong_wait_for_an_edit(status: int) -> None:
    assert apply_retry_delay(status, 0) is None


@pytest.mark.parametrize("status", [401, 403, 404])
def test_missing_permissions_or_a_namespace_going_are_retried_at_the_longest_backoff(
    status: int,
) -> None:
    assert apply_retry_delay(status, 0) == MOST


@pytest.mark.parametrize("status", [408, 409, 429, 500, 503])
def test_server_failures_and_conflicts_are_retried_with_a_doubling_backoff(status: int) -> None:
    assert [apply_retry_delay(status, retry) for retry in range(6)] == [
        min(MOST, FIRST * 2**retry) for retry in range(6)
    ]

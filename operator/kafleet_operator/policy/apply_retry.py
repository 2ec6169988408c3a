"""When to apply a ConsumerGroup's objects again after the API server refused them.

Owns: the delay, as a pure function of the server's status code and the attempt: none (wait
for an edit of the spec, which runs the reconcile again at once) when the server judged the
objects wrong, the longest backoff when the operator may not act (401, 403: an RBAC grant may
come later) or the namespace is going (404), else backoff from the first delay. Does not own
recording the refusal or retrying (``reconcile/applying.py``, through kopf).
"""

from __future__ import annotations

# A failed apply is retried after this many seconds, doubling up to the last.
APPLY_BACKOFF_S = (5.0, 60.0)


def apply_retry_delay(status_code: int, retry: int) -> float | None:
    """Seconds until the next apply after a refusal with ``status_code`` on attempt ``retry``
    (0 for the first), or None to wait for an edit."""
    first, most = APPLY_BACKOFF_S
    if status_code in (401, 403, 404):
        return float(most)
    if 400 <= status_code < 500 and status_code not in (408, 409, 429):
        return None
    return float(min(most, first * 2**retry))

"""What needs no server: keys, backoff, what is retried, request bodies, outcomes."""

from __future__ import annotations

import time
import uuid

from command_ledger import Ambiguous, Command, InFlight, RetryPolicy, State, Submission, uuid7
from command_ledger.client import RETRYABLE, retry_after


def test_a_key_is_a_uuidv7_in_time_order():
    keys = [uuid7() for _ in range(50)]
    for k in keys:
        u = uuid.UUID(k)
        assert u.version == 7 and u.variant == uuid.RFC_4122
        assert abs(int(k.replace("-", "")[:12], 16) - time.time() * 1000) < 60_000
    assert len(set(keys)) == 50


def test_backoff_is_jittered_within_its_exponential_bound():
    policy = RetryPolicy()
    for attempt in range(1, 30):
        bound = min(policy.max_delay, policy.base_delay * 2 ** min(attempt - 1, 20))
        assert all(0 <= policy.backoff(attempt) <= bound for _ in range(50))
    assert len({policy.backoff(5) for _ in range(20)}) > 1


def test_only_transient_statuses_are_retried():
    assert RETRYABLE == {429, 500, 502, 503, 504}
    assert not RETRYABLE & {200, 202, 400, 401, 403, 404, 405, 408, 409, 413, 415, 422}


def test_retry_after_takes_seconds_and_dates():
    assert retry_after("3") == 3.0
    assert retry_after(None) is None and retry_after("soon") is None
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= retry_after(date) <= 31


def test_a_submission_body_has_only_what_the_api_takes():
    s = Submission("refund", "payments", {"amount": "12.00 USD"}, key="k", run_id="r1", generation=3)
    assert s.body() == {"kind": "refund", "authority": {"id": "payments", "generation": 3},
                        "args": {"amount": "12.00 USD"}, "run_id": "r1"}


def test_ambiguous_is_an_outcome_of_its_own():
    raw = {"id": "0193aa00-0000-7000-8000-000000000001", "kind": "refund", "state": "ambiguous",
           "authority": {"id": "payments", "generation": 1, "pinned": False}, "idempotency_key": "k",
           "args": {}, "error": {"reason": "timeout"}, "request_digest": "d",
           "created_at": "2026-12-01T00:00:00.123456789Z", "updated_at": "2026-12-01T00:00:00Z"}
    assert Command.from_json(raw).outcome == Ambiguous({"reason": "timeout"})
    assert Command.from_json(dict(raw, state="effect_started")).outcome == InFlight(State.EFFECT_STARTED)


def test_an_attempt_the_ledger_made_says_which_it_is():
    from command_ledger.types import Invoked

    raw = {"id": "0193aa00-0000-7000-8000-000000000003", "kind": "refund", "state": "applied",
           "authority": {"id": "payments", "generation": 1, "pinned": False}, "idempotency_key": "k",
           "args": {}, "request_digest": "d", "retry_of": "0193aa00-0000-7000-8000-000000000001",
           "attempt": 3, "created_at": "2026-12-01T00:00:00Z", "updated_at": "2026-12-01T00:00:00Z"}
    assert Command.from_json(raw).attempt == 3
    del raw["attempt"]
    assert Command.from_json(raw).attempt == 1
    invoked = Invoked.from_json({"outcome": "executed", "fingerprint": "f", "state": "applied", "attempts": 3})
    assert invoked.attempts == 3
    assert invoked.to_dict()["attempts"] == 3
    assert Invoked.from_json({"outcome": "executed", "fingerprint": "f"}).attempts == 1


def test_a_server_time_keeps_its_zone_whatever_its_fraction():
    from datetime import timedelta, timezone

    from command_ledger.types import _time

    assert _time("2026-12-03T08:01:31.123456789Z").tzinfo is not None
    assert _time("2026-12-03T08:01:31.123456789Z").utcoffset() == timedelta(0)
    assert _time("2026-12-03T08:01:31Z").tzinfo is not None
    assert _time("2026-12-03T08:01:31.5+02:00").utcoffset() == timedelta(hours=2)
    assert _time("2026-12-03T08:01:31.5+02:00") == _time("2026-12-03T06:01:31.5Z")
    assert _time("2026-12-03T06:01:31.5Z").astimezone(timezone.utc).microsecond == 500000

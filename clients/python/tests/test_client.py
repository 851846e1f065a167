"""The client against a live ledger, with and without a proxy that loses answers."""

from __future__ import annotations

import json
import socket
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from command_ledger import (
    Ambiguous,
    Applied,
    Cancelled,
    Client,
    ConflictError,
    Disposition,
    GaveUp,
    InFlight,
    KeyConflictError,
    ProblemError,
    ProblemType,
    Refused,
    RetryPolicy,
    State,
    Submission,
    TransportError,
)
from conftest import FAST, sink_traceparents
from proxy import Proxy, Rule


def refund_args(who: str) -> dict:
    return {"to": f"{who}-{uuid.uuid4().hex[:8]}@example.com", "amount": "4.00 USD"}


def test_a_lost_answer_is_resent_under_the_same_key_and_comes_back_as_a_replay(api_url, token, ledger):
    proxy = Proxy(api_url).add(Rule("POST", "/v1/commands", "drop"))
    client = Client(proxy.url, token, FAST)
    submitted = client.submit("refund", "payments", refund_args("lost"), wait=10)

    sent = proxy.requests("POST", "/v1/commands")
    assert [s.action for s in sent] == ["drop", "forward"]
    assert sent[0].headers["idempotency-key"] == sent[1].headers["idempotency-key"] == submitted.key
    assert sent[0].body == sent[1].body
    assert submitted.command.disposition is Disposition.REPLAY, "the server had committed the first"
    assert isinstance(submitted.command.outcome, Applied)
    assert ledger.count() == 1, "one command, however many attempts"

    # Later, the same logical command resubmitted under its stored key: the one command again.
    again = client.submit("refund", "payments", submitted.command.args, key=submitted.key)
    assert (again.command.id, again.command.disposition) == (submitted.command.id, Disposition.REPLAY)
    assert ledger.count() == 1


def test_a_callers_trace_context_reaches_the_provider_with_the_command(api_url, token):
    parent = f"00-{uuid.uuid4().hex}-00f067aa0ba902b7-01"
    client = Client(api_url, token, FAST).with_trace_context(parent, "congo=1")
    submitted = client.submit("refund", "payments", refund_args("traced"), wait=10)
    assert isinstance(submitted.command.outcome, Applied)
    assert sink_traceparents(submitted.command.id) == [parent]


def test_retry_after_is_honoured_before_the_next_attempt(api_url, token, ledger):
    proxy = Proxy(api_url).add(Rule("POST", "/v1/commands", "status", status=429, retry_after="2"))
    client = Client(proxy.url, token, FAST)
    started = time.monotonic()
    submitted = client.submit("steer", "agent-7", {"direction": "left"}, key=f"steer-{uuid.uuid4()}")
    elapsed = time.monotonic() - started

    assert elapsed >= 2.0, f"retried after {elapsed:.2f} s, before Retry-After: 2"
    assert [s.action for s in proxy.requests("POST", "/v1/commands")] == ["status", "forward"]
    assert submitted.command.disposition is Disposition.NEW
    assert ledger.count() == 1


def test_5xx_is_retried_and_a_client_gives_up_within_its_bounds_keeping_the_key(api_url, token, ledger):
    proxy = Proxy(api_url).add(Rule("POST", "/v1/commands", "status", status=503, times=100))
    policy = RetryPolicy(max_attempts=3, max_elapsed=10, base_delay=0.01, max_delay=0.05, attempt_timeout=5)
    client = Client(proxy.url, token, policy)
    with pytest.raises(GaveUp) as e:
        client.submit("steer", "agent-7", {"direction": "up"})
    assert e.value.attempts == 3
    keys = {s.headers["idempotency-key"] for s in proxy.requests("POST", "/v1/commands")}
    assert keys == {e.value.key}, "every attempt under the one key, handed back to resubmit with"
    assert ledger.count() == 0


def test_an_unreachable_ledger_is_a_transport_failure_given_up_on(token):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()
    policy = RetryPolicy(max_attempts=2, max_elapsed=5, base_delay=0.01, max_delay=0.02, attempt_timeout=2)
    with pytest.raises(GaveUp) as e:
        Client(dead, token, policy).submit("steer", "agent-7", {"direction": "down"})
    assert isinstance(e.value.last, TransportError)
    assert e.value.key


def test_a_key_conflict_is_a_typed_error_sent_once(api_url, token, ledger):
    client = Client(api_url, token, FAST)
    key = f"k-{uuid.uuid4()}"
    client.submit("steer", "agent-7", {"direction": "left"}, key=key)
    proxy = Proxy(api_url)
    with pytest.raises(KeyConflictError) as e:
        Client(proxy.url, token, FAST).submit("steer", "agent-7", {"direction": "right"}, key=key)
    assert e.value.status == 422 and e.value.type is ProblemType.IDEMPOTENCY_KEY_CONFLICT
    assert len(proxy.requests("POST", "/v1/commands")) == 1, "a 422 is a decision, never retried"
    assert ledger.count() == 1


def test_get_wait_cancel_history_and_a_409(client):
    submitted = client.submit("steer", "agent-7", {"direction": "left"})
    command = submitted.command
    assert command.state is State.PENDING and submitted.key == command.idempotency_key
    assert client.get(command.id).id == command.id
    waited = client.wait(command.id, 1)  # no custodian serves agent-7: still pending
    assert isinstance(waited.outcome, InFlight)
    cancelled = client.cancel(command.id)
    assert isinstance(cancelled.outcome, Cancelled)
    assert client.cancel(command.id).state is State.CANCELLED, "repeating a cancel is harmless"
    assert [(h.from_, h.to) for h in client.history(command.id)] == [(None, "pending"), ("pending", "cancelled")]

    applied = client.submit("refund", "payments", refund_args("late"), wait=10).command
    assert isinstance(applied.outcome, Applied) and applied.outcome.result["refund_id"]
    with pytest.raises(ConflictError) as e:
        client.cancel(applied.id)
    assert e.value.status == 409 and e.value.type is ProblemType.CANCEL_TOO_LATE


def test_a_command_for_later_is_recorded_now_shown_scheduled_and_cancellable(client):
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    submitted = client.submit("steer", "agent-7", {"direction": "up"}, not_before=later, priority=-3)
    command = submitted.command
    assert command.state is State.PENDING and command.scheduled
    assert abs((command.not_before - later).total_seconds()) < 0.001
    assert command.priority == -3
    assert client.get(command.id).scheduled
    assert isinstance(client.cancel(command.id).outcome, Cancelled)
    with pytest.raises(ProblemError) as e:
        client.submit("steer", "agent-7", {"direction": "up"}, priority=5)
    assert e.value.status == 400 and "max_priority" in e.value.detail


def test_ambiguous_is_an_outcome_not_an_exception(client):
    args = dict(refund_args("hang"), mode="hang")  # the demo sink applies it and never answers
    command = client.submit("refund", "payments", args, wait=15).command
    assert command.state is State.AMBIGUOUS
    match command.outcome:
        case Ambiguous(error):
            assert error["reason"] == "timeout"
        case other:
            pytest.fail(f"not ambiguous: {other}")


def test_a_batch_answers_each_item_on_its_own(client, ledger):
    items = [
        Submission("steer", "agent-7", {"direction": "left"}, key=f"b1-{uuid.uuid4()}"),
        Submission("Bad Kind", "agent-7", {}, key=f"b2-{uuid.uuid4()}"),
        Submission("steer", "agent-7", {"direction": "right"}),
    ]
    answers = client.submit_batch(items)
    assert [a.key for a in answers][:2] == [items[0].key, items[1].key] and answers[2].key
    assert answers[0].command.disposition is Disposition.NEW
    assert isinstance(answers[1], Refused) and answers[1].status == 400
    assert answers[1].problem_type is ProblemType.INVALID_BODY
    assert answers[2].command.state is State.PENDING
    again = client.submit_batch([Submission(s.kind, s.authority, s.args, key=a.key) for s, a in zip(items, answers)])
    assert [getattr(getattr(a, "command", None), "disposition", None) for a in again] == [Disposition.REPLAY, None, Disposition.REPLAY]
    assert ledger.count() == 2


def test_invoke_explain_and_kinds(client):
    kinds = {k.kind: k for k in client.kinds()}
    assert kinds["refund"].authority == "payments"
    who = f"inv-{uuid.uuid4().hex[:8]}@example.com"
    explained = client.explain("refund", {"to": who.upper(), "amount": "$3"})
    assert explained.canonical["args"]["to"] == who
    invoked = client.invoke("refund", {"to": who, "amount": "3.00 USD"}, run_id="run-1")
    assert (invoked.outcome, invoked.state) == ("executed", State.APPLIED)
    assert invoked.fingerprint == explained.fingerprint
    assert client.invoke("refund", {"amount": "3 USD", "to": who}, run_id="run-1").outcome == "replay"


def test_a_problem_keeps_its_whole_document(client):
    with pytest.raises(ProblemError) as e:
        client.get(str(uuid.uuid4()))
    assert e.value.status == 404 and e.value.type is ProblemType.NOT_FOUND
    assert json.loads(json.dumps(e.value.body))["status"] == 404

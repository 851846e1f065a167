"""The device outbox: written down before it is sent; a device killed at any
step of a flush (SIGKILL, as a power loss) resends on its next flush, and
each command is in the ledger exactly once."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from command_ledger import Client, Outbox, RetryPolicy
from conftest import FAST

HERE = os.path.dirname(__file__)


def flush_in_a_process(api_url, token, db, batch, crash=None):
    env = dict(os.environ, COMMAND_LEDGER_URL=api_url, COMMAND_LEDGER_TOKEN=token)
    args = [sys.executable, os.path.join(HERE, "outbox_worker.py"), str(db), str(batch)]
    return subprocess.run(args + ([crash] if crash else []), env=env, capture_output=True, text=True, timeout=120)


def killed(out) -> bool:
    return out.returncode == -signal.SIGKILL


def test_a_device_killed_at_every_step_of_a_flush_ends_with_each_command_once(api_url, token, ledger, tmp_path):
    db = tmp_path / "outbox.sqlite"
    with Outbox(str(db)) as outbox:
        keys = [outbox.enqueue("steer", "agent-7", {"direction": d}) for d in ("left", "right", "up")]
    assert ledger.count() == 0, "recorded on the device, nothing sent"

    # Power lost before the first send: nothing reached the ledger.
    assert killed(flush_in_a_process(api_url, token, db, 1, "before_send"))
    assert ledger.count() == 0
    # Lost after the server committed the first and answered, before the answer was written down.
    assert killed(flush_in_a_process(api_url, token, db, 1, "after_answer"))
    assert ledger.count() == 1
    # Lost right after writing the first answer down: the first is resent (a replay) and recorded.
    assert killed(flush_in_a_process(api_url, token, db, 1, "after_record"))
    assert ledger.count() == 1
    # Power back: everything left goes, once.
    out = flush_in_a_process(api_url, token, db, 1)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"answered": 2, "refused": 0, "pending": 0, "stopped_by": None}
    assert ledger.count() == 3, "each command exactly once"

    with Outbox(str(db)) as outbox:
        entries = outbox.entries()
        assert [e.key for e in entries] == keys
        assert [e.answer["disposition"] for e in entries] == ["replay", "new", "new"]
        assert outbox.flush(Client(api_url, token, FAST)).__dict__ == {
            "answered": 0, "refused": 0, "pending": 0, "stopped_by": None}
    assert ledger.count() == 3


def test_a_device_killed_after_a_whole_batch_was_answered_resends_it_as_replays(api_url, token, ledger, tmp_path):
    db = tmp_path / "outbox.sqlite"
    with Outbox(str(db)) as outbox:
        for d in ("left", "right", "up"):
            outbox.enqueue("steer", "agent-7", {"direction": d})
    assert killed(flush_in_a_process(api_url, token, db, 500, "after_answer"))
    assert ledger.count() == 3, "the batch committed"
    out = flush_in_a_process(api_url, token, db, 500)
    assert json.loads(out.stdout)["answered"] == 3
    assert ledger.count() == 3
    with Outbox(str(db)) as outbox:
        assert [e.answer["disposition"] for e in outbox.entries()] == ["replay"] * 3


def test_a_batch_flush_records_a_refused_item_as_its_answer_and_never_resends_it(client, ledger, tmp_path):
    taken = f"taken-{uuid.uuid4()}"
    client.submit("steer", "agent-7", {"direction": "left"}, key=taken)
    with Outbox(str(tmp_path / "outbox.sqlite")) as outbox:
        for step in range(5):
            outbox.enqueue("steer", "agent-7", {"step": step})
        conflict = outbox.enqueue("steer", "agent-7", {"direction": "right"}, key=taken)
        invalid = outbox.enqueue("Bad Kind", "agent-7", {})
        report = outbox.flush(client)
        assert (report.answered, report.refused, report.pending) == (5, 2, 0)
        assert ledger.count() == 6
        assert outbox.answer(conflict)["refused"]["type"] == "/problems/idempotency-key-conflict"
        assert outbox.answer(invalid)["refused"]["type"] == "/problems/invalid-body"
        report = outbox.flush(client)
        assert (report.answered, report.refused) == (0, 0), "answers, refusals included, are final"
        assert ledger.count() == 6


def test_an_outbox_entry_keeps_its_schedule_and_priority_to_the_server(client, tmp_path):
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    with Outbox(str(tmp_path / "outbox.sqlite")) as outbox:
        key = outbox.enqueue("steer", "agent-7", {"direction": "down"}, not_before=later, priority=-2)
        assert outbox.flush(client).answered == 1
        answer = outbox.answer(key)
        assert (answer["scheduled"], answer["priority"]) == (True, -2)
        assert abs((datetime.fromisoformat(answer["not_before"].replace("Z", "+00:00")) - later).total_seconds()) < 0.001
        client.cancel(answer["id"])


def test_with_the_network_down_a_flush_keeps_everything_for_the_next_one(api_url, token, ledger, tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()
    offline = Client(dead, token, RetryPolicy(max_attempts=2, max_elapsed=2, base_delay=0.01, max_delay=0.05, attempt_timeout=2))
    with Outbox(str(tmp_path / "outbox.sqlite")) as outbox:
        for d in ("left", "right"):
            outbox.enqueue("steer", "agent-7", {"direction": d})
        report = outbox.flush(offline)
        assert (report.answered, report.pending) == (0, 2) and report.stopped_by
        assert ledger.count() == 0
        report = outbox.flush(Client(api_url, token, FAST))
        assert (report.answered, report.refused, report.pending) == (2, 0, 0)
        assert ledger.count() == 2
        with pytest.raises(Exception):
            outbox.enqueue("steer", "agent-7", {}, key=outbox.entries()[0].key)


def test_the_outbox_is_durable_before_it_answers(tmp_path):
    with Outbox(str(tmp_path / "outbox.sqlite")) as outbox:
        assert outbox._db.execute("pragma journal_mode").fetchone()[0] == "wal"
        assert outbox._db.execute("pragma synchronous").fetchone()[0] == 2  # FULL
        assert not outbox._db.in_transaction, "an enqueue is committed when it returns"
        outbox.enqueue("steer", "agent-7", {"direction": "left"})
        assert not outbox._db.in_transaction

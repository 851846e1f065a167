"""A device's durable outbox: record before dispatch, extended to the edge.

`Outbox.enqueue` writes a command, with its idempotency key, into a local
SQLite file and makes it durable (WAL, `synchronous = FULL`) before anything
is sent. `Outbox.flush` sends what is still unanswered, in the order it was
recorded, each under its own key, in batches of up to 500
(`POST /v1/commands/batch`: one request and one commit on the server per
batch), and writes each answer down. A device that loses power or network
at any point (before the send, after the server committed but before the
answer arrived, before the answer was written down) resends on its next
flush under the same keys, so each command ends in the ledger exactly once.

Definite refusals (a key conflict, invalid arguments) are answers too:
recorded, never resent. A flush stops at the first batch it could not get
an answer for (the network is down), leaving it and everything after it for
the next flush. The file's table is the one the Rust client's outbox and
`command-ledger outbox` use, so any of them can flush it.
"""

from __future__ import annotations

import enum
import json
import sqlite3
import threading
from datetime import datetime
from dataclasses import dataclass
from typing import Callable, Optional

from .client import Client, uuid7
from .errors import LedgerError
from .types import Refused, Submission

# Most commands one flush request carries (the server's batch limit).
BATCH = 500

_SCHEMA = """
create table if not exists outbox (
    seq integer primary key autoincrement,
    key text not null unique,
    kind text not null,
    authority text not null,
    args text not null,
    recorded_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    answer text,
    answered_at text,
    not_before text,
    priority integer
)
"""


class FlushStep(str, enum.Enum):
    """Steps of a flush, for callers that observe them (and tests that kill the process at each)."""

    BEFORE_SEND = "before_send"  # about to send this command
    AFTER_ANSWER = "after_answer"  # the server answered; not yet written down
    AFTER_RECORD = "after_record"  # the answer is written down


@dataclass(frozen=True)
class Entry:
    key: str
    kind: str
    authority: str
    args: dict
    # The server's answer (the command, `{"disposition": "held", "hold": ...}`
    # or `{"refused": problem}`), once known.
    answer: Optional[dict]
    # Not to be claimed before this instant (ISO 8601, as recorded), and the priority asked for.
    not_before: Optional[str] = None
    priority: Optional[int] = None


@dataclass
class FlushReport:
    answered: int = 0  # recorded, replayed or held during this flush
    refused: int = 0  # refused with a problem (recorded as the answer, not resent)
    pending: int = 0  # still waiting for an answer (the flush stopped at the first)
    stopped_by: Optional[str] = None  # why the flush stopped early, if it did


class Outbox:
    """A durable outbox in one SQLite file."""

    def __init__(self, path: str):
        # Autocommit: every statement is its own durable transaction unless
        # we open one (the answers of a batch are written in one).
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        self._db.execute("pragma journal_mode = wal")
        self._db.execute("pragma synchronous = full")
        self._db.execute(_SCHEMA)
        # Outboxes made before commands had a schedule and a priority get the two columns.
        columns = {row[1] for row in self._db.execute("pragma table_info(outbox)")}
        for column, ty in (("not_before", "text"), ("priority", "integer")):
            if column not in columns:
                self._db.execute(f"alter table outbox add column {column} {ty}")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Outbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def enqueue(
        self,
        kind: str,
        authority: str,
        args: Optional[dict] = None,
        *,
        key: Optional[str] = None,
        not_before: Optional[datetime] = None,
        priority: Optional[int] = None,
    ) -> str:
        """Writes the command down, durably, and returns its key (the one
        given, or a new UUIDv7). Nothing is sent. A key already in the outbox
        raises `sqlite3.IntegrityError`: one key, one entry."""
        key = key or uuid7()
        with self._lock:
            self._db.execute(
                "insert into outbox (key, kind, authority, args, not_before, priority) values (?, ?, ?, ?, ?, ?)",
                (
                    key,
                    kind,
                    authority,
                    json.dumps(args or {}, separators=(",", ":")),
                    not_before.isoformat() if not_before is not None else None,
                    priority,
                ),
            )
        return key

    def entries(self) -> list:
        """Every entry, in the order recorded."""
        with self._lock:
            rows = self._db.execute(
                "select key, kind, authority, args, answer, not_before, priority from outbox order by seq"
            ).fetchall()
        return [
            Entry(k, kind, a, json.loads(args), json.loads(ans) if ans else None, nb, p)
            for k, kind, a, args, ans, nb, p in rows
        ]

    def answer(self, key: str) -> Optional[dict]:
        """The answer recorded for `key`, if any."""
        with self._lock:
            row = self._db.execute("select answer from outbox where key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row and row[0] else None

    def flush(
        self,
        client: Client,
        *,
        batch: int = BATCH,
        observe: Optional[Callable[[FlushStep, str], None]] = None,
    ) -> FlushReport:
        """Sends every unanswered command (see the module's documentation),
        at most `batch` (1 to 500) per request, calling `observe(step, key)`
        at each step of each command."""
        observe = observe or (lambda step, key: None)
        batch = max(1, min(batch, BATCH))
        report = FlushReport()
        unanswered = [e for e in self.entries() if e.answer is None]
        sent = 0
        for start in range(0, len(unanswered), batch):
            chunk = unanswered[start : start + batch]
            for e in chunk:
                observe(FlushStep.BEFORE_SEND, e.key)
            try:
                answers = client.submit_batch(
                    [
                        Submission(
                            e.kind,
                            e.authority,
                            e.args,
                            key=e.key,
                            not_before=datetime.fromisoformat(e.not_before) if e.not_before else None,
                            priority=e.priority,
                        )
                        for e in chunk
                    ]
                )
            except LedgerError as err:
                report.pending = len(unanswered) - sent
                report.stopped_by = str(err)
                return report
            for a in answers:
                observe(FlushStep.AFTER_ANSWER, a.key)
            recorded = []
            for a in answers:
                if isinstance(a, Refused):
                    report.refused += 1
                    recorded.append((json.dumps({"refused": a.problem}), a.key))
                elif a.hold is not None:
                    report.answered += 1
                    recorded.append((json.dumps({"disposition": "held", "hold": a.hold.raw}), a.key))
                else:
                    report.answered += 1
                    recorded.append((json.dumps(a.command.raw), a.key))
            # Every answer of the batch written down in one transaction.
            with self._lock:
                self._db.execute("begin immediate")
                try:
                    self._db.executemany(
                        "update outbox set answer = ?, answered_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
                        " where key = ? and answer is null",
                        recorded,
                    )
                    self._db.execute("commit")
                except BaseException:
                    self._db.execute("rollback")
                    raise
            for a in answers:
                observe(FlushStep.AFTER_RECORD, a.key)
            sent += len(chunk)
        return report

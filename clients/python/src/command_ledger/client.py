"""The ledger's HTTP API, called so that a retry can never make a second command.

Every submission carries an idempotency key, a UUIDv7 made once per logical
command unless you give one, and is returned with it. A request whose
answer is lost (connection reset, timeout) or refused for the moment (429,
500, 502, 503, 504) is sent again with the same key and the same body,
after an exponentially growing, fully jittered pause (at least the server's
`Retry-After`), bounded in count and in time. Everything else is an answer:
a problem document becomes a `ProblemError` at once.
"""

from __future__ import annotations

import asyncio
import email.utils
import http.client
import json
import os
import random
import socket
import time
import urllib.parse
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Optional, Sequence, Union

from .errors import GaveUp, LedgerError, TransientError, TransportError, UnexpectedAnswer, problem
from .types import (
    Command,
    Disposition,
    Explanation,
    HistoryEntry,
    Hold,
    Invoked,
    ItemAnswer,
    Kind,
    Refused,
    Submission,
    Submitted,
    _enum,
)

# The longest wait the server grants by default; longer waits take several requests.
SERVER_WAIT_CAP = 60
RETRYABLE = frozenset({429, 500, 502, 503, 504})


def uuid7() -> str:
    """A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then random bits."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version
    value |= (rand >> 68) << 64  # 12 bits rand_a
    value |= 0b10 << 62  # variant
    value |= rand & ((1 << 62) - 1)  # 62 bits rand_b
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@dataclass(frozen=True)
class RetryPolicy:
    """How retries are bounded and spaced (seconds)."""

    # Most attempts of one request, the first included.
    max_attempts: int = 8
    # No attempt starts after this long since the first.
    max_elapsed: float = 60.0
    # The pause before the second attempt is drawn from [0, base_delay]; the
    # bound doubles with each attempt (full jitter) up to max_delay.
    base_delay: float = 0.1
    max_delay: float = 10.0
    # How long one attempt may take, beyond any wait it asks the server for.
    attempt_timeout: float = 30.0

    def backoff(self, attempt: int) -> float:
        bound = min(self.max_delay, self.base_delay * (2 ** min(attempt - 1, 20)))
        return random.uniform(0, bound)


def retry_after(value: Optional[str]) -> Optional[float]:
    """`Retry-After` as seconds: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass
class _Response:
    status: int
    headers: dict
    body: bytes


class Client:
    """A client of one ledger API, with one bearer token. Thread-safe: each
    request opens its own connection."""

    def __init__(self, base: str, token: str, retry: RetryPolicy = RetryPolicy()):
        url = urllib.parse.urlsplit(base.rstrip("/"))
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) URL: {base!r}")
        self.base = base.rstrip("/")
        self.token = token
        self.retry = retry
        self._url = url
        self._trace: dict = {}

    def with_token(self, token: str) -> "Client":
        """The same API as another principal."""
        other = Client(self.base, token, self.retry)
        other._trace = dict(self._trace)
        return other

    def with_trace_context(self, traceparent: str, tracestate: Optional[str] = None) -> "Client":
        """The same API, each request sent in the caller's W3C trace
        (`traceparent`, and `tracestate`), for example its OpenTelemetry
        span's: the ledger keeps it with the commands it records and carries
        it on to the provider. A value that does not conform is ignored by
        the ledger, as the specification says."""
        other = Client(self.base, self.token, self.retry)
        other._trace = {"traceparent": traceparent}
        if tracestate:
            other._trace["tracestate"] = tracestate
        return other

    # -- commands -------------------------------------------------------------

    def submit(
        self,
        kind: str,
        authority: str,
        args: Optional[dict] = None,
        *,
        key: Optional[str] = None,
        run_id: Optional[str] = None,
        deadline: Optional[datetime] = None,
        generation: Optional[int] = None,
        not_before: Optional[datetime] = None,
        priority: Optional[int] = None,
        wait: float = 0,
    ) -> Submitted:
        """Records a command (`POST /v1/commands`) and returns it with its key.

        With `wait`, the server answers once the command is terminal, or
        after that many seconds (at most 60) with its state then."""
        s = Submission(kind, authority, args or {}, key, run_id, deadline, generation, not_before, priority)
        return self.submit_one(s, wait=wait)

    def submit_one(self, s: Submission, *, wait: float = 0) -> Submitted:
        # The key is made once, here, before the first attempt: every retry
        # below carries it, so no retry can make a second command.
        key = s.key or uuid7()
        wait_s = int(min(max(wait, 0), SERVER_WAIT_CAP))
        headers = {"Idempotency-Key": key}
        if wait_s:
            headers["Prefer"] = f"wait={wait_s}"
        try:
            r = self._send("POST", "/v1/commands", s.body(), headers, wait_s)
        except GaveUp as e:
            e.key = key
            raise
        j = _decode(r)
        if j.get("disposition") == "held":
            return Submitted(key=key, hold=Hold.from_json(j["hold"]))
        return Submitted(key=key, command=Command.from_json(j))

    def submit_batch(self, batch: Sequence[Submission]) -> list:
        """Records up to 500 commands in one request and one commit
        (`POST /v1/commands/batch`). The whole batch is retried safely (the
        same keys and bodies: a batch whose answer was lost comes back as
        replays). One `Submitted` or `Refused` per submission, in order; a
        refused item never fails the batch."""
        keys = [s.key or uuid7() for s in batch]
        items = [dict(s.body(), idempotency_key=k) for s, k in zip(batch, keys)]
        r = self._send("POST", "/v1/commands/batch", {"items": items}, {}, 0)
        answers = _decode(r).get("items")
        if not isinstance(answers, list) or len(answers) != len(keys):
            raise UnexpectedAnswer(r.status, f"a batch of {len(keys)} answered with {answers!r}")
        return [_item(a, k) for a, k in zip(answers, keys)]

    def get(self, command_id: str) -> Command:
        return Command.from_json(_decode(self._send("GET", f"/v1/commands/{command_id}", None, {}, 0)))

    def wait(self, command_id: str, timeout: float) -> Command:
        """The command once it is terminal, or as it is when `timeout` seconds
        have passed. The server wakes the request when it finishes: no polling."""
        until = time.monotonic() + timeout
        while True:
            left = int(min(max(until - time.monotonic(), 0), SERVER_WAIT_CAP))
            r = self._send("GET", f"/v1/commands/{command_id}?wait={left}", None, {}, left)
            command = Command.from_json(_decode(r))
            if command.state.is_terminal or time.monotonic() + 1 > until:
                return command

    def cancel(self, command_id: str) -> Command:
        """Cancels a command before its effect starts (`ConflictError`,
        `cancel-too-late`, after). Repeating it is harmless."""
        return Command.from_json(_decode(self._send("POST", f"/v1/commands/{command_id}/cancel", None, {}, 0)))

    def history(self, command_id: str) -> list:
        """Every state change of a command, oldest first."""
        j = _decode(self._send("GET", f"/v1/commands/{command_id}/history", None, {}, 0))
        return [HistoryEntry.from_json(e) for e in j["entries"]]

    def kinds(self) -> list:
        """The kinds the ledger knows (`GET /v1/kinds`)."""
        return [Kind.from_json(k) for k in _decode(self._send("GET", "/v1/kinds", None, {}, 0))["items"]]

    # -- agents ---------------------------------------------------------------

    def invoke(
        self,
        tool: str,
        args: Optional[dict] = None,
        *,
        run_id: Optional[str] = None,
        authority: Optional[str] = None,
        deadline: Optional[datetime] = None,
        not_before: Optional[datetime] = None,
        priority: Optional[int] = None,
        wait: float = 30,
    ) -> Invoked:
        """Records an agent's tool call as an intent (`POST /v1/invoke`) and
        waits for its outcome. Copies of one call (retried, spelled
        differently, sent by another worker) make one execution; the same
        `run_id` and arguments later get the same answer (`replay`)."""
        body: dict = {"tool": tool, "args": args or {}}
        if run_id is not None:
            body["runId"] = run_id
        if authority is not None:
            body["authority"] = authority
        if deadline is not None:
            body["deadline"] = deadline.isoformat()
        if not_before is not None:
            body["notBefore"] = not_before.isoformat()
        if priority is not None:
            body["priority"] = priority
        wait_s = int(min(max(wait, 0), SERVER_WAIT_CAP))
        r = self._send("POST", "/v1/invoke", body, {"Prefer": f"wait={wait_s}"}, wait_s)
        return Invoked.from_json(_decode(r))

    def explain(
        self,
        kind: str,
        args: Optional[dict] = None,
        *,
        authority: Optional[str] = None,
        run_id: Optional[str] = None,
    ) -> Explanation:
        """What the ledger would make of a request (canonical form,
        fingerprint, rules, policy); records nothing."""
        body: dict = {"kind": kind, "args": args or {}}
        if authority is not None:
            body["authority"] = authority
        if run_id is not None:
            body["run_id"] = run_id
        return Explanation.from_json(_decode(self._send("POST", "/v1/intents/explain", body, {}, 0)))

    # -- the one place requests are sent and retried --------------------------

    def _send(self, method: str, path: str, body: Any, headers: dict, wait: float) -> _Response:
        payload = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                r = self._attempt(method, path, payload, headers, self.retry.attempt_timeout + wait)
                if r.status not in RETRYABLE:
                    return r
                hint = retry_after(r.headers.get("retry-after"))
                failure: LedgerError = TransientError(r.status, r.body.decode(errors="replace"), hint)
            except (OSError, http.client.HTTPException) as e:
                hint, failure = None, TransportError(f"{type(e).__name__}: {e}")
            pause = max(self.retry.backoff(attempt), hint or 0.0)
            elapsed = time.monotonic() - started
            if attempt >= self.retry.max_attempts or elapsed + pause > self.retry.max_elapsed:
                raise GaveUp(attempt, elapsed, failure)
            time.sleep(pause)

    def _attempt(self, method, path, payload, headers, timeout) -> _Response:
        u = self._url
        conn_cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        conn = conn_cls(u.hostname, u.port, timeout=timeout)
        try:
            h = {"Authorization": f"Bearer {self.token}", "Accept": "application/json", **self._trace, **headers}
            if payload is not None:
                h["Content-Type"] = "application/json"
            conn.request(method, (u.path or "") + path, body=payload, headers=h)
            resp = conn.getresponse()
            data = resp.read()
            return _Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        except socket.timeout as e:
            raise TimeoutError(f"no answer within {timeout:.0f} s") from e
        finally:
            conn.close()


class AsyncClient:
    """The same calls for asyncio code: each runs the blocking `Client` in a
    worker thread (`asyncio.to_thread`), retries and pauses included."""

    def __init__(self, base: str, token: str, retry: RetryPolicy = RetryPolicy()):
        self.sync = Client(base, token, retry)

    def __getattr__(self, name: str) -> Callable:
        method = getattr(self.sync, name)
        if not callable(method) or name.startswith("_"):
            return method

        async def call(*args, **kwargs):
            return await asyncio.to_thread(method, *args, **kwargs)

        return call


def _decode(r: _Response) -> dict:
    text = r.body.decode(errors="replace")
    if r.status >= 400:
        try:
            body = json.loads(text)
        except ValueError:
            body = {"detail": text}
        if not isinstance(body, dict):
            body = {"detail": text}
        raise problem(r.status, body)
    try:
        return json.loads(text)
    except ValueError as e:
        raise UnexpectedAnswer(r.status, f"{e}: {text}") from None


def _item(a: dict, key: str) -> ItemAnswer:
    if a.get("command"):
        return Submitted(key=key, command=Command.from_json(a["command"]))
    if a.get("hold"):
        return Submitted(key=key, hold=Hold.from_json(a["hold"]["hold"]))
    return Refused(
        key=key,
        status=int(a.get("status") or 0),
        disposition=_enum(Disposition, a.get("disposition")),
        problem=a.get("problem") or {},
    )

"""What the API answers, as Python types.

Written by hand from `docs/openapi.json`; `tests/test_contract.py` checks
that every state, disposition, invoke outcome and problem type the contract
names is known here. Every object keeps the JSON it came from in `raw`, so a
field added by a newer server is never lost.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional, Union

Json = Any


class State(str, enum.Enum):
    """A command's state. The machine is closed: these are all of them."""

    PENDING = "pending"
    PREPARED = "prepared"
    EFFECT_STARTED = "effect_started"
    APPLIED = "applied"
    FAILED = "failed"
    AMBIGUOUS = "ambiguous"
    CANCELLED = "cancelled"
    EXPIRED = "expired"

    @property
    def is_terminal(self) -> bool:
        return self not in (State.PENDING, State.PREPARED, State.EFFECT_STARTED)


class Disposition(str, enum.Enum):
    """What the ledger did with a submission (and, in a batch, with an item)."""

    NEW = "new"
    REPLAY = "replay"
    COALESCED = "coalesced"
    HELD = "held"
    # Batch items only: the item was refused (a key conflict, invalid, or another problem).
    CONFLICT = "conflict"
    INVALID = "invalid"
    REFUSED = "refused"


class InvokeOutcome(str, enum.Enum):
    """What `POST /v1/invoke` did with a tool call."""

    EXECUTED = "executed"
    COALESCED = "coalesced"
    REPLAY = "replay"
    HELD = "held"
    PENDING = "pending"


class ProblemType(str, enum.Enum):
    """Every problem type (RFC 9457 `type`) the API sends."""

    UNAUTHORIZED = "/problems/unauthorized"
    FORBIDDEN = "/problems/forbidden"
    NOT_FOUND = "/problems/not-found"
    METHOD_NOT_ALLOWED = "/problems/method-not-allowed"
    MALFORMED_REQUEST = "/problems/malformed-request"
    HEADERS_TOO_LARGE = "/problems/headers-too-large"
    URI_TOO_LONG = "/problems/uri-too-long"
    MISSING_IDEMPOTENCY_KEY = "/problems/missing-idempotency-key"
    INVALID_IDEMPOTENCY_KEY = "/problems/invalid-idempotency-key"
    INVALID_BODY = "/problems/invalid-body"
    INVALID_ARGS = "/problems/invalid-args"
    INVALID_QUERY = "/problems/invalid-query"
    INVALID_ID = "/problems/invalid-id"
    UNSUPPORTED_MEDIA_TYPE = "/problems/unsupported-media-type"
    BODY_TOO_LARGE = "/problems/body-too-large"
    BODY_TIMEOUT = "/problems/body-timeout"
    IDEMPOTENCY_KEY_CONFLICT = "/problems/idempotency-key-conflict"
    NEAR_DUPLICATE = "/problems/near-duplicate"
    CANCEL_TOO_LATE = "/problems/cancel-too-late"
    HOLD_DECIDED = "/problems/hold-decided"
    HOLD_INTENT_APPLIED = "/problems/hold-intent-applied"
    NOT_AMBIGUOUS = "/problems/not-ambiguous"
    ALREADY_RESOLVED = "/problems/already-resolved"
    TOO_MANY_WEBHOOKS = "/problems/too-many-webhooks"
    RATE_LIMITED = "/problems/rate-limited"
    UNAVAILABLE = "/problems/unavailable"
    INTERNAL = "/problems/internal"


def _time(value: Optional[str]) -> Optional[datetime]:
    if value is None:
        return None
    text = value.replace("Z", "+00:00")
    # fromisoformat takes at most six fractional digits.
    head, dot, rest = text.partition(".")
    if dot:
        digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]
        zone = rest[len(digits) :]
        text = f"{head}.{digits[:6]}{zone}"
    return datetime.fromisoformat(text)


def _enum(cls, value):
    """A known member, or the string itself from a newer server."""
    if value is None:
        return None
    try:
        return cls(value)
    except ValueError:
        return value


@dataclass(frozen=True)
class AuthorityView:
    id: str
    generation: Optional[int]
    pinned: bool

    @classmethod
    def from_json(cls, j: dict) -> "AuthorityView":
        return cls(id=j["id"], generation=j.get("generation"), pinned=bool(j.get("pinned")))


# What a finished (or unfinished) command means for the caller. Match on them:
#
#     match command.outcome:
#         case Applied(result): ...
#         case Ambiguous(error): ...   # never retry this blindly


@dataclass(frozen=True)
class Applied:
    """The effect ran; its result."""

    result: Json


@dataclass(frozen=True)
class Failed:
    """The effect certainly did not happen; why."""

    error: Json


@dataclass(frozen=True)
class Ambiguous:
    """Nobody can tell whether the effect ran. Never retry this blindly: a
    person or the reconcile probe decides, and another attempt is a new
    command, submitted knowingly under a new key."""

    error: Json


@dataclass(frozen=True)
class Cancelled:
    """Cancelled before any effect."""

    error: Json


@dataclass(frozen=True)
class Expired:
    """Expired before any effect (deadline passed, or its pinned generation was superseded)."""

    error: Json


@dataclass(frozen=True)
class InFlight:
    """Not finished yet."""

    state: State


Outcome = Union[Applied, Failed, Ambiguous, Cancelled, Expired, InFlight]


@dataclass(frozen=True)
class Command:
    """A command as the API shows it."""

    id: str
    kind: str
    state: State
    authority: AuthorityView
    idempotency_key: str
    args: dict
    request_digest: str
    created_at: datetime
    updated_at: datetime
    run_id: Optional[str] = None
    result: Json = None
    error: Json = None
    deadline: Optional[datetime] = None
    finished_at: Optional[datetime] = None
    # On a submission's answer: new, replay or coalesced.
    disposition: Union[Disposition, str, None] = None
    fingerprint: Optional[str] = None
    canonical_rules: list = field(default_factory=list)
    retry_of: Optional[str] = None
    # Not claimed before this instant; `scheduled`: pending and waiting for it.
    not_before: Optional[datetime] = None
    scheduled: bool = False
    # Higher is claimed first within the authority (-100..100, with aging).
    priority: int = 0
    # Which attempt of its chain this is (1 unless the ledger retried a
    # failure with nothing done; then `retry_of` names the chain's first).
    attempt: int = 1
    # Read by id, a failure the ledger retried: the chain's last attempt.
    last_attempt: Optional[str] = None
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, j: dict) -> "Command":
        return cls(
            id=j["id"],
            kind=j["kind"],
            state=State(j["state"]),
            authority=AuthorityView.from_json(j["authority"]),
            idempotency_key=j["idempotency_key"],
            args=j.get("args") or {},
            request_digest=j["request_digest"],
            created_at=_time(j["created_at"]),
            updated_at=_time(j["updated_at"]),
            run_id=j.get("run_id"),
            result=j.get("result"),
            error=j.get("error"),
            deadline=_time(j.get("deadline")),
            finished_at=_time(j.get("finished_at")),
            disposition=_enum(Disposition, j.get("disposition")),
            fingerprint=j.get("fingerprint"),
            canonical_rules=list(j.get("canonical_rules") or []),
            retry_of=j.get("retry_of"),
            not_before=_time(j.get("not_before")),
            scheduled=bool(j.get("scheduled", False)),
            priority=int(j.get("priority") or 0),
            attempt=int(j.get("attempt") or 1),
            last_attempt=j.get("last_attempt"),
            raw=j,
        )

    @property
    def outcome(self) -> Outcome:
        s = self.state
        if s is State.APPLIED:
            return Applied(self.result)
        if s is State.FAILED:
            return Failed(self.error)
        if s is State.AMBIGUOUS:
            return Ambiguous(self.error)
        if s is State.CANCELLED:
            return Cancelled(self.error)
        if s is State.EXPIRED:
            return Expired(self.error)
        return InFlight(s)


@dataclass(frozen=True)
class Hold:
    """A near-duplicate held for a person's decision."""

    id: str
    state: str
    kind: str
    authority: str
    args: dict
    # The earlier command with the same intent.
    resembles: str
    created_at: datetime
    run_id: Optional[str] = None
    # The command recorded when the hold was released.
    command_id: Optional[str] = None
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, j: dict) -> "Hold":
        return cls(
            id=j["id"],
            state=j["state"],
            kind=j["kind"],
            authority=j["authority"],
            args=j.get("args") or {},
            resembles=j["resembles"],
            created_at=_time(j["created_at"]),
            run_id=j.get("run_id"),
            command_id=j.get("command_id"),
            raw=j,
        )


@dataclass(frozen=True)
class Submitted:
    """The answer to a submission, with the key it was made under: store the
    key before anything else; resubmitting with it is always safe."""

    key: str
    command: Optional[Command] = None
    # Set instead of `command` when the submission was held as a near-duplicate.
    hold: Optional[Hold] = None

    @property
    def held(self) -> bool:
        return self.hold is not None


@dataclass(frozen=True)
class Refused:
    """A batch item the server refused on its own (a key conflict, invalid
    arguments, ...). Sending it again changes nothing."""

    key: str
    status: int
    disposition: Union[Disposition, str]
    problem: dict

    @property
    def problem_type(self) -> Union[ProblemType, str]:
        return _enum(ProblemType, self.problem.get("type", ""))


ItemAnswer = Union[Submitted, Refused]


@dataclass(frozen=True)
class Submission:
    """A command to submit, for `Client.submit_batch` and the outbox."""

    kind: str
    authority: str
    args: dict = field(default_factory=dict)
    # None: a UUIDv7 is made once, before the first attempt.
    key: Optional[str] = None
    run_id: Optional[str] = None
    deadline: Optional[datetime] = None
    # Pin the command to this generation of the authority.
    generation: Optional[int] = None
    # Not to be claimed before this instant (recorded at once; cancellable until it starts).
    not_before: Optional[datetime] = None
    # -100..100; None: the kind's (at most its max_priority).
    priority: Optional[int] = None

    def body(self) -> dict:
        authority: Json = self.authority
        if self.generation is not None:
            authority = {"id": self.authority, "generation": self.generation}
        body = {"kind": self.kind, "authority": authority, "args": self.args}
        if self.run_id is not None:
            body["run_id"] = self.run_id
        if self.deadline is not None:
            body["deadline"] = self.deadline.isoformat()
        if self.not_before is not None:
            body["not_before"] = self.not_before.isoformat()
        if self.priority is not None:
            body["priority"] = self.priority
        return body


@dataclass(frozen=True)
class HistoryEntry:
    to: str
    at: datetime
    actor: str
    from_: Optional[str] = None
    generation: Optional[int] = None
    reason: Optional[str] = None

    @classmethod
    def from_json(cls, j: dict) -> "HistoryEntry":
        return cls(
            to=j["to"],
            at=_time(j["at"]),
            actor=j["actor"],
            from_=j.get("from"),
            generation=j.get("generation"),
            reason=j.get("reason"),
        )


@dataclass(frozen=True)
class Invoked:
    """What `POST /v1/invoke` answered for a tool call."""

    outcome: Union[InvokeOutcome, str]
    # The intent digest: equal for every spelling of one intent.
    fingerprint: str
    command_id: Optional[str] = None
    state: Optional[State] = None
    result: Json = None
    error: Json = None
    hold_id: Optional[str] = None
    # How many attempts the command took (1 unless the ledger retried a
    # failure with nothing done; `command_id` is then the last).
    attempts: int = 1
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, j: dict) -> "Invoked":
        return cls(
            outcome=_enum(InvokeOutcome, j["outcome"]),
            fingerprint=j["fingerprint"],
            command_id=j.get("command_id"),
            state=State(j["state"]) if j.get("state") else None,
            result=j.get("result"),
            error=j.get("error"),
            hold_id=j.get("hold_id"),
            attempts=int(j.get("attempts") or 1),
            raw=j,
        )

    def to_dict(self) -> dict:
        """The answer as plain JSON (what an agent framework shows its model)."""
        keep = ("outcome", "command_id", "state", "result", "error", "hold_id", "attempts")
        return {k: self.raw.get(k) for k in keep if self.raw.get(k) is not None}


@dataclass(frozen=True)
class Kind:
    """A kind the ledger knows, as `GET /v1/kinds` lists it."""

    kind: str
    # `required` or `fingerprint` (the intent may stand in for a key).
    key: str
    args_schema: dict
    # The authority `invoke` uses for it; None: the caller must name one.
    authority: Optional[str] = None
    description: Optional[str] = None

    @classmethod
    def from_json(cls, j: dict) -> "Kind":
        return cls(
            kind=j["kind"],
            key=j["key"],
            args_schema=j.get("args_schema") or {},
            authority=j.get("authority"),
            description=j.get("description"),
        )


@dataclass(frozen=True)
class Explanation:
    """`POST /v1/intents/explain`: what the ledger would make of a request; nothing recorded."""

    canonical: dict
    canonical_rules: list
    fingerprint: str
    request_digest: str
    canonicalizer_version: int
    policy: dict
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, j: dict) -> "Explanation":
        return cls(
            canonical=j["canonical"],
            canonical_rules=list(j["canonical_rules"]),
            fingerprint=j["fingerprint"],
            request_digest=j["request_digest"],
            canonicalizer_version=j["canonicalizer_version"],
            policy=j["policy"],
            raw=j,
        )

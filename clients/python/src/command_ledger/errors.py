"""Why a call did not produce an answer.

A definite refusal is a `ProblemError` (its 409 and 422 are subclasses of
their own, never retried). `GaveUp` means every attempt the retry policy
allowed failed for a reason worth retrying: for a submission the command may
or may not have been recorded, and resubmitting under `key` finds out safely.
An `ambiguous` command is not an error at all: it is an outcome
(`types.Ambiguous`), because an exception invites exactly the blind retry
that must not happen.
"""

from __future__ import annotations

from typing import Optional, Union

from .types import ProblemType, _enum


class LedgerError(Exception):
    """Every error this client raises."""


class ProblemError(LedgerError):
    """The server refused the request with a problem document (RFC 9457)."""

    def __init__(self, status: int, body: dict):
        self.status = status
        self.body = body
        # A ProblemType, or the string itself from a newer server.
        self.type: Union[ProblemType, str] = _enum(ProblemType, body.get("type", ""))
        self.title: str = body.get("title", "")
        self.detail: str = body.get("detail", "")
        super().__init__(f"{status} {body.get('type', '')}: {self.detail}")


class ConflictError(ProblemError):
    """409: a decision, never retried (too late to cancel, a near-duplicate
    refused, a hold already decided, ...)."""


class KeyConflictError(ProblemError):
    """422: the idempotency key was used before for a different request;
    `body["command_id"]` is the command it belongs to."""


class TransportError(LedgerError):
    """The connection failed or the answer did not arrive."""


class TransientError(LedgerError):
    """A transient refusal (429, 500, 502, 503, 504), as the last attempt saw it."""

    def __init__(self, status: int, body: str, retry_after: Optional[float]):
        self.status = status
        self.body = body
        self.retry_after = retry_after
        super().__init__(f"{status} (retryable): {body[:200]}")


class GaveUp(LedgerError):
    """Every attempt allowed failed for a reason worth retrying."""

    def __init__(self, attempts: int, elapsed: float, last: LedgerError, key: Optional[str] = None):
        self.attempts = attempts
        self.elapsed = elapsed
        self.last = last
        # For a submission: the key to resubmit under later (always safe).
        self.key = key
        super().__init__(f"gave up after {attempts} attempts in {elapsed:.1f} s: {last}")


class UnexpectedAnswer(LedgerError):
    """The answer was not what the API documents."""

    def __init__(self, status: int, body: str):
        self.status = status
        self.body = body
        super().__init__(f"unexpected answer ({status}): {body[:500]}")


def problem(status: int, body: dict) -> ProblemError:
    if status == 409:
        return ConflictError(status, body)
    if status == 422:
        return KeyConflictError(status, body)
    return ProblemError(status, body)

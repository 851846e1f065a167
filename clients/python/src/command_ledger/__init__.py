"""command-ledger's client for Python: submit effect-bearing commands so
that a retry can never make a second command, keep them in a durable
outbox on the device, and route an agent's tool calls through intent
admission.

    from command_ledger import Client, Applied, Ambiguous

    client = Client("http://127.0.0.1:8080", token)
    submitted = client.submit("refund", "payments", {"to": "ada@example.com", "amount": "12.00 USD"}, wait=10)
    # Store submitted.key first: resubmitting under it is always safe.
    match submitted.command.outcome:
        case Applied(result): ...
        case Ambiguous(error): ...  # unknown: a person decides, never a blind retry
"""

from .agents import ledger_tool
from .client import AsyncClient, Client, RetryPolicy, uuid7
from .errors import (
    ConflictError,
    GaveUp,
    KeyConflictError,
    LedgerError,
    ProblemError,
    TransientError,
    TransportError,
    UnexpectedAnswer,
)
from .outbox import BATCH, Entry, FlushReport, FlushStep, Outbox
from .types import (
    Ambiguous,
    Applied,
    AuthorityView,
    Cancelled,
    Command,
    Disposition,
    Expired,
    Explanation,
    Failed,
    HistoryEntry,
    Hold,
    InFlight,
    InvokeOutcome,
    Invoked,
    Kind,
    Outcome,
    ProblemType,
    Refused,
    State,
    Submission,
    Submitted,
)

__all__ = [name for name in dir() if not name.startswith("_")]

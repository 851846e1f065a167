"""Schemathesis hooks for scripts/fuzz-api: a check that a rejected request
changed nothing in the ledger, and one that every error is a problem document.

Before every call the ledger's fingerprint is read; after the call it is read
again. The server under test runs without a custodian, so nothing but the
requests themselves writes to the ledger. A response of 400 or above whose
fingerprint moved is a failure: a rejected request must leave no trace.
The workers run one at a time (`--workers 1`), so the fingerprints bracket
exactly one request.
"""

import os
import subprocess
import threading

import schemathesis

FINGERPRINT_SQL = """
select concat_ws(' ',
  (select count(*) from commands),
  (select coalesce(max(updated_at)::text, '-') from commands),
  (select count(*) from command_history),
  (select count(*) from holds),
  (select count(*) from holds where state <> 'open'),
  (select count(*) from principals),
  (select count(*) from api_tokens),
  (select count(*) from webhook_endpoints),
  (select count(*) from webhook_endpoints where disabled_at is not null),
  (select count(*) from webhook_events))
"""

_local = threading.local()
_verdicts = {}
_lock = threading.Lock()
_psql = None


def fingerprint():
    """One line that changes whenever the ledger does (one psql session, kept open)."""
    global _psql
    with _lock:
        if _psql is None:
            _psql = subprocess.Popen(
                ["psql", os.environ["LEDGER_DATABASE_URL"], "-XAtq", "-v", "ON_ERROR_STOP=1"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
        query = " ".join(FINGERPRINT_SQL.split())
        _psql.stdin.write(query + ";\n\\echo __end__\n")
        _psql.stdin.flush()
        lines = []
        while (line := _psql.stdout.readline()) and line.strip() != "__end__":
            lines.append(line.strip())
        if not line:
            raise RuntimeError("the psql session for the fingerprint ended")
        return " ".join(lines)


@schemathesis.hook
def before_call(ctx, case, kwargs):
    _local.before = fingerprint()


@schemathesis.hook
def after_call(ctx, case, response):
    verdict = (getattr(_local, "before", None), fingerprint())
    with _lock:
        _verdicts[id(response)] = verdict


@schemathesis.check
def rejected_requests_change_nothing(ctx, response, case):
    """A response of 400 or above leaves the ledger as it was."""
    with _lock:
        verdict = _verdicts.get(id(response))
    if verdict is None or response.status_code < 400:
        return None
    before, after = verdict
    if before != after:
        raise AssertionError(
            f"a rejected request ({response.status_code}) changed the ledger: "
            f"before [{before}], after [{after}]"
        )
    return None


def _header(response, name):
    """A response header's (first) value, whatever the case of its name."""
    for key, value in response.headers.items():
        if key.lower() == name.lower():
            return value[0] if isinstance(value, list) and value else value
    return None


@schemathesis.check
def every_error_is_a_problem_document(ctx, response, case):
    """A response of 400 or above is application/problem+json with the
    standard members, the status matching; a 405 (schemathesis sends methods
    the schema does not list) also says what is allowed."""
    if response.status_code < 400:
        return None
    content_type = _header(response, "Content-Type") or ""
    if content_type.split(";")[0].strip() != "application/problem+json":
        raise AssertionError(
            f"{response.status_code} sent as {content_type!r}, not application/problem+json"
        )
    try:
        body = response.json()
    except ValueError as e:
        raise AssertionError(f"{response.status_code}: the problem body is not JSON ({e})")
    for member in ("type", "title", "status", "detail"):
        if member not in body:
            raise AssertionError(f"{response.status_code}: the problem has no {member!r}: {body}")
    if body["status"] != response.status_code:
        raise AssertionError(f"problem status {body['status']} on a {response.status_code} response")
    if response.status_code == 405 and not _header(response, "Allow"):
        raise AssertionError("405 without an Allow header")
    return None

"""The live ledger the suite runs against, as `scripts/clients-test` starts it.

Environment: COMMAND_LEDGER_URL (a `serve` with its private cluster, demo
sink and custodian for `payments`), COMMAND_LEDGER_BIN and
COMMAND_LEDGER_STATE_DIR (to create tokens: `token create` attaches to the
running cluster), SINK_LOG (the demo sink's log). Every test that uses the
ledger gets a principal of its own, so its counts are its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
import uuid

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from command_ledger import Client, RetryPolicy  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
OPENAPI = os.path.join(REPO, "docs", "openapi.json")

# Quick retries for tests: the policy's shape, not its patience, is under test.
FAST = RetryPolicy(max_attempts=5, max_elapsed=20, base_delay=0.05, max_delay=0.2, attempt_timeout=20)


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run the suite with scripts/clients-test (it starts a serve)")
    return value


@pytest.fixture(scope="session")
def api_url() -> str:
    return _env("COMMAND_LEDGER_URL")


@pytest.fixture
def token() -> str:
    """A fresh device principal, its own fleet."""
    principal = f"py-{uuid.uuid4().hex[:12]}"
    out = subprocess.run(
        [_env("COMMAND_LEDGER_BIN"), "--state-dir", _env("COMMAND_LEDGER_STATE_DIR"),
         "token", "create", "--principal", principal, "--role", "device"],
        check=True, capture_output=True, text=True, timeout=60,
    )
    return out.stdout.strip()


@pytest.fixture
def client(api_url, token) -> Client:
    return Client(api_url, token, FAST)


class Ledger:
    """What the ledger holds, read straight from the API (not through the client under test)."""

    def __init__(self, url: str, token: str):
        self.url, self.token = url, token

    def commands(self) -> list:
        req = urllib.request.Request(f"{self.url}/v1/commands?limit=500", headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.load(r)["items"]

    def count(self) -> int:
        return len(self.commands())


@pytest.fixture
def ledger(api_url, token) -> Ledger:
    return Ledger(api_url, token)


def sink_traceparents(command_id: str) -> list:
    """The `traceparent` of each request the demo sink got for the command."""
    with open(_env("SINK_LOG")) as f:
        return [
            e.get("traceparent")
            for e in map(json.loads, f)
            if e.get("key") == f"cl-{command_id}"
        ]


def sink_applied(command_id: str) -> int:
    """How many times the demo sink applied the command's effect."""
    count = 0
    with open(_env("SINK_LOG")) as f:
        for line in f:
            entry = json.loads(line)
            if entry.get("key") == f"cl-{command_id}" and entry.get("event") == "applied":
                count += 1
    return count

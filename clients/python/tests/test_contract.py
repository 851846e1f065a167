"""Every state, disposition, invoke outcome and problem type the contract
names is known to the client's types."""

from __future__ import annotations

import json
import os
import re

from command_ledger import Disposition, InvokeOutcome, ProblemType, State
from conftest import OPENAPI, REPO


def walk(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from walk(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, path + (i,))
    else:
        yield path, node


DOC = json.load(open(OPENAPI))
SCHEMAS = DOC["components"]["schemas"]


def backticked(text: str) -> set:
    return set(re.findall(r"`([a-z_]+)`", text))


def test_every_state_in_the_contract_is_known():
    states = set()
    for path, value in walk(DOC):
        # The list's `state` filter spells out the closed set as a pattern.
        if path[-1] == "pattern" and isinstance(value, str) and "effect_started" in value:
            states |= set(re.fullmatch(r"\^\((.*)\)\$", value).group(1).split("|"))
        if len(path) >= 2 and path[-2] == "enum" and "state" in path:
            states.add(value)
    assert "applied" in states, "the contract no longer names the states where this test looks"
    assert states == {s.value for s in State}


def test_every_disposition_and_invoke_outcome_in_the_contract_is_known():
    dispositions = backticked(SCHEMAS["ItemAnswer"]["properties"]["disposition"]["description"])
    assert dispositions and dispositions <= {d.value for d in Disposition}
    outcomes = backticked(SCHEMAS["InvokeView"]["properties"]["outcome"]["description"])
    assert outcomes == {o.value for o in InvokeOutcome}


def test_every_problem_type_is_known():
    named = {v for _, v in walk(DOC) if isinstance(v, str) and re.fullmatch(r"/problems/[a-z-]+", v)}
    # The document does not list problem types (its Problem schema leaves
    # `type` a string), so the server's one mapping of errors to types is read too.
    source = open(os.path.join(REPO, "src", "http", "error.rs")).read()
    sent = set(re.findall(r'"(/problems/[a-z-]+)"', source))
    assert sent, "src/http/error.rs no longer maps errors to problem types where this test looks"
    assert named | sent == {p.value for p in ProblemType}

"""An agent's tool made at-most-once: three racing spellings of one refund
make one execution at the demo sink, with the plain wrapper and with the
OpenAI Agents SDK's own tool interface (its scripted model: no network)."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid

import pytest

from command_ledger import InvokeOutcome, State, ledger_tool
from conftest import sink_applied


def spellings(who: str) -> list:
    return [
        {"to": f"{who}@Example.com", "amount": "$12.00"},
        {"amount": "12.00 USD", "to": f"{who}@example.com"},
        {"to": f"{who.upper()}@example.com", "amount": "1200 cents", "currency": "usd"},
    ]


def test_three_racing_spellings_through_the_wrapper_make_one_execution(client):
    runs = iter(["run-a", "run-b", "run-c"])
    lock = threading.Lock()

    def next_run():
        with lock:
            return next(runs)

    @ledger_tool(client, run_id=next_run)
    def refund(to: str, amount: str, currency: str | None = None) -> dict:
        """Refund `amount` to the customer `to`."""
        raise AssertionError("the tool's body never runs: the ledger's executor does")

    assert refund.__name__ == "refund" and "Refund" in refund.__doc__, "the tool is unchanged"
    who = f"py-race-{uuid.uuid4().hex[:8]}"
    answers, barrier = [None] * 3, threading.Barrier(3)

    def call(i, args):
        barrier.wait()
        answers[i] = refund(**args)

    threads = [threading.Thread(target=call, args=(i, a)) for i, a in enumerate(spellings(who))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    ids = {a.command_id for a in answers}
    assert len(ids) == 1 and None not in ids, answers
    outcomes = sorted(a.outcome.value for a in answers)
    assert outcomes.count("executed") == 1 and set(outcomes) <= {"executed", "coalesced", "replay"}, outcomes
    assert all(a.state is State.APPLIED for a in answers)
    assert sink_applied(ids.pop()) == 1, "the sink applied the refund once"


def test_the_same_run_calling_again_gets_a_replay(client):
    @ledger_tool(client, run_id="run-again")
    async def refund(to: str, amount: str) -> dict:
        """Refund."""

    who = f"py-again-{uuid.uuid4().hex[:8]}@example.com"
    first = asyncio.run(refund(who, "2.00 USD"))
    second = asyncio.run(refund(to=who, amount="$2"))
    assert (first.outcome, second.outcome) == (InvokeOutcome.EXECUTED, InvokeOutcome.REPLAY)
    assert first.command_id == second.command_id


def test_an_openai_agents_sdk_tool_is_one_execution_for_three_racing_runs(client):
    agents = pytest.importorskip("agents")
    from agents import Agent, Runner, function_tool, set_trace_processors
    from agents.testing import ScriptedModel, assistant_message, function_call

    from command_ledger.openai_agents import ledger_function_tool

    set_trace_processors([])  # traces stay on this machine: each run still has its trace id

    def refund(to: str, amount: str, currency: str | None = None) -> dict:
        """Refund `amount` to the customer `to`.

        Args:
            to: the customer's e-mail address.
            amount: the amount, with its currency.
            currency: the currency, if the amount names none.
        """

    tool = ledger_function_tool(client)(refund)
    plain = function_tool(refund)
    assert (tool.name, tool.description, tool.params_json_schema) == (
        plain.name, plain.description, plain.params_json_schema), "the SDK sees the same tool"

    who = f"py-sdk-{uuid.uuid4().hex[:8]}"
    models = [
        ScriptedModel([[function_call("refund", args, call_id=f"call-{i}")], [assistant_message("done")]])
        for i, args in enumerate(spellings(who))
    ]

    async def main():
        runs = [Runner.run(Agent(name=f"worker-{i}", model=m, tools=[tool]), "refund the customer")
                for i, m in enumerate(models)]
        return await asyncio.gather(*runs)

    results = asyncio.run(main())
    assert [r.final_output for r in results] == ["done"] * 3
    # What each run's model was shown as the tool's result: the ledger's answer.
    shown = []
    for m in models:
        outputs = [item for item in m.last_call.input if isinstance(item, dict) and item.get("type") == "function_call_output"]
        shown.append(json.loads(outputs[-1]["output"]))
    ids = {s.get("command_id") for s in shown}
    assert len(ids) == 1 and None not in ids, shown
    outcomes = sorted(s["outcome"] for s in shown)
    assert outcomes.count("executed") == 1 and set(outcomes) <= {"executed", "coalesced", "replay"}, outcomes
    assert all(s["state"] == "applied" for s in shown)
    command = client.get(ids.pop())
    assert sink_applied(command.id) == 1, "the sink applied the refund once"
    assert command.run_id and command.run_id.startswith("trace_"), "the run id is the SDK run's trace id"

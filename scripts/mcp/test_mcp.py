#!/usr/bin/env python3
"""`command-ledger mcp` driven by a client nobody on this project wrote: the
official MCP Python SDK. Run by scripts/mcp-test against a live `serve`
(private cluster, demo sink, in-process custodian). Environment:
COMMAND_LEDGER_URL, COMMAND_LEDGER_TOKEN, MCP_SERVER (the stdio command),
MCP_HTTP_URL (a `command-ledger mcp --http` already listening), SINK_LOG (the
demo sink's log). Prints one line per check, then `N passed, N failed`.
"""

import asyncio
import json
import os
import shlex
import sys
import time
import urllib.request

import httpx2
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

API = os.environ["COMMAND_LEDGER_URL"]
TOKEN = os.environ["COMMAND_LEDGER_TOKEN"]
HTTP_URL = os.environ["MCP_HTTP_URL"]
SINK_LOG = os.environ["SINK_LOG"]
RESULTS = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    RESULTS["passed" if ok else "failed"] += 1
    print(f"{'ok' if ok else 'FAILED'} - {name}" + ("" if ok else f": {detail}"), flush=True)


def ledger_env():
    """What the server needs from our environment (the SDK passes it only a safe few)."""
    return {k: v for k, v in os.environ.items() if k.startswith("COMMAND_LEDGER_") or k == "RUST_LOG"}


def stdio():
    command = shlex.split(os.environ["MCP_SERVER"])
    return Client(StdioServerParameters(command=command[0], args=command[1:], env=ledger_env()))


def over_http(token=TOKEN):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client(streamable_http_client(HTTP_URL, http_client=create_mcp_http_client(headers=headers)))


def api(path):
    req = urllib.request.Request(API + path, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def sink_events(event):
    """How many requests the demo sink logged as `event` (applied, rejected, ...)."""
    with open(SINK_LOG) as f:
        return sum(1 for line in f if json.loads(line).get("event") == event)


def first_text(result):
    return result.content[0].text if result.content and hasattr(result.content[0], "text") else ""


def sink_applied(command_id):
    """How many times the demo sink applied the command's effect."""
    count = 0
    with open(SINK_LOG) as f:
        for line in f:
            entry = json.loads(line)
            if entry.get("key") == f"cl-{command_id}" and entry.get("event") == "applied":
                count += 1
    return count


async def main():
    kinds = {k["kind"]: k for k in api("/v1/kinds")["items"]}

    # Three workers: three sessions (three server processes), open at once.
    async with stdio() as a, stdio() as b, stdio() as c:
        tools = {t.name: t for t in (await a.list_tools()).tools}
        with_authority = {name for name, k in kinds.items() if k["authority"]}
        check("every kind with an authority is a tool", set(tools) == with_authority,
              f"tools {sorted(tools)}, kinds {sorted(with_authority)}")
        refund = tools.get("refund")
        check("a tool's input schema is its kind's args schema",
              refund is not None and refund.input_schema == kinds["refund"]["args_schema"],
              refund and refund.input_schema)

        spellings = [
            (a, {"to": "Hal@Example.com", "amount": "$12.00", "trace_id": "a-1"}),
            (b, {"amount": "12.00 USD", "to": "hal@example.com"}),
            (c, {"currency": "usd", "to": "HAL@example.com", "amount": "1200 cents"}),
        ]
        results = await asyncio.gather(*(s.call_tool("refund", args) for s, args in spellings))
        answers = [r.structured_content or {} for r in results]
        print("  three spellings:", [(x.get("outcome"), x.get("command_id"), x.get("state")) for x in answers])
        check("no call is an error", not any(r.is_error for r in results), [r.content for r in results])
        ids = {x.get("command_id") for x in answers}
        check("three spellings from three sessions are one command", len(ids) == 1 and None not in ids, ids)
        outcomes = sorted(x.get("outcome") for x in answers)
        check("one executed, the others coalesced or replayed",
              outcomes.count("executed") == 1 and set(outcomes) <= {"executed", "coalesced", "replay"},
              outcomes)
        check("every call got the applied result",
              all(x.get("state") == "applied" and x.get("result") for x in answers), answers)
        command_id = answers[0].get("command_id")
        check("the sink applied it once", sink_applied(command_id) == 1, sink_applied(command_id))
        runs = {x.get("run_id") for x in answers}
        check("each session is its own run", len(runs) == 3, runs)

        # The first worker retries after the coalescing window (5 s): replay.
        await asyncio.sleep(6)
        later = await a.call_tool("refund", {"amount": "USD 12", "to": "hal@example.com"})
        x = later.structured_content or {}
        check("the same session later replays the stored result",
              x.get("outcome") == "replay" and x.get("command_id") == command_id, x)

        bad = await b.call_tool("refund", {"to": "hal@example.com", "amount": "12.00"})
        problem = bad.structured_content or {}
        check("money without a currency is a tool error with the problem",
              bad.is_error and problem.get("type") == "/problems/invalid-args", (bad.is_error, problem))

        # Args the tool does not declare (its input schema is enforced), and
        # money that is no amount: refused, naming each field; nothing runs.
        applied_before = sink_events("applied")
        for args, fields in [
            ({"amount": "1.00 USD"}, ["/to"]),
            ({}, ["/amount", "/to"]),
            ({"customer": "x@y.z", "amount": "1.00 USD"}, ["/to"]),
            ({"to": "x@y.z", "amount": "twelve bucks"}, ["/amount"]),
        ]:
            r = await b.call_tool("refund", args)
            p = r.structured_content or {}
            named = sorted(e.get("pointer") for e in p.get("errors") or [])
            check(f"{json.dumps(args)} is a tool error naming {fields}",
                  r.is_error and p.get("type") == "/problems/invalid-args" and named == fields,
                  (r.is_error, p))
        check("and none of them reached the sink", sink_events("applied") == applied_before,
              (applied_before, sink_events("applied")))

        # A call naming its run in _meta.runId is made under that run.
        r = await c.call_tool("refund", {"to": "kim@example.com", "amount": "4.00 USD"},
                              meta={"runId": "sdk-worker-7"})
        x = r.structured_content or {}
        recorded = api(f"/v1/commands/{x.get('command_id')}").get("run_id") if x.get("command_id") else None
        check("_meta.runId names the call's run",
              x.get("run_id") == "sdk-worker-7" and recorded == "sdk-worker-7", (x, recorded))

        # Outcomes that are not a success are tool errors that say so, and
        # keep the structured answer.
        failed, ambiguous = await asyncio.gather(
            c.call_tool("refund", {"to": "lee@example.com", "amount": "5.00 USD", "mode": "reject"}),
            a.call_tool("refund", {"to": "mo@example.com", "amount": "6.00 USD", "mode": "hang"}),
        )
        x = failed.structured_content or {}
        check("a failed refund is a tool error saying FAILED",
              failed.is_error and x.get("state") == "failed" and first_text(failed).startswith("FAILED"),
              (failed.is_error, x, first_text(failed)))
        x = ambiguous.structured_content or {}
        check("an ambiguous refund is a tool error saying not to retry it",
              ambiguous.is_error and x.get("state") == "ambiguous"
              and first_text(ambiguous).startswith("NOT CONFIRMED") and "Do not retry" in first_text(ambiguous),
              (ambiguous.is_error, x, first_text(ambiguous)))

        # An unknown tool is named, with the tools there are.
        try:
            await c.call_tool("refnud", {"to": "x@y.z"})
            check("an unknown tool is an error", False, "it answered")
        except MCPError as e:
            check("an unknown tool is an error naming it and the tools",
                  e.code == -32602 and e.message == f"unknown tool refnud; the tools are: {', '.join(sorted(tools))}",
                  (e.code, e.message))

    # A new session (a new run) with the same intent after the window: held.
    async with stdio() as d:
        held = await d.call_tool("refund", {"to": "hal@example.com", "amount": "12 USD"})
        x = held.structured_content or {}
        check("a new run's near-duplicate is held for a person",
              x.get("outcome") == "held" and x.get("hold_id"), x)
    check("and nothing ran again", sink_applied(command_id) == 1, sink_applied(command_id))

    # Streamable HTTP: the bearer token is the principal.
    async with over_http() as h:
        names = {t.name for t in (await h.list_tools()).tools}
        check("over HTTP the same tools are listed", names == set(tools), names)
        r = await h.call_tool("refund", {"to": "ivy@example.com", "amount": "3.00 EUR"})
        x = r.structured_content or {}
        check("over HTTP a call is executed", x.get("outcome") == "executed" and x.get("state") == "applied", x)
    async with httpx2.AsyncClient() as plain:
        resp = await plain.post(HTTP_URL, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                headers={"Accept": "application/json, text/event-stream"})
        check("over HTTP a request without a bearer token is 401", resp.status_code == 401, resp.status_code)
        resp = await plain.post(HTTP_URL, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}},
            headers={"Accept": "application/json, text/event-stream", "Authorization": "Bearer clt_not_a_token"})
        check("over HTTP a wrong token is 401 at initialize, with no session",
              resp.status_code == 401 and "mcp-session-id" not in resp.headers, (resp.status_code, resp.headers))
    opened = False
    try:
        async with over_http("clt_not_a_token"):
            opened = True  # initialize succeeded
    except Exception:  # refused at initialize
        pass
    check("over HTTP the SDK opens no session with a wrong token", not opened, "a session was opened")


if __name__ == "__main__":
    started = time.time()
    asyncio.run(main())
    print(f"took {time.time() - started:.1f} s")
    print(f"mcp: {RESULTS['passed']} passed, {RESULTS['failed']} failed")
    sys.exit(1 if RESULTS["failed"] else 0)

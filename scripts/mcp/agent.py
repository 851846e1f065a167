#!/usr/bin/env python3
"""A small agent over MCP, written with the official Python SDK (`mcp` on PyPI).

It starts `command-ledger mcp` over stdio, one MCP session per call, as
separate workers of an agent would, opens them all, makes the calls at the
same moment, and prints what each answered, one JSON line per call, in the
order given:

    agent.py --list                             the tools and their input schemas
    agent.py TOOL ARGS_JSON [ARGS_JSON ...]     one session per ARGS_JSON, all at once
    agent.py --http URL TOOL ARGS_JSON          over streamable HTTP instead

The server command is $MCP_SERVER (default: `target/release/command-ledger
mcp`); it finds the ledger and its principal in COMMAND_LEDGER_URL and
COMMAND_LEDGER_TOKEN, which over HTTP is sent as the bearer token instead.
"""

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import sys

from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def ledger_env():
    """What the server needs from our environment (the SDK passes it only a safe few)."""
    return {k: v for k, v in os.environ.items() if k.startswith("COMMAND_LEDGER_") or k == "RUST_LOG"}


def server():
    command = shlex.split(os.environ.get("MCP_SERVER", "target/release/command-ledger mcp"))
    return StdioServerParameters(command=command[0], args=command[1:], env=ledger_env())


def over_http(url):
    token = os.environ["COMMAND_LEDGER_TOKEN"]
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return streamable_http_client(url, http_client=http)


def answer(result):
    """What a call answered: the ledger's outcome, or the refusal."""
    if result.is_error:
        problem = result.structured_content or {}
        return {"error": problem.get("type"), "detail": problem.get("detail")}
    s = result.structured_content
    return {k: s.get(k) for k in ("outcome", "command_id", "state", "hold_id") if s.get(k) is not None}


async def calls(targets, tool, many_args):
    """Opens every session first, then makes the calls at the same moment."""
    async with contextlib.AsyncExitStack() as stack:
        sessions = [await stack.enter_async_context(Client(t)) for t in targets]
        results = await asyncio.gather(*(s.call_tool(tool, args) for s, args in zip(sessions, many_args)))
        return [answer(r) for r in results]


async def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--list", action="store_true")
    p.add_argument("--http", metavar="URL")
    p.add_argument("tool", nargs="?")
    p.add_argument("args", nargs="*")
    a = p.parse_args()
    target = (lambda: over_http(a.http)) if a.http else server
    if a.list:
        async with Client(target()) as client:
            for tool in (await client.list_tools()).tools:
                schema = tool.input_schema
                print(json.dumps({"tool": tool.name, "required": schema.get("required", []),
                                  "properties": sorted(schema.get("properties", {}))}))
        return
    if not a.tool or not a.args:
        p.error("a tool and at least one ARGS_JSON")
    answers = await calls([target() for _ in a.args], a.tool, [json.loads(x) for x in a.args])
    for one in answers:
        print(json.dumps(one, separators=(",", ":")))


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

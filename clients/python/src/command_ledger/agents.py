"""An agent's tool, made at-most-once without changing the tool.

`ledger_tool` wraps a tool function so that each call becomes
`POST /v1/invoke`: the function's name is the kind, its arguments (bound to
its signature; parameters left to their defaults are left out) are the args, and the run id names the
agent's run. The ledger canonicalizes the call into an intent, so copies of
one call (retried after a timeout, spelled differently by a re-planning
agent, sent by two workers at once) make one execution, done by the
ledger's executor for that kind; each call returns what happened
(`Invoked`: executed, coalesced, replay, held or pending).

The function keeps its name, signature and docstring (`functools.wraps`),
so an agent framework builds the same tool schema from it; its body is not
run: the effect belongs to the ledger's executor, which runs it once.
`command_ledger.openai_agents` does the same for the OpenAI Agents SDK,
taking the run id from the SDK's run.
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable, Optional, Union

from .client import Client
from .types import Invoked

RunId = Union[str, Callable[[], Optional[str]], None]


def call_args(fn: Callable, args: tuple, kwargs: dict) -> dict:
    """A call's arguments by name, as the function's signature binds them.
    Only those passed: the body never runs, so a default means "not given"."""
    signature = inspect.signature(fn)
    bound = signature.bind(*args, **kwargs)
    out = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        elif kind is not inspect.Parameter.VAR_POSITIONAL:
            out[name] = value
    return out


def ledger_tool(
    client: Client,
    *,
    run_id: RunId = None,
    kind: Optional[str] = None,
    authority: Optional[str] = None,
    wait: float = 30,
) -> Callable[[Callable], Callable[..., Invoked]]:
    """A decorator: calls of the tool go through `POST /v1/invoke`.

    `run_id` is the agent run's id, or a function returning it at each call
    (the same run calling again later gets a `replay`; another run after the
    coalescing window, a `held` near-duplicate). `kind` defaults to the
    function's name; `authority` to the one the catalog names for the kind.
    An `async def` tool stays awaitable (the request runs in a thread)."""

    def decorate(fn: Callable) -> Callable[..., Invoked]:
        tool = kind or fn.__name__

        def invoke(args: tuple, kwargs: dict) -> Invoked:
            run = run_id() if callable(run_id) else run_id
            return client.invoke(tool, call_args(fn, args, kwargs), run_id=run, authority=authority, wait=wait)

        if inspect.iscoroutinefunction(fn):
            import asyncio

            @functools.wraps(fn)
            async def call_async(*args, **kwargs) -> Invoked:
                return await asyncio.to_thread(invoke, args, kwargs)

            return call_async

        @functools.wraps(fn)
        def call(*args, **kwargs) -> Invoked:
            return invoke(args, kwargs)

        return call

    return decorate

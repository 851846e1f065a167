"""`ledger_tool` for the OpenAI Agents SDK (`pip install openai-agents`).

`ledger_function_tool(client)(fn)` is a `FunctionTool` whose schema the SDK
builds from `fn` as `@function_tool` would (name, parameters, docstring), and
whose every call is a `POST /v1/invoke` for the run it belongs to:

    @ledger_function_tool(client)
    def refund(to: str, amount: str) -> dict:
        \"\"\"Refund `amount` to the customer `to`.\"\"\"

    agent = Agent(name="support", tools=[refund])

The run id is, in order: `run_id(ctx)` if given, the `trace_id` of the
run's `RunConfig` if set, else the id of the trace the SDK opened for the
run (tracing on; `set_trace_processors([])` keeps traces on the machine).
With none of them there is no run to name, and the call fails rather than
lump every run together. The args are what the model sent, validated by the tool's schema (a
null, a strict schema's way to leave an optional parameter out, is left
out). The model sees the ledger's answer as JSON:
`outcome`, `command_id`, `state`, `result` or `error`, `hold_id`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable, Optional

from agents import FunctionTool, RunContextWrapper
from agents.function_schema import function_schema
from agents.tracing import get_current_trace

from .client import Client
from .errors import LedgerError


def run_id_of(ctx: RunContextWrapper[Any]) -> Optional[str]:
    """The id of the agent run a tool call belongs to, if the SDK names one."""
    config = getattr(ctx, "run_config", None)
    if config is not None and getattr(config, "trace_id", None):
        return config.trace_id
    trace = get_current_trace()
    if trace is not None and trace.trace_id and trace.trace_id != "no-op":
        return trace.trace_id
    return None


def ledger_function_tool(
    client: Client,
    *,
    run_id: Optional[Callable[[RunContextWrapper[Any]], Optional[str]]] = None,
    kind: Optional[str] = None,
    authority: Optional[str] = None,
    wait: float = 30,
) -> Callable[[Callable], FunctionTool]:
    """A decorator making `fn` an Agents SDK tool routed through the ledger
    (see the module's documentation). `kind` defaults to the function's name."""

    def decorate(fn: Callable) -> FunctionTool:
        schema = function_schema(fn)
        tool = kind or schema.name

        async def on_invoke_tool(ctx: RunContextWrapper[Any], input: str) -> str:
            # The arguments the model sent, once the tool's schema accepts
            # them; null is how a strict schema leaves an optional one out.
            sent = json.loads(input) if input else {}
            schema.params_pydantic_model(**sent)
            arguments = {k: v for k, v in sent.items() if v is not None}
            run = run_id(ctx) if run_id else run_id_of(ctx)
            if not run:
                raise LedgerError(
                    f"tool {tool}: no run id (tracing is off and RunConfig.trace_id is unset); pass run_id="
                )
            invoked = await asyncio.to_thread(
                client.invoke, tool, arguments, run_id=run, authority=authority, wait=wait
            )
            return json.dumps(invoked.to_dict())

        return FunctionTool(
            name=schema.name,
            description=schema.description or "",
            params_json_schema=schema.params_json_schema,
            on_invoke_tool=on_invoke_tool,
            strict_json_schema=schema.strict_json_schema,
        )

    return decorate

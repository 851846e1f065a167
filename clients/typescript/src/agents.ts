// An agent's tool, made at-most-once without changing the tool.
//
// `ledgerTool(client, options)(tool)` is a function with the tool's own
// shape (one arguments object, as agent frameworks call tools) whose every
// call is `POST /v1/invoke`: the tool's name is the kind, its arguments the
// args, and `runId` names the agent's run. The ledger canonicalizes the call
// into an intent, so copies of one call (retried after a timeout, spelled
// differently by a re-planning agent, sent by two workers at once) make one
// execution, done by the ledger's executor for that kind; each call resolves
// to what happened (`Invoked`: executed, coalesced, replay, held, pending).
// The tool's body is not run: the effect belongs to the ledger's executor.

import type { Client } from "./client.js";
import type { Invoked } from "./types.js";

export interface LedgerToolOptions<Rest extends unknown[]> {
  /** The kind; defaults to the tool function's name. */
  kind?: string;
  /** The agent run's id, or a function of the call's further arguments
   * (a framework's run context, say) returning it. */
  runId?: string | ((...rest: Rest) => string | undefined);
  /** Defaults to the authority the catalog names for the kind. */
  authority?: string;
  /** How long the server waits for the outcome (default 30 s). */
  waitS?: number;
}

export function ledgerTool<Args extends Record<string, unknown>, Rest extends unknown[] = []>(
  client: Client,
  options: LedgerToolOptions<Rest> = {},
) {
  return (tool: (args: Args, ...rest: Rest) => unknown): ((args: Args, ...rest: Rest) => Promise<Invoked>) => {
    const kind = options.kind ?? tool.name;
    if (!kind) throw new TypeError("ledgerTool: an anonymous tool needs options.kind");
    const wrapped = async (args: Args, ...rest: Rest): Promise<Invoked> => {
      const runId = typeof options.runId === "function" ? options.runId(...rest) : options.runId;
      // Arguments left undefined are not sent: they were not given.
      const given = Object.fromEntries(Object.entries(args).filter(([, v]) => v !== undefined));
      return client.invoke(kind, given, { runId, authority: options.authority, waitS: options.waitS });
    };
    Object.defineProperty(wrapped, "name", { value: kind });
    return wrapped;
  };
}

// What the API answers, typed from the contract: the shapes come from
// src/openapi.ts (generated from docs/openapi.json by openapi-typescript;
// `npm run check-types` fails when it is stale), narrowed here where the
// document spells a closed set in words (states, dispositions, outcomes,
// problem types). test/contract.test.mjs checks these sets against it.

import type { components } from "./openapi.js";

type Schemas = components["schemas"];

/** A command's states. The machine is closed: these are all of them. */
export const STATES = [
  "pending",
  "prepared",
  "effect_started",
  "applied",
  "failed",
  "ambiguous",
  "cancelled",
  "expired",
] as const;
export type State = (typeof STATES)[number];

export const TERMINAL_STATES: readonly State[] = ["applied", "failed", "ambiguous", "cancelled", "expired"];

export function isTerminal(state: State): boolean {
  return TERMINAL_STATES.includes(state);
}

/** What the ledger did with a submission; the last three for refused batch items only. */
export const DISPOSITIONS = ["new", "replay", "coalesced", "held", "conflict", "invalid", "refused"] as const;
export type Disposition = (typeof DISPOSITIONS)[number];

/** What `POST /v1/invoke` did with a tool call. */
export const INVOKE_OUTCOMES = ["executed", "coalesced", "replay", "held", "pending"] as const;
export type InvokeOutcome = (typeof INVOKE_OUTCOMES)[number];

/** Every problem type (RFC 9457 `type`) the API sends. */
export const PROBLEM_TYPES = [
  "/problems/unauthorized",
  "/problems/forbidden",
  "/problems/not-found",
  "/problems/method-not-allowed",
  "/problems/malformed-request",
  "/problems/headers-too-large",
  "/problems/uri-too-long",
  "/problems/missing-idempotency-key",
  "/problems/invalid-idempotency-key",
  "/problems/invalid-body",
  "/problems/invalid-args",
  "/problems/invalid-query",
  "/problems/invalid-id",
  "/problems/unsupported-media-type",
  "/problems/body-too-large",
  "/problems/body-timeout",
  "/problems/idempotency-key-conflict",
  "/problems/near-duplicate",
  "/problems/cancel-too-late",
  "/problems/hold-decided",
  "/problems/hold-intent-applied",
  "/problems/not-ambiguous",
  "/problems/already-resolved",
  "/problems/too-many-webhooks",
  "/problems/rate-limited",
  "/problems/unavailable",
  "/problems/internal",
] as const;
export type ProblemType = (typeof PROBLEM_TYPES)[number];

type Json = Record<string, unknown>;

/** A command as the API shows it. */
export type Command = Omit<Schemas["CommandView"], "state" | "disposition" | "result" | "error"> & {
  state: State;
  /** On a submission's answer: `new`, `replay` or `coalesced`. */
  disposition?: Disposition | null;
  result?: Json | null;
  error?: Json | null;
};

/** A near-duplicate held for a person's decision. */
export type Hold = Schemas["HoldView"];

/** A problem document (RFC 9457), extension members included (the
 * generated `Problem` reads "any extension member" as `Record<string, never>`,
 * so its members are restated here). */
export interface Problem {
  type: ProblemType | string;
  title: string;
  status: number;
  detail: string;
  [extension: string]: unknown;
}

export type HistoryEntry = Schemas["HistoryEntry"];
export type Kind = Schemas["KindView"];
export type Explanation = Schemas["Explanation"];

/** What `POST /v1/invoke` answered. */
export type Invoked = Omit<Schemas["InvokeView"], "outcome" | "state" | "result" | "error"> & {
  outcome: InvokeOutcome;
  state?: State | null;
  result?: Json | null;
  error?: Json | null;
};

/** What a command's state means for the caller. `ambiguous` is its own case:
 * nobody can tell whether the effect ran, so it is never retried blindly. */
export type Outcome =
  | { kind: "applied"; result: Json | null }
  | { kind: "failed"; error: Json | null }
  | { kind: "ambiguous"; error: Json | null }
  | { kind: "cancelled"; error: Json | null }
  | { kind: "expired"; error: Json | null }
  | { kind: "in_flight"; state: State };

export function outcomeOf(command: Command): Outcome {
  const error = command.error ?? null;
  switch (command.state) {
    case "applied":
      return { kind: "applied", result: command.result ?? null };
    case "failed":
    case "ambiguous":
    case "cancelled":
    case "expired":
      return { kind: command.state, error };
    default:
      return { kind: "in_flight", state: command.state };
  }
}

/** A command to submit. */
export interface Submission {
  kind: string;
  authority: string;
  args?: Json;
  /** Unset: a UUIDv7 is made once, before the first attempt. */
  key?: string;
  runId?: string;
  deadline?: Date | string;
  /** Pin the command to this generation of the authority. */
  generation?: number;
  /** Not to be claimed before this instant (recorded at once; cancellable until it starts). */
  notBefore?: Date | string;
  /** -100..100; unset: the kind's (at most its max_priority). */
  priority?: number;
}

/** The answer to a submission, with the key it was made under: store the key
 * before anything else; resubmitting with it is always safe. */
export type Submitted =
  | { held: false; key: string; command: Command; outcome: Outcome }
  | { held: true; key: string; hold: Hold };

/** A batch item the server refused on its own. Sending it again changes nothing. */
export interface Refused {
  held?: undefined;
  refused: true;
  key: string;
  status: number;
  disposition: Disposition;
  problem: Problem;
}

export type ItemAnswer = (Submitted & { refused?: false }) | Refused;

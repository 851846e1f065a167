// The ledger's HTTP API, called so that a retry can never make a second
// command. Every submission carries an idempotency key, a UUIDv7 made once
// per logical command unless you give one, and is returned with it. A
// request whose answer is lost (connection reset, timeout) or refused for
// the moment (429, 500, 502, 503, 504) is sent again with the same key and
// the same body, after an exponentially growing, fully jittered pause (at
// least the server's Retry-After), bounded in count and in time. Everything
// else is an answer: a problem document becomes a ProblemError at once.

import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

import {
  GaveUpError,
  LedgerError,
  TransientError,
  TransportError,
  UnexpectedAnswerError,
  problemError,
} from "./errors.js";
import type {
  Command,
  Disposition,
  Explanation,
  HistoryEntry,
  Hold,
  Invoked,
  ItemAnswer,
  Kind,
  Problem,
  Submission,
  Submitted,
} from "./types.js";
import { isTerminal, outcomeOf } from "./types.js";

/** The longest wait the server grants by default; longer waits take several requests. */
export const SERVER_WAIT_CAP_S = 60;
export const RETRYABLE: ReadonlySet<number> = new Set([429, 500, 502, 503, 504]);

/** How retries are bounded and spaced (milliseconds). */
export interface RetryPolicy {
  /** Most attempts of one request, the first included. */
  maxAttempts: number;
  /** No attempt starts after this long since the first. */
  maxElapsedMs: number;
  /** The pause before the second attempt is drawn from [0, baseDelayMs]; the
   * bound doubles with each attempt (full jitter) up to maxDelayMs. */
  baseDelayMs: number;
  maxDelayMs: number;
  /** How long one attempt may take, beyond any wait it asks the server for. */
  attemptTimeoutMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = {
  maxAttempts: 8,
  maxElapsedMs: 60_000,
  baseDelayMs: 100,
  maxDelayMs: 10_000,
  attemptTimeoutMs: 30_000,
};

/** Full jitter: a pause drawn uniformly from [0, min(max, base * 2^(attempt-1))]. */
export function backoffMs(policy: RetryPolicy, attempt: number): number {
  const bound = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** Math.min(attempt - 1, 20));
  return Math.random() * bound;
}

/** `Retry-After` in milliseconds: delta-seconds or an HTTP date. */
export function retryAfterMs(value: string | null | undefined): number | undefined {
  if (!value) return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const when = Date.parse(v);
  return Number.isNaN(when) ? undefined : Math.max(0, when - Date.now());
}

/** A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then random bits. */
export function uuid7(): string {
  const b = randomBytes(16);
  const ms = BigInt(Date.now());
  for (let i = 0; i < 6; i++) b[i] = Number((ms >> BigInt(8 * (5 - i))) & 0xffn);
  b[6] = (b[6]! & 0x0f) | 0x70;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const h = b.toString("hex");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

export interface SubmitOptions {
  /** Answer once the command is terminal, or after this many seconds (at most 60). */
  waitS?: number;
}

export interface InvokeOptions {
  /** The agent run the call belongs to. */
  runId?: string;
  /** Defaults to the authority the catalog names for the tool. */
  authority?: string;
  deadline?: Date | string;
  /** Not to be claimed before this instant (recorded at once). */
  notBefore?: Date | string;
  /** -100..100; unset: the kind's (at most its max_priority). */
  priority?: number;
  /** How long the server waits for the outcome (default 30 s). */
  waitS?: number;
}

type Raw = Record<string, unknown>;

interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

/** A client of one ledger API, with one bearer token. */
export class Client {
  readonly base: string;
  readonly retry: RetryPolicy;

  constructor(
    base: string,
    private readonly token: string,
    retry: Partial<RetryPolicy> = {},
  ) {
    const url = new URL(base);
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new TypeError(`not an http(s) URL: ${base}`);
    this.base = base.replace(/\/+$/, "");
    this.retry = { ...DEFAULT_RETRY, ...retry };
  }

  private trace: Record<string, string> = {};

  /** The same API as another principal. */
  withToken(token: string): Client {
    const other = new Client(this.base, token, this.retry);
    other.trace = { ...this.trace };
    return other;
  }

  /**
   * The same API, each request sent in the caller's W3C trace (`traceparent`,
   * and `tracestate`), for example its OpenTelemetry span's: the ledger keeps
   * it with the commands it records and carries it on to the provider. A
   * value that does not conform is ignored by the ledger, as the
   * specification says.
   */
  withTraceContext(traceparent: string, tracestate?: string): Client {
    const other = new Client(this.base, this.token, this.retry);
    other.trace = tracestate ? { traceparent, tracestate } : { traceparent };
    return other;
  }

  /** Records a command (`POST /v1/commands`) and returns it with its key. */
  async submit(s: Submission, options: SubmitOptions = {}): Promise<Submitted> {
    // The key is made once, here, before the first attempt: every retry
    // carries it, so no retry can make a second command.
    const key = s.key ?? uuid7();
    const waitS = clampWait(options.waitS ?? 0);
    const headers: Record<string, string> = { "Idempotency-Key": key };
    if (waitS > 0) headers["Prefer"] = `wait=${waitS}`;
    let r: Answer;
    try {
      r = await this.send("POST", "/v1/commands", body(s), headers, waitS);
    } catch (e) {
      if (e instanceof GaveUpError) e.key = key;
      throw e;
    }
    const j = decode(r);
    if (j["disposition"] === "held") return { held: true, key, hold: j["hold"] as Hold };
    const command = j as unknown as Command;
    return { held: false, key, command, outcome: outcomeOf(command) };
  }

  /** Records up to 500 commands in one request and one commit
   * (`POST /v1/commands/batch`), retrying the whole batch safely (the same
   * keys and bodies: a batch whose answer was lost comes back as replays).
   * One answer per submission, in order; a refused item never fails the batch. */
  async submitBatch(batch: readonly Submission[]): Promise<ItemAnswer[]> {
    const keys = batch.map((s) => s.key ?? uuid7());
    const items = batch.map((s, i) => ({ ...body(s), idempotency_key: keys[i] }));
    const r = await this.send("POST", "/v1/commands/batch", { items }, {}, 0);
    const answers = decode(r)["items"];
    if (!Array.isArray(answers) || answers.length !== keys.length) {
      throw new UnexpectedAnswerError(r.status, `a batch of ${keys.length} answered with ${r.text}`);
    }
    return answers.map((a: Raw, i) => item(a, keys[i]!));
  }

  async get(id: string): Promise<Command> {
    return decode(await this.send("GET", `/v1/commands/${encodeURIComponent(id)}`, undefined, {}, 0)) as unknown as Command;
  }

  /** The command once it is terminal, or as it is when `timeoutS` have
   * passed. The server wakes the request when it finishes: no polling. */
  async wait(id: string, timeoutS: number): Promise<Command> {
    const until = Date.now() + timeoutS * 1000;
    for (;;) {
      const left = clampWait((until - Date.now()) / 1000);
      const path = `/v1/commands/${encodeURIComponent(id)}?wait=${left}`;
      const command = decode(await this.send("GET", path, undefined, {}, left)) as unknown as Command;
      if (isTerminal(command.state) || Date.now() + 1000 > until) return command;
    }
  }

  /** Cancels a command before its effect starts (ConflictError,
   * `cancel-too-late`, after). Repeating it is harmless. */
  async cancel(id: string): Promise<Command> {
    const r = await this.send("POST", `/v1/commands/${encodeURIComponent(id)}/cancel`, undefined, {}, 0);
    return decode(r) as unknown as Command;
  }

  /** Every state change of a command, oldest first. */
  async history(id: string): Promise<HistoryEntry[]> {
    const r = await this.send("GET", `/v1/commands/${encodeURIComponent(id)}/history`, undefined, {}, 0);
    return decode(r)["entries"] as HistoryEntry[];
  }

  /** The kinds the ledger knows (`GET /v1/kinds`). */
  async kinds(): Promise<Kind[]> {
    return decode(await this.send("GET", "/v1/kinds", undefined, {}, 0))["items"] as Kind[];
  }

  /** Records an agent's tool call as an intent (`POST /v1/invoke`) and waits
   * for its outcome. Copies of one call (retried, spelled differently, sent
   * by another worker) make one execution; the same run and arguments later
   * get the same answer (`replay`). */
  async invoke(tool: string, args: Raw = {}, options: InvokeOptions = {}): Promise<Invoked> {
    const b: Raw = { tool, args };
    if (options.runId !== undefined) b["runId"] = options.runId;
    if (options.authority !== undefined) b["authority"] = options.authority;
    if (options.deadline !== undefined) b["deadline"] = instant(options.deadline);
    if (options.notBefore !== undefined) b["notBefore"] = instant(options.notBefore);
    if (options.priority !== undefined) b["priority"] = options.priority;
    const waitS = clampWait(options.waitS ?? 30);
    const r = await this.send("POST", "/v1/invoke", b, { Prefer: `wait=${waitS}` }, waitS);
    return decode(r) as unknown as Invoked;
  }

  /** What the ledger would make of a request (canonical form, fingerprint,
   * rules, policy); records nothing. */
  async explain(kind: string, args: Raw = {}, options: { authority?: string; runId?: string } = {}): Promise<Explanation> {
    const b: Raw = { kind, args };
    if (options.authority !== undefined) b["authority"] = options.authority;
    if (options.runId !== undefined) b["run_id"] = options.runId;
    return decode(await this.send("POST", "/v1/intents/explain", b, {}, 0)) as unknown as Explanation;
  }

  /** The one place requests are sent and retried. */
  private async send(method: string, path: string, payload: unknown, headers: Record<string, string>, waitS: number): Promise<Answer> {
    const text = payload === undefined ? undefined : JSON.stringify(payload);
    const started = Date.now();
    for (let attempt = 1; ; attempt++) {
      let failure: LedgerError;
      let hint: number | undefined;
      try {
        const r = await fetch(this.base + path, {
          method,
          headers: {
            Authorization: `Bearer ${this.token}`,
            Accept: "application/json",
            ...(text === undefined ? {} : { "Content-Type": "application/json" }),
            ...this.trace,
            ...headers,
          },
          body: text,
          signal: AbortSignal.timeout(this.retry.attemptTimeoutMs + waitS * 1000),
        });
        const answer = { status: r.status, headers: r.headers, text: await r.text() };
        if (!RETRYABLE.has(r.status)) return answer;
        hint = retryAfterMs(r.headers.get("retry-after"));
        failure = new TransientError(r.status, answer.text, hint);
      } catch (e) {
        failure = new TransportError(describe(e));
      }
      const pause = Math.max(backoffMs(this.retry, attempt), hint ?? 0);
      const elapsed = Date.now() - started;
      if (attempt >= this.retry.maxAttempts || elapsed + pause > this.retry.maxElapsedMs) {
        throw new GaveUpError(attempt, elapsed, failure);
      }
      await sleep(pause);
    }
  }
}

function clampWait(seconds: number): number {
  return Math.floor(Math.min(Math.max(seconds, 0), SERVER_WAIT_CAP_S));
}

function instant(d: Date | string): string {
  return typeof d === "string" ? d : d.toISOString();
}

/** The body `POST /v1/commands` takes, and nothing else. */
export function body(s: Submission): Raw {
  const b: Raw = {
    kind: s.kind,
    authority: s.generation === undefined ? s.authority : { id: s.authority, generation: s.generation },
    args: s.args ?? {},
  };
  if (s.runId !== undefined) b["run_id"] = s.runId;
  if (s.deadline !== undefined) b["deadline"] = instant(s.deadline);
  if (s.notBefore !== undefined) b["not_before"] = instant(s.notBefore);
  if (s.priority !== undefined) b["priority"] = s.priority;
  return b;
}

function describe(e: unknown): string {
  if (e instanceof Error) {
    const cause = (e as { cause?: unknown }).cause;
    return cause instanceof Error ? `${e.message}: ${cause.message}` : `${e.name}: ${e.message}`;
  }
  return String(e);
}

function decode(r: Answer): Raw {
  let j: unknown;
  try {
    j = JSON.parse(r.text);
  } catch {
    if (r.status >= 400) throw problemError(r.status, { type: "", title: "", status: r.status, detail: r.text });
    throw new UnexpectedAnswerError(r.status, r.text);
  }
  if (r.status >= 400) {
    const p = (j && typeof j === "object" ? j : { detail: r.text }) as Problem;
    throw problemError(r.status, p);
  }
  return j as Raw;
}

function item(a: Raw, key: string): ItemAnswer {
  if (a["command"]) {
    const command = a["command"] as Command;
    return { held: false, key, command, outcome: outcomeOf(command) };
  }
  if (a["hold"]) return { held: true, key, hold: (a["hold"] as Raw)["hold"] as Hold };
  return {
    refused: true,
    key,
    status: Number(a["status"] ?? 0),
    disposition: a["disposition"] as Disposition,
    problem: (a["problem"] ?? {}) as Problem,
  };
}

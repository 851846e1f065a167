// The client against a live ledger, with and without a proxy that loses answers.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";

import { Client, ConflictError, GaveUpError, KeyConflictError, ProblemError, TransportError } from "../dist/index.js";
import { FAST, commandCount, deadUrl, env, newToken, sinkTraceparents } from "./helpers.mjs";
import { Proxy } from "./proxy.mjs";

const refundArgs = (who) => ({ to: `${who}-${randomUUID().slice(0, 8)}@example.com`, amount: "4.00 USD" });

test("a lost answer is resent under the same key and comes back as a replay", async () => {
  const token = newToken();
  const proxy = await new Proxy(env("COMMAND_LEDGER_URL")).start();
  proxy.add({ method: "POST", path: "/v1/commands", action: "drop" });
  try {
    const client = new Client(proxy.url, token, FAST);
    const submitted = await client.submit({ kind: "refund", authority: "payments", args: refundArgs("lost") }, { waitS: 10 });
    const sent = proxy.requests("POST", "/v1/commands");
    assert.deepEqual(sent.map((s) => s.action), ["drop", "forward"]);
    assert.equal(sent[0].headers["idempotency-key"], submitted.key);
    assert.equal(sent[1].headers["idempotency-key"], submitted.key);
    assert.equal(sent[0].body, sent[1].body);
    assert.equal(submitted.held, false);
    assert.equal(submitted.command.disposition, "replay", "the server had committed the first");
    assert.equal(submitted.outcome.kind, "applied");
    assert.equal(await commandCount(token), 1, "one command, however many attempts");

    const again = await client.submit({ kind: "refund", authority: "payments", args: submitted.command.args, key: submitted.key });
    assert.equal(again.command.id, submitted.command.id);
    assert.equal(again.command.disposition, "replay");
    assert.equal(await commandCount(token), 1);
  } finally {
    await proxy.close();
  }
});

test("a caller's trace context reaches the provider with the command", async () => {
  const parent = `00-${randomUUID().replaceAll("-", "")}-00f067aa0ba902b7-01`;
  const client = new Client(env("COMMAND_LEDGER_URL"), newToken(), FAST).withTraceContext(parent, "congo=1");
  const submitted = await client.submit({ kind: "refund", authority: "payments", args: refundArgs("traced") }, { waitS: 10 });
  assert.equal(submitted.outcome.kind, "applied");
  assert.deepEqual(sinkTraceparents(submitted.command.id), [parent]);
});

test("Retry-After is honoured before the next attempt", async () => {
  const token = newToken();
  const proxy = await new Proxy(env("COMMAND_LEDGER_URL")).start();
  proxy.add({ method: "POST", path: "/v1/commands", action: "status", status: 429, retryAfter: "2" });
  try {
    const started = Date.now();
    const submitted = await new Client(proxy.url, token, FAST).submit({ kind: "steer", authority: "agent-7", args: { direction: "left" } });
    const elapsed = Date.now() - started;
    assert.ok(elapsed >= 2000, `retried after ${elapsed} ms, before Retry-After: 2`);
    assert.deepEqual(proxy.requests("POST", "/v1/commands").map((s) => s.action), ["status", "forward"]);
    assert.equal(submitted.command.disposition, "new");
    assert.equal(await commandCount(token), 1);
  } finally {
    await proxy.close();
  }
});

test("5xx is retried, and a client gives up within its bounds keeping the key", async () => {
  const token = newToken();
  const proxy = await new Proxy(env("COMMAND_LEDGER_URL")).start();
  proxy.add({ method: "POST", path: "/v1/commands", action: "status", status: 503, times: 100 });
  try {
    const client = new Client(proxy.url, token, { maxAttempts: 3, maxElapsedMs: 10_000, baseDelayMs: 10, maxDelayMs: 50 });
    const e = await client.submit({ kind: "steer", authority: "agent-7", args: { direction: "up" } }).catch((e) => e);
    assert.ok(e instanceof GaveUpError, String(e));
    assert.equal(e.attempts, 3);
    const keys = new Set(proxy.requests("POST", "/v1/commands").map((s) => s.headers["idempotency-key"]));
    assert.deepEqual([...keys], [e.key], "every attempt under the one key, handed back to resubmit with");
    assert.equal(await commandCount(token), 0);
  } finally {
    await proxy.close();
  }
});

test("an unreachable ledger is a transport failure given up on", async () => {
  const client = new Client(await deadUrl(), newToken(), { maxAttempts: 2, baseDelayMs: 10, maxDelayMs: 20, attemptTimeoutMs: 2000 });
  const e = await client.submit({ kind: "steer", authority: "agent-7", args: {} }).catch((e) => e);
  assert.ok(e instanceof GaveUpError && e.last instanceof TransportError, String(e));
  assert.ok(e.key);
});

test("a key conflict is a typed error, sent once", async () => {
  const token = newToken();
  const key = `k-${randomUUID()}`;
  await new Client(env("COMMAND_LEDGER_URL"), token, FAST).submit({ kind: "steer", authority: "agent-7", args: { direction: "left" }, key });
  const proxy = await new Proxy(env("COMMAND_LEDGER_URL")).start();
  try {
    const e = await new Client(proxy.url, token, FAST)
      .submit({ kind: "steer", authority: "agent-7", args: { direction: "right" }, key })
      .catch((e) => e);
    assert.ok(e instanceof KeyConflictError, String(e));
    assert.equal(e.status, 422);
    assert.equal(e.type, "/problems/idempotency-key-conflict");
    assert.equal(proxy.requests("POST", "/v1/commands").length, 1, "a 422 is a decision, never retried");
    assert.equal(await commandCount(token), 1);
  } finally {
    await proxy.close();
  }
});

test("get, wait, cancel, history, and a 409", async () => {
  const client = new Client(env("COMMAND_LEDGER_URL"), newToken(), FAST);
  const submitted = await client.submit({ kind: "steer", authority: "agent-7", args: { direction: "left" } });
  const { command } = submitted;
  assert.equal(command.state, "pending");
  assert.equal(submitted.key, command.idempotency_key);
  assert.equal((await client.get(command.id)).id, command.id);
  assert.equal((await client.wait(command.id, 1)).state, "pending", "no custodian serves agent-7");
  assert.equal((await client.cancel(command.id)).state, "cancelled");
  assert.equal((await client.cancel(command.id)).state, "cancelled", "repeating a cancel is harmless");
  const history = await client.history(command.id);
  assert.deepEqual(history.map((h) => [h.from ?? null, h.to]), [[null, "pending"], ["pending", "cancelled"]]);

  const applied = await client.submit({ kind: "refund", authority: "payments", args: refundArgs("late") }, { waitS: 10 });
  assert.equal(applied.outcome.kind, "applied");
  assert.ok(applied.outcome.result.refund_id);
  const e = await client.cancel(applied.command.id).catch((e) => e);
  assert.ok(e instanceof ConflictError, String(e));
  assert.equal(e.type, "/problems/cancel-too-late");
});

test("a command for later is recorded now, shown scheduled, and cancellable", async () => {
  const client = new Client(env("COMMAND_LEDGER_URL"), newToken(), FAST);
  const later = new Date(Date.now() + 3600_000);
  const { command } = await client.submit({ kind: "steer", authority: "agent-7", args: { direction: "up" }, notBefore: later, priority: -3 });
  assert.equal(command.state, "pending");
  assert.equal(command.scheduled, true);
  assert.equal(new Date(command.not_before).getTime(), later.getTime());
  assert.equal(command.priority, -3);
  assert.equal((await client.get(command.id)).scheduled, true);
  assert.equal((await client.cancel(command.id)).state, "cancelled");
  const e = await client.submit({ kind: "steer", authority: "agent-7", args: { direction: "up" }, priority: 5 }).catch((e) => e);
  assert.ok(e instanceof ProblemError, String(e));
  assert.equal(e.status, 400);
  assert.match(e.detail, /max_priority/);
});

test("ambiguous is an outcome, not an exception", async () => {
  const client = new Client(env("COMMAND_LEDGER_URL"), newToken(), FAST);
  // The demo sink applies it and never answers.
  const s = await client.submit({ kind: "refund", authority: "payments", args: { ...refundArgs("hang"), mode: "hang" } }, { waitS: 15 });
  assert.equal(s.command.state, "ambiguous");
  assert.deepEqual(s.outcome.kind, "ambiguous");
  assert.equal(s.outcome.error.reason, "timeout");
});

test("a batch answers each item on its own", async () => {
  const token = newToken();
  const client = new Client(env("COMMAND_LEDGER_URL"), token, FAST);
  const items = [
    { kind: "steer", authority: "agent-7", args: { direction: "left" }, key: `b1-${randomUUID()}` },
    { kind: "Bad Kind", authority: "agent-7", args: {}, key: `b2-${randomUUID()}` },
    { kind: "steer", authority: "agent-7", args: { direction: "right" } },
  ];
  const answers = await client.submitBatch(items);
  assert.deepEqual(answers.slice(0, 2).map((a) => a.key), [items[0].key, items[1].key]);
  assert.equal(answers[0].command.disposition, "new");
  assert.equal(answers[1].refused, true);
  assert.equal(answers[1].status, 400);
  assert.equal(answers[1].problem.type, "/problems/invalid-body");
  assert.equal(answers[2].command.state, "pending");
  const again = await client.submitBatch(items.map((s, i) => ({ ...s, key: answers[i].key })));
  assert.deepEqual(again.map((a) => a.command?.disposition ?? a.disposition), ["replay", "invalid", "replay"]);
  assert.equal(await commandCount(token), 2);
});

test("invoke, explain and kinds", async () => {
  const client = new Client(env("COMMAND_LEDGER_URL"), newToken(), FAST);
  const kinds = await client.kinds();
  assert.equal(kinds.find((k) => k.kind === "refund").authority, "payments");
  const who = `inv-${randomUUID().slice(0, 8)}@example.com`;
  const explained = await client.explain("refund", { to: who.toUpperCase(), amount: "$3" });
  assert.equal(explained.canonical.args.to, who);
  const invoked = await client.invoke("refund", { to: who, amount: "3.00 USD" }, { runId: "run-1" });
  assert.deepEqual([invoked.outcome, invoked.state], ["executed", "applied"]);
  assert.equal(invoked.fingerprint, explained.fingerprint);
  assert.equal((await client.invoke("refund", { amount: "3 USD", to: who }, { runId: "run-1" })).outcome, "replay");
});

test("a problem keeps its whole document", async () => {
  const client = new Client(env("COMMAND_LEDGER_URL"), newToken(), FAST);
  const e = await client.get(randomUUID()).catch((e) => e);
  assert.ok(e instanceof ProblemError, String(e));
  assert.equal(e.status, 404);
  assert.equal(e.type, "/problems/not-found");
  assert.equal(e.problem.status, 404);
});

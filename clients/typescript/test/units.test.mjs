// What needs no server: keys, backoff, what is retried, request bodies, outcomes.
import assert from "node:assert/strict";
import { test } from "node:test";

import { DEFAULT_RETRY, RETRYABLE, backoffMs, body, outcomeOf, retryAfterMs, uuid7 } from "../dist/index.js";

test("a key is a UUIDv7 in time order", () => {
  const keys = Array.from({ length: 50 }, uuid7);
  for (const k of keys) {
    assert.match(k, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.ok(Math.abs(parseInt(k.replace(/-/g, "").slice(0, 12), 16) - Date.now()) < 60_000);
  }
  assert.equal(new Set(keys).size, 50);
});

test("backoff is jittered within its exponential bound", () => {
  for (let attempt = 1; attempt < 30; attempt++) {
    const bound = Math.min(DEFAULT_RETRY.maxDelayMs, DEFAULT_RETRY.baseDelayMs * 2 ** Math.min(attempt - 1, 20));
    for (let i = 0; i < 50; i++) {
      const p = backoffMs(DEFAULT_RETRY, attempt);
      assert.ok(p >= 0 && p <= bound);
    }
  }
  assert.ok(new Set(Array.from({ length: 20 }, () => backoffMs(DEFAULT_RETRY, 5))).size > 1);
});

test("only transient statuses are retried", () => {
  assert.deepEqual([...RETRYABLE].sort(), [429, 500, 502, 503, 504]);
  for (const s of [200, 202, 400, 401, 403, 404, 405, 408, 409, 413, 415, 422]) assert.ok(!RETRYABLE.has(s), String(s));
});

test("Retry-After takes seconds and dates", () => {
  assert.equal(retryAfterMs("3"), 3000);
  assert.equal(retryAfterMs(null), undefined);
  assert.equal(retryAfterMs("soon"), undefined);
  const ms = retryAfterMs(new Date(Date.now() + 30_000).toUTCString());
  assert.ok(ms >= 25_000 && ms <= 31_000, String(ms));
});

test("a submission body has only what the API takes", () => {
  assert.deepEqual(body({ kind: "refund", authority: "payments", args: { amount: "12.00 USD" }, key: "k", runId: "r1", generation: 3 }), {
    kind: "refund",
    authority: { id: "payments", generation: 3 },
    args: { amount: "12.00 USD" },
    run_id: "r1",
  });
});

test("ambiguous is an outcome of its own", () => {
  assert.deepEqual(outcomeOf({ state: "ambiguous", error: { reason: "timeout" } }), { kind: "ambiguous", error: { reason: "timeout" } });
  assert.deepEqual(outcomeOf({ state: "effect_started" }), { kind: "in_flight", state: "effect_started" });
});

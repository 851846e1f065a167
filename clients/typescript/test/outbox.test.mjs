// The device outbox: written down before it is sent; a device killed at any
// step of a flush (SIGKILL, as a power loss) resends on its next flush, and
// each command is in the ledger exactly once.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";

import { Client, Outbox } from "../dist/index.js";
import { FAST, HERE, commandCount, deadUrl, env, newToken } from "./helpers.mjs";

const scratch = mkdtempSync(join(tmpdir(), "ts-outbox-"));
after(() => rmSync(scratch, { recursive: true, force: true }));
const dbPath = () => join(scratch, `${randomUUID()}.sqlite`);

function flushInAProcess(token, db, batch, crash) {
  const args = [join(HERE, "outbox-worker.mjs"), db, String(batch), ...(crash ? [crash] : [])];
  return spawnSync(process.execPath, args, {
    env: { ...process.env, COMMAND_LEDGER_TOKEN: token },
    encoding: "utf8",
    timeout: 120_000,
  });
}
const killed = (out) => out.signal === "SIGKILL";

test("a device killed at every step of a flush ends with each command once", async () => {
  const token = newToken();
  const db = dbPath();
  let outbox = await Outbox.open(db);
  const keys = ["left", "right", "up"].map((direction) => outbox.enqueue("steer", "agent-7", { direction }));
  outbox.close();
  assert.equal(await commandCount(token), 0, "recorded on the device, nothing sent");

  // Power lost before the first send: nothing reached the ledger.
  assert.ok(killed(flushInAProcess(token, db, 1, "before_send")));
  assert.equal(await commandCount(token), 0);
  // Lost after the server committed the first and answered, before the answer was written down.
  assert.ok(killed(flushInAProcess(token, db, 1, "after_answer")));
  assert.equal(await commandCount(token), 1);
  // Lost right after writing the first answer down: the first is resent (a replay) and recorded.
  assert.ok(killed(flushInAProcess(token, db, 1, "after_record")));
  assert.equal(await commandCount(token), 1);
  // Power back: everything left goes, once.
  const out = flushInAProcess(token, db, 1);
  assert.equal(out.status, 0, out.stderr);
  assert.deepEqual(JSON.parse(out.stdout), { answered: 2, refused: 0, pending: 0, stoppedBy: null });
  assert.equal(await commandCount(token), 3, "each command exactly once");

  outbox = await Outbox.open(db);
  try {
    const entries = outbox.entries();
    assert.deepEqual(entries.map((e) => e.key), keys);
    assert.deepEqual(entries.map((e) => e.answer.disposition), ["replay", "new", "new"]);
    const report = await outbox.flush(new Client(env("COMMAND_LEDGER_URL"), token, FAST));
    assert.deepEqual(report, { answered: 0, refused: 0, pending: 0, stoppedBy: null });
    assert.equal(await commandCount(token), 3);
  } finally {
    outbox.close();
  }
});

test("a device killed after a whole batch was answered resends it as replays", async () => {
  const token = newToken();
  const db = dbPath();
  const outbox = await Outbox.open(db);
  for (const direction of ["left", "right", "up"]) outbox.enqueue("steer", "agent-7", { direction });
  assert.ok(killed(flushInAProcess(token, db, 500, "after_answer")));
  assert.equal(await commandCount(token), 3, "the batch committed");
  assert.equal(JSON.parse(flushInAProcess(token, db, 500).stdout).answered, 3);
  assert.equal(await commandCount(token), 3);
  assert.deepEqual(outbox.entries().map((e) => e.answer.disposition), ["replay", "replay", "replay"]);
  outbox.close();
});

test("a batch flush records a refused item as its answer and never resends it", async () => {
  const token = newToken();
  const client = new Client(env("COMMAND_LEDGER_URL"), token, FAST);
  const taken = `taken-${randomUUID()}`;
  await client.submit({ kind: "steer", authority: "agent-7", args: { direction: "left" }, key: taken });
  const outbox = await Outbox.open(dbPath());
  try {
    for (let step = 0; step < 5; step++) outbox.enqueue("steer", "agent-7", { step });
    const conflict = outbox.enqueue("steer", "agent-7", { direction: "right" }, { key: taken });
    const invalid = outbox.enqueue("Bad Kind", "agent-7", {});
    let report = await outbox.flush(client);
    assert.deepEqual([report.answered, report.refused, report.pending], [5, 2, 0]);
    assert.equal(await commandCount(token), 6);
    assert.equal(outbox.answer(conflict).refused.type, "/problems/idempotency-key-conflict");
    assert.equal(outbox.answer(invalid).refused.type, "/problems/invalid-body");
    report = await outbox.flush(client);
    assert.deepEqual([report.answered, report.refused], [0, 0], "answers, refusals included, are final");
    assert.equal(await commandCount(token), 6);
  } finally {
    outbox.close();
  }
});

test("an outbox entry keeps its schedule and priority to the server", async () => {
  const client = new Client(env("COMMAND_LEDGER_URL"), newToken(), FAST);
  const later = new Date(Date.now() + 3600_000);
  const outbox = await Outbox.open(dbPath());
  try {
    const key = outbox.enqueue("steer", "agent-7", { direction: "down" }, { notBefore: later, priority: -2 });
    assert.equal((await outbox.flush(client)).answered, 1);
    const answer = outbox.answer(key);
    assert.deepEqual([answer.scheduled, answer.priority], [true, -2]);
    assert.equal(new Date(answer.not_before).getTime(), later.getTime());
    await client.cancel(answer.id);
  } finally {
    outbox.close();
  }
});

test("with the network down a flush keeps everything for the next one", async () => {
  const token = newToken();
  const offline = new Client(await deadUrl(), token, { maxAttempts: 2, maxElapsedMs: 2000, baseDelayMs: 10, maxDelayMs: 50, attemptTimeoutMs: 2000 });
  const outbox = await Outbox.open(dbPath());
  try {
    for (const direction of ["left", "right"]) outbox.enqueue("steer", "agent-7", { direction });
    let report = await outbox.flush(offline);
    assert.deepEqual([report.answered, report.pending], [0, 2]);
    assert.ok(report.stoppedBy);
    assert.equal(await commandCount(token), 0);
    report = await outbox.flush(new Client(env("COMMAND_LEDGER_URL"), token, FAST));
    assert.deepEqual([report.answered, report.refused, report.pending], [2, 0, 0]);
    assert.equal(await commandCount(token), 2);
    assert.throws(() => outbox.enqueue("steer", "agent-7", {}, { key: outbox.entries()[0].key }), /another command under the key/);
  } finally {
    outbox.close();
  }
});

test("the outbox is durable before it answers", async () => {
  // node:sqlite (Node 22.5+) keeps a write-ahead log; SQLite in WebAssembly
  // (older Node) has none and keeps a rollback journal: both sync in full.
  const nodeSqlite = await import("node:sqlite").then(() => true, () => false);
  const outbox = await Outbox.open(dbPath());
  try {
    assert.equal(outbox.pragma("journal_mode"), nodeSqlite ? "wal" : "delete");
    assert.equal(outbox.pragma("synchronous"), 2); // FULL
  } finally {
    outbox.close();
  }
});

test("a command enqueued again under its key is the entry already recorded, sent once", async () => {
  const token = newToken();
  const client = new Client(env("COMMAND_LEDGER_URL"), token, FAST);
  const db = dbPath();
  // A program run twice: each run enqueues the same command under the same key.
  for (let run = 0; run < 2; run++) {
    const outbox = await Outbox.open(db);
    try {
      const key = outbox.enqueue("steer", "agent-7", { direction: "left" }, { key: "steer-left-once" });
      assert.equal(key, "steer-left-once");
      await outbox.flush(client);
      assert.equal(outbox.entries().length, 1);
      assert.throws(
        () => outbox.enqueue("steer", "agent-7", { direction: "right" }, { key: "steer-left-once" }),
        /another command under the key steer-left-once/,
      );
    } finally {
      outbox.close();
    }
  }
  assert.equal(await commandCount(token), 1, "sent once, whatever the runs");
});

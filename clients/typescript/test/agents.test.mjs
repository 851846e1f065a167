// An agent's tool made at-most-once by a higher-order function: three racing
// spellings of one refund make one execution at the demo sink.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";

import { Client, ledgerTool } from "../dist/index.js";
import { FAST, env, newToken, sinkApplied } from "./helpers.mjs";

const spellings = (who) => [
  { to: `${who}@Example.com`, amount: "$12.00" },
  { amount: "12.00 USD", to: `${who}@example.com` },
  { to: `${who.toUpperCase()}@example.com`, amount: "1200 cents", currency: "usd" },
];

test("three racing spellings through the wrapper make one execution", async () => {
  const client = new Client(env("COMMAND_LEDGER_URL"), newToken(), FAST);
  // A tool as an agent framework holds it: one arguments object, then the run's context.
  async function refund(args, context) {
    throw new Error("the tool's body never runs: the ledger's executor does");
  }
  const tool = ledgerTool(client, { runId: (context) => context.runId })(refund);
  assert.equal(tool.name, "refund");
  const who = `ts-race-${randomUUID().slice(0, 8)}`;
  const answers = await Promise.all(spellings(who).map((args, i) => tool(args, { runId: `run-${i}` })));
  const ids = new Set(answers.map((a) => a.command_id));
  assert.equal(ids.size, 1, JSON.stringify(answers));
  const outcomes = answers.map((a) => a.outcome).sort();
  assert.equal(outcomes.filter((o) => o === "executed").length, 1, outcomes.join());
  assert.ok(outcomes.every((o) => ["executed", "coalesced", "replay"].includes(o)), outcomes.join());
  assert.ok(answers.every((a) => a.state === "applied"));
  assert.equal(sinkApplied([...ids][0]), 1, "the sink applied the refund once");
});

test("the same run calling again gets a replay", async () => {
  const client = new Client(env("COMMAND_LEDGER_URL"), newToken(), FAST);
  const refund = ledgerTool(client, { kind: "refund", runId: "run-again" })(async () => {});
  const who = `ts-again-${randomUUID().slice(0, 8)}@example.com`;
  const first = await refund({ to: who, amount: "2.00 USD", currency: undefined });
  const second = await refund({ amount: "$2", to: who });
  assert.deepEqual([first.outcome, second.outcome], ["executed", "replay"]);
  assert.equal(first.command_id, second.command_id);
});

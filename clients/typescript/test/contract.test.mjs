// Every state, disposition, invoke outcome and problem type the contract
// names is known to the client's types.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { DISPOSITIONS, INVOKE_OUTCOMES, PROBLEM_TYPES, STATES } from "../dist/index.js";
import { REPO } from "./helpers.mjs";

const doc = JSON.parse(readFileSync(join(REPO, "docs", "openapi.json"), "utf8"));
const schemas = doc.components.schemas;

function* walk(node, path = []) {
  if (node && typeof node === "object") {
    for (const [k, v] of Object.entries(node)) yield* walk(v, [...path, k]);
  } else {
    yield [path, node];
  }
}
const backticked = (text) => new Set([...text.matchAll(/`([a-z_]+)`/g)].map((m) => m[1]));

test("every state in the contract is known", () => {
  const states = new Set();
  for (const [path, value] of walk(doc)) {
    // The list's `state` filter spells out the closed set as a pattern.
    if (path.at(-1) === "pattern" && typeof value === "string" && value.includes("effect_started")) {
      for (const s of value.match(/^\^\((.*)\)\$$/)[1].split("|")) states.add(s);
    }
    if (path.at(-2) === "enum" && path.includes("state")) states.add(value);
  }
  assert.ok(states.has("applied"), "the contract no longer names the states where this test looks");
  assert.deepEqual([...states].sort(), [...STATES].sort());
});

test("every disposition and invoke outcome in the contract is known", () => {
  const dispositions = backticked(schemas.ItemAnswer.properties.disposition.description);
  assert.ok(dispositions.size > 0);
  for (const d of dispositions) assert.ok(DISPOSITIONS.includes(d), d);
  assert.deepEqual([...backticked(schemas.InvokeView.properties.outcome.description)].sort(), [...INVOKE_OUTCOMES].sort());
});

test("every problem type is known", () => {
  const named = new Set();
  for (const [, v] of walk(doc)) if (typeof v === "string" && /^\/problems\/[a-z-]+$/.test(v)) named.add(v);
  // The document does not list problem types (its Problem schema leaves
  // `type` a string), so the server's one mapping of errors to types is read too.
  const source = readFileSync(join(REPO, "src", "http", "error.rs"), "utf8");
  const sent = new Set([...source.matchAll(/"(\/problems\/[a-z-]+)"/g)].map((m) => m[1]));
  assert.ok(sent.size > 0, "src/http/error.rs no longer maps errors to problem types where this test looks");
  assert.deepEqual([...new Set([...named, ...sent])].sort(), [...PROBLEM_TYPES].sort());
});

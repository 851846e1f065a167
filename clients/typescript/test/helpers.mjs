// The live ledger the suite runs against, as scripts/clients-test starts it
// (COMMAND_LEDGER_URL, COMMAND_LEDGER_BIN, COMMAND_LEDGER_STATE_DIR,
// SINK_LOG). Every test that uses the ledger makes a principal of its own.
import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const HERE = dirname(fileURLToPath(import.meta.url));
export const REPO = join(HERE, "..", "..", "..");

/** Quick retries for tests: the policy's shape, not its patience, is under test. */
export const FAST = { maxAttempts: 5, maxElapsedMs: 20_000, baseDelayMs: 50, maxDelayMs: 200, attemptTimeoutMs: 20_000 };

export function env(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run the suite with scripts/clients-test (it starts a serve)`);
  return value;
}

/** A fresh device principal, its own fleet. */
export function newToken() {
  const principal = `ts-${randomUUID().slice(0, 12)}`;
  return execFileSync(
    env("COMMAND_LEDGER_BIN"),
    ["--state-dir", env("COMMAND_LEDGER_STATE_DIR"), "token", "create", "--principal", principal, "--role", "device"],
    { encoding: "utf8", timeout: 60_000 },
  ).trim();
}

/** How many commands the principal has, read straight from the API (not through the client under test). */
export async function commandCount(token) {
  const r = await fetch(`${env("COMMAND_LEDGER_URL")}/v1/commands?limit=500`, { headers: { Authorization: `Bearer ${token}` } });
  if (!r.ok) throw new Error(`listing commands: ${r.status}`);
  return (await r.json()).items.length;
}

/** How many times the demo sink applied the command's effect. */
/** The `traceparent` of each request the demo sink got for the command. */
export function sinkTraceparents(commandId) {
  return readFileSync(env("SINK_LOG"), "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l))
    .filter((e) => e.key === `cl-${commandId}`)
    .map((e) => e.traceparent);
}

export function sinkApplied(commandId) {
  return readFileSync(env("SINK_LOG"), "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l))
    .filter((e) => e.key === `cl-${commandId}` && e.event === "applied").length;
}

/** A loopback address nothing listens on. */
export async function deadUrl() {
  const { createServer } = await import("node:net");
  const server = createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}

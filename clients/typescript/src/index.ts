// command-ledger's client for TypeScript and JavaScript (Node 20+, ESM):
// submit effect-bearing commands so that a retry can never make a second
// command, keep them in a durable outbox on the device, and route an agent's
// tool calls through intent admission.

export * from "./agents.js";
export * from "./client.js";
export * from "./errors.js";
export * from "./outbox.js";
export * from "./types.js";
export type { components, paths } from "./openapi.js";

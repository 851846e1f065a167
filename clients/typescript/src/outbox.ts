// A device's durable outbox: record before dispatch, extended to the edge.
//
// `enqueue` writes a command, with its idempotency key, into a local SQLite
// file and makes it durable (WAL, synchronous = FULL) before anything is
// sent. `flush` sends what is still unanswered, in the order it was
// recorded, each under its own key, in batches of up to 500
// (`POST /v1/commands/batch`: one request and one commit on the server per
// batch), and writes each answer down. A device that loses power or network
// at any point (before the send, after the server committed but before the
// answer arrived, before the answer was written down) resends on its next
// flush under the same keys, so each command ends in the ledger exactly once.
//
// Definite refusals are answers too: recorded, never resent. A flush stops at
// the first batch it could not get an answer for, leaving it and everything
// after it for the next flush. The file's table is the one the Rust client's
// outbox and `command-ledger outbox` use, so any of them can flush it.
//
// SQLite is Node's own `node:sqlite` where the Node in use has it (22.5 and
// later, in WAL mode), else the `node-sqlite3-wasm` package: SQLite compiled
// to WebAssembly, which needs no compiler to install and writes through
// Node's file system, fsyncing as SQLite asks (it has no WAL: a rollback
// journal, with synchronous = FULL).

import { createRequire } from "node:module";

import type { Client } from "./client.js";
import { uuid7 } from "./client.js";
import { LedgerError } from "./errors.js";

/** Most commands one flush request carries (the server's batch limit). */
export const BATCH = 500;

/** Steps of a flush, for callers that observe them (and tests that kill the process at each). */
export type FlushStep = "before_send" | "after_answer" | "after_record";

export interface Entry {
  key: string;
  kind: string;
  authority: string;
  args: Record<string, unknown>;
  /** The server's answer (the command, `{disposition: "held", hold}` or `{refused: problem}`), once known. */
  answer: Record<string, unknown> | null;
  /** Not to be claimed before this instant (ISO 8601, as recorded). */
  notBefore: string | null;
  /** The priority asked for, if any. */
  priority: number | null;
}

export interface FlushReport {
  /** Recorded, replayed or held during this flush. */
  answered: number;
  /** Refused with a problem (recorded as the answer, not resent). */
  refused: number;
  /** Still waiting for an answer (the flush stopped at the first). */
  pending: number;
  /** Why the flush stopped early, if it did. */
  stoppedBy: string | null;
}

export interface FlushOptions {
  /** Most commands per request (1 to 500). */
  batch?: number;
  observe?: (step: FlushStep, key: string) => void;
}

/** The part of node:sqlite's DatabaseSync used here (node-sqlite3-wasm is adapted to it). */
interface Db {
  exec(sql: string): unknown;
  prepare(sql: string): {
    run(...params: unknown[]): unknown;
    get(...params: unknown[]): unknown;
    all(...params: unknown[]): unknown[];
  };
  close(): unknown;
}

type Row = {
  key: string;
  kind: string;
  authority: string;
  args: string;
  answer: string | null;
  not_before: string | null;
  priority: number | null;
};

const SCHEMA = `
create table if not exists outbox (
    seq integer primary key autoincrement,
    key text not null unique,
    kind text not null,
    authority text not null,
    args text not null,
    recorded_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    answer text,
    answered_at text,
    not_before text,
    priority integer
)`;

async function openDb(path: string): Promise<Db> {
  try {
    const { DatabaseSync } = (await import("node:sqlite" as string)) as { DatabaseSync: new (p: string) => Db };
    return new DatabaseSync(path);
  } catch (e) {
    if ((e as { code?: string }).code !== "ERR_UNKNOWN_BUILTIN_MODULE") throw e;
  }
  // Older Node: SQLite compiled to WebAssembly, writing through Node's file
  // system (each sync an fsync), installed from the registry alone.
  const require = createRequire(import.meta.url);
  let Wasm: { Database: new (p: string) => WasmDb };
  try {
    Wasm = require("node-sqlite3-wasm");
  } catch (e) {
    throw new LedgerError(`the outbox needs node:sqlite (Node 22.5+) or the node-sqlite3-wasm package: ${e}`);
  }
  const db = new Wasm.Database(path);
  return {
    exec: (sql) => db.exec(sql),
    prepare: (sql) => ({
      run: (...params) => db.run(sql, params),
      get: (...params) => db.get(sql, params) ?? undefined,
      all: (...params) => db.all(sql, params),
    }),
    close: () => db.close(),
  };
}

/** The part of node-sqlite3-wasm's Database used here. */
interface WasmDb {
  exec(sql: string): unknown;
  run(sql: string, params: unknown[]): unknown;
  get(sql: string, params: unknown[]): unknown;
  all(sql: string, params: unknown[]): unknown[];
  close(): unknown;
}

/** A durable outbox in one SQLite file. */
export class Outbox {
  private constructor(private readonly db: Db) {}

  /** Opens (or creates) the outbox at `path`. */
  static async open(path: string): Promise<Outbox> {
    const db = await openDb(path);
    db.exec("pragma journal_mode = wal");
    db.exec("pragma synchronous = full");
    db.exec(SCHEMA);
    // Outboxes made before commands had a schedule and a priority get the two columns.
    const columns = new Set((db.prepare("pragma table_info(outbox)").all() as { name: string }[]).map((c) => c.name));
    for (const [column, type] of [
      ["not_before", "text"],
      ["priority", "integer"],
    ] as const) {
      if (!columns.has(column)) db.exec(`alter table outbox add column ${column} ${type}`);
    }
    return new Outbox(db);
  }

  close(): void {
    this.db.close();
  }

  /** A pragma's value, as SQLite reports it. */
  pragma(name: "journal_mode" | "synchronous"): unknown {
    const row = this.db.prepare(`pragma ${name}`).get() as Record<string, unknown>;
    return Object.values(row)[0];
  }

  /** Writes the command down, durably, and returns its key (the one given, or
   * a new UUIDv7). Nothing is sent. A key already in the outbox throws: one
   * key, one entry. */
  enqueue(
    kind: string,
    authority: string,
    args: Record<string, unknown> = {},
    options: { key?: string; notBefore?: Date | string; priority?: number } = {},
  ): string {
    const key = options.key ?? uuid7();
    const notBefore =
      options.notBefore === undefined ? null : typeof options.notBefore === "string" ? options.notBefore : options.notBefore.toISOString();
    const text = JSON.stringify(args);
    // A program run again enqueues its commands again under their own keys:
    // the same command under a key already recorded is that entry (it is
    // sent at most once, answered or not); another command under it is a
    // mistake, refused before anything is sent.
    const recorded = this.db.prepare("select kind, authority, args from outbox where key = ?").get(key) as
      | { kind: string; authority: string; args: string }
      | undefined;
    if (recorded !== undefined) {
      if (recorded.kind !== kind || recorded.authority !== authority || recorded.args !== text) {
        throw new LedgerError(`the outbox holds another command under the key ${key}`);
      }
      return key;
    }
    this.db
      .prepare("insert into outbox (key, kind, authority, args, not_before, priority) values (?, ?, ?, ?, ?, ?)")
      .run(key, kind, authority, text, notBefore, options.priority ?? null);
    return key;
  }

  /** Every entry, in the order recorded. */
  entries(): Entry[] {
    const rows = this.db
      .prepare("select key, kind, authority, args, answer, not_before, priority from outbox order by seq")
      .all() as Row[];
    return rows.map((r) => ({
      key: r.key,
      kind: r.kind,
      authority: r.authority,
      args: JSON.parse(r.args),
      answer: r.answer === null ? null : JSON.parse(r.answer),
      notBefore: r.not_before ?? null,
      priority: r.priority ?? null,
    }));
  }

  /** The answer recorded for `key`, if any. */
  answer(key: string): Record<string, unknown> | null {
    const row = this.db.prepare("select answer from outbox where key = ?").get(key) as { answer: string | null } | undefined;
    return row?.answer ? JSON.parse(row.answer) : null;
  }

  /** Sends every unanswered command (see the module's comment). */
  async flush(client: Client, options: FlushOptions = {}): Promise<FlushReport> {
    const observe = options.observe ?? (() => {});
    const batch = Math.max(1, Math.min(options.batch ?? BATCH, BATCH));
    const report: FlushReport = { answered: 0, refused: 0, pending: 0, stoppedBy: null };
    const unanswered = this.entries().filter((e) => e.answer === null);
    for (let start = 0; start < unanswered.length; start += batch) {
      const chunk = unanswered.slice(start, start + batch);
      for (const e of chunk) observe("before_send", e.key);
      let answers;
      try {
        answers = await client.submitBatch(
          chunk.map((e) => ({
            kind: e.kind,
            authority: e.authority,
            args: e.args,
            key: e.key,
            ...(e.notBefore === null ? {} : { notBefore: e.notBefore }),
            ...(e.priority === null ? {} : { priority: e.priority }),
          })),
        );
      } catch (e) {
        if (!(e instanceof LedgerError)) throw e;
        report.pending = unanswered.length - start;
        report.stoppedBy = e.message;
        return report;
      }
      for (const a of answers) observe("after_answer", a.key);
      const recorded: [string, string][] = answers.map((a) => {
        if (a.refused) {
          report.refused += 1;
          return [JSON.stringify({ refused: a.problem }), a.key];
        }
        report.answered += 1;
        return [JSON.stringify(a.held ? { disposition: "held", hold: a.hold } : a.command), a.key];
      });
      // Every answer of the batch written down in one transaction.
      const update = this.db.prepare(
        "update outbox set answer = ?, answered_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') where key = ? and answer is null",
      );
      this.db.exec("begin immediate");
      try {
        for (const [answer, key] of recorded) update.run(answer, key);
        this.db.exec("commit");
      } catch (e) {
        this.db.exec("rollback");
        throw e;
      }
      for (const a of answers) observe("after_record", a.key);
    }
    return report;
  }
}

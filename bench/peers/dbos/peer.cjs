// dbos-peer: the DBOS Transact side of `ledger-bench --peers`. Each
// subcommand does one step against DATABASE_URL (DBOS's system database, a
// database of its own on the bench's cluster) and prints one JSON line on
// stdout; ledger-bench runs the steps in order and checks the counts.
//
// The unit of work is a workflow of one no-op step, the ledger's `noop`
// command. Every workflow is enqueued with a workflow ID of its own (DBOS's
// idempotency key: enqueueing an ID again returns the existing workflow).
//
//   setup                        DBOS launched once (it creates and migrates
//                                its system database), the queue registered
//   enqueue N CLIENTS            N workflows, one `DBOSClient.enqueue` each
//                                (one transaction), from CLIENTS concurrent
//                                callers; seconds and per-call latency
//   enqueue-for SECONDS CLIENTS  the same for SECONDS, with the count of
//                                finished workflows before and after (for
//                                end to end, while `serve` drains)
//   work N SETTINGS              DBOS launched with SETTINGS (defaults |
//                                tuned) until N more workflows are SUCCESS
//   serve SETTINGS               DBOS launched with SETTINGS, a line printed
//                                when it is ready, until stdin closes
//   count                        workflows by status

'use strict';

const { DBOS, DBOSClient } = require('@dbos-inc/dbos-sdk');
const { Pool } = require('pg');
const { randomUUID } = require('node:crypto');

const QUEUE = 'peer_bench';
const APP = 'ledger_bench_peer';
const WORKFLOW = 'noopWorkflow';
const WORK_LIMIT_MS = 900_000;
const processStart = process.hrtime.bigint();

/// Seconds since this process started.
function elapsed() {
  return Number(process.hrtime.bigint() - processStart) / 1e9;
}

function url() {
  const u = process.env.DATABASE_URL;
  if (!u) throw new Error('DATABASE_URL is not set');
  return u;
}

/// The settings DBOS's documentation names as governing how fast one
/// process drains a queue, set for throughput ("tuned": docs/PERFORMANCE.md,
/// "DBOS's settings for throughput", cites each), against none at all
/// ("defaults": no concurrency limit, so one poll claims every enqueued
/// workflow; a poll a second; a pool of 10).
const SETTINGS = {
  defaults: { pool: undefined, queue: {} },
  tuned: { pool: 40, queue: { workerConcurrency: 1000, minPollingIntervalMs: 50 } },
};

function settings(name) {
  const s = SETTINGS[name];
  if (!s) throw new Error(`unknown settings ${name}: defaults | tuned`);
  return s;
}

let handled = 0;

/// The no-op step, checkpointed like any other.
async function noopStep() {}

async function noopWorkflowFn() {
  await DBOS.runStep(noopStep, { name: 'noopStep' });
  handled += 1;
}

const noopWorkflow = DBOS.registerWorkflow(noopWorkflowFn, { name: WORKFLOW });

async function launch(name) {
  const s = settings(name);
  DBOS.setConfig({
    name: APP,
    systemDatabaseUrl: url(),
    systemDatabasePoolSize: s.pool,
    logLevel: 'warn',
  });
  await DBOS.launch();
  const queue = await DBOS.registerQueue(QUEUE, { ...s.queue, onConflict: 'always_update' });
  return { settings: s, queue: { name: queue.name, ...s.queue }, pool: s.pool ?? 'default (10)' };
}

async function statusCounts(pool) {
  const { rows } = await pool.query(
    // The database holds this benchmark's workflows only.
    'select status, count(*)::int as n from dbos.workflow_status group by status',
  );
  const counts = {};
  for (const r of rows) counts[r.status] = r.n;
  return counts;
}

async function succeeded(pool) {
  const { rows } = await pool.query(
    "select count(*)::int as n from dbos.workflow_status where status = 'SUCCESS'",
  );
  return rows[0].n;
}

/// The `q` quantile of sorted values, as ledger-bench computes pgbench's.
function quantile(sorted, q) {
  if (sorted.length === 0) return null;
  return sorted[Math.min(Math.max(Math.ceil(q * sorted.length), 1), sorted.length) - 1];
}

/// CLIENTS callers enqueueing until `more()` says stop; latency per call in ms.
async function enqueueLoop(clients, more, countPool) {
  // A pool of CLIENTS connections, every one open before the clock starts
  // (as the other peers' are), handed to the client as its system database
  // pool.
  const pool = new Pool({ connectionString: url(), max: clients });
  const conns = await Promise.all(Array.from({ length: clients }, () => pool.connect()));
  conns.forEach((c) => c.release());
  const client = await DBOSClient.create({ systemDatabaseUrl: url(), systemDatabasePool: pool });
  const latencies = [];
  let issued = 0;
  // Finished jobs counted right at the window's start and end.
  const doneBefore = countPool ? await succeeded(countPool) : undefined;
  const t0 = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (more(issued)) {
        issued += 1;
        const s = process.hrtime.bigint();
        await client.enqueue({ workflowName: WORKFLOW, queueName: QUEUE, workflowID: randomUUID() });
        latencies.push(Number(process.hrtime.bigint() - s) / 1e6);
      }
    }),
  );
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const doneAfter = countPool ? await succeeded(countPool) : undefined;
  await client.destroy();
  await pool.end();
  latencies.sort((a, b) => a - b);
  return {
    jobs: latencies.length,
    seconds,
    p50_ms: quantile(latencies, 0.5),
    p99_ms: quantile(latencies, 0.99),
    p999_ms: quantile(latencies, 0.999),
    done_before: doneBefore,
    done_after: doneAfter,
  };
}

function arg(args, i, name) {
  const v = Number(args[i]);
  if (!Number.isFinite(v) || v <= 0) throw new Error(`${name}: expected a positive number, got ${args[i]}`);
  return v;
}

async function run(args) {
  switch (args[0]) {
    case 'setup': {
      const l = await launch('defaults');
      await DBOS.shutdown();
      return { step: 'setup', queue: l.queue };
    }
    case 'enqueue': {
      const n = arg(args, 1, 'N');
      const clients = arg(args, 2, 'CLIENTS');
      const r = await enqueueLoop(clients, (issued) => issued < n);
      return { step: 'enqueue', clients, ...r };
    }
    case 'enqueue-for': {
      const seconds = arg(args, 1, 'SECONDS');
      const clients = arg(args, 2, 'CLIENTS');
      const pool = new Pool({ connectionString: url(), max: 1 });
      // The window starts with the first call, once every connection is open.
      let deadline;
      const more = () => {
        deadline ??= Date.now() + seconds * 1000;
        return Date.now() < deadline;
      };
      const r = await enqueueLoop(clients, more, pool);
      await pool.end();
      return { step: 'enqueue-for', clients, ...r };
    }
    case 'work': {
      const n = arg(args, 1, 'N');
      const pool = new Pool({ connectionString: url(), max: 1 });
      const target = (await succeeded(pool)) + n;
      const launchAt = elapsed();
      const l = await launch(args[2] ?? 'defaults');
      // Every workflow has run its step (counted here), then its outcome is
      // durable (SUCCESS in the system database).
      while (handled < n) {
        if (elapsed() * 1000 > WORK_LIMIT_MS) throw new Error(`${handled} of ${n} workflows ran`);
        await new Promise((r) => setTimeout(r, 5));
      }
      let done = await succeeded(pool);
      while (done < target) {
        if (elapsed() * 1000 > WORK_LIMIT_MS) throw new Error(`SUCCESS count ${done}, expected ${target}`);
        await new Promise((r) => setTimeout(r, 5));
        done = await succeeded(pool);
      }
      const seconds = elapsed();
      await DBOS.shutdown();
      await pool.end();
      return {
        step: 'work', jobs: n, settings: args[2] ?? 'defaults', queue: l.queue, pool: l.pool,
        handled, succeeded: done, seconds, seconds_from_launch: seconds - launchAt,
      };
    }
    case 'serve': {
      const l = await launch(args[1] ?? 'defaults');
      process.stdout.write(JSON.stringify({ step: 'serve', ready: true, queue: l.queue, pool: l.pool }) + '\n');
      await new Promise((resolve) => {
        process.stdin.on('end', resolve);
        process.stdin.on('close', resolve);
        process.stdin.resume();
      });
      await DBOS.shutdown();
      return { step: 'serve', handled };
    }
    case 'count': {
      const pool = new Pool({ connectionString: url(), max: 1 });
      const counts = await statusCounts(pool);
      const steps = await pool.query('select count(*)::int as n from dbos.operation_outputs');
      await pool.end();
      return { step: 'count', by_status: counts, step_outputs: steps.rows[0].n };
    }
    default:
      throw new Error('usage: peer.cjs setup | enqueue N CLIENTS | enqueue-for SECONDS CLIENTS | work N SETTINGS | serve SETTINGS | count');
  }
}

run(process.argv.slice(2)).then(
  (line) => {
    process.stdout.write(JSON.stringify(line) + '\n');
    process.exit(0);
  },
  (e) => {
    process.stderr.write(`dbos-peer ${process.argv[2] ?? ''}: ${e && e.stack ? e.stack : e}\n`);
    process.exit(1);
  },
);

// pg-boss-peer: the pg-boss side of `ledger-bench --peers`. Each subcommand
// does one step against DATABASE_URL (a database of its own on the bench's
// cluster) and prints one JSON line on stdout; ledger-bench runs the steps in
// order and checks the counts.
//
//   setup                        pg-boss's schema (start()) and the queue
//   send N CLIENTS               N no-op jobs, one `send` each (one
//                                transaction), from CLIENTS concurrent
//                                callers; seconds and per-call latency
//   send-for SECONDS CLIENTS     the same for SECONDS, with the count of
//                                completed jobs before and after (for end to
//                                end, while `serve` drains)
//   insert N BATCH               N no-op jobs, `insert` of BATCH jobs per call
//   work N SETTINGS              one worker (`work()`) with SETTINGS (batch)
//                                until N more jobs are completed
//   work-for SECONDS SETTINGS    one worker with SETTINGS for SECONDS (the
//                                defaults: one job every two seconds, by
//                                design, so 10^5 jobs would take days)
//   serve SETTINGS               one worker, a line printed when it is
//                                ready, until stdin closes
//   count                        jobs by state

'use strict';

const PgBoss = require('pg-boss');
const { Pool } = require('pg');

const QUEUE = 'peer_bench';
const WORK_LIMIT_MS = 900_000;
const processStart = process.hrtime.bigint();

function elapsed() {
  return Number(process.hrtime.bigint() - processStart) / 1e9;
}

function url() {
  const u = process.env.DATABASE_URL;
  if (!u) throw new Error('DATABASE_URL is not set');
  return u;
}

/// The worker's options: none ("defaults": one job per fetch, a fetch
/// every two seconds), or the documented batch settings ("batch": up to
/// 500 jobs per fetch, the handler given them all at once, the shortest
/// polling interval pg-boss allows).
const SETTINGS = {
  defaults: {},
  batch: { batchSize: 500, pollingIntervalSeconds: 0.5 },
};

function settings(name) {
  const s = SETTINGS[name];
  if (!s) throw new Error(`unknown settings ${name}: defaults | batch`);
  return s;
}

/// A started pg-boss. A producer skips maintenance and scheduling (it only
/// sends); a worker runs with pg-boss's defaults.
async function boss(options) {
  const b = new PgBoss({ connectionString: url(), ...options });
  b.on('error', (e) => process.stderr.write(`pg-boss error: ${e && e.stack ? e.stack : e}\n`));
  await b.start();
  return b;
}

async function completed(pool) {
  const { rows } = await pool.query(
    "select count(*)::int as n from pgboss.job where name = $1 and state = 'completed'",
    [QUEUE],
  );
  return rows[0].n;
}

/// The `q` quantile of sorted values, as ledger-bench computes pgbench's.
function quantile(sorted, q) {
  if (sorted.length === 0) return null;
  return sorted[Math.min(Math.max(Math.ceil(q * sorted.length), 1), sorted.length) - 1];
}

/// CLIENTS callers sending until `more()` says stop; latency per call in ms.
async function sendLoop(clients, more, countPool) {
  const b = await boss({ max: clients, supervise: false, schedule: false, migrate: false });
  // Every connection open before the clock starts, as the other peers' are.
  await Promise.all(Array.from({ length: clients }, () => b.getDb().executeSql('select 1')));
  const latencies = [];
  let issued = 0;
  // Finished jobs counted right at the window's start and end.
  const doneBefore = countPool ? await completed(countPool) : undefined;
  const t0 = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (more(issued)) {
        issued += 1;
        const s = process.hrtime.bigint();
        const id = await b.send(QUEUE, {});
        if (!id) throw new Error('send returned no job id');
        latencies.push(Number(process.hrtime.bigint() - s) / 1e6);
      }
    }),
  );
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const doneAfter = countPool ? await completed(countPool) : undefined;
  await b.stop({ graceful: false, wait: true });
  latencies.sort((a, b2) => a - b2);
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

/// One worker on the queue with `settings`; `handled` counts the jobs its
/// handler was given.
async function worker(name) {
  const s = settings(name);
  const b = await boss({});
  const state = { handled: 0 };
  await b.work(QUEUE, s, async (jobs) => {
    state.handled += jobs.length;
  });
  return { b, state, options: s };
}

/// Stops a worker without leaving a job it fetched active: no more
/// fetches, then (pg-boss records a completion after the handler returns,
/// without waiting for it) until every handled job is completed, then stop.
async function stopWorker(w, pool, completedBefore) {
  await w.b.offWork(QUEUE);
  const deadline = Date.now() + 60_000;
  // A fetch already under way may still hand over jobs: done when nothing
  // more was handled for 200 ms and all that was is completed.
  let seen = -1;
  let quietSince = Date.now();
  for (;;) {
    if (w.state.handled !== seen) {
      seen = w.state.handled;
      quietSince = Date.now();
    }
    const all = (await completed(pool)) >= completedBefore + seen;
    if (all && Date.now() - quietSince >= 200) break;
    if (Date.now() > deadline) throw new Error(`${seen} jobs handled, not all completed a minute later`);
    await new Promise((r) => setTimeout(r, 10));
  }
  await w.b.stop({ graceful: true, wait: true });
}

function arg(args, i, name) {
  const v = Number(args[i]);
  if (!Number.isFinite(v) || v <= 0) throw new Error(`${name}: expected a positive number, got ${args[i]}`);
  return v;
}

async function run(args) {
  switch (args[0]) {
    case 'setup': {
      const b = await boss({});
      await b.createQueue(QUEUE);
      await b.stop({ graceful: false, wait: true });
      return { step: 'setup', queue: QUEUE };
    }
    case 'send': {
      const n = arg(args, 1, 'N');
      const clients = arg(args, 2, 'CLIENTS');
      const r = await sendLoop(clients, (issued) => issued < n);
      return { step: 'send', clients, ...r };
    }
    case 'send-for': {
      const seconds = arg(args, 1, 'SECONDS');
      const clients = arg(args, 2, 'CLIENTS');
      const pool = new Pool({ connectionString: url(), max: 1 });
      // The window starts with the first call, once every connection is open.
      let deadline;
      const more = () => {
        deadline ??= Date.now() + seconds * 1000;
        return Date.now() < deadline;
      };
      const r = await sendLoop(clients, more, pool);
      await pool.end();
      return { step: 'send-for', clients, ...r };
    }
    case 'insert': {
      const n = arg(args, 1, 'N');
      const batch = arg(args, 2, 'BATCH');
      const b = await boss({ max: 1, supervise: false, schedule: false, migrate: false });
      await b.getDb().executeSql('select 1');
      const t0 = process.hrtime.bigint();
      let done = 0;
      while (done < n) {
        const k = Math.min(batch, n - done);
        // pg-boss 10's insert returns no ids; ledger-bench counts the jobs
        // before they are processed.
        await b.insert(Array.from({ length: k }, () => ({ name: QUEUE, data: {} })));
        done += k;
      }
      const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
      await b.stop({ graceful: false, wait: true });
      return { step: 'insert', jobs: n, batch, seconds };
    }
    case 'work': {
      const n = arg(args, 1, 'N');
      const name = args[2] ?? 'batch';
      const pool = new Pool({ connectionString: url(), max: 1 });
      const target = (await completed(pool)) + n;
      const startAt = elapsed();
      const w = await worker(name);
      // Every handler has run (counted here), then the completions pg-boss
      // records after each handler are durable.
      while (w.state.handled < n) {
        if (elapsed() * 1000 > WORK_LIMIT_MS) throw new Error(`${w.state.handled} of ${n} jobs handled`);
        await new Promise((r) => setTimeout(r, 5));
      }
      let done = await completed(pool);
      while (done < target) {
        if (elapsed() * 1000 > WORK_LIMIT_MS) throw new Error(`completed count ${done}, expected ${target}`);
        await new Promise((r) => setTimeout(r, 5));
        done = await completed(pool);
      }
      const seconds = elapsed();
      await stopWorker(w, pool, target - n);
      await pool.end();
      return {
        step: 'work', jobs: n, settings: name, options: w.options, handled: w.state.handled,
        completed: done, seconds, seconds_from_start: seconds - startAt,
      };
    }
    case 'work-for': {
      const seconds = arg(args, 1, 'SECONDS');
      const name = args[2] ?? 'defaults';
      const pool = new Pool({ connectionString: url(), max: 1 });
      const before = await completed(pool);
      const t0 = elapsed();
      const w = await worker(name);
      await new Promise((r) => setTimeout(r, seconds * 1000));
      const after = await completed(pool);
      const took = elapsed() - t0;
      await stopWorker(w, pool, before);
      await pool.end();
      return {
        step: 'work-for', settings: name, options: w.options, handled: w.state.handled,
        completed: after - before, seconds: took,
      };
    }
    case 'serve': {
      const name = args[1] ?? 'batch';
      const pool = new Pool({ connectionString: url(), max: 1 });
      const before = await completed(pool);
      const w = await worker(name);
      process.stdout.write(JSON.stringify({ step: 'serve', ready: true, settings: name, options: w.options }) + '\n');
      await new Promise((resolve) => {
        process.stdin.on('end', resolve);
        process.stdin.on('close', resolve);
        process.stdin.resume();
      });
      await stopWorker(w, pool, before);
      await pool.end();
      return { step: 'serve', handled: w.state.handled };
    }
    case 'count': {
      const pool = new Pool({ connectionString: url(), max: 1 });
      const { rows } = await pool.query(
        'select state::text, count(*)::int as n from pgboss.job where name = $1 group by state',
        [QUEUE],
      );
      await pool.end();
      const byState = {};
      for (const r of rows) byState[r.state] = r.n;
      return { step: 'count', by_state: byState };
    }
    default:
      throw new Error('usage: peer.cjs setup | send N CLIENTS | send-for SECONDS CLIENTS | insert N BATCH | work N SETTINGS | work-for SECONDS SETTINGS | serve SETTINGS | count');
  }
}

run(process.argv.slice(2)).then(
  (line) => {
    process.stdout.write(JSON.stringify(line) + '\n');
    process.exit(0);
  },
  (e) => {
    process.stderr.write(`pg-boss-peer ${process.argv[2] ?? ''}: ${e && e.stack ? e.stack : e}\n`);
    process.exit(1);
  },
);

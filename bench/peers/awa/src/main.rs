//! awa-peer: the awa side of `ledger-bench --peers`. Each subcommand does one
//! step against DATABASE_URL and prints one JSON line on stdout; ledger-bench
//! runs the steps in order, times nothing itself for the enqueue steps (this
//! program does, around the enqueue calls only) and counts the work before
//! and after each processing step with awa's own exact count.
//!
//!   setup                      awa's migrations, then one Client started and
//!                              stopped so that a fresh database settles on
//!                              the default storage engine
//!   insert-single N CLIENTS    N no-op jobs, one `awa::insert_with` (one
//!                              autocommit transaction) each, from CLIENTS
//!                              tasks; seconds and per-call latency
//!   insert-for SECONDS CLIENTS the same for SECONDS, with awa's terminal
//!                              counters before and after (end to end, while
//!                              `serve` drains)
//!   insert-many N BATCH        N no-op jobs with `awa::insert_many`, BATCH per call
//!   enqueue-batch N BATCH      N no-op jobs with `QueueStorage::enqueue_params_batch`,
//!                              BATCH per call (awa's high-volume producer path)
//!   work N MAX_WORKERS         one Client (QueueConfig defaults but max_workers)
//!                              until N more jobs are durably terminal; seconds
//!                              from this process's start
//!   serve MAX_WORKERS          one Client as in `work`, a line printed when
//!                              it has started, until stdin closes
//!   count                      awa's exact `QueueStorage::queue_counts`
//!                              (slow: never inside a timed step)

use awa::model::{QueueStorage, QueueStorageConfig};
use awa::{Client, InsertOpts, JobArgs, JobResult, QueueConfig};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// The one queue every step uses.
const QUEUE: &str = "peer_bench";
/// How long a processing step may take before it is called failed.
const WORK_LIMIT: Duration = Duration::from_secs(900);

#[derive(Debug, Serialize, Deserialize, JobArgs)]
struct Noop {}

fn opts() -> InsertOpts {
    InsertOpts {
        queue: QUEUE.into(),
        ..Default::default()
    }
}

/// A pool whose connections are all open before a timed enqueue starts.
async fn connect(connections: u32) -> Result<PgPool> {
    let url = std::env::var("DATABASE_URL").map_err(|_| "DATABASE_URL is not set")?;
    Ok(PgPoolOptions::new()
        .max_connections(connections)
        .min_connections(connections)
        .connect(&url)
        .await?)
}

/// Durably terminal jobs in this database, from the counters awa keeps for
/// its own `queue_counts` when it trusts them (folded live counts, pending
/// deltas, compact completion batches less their tombstones, and what
/// rotation pruned). Cheap enough to poll; the exact count is `count`. The
/// database holds only this benchmark's queue, so nothing is filtered.
const TERMINAL_FROM_COUNTERS: &str = "
select (
    coalesce((select sum(greatest(coalesce(l.pruned_completed_count, 0), coalesce(r.pruned_completed_count, 0)))
                     + sum(coalesce(r.pruned_failed_count, 0))
              from awa.queue_lanes l
              full join awa.queue_terminal_rollups r using (queue, priority)), 0)
  + coalesce((select sum(live_terminal_count) from awa.queue_terminal_live_counts), 0)
  + coalesce((select sum(terminal_delta) from awa.queue_terminal_count_deltas), 0)
  + coalesce((select sum(completed_count) from awa.receipt_completion_batches), 0)
  - coalesce((select count(*) from awa.receipt_completion_tombstones), 0)
)::bigint";

async fn terminal(pool: &PgPool) -> Result<i64> {
    Ok(sqlx::query_scalar(TERMINAL_FROM_COUNTERS)
        .fetch_one(pool)
        .await?)
}

fn client(pool: &PgPool, max_workers: u32, handled: Arc<AtomicU64>) -> Result<Client> {
    Ok(Client::builder(pool.clone())
        .queue(
            QUEUE,
            QueueConfig {
                max_workers,
                ..QueueConfig::default()
            },
        )
        .register::<Noop, _, _>(move |_args, _ctx| {
            handled.fetch_add(1, Ordering::Relaxed);
            async { Ok(JobResult::Completed) }
        })
        .build()?)
}

fn arg(args: &[String], i: usize, name: &str) -> Result<usize> {
    args.get(i)
        .ok_or_else(|| format!("missing {name}"))?
        .parse()
        .map_err(|e| format!("{name}: {e}").into())
}

fn params(n: usize) -> Result<Vec<awa::InsertParams>> {
    (0..n)
        .map(|_| Ok(awa::insert::params_with(&Noop {}, opts())?))
        .collect()
}

/// CLIENTS tasks each calling `awa::insert_with` (one autocommit
/// transaction) while `more(calls issued so far)` holds; the seconds they
/// took and the latency of every call in microseconds, sorted.
async fn insert_loop(
    pool: &PgPool,
    clients: usize,
    more: impl Fn(u64) -> bool + Send + Sync + Clone + 'static,
    issued: &Arc<AtomicU64>,
) -> Result<(f64, Vec<u64>)> {
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let pool = pool.clone();
        let more = more.clone();
        let issued = Arc::clone(issued);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while more(issued.fetch_add(1, Ordering::Relaxed)) {
                let s = Instant::now();
                awa::insert_with(&pool, &Noop {}, opts()).await?;
                latencies.push(u64::try_from(s.elapsed().as_micros()).unwrap_or(u64::MAX));
            }
            Ok::<_, awa::AwaError>(latencies)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    let seconds = t0.elapsed().as_secs_f64();
    all.sort_unstable();
    Ok((seconds, all))
}

/// The `q` quantile of sorted microseconds, in milliseconds (as ledger-bench
/// computes pgbench's).
fn quantile_ms(sorted_us: &[u64], q: f64) -> Option<f64> {
    if sorted_us.is_empty() {
        return None;
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let i = ((sorted_us.len() as f64 * q).ceil() as usize).clamp(1, sorted_us.len()) - 1;
    Some(sorted_us[i] as f64 / 1000.0)
}

#[tokio::main]
async fn main() {
    let process_start = Instant::now();
    let args: Vec<String> = std::env::args().collect();
    match run(&args, process_start).await {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("awa-peer {}: {e}", args.get(1).map_or("", String::as_str));
            std::process::exit(1);
        }
    }
}

async fn run(args: &[String], process_start: Instant) -> Result<serde_json::Value> {
    match args.get(1).map(String::as_str) {
        Some("setup") => {
            // A running Client holds connections of its own (leadership,
            // LISTEN) besides the ones its work needs.
            let pool = connect(8).await?;
            awa::migrations::run(&pool).await?;
            let c = client(&pool, 1, Arc::default())?;
            c.start().await?;
            c.shutdown(Duration::from_secs(5)).await;
            let (state, engine): (String, String) = sqlx::query_as(
                "select state::text, current_engine::text from awa.storage_transition_state where singleton",
            )
            .fetch_one(&pool)
            .await?;
            let trusted = QueueStorage::new(QueueStorageConfig::default())?
                .terminal_counter_trusted(&pool)
                .await?;
            if !trusted {
                return Err("awa does not trust its terminal counters here; the cheap count used to time processing would be wrong".into());
            }
            Ok(json!({"step": "setup", "storage_state": state, "engine": engine}))
        }
        Some("insert-single") => {
            let n = arg(args, 2, "N")?;
            let clients = arg(args, 3, "CLIENTS")?.max(1);
            let pool = connect(u32::try_from(clients)?).await?;
            let issued = Arc::new(AtomicU64::new(0));
            let n_u64 = u64::try_from(n)?;
            let (seconds, latencies) =
                insert_loop(&pool, clients, move |i| i < n_u64, &issued).await?;
            Ok(json!({"step": "insert-single", "jobs": latencies.len(), "clients": clients,
                      "seconds": seconds, "p50_ms": quantile_ms(&latencies, 0.5),
                      "p99_ms": quantile_ms(&latencies, 0.99), "p999_ms": quantile_ms(&latencies, 0.999)}))
        }
        Some("insert-for") => {
            let window = Duration::from_secs(u64::try_from(arg(args, 2, "SECONDS")?)?);
            let clients = arg(args, 3, "CLIENTS")?.max(1);
            let pool = connect(u32::try_from(clients)? + 1).await?;
            let before = terminal(&pool).await?;
            let deadline = Instant::now() + window;
            let issued = Arc::new(AtomicU64::new(0));
            let (seconds, latencies) =
                insert_loop(&pool, clients, move |_| Instant::now() < deadline, &issued).await?;
            let after = terminal(&pool).await?;
            Ok(json!({"step": "insert-for", "jobs": latencies.len(), "clients": clients,
                      "seconds": seconds, "p50_ms": quantile_ms(&latencies, 0.5),
                      "p99_ms": quantile_ms(&latencies, 0.99),
                      "done_before": before, "done_after": after}))
        }
        Some("insert-many") => {
            let (n, batch) = (arg(args, 2, "N")?, arg(args, 3, "BATCH")?.max(1));
            let pool = connect(1).await?;
            let params = params(n)?;
            let t0 = Instant::now();
            for chunk in params.chunks(batch) {
                awa::insert_many(&pool, chunk).await?;
            }
            let seconds = t0.elapsed().as_secs_f64();
            Ok(json!({"step": "insert-many", "jobs": n, "batch": batch, "seconds": seconds}))
        }
        Some("enqueue-batch") => {
            let (n, batch) = (arg(args, 2, "N")?, arg(args, 3, "BATCH")?.max(1));
            let pool = connect(1).await?;
            // Built as the workers build theirs: the default configuration.
            let store = QueueStorage::new(QueueStorageConfig::default())?;
            let params = params(n)?;
            let t0 = Instant::now();
            for chunk in params.chunks(batch) {
                store.enqueue_params_batch(&pool, chunk).await?;
            }
            let seconds = t0.elapsed().as_secs_f64();
            Ok(json!({"step": "enqueue-batch", "jobs": n, "batch": batch, "seconds": seconds}))
        }
        Some("work") => {
            let n = arg(args, 2, "N")?;
            let max_workers = u32::try_from(arg(args, 3, "MAX_WORKERS")?)?;
            // The worker's pool opens connections as it needs them, as an
            // application's would: that is part of the time measured.
            let url = std::env::var("DATABASE_URL").map_err(|_| "DATABASE_URL is not set")?;
            let pool = PgPoolOptions::new()
                .max_connections(max_workers + 2)
                .connect(&url)
                .await?;
            let target = terminal(&pool).await? + i64::try_from(n)?;
            let handled = Arc::new(AtomicU64::new(0));
            let c = client(&pool, max_workers, Arc::clone(&handled))?;
            let client_start = process_start.elapsed().as_secs_f64();
            c.start().await?;
            // Every handler has run (counted here), then the completions
            // that awa records in the background are durable (its counters).
            let n_u64 = u64::try_from(n)?;
            while handled.load(Ordering::Relaxed) < n_u64 {
                if process_start.elapsed() > WORK_LIMIT {
                    return Err(format!(
                        "{} of {n} handlers ran in {WORK_LIMIT:?}",
                        handled.load(Ordering::Relaxed)
                    )
                    .into());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let mut done = terminal(&pool).await?;
            while done < target {
                if process_start.elapsed() > WORK_LIMIT {
                    return Err(format!("terminal count {done}, expected {target}").into());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                done = terminal(&pool).await?;
            }
            let seconds = process_start.elapsed().as_secs_f64();
            c.shutdown(Duration::from_secs(10)).await;
            Ok(json!({
                "step": "work", "jobs": n, "max_workers": max_workers,
                "handled": handled.load(Ordering::Relaxed),
                "terminal_from_counters": done,
                "seconds": seconds,
                "seconds_from_client_start": seconds - client_start,
            }))
        }
        Some("serve") => {
            let max_workers = u32::try_from(arg(args, 2, "MAX_WORKERS")?)?;
            let url = std::env::var("DATABASE_URL").map_err(|_| "DATABASE_URL is not set")?;
            let pool = PgPoolOptions::new()
                .max_connections(max_workers + 2)
                .connect(&url)
                .await?;
            let handled = Arc::new(AtomicU64::new(0));
            let c = client(&pool, max_workers, Arc::clone(&handled))?;
            c.start().await?;
            println!("{}", json!({"step": "serve", "ready": true, "max_workers": max_workers}));
            // Until ledger-bench closes stdin.
            tokio::task::spawn_blocking(|| {
                let mut sink = Vec::new();
                let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
            })
            .await?;
            c.shutdown(Duration::from_secs(10)).await;
            Ok(json!({"step": "serve", "handled": handled.load(Ordering::Relaxed)}))
        }
        Some("count") => {
            let pool = connect(1).await?;
            let store = QueueStorage::new(QueueStorageConfig::default())?;
            let counts = store.queue_counts(&pool, QUEUE).await?;
            Ok(json!({
                "step": "count",
                "terminal": counts.terminal,
                "available": counts.available,
                "running": counts.running,
                "pruned_failed": counts.pruned_failed,
                "terminal_from_counters": terminal(&pool).await?,
            }))
        }
        _ => Err(
            "usage: awa-peer setup | insert-single N CLIENTS | insert-for SECONDS CLIENTS | \
                  insert-many N BATCH | enqueue-batch N BATCH | work N MAX_WORKERS | \
                  serve MAX_WORKERS | count"
                .into(),
        ),
    }
}

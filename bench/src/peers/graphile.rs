//! graphile-worker 0.18.0 (npm), pinned by bench/peers/graphile-worker's
//! package-lock.json and installed with `npm ci`. Enqueueing is SQL (its
//! `add_job` and `add_jobs` functions); processing is its CLI with
//! `--once`, timed from spawn to exit; end to end, its CLI runs as a
//! service while pgbench adds jobs.

use super::node::{NpmPeer, Server};
use super::{E2e, Figures, PeerOptions, STEP_LIMIT, checkpoint, rate, tail};
use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use sqlx::PgPool;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::process::Command;

pub(super) const DATABASE: &str = "peer_graphile_worker";
/// One job per transaction, as pgbench runs it.
const ADD_JOB: &str = "select graphile_worker.add_job('noop', '{}');\n";
const PEER: &str = "graphile-worker";
const VERSION: &str = "0.18.0";
/// The documented settings for throughput, passed with `-C` in the tuned run.
const TUNED: &str = "tuned-settings.cjs";

#[derive(Debug)]
pub(super) struct Graphile {
    npm: NpmPeer,
}

impl Graphile {
    /// `npm ci` into `cache/graphile-worker`, unless the same lock file is
    /// installed there already.
    pub(super) async fn install(cache: &Path) -> anyhow::Result<Graphile> {
        let npm = NpmPeer::install(
            PEER,
            "graphile-worker",
            cache,
            "graphile-worker",
            VERSION,
            &["tasks/noop.js", TUNED],
        )
        .await?;
        Ok(Graphile { npm })
    }

    fn cli(&self) -> PathBuf {
        self.npm
            .dir
            .join("node_modules/graphile-worker/dist/cli.js")
    }

    /// Installs the schema into its (fresh) database.
    pub(super) async fn setup(&self, url: &str) -> anyhow::Result<Value> {
        super::setup_command(
            PEER,
            "installing its schema (--schema-only)",
            Command::new("node")
                .arg(self.cli())
                .args(["-c", url, "--schema-only"])
                .current_dir(&self.npm.dir),
        )
        .await?;
        Ok(json!({
            "version": VERSION,
            "node": self.npm.node,
            "node_postgres": self.npm.version_of("pg"),
            "note": "graphile-worker 0.18.0 declares node >= 22.18; it is run on the node found on PATH",
        }))
    }

    /// One repetition: `add_job` from each client count, the first batch
    /// processed at the defaults and the others with the tuned settings;
    /// `add_jobs` in batches, processed with the tuned settings; then end to
    /// end.
    pub(super) async fn rep(
        &self,
        o: &PeerOptions,
        pool: &PgPool,
        pgbench: &crate::pgbench::PgBench,
        url: &str,
        figures: &mut Figures,
    ) -> anyhow::Result<()> {
        for (i, &clients) in o.clients.iter().enumerate() {
            // add_job, one job per transaction, `clients` pgbench connections.
            let per_client = o.jobs.div_ceil(clients);
            let jobs = per_client * clients;
            checkpoint(pool).await;
            let b = tokio::task::block_in_place(|| {
                pgbench.run_count("gw_add_job", ADD_JOB, clients, per_client)
            })
            .with_context(|| format!("peers: {PEER}: add_job through pgbench"))?;
            expect_queued(pool, jobs, "after add_job").await?;
            let how = format!(
                "pgbench --transactions={per_client} --client={clients} (prepared): {}",
                ADD_JOB.trim()
            );
            figures.push_single(
                PEER,
                "gw_add_job",
                "`add_job`, one per transaction",
                clients,
                b.tps,
                b.p99_ms,
                json!({"how": how, "jobs": jobs, "pgbench": b}),
            );
            let queued_by = format!("`add_job` from {clients} clients");
            self.process(o, pool, url, i > 0, jobs, &queued_by, figures)
                .await?;
        }

        // add_jobs, `batch` jobs per call (and per transaction), one connection.
        checkpoint(pool).await;
        let took = add_jobs(pool, o.jobs, o.batch).await?;
        expect_queued(pool, o.jobs, "after add_jobs").await?;
        figures.push_rate(
            "gw_add_jobs",
            PEER,
            &format!("enqueue: `add_jobs`, batches of {}", o.batch),
            rate(o.jobs, took),
            json!({"how": format!("one connection, {} statements of graphile_worker.add_jobs(array of {} job_spec)", o.jobs.div_ceil(o.batch), o.batch),
                   "jobs": o.jobs, "seconds": took.as_secs_f64()}),
        );
        self.process(o, pool, url, true, o.jobs, "`add_jobs`", figures)
            .await?;
        self.end_to_end(o, pool, pgbench, url, figures).await
    }

    /// End to end: the worker runs as a service with the tuned settings
    /// while pgbench adds jobs from `o.e2e_clients` clients (as many as W3's) for `o.seconds`; the
    /// jobs it finished in that window per second (graphile-worker deletes
    /// a job when it completes it).
    async fn end_to_end(
        &self,
        o: &PeerOptions,
        pool: &PgPool,
        pgbench: &crate::pgbench::PgBench,
        url: &str,
        figures: &mut Figures,
    ) -> anyhow::Result<()> {
        let clients = o.e2e_clients;
        expect_queued(pool, 0, "before end to end").await?;
        checkpoint(pool).await;
        let mut cmd = Command::new("node");
        cmd.arg(self.cli())
            .args(["-c", url])
            .arg(format!("--jobs={}", o.concurrency))
            .arg(format!("--max-pool-size={}", o.concurrency + 1))
            .arg("-C")
            .arg(self.npm.dir.join(TUNED))
            .env("NO_LOG_SUCCESS", "1")
            .current_dir(&self.npm.dir);
        // With NO_LOG_SUCCESS it does not say when it is connected (and
        // without it, it logs every job), so its first line (the crontab
        // notice) starts it, and its LISTEN connection says it is ready.
        let worker = Server::start(PEER, "graphile-worker (tuned)", cmd, |_| true).await?;
        listening(pool).await?;
        let before = queued(pool).await?;
        let b = tokio::task::block_in_place(|| {
            pgbench.run("gw_e2e", ADD_JOB, clients, o.seconds, None)
        })
        .with_context(|| format!("peers: {PEER}: add_job through pgbench, end to end"))?;
        let after = queued(pool).await?;
        let worker_ready = worker.ready.clone();
        let said = worker.stop(true).await?;
        let added = usize::try_from(b.transactions)?;
        // Whatever was left is drained before the next repetition.
        self.once(o, url, true).await?;
        expect_queued(pool, 0, "after draining the end-to-end jobs").await?;
        figures.push_e2e(
            "gw",
            PEER,
            E2e {
                clients,
                seconds: o.seconds as f64,
                added,
                done: (before + added).saturating_sub(after),
            },
            json!({"how": format!("graphile-worker -j {} -m {} -C {TUNED} running while pgbench --time={} --client={clients} runs add_job; finished = queued before + added - queued after", o.concurrency, o.concurrency + 1, o.seconds),
                   "queued_before": before, "queued_after": after, "pgbench": b, "worker_ready": worker_ready, "worker_output_tail": tail(&said, 5)}),
        );
        Ok(())
    }

    /// Processes the `jobs` queued with `graphile-worker --once`: wall time
    /// from spawn to exit, all of them gone from the table (graphile-worker
    /// deletes a job when it completes; a failed one stays, to be retried).
    #[allow(clippy::too_many_arguments)]
    async fn process(
        &self,
        o: &PeerOptions,
        pool: &PgPool,
        url: &str,
        tuned: bool,
        jobs: usize,
        queued_by: &str,
        figures: &mut Figures,
    ) -> anyhow::Result<()> {
        expect_queued(pool, jobs, "before processing").await?;
        checkpoint(pool).await;
        let (took, stderr) = self.once(o, url, tuned).await?;
        let left = queued(pool).await?;
        if left != 0 {
            let error: Option<String> = sqlx::query_scalar(
                "select last_error from graphile_worker._private_jobs where last_error is not null limit 1",
            )
            .fetch_optional(pool)
            .await?
            .flatten();
            bail!("peers: {PEER}: processing left {left} of {jobs} jobs; a last error: {error:?}");
        }
        // The cost of starting and stopping the worker, as graphile-worker's
        // own performance test measures it: a `--once` run with nothing to do.
        let (empty, _) = self.once(o, url, tuned).await?;
        let after_add_jobs = queued_by == "`add_jobs`";
        let (key, adjusted, what) = if tuned && after_add_jobs {
            (
                "gw_process_tuned",
                "gw_process_tuned_startup_adjusted",
                "tuned (`localQueue.size` 500, `completeJobBatchDelay` 0, `failJobBatchDelay` 0)",
            )
        } else if tuned {
            (
                "gw_process_tuned_after_add_job",
                "gw_process_tuned_after_add_job_startup_adjusted",
                "tuned",
            )
        } else {
            (
                "gw_process_defaults",
                "gw_process_defaults_startup_adjusted",
                "defaults",
            )
        };
        let how = format!(
            "node cli.js --once -j {} -m {}{}, NO_LOG_SUCCESS=1, wall time from spawn to exit",
            o.concurrency,
            o.concurrency + 1,
            if tuned {
                format!(" -C {TUNED}")
            } else {
                String::new()
            }
        );
        figures.push_rate(
            key,
            PEER,
            &format!("process {jobs} queued no-op jobs (queued by {queued_by}), one worker, {what}"),
            rate(jobs, took),
            json!({"how": how, "jobs": jobs, "queued_by": queued_by, "seconds": took.as_secs_f64(), "left": left,
                   "output_tail": tail(&stderr, 5)}),
        );
        figures.push_rate(
            adjusted,
            PEER,
            &format!("the same, {what}, less an empty run's start and stop"),
            rate(jobs, took.saturating_sub(empty)),
            json!({"how": "the run above minus a --once run with no jobs", "seconds": took.as_secs_f64(),
                   "empty_run_seconds": empty.as_secs_f64()}),
        );
        Ok(())
    }

    /// One `--once` run of the worker; its wall time and its output.
    async fn once(
        &self,
        o: &PeerOptions,
        url: &str,
        tuned: bool,
    ) -> anyhow::Result<(Duration, String)> {
        let mut cmd = Command::new("node");
        cmd.arg(self.cli())
            .args(["-c", url, "--once"])
            .arg(format!("--jobs={}", o.concurrency))
            .arg(format!("--max-pool-size={}", o.concurrency + 1))
            .env("NO_LOG_SUCCESS", "1")
            .current_dir(&self.npm.dir);
        if tuned {
            cmd.arg("-C").arg(self.npm.dir.join(TUNED));
        }
        cmd.kill_on_drop(true);
        let t0 = Instant::now();
        let output = tokio::time::timeout(STEP_LIMIT, cmd.output())
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "peers: {PEER}: the worker (--once) still running after {STEP_LIMIT:?}; stopped"
                )
            })?
            .with_context(|| format!("peers: {PEER}: starting the worker"))?;
        let took = t0.elapsed();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned()
            + &String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            bail!(
                "peers: {PEER}: the worker (--once) failed ({}):\n{}",
                output.status,
                tail(&stderr, 40)
            );
        }
        Ok((took, stderr))
    }
}

/// Waits until a worker listens for new jobs on its database.
async fn listening(pool: &PgPool) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let n: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity \
             where datname = current_database() and query like 'LISTEN \"jobs:insert\"%'",
        )
        .fetch_one(pool)
        .await?;
        if n > 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("peers: {PEER}: the worker did not LISTEN for jobs within two minutes");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn queued(pool: &PgPool) -> anyhow::Result<usize> {
    let n: i64 = sqlx::query_scalar("select count(*) from graphile_worker._private_jobs")
        .fetch_one(pool)
        .await?;
    Ok(usize::try_from(n)?)
}

async fn expect_queued(pool: &PgPool, jobs: usize, when: &str) -> anyhow::Result<()> {
    let n = queued(pool).await?;
    if n != jobs {
        bail!("peers: {PEER}: {n} jobs queued {when}, expected {jobs}");
    }
    Ok(())
}

/// `jobs` no-op jobs through `add_jobs`, `batch` per statement (each its own
/// transaction) on one connection; the time the statements took.
async fn add_jobs(pool: &PgPool, jobs: usize, batch: usize) -> anyhow::Result<Duration> {
    let mut conn = pool.acquire().await?;
    let t0 = Instant::now();
    let mut done = 0;
    while done < jobs {
        let n = batch.min(jobs - done);
        let added: i64 = sqlx::query_scalar(
            "select count(*) from graphile_worker.add_jobs(array(\
             select row('noop', '{}'::json, null, null, null, null, null, null)::graphile_worker.job_spec \
             from generate_series(1, $1)))",
        )
        .bind(i32::try_from(n)?)
        .fetch_one(&mut *conn)
        .await
        .with_context(|| format!("peers: {PEER}: add_jobs"))?;
        if usize::try_from(added)? != n {
            bail!("peers: {PEER}: add_jobs added {added} of {n}");
        }
        done += n;
    }
    Ok(t0.elapsed())
}

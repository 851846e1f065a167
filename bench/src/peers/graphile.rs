//! graphile-worker 0.18.0 (npm), pinned by bench/peers/graphile-worker's
//! package-lock.json and installed with `npm ci`. Enqueueing is SQL (its
//! `add_job` and `add_jobs` functions); processing is its CLI with
//! `--once`, timed from spawn to exit.

use super::{Figures, PeerOptions, STEP_LIMIT, checkpoint, rate, setup_command, sources_dir, tail};
use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use sqlx::PgPool;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::process::Command;

pub(super) const DATABASE: &str = "peer_graphile_worker";
const PEER: &str = "graphile-worker";
const VERSION: &str = "0.18.0";
/// The documented settings for throughput, passed with `-C` in the tuned run.
const TUNED: &str = "tuned-settings.cjs";

#[derive(Debug)]
pub(super) struct Graphile {
    dir: PathBuf,
    node: String,
}

impl Graphile {
    /// `npm ci` into `cache/graphile-worker`, unless the same lock file is
    /// installed there already.
    pub(super) async fn install(cache: &Path) -> anyhow::Result<Graphile> {
        let node = setup_command(
            PEER,
            "node --version",
            Command::new("node").arg("--version"),
        )
        .await?
        .trim()
        .to_owned();
        let src = sources_dir().join("graphile-worker");
        let dir = cache.join("graphile-worker");
        std::fs::create_dir_all(dir.join("tasks"))?;
        let lock = std::fs::read(src.join("package-lock.json"))
            .with_context(|| format!("peers: {PEER}: reading {}", src.display()))?;
        let stamp = dir.join(".installed-lock");
        let installed = std::fs::read(&stamp).is_ok_and(|s| s == lock)
            && installed_version(&dir).as_deref() == Some(VERSION);
        if !installed {
            for file in ["package.json", "package-lock.json"] {
                std::fs::copy(src.join(file), dir.join(file))?;
            }
            tracing::info!(dir = %dir.display(), "installing graphile-worker {VERSION} with npm ci");
            setup_command(
                PEER,
                "npm ci (installing graphile-worker from the npm registry)",
                Command::new("npm")
                    .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                    .current_dir(&dir),
            )
            .await?;
            std::fs::write(&stamp, &lock)?;
        }
        let got = installed_version(&dir);
        if got.as_deref() != Some(VERSION) {
            bail!("peers: {PEER}: npm installed version {got:?}, expected {VERSION}");
        }
        std::fs::copy(src.join("tasks/noop.js"), dir.join("tasks/noop.js"))?;
        std::fs::copy(src.join(TUNED), dir.join(TUNED))?;
        Ok(Graphile { dir, node })
    }

    fn cli(&self) -> PathBuf {
        self.dir.join("node_modules/graphile-worker/dist/cli.js")
    }

    /// Installs the schema into its (fresh) database.
    pub(super) async fn setup(&self, url: &str) -> anyhow::Result<Value> {
        setup_command(
            PEER,
            "installing its schema (--schema-only)",
            Command::new("node")
                .arg(self.cli())
                .args(["-c", url, "--schema-only"])
                .current_dir(&self.dir),
        )
        .await?;
        let pg = std::fs::read_to_string(self.dir.join("node_modules/pg/package.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|v| v["version"].as_str().map(str::to_owned));
        Ok(json!({
            "version": VERSION,
            "node": self.node,
            "node_postgres": pg,
            "note": "graphile-worker 0.18.0 declares node >= 22.18; it is run on the node found on PATH",
        }))
    }

    /// One repetition: `add_job` from many clients, processing at the
    /// defaults, `add_jobs` in batches, processing with the tuned settings.
    pub(super) async fn rep(
        &self,
        o: &PeerOptions,
        pool: &PgPool,
        pgbench: &crate::pgbench::PgBench,
        url: &str,
        figures: &mut Figures,
    ) -> anyhow::Result<()> {
        // add_job, one job per transaction, `clients` pgbench connections.
        let per_client = o.jobs.div_ceil(o.clients);
        let jobs = per_client * o.clients;
        checkpoint(pool).await;
        let b = tokio::task::block_in_place(|| {
            pgbench.run_count(
                "gw_add_job",
                "select graphile_worker.add_job('noop', '{}');\n",
                o.clients,
                per_client,
            )
        })
        .with_context(|| format!("peers: {PEER}: add_job through pgbench"))?;
        expect_queued(pool, jobs, "after add_job").await?;
        figures.record(
            "gw_add_job",
            PEER,
            &format!("enqueue: `add_job`, one per transaction, {} clients", o.clients),
            b.tps,
            json!({"how": format!("pgbench --transactions={per_client} --client={} (prepared): select graphile_worker.add_job('noop', '{{}}')", o.clients),
                   "jobs": jobs, "pgbench": b}),
        );
        self.process(o, pool, url, false, jobs, figures).await?;

        // add_jobs, `batch` jobs per call (and per transaction), one connection.
        checkpoint(pool).await;
        let took = add_jobs(pool, o.jobs, o.batch).await?;
        expect_queued(pool, o.jobs, "after add_jobs").await?;
        figures.record(
            "gw_add_jobs",
            PEER,
            &format!("enqueue: `add_jobs`, batches of {}", o.batch),
            rate(o.jobs, took),
            json!({"how": format!("one connection, {} statements of graphile_worker.add_jobs(array of {} job_spec)", o.jobs.div_ceil(o.batch), o.batch),
                   "jobs": o.jobs, "seconds": took.as_secs_f64()}),
        );
        self.process(o, pool, url, true, o.jobs, figures).await
    }

    /// Processes the `jobs` queued with `graphile-worker --once`: wall time
    /// from spawn to exit, all of them gone from the table (graphile-worker
    /// deletes a job when it completes; a failed one stays, to be retried).
    async fn process(
        &self,
        o: &PeerOptions,
        pool: &PgPool,
        url: &str,
        tuned: bool,
        jobs: usize,
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
        let (key, adjusted, what) = if tuned {
            (
                "gw_process_tuned",
                "gw_process_tuned_startup_adjusted",
                "tuned (`localQueue.size` 500, `completeJobBatchDelay` 0, `failJobBatchDelay` 0)",
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
        figures.record(
            key,
            PEER,
            &format!("process {jobs} queued no-op jobs, one worker, {what}"),
            rate(jobs, took),
            json!({"how": how, "jobs": jobs, "seconds": took.as_secs_f64(), "left": left,
                   "output_tail": tail(&stderr, 5)}),
        );
        figures.record(
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
            .current_dir(&self.dir);
        if tuned {
            cmd.arg("-C").arg(self.dir.join(TUNED));
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

fn installed_version(dir: &Path) -> Option<String> {
    let text =
        std::fs::read_to_string(dir.join("node_modules/graphile-worker/package.json")).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v["version"].as_str().map(str::to_owned)
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

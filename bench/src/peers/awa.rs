//! awa 0.6.9 (crates.io), through the small program in bench/peers/awa
//! (a project of its own: awa uses sqlx 0.8), built with `cargo build
//! --release --locked` into `target/peers/awa`. Each step is one run of it;
//! around each processing step, awa's own exact count checks that exactly
//! the jobs queued became terminal, and that none is left. End to end, the
//! harness's `serve` runs a Client while `insert-for` submits.

use super::node::Server;
use super::{
    E2e, Figures, PeerOptions, STEP_LIMIT, checkpoint, rate, setup_command, sources_dir, tail,
};
use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use sqlx::PgPool;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::process::Command;

pub(super) const DATABASE: &str = "peer_awa";
const PEER: &str = "awa";
const VERSION: &str = "0.6.9";

#[derive(Debug)]
pub(super) struct Awa {
    bin: PathBuf,
}

impl Awa {
    pub(super) async fn build(cache: &Path) -> anyhow::Result<Awa> {
        let manifest = sources_dir().join("awa/Cargo.toml");
        let target = cache.join("awa");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        tracing::info!(manifest = %manifest.display(), "building the awa harness (awa {VERSION}; the first build takes minutes)");
        let mut build = Command::new(cargo);
        build
            .args(["build", "--release", "--locked", "--quiet"])
            .arg("--manifest-path")
            .arg(&manifest)
            .arg("--target-dir")
            .arg(&target);
        // What `cargo run` sets for this program is not the awa build's
        // business, and a build script that watches one of them (ring's
        // watches CARGO_MANIFEST_DIR) would rebuild everything whenever
        // ledger-bench is started another way.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if [
                "CARGO_PKG_",
                "CARGO_MANIFEST_",
                "CARGO_CRATE_",
                "CARGO_BIN_",
                "CARGO_PRIMARY_",
            ]
            .iter()
            .any(|p| name.starts_with(p))
            {
                build.env_remove(name.as_ref());
            }
        }
        setup_command(
            PEER,
            "cargo build of bench/peers/awa (fetching awa from crates.io)",
            &mut build,
        )
        .await?;
        Ok(Awa {
            bin: target.join("release/awa-peer"),
        })
    }

    /// One run of the harness; the JSON line it printed.
    async fn step(&self, url: &str, args: &[String]) -> anyhow::Result<Value> {
        let run = Command::new(&self.bin)
            .args(args)
            .env("DATABASE_URL", url)
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(STEP_LIMIT, run)
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "peers: {PEER}: step `{}` still running after {STEP_LIMIT:?}; stopped",
                    args.join(" ")
                )
            })?
            .with_context(|| format!("peers: {PEER}: starting {}", self.bin.display()))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            bail!(
                "peers: {PEER}: step `{}` failed ({}):\n{}",
                args.join(" "),
                output.status,
                tail(&String::from_utf8_lossy(&output.stderr), 40)
            );
        }
        let line = stdout.lines().last().unwrap_or_default();
        serde_json::from_str(line).with_context(|| {
            format!(
                "peers: {PEER}: step `{}` printed no result: {stdout}",
                args.join(" ")
            )
        })
    }

    /// Runs awa's migrations in its (fresh) database.
    pub(super) async fn setup(&self, url: &str) -> anyhow::Result<Value> {
        let mut r = self.step(url, &["setup".to_owned()]).await?;
        r["version"] = json!(VERSION);
        Ok(r)
    }

    async fn count(&self, url: &str) -> anyhow::Result<Value> {
        self.step(url, &["count".to_owned()]).await
    }

    /// One repetition: one enqueue path after the other (`insert_with` at
    /// each client count, then the two batch paths), each followed by
    /// processing what it queued; then end to end.
    pub(super) async fn rep(
        &self,
        o: &PeerOptions,
        admin: &PgPool,
        url: &str,
        figures: &mut Figures,
    ) -> anyhow::Result<()> {
        let (n, batch) = (o.jobs.to_string(), o.batch.to_string());
        for (i, &clients) in o.clients.iter().enumerate() {
            checkpoint(admin).await;
            let args = vec!["insert-single".to_owned(), n.clone(), clients.to_string()];
            let r = self.step(url, &args).await?;
            let seconds = r["seconds"].as_f64().context("an enqueue step's seconds")?;
            figures.push_single(
                PEER,
                "awa_insert_with",
                "`insert_with`, one per transaction",
                clients,
                rate(o.jobs, Duration::from_secs_f64(seconds)),
                r["p99_ms"].as_f64().unwrap_or(f64::NAN),
                json!({"how": format!("awa-peer {}", args.join(" ")), "output": r}),
            );
            let (key, label) = if i == 0 {
                ("awa_process", "insert_with".to_owned())
            } else {
                (
                    "awa_process_after_insert_with_more_clients",
                    format!("insert_with from {clients} clients"),
                )
            };
            self.process(o, admin, url, key, &label, figures).await?;
        }
        let batches = [
            (
                "awa_insert_many",
                format!("enqueue: `insert_many`, batches of {batch}"),
                vec!["insert-many".to_owned(), n.clone(), batch.clone()],
                "awa_process_after_insert_many",
                "insert_many",
            ),
            (
                "awa_enqueue_params_batch",
                format!("enqueue: `QueueStorage::enqueue_params_batch`, batches of {batch}"),
                vec!["enqueue-batch".to_owned(), n.clone(), batch.clone()],
                "awa_process_after_enqueue_params_batch",
                "enqueue_params_batch",
            ),
        ];
        for (key, name, args, process_key, label) in batches {
            checkpoint(admin).await;
            let r = self.step(url, &args).await?;
            let seconds = r["seconds"].as_f64().context("an enqueue step's seconds")?;
            figures.push_rate(
                key,
                PEER,
                &name,
                rate(o.jobs, Duration::from_secs_f64(seconds)),
                json!({"how": format!("awa-peer {}", args.join(" ")), "output": r}),
            );
            self.process(o, admin, url, process_key, label, figures)
                .await?;
        }
        self.end_to_end(o, admin, url, figures).await
    }

    /// End to end: `serve` runs one Client (`max_workers` = concurrency)
    /// while `insert-for` submits from `o.e2e_clients` clients (as many as W3's) for `o.seconds`; the
    /// jobs that became durably terminal in that window per second (awa's
    /// terminal counters, read by `insert-for` before and after).
    async fn end_to_end(
        &self,
        o: &PeerOptions,
        admin: &PgPool,
        url: &str,
        figures: &mut Figures,
    ) -> anyhow::Result<()> {
        let clients = o.e2e_clients;
        checkpoint(admin).await;
        let mut cmd = Command::new(&self.bin);
        cmd.args(["serve", &o.concurrency.to_string()])
            .env("DATABASE_URL", url);
        let worker = Server::start(PEER, "awa-peer serve", cmd, |l| {
            serde_json::from_str::<Value>(l).is_ok()
        })
        .await?;
        let args = vec![
            "insert-for".to_owned(),
            o.seconds.to_string(),
            clients.to_string(),
        ];
        let r = self.step(url, &args).await;
        let worker_ready = worker.ready.clone();
        let said = worker.stop(false).await?;
        let r = r?;
        let count = |k: &str| r[k].as_i64().context("insert-for's counts");
        let done = usize::try_from(count("done_after")? - count("done_before")?)?;
        // What was left is drained, so that every repetition starts empty.
        let left = self.count(url).await?;
        let open = left["available"].as_u64().unwrap_or(0) + left["running"].as_u64().unwrap_or(0);
        if open > 0 {
            let work = vec![
                "work".to_owned(),
                open.to_string(),
                o.concurrency.to_string(),
            ];
            self.step(url, &work).await?;
        }
        figures.push_e2e(
            "awa",
            PEER,
            E2e {
                clients,
                seconds: r["seconds"].as_f64().context("insert-for's seconds")?,
                added: usize::try_from(r["jobs"].as_u64().context("insert-for's jobs")?)?,
                done,
            },
            json!({"how": format!("awa-peer serve {} running while awa-peer {} submits; finished = awa's terminal counters after - before", o.concurrency, args.join(" ")),
                   "output": r, "left_after": left, "worker_ready": worker_ready, "worker_output_tail": tail(&said, 5)}),
        );
        Ok(())
    }

    /// Processes the jobs just queued: one client, `max_workers` =
    /// concurrency, timed from the process's start until awa's counters
    /// show them all terminal; awa's exact count before and after checks it.
    async fn process(
        &self,
        o: &PeerOptions,
        admin: &PgPool,
        url: &str,
        key: &'static str,
        queued_by: &str,
        figures: &mut Figures,
    ) -> anyhow::Result<()> {
        let before = self.count(url).await?;
        if before["available"].as_i64() != i64::try_from(o.jobs).ok() {
            bail!(
                "peers: {PEER}: before processing, awa counts {before}, expected {} available",
                o.jobs
            );
        }
        checkpoint(admin).await;
        let args = vec![
            "work".to_owned(),
            o.jobs.to_string(),
            o.concurrency.to_string(),
        ];
        let r = self.step(url, &args).await?;
        let after = self.count(url).await?;
        let terminal = |v: &Value| v["terminal"].as_i64().unwrap_or(-1);
        let grown = terminal(&after) - terminal(&before);
        if grown != i64::try_from(o.jobs)?
            || after["available"].as_i64() != Some(0)
            || after["running"].as_i64() != Some(0)
            || r["handled"].as_u64() != u64::try_from(o.jobs).ok()
        {
            bail!(
                "peers: {PEER}: processing {} jobs: awa counted {before} before and {after} after; the worker said {r}",
                o.jobs
            );
        }
        let seconds = r["seconds"].as_f64().context("the work step's seconds")?;
        let from_start = r["seconds_from_client_start"]
            .as_f64()
            .context("the work step's seconds from Client::start")?;
        let name = if key == "awa_process" {
            format!(
                "process {} queued no-op jobs, one client, `max_workers` {}",
                o.jobs, o.concurrency
            )
        } else {
            format!("the same, jobs queued by `{queued_by}`")
        };
        figures.push_rate(
            key,
            PEER,
            &name,
            rate(o.jobs, Duration::from_secs_f64(seconds)),
            json!({"how": format!("awa-peer {}: from process start until its counters show {} more terminal; exact count before and after", args.join(" "), o.jobs),
                   "queued_by": queued_by, "output": r, "exact_before": before, "exact_after": after}),
        );
        if key == "awa_process" {
            figures.push_rate(
                "awa_process_from_client_start",
                PEER,
                "the same, timed from `Client::start`",
                rate(o.jobs, Duration::from_secs_f64(from_start)),
                json!({"how": "the run above, from Client::start", "seconds": from_start}),
            );
        }
        Ok(())
    }
}

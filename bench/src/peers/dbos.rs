//! DBOS Transact 5.3.0 (`@dbos-inc/dbos-sdk`, npm), pinned by
//! bench/peers/dbos's package-lock.json and installed with `npm ci`, through
//! the harness bench/peers/dbos/peer.cjs (one step per node process, each
//! printing one JSON line). The unit of work is a workflow of one no-op
//! step, enqueued with `DBOSClient.enqueue` under a workflow ID of its own
//! (DBOS's idempotency key). Its system database is a database of its own
//! on the bench's cluster.
//!
//! Enqueueing from the first client count is followed by a drain at DBOS's
//! defaults, from the others by a drain with the settings its docs give for
//! a queue's throughput; then end to end. DBOS has no user-facing batch
//! enqueue (its batch path is internal to its event receivers), so it has no
//! batch figure.

use super::node::NpmPeer;
use super::{E2e, Figures, PeerOptions, checkpoint, rate, tail};
use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use sqlx::PgPool;
use std::path::Path;
use std::time::Duration;

pub(super) const DATABASE: &str = "peer_dbos";
const PEER: &str = "DBOS Transact";
const PACKAGE: &str = "@dbos-inc/dbos-sdk";
const VERSION: &str = "5.3.0";
const SCRIPT: &str = "peer.cjs";

#[derive(Debug)]
pub(super) struct Dbos {
    npm: NpmPeer,
}

impl Dbos {
    pub(super) async fn install(cache: &Path) -> anyhow::Result<Dbos> {
        let npm = NpmPeer::install(PEER, "dbos", cache, PACKAGE, VERSION, &[SCRIPT]).await?;
        Ok(Dbos { npm })
    }

    async fn step(&self, url: &str, args: &[&str]) -> anyhow::Result<Value> {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        self.npm.step(SCRIPT, url, &args).await
    }

    /// DBOS launched once in its (fresh) system database: its migrations,
    /// and the queue registered.
    pub(super) async fn setup(&self, url: &str) -> anyhow::Result<Value> {
        let r = self.step(url, &["setup"]).await?;
        Ok(json!({
            "version": VERSION,
            "node": self.npm.node,
            "node_postgres": self.npm.version_of("pg"),
            "setup": r,
        }))
    }

    /// Workflows by status, and the step outputs recorded.
    async fn count(&self, url: &str) -> anyhow::Result<Value> {
        self.step(url, &["count"]).await
    }

    /// One repetition: `DBOSClient.enqueue` from each client count, each
    /// followed by a drain; then end to end.
    pub(super) async fn rep(
        &self,
        o: &PeerOptions,
        admin: &PgPool,
        url: &str,
        figures: &mut Figures,
    ) -> anyhow::Result<()> {
        let n = o.jobs.to_string();
        for (i, &clients) in o.clients.iter().enumerate() {
            checkpoint(admin).await;
            let c = clients.to_string();
            let r = self.step(url, &["enqueue", &n, &c]).await?;
            figures.push_single(
                PEER,
                "dbos_enqueue",
                "`DBOSClient.enqueue` with a workflow ID, one per transaction",
                clients,
                rate(o.jobs, seconds(&r)?),
                r["p99_ms"].as_f64().unwrap_or(f64::NAN),
                json!({"how": format!("peer.cjs enqueue {n} {c}: {clients} callers on a pool of {clients}, each workflow ID a new UUID"), "output": r}),
            );
            let settings = if i == 0 { "defaults" } else { "tuned" };
            self.process(
                o,
                admin,
                url,
                settings,
                &format!("{clients} clients"),
                figures,
            )
            .await?;
        }
        self.end_to_end(o, admin, url, figures).await
    }

    /// Drains the `o.jobs` workflows just enqueued with one DBOS process
    /// launched with `settings`, timed from the process's start until they
    /// are all SUCCESS; the counts before and after check that each ran
    /// once and recorded its step.
    async fn process(
        &self,
        o: &PeerOptions,
        admin: &PgPool,
        url: &str,
        settings: &str,
        queued_by: &str,
        figures: &mut Figures,
    ) -> anyhow::Result<()> {
        let before = self.count(url).await?;
        let status = |v: &Value, s: &str| v["by_status"][s].as_u64().unwrap_or(0);
        let jobs = u64::try_from(o.jobs)?;
        if status(&before, "ENQUEUED") != jobs || status(&before, "PENDING") != 0 {
            bail!("peers: {PEER}: before processing, {before}; expected {jobs} ENQUEUED");
        }
        checkpoint(admin).await;
        let n = o.jobs.to_string();
        let r = self.step(url, &["work", &n, settings]).await?;
        let after = self.count(url).await?;
        let steps = |v: &Value| v["step_outputs"].as_u64().unwrap_or(0);
        if status(&after, "SUCCESS") - status(&before, "SUCCESS") != jobs
            || steps(&after) - steps(&before) != jobs
            || status(&after, "ENQUEUED") + status(&after, "PENDING") != 0
            || r["handled"].as_u64() != Some(jobs)
        {
            bail!(
                "peers: {PEER}: processing {jobs} workflows: {before} before, {after} after; the worker said {r}"
            );
        }
        let (key, what) = if settings == "defaults" {
            (
                "dbos_process_defaults",
                "DBOS's defaults (no concurrency limit: a poll claims every enqueued workflow; a poll a second; a pool of 10)"
                    .to_owned(),
            )
        } else {
            ("dbos_process_tuned", format!("tuned ({})", r["queue"]))
        };
        figures.push_rate(
            key,
            PEER,
            &format!("process {} enqueued one-step workflows, one process, {what}", o.jobs),
            rate(o.jobs, seconds(&r)?),
            json!({"how": format!("peer.cjs work {n} {settings}: from the process's start (DBOS.launch included) until the system database shows them SUCCESS"),
                   "queued_by": queued_by, "output": r, "before": before, "after": after}),
        );
        Ok(())
    }

    /// End to end: `serve` runs one DBOS process with the tuned settings
    /// while `enqueue-for` submits from `o.e2e_clients` clients (as many as W3's) for `o.seconds`;
    /// the workflows that reached SUCCESS in that window per second.
    async fn end_to_end(
        &self,
        o: &PeerOptions,
        admin: &PgPool,
        url: &str,
        figures: &mut Figures,
    ) -> anyhow::Result<()> {
        let clients = o.e2e_clients;
        checkpoint(admin).await;
        let worker = self
            .npm
            .serve(SCRIPT, url, &["serve".to_owned(), "tuned".to_owned()])
            .await?;
        let (s, c) = (o.seconds.to_string(), clients.to_string());
        let r = self.step(url, &["enqueue-for", &s, &c]).await;
        let worker_ready = worker.ready.clone();
        let said = worker.stop(false).await?;
        let r = r?;
        let count = |k: &str| r[k].as_u64().context("enqueue-for's counts");
        let done = usize::try_from(count("done_after")? - count("done_before")?)?;
        // What was left is drained, so that every repetition starts empty.
        let left = self.count(url).await?;
        let open = left["by_status"]["ENQUEUED"].as_u64().unwrap_or(0)
            + left["by_status"]["PENDING"].as_u64().unwrap_or(0);
        if open > 0 {
            self.step(url, &["work", &open.to_string(), "tuned"])
                .await?;
        }
        figures.push_e2e(
            "dbos",
            PEER,
            E2e {
                clients,
                seconds: r["seconds"].as_f64().context("enqueue-for's seconds")?,
                added: usize::try_from(count("jobs")?)?,
                done,
            },
            json!({"how": format!("peer.cjs serve tuned running while peer.cjs enqueue-for {s} {c} submits; finished = SUCCESS after - before"),
                   "output": r, "left_after": left, "worker_ready": worker_ready, "worker_output_tail": tail(&said, 5)}),
        );
        Ok(())
    }
}

/// A step's `seconds`, as a duration.
fn seconds(r: &Value) -> anyhow::Result<Duration> {
    Ok(Duration::from_secs_f64(
        r["seconds"].as_f64().context("a step's seconds")?,
    ))
}

//! pg-boss 10.4.2 (npm), pinned by bench/peers/pg-boss's package-lock.json
//! and installed with `npm ci`, through the harness bench/peers/pg-boss/
//! peer.cjs (one step per node process, each printing one JSON line):
//! `send` from each client count and `insert` in batches, each followed by
//! processing with the documented batch settings; at the defaults (one job
//! every two seconds per worker) a worker runs for a fixed window; then end
//! to end. pg-boss 10.4.2 is the last release that declares node 20 (11 and
//! later ask for node 22).

use super::node::NpmPeer;
use super::{E2e, Figures, PeerOptions, checkpoint, rate, tail};
use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use sqlx::PgPool;
use std::path::Path;
use std::time::Duration;

pub(super) const DATABASE: &str = "peer_pg_boss";
const PEER: &str = "pg-boss";
const VERSION: &str = "10.4.2";
const SCRIPT: &str = "peer.cjs";

#[derive(Debug)]
pub(super) struct PgBoss {
    npm: NpmPeer,
}

impl PgBoss {
    pub(super) async fn install(cache: &Path) -> anyhow::Result<PgBoss> {
        let npm = NpmPeer::install(PEER, "pg-boss", cache, "pg-boss", VERSION, &[SCRIPT]).await?;
        Ok(PgBoss { npm })
    }

    async fn step(&self, url: &str, args: &[&str]) -> anyhow::Result<Value> {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        self.npm.step(SCRIPT, url, &args).await
    }

    /// pg-boss's schema and the queue, in its (fresh) database.
    pub(super) async fn setup(&self, url: &str) -> anyhow::Result<Value> {
        let r = self.step(url, &["setup"]).await?;
        Ok(json!({
            "version": VERSION,
            "node": self.npm.node,
            "node_postgres": self.npm.version_of("pg"),
            "setup": r,
        }))
    }

    /// Jobs of the queue by state.
    async fn count(&self, url: &str) -> anyhow::Result<Value> {
        Ok(self.step(url, &["count"]).await?["by_state"].clone())
    }

    async fn expect_created(&self, url: &str, jobs: usize, when: &str) -> anyhow::Result<()> {
        let counts = self.count(url).await?;
        let created = counts["created"].as_u64().unwrap_or(0);
        let open = created
            + counts["active"].as_u64().unwrap_or(0)
            + counts["retry"].as_u64().unwrap_or(0);
        if created != u64::try_from(jobs)? || open != created {
            bail!(
                "peers: {PEER}: {when}: jobs by state {counts}, expected {jobs} created and none active"
            );
        }
        Ok(())
    }

    /// One repetition: `send` from each client count, `insert` in
    /// batches, each followed by processing; then end to end.
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
            let r = self.step(url, &["send", &n, &c]).await?;
            self.expect_created(url, o.jobs, "after send").await?;
            figures.push_single(
                PEER,
                "pgboss_send",
                "`send`, one per transaction",
                clients,
                rate(o.jobs, seconds(&r)?),
                r["p99_ms"].as_f64().unwrap_or(f64::NAN),
                json!({"how": format!("peer.cjs send {n} {c}: {clients} callers on a pool of {clients}"), "output": r}),
            );
            if i == 0 {
                self.defaults_window(o, admin, url, figures).await?;
            }
            self.process_batch(
                o,
                admin,
                url,
                &format!("`send` from {clients} clients"),
                figures,
            )
            .await?;
        }
        checkpoint(admin).await;
        let batch = o.batch.to_string();
        let r = self.step(url, &["insert", &n, &batch]).await?;
        self.expect_created(url, o.jobs, "after insert").await?;
        figures.push_rate(
            "pgboss_insert",
            PEER,
            &format!("enqueue: `insert`, batches of {}", o.batch),
            rate(o.jobs, seconds(&r)?),
            json!({"how": format!("peer.cjs insert {n} {batch}: one connection, one insert() per {batch} jobs"), "output": r}),
        );
        self.process_batch(o, admin, url, "`insert`", figures)
            .await?;
        self.end_to_end(o, admin, url, figures).await
    }

    /// One worker at pg-boss's defaults for `o.seconds`: what it completes
    /// per second (one job per fetch, a fetch every two seconds).
    async fn defaults_window(
        &self,
        o: &PeerOptions,
        admin: &PgPool,
        url: &str,
        figures: &mut Figures,
    ) -> anyhow::Result<()> {
        checkpoint(admin).await;
        let s = o.seconds.to_string();
        let r = self.step(url, &["work-for", &s, "defaults"]).await?;
        let done = r["completed"]
            .as_f64()
            .context("work-for's completed count")?;
        figures.push_rate(
            "pgboss_process_defaults",
            PEER,
            &format!(
                "process queued no-op jobs, one worker at the defaults (one job per fetch, a fetch every 2 s), for {} s",
                o.seconds
            ),
            done / r["seconds"].as_f64().context("work-for's seconds")?,
            json!({"how": format!("peer.cjs work-for {s} defaults: work() with no options, completed jobs counted before and after"), "output": r}),
        );
        Ok(())
    }

    /// Processes every job queued with one worker at the documented batch
    /// settings, timed from the process's start until pg-boss shows them
    /// all completed.
    async fn process_batch(
        &self,
        o: &PeerOptions,
        admin: &PgPool,
        url: &str,
        queued_by: &str,
        figures: &mut Figures,
    ) -> anyhow::Result<()> {
        let before = self.count(url).await?;
        let created = before["created"].as_u64().unwrap_or(0);
        if created == 0 {
            bail!("peers: {PEER}: nothing to process ({before})");
        }
        checkpoint(admin).await;
        let jobs = created.to_string();
        let r = self.step(url, &["work", &jobs, "batch"]).await?;
        let after = self.count(url).await?;
        let grown =
            after["completed"].as_u64().unwrap_or(0) - before["completed"].as_u64().unwrap_or(0);
        if grown != created || after["created"].as_u64().unwrap_or(0) != 0 {
            bail!(
                "peers: {PEER}: processing {created} jobs: {before} before, {after} after; the worker said {r}"
            );
        }
        figures.push_rate(
            "pgboss_process_batch",
            PEER,
            &format!(
                "process {} queued no-op jobs, one worker, batch settings (`batchSize` {}, `pollingIntervalSeconds` 0.5)",
                o.jobs, o.batch
            ),
            rate(usize::try_from(created)?, seconds(&r)?),
            json!({"how": format!("peer.cjs work {jobs} batch: from the process's start until pg-boss counts them completed"),
                   "queued_by": queued_by, "output": r, "before": before, "after": after}),
        );
        Ok(())
    }

    /// End to end: `serve` runs one worker with the batch settings while
    /// `send-for` submits from `o.e2e_clients` clients (as many as W3's) for `o.seconds`; the jobs
    /// completed in that window per second.
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
            .serve(SCRIPT, url, &["serve".to_owned(), "batch".to_owned()])
            .await?;
        let (s, c) = (o.seconds.to_string(), clients.to_string());
        let r = self.step(url, &["send-for", &s, &c]).await;
        let worker_ready = worker.ready.clone();
        let said = worker.stop(false).await?;
        let r = r?;
        let count = |k: &str| r[k].as_u64().context("send-for's counts");
        let done = usize::try_from(count("done_after")? - count("done_before")?)?;
        // What was left is drained, so that every repetition starts empty.
        let left = self.count(url).await?;
        let open = left["created"].as_u64().unwrap_or(0);
        if open > 0 {
            self.step(url, &["work", &open.to_string(), "batch"])
                .await?;
        }
        figures.push_e2e(
            "pgboss",
            PEER,
            E2e {
                clients,
                seconds: r["seconds"].as_f64().context("send-for's seconds")?,
                added: usize::try_from(count("jobs")?)?,
                done,
            },
            json!({"how": format!("peer.cjs serve batch running while peer.cjs send-for {s} {c} submits; finished = completed after - before"),
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

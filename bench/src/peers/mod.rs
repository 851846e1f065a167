//! The peers (`--peers`): four PostgreSQL job systems, installed on demand
//! and measured on the bench's own cluster in the same run, each in a
//! database of its own, moving the same number of no-op units of work:
//! graphile-worker, awa and pg-boss (job queues, at least once) and DBOS
//! Transact (durable workflows, each step checkpointed). The ledger's
//! figures are then reported as ratios to theirs (report.rs).
//!
//! Installation (npm from committed lock files for graphile-worker, pg-boss
//! and DBOS, cargo for awa) happens before any workload runs, so a missing
//! tool or registry fails the run at once, naming the step and what the
//! tool said.

mod awa;
mod dbos;
mod graphile;
mod node;
mod pgboss;
pub(crate) mod report;

use anyhow::{Context as _, bail};
use serde::Serialize;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub(crate) use report::markdown;

/// What `--peers` runs, from the command line.
#[derive(Debug, Clone)]
pub(crate) struct PeerOptions {
    /// No-op jobs per measured step.
    pub(crate) jobs: usize,
    /// Repetitions of each peer's steps (the median is reported).
    pub(crate) reps: usize,
    /// Concurrent clients for one-job-per-transaction enqueueing: each
    /// count is measured (the ledger's W1 count among them, so that the
    /// comparison can be made at equal concurrency).
    pub(crate) clients: Vec<usize>,
    /// Jobs per call for batch enqueueing.
    pub(crate) batch: usize,
    /// Jobs a worker runs at once (graphile-worker `-j`, awa `max_workers`).
    pub(crate) concurrency: usize,
    /// How long an end-to-end step submits, in seconds.
    pub(crate) seconds: u64,
    /// Clients submitting one job at a time in an end-to-end step: as many
    /// as submit in the ledger's W3.
    pub(crate) e2e_clients: usize,
}

/// The peers, installed and ready to run.
#[derive(Debug)]
pub(crate) struct Peers {
    options: PeerOptions,
    graphile: graphile::Graphile,
    awa: awa::Awa,
    pgboss: pgboss::PgBoss,
    dbos: dbos::Dbos,
}

/// One measured figure over the repetitions, each with what produced it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Figure {
    /// Stable name the ratios look figures up by.
    pub(crate) key: String,
    pub(crate) peer: &'static str,
    /// What was measured, for the table.
    pub(crate) name: String,
    /// `jobs/s` (more is better) or `ms` (a latency: less is better).
    pub(crate) unit: &'static str,
    /// The median over the repetitions.
    pub(crate) value: f64,
    pub(crate) values: Vec<f64>,
    /// Per repetition: how the figure was obtained and what the tool said.
    pub(crate) raw: Vec<Value>,
}

/// An end-to-end window: `clients` submitting one job per transaction for
/// `seconds` while one worker drains.
#[derive(Debug, Clone, Copy)]
struct E2e {
    clients: usize,
    seconds: f64,
    /// Jobs submitted in the window.
    added: usize,
    /// Jobs finished (durably) in the window.
    done: usize,
}

/// Figures as they are measured, one repetition at a time.
#[derive(Debug, Default)]
struct Figures(Vec<Figure>);

impl Figures {
    fn push(
        &mut self,
        key: String,
        peer: &'static str,
        name: &str,
        unit: &'static str,
        value: f64,
        raw: Value,
    ) {
        tracing::info!(key, value, unit, "peer figure");
        if let Some(f) = self.0.iter_mut().find(|f| f.key == key) {
            f.values.push(value);
            f.raw.push(raw);
            f.value = median(&f.values);
        } else {
            self.0.push(Figure {
                key,
                peer,
                name: name.to_owned(),
                unit,
                value,
                values: vec![value],
                raw: vec![raw],
            });
        }
    }

    /// A rate, in jobs per second.
    fn push_rate(&mut self, key: &str, peer: &'static str, name: &str, rate: f64, raw: Value) {
        self.push(key.to_owned(), peer, name, "jobs/s", rate, raw);
    }

    /// One-job-per-transaction enqueueing from `clients` clients: its rate
    /// (`<key>_c<clients>`) and its p99 latency (`<key>_c<clients>_p99`).
    #[allow(clippy::too_many_arguments)]
    fn push_single(
        &mut self,
        peer: &'static str,
        key: &str,
        what: &str,
        clients: usize,
        rate: f64,
        p99_ms: f64,
        raw: Value,
    ) {
        let key = format!("{key}_c{clients}");
        self.push(
            format!("{key}_p99"),
            peer,
            &format!("enqueue p99 latency (ms): {what}, {clients} clients"),
            "ms",
            p99_ms,
            json!({"see": key}),
        );
        self.push(
            key,
            peer,
            &format!("enqueue: {what}, {clients} clients"),
            "jobs/s",
            rate,
            raw,
        );
    }

    /// An end-to-end window: finished per second (`<prefix>_e2e`) and
    /// submitted per second (`<prefix>_e2e_submitted`).
    fn push_e2e(&mut self, prefix: &str, peer: &'static str, e: E2e, raw: Value) {
        let seconds = e.seconds.max(1e-6);
        self.push(
            format!("{prefix}_e2e_submitted"),
            peer,
            &format!(
                "end to end: submitted while draining, {} clients",
                e.clients
            ),
            "jobs/s",
            e.added as f64 / seconds,
            json!({"see": format!("{prefix}_e2e")}),
        );
        let mut raw = raw;
        raw["window_seconds"] = json!(e.seconds);
        raw["added"] = json!(e.added);
        raw["done"] = json!(e.done);
        self.push(
            format!("{prefix}_e2e"),
            peer,
            &format!(
                "end to end: finished while {} clients submit, one worker",
                e.clients
            ),
            "jobs/s",
            e.done as f64 / seconds,
            raw,
        );
    }
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => f64::midpoint(v[n / 2 - 1], v[n / 2]),
    }
}

/// How long one measured peer step may run before it is stopped and the
/// run fails.
const STEP_LIMIT: Duration = Duration::from_secs(20 * 60);

/// Where the peers are installed: `target/peers/` of the workspace.
fn cache_dir() -> PathBuf {
    workspace_dir().join("target").join("peers")
}

fn workspace_dir() -> PathBuf {
    let bench = Path::new(env!("CARGO_MANIFEST_DIR"));
    bench.parent().unwrap_or(bench).to_path_buf()
}

/// The sources of the peers' harnesses: `bench/peers/`.
fn sources_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers")
}

/// Runs a setup command, failing with which peer, which step, and what the
/// command said on stderr.
async fn setup_command(
    peer: &str,
    step: &str,
    cmd: &mut tokio::process::Command,
) -> anyhow::Result<String> {
    let shown = format!("{:?}", cmd.as_std());
    let output = cmd
        .output()
        .await
        .map_err(|e| anyhow::anyhow!("peers: {peer}: {step}: could not start {shown}: {e}"))?;
    if !output.status.success() {
        bail!(
            "peers: {peer}: {step} failed ({}): {shown}\n{}",
            output.status,
            tail(&String::from_utf8_lossy(&output.stderr), 40)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The last `lines` lines of `text`.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `url` with its database name replaced by `database`.
fn with_database(url: &str, database: &str) -> anyhow::Result<String> {
    let after_scheme = url.find("://").context("a database URL has a scheme")? + 3;
    let (head, rest) = url.split_at(after_scheme);
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let query = path.find('?').map_or("", |q| &path[q..]);
    Ok(format!("{head}{authority}/{database}{query}"))
}

/// Drops and creates `database` through `pool` (a superuser's).
async fn fresh_database(pool: &sqlx::PgPool, database: &str) -> anyhow::Result<()> {
    for sql in [
        format!("drop database if exists {database} with (force)"),
        format!("create database {database}"),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
            .execute(pool)
            .await
            .with_context(|| {
                format!("peers: {sql} (the peers need a role that can create databases)")
            })?;
    }
    Ok(())
}

/// A checkpoint before each timed step, so that none falls inside one by
/// chance (the method of the peers' reference run).
async fn checkpoint(pool: &sqlx::PgPool) {
    if let Err(e) = sqlx::raw_sql("checkpoint").execute(pool).await {
        tracing::warn!(error = %e, "checkpoint before a peer step refused");
    }
}

impl Peers {
    /// Installs graphile-worker, pg-boss and DBOS with npm and builds the
    /// awa harness with cargo, all under `target/peers/`.
    pub(crate) async fn prepare(options: PeerOptions) -> anyhow::Result<Peers> {
        if options.jobs == 0
            || options.reps == 0
            || options.clients.is_empty()
            || options.clients.contains(&0)
            || options.batch == 0
            || options.seconds == 0
            || options.e2e_clients == 0
        {
            bail!("--peer-jobs, --peer-reps, clients, batch and seconds must be positive");
        }
        let cache = cache_dir();
        std::fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
        let graphile = graphile::Graphile::install(&cache).await?;
        let pgboss = pgboss::PgBoss::install(&cache).await?;
        let dbos = dbos::Dbos::install(&cache).await?;
        let awa = awa::Awa::build(&cache).await?;
        Ok(Peers {
            options,
            graphile,
            awa,
            pgboss,
            dbos,
        })
    }

    /// Measures the peers on the cluster of `admin` (a pool on the bench's
    /// database, as a superuser), `url` being the bench's database URL.
    pub(crate) async fn run(
        &self,
        admin: &sqlx::PgPool,
        url: &str,
        pgbench_bin: &Path,
        out: &Path,
    ) -> anyhow::Result<Value> {
        let o = &self.options;
        let mut figures = Figures::default();
        let gw_url = with_database(url, graphile::DATABASE)?;
        let awa_url = with_database(url, awa::DATABASE)?;
        let pgboss_url = with_database(url, pgboss::DATABASE)?;
        let dbos_url = with_database(url, dbos::DATABASE)?;
        for database in [
            graphile::DATABASE,
            awa::DATABASE,
            pgboss::DATABASE,
            dbos::DATABASE,
        ] {
            fresh_database(admin, database).await?;
        }
        let gw_setup = self.graphile.setup(&gw_url).await?;
        let awa_setup = self.awa.setup(&awa_url).await?;
        let pgboss_setup = self.pgboss.setup(&pgboss_url).await?;
        let dbos_setup = self.dbos.setup(&dbos_url).await?;
        let gw_pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect(&gw_url)
            .await
            .context("peers: graphile-worker: connecting to its database")?;
        let pgbench = crate::pgbench::PgBench::new(pgbench_bin, &gw_url, &out.join("peers"))?;
        for rep in 1..=o.reps {
            // Rotate the order, so that drift over the run (WAL, autovacuum)
            // does not always favour the same peer.
            for turn in 0..4 {
                match (turn + rep - 1) % 4 {
                    0 => {
                        self.graphile
                            .rep(o, &gw_pool, &pgbench, &gw_url, &mut figures)
                            .await?;
                    }
                    1 => self.awa.rep(o, admin, &awa_url, &mut figures).await?,
                    2 => self.pgboss.rep(o, admin, &pgboss_url, &mut figures).await?,
                    _ => self.dbos.rep(o, admin, &dbos_url, &mut figures).await?,
                }
            }
        }
        gw_pool.close().await;
        Ok(json!({
            "jobs": o.jobs,
            "reps": o.reps,
            "enqueue_clients": o.clients,
            "batch": o.batch,
            "concurrency": o.concurrency,
            "end_to_end_seconds": o.seconds,
            "end_to_end_clients": o.e2e_clients,
            "graphile_worker": gw_setup,
            "awa": awa_setup,
            "pg_boss": pgboss_setup,
            "dbos": dbos_setup,
            "figures": figures.0,
        }))
    }
}

/// A step's rate, and the time it took, from a job count and a duration.
fn rate(jobs: usize, took: Duration) -> f64 {
    jobs as f64 / took.as_secs_f64().max(1e-6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_url_gets_another_database_and_keeps_its_query() {
        assert_eq!(
            with_database(
                "postgres://postgres:pw@127.0.0.1:5432/command_ledger",
                "peer"
            )
            .expect("a URL"),
            "postgres://postgres:pw@127.0.0.1:5432/peer"
        );
        assert_eq!(
            with_database("postgres://u@h/db?sslmode=disable", "peer").expect("a URL"),
            "postgres://u@h/peer?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://u@h", "peer").expect("a URL"),
            "postgres://u@h/peer"
        );
    }

    #[tokio::test]
    async fn a_failed_setup_step_names_the_peer_the_step_and_what_it_said() {
        let missing = setup_command(
            "graphile-worker",
            "npm ci",
            &mut tokio::process::Command::new("/nonexistent/npm"),
        )
        .await
        .expect_err("no such program");
        let text = missing.to_string();
        assert!(
            text.starts_with("peers: graphile-worker: npm ci: could not start"),
            "{text}"
        );

        let failed = setup_command(
            "awa",
            "cargo build",
            tokio::process::Command::new("sh").args(["-c", "echo no network >&2; exit 101"]),
        )
        .await
        .expect_err("it exits 101");
        let text = failed.to_string();
        assert!(text.starts_with("peers: awa: cargo build failed"), "{text}");
        assert!(text.ends_with("\nno network"), "{text}");
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}

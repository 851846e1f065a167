//! The workloads: the API and the custodian in this process, over a private
//! cluster (or the database given), driven by load::*, counted in the
//! database.

use anyhow::{Context as _, bail};
use command_ledger::bench::{
    CustodianConfig, CustodianStats as Stats, Effect, EffectCall, EffectFuture, EffectOutcome,
    Effects, Isolation, Ledger, Role, ServiceRole,
};
use serde_json::{Value, json};
use sqlx::{PgPool, Row as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::load::{self, Keys, Target};
use crate::pgbench::{Baseline, PgBench};

/// Clients for the workloads that are not a sweep.
pub(crate) const CLIENTS: usize = 64;

/// The isolation of the custodian's transactions: what W5 compares.
#[derive(Debug, Clone, Copy)]
struct Txns {
    claim: Isolation,
    /// Start and record.
    transitions: Isolation,
}

impl Txns {
    /// The service's own settings.
    fn service() -> Self {
        let c = CustodianConfig::new(Vec::new());
        Txns {
            claim: c.claim_isolation,
            transitions: c.isolation,
        }
    }

    fn all(isolation: Isolation) -> Self {
        Txns {
            claim: isolation,
            transitions: isolation,
        }
    }
}

/// The custodian the harness runs for `authority`: a claim batch, at least
/// 64 effects in flight (more for a bigger batch), the isolation to compare.
fn custodian_config(authority: &str, batch: i64, txns: Txns) -> CustodianConfig {
    let mut config = CustodianConfig::new(vec![authority.to_owned()]);
    config.batch_size = batch;
    config.isolation = txns.transitions;
    config.claim_isolation = txns.claim;
    config.max_in_flight = usize::try_from(batch.max(64)).unwrap_or(64);
    config
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// An effect that answers `applied` after a fixed latency, like a remote
/// provider that takes that long.
#[derive(Debug, Clone, Copy)]
struct Sleeps(Duration);

impl Effect for Sleeps {
    fn execute<'a>(&'a self, call: &'a EffectCall) -> EffectFuture<'a> {
        Box::pin(async move {
            tokio::time::sleep(self.0).await;
            EffectOutcome::Applied(
                json!({"slept_ms": self.0.as_millis(), "key": call.downstream_key}),
            )
        })
    }
}

/// Who submits during an end-to-end run.
#[derive(Debug, Clone, Copy)]
enum Submitters {
    /// 64 clients, one command per request.
    Single,
    /// `clients` devices, `items` commands per batch request.
    Batches { clients: usize, items: usize },
}
const ARGS: &str = r#"{"to":"ada@example.com","amount":"12.00 USD"}"#;

#[derive(Debug)]
pub(crate) struct Bench {
    db: Ledger,
    target: Target,
    scope: Uuid,
    token_hash: String,
    pgbench: PgBench,
    point: Duration,
    stop_api: watch::Sender<bool>,
    api: JoinHandle<std::io::Result<()>>,
    /// The private cluster's directory (its data and its roles' password
    /// files), removed when the run stops; none with `--database-url`.
    private_state: Option<PathBuf>,
}

/// A custodian running in this process until stopped.
#[derive(Debug)]
struct RunningCustodian {
    stop: watch::Sender<bool>,
    task: JoinHandle<anyhow::Result<()>>,
    stats: Arc<Stats>,
}

impl RunningCustodian {
    async fn stop(self) -> Arc<Stats> {
        let _ = self.stop.send(true);
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "custodian stopped"),
            Err(e) => tracing::error!(error = %e, "custodian task failed"),
        }
        self.stats
    }
}

fn body(authority: &str) -> &'static str {
    // Lives for the run: a handful of distinct bodies.
    Box::leak(
        format!(r#"{{"kind":"noop","authority":"{authority}","args":{ARGS}}}"#).into_boxed_str(),
    )
}

fn stopped(rx: &watch::Receiver<bool>) -> impl Future<Output = ()> + Send + 'static {
    let mut rx = rx.clone();
    async move {
        let _ = rx.wait_for(|stop| *stop).await;
    }
}

impl Bench {
    pub(crate) async fn start(
        database_url: Option<String>,
        out: &Path,
        api_pool: u32,
        point: Duration,
    ) -> anyhow::Result<Bench> {
        let state_dir = out.join("state");
        let private_state = database_url.is_none().then(|| state_dir.clone());
        if private_state.is_some() {
            let _ = std::fs::remove_dir_all(&state_dir);
        }
        std::fs::create_dir_all(&state_dir)?;
        let db = Ledger::open(database_url, &state_dir, 8).await?;
        sqlx::raw_sql(
            "create table if not exists bench_raw (id bigserial primary key, v int not null)",
        )
        .execute(db.pool())
        .await?;
        let token = db
            .issue_token(&format!("bench-{}", Uuid::now_v7()), Role::Device)
            .await?;
        let hash = token.hash;
        let token = token.secret;
        let scope: Uuid =
            sqlx::query_scalar("select principal_id from api_tokens where token_hash = $1")
                .bind(hash.as_slice())
                .fetch_one(db.pool())
                .await?;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let (stop_api, rx) = watch::channel(false);
        let api = db.serve_api(listener, api_pool, stopped(&rx)).await?;
        let target = Target {
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(1024)
                .build()?,
            url,
            token,
        };
        let bin_dir = command_ledger::bench::find_bin_dir().unwrap_or_default();
        // The baselines run the API's SQL as the API's role (its grants and
        // row policies included), where the private cluster gives it a login.
        sqlx::raw_sql(
            "grant insert on bench_raw to ledger_api; grant usage on sequence bench_raw_id_seq to ledger_api",
        )
        .execute(db.pool())
        .await?;
        let pgbench_url = db.role_url(ServiceRole::Api).unwrap_or(db.url()).to_owned();
        let pgbench = PgBench::new(&bin_dir, &pgbench_url, &out.join("pgbench"))?;
        Ok(Bench {
            db,
            target,
            scope,
            token_hash: hex::encode(hash),
            pgbench,
            point,
            stop_api,
            api,
            private_state,
        })
    }

    /// Stops the API and the cluster, then removes a private cluster's
    /// directory: nothing of it outlives the run, its password files least.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop_api.send(true);
        let _ = self.api.await;
        self.db.close().await?;
        if let Some(dir) = &self.private_state {
            std::fs::remove_dir_all(dir)
                .with_context(|| format!("removing the private cluster's {}", dir.display()))?;
        }
        Ok(())
    }

    fn pool(&self) -> &PgPool {
        self.db.pool()
    }

    /// The bench's own pool and URL (a superuser's on the private cluster),
    /// for the peers' databases on the same cluster.
    pub(crate) fn admin_pool(&self) -> &PgPool {
        self.db.pool()
    }

    pub(crate) fn url(&self) -> &str {
        self.db.url()
    }

    pub(crate) async fn settings(&self) -> anyhow::Result<Value> {
        let rows =
            sqlx::query("select name, setting from pg_settings where name = any($1) order by name")
                .bind(vec![
                    "fsync",
                    "synchronous_commit",
                    "wal_sync_method",
                    "full_page_writes",
                    "commit_delay",
                    "shared_buffers",
                    "max_connections",
                    "wal_level",
                    "server_version",
                ])
                .fetch_all(self.pool())
                .await?;
        let mut settings = serde_json::Map::new();
        for row in rows {
            settings.insert(row.get("name"), Value::String(row.get("setting")));
        }
        Ok(Value::Object(settings))
    }

    // ---- baselines ------------------------------------------------------

    fn auth_sql(&self) -> String {
        format!(
            "select p.id, p.name, p.role from api_tokens t join principals p on p.id = t.principal_id \
             where t.token_hash = decode('{}', 'hex') and t.revoked_at is null \
             and (t.expires_at is null or t.expires_at > now());",
            self.token_hash
        )
    }

    /// The submit path's SQL as the API runs it: authenticate, then the
    /// insert of `db::submissions::insert_pending` (one autocommit statement).
    fn submit_sql(&self, key: &str) -> String {
        format!(
            "{auth}\n\
             insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind, \
             authority_id, run_id, args, canonical, deadline_at, pinned_generation, intent_digest, \
             canonical_rules, intent_epoch, created_at, identity_digest) \
             select gen_random_uuid(), '{scope}', {key}, sha256(random()::text::bytea), 2, 'noop', \
             'pgbench', null, '{ARGS}'::jsonb, '{ARGS}'::jsonb, null, null, sha256(random()::text::bytea), \
             '{{}}', null, now(), sha256(random()::text::bytea) from (select set_config('command_ledger.actor', 'principal' || chr(58) || 'bench', true)) as ctx \
             on conflict on constraint commands_scope_key_unique do nothing returning *;\n",
            auth = self.auth_sql(),
            scope = self.scope,
        )
    }

    fn baseline_scripts(&self) -> [(&'static str, String); 3] {
        let dup_lookup = format!(
            "select * from commands where scope = '{}' and idempotency_key = 'pgbench-dup';\n",
            self.scope
        );
        [
            (
                "L_raw",
                "insert into bench_raw (v) values (1);\n".to_owned(),
            ),
            ("L_submit", self.submit_sql("gen_random_uuid()::text")),
            ("L_dup", self.submit_sql("'pgbench-dup'") + &dup_lookup),
        ]
    }

    pub(crate) async fn baselines(&self, clients: &[usize]) -> anyhow::Result<Value> {
        let most = clients.iter().copied().max().unwrap_or(CLIENTS);
        let mut out = serde_json::Map::new();
        for (name, script) in self.baseline_scripts() {
            let b = self.pgbench(name, &script, most, None).await?;
            out.insert(name.to_owned(), serde_json::to_value(b)?);
        }
        Ok(Value::Object(out))
    }

    async fn pgbench(
        &self,
        name: &'static str,
        script: &str,
        clients: usize,
        rate: Option<f64>,
    ) -> anyhow::Result<Baseline> {
        // pgbench is a separate process; keep the runtime free meanwhile.
        let seconds = self.point.as_secs().max(1);
        tokio::task::block_in_place(|| self.pgbench.run(name, script, clients, seconds, rate))
    }

    // ---- W1 --------------------------------------------------------------

    /// What the ledger's counters (migration 0017) cost the submit path: W1
    /// at `clients`, with the history's counting trigger on, off, off, on
    /// (each after a second of warm-up). The API's request counts are added
    /// to `ledger_counts` once a second throughout (one statement a second,
    /// whatever the load); the trigger is what runs in every submission's
    /// own transaction.
    pub(crate) async fn w1_counts(&self, clients: usize) -> anyhow::Result<Value> {
        let body = body("bench-w1c");
        let (mut on, mut off) = (Vec::new(), Vec::new());
        for (i, counting) in [true, false, false, true].into_iter().enumerate() {
            self.set_counting(counting).await?;
            let warm = Keys::Unique {
                prefix: format!("w1cw-{i}"),
            };
            load::closed_loop(&self.target, clients, Duration::from_secs(1), &warm, body).await;
            let keys = Keys::Unique {
                prefix: format!("w1c-{i}"),
            };
            let r = load::closed_loop(&self.target, clients, self.point, &keys, body).await;
            if counting { &mut on } else { &mut off }.push(r.rps());
        }
        self.set_counting(true).await?;
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        Ok(json!({
            "clients": clients,
            "counting_rps": on,
            "not_counting_rps": off,
            "ratio": mean(&on) / mean(&off).max(f64::MIN_POSITIVE),
        }))
    }

    async fn set_counting(&self, on: bool) -> anyhow::Result<()> {
        let how = if on { "enable" } else { "disable" };
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "alter table command_history {how} trigger command_history_counts"
        )))
        .execute(self.pool())
        .await
        .context("switching the counting trigger (the bench's login must own command_history or be a superuser)")?;
        Ok(())
    }

    pub(crate) async fn w1(&self, clients: &[usize]) -> anyhow::Result<Value> {
        let body = body("bench-w1");
        let mut closed = Vec::new();
        let mut best = 0.0f64;
        for &c in clients {
            let keys = Keys::Unique {
                prefix: format!("w1-{c}"),
            };
            load::closed_loop(&self.target, c, Duration::from_secs(1), &keys, body).await;
            let keys = Keys::Unique {
                prefix: format!("w1m-{c}"),
            };
            self.checkpoint().await;
            let r = load::closed_loop(&self.target, c, self.point, &keys, body).await;
            best = best.max(r.rps());
            closed.push(json!({
                "clients": c, "rps": r.rps(), "errors": r.errors,
                "p50_ms": r.ms(0.5), "p99_ms": r.ms(0.99), "p999_ms": r.ms(0.999),
            }));
        }
        let rate = (best * 0.5).max(1.0);
        let r = load::open_loop(&self.target, rate, self.point, "w1-open", body).await;
        let most = clients.iter().copied().max().unwrap_or(CLIENTS);
        let pg = self
            .pgbench(
                "L_submit_rate",
                &self.submit_sql("gen_random_uuid()::text"),
                most,
                Some(rate),
            )
            .await?;
        Ok(json!({
            "closed": closed,
            "open": {
                "rate": rate, "rps": r.rps(), "errors": r.errors,
                "p50_ms": r.ms(0.5), "p99_ms": r.ms(0.99), "p999_ms": r.ms(0.999),
                "pgbench_same_rate": pg,
            },
        }))
    }

    // ---- W2 --------------------------------------------------------------

    pub(crate) async fn w2(&self) -> anyhow::Result<Value> {
        let body = body("bench-w2");
        // Keys already recorded, with this body: repeating them is a replay.
        let known: Vec<String> = (0..1000).map(|i| format!("w2-known-{i}")).collect();
        submit_known(&self.target, &known, body).await?;
        let known = Arc::new(known);
        let mut mixes = Vec::new();
        for share in [0.5, 0.99] {
            let keys = Keys::DuplicateMix {
                prefix: format!("w2-{share}"),
                share,
                known: Arc::clone(&known),
            };
            let r = load::closed_loop(&self.target, CLIENTS, self.point, &keys, body).await;
            mixes.push(json!({
                "duplicate_share": share, "rps": r.rps(), "errors": r.errors,
                "p50_ms": r.ms(0.5), "p99_ms": r.ms(0.99),
            }));
        }
        // WAL written per request, duplicates only and new keys only.
        let wal_per = |share: f64, prefix: &'static str| {
            let keys = Keys::DuplicateMix {
                prefix: prefix.to_owned(),
                share,
                known: Arc::clone(&known),
            };
            async move {
                let before = self.wal().await?;
                let r = load::closed_loop(&self.target, CLIENTS, self.point, &keys, body).await;
                let after = self.wal().await?;
                anyhow::Ok((after.bytes - before.bytes) / r.ok.max(1) as f64)
            }
        };
        let per_duplicate = wal_per(1.0, "w2-wal-dup").await?;
        let per_new = wal_per(0.0, "w2-wal-new").await?;
        Ok(json!({
            "mixes": mixes,
            "wal_bytes_per_duplicate": per_duplicate,
            "wal_bytes_per_new": per_new,
        }))
    }

    /// WAL counters, after letting the statistics settle (backends flush
    /// them at most once a second).
    async fn wal(&self) -> anyhow::Result<Wal> {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let row = sqlx::query(
            "select wal_bytes::float8 as bytes, wal_sync::float8 as syncs, \
             (select xact_commit::float8 from pg_stat_database where datname = current_database()) as commits, \
             (select n_tup_upd::float8 from pg_stat_user_tables where relname = 'commands') as updates, \
             (select n_tup_hot_upd::float8 from pg_stat_user_tables where relname = 'commands') as hot_updates \
             from pg_stat_wal",
        )
        .fetch_one(self.pool())
        .await?;
        Ok(Wal {
            bytes: row.get("bytes"),
            syncs: row.get("syncs"),
            commits: row.get("commits"),
            updates: row.get("updates"),
            hot_updates: row.get("hot_updates"),
        })
    }

    /// Where the cluster's reads and writes went, for a profile of one
    /// point (read right after [`Self::wal`], which lets the statistics
    /// settle). Block reads are reads from outside shared buffers (the
    /// kernel's page cache or the disk); their time is counted only while
    /// `track_io_timing` is on, as W4 turns it on.
    async fn io(&self) -> anyhow::Result<Io> {
        let row = sqlx::query(
            "select (select wal_fpi::float8 from pg_stat_wal) as fpi, \
             d.blks_read::float8 as blks_read, d.blks_hit::float8 as blks_hit, \
             d.blk_read_time::float8 as read_ms, d.blk_write_time::float8 as write_ms, \
             (select (checkpoints_timed + checkpoints_req)::float8 from pg_stat_bgwriter) as checkpoints, \
             (select buffers_backend::float8 from pg_stat_bgwriter) as backend_writes, \
             (select buffers_checkpoint::float8 from pg_stat_bgwriter) as checkpoint_writes \
             from pg_stat_database d where d.datname = current_database()",
        )
        .fetch_one(self.pool())
        .await?;
        // Per table and per index: blocks read from outside shared buffers.
        let relations = sqlx::query(
            "select relname::text as name, heap_blks_read::float8 as blocks \
             from pg_statio_user_tables \
             union all \
             select indexrelname::text, idx_blks_read::float8 from pg_statio_user_indexes",
        )
        .fetch_all(self.pool())
        .await?
        .into_iter()
        .map(|r| {
            (
                r.get("name"),
                r.get::<Option<f64>, _>("blocks").unwrap_or(0.0),
            )
        })
        .collect();
        Ok(Io {
            fpi: row.get("fpi"),
            blks_read: row.get("blks_read"),
            blks_hit: row.get("blks_hit"),
            read_ms: row.get("read_ms"),
            write_ms: row.get("write_ms"),
            checkpoints: row.get("checkpoints"),
            backend_writes: row.get("backend_writes"),
            checkpoint_writes: row.get("checkpoint_writes"),
            relations,
        })
    }

    // ---- W3 / W3b / W5 -----------------------------------------------------

    async fn custodian(
        &self,
        authority: &str,
        batch: i64,
        txns: Txns,
    ) -> anyhow::Result<RunningCustodian> {
        self.custodian_with(
            authority,
            custodian_config(authority, batch, txns),
            Effects::default(),
        )
        .await
    }

    async fn custodian_with(
        &self,
        authority: &str,
        mut config: CustodianConfig,
        effects: Effects,
    ) -> anyhow::Result<RunningCustodian> {
        if let Some(n) = std::env::var("BENCH_MAX_IN_FLIGHT")
            .ok()
            .and_then(|s| s.parse().ok())
        {
            config.max_in_flight = n;
        }
        if let Some(ms) = std::env::var("BENCH_POLL_INTERVAL_MS")
            .ok()
            .and_then(|s| s.parse().ok())
        {
            config.poll_interval = Duration::from_millis(ms);
        }
        if let Some(secs) = std::env::var("BENCH_RECOVERY_INTERVAL")
            .ok()
            .and_then(|s| s.parse().ok())
        {
            config.recovery_interval = Duration::from_secs(secs);
        }
        let (stop, rx) = watch::channel(false);
        let (task, stats) = self
            .db
            .spawn_custodian(config, effects, 8, stopped(&rx))
            .await?;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let held: bool = sqlx::query_scalar(
                "select exists (select 1 from authorities where id = $1 and lease_expires_at > now())",
            )
            .bind(authority)
            .fetch_one(self.pool())
            .await?;
            if held {
                break;
            }
            if Instant::now() > deadline {
                bail!("the custodian for {authority} took no lease");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(RunningCustodian { stop, task, stats })
    }

    async fn db_now(&self) -> anyhow::Result<chrono::DateTime<chrono::Utc>> {
        Ok(sqlx::query_scalar("select clock_timestamp()")
            .fetch_one(self.pool())
            .await?)
    }

    async fn drain(&self, authority: &str, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let open: i64 = sqlx::query_scalar(
                "select (select count(*) from command_queue where authority_id = $1) \
                      + (select count(*) from command_in_flight where authority_id = $1)",
            )
            .bind(authority)
            .fetch_one(self.pool())
            .await?;
            if open == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{open} commands of {authority} still open after {limit:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Submissions from 64 clients with a custodian of `batch` running:
    /// applied per second counted in the database over the measured window.
    async fn end_to_end(&self, authority: &str, batch: i64, txns: Txns) -> anyhow::Result<Value> {
        let config = custodian_config(authority, batch, txns);
        self.end_to_end_with(authority, config, Effects::default(), Submitters::Single)
            .await
    }

    async fn end_to_end_with(
        &self,
        authority: &str,
        config: CustodianConfig,
        effects: Effects,
        submitters: Submitters,
    ) -> anyhow::Result<Value> {
        let batch = config.batch_size;
        let custodian = self.custodian_with(authority, config, effects).await?;
        let body = body(authority);
        let submit = |prefix: String, duration: Duration| {
            let keys = Keys::Unique {
                prefix: prefix.clone(),
            };
            async move {
                match submitters {
                    Submitters::Single => {
                        load::closed_loop(&self.target, CLIENTS, duration, &keys, body).await
                    }
                    Submitters::Batches { clients, items } => {
                        load::batch_loop(&self.target, clients, duration, &prefix, items, body)
                            .await
                    }
                }
            }
        };
        submit(format!("{authority}-warm"), Duration::from_secs(1)).await;
        self.checkpoint().await;
        let wal_before = self.wal().await?;
        let io_before = self.io().await?;
        let t0 = self.db_now().await?;
        let r = submit(authority.to_owned(), self.point).await;
        let t1 = self.db_now().await?;
        let wal_after = self.wal().await?;
        let io_after = self.io().await?;
        // What the custodian finished in the window, whenever it was
        // submitted, and how long each of those took from submit to applied.
        let row = sqlx::query(
            "select count(*)::float8 as applied, \
             percentile_cont(0.5) within group (order by extract(epoch from finished_at - created_at))::float8 as p50, \
             percentile_cont(0.99) within group (order by extract(epoch from finished_at - created_at))::float8 as p99 \
             from commands where authority_id = $1 and state = 'applied' \
             and finished_at between $2 and $3",
        )
        .bind(authority)
        .bind(t0)
        .bind(t1)
        .fetch_one(self.pool())
        .await?;
        let window = (t1 - t0).as_seconds_f64();
        let applied: f64 = row.get("applied");
        // What is left stays pending under an authority nobody serves.
        let stats = custodian.stop().await;
        let transitions = stats.claimed.load(Ordering::Relaxed)
            + stats.started.load(Ordering::Relaxed)
            + stats.applied.load(Ordering::Relaxed)
            + stats.failed.load(Ordering::Relaxed);
        let retries = stats.serialization_retries.load(Ordering::Relaxed);
        let commands = applied.max(1.0);
        Ok(json!({
            "batch": batch,
            "submit_rps": r.rps(),
            "submit_errors": r.errors,
            "applied_per_s": applied / window,
            "p50_ms": row.get::<Option<f64>, _>("p50").map(|s| s * 1000.0),
            "p99_ms": row.get::<Option<f64>, _>("p99").map(|s| s * 1000.0),
            "wal_syncs_per_command": (wal_after.syncs - wal_before.syncs) / commands,
            "commits_per_command": (wal_after.commits - wal_before.commits) / commands,
            "wal_bytes_per_command": (wal_after.bytes - wal_before.bytes) / commands,
            "io_per_command": io_after.per_command(&io_before, commands),
            "transitions": transitions,
            "serialization_retries": retries,
            "retries_per_1000_transitions": retries as f64 * 1000.0 / transitions.max(1) as f64,
        }))
    }

    /// W7: devices flushing their queues: `clients` loops each sending
    /// batches of `items` new commands to `POST /v1/commands/batch`; items
    /// recorded per second (every item answered `new`).
    pub(crate) async fn w7(&self, clients: usize, items: usize) -> anyhow::Result<Value> {
        let body = body("bench-w7");
        load::batch_loop(
            &self.target,
            clients,
            Duration::from_secs(1),
            "w7-warm",
            items,
            body,
        )
        .await;
        self.checkpoint().await;
        let r = load::batch_loop(&self.target, clients, self.point, "w7", items, body).await;
        Ok(json!({
            "clients": clients,
            "items_per_batch": items,
            "items_per_s": r.rps(),
            "batches_failed": r.errors,
            "batch_p50_ms": r.ms(0.5),
            "batch_p99_ms": r.ms(0.99),
        }))
    }

    /// W3 with batch-submitting clients: `clients` devices sending batches
    /// of `items`, a custodian of `batch` draining; applied per second.
    pub(crate) async fn w3_batches(
        &self,
        clients: usize,
        items: usize,
        batch: i64,
    ) -> anyhow::Result<Value> {
        let authority = "e2e-batches";
        let mut r = self
            .end_to_end_with(
                authority,
                custodian_config(authority, batch, Txns::service()),
                Effects::default(),
                Submitters::Batches { clients, items },
            )
            .await?;
        r["clients"] = json!(clients);
        r["items_per_batch"] = json!(items);
        Ok(r)
    }

    /// W8: does a custodian keep up with 64 submitting clients when effects
    /// take time? For each effect latency, W3 with the custodian's defaults
    /// and with each candidate `(batch, max_in_flight)`: submitted and
    /// applied per second (applied / submitted near 1 keeps up).
    pub(crate) async fn w8(
        &self,
        latencies_ms: &[u64],
        candidates: &[(i64, usize)],
    ) -> anyhow::Result<Value> {
        let defaults = CustodianConfig::new(Vec::new());
        let mut configs = vec![(defaults.batch_size, defaults.max_in_flight)];
        for c in candidates {
            if !configs.contains(c) {
                configs.push(*c);
            }
        }
        let mut out = Vec::new();
        for &ms in latencies_ms {
            for &(batch, in_flight) in &configs {
                let authority = format!("w8-{ms}ms-b{batch}-f{in_flight}");
                let mut config = custodian_config(&authority, batch, Txns::service());
                config.max_in_flight = in_flight;
                let mut effects = Effects::default();
                effects.register(
                    "noop",
                    Sleeps(Duration::from_millis(ms)),
                    Duration::from_secs(30),
                );
                let mut r = self
                    .end_to_end_with(&authority, config, effects, Submitters::Single)
                    .await?;
                r["effect_ms"] = json!(ms);
                r["max_in_flight"] = json!(in_flight);
                r["keeps_up"] = json!(f(&r["applied_per_s"]) / f(&r["submit_rps"]));
                tracing::info!(%r, "W8 point");
                out.push(r);
            }
        }
        Ok(Value::Array(out))
    }

    pub(crate) async fn w3(&self, batches: &[i64]) -> anyhow::Result<Value> {
        let mut out = Vec::new();
        for &b in batches {
            out.push(
                self.end_to_end(&format!("e2e-b{b}"), b, Txns::service())
                    .await?,
            );
        }
        Ok(Value::Array(out))
    }

    /// W5: what SERIALIZABLE costs. W3 at the custodian's default batch,
    /// back to back, with every transaction at SERIALIZABLE, with only the
    /// claim at READ COMMITTED, and with everything at READ COMMITTED (a mode
    /// only the harness selects); then a burn-down of `burn` commands with
    /// the claim at each isolation (the claim's own cost, without HTTP).
    pub(crate) async fn w5(&self, batch: i64, burn: usize) -> anyhow::Result<Value> {
        use Isolation::{ReadCommitted, Serializable};
        let claim_rc = Txns {
            claim: ReadCommitted,
            transitions: Serializable,
        };
        // The claim's two forms run twice each, A B B A, so that neither
        // has the cold start or the warmer cache to itself.
        let claim_read_committed = self
            .end_to_end(&format!("w5-crc-b{batch}"), batch, claim_rc)
            .await?;
        let serializable = self
            .end_to_end(&format!("w5-ser-b{batch}"), batch, Txns::all(Serializable))
            .await?;
        let read_committed = self
            .end_to_end(&format!("w5-rc-b{batch}"), batch, Txns::all(ReadCommitted))
            .await?;
        let mut burns = Vec::new();
        for (round, txns) in [
            Txns::all(Serializable),
            claim_rc,
            claim_rc,
            Txns::all(Serializable),
        ]
        .into_iter()
        .enumerate()
        {
            let authority = format!("w5-burn-{round}");
            burns.push(self.burn_down(&[authority], burn, batch, txns).await?);
        }
        let mean = |a: &Value, b: &Value| {
            let mut m = a.clone();
            m["applied_per_s"] = json!((f(&a["applied_per_s"]) + f(&b["applied_per_s"])) / 2.0);
            m["serialization_retries"] = json!(
                a["serialization_retries"].as_u64().unwrap_or(0)
                    + b["serialization_retries"].as_u64().unwrap_or(0)
            );
            m["runs"] = json!([a["applied_per_s"], b["applied_per_s"]]);
            m
        };
        let burn_serializable = mean(&burns[0], &burns[3]);
        let burn_claim_rc = mean(&burns[1], &burns[2]);
        Ok(json!({
            "batch": batch,
            "service": format!("{:?}", Txns::service()),
            "serializable": serializable,
            "claim_read_committed": claim_read_committed,
            "read_committed": read_committed,
            "burn_down": {
                "serializable": burn_serializable,
                "claim_read_committed": burn_claim_rc,
            },
        }))
    }

    /// `n` pending commands recorded up front (by SQL, as the API would
    /// record them), then a custodian drains them.
    pub(crate) async fn w3b(&self, n: usize, batch: i64) -> anyhow::Result<Value> {
        self.burn_down(&["burn".to_owned()], n, batch, Txns::service())
            .await
    }

    /// W6: the burn-down again with 1, 2, 4 custodians, each with an
    /// authority of its own (the way the ledger scales out: authorities are
    /// independent), the same total work split between them.
    pub(crate) async fn w6(&self, counts: &[usize], n: usize, batch: i64) -> anyhow::Result<Value> {
        let mut out = Vec::new();
        for &k in counts {
            let authorities: Vec<String> = (0..k).map(|i| format!("scale{k}-{i}")).collect();
            let mut r = self
                .burn_down(&authorities, n / k.max(1), batch, Txns::service())
                .await?;
            r["custodians"] = json!(k);
            out.push(r);
        }
        Ok(Value::Array(out))
    }

    /// Preloads `per_authority` pending commands for each authority, starts
    /// one custodian per authority, and counts in the database how fast they
    /// all became applied.
    async fn burn_down(
        &self,
        authorities: &[String],
        per_authority: usize,
        batch: i64,
        txns: Txns,
    ) -> anyhow::Result<Value> {
        let api = self
            .db
            .role_pool(ServiceRole::Api, 1, "ledger-bench-preload")
            .await?;
        for authority in authorities {
            for chunk in ids(per_authority).chunks(10_000) {
                sqlx::query(
                    // `on conflict`: fresh ids never conflict, but without it Citus
                    // runs the insert as a COPY, which it refuses under row-level
                    // security (the API role's insert policy).
                    // The identity digest stored with the row, as the API stores
                    // it (computed here by the database's own function).
                    "insert into commands (id, scope, idempotency_key, request_digest, digest_version, \
                     kind, authority_id, args, canonical, intent_digest, created_at, identity_digest) \
                     select id, $2, 'burn-' || id::text, sha256(id::text::bytea), 2, 'noop', $4, \
                     $3::jsonb, $3::jsonb, sha256(id::text::bytea), now(), \
                     ledger_identity_digest(id, $2, 'burn-' || id::text, sha256(id::text::bytea), 2, \
                                            'noop', $4, null, $3::jsonb, $3::jsonb, now(), null, null, \
                                            sha256(id::text::bytea), '{}', null) \
                     from unnest($1::uuid[]) as id \
                     on conflict do nothing",
                )
                .bind(chunk)
                .bind(self.scope)
                .bind(ARGS)
                .bind(authority)
                .execute(&api)
                .await?;
            }
        }
        api.close().await;
        let n = per_authority * authorities.len();
        self.checkpoint().await;
        let wal_before = self.wal().await?;
        let io_before = self.io().await?;
        let t0 = self.db_now().await?;
        let started = Instant::now();
        let mut custodians = Vec::new();
        for authority in authorities {
            custodians.push(self.custodian(authority, batch, txns).await?);
        }
        for authority in authorities {
            self.drain(authority, Duration::from_secs(3600)).await?;
        }
        let mut retries = 0;
        for c in custodians {
            retries += c.stop().await.serialization_retries.load(Ordering::Relaxed);
        }
        let wal_after = self.wal().await?;
        let io_after = self.io().await?;
        let last: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
            "select max(finished_at) from commands where authority_id = any($1)",
        )
        .bind(authorities)
        .fetch_one(self.pool())
        .await?;
        let seconds = (last - t0).as_seconds_f64();
        Ok(json!({
            "preloaded": n,
            "batch": batch,
            "seconds": seconds,
            "wall_seconds": started.elapsed().as_secs_f64(),
            "applied_per_s": n as f64 / seconds,
            "wal_syncs_per_command": (wal_after.syncs - wal_before.syncs) / n.max(1) as f64,
            "wal_bytes_per_command": (wal_after.bytes - wal_before.bytes) / n.max(1) as f64,
            "io_per_command": io_after.per_command(&io_before, n.max(1) as f64),
            "hot_update_share": (wal_after.hot_updates - wal_before.hot_updates)
                / (wal_after.updates - wal_before.updates).max(1.0),
            "serialization_retries": retries,
        }))
    }

    // ---- memory ------------------------------------------------------------

    /// W3 for `duration` at 16 clients while this process's resident memory
    /// (API, custodian and the load client together) is sampled each second.
    pub(crate) async fn memory(&self, duration: Duration, batch: i64) -> anyhow::Result<Value> {
        let authority = "memory";
        let custodian = self.custodian(authority, batch, Txns::service()).await?;
        let body = body(authority);
        let (done_tx, done_rx) = watch::channel(false);
        let sampler = tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            while !*done_rx.borrow() {
                tick.tick().await;
                samples.push(rss_kib());
            }
            samples
        });
        let keys = Keys::Unique {
            prefix: authority.to_owned(),
        };
        let r = load::closed_loop(&self.target, 16, duration, &keys, body).await;
        let _ = done_tx.send(true);
        let samples = sampler.await?;
        self.drain(authority, Duration::from_secs(120)).await?;
        custodian.stop().await;
        // The first tenth is warm-up; then compare the start with the end.
        let skip = samples.len() / 10;
        let steady = &samples[skip.min(samples.len())..];
        let third = (steady.len() / 3).max(1);
        let avg = |s: &[u64]| s.iter().sum::<u64>() as f64 / s.len().max(1) as f64;
        let early = avg(&steady[..third.min(steady.len())]);
        let late = avg(&steady[steady.len().saturating_sub(third)..]);
        Ok(json!({
            "seconds": duration.as_secs(),
            "requests": r.ok,
            "rss_kib_samples": samples,
            "rss_kib_early": early,
            "rss_kib_late": late,
            "change": if early > 0.0 { late / early - 1.0 } else { 0.0 },
        }))
    }

    // ---- W4 ------------------------------------------------------------------

    pub(crate) async fn w4(&self, sizes: &[usize], batch: i64) -> anyhow::Result<Value> {
        // Time the reads of W4's points (its profile), and only W4's: it
        // runs last, and the setting is put back when it ends.
        let timing = self.io_timing(true).await;
        let out = self.w4_points(sizes, batch).await;
        if timing {
            self.io_timing(false).await;
        }
        out
    }

    /// A `CHECKPOINT` before a timed step, as the peers get before each of
    /// theirs (`peers::checkpoint`): the dirty buffers an earlier step left
    /// are written before the clock starts, so that neither the step's
    /// backends writing them to find free buffers nor a checkpoint the
    /// earlier step's WAL requested falls inside it by chance. A warning
    /// when this login may not ask for one.
    async fn checkpoint(&self) {
        if let Err(e) = sqlx::raw_sql("checkpoint").execute(self.pool()).await {
            tracing::warn!(error = %e, "could not checkpoint before a timed step");
        }
    }

    /// Turns `track_io_timing` on or back to its default for the whole
    /// cluster; false when this login may not (a server of one's own given
    /// by `BENCH_DATABASE_URL`), and then the read times stay zero.
    async fn io_timing(&self, on: bool) -> bool {
        let set = if on {
            "alter system set track_io_timing = on"
        } else {
            "alter system reset track_io_timing"
        };
        let done = async {
            sqlx::raw_sql(set).execute(self.pool()).await?;
            sqlx::raw_sql("select pg_reload_conf()")
                .execute(self.pool())
                .await
        }
        .await;
        if let Err(e) = &done {
            tracing::warn!(error = %e, "could not change track_io_timing; W4's read times stay zero");
        }
        done.is_ok()
    }

    async fn w4_points(&self, sizes: &[usize], batch: i64) -> anyhow::Result<Value> {
        let mut out = Vec::new();
        let mut loaded = 0usize;
        for &size in sizes {
            if size > loaded {
                self.preload_terminal(size - loaded).await?;
                loaded = size;
            }
            for table in ["commands", "command_history"] {
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("vacuum analyze {table}")))
                    .execute(self.pool())
                    .await?;
            }
            let body = body("bench-w4");
            // Keys of their own: the end-to-end run below uses the
            // authority's name as its prefix, and must not replay these.
            let keys = Keys::Unique {
                prefix: format!("w4-submit-{size}"),
            };
            // Each point starts right after a checkpoint, so that none
            // falls inside one point and not another: the writes of the
            // first changes to each page after it (full-page images) are
            // in every point alike.
            self.checkpoint().await;
            let wal_before = self.wal().await?;
            let io_before = self.io().await?;
            let r = load::closed_loop(&self.target, CLIENTS, self.point, &keys, body).await;
            let wal_after = self.wal().await?;
            let io_after = self.io().await?;
            let submitted = (r.ok as f64).max(1.0);
            self.checkpoint().await;
            let e2e = self
                .end_to_end(&format!("w4-{size}"), batch, Txns::service())
                .await?;
            out.push(json!({
                "rows": size,
                "submit_rps": r.rps(),
                "submit_p99_ms": r.ms(0.99),
                "submit_wal_bytes_per_command": (wal_after.bytes - wal_before.bytes) / submitted,
                "submit_io_per_command": io_after.per_command(&io_before, submitted),
                "e2e_applied_per_s": e2e["applied_per_s"],
                "e2e_submit_rps": e2e["submit_rps"],
                "e2e_submit_errors": e2e["submit_errors"],
                "e2e_p99_ms": e2e["p99_ms"],
                "e2e_wal_bytes_per_command": e2e["wal_bytes_per_command"],
                "e2e_io_per_command": e2e["io_per_command"],
            }));
        }
        Ok(Value::Array(out))
    }

    /// Terminal commands (and their four history entries each), written as
    /// the service writes them: inserted pending as `ledger_api`, then moved
    /// to prepared, effect_started and applied as `ledger_custodian`, a
    /// statement per step for each chunk, so that the triggers write and
    /// chain every history entry (no claim, lease or effect: preloading only).
    /// One worker per core, each with its own two connections: a command's
    /// chain is its own, so workers on disjoint ids never wait for each other
    /// except on the authority's counter row at commit.
    async fn preload_terminal(&self, n: usize) -> anyhow::Result<()> {
        let workers = std::thread::available_parallelism()
            .map_or(1, |p| p.get())
            .max(1);
        let connections = u32::try_from(workers).unwrap_or(u32::MAX);
        let api = self
            .db
            .role_pool(ServiceRole::Api, connections, "ledger-bench-preload")
            .await?;
        let custodian = self
            .db
            .role_pool(ServiceRole::Custodian, connections, "ledger-bench-preload")
            .await?;
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..workers {
            let share = n / workers + usize::from(w < n % workers);
            tasks.spawn(preload_share(
                api.clone(),
                custodian.clone(),
                self.scope,
                share,
            ));
        }
        let mut outcome = Ok(());
        while let Some(done) = tasks.join_next().await {
            if let Err(e) = done.map_err(anyhow::Error::from).and_then(|r| r) {
                tasks.abort_all();
                outcome = outcome.and(Err(e));
            }
        }
        api.close().await;
        custodian.close().await;
        let seconds = started.elapsed().as_secs_f64();
        tracing::info!(rows = n, workers, seconds, "preloaded terminal commands");
        outcome
    }
}

/// The cluster's I/O counters at one moment ([`Bench::io`]).
#[derive(Debug, Clone)]
struct Io {
    /// Full-page images written to the WAL.
    fpi: f64,
    /// Blocks this database read from outside shared buffers, and found in them.
    blks_read: f64,
    blks_hit: f64,
    /// Time spent reading and writing data blocks (with `track_io_timing`).
    read_ms: f64,
    write_ms: f64,
    checkpoints: f64,
    /// Dirty buffers a backend had to write itself to find a free one.
    backend_writes: f64,
    /// Dirty buffers the checkpointer wrote.
    checkpoint_writes: f64,
    /// Blocks read from outside shared buffers, per table and index.
    relations: std::collections::BTreeMap<String, f64>,
}

impl Io {
    /// What happened since `before`, per command (the checkpoints as a
    /// count), with the relations that read the most.
    fn per_command(&self, before: &Io, commands: f64) -> Value {
        let per = |after: f64, before: f64| (after - before) / commands;
        let mut reads: Vec<(&String, f64)> = self
            .relations
            .iter()
            .map(|(name, blocks)| {
                (
                    name,
                    blocks - before.relations.get(name).copied().unwrap_or(0.0),
                )
            })
            .filter(|(_, blocks)| *blocks > 0.0)
            .collect();
        reads.sort_by(|a, b| b.1.total_cmp(&a.1));
        // Most first (an array: a JSON object's keys come back sorted).
        let top: Vec<Value> = reads
            .into_iter()
            .take(8)
            .map(|(name, blocks)| json!({"relation": name, "blocks": blocks / commands}))
            .collect();
        json!({
            "wal_full_page_images": per(self.fpi, before.fpi),
            "blocks_read": per(self.blks_read, before.blks_read),
            "blocks_hit": per(self.blks_hit, before.blks_hit),
            "read_ms": per(self.read_ms, before.read_ms),
            "write_ms": per(self.write_ms, before.write_ms),
            "backend_writes": per(self.backend_writes, before.backend_writes),
            "checkpoint_writes": per(self.checkpoint_writes, before.checkpoint_writes),
            "checkpoints": self.checkpoints - before.checkpoints,
            "blocks_read_by_relation": top,
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct Wal {
    bytes: f64,
    syncs: f64,
    commits: f64,
    /// Row updates of `commands`, and how many of them were HOT.
    updates: f64,
    hot_updates: f64,
}

async fn submit_known(target: &Target, keys: &[String], body: &'static str) -> anyhow::Result<()> {
    let mut tasks = Vec::new();
    for chunk in keys.chunks(keys.len().div_ceil(16).max(1)) {
        let (target, chunk) = (target.clone(), chunk.to_vec());
        tasks.push(tokio::spawn(async move {
            for key in chunk {
                if !load::submit(&target, &key, body).await {
                    bail!("recording the known key {key} failed");
                }
            }
            Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// Time-ordered ids, as the API makes them.
/// One preload worker's share: chunks of 10,000 commands, each inserted
/// pending and then moved through prepared and effect_started to applied.
async fn preload_share(
    api: PgPool,
    custodian: PgPool,
    scope: Uuid,
    n: usize,
) -> anyhow::Result<()> {
    let mut left = n;
    while left > 0 {
        let chunk = ids(left.min(10_000));
        left -= chunk.len();
        sqlx::query(
            "insert into commands (id, scope, idempotency_key, request_digest, digest_version, \
             kind, authority_id, args, canonical, intent_digest) \
             select id, $2, 'old-' || id::text, sha256(id::text::bytea), 2, 'noop', 'old', \
             $3::jsonb, $3::jsonb, sha256(id::text::bytea) \
             from unnest($1::uuid[]) as id, set_config('command_ledger.actor', 'bench:preload', true)",
        )
        .bind(&chunk)
        .bind(scope)
        .bind(ARGS)
        .execute(&api)
        .await
        .context("preloading: inserting pending commands as ledger_api")?;
        for (to, generation, result) in [
            ("prepared", Some(1i64), None),
            ("effect_started", Some(1), None),
            ("applied", Some(1), Some("{}")),
        ] {
            sqlx::query(
                "update commands c set state = $2, authority_generation = $3, result = $4::jsonb \
                 from (select set_config('command_ledger.actor', 'bench:preload', true)) as ctx \
                 where c.id = any($1)",
            )
            .bind(&chunk)
            .bind(to)
            .bind(generation)
            .bind(result)
            .execute(&custodian)
            .await
            .with_context(|| format!("preloading: moving commands to {to} as ledger_custodian"))?;
        }
    }
    Ok(())
}

fn ids(n: usize) -> Vec<Uuid> {
    (0..n).map(|_| Uuid::now_v7()).collect()
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

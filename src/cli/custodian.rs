//! `command-ledger custodian`, `demo-sink` and `recover`, the catalog they
//! load, and the custodian options `serve` shares for its in-process custodian.

use anyhow::Context as _;
use clap::Args;
use sqlx::PgPool;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{Database, duration};
use crate::catalog::Catalog;
use crate::custodian::recovery::Recovery;
use crate::custodian::{Custodian, CustodianConfig, Effects, defaults};
use crate::db::roles::ServiceRole;
use crate::demo_sink;

#[derive(Debug, Clone, Args)]
pub struct CustodianArgs {
    /// Catalog of kinds and their executors; default: ledger.toml when it exists.
    #[arg(long, env = "LEDGER_CATALOG")]
    pub catalog: Option<PathBuf>,
    /// Lease time-to-live.
    #[arg(long, env = "LEASE_TTL", default_value = defaults::LEASE_TTL, value_parser = duration)]
    pub lease_ttl: Duration,
    /// Lease renewal interval (well inside the TTL).
    #[arg(long, env = "LEASE_HEARTBEAT", default_value = defaults::HEARTBEAT, value_parser = duration)]
    pub heartbeat: Duration,
    /// Most commands claimed per statement.
    #[arg(long, env = "CLAIM_BATCH", default_value_t = defaults::BATCH_SIZE)]
    pub batch_size: u16,
    /// Most effects in flight at once.
    #[arg(long, env = "MAX_IN_FLIGHT", default_value_t = defaults::MAX_IN_FLIGHT)]
    pub max_in_flight: u16,
    /// Fallback polling interval when no wake-up arrives.
    #[arg(long, env = "POLL_INTERVAL", default_value = defaults::POLL_INTERVAL, value_parser = duration)]
    pub poll_interval: Duration,
    /// How often the custodian runs a recovery pass.
    #[arg(long, env = "RECOVERY_INTERVAL", default_value = defaults::RECOVERY_INTERVAL, value_parser = duration)]
    pub recovery_interval: Duration,
    /// Connect the custodian as this URL's user (a login of
    /// `ledger_custodian`, or of a role granted it). Default: the private
    /// cluster's `ledger_custodian` login, else `DATABASE_URL` with
    /// `SET ROLE ledger_custodian`.
    #[arg(long, env = "CUSTODIAN_DATABASE_URL", hide_env_values = true)]
    pub custodian_database_url: Option<String>,
}

/// The catalog at `path`, else `ledger.toml` when it exists, else empty.
fn load_catalog(path: Option<&Path>) -> anyhow::Result<Catalog> {
    let path = match path {
        Some(p) => Some(p.to_path_buf()),
        None => Some(PathBuf::from("ledger.toml")).filter(|p| p.exists()),
    };
    match path {
        Some(p) => {
            let catalog = Catalog::load(&p)?;
            tracing::info!(catalog = %p.display(), kinds = catalog.kinds.len(), "catalog loaded");
            Ok(catalog)
        }
        None => Ok(Catalog::default()),
    }
}

pub(super) fn authority(s: &str) -> Result<String, String> {
    crate::domain::AuthorityId::parse(s.trim())
        .map(|a| a.as_str().to_owned())
        .map_err(|e| e.to_string())
}

#[derive(Debug, Args)]
pub struct CustodianCommand {
    /// Authorities to serve, comma separated.
    #[arg(long, env = "AUTHORITIES", value_delimiter = ',', required = true, value_parser = authority)]
    pub authority: Vec<String>,
    /// Serve this custodian's Prometheus metrics at `http://ADDR/metrics`.
    /// No token is asked: bind it to an address only your scraper reaches.
    #[arg(long, env = "METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    #[command(flatten)]
    pub options: CustodianArgs,
    #[command(flatten)]
    pub webhooks: super::WebhookArgs,
}

#[derive(Debug, Args)]
pub struct DemoSinkCommand {
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: SocketAddr,
    /// The durable log of every request.
    #[arg(long, default_value = "demo-sink.log")]
    pub log: PathBuf,
    #[arg(long, value_enum, default_value = "ok")]
    pub mode: demo_sink::Mode,
    /// How long each request takes before it is applied, like 300ms.
    #[arg(long, default_value = "0ms", value_parser = duration_or_zero)]
    pub latency: Duration,
}

fn duration_or_zero(s: &str) -> Result<Duration, String> {
    if s.trim_end_matches("ms").trim_end_matches('s') == "0" {
        return Ok(Duration::ZERO);
    }
    duration(s)
}

impl CustodianArgs {
    /// A pool acting as `ledger_custodian` (see `--custodian-database-url`).
    pub async fn pool(&self, db: &Database, application_name: &str) -> anyhow::Result<PgPool> {
        db.role_pool(
            ServiceRole::Custodian,
            self.custodian_database_url.as_deref(),
            10,
            application_name,
            crate::db::ACQUIRE_TIMEOUT,
        )
        .await
    }

    /// The catalog: `--catalog`, else `ledger.toml` when it exists, else empty.
    pub fn catalog(&self) -> anyhow::Result<Catalog> {
        load_catalog(self.catalog.as_deref())
    }

    /// The effects of the catalog (and the built-in `noop`).
    pub fn effects(&self) -> anyhow::Result<Effects> {
        Ok(self.catalog()?.effects()?)
    }

    pub fn config(&self, authorities: Vec<String>) -> anyhow::Result<CustodianConfig> {
        if self.heartbeat >= self.lease_ttl {
            anyhow::bail!(
                "the lease heartbeat ({:?}) must be shorter than the lease TTL ({:?})",
                self.heartbeat,
                self.lease_ttl
            );
        }
        let mut config = CustodianConfig::new(authorities);
        config.lease_ttl = self.lease_ttl;
        config.heartbeat = self.heartbeat;
        config.batch_size = i64::from(self.batch_size.max(1));
        config.max_in_flight = usize::from(self.max_in_flight.max(1));
        config.poll_interval = self.poll_interval;
        config.recovery_interval = self.recovery_interval;
        Ok(config)
    }
}

/// Starts a custodian task on `pool`.
/// Starts a custodian; returns its task and its counters.
pub fn spawn_custodian(
    pool: PgPool,
    config: CustodianConfig,
    effects: Effects,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> (
    tokio::task::JoinHandle<anyhow::Result<()>>,
    Arc<crate::custodian::Stats>,
) {
    let custodian = Arc::new(Custodian::new(pool, config, effects));
    let stats = Arc::clone(custodian.stats());
    let task = tokio::spawn(async move { custodian.run(shutdown).await.context("custodian") });
    (task, stats)
}

pub(super) async fn run(
    database_url: Option<String>,
    state_dir: &Path,
    cmd: CustodianCommand,
) -> anyhow::Result<()> {
    let config = cmd.options.config(cmd.authority)?;
    let effects = cmd.options.effects()?;
    let db = Database::open_for_role(
        database_url,
        cmd.options.custodian_database_url.as_deref(),
        state_dir,
        "command-ledger-custodian",
    )
    .await?;
    let pool = cmd.options.pool(&db, "command-ledger-custodian").await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };
    let (task, stats) = spawn_custodian(pool.clone(), config, effects, stopped());
    // Outcome webhooks are sent by custodians too, acting as the custodian.
    let deliverer = cmd.webhooks.spawn(pool.clone(), stopped());
    if let Some(addr) = cmd.metrics_listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding the metrics address {addr}"))?;
        tracing::info!(addr = %listener.local_addr()?, "custodian metrics at /metrics");
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let stats = Arc::clone(&stats);
                async move {
                    let mut e = crate::metrics::Exposition::default();
                    crate::metrics::custodian(&mut e, &stats);
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            crate::metrics::CONTENT_TYPE,
                        )],
                        e.finish(),
                    )
                }
            }),
        );
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "metrics server stopped");
            }
        });
    }
    super::shutdown_signal().await;
    let _ = stop_tx.send(true);
    let result = task.await.context("custodian task")?;
    if let Some(deliverer) = deliverer
        && let Err(e) = deliverer.await
    {
        tracing::error!(error = %e, "webhook deliverer task failed");
    }
    pool.close().await;
    db.close().await?;
    result
}

pub(super) async fn run_demo_sink(cmd: DemoSinkCommand) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(cmd.listen)
        .await
        .with_context(|| format!("binding {}", cmd.listen))?;
    println!(
        "demo sink on http://{} (mode {:?}), log {}",
        listener.local_addr()?,
        cmd.mode,
        cmd.log.display()
    );
    let router =
        demo_sink::router(&cmd.log, cmd.mode, cmd.latency).context("opening the sink log")?;
    axum::serve(listener, router)
        .with_graceful_shutdown(super::shutdown_signal())
        .await?;
    Ok(())
}

#[derive(Debug, Args)]
pub struct RecoverCommand {
    /// Catalog of kinds (for their reconcile probes); default: ledger.toml when it exists.
    #[arg(long, env = "LEDGER_CATALOG")]
    pub catalog: Option<PathBuf>,
    /// Connect as this URL's user (see `custodian --custodian-database-url`).
    #[arg(long, env = "CUSTODIAN_DATABASE_URL", hide_env_values = true)]
    pub custodian_database_url: Option<String>,
}

/// One recovery pass, for cron after a crash.
pub(super) async fn run_recover(
    database_url: Option<String>,
    state_dir: &Path,
    cmd: RecoverCommand,
) -> anyhow::Result<()> {
    let effects = Arc::new(load_catalog(cmd.catalog.as_deref())?.effects()?);
    let db = Database::open_for_role(
        database_url,
        cmd.custodian_database_url.as_deref(),
        state_dir,
        "command-ledger-recover",
    )
    .await?;
    let pool = db
        .role_pool(
            ServiceRole::Custodian,
            cmd.custodian_database_url.as_deref(),
            2,
            "command-ledger-recover",
            crate::db::ACQUIRE_TIMEOUT,
        )
        .await?;
    let actor = format!("recovery:{}", crate::custodian::default_holder());
    let outcome = Recovery::new(pool.clone(), effects, actor).run_once().await;
    pool.close().await;
    db.close().await?;
    let r = outcome.context("recovery pass")?;
    println!(
        "examined {}, expired {}, adopted {}, resolved applied {}, failed {}, ambiguous {}, changed meanwhile {}",
        r.examined, r.expired, r.adopted, r.applied, r.failed, r.ambiguous, r.skipped
    );
    Ok(())
}

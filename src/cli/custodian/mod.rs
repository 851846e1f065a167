//! The custodian's subcommands, one file each: `custodian` (run.rs),
//! `demo-sink` (demo_sink.rs) and `recover` (recover.rs); and here what
//! they share: the catalog they load, and the custodian options `serve`
//! shares for its in-process custodian.

mod demo_sink;
mod recover;
mod run;

pub(super) use demo_sink::DemoSinkCommand;
pub(super) use demo_sink::run as run_demo_sink;
pub(super) use recover::RecoverCommand;
pub(super) use recover::run as run_recover;
pub(super) use run::CustodianCommand;
pub(super) use run::run;

use anyhow::Context as _;
use clap::Args;
use sqlx::PgPool;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{Database, duration};
use crate::catalog::Catalog;
use crate::custodian::{Custodian, CustodianConfig, Effects, defaults};
use crate::db::roles::ServiceRole;

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

/// Starts a custodian for `pool`'s database (whose backend is `backend`)
/// on a runtime of its own, with a pool of its own made there from `pool`'s
/// options (`pool` stays the caller's). Work sharing the process's runtime
/// (the API's batches in `serve`, webhook deliveries) then cannot hold back
/// a claim's or a record's next step: with four devices submitting batches
/// beside it on two cores, the custodian drained 1,182 applied/s on the
/// process's runtime and 1,717 on its own (docs/runs/custodian-runtime.txt).
/// Returns its task and its counters.
pub async fn spawn_custodian(
    pool: &PgPool,
    backend: crate::db::Backend,
    config: CustodianConfig,
    effects: Effects,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<(
    tokio::task::JoinHandle<anyhow::Result<()>>,
    Arc<crate::custodian::Stats>,
)> {
    let options = pool.options().clone();
    let connect = (*pool.connect_options()).clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_name("custodian")
        .enable_all()
        .build()
        .context("starting the custodian's runtime")?;
    let (stats_tx, stats_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("custodian".to_owned())
        .spawn(move || {
            runtime.block_on(async move {
                let pool = options.connect_lazy_with(connect);
                let custodian = Arc::new(Custodian::new(pool, backend, config, effects));
                let _ = stats_tx.send(Arc::clone(custodian.stats()));
                let done = custodian.run(shutdown).await.context("custodian");
                let _ = done_tx.send(done);
            });
        })
        .context("starting the custodian's thread")?;
    let stats = stats_rx
        .await
        .context("the custodian stopped before it started")?;
    let task = tokio::spawn(async move {
        done_rx
            .await
            .context("the custodian's runtime stopped without an answer")?
    });
    Ok((task, stats))
}

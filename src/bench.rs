//! The benchmark's one door into the service (`ledger-bench`, in `bench/`):
//! exactly what it runs, so that the service's modules can change behind it.
//! It opens the ledger database as the service does, serves the API, starts
//! custodians and issues tokens; the types it shares with the service
//! (custodian settings, effects, roles) and its logs-and-traces setup
//! (the `OTEL_*` variables honoured as `serve` honours them) are
//! re-exported here.

use anyhow::Context as _;
use sqlx::PgPool;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use crate::custodian::effects::{Effect, EffectCall, EffectFuture, Effects};
pub use crate::custodian::{CustodianConfig, Isolation, Stats as CustodianStats};
pub use crate::db::Role;
pub use crate::db::roles::ServiceRole;
pub use crate::domain::EffectOutcome;
pub use crate::embedded_pg::find_bin_dir;
pub use crate::telemetry::{LogFormat, Telemetry, init_with_default as init_telemetry};

use crate::cli::Database;
use crate::domain::admission::Policies;
use crate::http::{self, AppState};

/// The ledger's database, opened and migrated as `command-ledger serve`
/// opens it: the URL given, else a private cluster under the state
/// directory, stopped by [`Ledger::close`].
#[derive(Debug)]
pub struct Ledger {
    db: Database,
}

/// A token issued by [`Ledger::issue_token`].
#[derive(Debug, Clone)]
pub struct Token {
    /// What a client sends as its bearer token.
    pub secret: String,
    /// Its SHA-256, as `api_tokens.token_hash` stores it.
    pub hash: [u8; 32],
}

impl Ledger {
    /// Opens (and migrates) the database, with `max_connections` for
    /// [`Ledger::pool`].
    pub async fn open(
        url: Option<String>,
        state_dir: &Path,
        max_connections: u32,
    ) -> anyhow::Result<Ledger> {
        let db = Database::open_with(url, state_dir, max_connections, "ledger-bench").await?;
        Ok(Ledger { db })
    }

    /// The pool of whoever opened it (a superuser on the private cluster):
    /// for the benchmark's own tables, counts and settings.
    pub fn pool(&self) -> &PgPool {
        &self.db.pool
    }

    /// The database's URL, as opened.
    pub fn url(&self) -> &str {
        &self.db.url
    }

    /// The URL `role` logs in with on the private cluster (`None` with a
    /// database URL given, where the roles are taken with `SET ROLE`).
    pub fn role_url(&self, role: ServiceRole) -> Option<&str> {
        self.db.role_url(role)
    }

    /// A pool of `max_connections` acting as `role`, as the service's own
    /// processes get one.
    pub async fn role_pool(
        &self,
        role: ServiceRole,
        max_connections: u32,
        application_name: &str,
    ) -> anyhow::Result<PgPool> {
        self.db
            .role_pool(
                role,
                None,
                max_connections,
                application_name,
                crate::db::ACQUIRE_TIMEOUT,
            )
            .await
    }

    /// A new token for a new principal `name` of `role`, as `command-ledger
    /// token create` issues one.
    pub async fn issue_token(&self, name: &str, role: Role) -> anyhow::Result<Token> {
        let secret = crate::cli::issue_token(&self.db.pool, name, role, None).await?;
        let hash = crate::domain::token::token_hash(&secret);
        Ok(Token { secret, hash })
    }

    /// Serves the API on `listener` until `shutdown`, as `serve` does, with
    /// default admission policies and no rate limit (the benchmark's clients
    /// are its load), over `connections` acting as the API's role.
    pub async fn serve_api(
        &self,
        listener: TcpListener,
        connections: u32,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<JoinHandle<std::io::Result<()>>> {
        let pool = self
            .db
            .role_pool(
                ServiceRole::Api,
                None,
                connections,
                "command-ledger-api",
                crate::db::ACQUIRE_TIMEOUT,
            )
            .await?;
        let mut state = AppState::new(pool, self.db.backend, Policies::default());
        let unlimited = std::num::NonZeroU32::new(100_000_000).context("a non-zero limit")?;
        state.limiter = http::limits::Limiter::new(http::limits::RateLimit {
            per_second: unlimited,
            burst: unlimited,
        });
        Ok(tokio::spawn(http::serve(listener, state, shutdown)))
    }

    /// Starts a custodian with `config` and `effects`, as `command-ledger
    /// custodian` does, over `connections` acting as the custodian's role,
    /// until `shutdown`. Returns its task and its counters.
    pub async fn spawn_custodian(
        &self,
        config: CustodianConfig,
        effects: Effects,
        connections: u32,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<(JoinHandle<anyhow::Result<()>>, Arc<CustodianStats>)> {
        let pool = self
            .db
            .role_pool(
                ServiceRole::Custodian,
                None,
                connections,
                "command-ledger-custodian",
                crate::db::ACQUIRE_TIMEOUT,
            )
            .await?;
        let custodian =
            crate::cli::spawn_custodian(&pool, self.db.backend, config, effects, shutdown).await;
        // The custodian connects on its own runtime, with the same options.
        pool.close().await;
        custodian
    }

    /// Closes the pool, then stops the private cluster if this opened it.
    pub async fn close(self) -> anyhow::Result<()> {
        self.db.close().await
    }
}

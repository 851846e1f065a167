//! All SQL lives here, as small functions over an executor or a pool. Queries
//! are checked at compile time against the migrations (`.sqlx/` holds the
//! offline data for builds without a database). The schema they run against,
//! as `pg_dump --schema-only` prints it after every migration, is
//! `docs/schema.sql` (a test keeps it current).
//!
//! What the database can do (one PostgreSQL, or a distributed backend) is
//! [`Backend`], detected once where the pool is opened and passed on: the
//! only place that knows which product answers.
//!
//! # Every statement that changes `commands.state`
//!
//! Each is a compare-and-set on the state it expects (and, from `prepared`
//! on, the generation); the `commands_guard` trigger refuses any edge not in
//! `command_transitions`, and `command_history` records every change.
//!
//! | function (the schema's, in `migrations/functions/`) | from → to | called by |
//! |---|---|---|
//! | [`submissions::insert_pending`], [`submissions::insert_pending_many`] | (new row) → `pending` | admission (`ledger::submit`, through [`group_commit`]), the batch endpoint, hold release ([`holds::release`]) |
//! | [`lifecycle::claim_start`], [`lifecycle::claim_start_authority`] (`ledger_claim_start`, `ledger_claim_start_authority`) | `pending` → `effect_started` \| `expired` | custodian: claim and start in one statement (READ COMMITTED, fenced by the lease row) |
//! | [`lifecycle::start_prepared`] (`ledger_start_prepared`) | `prepared` → `effect_started` \| `expired` | custodian: rows an adoption (or another writer) left prepared |
//! | [`lifecycle::adopt_prepared`] | `prepared` (older generation) → `prepared` (rebound) \| `expired` | custodian: a newly taken lease (SERIALIZABLE) |
//! | [`lifecycle::record_outcomes`] (`ledger_record_outcomes`) | `effect_started` → `applied` \| `failed` \| `ambiguous` | custodian: record outcomes (SERIALIZABLE) |
//! | [`recovery::expire`] | `pending` \| `prepared` → `expired` | recovery |
//! | [`recovery::adopt`] | `prepared` → `prepared` (rebound to the current generation) | recovery |
//! | [`recovery::resolve`] | `effect_started` → `applied` \| `failed` \| `ambiguous` | recovery |
//! | [`commands::cancel`] | `pending` \| `prepared` → `cancelled` | cancel (`ledger::cancel`: the API and the CLI) |
//!
//! Nothing else updates `commands`; `prune` (migration 0007, 0011) deletes
//! terminal rows after archiving them, and changes no state.
//!
//! # One word, one meaning
//!
//! In names, *record* means writing the outcomes of started commands, the
//! custodian's last step ([`lifecycle::record_outcomes`], under
//! [`Custodian::record_outcomes`](crate::custodian::Custodian::record_outcomes)).
//! A submission's pending row is *inserted* ([`submissions`]), a resolution
//! of an ambiguous command *appended* ([`resolutions::append`]), and what a
//! command is in its life is its
//! [`CommandState`](crate::domain::CommandState). Prose keeps the ordinary
//! verb: every command is recorded before it is dispatched.

pub mod attempts;
pub mod authorities;
pub mod backend;
mod clash;
pub mod cluster;
pub mod commands;
pub mod counts;
pub mod functions;
pub mod group_commit;
pub mod history;
pub mod holds;
pub mod inspector;
pub mod lifecycle;
pub mod limits;
pub mod migrations;
pub mod new_command;
pub mod notify;
pub mod placement;
pub mod principals;
pub mod recovery;
pub mod resolutions;
pub mod roles;
pub mod statements;
pub mod submissions;
pub mod txn;
pub mod verify;
pub mod webhooks;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions as _, Connection as _, PgPool};
use std::str::FromStr as _;
use std::time::Duration;

pub use backend::Backend;
pub use cluster::{Cluster, Route};
pub use commands::{CancelOutcome, CommandRow, ListFilter};
pub use history::HistoryRow;
pub use migrations::{MIGRATOR, migrate, migrations_current};
pub use new_command::{NewCommand, Request};
pub use principals::{Principal, Role, TokenRow};

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("invalid database URL: {0}")]
    BadUrl(#[source] sqlx::Error),
    #[error("cannot connect to the database: {0}")]
    Connect(#[source] sqlx::Error),
    #[error("migrating the database failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error(
        "the database holds migration {0}, which this command-ledger does not know: a newer version \
         migrated it; run that version (or a newer one)"
    )]
    NewerDatabase(i64),
    /// On Citus: a node could not make the steps' copies because a process
    /// migrating another database of the same cluster changed the roles
    /// they share meanwhile; `migrate` runs again.
    #[error(
        "another database's migration on the same cluster changed the shared roles meanwhile: {0}"
    )]
    SharedRolesChanged(String),
    #[error(transparent)]
    Sqlx(#[from] sqlx::Error),
}

/// How long a statement waits for a pooled connection (or for the database
/// to accept a new one) before it fails, in custodians and the CLI.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// The same for the API: a request that cannot have a connection within
/// about a second (the database refuses connections, is gone, or the pool
/// stays exhausted that long) is answered `503` with `Retry-After: 1` then,
/// instead of holding the client for [`ACQUIRE_TIMEOUT`]. Nothing was
/// recorded, so the retry is safe.
pub const API_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long opening a pool waits for a database that is still starting,
/// whatever the pool's acquire timeout.
pub const STARTUP_PATIENCE: Duration = Duration::from_secs(10);

/// A pool for the service. Statements are logged at debug level only: the
/// hot path must not pay for info-level statement logs.
pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool, DbError> {
    connect_as(url, max_connections, "command-ledger").await
}

/// A pool whose connections show `application_name` in `pg_stat_activity`.
pub async fn connect_as(
    url: &str,
    max_connections: u32,
    application_name: &str,
) -> Result<PgPool, DbError> {
    connect_with_timeout(url, max_connections, application_name, ACQUIRE_TIMEOUT).await
}

/// [`connect_as`], with connections waited for at most `acquire_timeout`
/// once the pool is open. Opening it waits up to [`STARTUP_PATIENCE`] for the
/// first connection (a database that is still starting refuses them).
pub async fn connect_with_timeout(
    url: &str,
    max_connections: u32,
    application_name: &str,
    acquire_timeout: Duration,
) -> Result<PgPool, DbError> {
    let options = PgConnectOptions::from_str(url)
        .map_err(DbError::BadUrl)?
        .application_name(application_name)
        .log_statements(tracing::log::LevelFilter::Debug)
        .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(1));
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(acquire_timeout)
        .connect_lazy_with(options);
    first_connection(pool).await
}

/// `pool` once it has made one connection, within [`STARTUP_PATIENCE`].
pub(crate) async fn first_connection(pool: PgPool) -> Result<PgPool, DbError> {
    let deadline = tokio::time::Instant::now() + STARTUP_PATIENCE;
    loop {
        match pool.acquire().await {
            Ok(_first) => return Ok(pool),
            // Refused (or not yet accepting) for a whole acquire timeout: the
            // server may still be starting; sqlx backs off between attempts.
            Err(sqlx::Error::PoolTimedOut) if tokio::time::Instant::now() < deadline => {}
            Err(e) => return Err(DbError::Connect(e)),
        }
    }
}

/// On Citus: makes the database's new sessions send their `SET LOCAL`s on
/// to the workers (`citus.propagate_set_commands = 'local'`), where the
/// history triggers read who acts (`command_ledger.actor`, set as each
/// transaction opens: [`txn`]). Without it the history names `sql:<role>`.
/// A database setting: `migrate` sets it, and a copy made with `create
/// database ... template` must be given it again.
pub async fn citus_session_defaults(conn: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(
        "do $$ begin
             execute format('alter database %I set citus.propagate_set_commands = %L',
                            current_database(), 'local');
         end $$",
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Creates `name` on the server of `admin_url` unless it exists.
pub async fn ensure_database(admin_url: &str, name: &str) -> Result<(), DbError> {
    let options = PgConnectOptions::from_str(admin_url).map_err(DbError::BadUrl)?;
    let mut conn = sqlx::PgConnection::connect_with(&options)
        .await
        .map_err(DbError::Connect)?;
    let exists: bool =
        sqlx::query_scalar("select exists (select 1 from pg_database where datname = $1)")
            .bind(name)
            .fetch_one(&mut conn)
            .await?;
    if !exists {
        let quoted = name.replace('"', "\"\"");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("create database \"{quoted}\"")))
            .execute(&mut conn)
            .await?;
    }
    conn.close().await?;
    Ok(())
}

//! The schema's migrations and how a database is brought to them.
//!
//! A fresh database runs the baseline: `0031_roles.sql` (as the login that
//! migrates) and `0032_baseline.sql` (the schema the legacy chain made, as
//! one file), then every later migration. A database migrated before the
//! baseline holds some of the legacy chain (`migrations/legacy/0001-0030`):
//! [`migrate`] finishes that chain, then records the baseline as applied
//! (it holds the same schema; a test compares the two), so every later
//! migration runs on both alike. A database that holds a migration this
//! binary does not know was migrated by a newer version, and is refused.

use sqlx::migrate::Migrator;
use sqlx::{Connection as _, PgConnection, PgPool};

use super::{Backend, DbError, roles};

/// The baseline and every later migration, embedded in the binary.
pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// The chain of databases made before the baseline, frozen.
pub static LEGACY_MIGRATOR: Migrator = sqlx::migrate!("./migrations/legacy");

/// The baseline's first migration: the roles, run as the login.
pub const ROLES_MIGRATION: i64 = 31;

/// The baseline's schema.
pub const BASELINE: i64 = 32;

/// The legacy chain's migration that made the roles (as [`ROLES_MIGRATION`]).
const LEGACY_ROLES_MIGRATION: i64 = 16;

/// Applies pending migrations (serialised across processes by sqlx's advisory
/// lock). The roles migration runs as the connecting user (the one that
/// creates the roles must be able to); every later one as [`roles::OWNER`],
/// so that what it creates belongs to the owner. On a Citus coordinator (the
/// `citus` extension is installed) the ledger's tables are then distributed
/// by authority (`ledger_distribute()`; idempotent, so tables a later
/// migration adds are distributed by the next run).
pub async fn migrate(pool: &PgPool) -> Result<(), DbError> {
    let mut attempt = 1;
    loop {
        match migrate_once(pool).await {
            Err(e) if attempt < 5 && clashed_with_another_database(&e) => {
                tracing::info!(error = %e, attempt, "a migration met another database's, on the same cluster; running it again");
                tokio::time::sleep(std::time::Duration::from_millis(100 * attempt)).await;
                attempt += 1;
            }
            done => return done,
        }
    }
}

/// Whether a migration failed on what the cluster's databases share (its
/// roles): created, granted or revoked at the same moment by a process
/// migrating another database. Nothing of the failed migration stays (each
/// runs in a transaction), so it can run again.
fn clashed_with_another_database(e: &DbError) -> bool {
    use sqlx::migrate::MigrateError;
    let database = match e {
        DbError::Migrate(MigrateError::ExecuteMigration(sqlx::Error::Database(d), _)) => d,
        DbError::Sqlx(sqlx::Error::Database(d)) => d,
        _ => return false,
    };
    // CL010, or 42501 naming the engine's role or one of its functions (a
    // grant on it by a role no longer its member): it lost its member;
    // 23505: a role (or a membership) made twice.
    match database.code().as_deref() {
        Some("CL010" | "23505") => true,
        Some("42501") => [
            roles::ENGINE,
            "ledger_claim_start",
            "ledger_record_outcomes",
        ]
        .iter()
        .any(|name| database.message().contains(name)),
        _ => false,
    }
}

async fn migrate_once(pool: &PgPool) -> Result<(), DbError> {
    // A connection of its own: it changes its role, and is not given back.
    let mut conn = pool.acquire().await?.detach();
    let applied = applied(&mut conn).await?;
    if let Some(version) = applied
        .iter()
        .map(|(v, _)| *v)
        .find(|v| !known(&MIGRATOR, *v) && !known(&LEGACY_MIGRATOR, *v))
    {
        return Err(DbError::NewerDatabase(version));
    }
    let legacy = applied.iter().any(|(v, _)| known(&LEGACY_MIGRATOR, *v));
    let baseline_recorded = applied.iter().any(|(v, _)| *v == BASELINE);
    if legacy && !baseline_recorded {
        run_chain(&mut conn, &LEGACY_MIGRATOR, LEGACY_ROLES_MIGRATION).await?;
        record_baseline(&mut conn).await?;
    }
    // The legacy rows stay on record; this chain does not know them.
    let mut current = Migrator::with_migrations(MIGRATOR.iter().cloned().collect());
    current.set_ignore_missing(legacy);
    run_chain(&mut conn, &current, ROLES_MIGRATION).await?;
    conn.close().await?;
    Ok(())
}

/// True when every embedded migration is applied with the same checksum.
pub async fn migrations_current(pool: &PgPool) -> Result<bool, sqlx::Error> {
    let applied: Vec<(i64, Vec<u8>)> =
        sqlx::query_as("select version, checksum from _sqlx_migrations where success")
            .fetch_all(pool)
            .await?;
    Ok(MIGRATOR
        .iter()
        .filter(|m| m.migration_type.is_up_migration())
        .all(|m| {
            applied
                .iter()
                .any(|(v, sum)| *v == m.version && sum.as_slice() == &*m.checksum)
        }))
}

/// Brings a database made before the baseline to legacy migration `version`
/// (and no further), as `migrate` would have then: for tests of upgrades.
#[doc(hidden)]
pub async fn migrate_legacy_to(pool: &PgPool, version: i64) -> Result<(), DbError> {
    let mut conn = pool.acquire().await?.detach();
    let chain = Migrator::with_migrations(
        LEGACY_MIGRATOR
            .iter()
            .filter(|m| m.version <= version)
            .cloned()
            .collect(),
    );
    if version < LEGACY_ROLES_MIGRATION {
        // Before the roles, everything ran as the login.
        chain.run(&mut conn).await?;
    } else {
        run_chain(&mut conn, &chain, LEGACY_ROLES_MIGRATION).await?;
    }
    conn.close().await?;
    Ok(())
}

fn known(migrator: &Migrator, version: i64) -> bool {
    migrator.iter().any(|m| m.version == version)
}

/// The versions applied, with their checksums (none on a fresh database).
async fn applied(conn: &mut PgConnection) -> Result<Vec<(i64, Vec<u8>)>, sqlx::Error> {
    let exists: bool = sqlx::query_scalar("select to_regclass('_sqlx_migrations') is not null")
        .fetch_one(&mut *conn)
        .await?;
    if !exists {
        return Ok(Vec::new());
    }
    sqlx::query_as("select version, checksum from _sqlx_migrations order by version")
        .fetch_all(&mut *conn)
        .await
}

/// On Citus: the tables distributed by authority, and the engine steps
/// delegated to the worker holding each authority's shards (migration 0033).
async fn distribute(conn: &mut PgConnection) -> Result<(), DbError> {
    sqlx::query("select ledger_distribute()")
        .execute(&mut *conn)
        .await?;
    sqlx::query("select ledger_delegate_engine_steps()")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Records the baseline's migrations as applied to a database that finished
/// the legacy chain: it holds their schema already.
async fn record_baseline(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    for m in MIGRATOR.iter().filter(|m| m.version <= BASELINE) {
        sqlx::query(
            "insert into _sqlx_migrations (version, description, success, checksum, execution_time)
             values ($1, $2, true, $3, 0)
             on conflict (version) do nothing",
        )
        .bind(m.version)
        .bind(format!(
            "{} (recorded: the legacy chain made it)",
            m.description
        ))
        .bind(&*m.checksum)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Runs `migrator` to its end: up to `roles_version` as the login, the rest
/// as the owner (with the engine's role granted meanwhile), then distributes
/// on Citus.
async fn run_chain(
    conn: &mut PgConnection,
    migrator: &Migrator,
    roles_version: i64,
) -> Result<(), DbError> {
    migrator.run_to(roles_version, &mut *conn).await?;
    let may_act_as_owner: bool = sqlx::query_scalar(
        "select exists (select 1 from pg_roles where rolname = $1) and pg_has_role($1, 'member')",
    )
    .bind(roles::OWNER)
    .fetch_one(&mut *conn)
    .await?;
    // On Citus the coordinator opens its connections to the workers as the
    // current role: the roles may log in there before the owner acts.
    let distributed = !Backend::detect(&mut *conn).await?.local_tables;
    if distributed {
        roles::may_log_in_on_every_node(&mut *conn).await?;
    }
    // The engine steps belong to `ledger_engine`, which the migrating role
    // is a member of only while the migrations run (and, on Citus, while
    // the steps are distributed: the workers check their owner too).
    let grantee = if may_act_as_owner {
        roles::OWNER.to_owned()
    } else {
        sqlx::query_scalar::<_, String>("select current_user::text")
            .fetch_one(&mut *conn)
            .await?
    };
    let engine_grantee =
        roles::engine_member_while_migrating(&mut *conn, &grantee, distributed).await?;
    if may_act_as_owner {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("set role {}", roles::OWNER)))
            .execute(&mut *conn)
            .await?;
    }
    let mut ran = migrator.run(&mut *conn).await.map_err(DbError::from);
    sqlx::raw_sql("reset role").execute(&mut *conn).await?;
    if ran.is_ok() && distributed {
        ran = distribute(&mut *conn).await;
    }
    if let Some(grantee) = engine_grantee {
        roles::engine_without_member(&mut *conn, &grantee).await?;
    }
    ran?;
    if distributed {
        // Setting a database's defaults is the database owner's (the login).
        super::citus_session_defaults(&mut *conn).await?;
    }
    Ok(())
}

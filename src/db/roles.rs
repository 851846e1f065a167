//! The ledger's database roles (migration 0016): who owns the schema, and what
//! each process of the service may do. The roles are global to the cluster;
//! every ledger database in it grants them its own objects.
//!
//! A process connects as its role in one of two ways: with a URL of its own
//! (a login of that role, or of a role granted it), or with the one
//! `DATABASE_URL`, every connection then switching to the role with
//! `SET ROLE` (the login must be a member of it: the one that ran the
//! migrations is). Either way each statement runs with that role's rights.

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions as _, PgConnection, PgPool};
use std::str::FromStr as _;
use std::time::Duration;

use super::DbError;

/// Owns every table, view and function; runs the migrations. Not a superuser.
pub const OWNER: &str = "ledger_owner";

/// A role of the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ServiceRole {
    /// Owns the schema and runs migrations.
    Owner,
    /// The HTTP API: inserts pending commands and holds, decides holds, cancels, reads.
    Api,
    /// Custodians and recovery: leases and the transitions from pending on.
    Custodian,
    /// Reads everything but token hashes; writes nothing.
    Inspector,
    /// Prunes, through `prune_commands()` only.
    Retention,
}

impl ServiceRole {
    pub const ALL: [ServiceRole; 5] = [
        ServiceRole::Owner,
        ServiceRole::Api,
        ServiceRole::Custodian,
        ServiceRole::Inspector,
        ServiceRole::Retention,
    ];

    /// The role's name in the cluster.
    pub fn name(self) -> &'static str {
        match self {
            ServiceRole::Owner => OWNER,
            ServiceRole::Api => "ledger_api",
            ServiceRole::Custodian => "ledger_custodian",
            ServiceRole::Inspector => "ledger_inspector",
            ServiceRole::Retention => "ledger_retention",
        }
    }
}

/// `name` as a quoted SQL identifier.
pub(super) fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `value` as a quoted SQL string literal.
pub(super) fn literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// Lets `role` log in with `password` (also how a password is rotated: the
/// sessions already open stay; new ones need the new password). Needs a
/// superuser, or CREATEROLE with the admin option on the role.
pub async fn set_login(
    conn: &mut PgConnection,
    role: ServiceRole,
    password: &str,
) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(AssertSqlSafe(format!(
        "alter role {} login password {}",
        ident(role.name()),
        literal(password)
    )))
    .execute(conn)
    .await?;
    Ok(())
}

/// Gives each role its login and password ([`set_login`]) in one
/// transaction, after any other process doing the same: processes starting
/// together (serve, a custodian, the command line) would otherwise update
/// the same roles at once, which PostgreSQL refuses.
pub async fn set_logins(
    pool: &PgPool,
    logins: &[(ServiceRole, String)],
) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("select pg_advisory_xact_lock(7242032)")
        .execute(&mut *tx)
        .await?;
    for (role, password) in logins {
        set_login(&mut tx, *role, password).await?;
    }
    tx.commit().await
}

/// On Citus: lets every service role log in, with the password it has (none
/// unless one was set). The coordinator opens its connections to the workers
/// as the current role, so a process that switched to `ledger_api` with
/// `SET ROLE` reaches the shards as `ledger_api`, which a worker refuses
/// unless that role may log in there. Run in a database with the citus
/// extension, the `ALTER ROLE` reaches every node. A role without a password
/// still cannot log in where the server asks for one: give it one with
/// [`set_login`] (or the workers a `pg_dist_authinfo` entry).
///
/// Only the roles that may not log in yet are altered, one process at a
/// time (every process migrates as it starts, and PostgreSQL refuses two
/// concurrent changes of one role: "tuple concurrently updated").
pub async fn may_log_in_on_every_node(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    use sqlx::Connection as _;
    let mut tx = conn.begin().await?;
    sqlx::query("select pg_advisory_xact_lock(7242032)")
        .execute(&mut *tx)
        .await?;
    let names: Vec<&str> = ServiceRole::ALL.iter().map(|r| r.name()).collect();
    let locked_out: Vec<String> = sqlx::query_scalar(
        "select rolname::text from pg_roles where rolname = any($1) and not rolcanlogin",
    )
    .bind(&names)
    .fetch_all(&mut *tx)
    .await?;
    for name in locked_out {
        sqlx::raw_sql(AssertSqlSafe(format!("alter role {} login", ident(&name))))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await
}

/// The role the engine steps run as (migration 0030, one node): they are
/// `SECURITY DEFINER` functions it owns, and the triggers that keep the
/// history for every other writer skip only what runs as it. Nobody can
/// act as it: it cannot log in, and it has no member but, while the
/// migrations run, the role that runs them (so that they may own and
/// replace its functions).
pub const ENGINE: &str = "ledger_engine";

/// Before the migrations: creates [`ENGINE`] when missing (on Citus, with
/// `on_every_node`, on each worker too: a role created in another database
/// of the coordinator's cluster is not on them) and makes `grantee` (the
/// role the migrations run as) its member, under a lock
/// that every migrating process takes, so that one process's revoke never
/// lands inside another's migrations. Returns the grantee to pass to
/// [`engine_without_member`], or `None` when there is nothing to undo (a
/// superuser acts as any role; a login that may not create the role leaves it
/// to the migration that needs it, the baseline 0043 or 0030 and later in the
/// legacy chain, to say what an administrator runs).
pub async fn engine_member_while_migrating(
    conn: &mut PgConnection,
    grantee: &str,
    on_every_node: bool,
) -> Result<Option<String>, sqlx::Error> {
    // Held until engine_without_member, or until the connection closes.
    sqlx::query("select pg_advisory_lock(7242033)")
        .execute(&mut *conn)
        .await?;
    let (exists, may_create, superuser): (bool, bool, bool) = sqlx::query_as(
        "select exists (select 1 from pg_roles where rolname = $1),
                (select rolcreaterole or rolsuper from pg_roles where rolname = current_user),
                (select rolsuper from pg_roles where rolname = $2)",
    )
    .bind(ENGINE)
    .bind(grantee)
    .fetch_one(&mut *conn)
    .await?;
    if !exists {
        if !may_create {
            return Ok(None);
        }
        sqlx::raw_sql(AssertSqlSafe(format!(
            "create role {} nologin",
            ident(ENGINE)
        )))
        .execute(&mut *conn)
        .await?;
    }
    if on_every_node && may_create {
        // Not propagated from a worker: the coordinator holds the lock the
        // propagation would wait for.
        sqlx::raw_sql(AssertSqlSafe(format!(
            "select run_command_on_workers({})",
            literal(&format!(
                "do $$ begin if not exists (select 1 from pg_roles where rolname = {}) then \
                 set local citus.enable_create_role_propagation = off; create role {} nologin; \
                 end if; end $$",
                literal(ENGINE),
                ident(ENGINE)
            ))
        )))
        .execute(&mut *conn)
        .await?;
    }
    // The owner of the engine's functions must be able to create in the
    // schema (as migration 0016 lets the owner).
    sqlx::raw_sql(AssertSqlSafe(format!(
        "grant usage, create on schema public to {}",
        ident(ENGINE)
    )))
    .execute(&mut *conn)
    .await?;
    if superuser {
        return Ok(None);
    }
    let granted = sqlx::raw_sql(AssertSqlSafe(format!(
        "grant {} to {}",
        ident(ENGINE),
        ident(grantee)
    )))
    .execute(&mut *conn)
    .await;
    match granted {
        Ok(_) => Ok(Some(grantee.to_owned())),
        // No admin option on a role an administrator created: the migration
        // that needs it (0043) says what to run.
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42501") => Ok(None),
        // Granted at this moment by a process migrating another database of
        // the cluster (roles are the cluster's; the advisory lock is the
        // database's): that process revokes it, and a migration that needs
        // it meanwhile fails and is run again ([`super::migrate`]).
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("23505") => Ok(None),
        Err(e) => Err(e),
    }
}

/// After the migrations: [`ENGINE`] has no member again.
pub async fn engine_without_member(
    conn: &mut PgConnection,
    grantee: &str,
) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(AssertSqlSafe(format!(
        "revoke {} from {}",
        ident(ENGINE),
        ident(grantee)
    )))
    .execute(&mut *conn)
    .await?;
    sqlx::query("select pg_advisory_unlock(7242033)")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// A pool acting as `role`: through `url` when it is given (a login of its
/// own), else through `fallback_url`, each connection switching to the role
/// with `SET ROLE`. Like [`super::connect_with_timeout`], opening waits up to
/// [`STARTUP_PATIENCE`] for a database that is still starting.
pub async fn connect(
    role: ServiceRole,
    url: Option<&str>,
    fallback_url: &str,
    max_connections: u32,
    application_name: &str,
    acquire_timeout: Duration,
) -> Result<PgPool, DbError> {
    if let Some(url) = url {
        return super::connect_with_timeout(
            url,
            max_connections,
            application_name,
            acquire_timeout,
        )
        .await;
    }
    let options = PgConnectOptions::from_str(fallback_url)
        .map_err(DbError::BadUrl)?
        .application_name(application_name)
        .log_statements(tracing::log::LevelFilter::Debug)
        .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(1));
    let pool = acting_as(
        PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(acquire_timeout),
        role.name(),
    )
    .connect_lazy_with(options);
    super::first_connection(pool).await
}

/// `options` whose every new connection acts as `role` (`SET ROLE`), for a
/// login that is not the role itself.
pub(super) fn acting_as(options: PgPoolOptions, role: &str) -> PgPoolOptions {
    let set_role = format!("set role {}", ident(role));
    options.after_connect(move |conn, _meta| {
        let set_role = set_role.clone();
        Box::pin(async move {
            sqlx::raw_sql(AssertSqlSafe(set_role)).execute(conn).await?;
            Ok(())
        })
    })
}

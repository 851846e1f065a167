//! The schema's migrations and how a database is brought to them.
//!
//! A fresh database runs the baseline: `0042_roles.sql` (as the login that
//! migrates) and `0043_baseline.sql` (the schema the chain before it made,
//! as one file, on either layout), then every later migration. A database
//! migrated before the baseline holds some of the legacy chain
//! (`migrations/legacy/0001-0041`), which ran in two stretches: 0001-0030,
//! then 0031-0041 from an earlier baseline (0031 the roles, 0032 the
//! schema of 0001-0030) on. [`migrate`] finishes each stretch the database
//! has not finished, records the baseline that replaced it as applied (it
//! holds the same schema; a test compares the two), and so reaches the
//! current baseline, after which every migration runs on both alike. A
//! database that holds a migration this binary does not know was migrated
//! by a newer version, and is refused.

use sqlx::migrate::{Migration, Migrator};
use sqlx::{Connection as _, PgConnection, PgPool, SqlSafeStr as _};

use super::clash::{again_after_a_clash, copies_met_another_database};
use super::{Backend, DbError, roles, statements};

/// The baseline and every later migration, embedded in the binary.
pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// The chain of databases made before the baseline, frozen: every
/// migration of [`STRETCHES`].
pub static LEGACY_MIGRATOR: Migrator = sqlx::migrate!("./migrations/legacy");

/// The baseline's first migration: the roles, run as the login.
pub const ROLES_MIGRATION: i64 = 42;

/// The baseline's schema.
pub const BASELINE: i64 = 43;

/// A stretch of the legacy chain: the migrations `first..=last`, of which
/// `roles` (and those before it) ran as the login and the rest as the
/// owner, replaced for new databases by the baseline whose schema is
/// migration `replaced_by` (the roles migration just before it, and it).
#[derive(Clone, Copy, Debug)]
pub struct Stretch {
    pub first: i64,
    pub roles: i64,
    pub last: i64,
    pub replaced_by: i64,
}

/// The legacy chain's stretches, oldest first: 0001-0030 (the roles made
/// by 0016), replaced by the baseline 0031-0032; 0031-0041, from that
/// baseline on, replaced by the current one.
pub const STRETCHES: [Stretch; 2] = [
    Stretch {
        first: 1,
        roles: 16,
        last: 30,
        replaced_by: 32,
    },
    Stretch {
        first: 31,
        roles: 31,
        last: 41,
        replaced_by: BASELINE,
    },
];

/// The legacy migration that made `ledger_function_sources`: from it on,
/// `migrate` applied the functions' files after the migrations.
const FUNCTION_SOURCES: i64 = 41;

impl Stretch {
    /// The stretch's migrations, up to `to` (a version of it, or its last).
    fn migrations(self, to: i64) -> Vec<Migration> {
        LEGACY_MIGRATOR
            .iter()
            .filter(|m| (self.first..=to.min(self.last)).contains(&m.version))
            .cloned()
            .collect()
    }

    /// The baseline that replaced the stretch: its roles and schema
    /// migrations, as the chain (legacy, or current) that holds them
    /// embeds them.
    fn baseline(self) -> Vec<Migration> {
        let holder = if known(&MIGRATOR, self.replaced_by) {
            &MIGRATOR
        } else {
            &LEGACY_MIGRATOR
        };
        holder
            .iter()
            .filter(|m| m.version == self.replaced_by - 1 || m.version == self.replaced_by)
            .cloned()
            .collect()
    }
}

/// Applies pending migrations (serialised across processes by sqlx's advisory
/// lock). The roles migration runs as the connecting user (the one that
/// creates the roles must be able to); every later one as [`roles::OWNER`],
/// so that what it creates belongs to the owner. On a Citus coordinator (the
/// `citus` extension is installed) the ledger's tables are then distributed
/// by authority (`ledger_distribute()`; idempotent, so tables a later
/// migration adds are distributed by the next run).
pub async fn migrate(pool: &PgPool) -> Result<(), DbError> {
    again_after_a_clash(pool, migrate_once).await
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
    if settled(&mut conn, &applied).await? {
        conn.close().await?;
        return Ok(());
    }
    let holds = |version: i64| applied.iter().any(|(v, _)| *v == version);
    let legacy = applied.iter().any(|(v, _)| known(&LEGACY_MIGRATOR, *v));
    if legacy {
        // Each stretch the database has not finished (it holds some of it,
        // or of a stretch before it), then the baseline that replaced it.
        for stretch in STRETCHES.iter().filter(|s| !holds(s.replaced_by)) {
            // What a database holds of the stretches before this one stays
            // on record; this stretch does not know it.
            let chain = migrator_for(&mut conn, stretch.migrations(stretch.last), true).await?;
            run_chain(&mut conn, &chain, stretch.roles, None).await?;
            record(&mut conn, &stretch.baseline()).await?;
        }
    }
    // The legacy rows stay on record; this chain does not know them.
    let current = migrator_for(&mut conn, MIGRATOR.iter().cloned().collect(), legacy).await?;
    run_chain(&mut conn, &current, ROLES_MIGRATION, Some(applied.len())).await?;
    conn.close().await?;
    Ok(())
}

/// Whether migrating has nothing to do: every migration applied as embedded
/// and, on Citus, what [`distribute`] and [`super::citus_session_defaults`]
/// do done. Then nothing is touched: above all no role is granted or revoked
/// (roles are the cluster's, and every process migrates as it starts, so a
/// process migrating another database may be granting the same one).
async fn settled(conn: &mut PgConnection, applied: &[(i64, Vec<u8>)]) -> Result<bool, DbError> {
    if applied.is_empty()
        || !versioned_current(&mut *conn).await?
        || !super::functions::current(&mut *conn).await?
    {
        return Ok(false);
    }
    if Backend::detect(&mut *conn).await?.local_tables {
        return Ok(true);
    }
    // Read as the login, which may not see the owner's catalog view: then
    // the full path decides.
    Ok(sqlx::query_scalar(CITUS_SETTLED)
        .fetch_one(&mut *conn)
        .await
        .unwrap_or(false))
}

/// On a Citus coordinator: every table of `ledger_distribution` distributed
/// as it says, every ledger function known to the workers, the engine steps
/// delegated by authority, the copies of the steps that name its shards
/// current on every node that answers (0039: none missing or left behind
/// after shards moved or were split; a node that does not answer cannot be
/// given them now, and must not keep the service from starting), and the
/// database's session default set.
const CITUS_SETTLED: &str = "
select not exists (
           select 1 from ledger_distribution t
           where to_regclass(t.table_name) is not null
             and not exists (
                 select 1 from pg_dist_partition p
                 where p.logicalrelid = to_regclass(t.table_name)
                   and case t.method when 'reference' then p.repmodel = 't' else p.partmethod = 'h' end))
   and not exists (
           select 1 from pg_proc f
           where f.pronamespace = 'public'::regnamespace
             and not exists (select 1 from pg_depend d where d.objid = f.oid and d.deptype = 'e')
             and f.proname !~ '^ledger_(claim_start_authority|record_outcomes)_s[0-9]+$'
             and not exists (
                 select 1 from pg_dist_object o
                 where o.classid = 'pg_proc'::regclass and o.objid = f.oid
                   and (o.distribution_argument_index is not null
                        or f.proname not in ('ledger_claim_start_authority', 'ledger_record_outcomes',
                                            'ledger_next_attempt', 'ledger_regroup_authority'))))
   and not exists (
           select 1 from run_command_on_all_nodes('select ledger_shard_steps_current()') n
           where n.success and n.result <> 't')
   and exists (
           select 1 from pg_db_role_setting s join pg_database d on d.oid = s.setdatabase
           where d.datname = current_database() and s.setrole = 0
             and 'citus.propagate_set_commands=local' = any (s.setconfig))";

/// True when every embedded migration is applied with the same checksum,
/// and the database holds every function's file as embedded
/// ([`super::functions::current`]).
pub async fn migrations_current(pool: &PgPool) -> Result<bool, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    Ok(versioned_current(&mut conn).await? && super::functions::current(&mut conn).await?)
}

/// True when every embedded migration is applied with the same checksum.
async fn versioned_current(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    let applied: Vec<(i64, Vec<u8>)> =
        sqlx::query_as("select version, checksum from _sqlx_migrations where success")
            .fetch_all(&mut *conn)
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

/// Brings an empty database to legacy migration `version` (and no
/// further) as `migrate` would have made a new database then: the stretch
/// that holds `version` from its first migration (from 0031, the earlier
/// baseline, for a version after it), the functions' files applied from
/// 0041 on, and on Citus the tables distributed. For tests of upgrades.
///
/// # Panics
///
/// When `version` is not a legacy migration.
#[doc(hidden)]
pub async fn migrate_legacy_to(pool: &PgPool, version: i64) -> Result<(), DbError> {
    again_after_a_clash(pool, async |pool: &PgPool| {
        migrate_legacy_once(pool, version).await
    })
    .await
}

async fn migrate_legacy_once(pool: &PgPool, version: i64) -> Result<(), DbError> {
    let stretch = STRETCHES
        .into_iter()
        .find(|s| (s.first..=s.last).contains(&version))
        .unwrap_or_else(|| panic!("{version} is not a legacy migration"));
    let mut conn = pool.acquire().await?.detach();
    let chain = migrator_for(&mut conn, stretch.migrations(version), true).await?;
    if version < stretch.roles {
        // Before the roles, everything ran as the login.
        chain.run(&mut conn).await?;
    } else {
        let functions = (version >= FUNCTION_SOURCES).then_some(0);
        run_chain(&mut conn, &chain, stretch.roles, functions).await?;
    }
    conn.close().await?;
    Ok(())
}

/// `migrations` to run on the database `conn` is connected to. On Citus
/// each runs its statements one by one ([`statements::one_by_one`]): Citus
/// sends a statement on a distributed table to the workers by its text,
/// which must be that one statement, and 0034 and 0040 change distributed
/// tables outside a block. Each is recorded under its file's checksum all
/// the same.
async fn migrator_for(
    conn: &mut PgConnection,
    migrations: Vec<Migration>,
    ignore_missing: bool,
) -> Result<Migrator, sqlx::Error> {
    let citus = !Backend::detect(&mut *conn).await?.local_tables;
    let mut migrator = Migrator::with_migrations(if citus {
        migrations
            .into_iter()
            .map(|mut m| {
                m.sql = sqlx::AssertSqlSafe(statements::one_by_one(m.sql.as_str())).into_sql_str();
                m
            })
            .collect()
    } else {
        migrations
    });
    migrator.set_ignore_missing(ignore_missing);
    Ok(migrator)
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

/// On Citus: the tables distributed by authority, the engine steps
/// delegated to the worker holding each authority's shards (migration
/// 0033), and each node's copies of the steps that name its shards (0039).
/// A database on its way through the legacy chain is given what its
/// migrations have made of these (as `migrate` did at its version): none
/// before 0019, the tables from 0019, the delegation from 0033.
async fn distribute(conn: &mut PgConnection) -> Result<(), DbError> {
    let made = async |conn: &mut PgConnection, function: &str| {
        sqlx::query_scalar::<_, bool>("select to_regproc($1) is not null")
            .bind(function)
            .fetch_one(conn)
            .await
    };
    if !made(&mut *conn, "ledger_distribute").await? {
        return Ok(());
    }
    sqlx::query("select ledger_distribute()")
        .execute(&mut *conn)
        .await?;
    if !made(&mut *conn, "ledger_delegate_engine_steps").await? {
        return Ok(());
    }
    sqlx::query("select ledger_delegate_engine_steps()")
        .execute(&mut *conn)
        .await?;
    if !made(&mut *conn, "ledger_make_shard_steps_here").await? {
        return Ok(());
    }
    // Each node's copies of the steps that name its shards (0039). A node
    // that fails keeps what it had: its groups run the steps as they are
    // (or its old copies, which refuse where their shards have left) until
    // the next migrate finds them not current.
    let made: Vec<(i32, bool, String)> = sqlx::query_as(
        "select nodeid, success, result from run_command_on_all_nodes('select ledger_make_shard_steps_here()')",
    )
    .fetch_all(&mut *conn)
    .await?;
    for (node, _, result) in made.into_iter().filter(|(_, done, _)| !done) {
        if copies_met_another_database(&result) {
            return Err(DbError::SharedRolesChanged(format!(
                "node {node}: {result}"
            )));
        }
        tracing::error!(node, error = %result, "cannot make the engine steps' copies on a node; its shard groups run the steps as they are, slower, until a migrate makes them (each custodian says so for each of its authorities there)");
    }
    Ok(())
}

/// Records a baseline's migrations as applied to a database that finished
/// the stretch of the legacy chain it replaced: it holds their schema
/// already.
async fn record(conn: &mut PgConnection, baseline: &[Migration]) -> Result<(), sqlx::Error> {
    for m in baseline {
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
/// as the owner (with the engine's role granted meanwhile), then, when
/// `functions` is given, the functions' files ([`super::functions::apply`]):
/// every file when the database now holds more migrations than that
/// number (a migration ran, here or in an earlier chain of this migrate,
/// and may have replaced a function a file holds), else those whose text
/// it does not hold; then distributes on Citus.
async fn run_chain(
    conn: &mut PgConnection,
    migrator: &Migrator,
    roles_version: i64,
    functions: Option<usize>,
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
    // The migrations' own notices are not the operator's: the earlier
    // baseline (0032, never to be edited) grants the engine a usage on the schema
    // it already has, which every first start printed as a WARN ('no
    // privileges were granted for "public"'). Errors still stop it.
    sqlx::raw_sql("set client_min_messages = error")
        .execute(&mut *conn)
        .await?;
    let mut ran = migrator.run(&mut *conn).await.map_err(DbError::from);
    if let (true, Some(before)) = (ran.is_ok(), functions) {
        // Every file again after a versioned migration ran (it may have
        // replaced a function its file holds); otherwise the changed ones.
        let all = applied(&mut *conn).await?.len() != before;
        ran = super::functions::apply(&mut *conn, all)
            .await
            .map(|_| ())
            .map_err(DbError::from);
    }
    sqlx::raw_sql("reset client_min_messages; reset role")
        .execute(&mut *conn)
        .await?;
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

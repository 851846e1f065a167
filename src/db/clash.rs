//! What a migration met of another database's on the same cluster: the
//! roles are the cluster's, so a process migrating one database can create,
//! grant or revoke them between another's statements. Such a failure is run
//! again ([`again_after_a_clash`]); nothing of the failed run stays (each
//! migration runs in a transaction).

use super::{DbError, PgPool, roles};

/// Runs `once`, and again (up to five times in all) while it fails on what
/// a migration of another database of the cluster did at the same moment.
pub(super) async fn again_after_a_clash(
    pool: &PgPool,
    once: impl AsyncFn(&PgPool) -> Result<(), DbError>,
) -> Result<(), DbError> {
    let mut attempt = 1;
    loop {
        match once(pool).await {
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
        DbError::SharedRolesChanged(_) => return true,
        _ => return false,
    };
    let on_worker = database
        .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        .and_then(|d| d.r#where().map(str::to_owned));
    shared_catalog_clash(database.code().as_deref(), database.message())
        || aborted_by_a_worker(database.code().as_deref(), on_worker.as_deref())
}

/// On Citus, a statement the coordinator sent to a worker whose transaction
/// an earlier statement had already failed (25P02, with the worker named in
/// its context): the coordinator reports the abort, not its cause. Seen
/// when another database's migration revoked the engine's member between
/// two of this one's statements on a worker ("must be owner of function
/// ledger_claim_start_authority" in the worker's log), so it counts as a
/// clash: run again, at most five times in all, a lasting cause still
/// shows.
fn aborted_by_a_worker(code: Option<&str>, context: Option<&str>) -> bool {
    code == Some("25P02") && context.is_some_and(|c| c.contains("while executing command on"))
}

/// The errors of [`clashed_with_another_database`], by SQLSTATE and message.
/// CL010, or 42501 naming the engine's role or one of its functions (a grant
/// on it by a role no longer its member): it lost its member; 23505: a role
/// (or a membership) made twice; XX000 "tuple concurrently deleted" (or
/// "updated"): a membership revoked (or a role altered) by two processes at
/// once, on the coordinator or on a worker Citus propagated it to.
pub(super) fn shared_catalog_clash(code: Option<&str>, message: &str) -> bool {
    match code {
        Some("CL010" | "23505") => true,
        Some("42501") => [
            roles::ENGINE,
            "ledger_claim_start",
            "ledger_record_outcomes",
        ]
        .iter()
        .any(|name| message.contains(name)),
        Some("XX000") => {
            message.contains("tuple concurrently deleted")
                || message.contains("tuple concurrently updated")
        }
        _ => false,
    }
}

/// Whether a node's maker of the steps' copies failed on what the
/// cluster's databases share: the migrating role's membership in
/// [`roles::ENGINE`], granted while it migrates, revoked meanwhile by a
/// process that finished migrating another database (the lock that keeps
/// them apart is a database's own), which leaves it unable to own, revoke
/// or replace the copies; or a role changed by two at once. Not
/// [`shared_catalog_clash`]: `run_command_on_all_nodes` gives the message
/// without its SQLSTATE, and a `CL016` naming a step would read as a clash
/// there.
pub(super) fn copies_met_another_database(message: &str) -> bool {
    message.contains(&format!("must be member of role \"{}\"", roles::ENGINE))
        || message.contains("must be owner of function ledger_")
        || message.contains("permission denied for function ledger_")
        || message.contains("tuple concurrently")
}

#[cfg(test)]
mod tests {
    use super::shared_catalog_clash;

    #[test]
    fn a_workers_aborted_transaction_is_a_clash_and_the_coordinators_is_not() {
        use super::aborted_by_a_worker;
        let worker = "while executing command on 127.0.0.1:9712\nSQL statement \"SELECT create_distributed_function(f, 'p_authority')\"";
        assert!(aborted_by_a_worker(Some("25P02"), Some(worker)));
        assert!(!aborted_by_a_worker(Some("25P02"), None));
        assert!(!aborted_by_a_worker(
            Some("25P02"),
            Some("PL/pgSQL function f() line 3")
        ));
        assert!(!aborted_by_a_worker(Some("42P01"), Some(worker)));
    }

    #[test]
    fn what_another_database_s_migration_did_to_the_shared_roles_is_a_clash() {
        assert!(shared_catalog_clash(
            Some("CL010"),
            "the engine steps (0033) need ..."
        ));
        assert!(shared_catalog_clash(
            Some("23505"),
            "duplicate key value violates unique constraint"
        ));
        assert!(shared_catalog_clash(
            Some("42501"),
            "permission denied for function ledger_record_outcomes"
        ));
        assert!(shared_catalog_clash(
            Some("42501"),
            "must be able to SET ROLE \"ledger_engine\""
        ));
        // Two processes revoking the one membership (seen on Citus, where
        // the revoke reaches every worker).
        assert!(shared_catalog_clash(
            Some("XX000"),
            "tuple concurrently deleted"
        ));
        assert!(shared_catalog_clash(
            Some("XX000"),
            "tuple concurrently updated"
        ));
    }

    #[test]
    fn a_maker_of_copies_that_lost_the_engine_s_membership_met_another_database() {
        use super::copies_met_another_database as met;
        assert!(met("must be member of role \"ledger_engine\""));
        assert!(met(
            "must be owner of function ledger_record_outcomes_s102083"
        ));
        assert!(met(
            "permission denied for function ledger_claim_start_authority_s102085"
        ));
        assert!(met("tuple concurrently updated"));
        assert!(!met(
            "ledger_record_outcomes names holds, a table of its shard group that the copies do not name by shard"
        ));
        assert!(!met("connection to the remote node failed"));
    }

    #[test]
    fn other_errors_are_not_run_again() {
        assert!(!shared_catalog_clash(
            Some("42501"),
            "permission denied for table commands"
        ));
        assert!(!shared_catalog_clash(Some("XX000"), "cache lookup failed"));
        assert!(!shared_catalog_clash(
            Some("42P01"),
            "relation does not exist"
        ));
        assert!(!shared_catalog_clash(None, "tuple concurrently deleted"));
    }
}

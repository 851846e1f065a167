//! The least-privilege roles (migration 0016), each tested by connecting as
//! itself: every write a role must not make is refused, whatever it types;
//! the owner is not a superuser. (That the API and the custodians do their
//! work with their roles' grants is what the rest of the suite shows: the
//! harness runs them as `ledger_api` and `ledger_custodian`.)

use command_ledger::db::CommandRow;
use command_ledger::db::roles::ServiceRole;
use sqlx::PgPool;

use crate::harness::{as_role, fresh_database};

fn sqlstate(e: &sqlx::Error) -> String {
    e.as_database_error()
        .and_then(|d| d.code())
        .map(|c| c.into_owned())
        .unwrap_or_default()
}

/// A principal, a pending command and a cancelled one, written by a
/// superuser (the triggers still write their history).
async fn seed(admin: &PgPool) -> (uuid::Uuid, uuid::Uuid, uuid::Uuid) {
    let principal = crate::harness::device_principal(admin, "kiosk").await;
    let mut ids = Vec::new();
    for key in ["live", "done"] {
        let id: uuid::Uuid = sqlx::query_scalar(
            "insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind, \
             authority_id, args, canonical) \
             values (gen_random_uuid(), $1, $2, sha256($2::bytea), 1, 'refund', 'payments', '{}', '{}') \
             returning id",
        )
        .bind(principal)
        .bind(key)
        .fetch_one(admin)
        .await
        .unwrap();
        ids.push(id);
    }
    sqlx::query("update commands set state = 'cancelled' where id = $1")
        .bind(ids[1])
        .execute(admin)
        .await
        .unwrap();
    (principal, ids[0], ids[1])
}

/// What the ledger looks like, to show a refused statement changed nothing.
async fn fingerprint(admin: &PgPool) -> String {
    sqlx::query_scalar(
        "select concat_ws('|', \
           (select string_agg(id::text || state || coalesce(result::text, '') || coalesce(error::text, ''), ',' order by id) from commands), \
           (select count(*) from command_history), (select count(*) from pruned_commands), \
           (select count(*) from coalesced_requests), (select count(*) from command_queue), \
           (select count(*) from holds), (select count(*) from api_tokens), \
           (select count(*) from principals), \
           (select string_agg(tgname::text || tgenabled::text, ',' order by tgname) from pg_trigger where not tgisinternal), \
           (select count(*) from pg_attribute where attrelid = 'commands'::regclass))",
    )
    .fetch_one(admin)
    .await
    .unwrap()
}

/// The writes no service role may make, whatever its job.
fn forbidden(principal: uuid::Uuid, live: uuid::Uuid, done: uuid::Uuid) -> Vec<String> {
    vec![
        format!(
            "insert into command_history (command_id, from_state, to_state, actor) \
             values ('{done}', 'cancelled', 'applied', 'forger')"
        ),
        format!(
            "insert into pruned_commands (id, scope, idempotency_key, kind, authority_id, state, created_at, finished_at, pruned_by, record) \
             values (gen_random_uuid(), '{principal}', 'forged', 'refund', 'payments', 'applied', now(), now(), 'forger', '{{}}')"
        ),
        format!(
            "insert into coalesced_requests (authority_id, scope, request_digest, command_id) \
             values ('payments', '{principal}', sha256('forged'), '{live}')"
        ),
        format!("insert into command_queue (authority_id, id) values ('payments', '{done}')"),
        format!("update commands set result = '{{\"forged\": true}}' where id = '{done}'"),
        format!("update commands set state = 'applied' where id = '{done}'"),
        "update command_history set actor = 'forger'".to_owned(),
        format!("delete from commands where id = '{done}'"),
        "delete from command_history".to_owned(),
        "delete from pruned_commands".to_owned(),
        "delete from api_tokens".to_owned(),
        "alter table commands disable trigger commands_guard".to_owned(),
        "alter table commands disable trigger all".to_owned(),
        "alter table command_history disable trigger command_history_append_only".to_owned(),
        "set session_replication_role = replica".to_owned(),
        "alter table commands add column forged int".to_owned(),
        "alter table commands disable row level security".to_owned(),
        "drop policy commands_cancel on commands".to_owned(),
        "create table public.forged (id int)".to_owned(),
        "create or replace function ledger_actor() returns text language sql as $$ select 'forger' $$"
            .to_owned(),
        "truncate commands".to_owned(),
        "truncate command_history".to_owned(),
        "truncate pruned_commands".to_owned(),
        "truncate api_tokens".to_owned(),
        "truncate principals cascade".to_owned(),
        "grant ledger_owner to current_user".to_owned(),
        "set role ledger_owner".to_owned(),
        "insert into principals (id, name, role) values (gen_random_uuid(), 'forged', 'operator')"
            .to_owned(),
        "insert into api_tokens (id, principal_id, token_hash, prefix) \
         values (gen_random_uuid(), gen_random_uuid(), sha256('x'), 'x')"
            .to_owned(),
    ]
}

/// Runs each statement as `role` and asserts it is refused, for lack of a
/// privilege (42501, row policies included) or by a trigger (CL...), or
/// that it found no row it may change, and that nothing changed.
async fn assert_refused(admin: &PgPool, role: ServiceRole, statements: &[String]) {
    let pool = as_role(admin, role);
    let before = fingerprint(admin).await;
    for sql in statements {
        let result = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
            .execute(&pool)
            .await;
        match result {
            // An update the row policies hide every row from does nothing.
            Ok(done) if done.rows_affected() == 0 && sql.starts_with("update commands") => {}
            Ok(done) => panic!(
                "{} was allowed: {sql} ({} rows)",
                role.name(),
                done.rows_affected()
            ),
            Err(e) => {
                let code = sqlstate(&e);
                assert!(
                    code == "42501" || code.starts_with("CL"),
                    "{}: {sql}: refused with {code} {e}, not for want of a privilege",
                    role.name()
                );
            }
        }
        assert_eq!(
            fingerprint(admin).await,
            before,
            "{}: {sql} changed the ledger",
            role.name()
        );
    }
    pool.close().await;
}

#[tokio::test]
async fn no_service_role_can_forge_history_edit_a_finished_command_delete_or_switch_a_trigger_off()
{
    let (_url, admin) = fresh_database().await;
    let (principal, live, done) = seed(&admin).await;
    let statements = forbidden(principal, live, done);
    for role in [
        ServiceRole::Api,
        ServiceRole::Custodian,
        ServiceRole::Inspector,
        ServiceRole::Retention,
    ] {
        assert_refused(&admin, role, &statements).await;
    }
}

#[tokio::test]
async fn the_api_only_records_and_cancels_and_never_moves_a_command_along() {
    let (_url, admin) = fresh_database().await;
    let (principal, live, done) = seed(&admin).await;
    assert_refused(
        &admin,
        ServiceRole::Api,
        &[
            format!("update commands set state = 'prepared', authority_generation = 1 where id = '{live}'"),
            format!("update commands set state = 'expired' where id = '{live}'"),
            format!("update commands set deadline_at = now() where id = '{live}'"),
            format!("update commands set state = 'cancelled', finished_at = now() - interval '1 year' where id = '{live}'"),
            format!(
                "insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind, \
                 authority_id, args, canonical, state) values (gen_random_uuid(), '{principal}', 'k', \
                 sha256('k'), 1, 'refund', 'payments', '{{}}', '{{}}', 'applied')"
            ),
            "insert into authorities (id) values ('mine')".to_owned(),
            "update authorities set generation = generation + 1".to_owned(),
            "select prune_commands(interval '30 days', 10)".to_owned(),
            // Coalescing goes through a function that checks the command is
            // of the request's scope and authority.
            format!(
                "select ledger_remember_coalesced('elsewhere', '{principal}', sha256('r'), '{live}', null)"
            ),
        ],
    )
    .await;
    // What it may do: cancel a live command (and nothing terminal).
    let api = as_role(&admin, ServiceRole::Api);
    let cancelled = sqlx::query(
        "update commands set state = 'cancelled', error = '{}' where id = any($1) and state in ('pending', 'prepared')",
    )
    .bind(vec![live, done])
    .execute(&api)
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(cancelled, 1);
    api.close().await;
}

#[tokio::test]
async fn a_custodian_moves_commands_along_but_never_cancels_inserts_or_takes_a_lease_backwards() {
    let (_url, admin) = fresh_database().await;
    let (principal, live, _done) = seed(&admin).await;
    sqlx::query("insert into authorities (id, generation) values ('payments', 3)")
        .execute(&admin)
        .await
        .unwrap();
    assert_refused(
        &admin,
        ServiceRole::Custodian,
        &[
            format!("update commands set state = 'cancelled' where id = '{live}'"),
            format!(
                "insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind, \
                 authority_id, args, canonical) values (gen_random_uuid(), '{principal}', 'k', \
                 sha256('k'), 1, 'refund', 'payments', '{{}}', '{{}}')"
            ),
            "update authorities set generation = 1 where id = 'payments'".to_owned(),
            "delete from authorities".to_owned(),
            format!(
                "insert into holds (id, scope, kind, authority_id, args, canonical, request_digest, \
                 intent_digest, digest_version, resembles) values (gen_random_uuid(), '{principal}', \
                 'refund', 'payments', '{{}}', '{{}}', sha256('h'), sha256('h'), 1, '{live}')"
            ),
            "select prune_commands(interval '30 days', 10)".to_owned(),
        ],
    )
    .await;
    // A hand-typed transition is audited under the custodian's own name,
    // though the trigger that writes the history runs as the owner.
    let custodian = as_role(&admin, ServiceRole::Custodian);
    sqlx::query("update commands set state = 'expired' where id = $1")
        .bind(live)
        .execute(&custodian)
        .await
        .unwrap();
    custodian.close().await;
    let actor: String = sqlx::query_scalar(
        "select actor from command_history where command_id = $1 and to_state = 'expired'",
    )
    .bind(live)
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(actor, "sql:ledger_custodian");
}

#[tokio::test]
async fn the_inspector_reads_everything_but_token_hashes() {
    let (_url, admin) = fresh_database().await;
    seed(&admin).await;
    let inspector = as_role(&admin, ServiceRole::Inspector);
    for read in [
        "select count(*) from commands",
        "select count(*) from command_history",
        "select count(*) from pruned_commands",
        "select count(*) from command_queue",
        "select count(prefix) from api_tokens",
    ] {
        let n: i64 = sqlx::query_scalar(read)
            .fetch_one(&inspector)
            .await
            .unwrap_or_else(|e| panic!("{read}: {e}"));
        assert!(n >= 0, "{read}");
    }
    let seen: i64 = sqlx::query_scalar("select count(*) from commands")
        .fetch_one(&inspector)
        .await
        .unwrap();
    assert_eq!(
        seen, 2,
        "the row policies let the inspector see every command"
    );
    inspector.close().await;
    assert_refused(
        &admin,
        ServiceRole::Inspector,
        &["select token_hash from api_tokens".to_owned()],
    )
    .await;
}

#[tokio::test]
async fn the_owner_is_no_superuser_and_cannot_switch_every_trigger_off() {
    let (_url, admin) = fresh_database().await;
    let (owner_is_super, owner_can_create_roles): (bool, bool) = sqlx::query_as(
        "select rolsuper, rolcreaterole from pg_roles where rolname = 'ledger_owner'",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert!(!owner_is_super && !owner_can_create_roles);
    assert_refused(
        &admin,
        ServiceRole::Owner,
        &["set session_replication_role = replica".to_owned()],
    )
    .await;
    // It owns every table, view and function of the ledger (what an
    // extension made in the schema, such as Citus's `citus_tables` view, is
    // the extension's).
    let foreign: Vec<String> = sqlx::query_scalar(
        "select c.relname::text from pg_class c \
         where c.relnamespace = 'public'::regnamespace and c.relkind in ('r', 'p', 'v', 'm') \
           and pg_get_userbyid(c.relowner) <> 'ledger_owner' \
           and not exists (select 1 from pg_depend d where d.classid = 'pg_class'::regclass \
                           and d.objid = c.oid and d.deptype = 'e') \
         union all \
         select p.proname::text from pg_proc p \
         where p.pronamespace = 'public'::regnamespace and pg_get_userbyid(p.proowner) <> 'ledger_owner' \
           and not exists (select 1 from pg_depend d where d.classid = 'pg_proc'::regclass \
                           and d.objid = p.oid and d.deptype = 'e')",
    )
    .fetch_all(&admin)
    .await
    .unwrap();
    // But the engine's steps (migrations 0030 and 0033; Citus has the two
    // that take one authority; 0046's next attempt; 0048's limits per
    // provider; on Citus 0049's places and groups per authority), which
    // belong to
    // the role nobody can act as, so that the triggers know them.
    let mut foreign = foreign;
    foreign.sort();
    let expected: &[&str] = if crate::harness::ledger_backend().local_tables {
        &[
            "ledger_claim_start",
            "ledger_claim_start_authority",
            "ledger_next_attempt",
            "ledger_record_outcomes",
            "ledger_set_providers",
        ]
    } else {
        &[
            "ledger_claim_start_authority",
            "ledger_next_attempt",
            "ledger_provider_hold",
            "ledger_provider_release",
            "ledger_record_outcomes",
            "ledger_regroup_authority",
            "ledger_set_providers",
        ]
    };
    assert_eq!(foreign, expected, "not the owner's");
    // Every PL/pgSQL function (the triggers, and those that write on
    // request) runs as the owner with its search_path pinned. A later
    // `create or replace function` drops both unless it says them again.
    let unpinned: Vec<String> = sqlx::query_scalar(
        "select p.proname::text from pg_proc p join pg_language l on l.oid = p.prolang \
         where p.pronamespace = 'public'::regnamespace and l.lanname = 'plpgsql' \
           and not (p.prosecdef and coalesce(p.proconfig @> array['search_path=public, pg_temp'], false))",
    )
    .fetch_all(&admin)
    .await
    .unwrap();
    assert!(
        unpinned.is_empty(),
        "not security definer with search_path = public, pg_temp: {unpinned:?}"
    );
}

/// A server given by URL: a login that may create roles (not a superuser)
/// migrates an empty database; one that may not, where it is not a member of
/// the roles, is refused with a hint saying what to run.
#[tokio::test]
async fn migrating_needs_createrole_or_membership_and_says_so() {
    let (_url, admin) = fresh_database().await;
    for (createrole, works) in [(true, true), (false, false)] {
        let login = format!("migrator_{}", uuid::Uuid::now_v7().simple());
        let database = format!("cl_migrated_by_{login}");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "create role {login} login password 'pw' {}",
            if createrole { "createrole" } else { "" }
        )))
        .execute(&admin)
        .await
        .unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "create database {database} owner {login}"
        )))
        .execute(&admin)
        .await
        .unwrap();
        crate::harness::dropped_after_this_test(&database);
        let options = (*admin.connect_options())
            .clone()
            .database(&database)
            .username(&login)
            .password("pw");
        let pool = PgPool::connect_with(options).await.unwrap();
        let result = command_ledger::db::migrate(&pool).await;
        if works {
            result.unwrap();
            let owner: String = sqlx::query_scalar(
                "select pg_get_userbyid(relowner)::text from pg_class where oid = 'commands'::regclass",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            assert_eq!(owner, "ledger_owner");
        } else {
            let err = result.unwrap_err().to_string();
            assert!(
                err.contains("CL010") || err.contains("not a member"),
                "{err}"
            );
        }
        pool.close().await;
    }
}

/// Every process migrates as it starts. On a database already migrated,
/// migrating touches no role: it does not wait for the lock under which a
/// migration makes its login the engine's member (taken here by another
/// session, as a migration of this database would), nor grant or revoke the
/// membership that migrations of the cluster's other databases share (on
/// Citus, two commands' revokes met: "tuple concurrently deleted").
#[tokio::test]
async fn migrating_a_database_already_migrated_touches_no_role() {
    use sqlx::Connection as _;
    let (url, pool) = fresh_database().await;
    let mut migrating = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("select pg_advisory_lock(7242033)")
        .execute(&mut migrating)
        .await
        .unwrap();
    let again = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        command_ledger::db::migrate(&pool),
    )
    .await;
    assert!(
        matches!(again, Ok(Ok(()))),
        "migrating a migrated database waited for, or failed on, the engine's lock: {again:?}"
    );
    // And a database with a migration to run waits its turn.
    sqlx::query(
        "delete from _sqlx_migrations where version = (select max(version) from _sqlx_migrations)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let waiting = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        command_ledger::db::migrate(&pool),
    )
    .await;
    assert!(waiting.is_err(), "it did not wait: {waiting:?}");
    migrating.close().await.unwrap();
}

/// A process given only its role's URL (no `DATABASE_URL`) holds no other
/// password: it migrates nothing, refuses a database not migrated to its
/// version, and works on one that is.
#[tokio::test]
async fn a_process_given_only_its_roles_url_checks_the_migrations_and_works_as_that_role() {
    const BIN: &str = env!("CARGO_BIN_EXE_command-ledger");
    let (unmigrated, empty) = crate::harness::empty_database().await;
    let (migrated, _pool) = fresh_database().await;
    let prune = |url: String| {
        tokio::process::Command::new(BIN)
            .args(["prune", "--older-than", "30d"])
            .env_remove("DATABASE_URL")
            .env("RETENTION_DATABASE_URL", url)
            .env("RUST_LOG", "error")
            .output()
    };
    let refused = prune(crate::harness::role_url(
        &unmigrated,
        ServiceRole::Retention,
    ))
    .await
    .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("not migrated to this version"), "{stderr}");
    let tables: i64 = sqlx::query_scalar(
        "select count(*) from pg_class where relnamespace = 'public'::regnamespace",
    )
    .fetch_one(&empty)
    .await
    .unwrap();
    assert_eq!(tables, 0, "it migrated nothing");

    let worked = prune(crate::harness::role_url(&migrated, ServiceRole::Retention))
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&worked.stdout);
    assert!(
        worked.status.success() && stdout.contains("pruned 0 finished command(s)"),
        "{stdout}{}",
        String::from_utf8_lossy(&worked.stderr)
    );
}

/// The authority `payments` at generation 3, leased to `holder` for an hour.
async fn lease_payments(admin: &PgPool) {
    sqlx::query(
        "insert into authorities (id, generation, lease_holder, lease_expires_at) \
         values ('payments', 3, 'holder', now() + interval '1 hour')",
    )
    .execute(admin)
    .await
    .unwrap();
}

/// The API, the inspector and retention may run neither engine step on
/// `payments` (claiming as `holder`, recording `live` at `generation`).
async fn assert_steps_refused_but_to_the_custodian(
    admin: &PgPool,
    live: uuid::Uuid,
    holder: &str,
    generation: i64,
) {
    let mut steps = vec![
        format!("select ledger_claim_start_authority('payments', '{holder}', 10)"),
        format!(
            "select ledger_record_outcomes('payments', {generation}, \
             '[{{\"id\": \"{live}\", \"state\": \"applied\"}}]')"
        ),
        format!("select ledger_next_attempt('payments', '{live}', 0.1, null)"),
    ];
    if !crate::harness::ledger_backend().local_tables {
        steps.push("select ledger_regroup_authority('payments', '{}')".to_owned());
    }
    for role in [
        ServiceRole::Api,
        ServiceRole::Inspector,
        ServiceRole::Retention,
    ] {
        assert_refused(admin, role, &steps).await;
    }
}

#[tokio::test]
async fn nobody_can_act_as_the_engine_and_its_steps_move_commands_only_along_the_state_machine() {
    let (_url, admin) = fresh_database().await;
    let (_principal, live, _done) = seed(&admin).await;
    // The role the steps run as cannot log in and has no member once the
    // migrations are over: no session can become it, so no one can pass
    // the triggers that skip it.
    let (can_login, members): (bool, i64) = sqlx::query_as(
        "select r.rolcanlogin, (select count(*) from pg_auth_members m where m.roleid = r.oid) \
         from pg_roles r where r.rolname = 'ledger_engine'",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert!(!can_login);
    assert_eq!(members, 0, "ledger_engine has members");
    for role in ServiceRole::ALL {
        assert_refused(&admin, role, &["set role ledger_engine".to_owned()]).await;
    }
    // Only the custodian may run the steps.
    assert_steps_refused_but_to_the_custodian(&admin, live, "x", 1).await;
    // The custodian's calls that would skip a state, or act without the
    // lease or at another generation, move nothing.
    lease_payments(&admin).await;
    let before = fingerprint(&admin).await;
    let custodian = as_role(&admin, ServiceRole::Custodian);
    for sql in [
        // Still pending: an outcome cannot be recorded for it.
        format!(
            "select ledger_record_outcomes('payments', 3, \
             '[{{\"id\": \"{live}\", \"state\": \"applied\"}}]')"
        ),
        // Not the lease's holder.
        "select ledger_claim_start_authority('payments', 'someone-else', 10)".to_owned(),
    ] {
        let moved = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
            .fetch_all(&custodian)
            .await
            .unwrap();
        assert!(moved.is_empty(), "{sql} moved {} rows", moved.len());
    }
    assert_eq!(fingerprint(&admin).await, before);
    // The holder's claim moves the command through prepared to
    // effect_started, with one entry that names both edges of the state
    // machine (0045); a record at another generation is fenced out.
    // (Each step alone in the select list: the form Citus hands to the
    // worker holding the authority.)
    let started: Vec<CommandRow> =
        sqlx::query_scalar("select ledger_claim_start_authority('payments', 'holder', 10)")
            .fetch_all(&custodian)
            .await
            .unwrap();
    let started: Vec<(uuid::Uuid, &str)> = started
        .iter()
        .map(|row| (row.id, row.state.as_str()))
        .collect();
    assert_eq!(started, [(live, "effect_started")]);
    let outcome = format!(r#"[{{"id": "{live}", "state": "applied", "result": {{"ok": true}}}}]"#);
    let fenced: Vec<uuid::Uuid> =
        sqlx::query_scalar("select ledger_record_outcomes('payments', 2, $1::jsonb)")
            .bind(&outcome)
            .fetch_all(&custodian)
            .await
            .unwrap();
    assert!(
        fenced.is_empty(),
        "recorded at a generation not the authority's"
    );
    let recorded: Vec<uuid::Uuid> =
        sqlx::query_scalar("select ledger_record_outcomes('payments', 3, $1::jsonb)")
            .bind(&outcome)
            .fetch_all(&custodian)
            .await
            .unwrap();
    assert_eq!(recorded, [live]);
    custodian.close().await;
    let steps: Vec<(Option<String>, Option<String>, String, String)> = sqlx::query_as(
        "select h.from_state, h.through, h.to_state, h.actor from command_history h \
         where h.command_id = $1 order by h.id",
    )
    .bind(live)
    .fetch_all(&admin)
    .await
    .unwrap();
    let edges: Vec<(Option<&str>, Option<&str>, &str)> = steps
        .iter()
        .map(|(from, through, to, _)| (from.as_deref(), through.as_deref(), to.as_str()))
        .collect();
    assert_eq!(
        edges,
        [
            (None, None, "pending"),
            (Some("pending"), Some("prepared"), "effect_started"),
            (Some("effect_started"), None, "applied"),
        ]
    );
    assert!(
        steps[1..]
            .iter()
            .all(|(_, _, _, actor)| actor == "sql:ledger_custodian")
    );
    // Each edge an entry records, the one it passed through included, is
    // one of the state machine's.
    let illegal: i64 = sqlx::query_scalar(
        "select count(*) from command_history h \
         cross join lateral (values (h.from_state, coalesce(h.through, h.to_state)), (h.through, h.to_state)) \
                            as e (from_state, to_state) \
         where e.from_state is not null \
         and not exists (select 1 from command_transitions t \
                         where t.from_state = e.from_state and t.to_state = e.to_state)",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(illegal, 0);
    let breaks: Vec<_> = command_ledger::db::verify::chains(&admin, None, None)
        .await
        .unwrap()
        .into_iter()
        .flat_map(|c| c.breaks)
        .collect();
    assert!(breaks.is_empty(), "{breaks:?}");
}

#[tokio::test]
async fn on_citus_a_worker_that_lets_anyone_execute_the_steps_still_runs_them_for_the_custodian_only()
 {
    if crate::harness::ledger_backend().local_tables {
        eprintln!(
            "not run: the backend has local_tables (TEST_CITUS=1 is not set): no step runs on a worker"
        );
        return;
    }
    let (_url, admin) = fresh_database().await;
    let (_principal, live, _done) = seed(&admin).await;
    lease_payments(&admin).await;
    // What a worker added after `migrate` holds: Citus makes its copy of
    // each step executable by PUBLIC, and the coordinator hands the call
    // over without checking its own copy's grants.
    for step in [
        "ledger_claim_start_authority(text, text, integer, jsonb)",
        "ledger_record_outcomes(text, bigint, jsonb)",
        "ledger_next_attempt(text, uuid, double precision, double precision)",
        "ledger_regroup_authority(text, jsonb)",
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "grant execute on function {step} to public"
        )))
        .execute(&admin)
        .await
        .unwrap();
    }
    let public_on_workers: bool = sqlx::query_scalar(
        "select bool_and(result::boolean) from run_command_on_workers(\
         $$select has_function_privilege('ledger_api', \
         'ledger_claim_start_authority(text, text, integer, jsonb)', 'execute')$$)",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert!(public_on_workers, "the grant did not reach the workers");
    assert_steps_refused_but_to_the_custodian(&admin, live, "holder", 3).await;
    // The custodian's own call still moves the command.
    let custodian = as_role(&admin, ServiceRole::Custodian);
    let started: Vec<CommandRow> =
        sqlx::query_scalar("select ledger_claim_start_authority('payments', 'holder', 10)")
            .fetch_all(&custodian)
            .await
            .unwrap();
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].id, live);
    custodian.close().await;
}

/// `ledger_start_prepared` may be called by anyone (a Citus worker's copy
/// would let anyone anyway) and refuses every session but a custodian's:
/// the API's, the inspector's and retention's get 42501 and move nothing.
#[tokio::test]
async fn only_a_custodian_starts_prepared_commands() {
    let (_url, admin) = fresh_database().await;
    let (_principal, live, _done) = seed(&admin).await;
    let lease = command_ledger::db::authorities::acquire(
        &admin,
        "payments",
        "holder",
        std::time::Duration::from_secs(60),
    )
    .await
    .unwrap()
    .expect("the lease");
    sqlx::query(
        "update commands set state = 'prepared', authority_generation = $2 \
         where authority_id = 'payments' and id = $1",
    )
    .bind(live)
    .bind(lease.generation)
    .execute(&admin)
    .await
    .unwrap();
    for role in [
        ServiceRole::Api,
        ServiceRole::Inspector,
        ServiceRole::Retention,
    ] {
        let err = sqlx::query("select ledger_start_prepared('payments', 'holder', 10)")
            .execute(&as_role(&admin, role))
            .await
            .expect_err("a service role other than the custodian's");
        assert_eq!(sqlstate(&err), "42501", "{role:?}: {err}");
    }
    let state: String = sqlx::query_scalar("select state from commands where id = $1")
        .bind(live)
        .fetch_one(&admin)
        .await
        .unwrap();
    assert_eq!(state, "prepared");
    let started: Vec<String> =
        sqlx::query_scalar("select state from ledger_start_prepared('payments', 'holder', 10)")
            .fetch_all(&as_role(&admin, ServiceRole::Custodian))
            .await
            .unwrap();
    assert_eq!(started, ["effect_started"]);
}

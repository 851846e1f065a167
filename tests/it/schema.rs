//! The database enforces the rules on its own: SQL typed by hand cannot make
//! an illegal transition, edit a terminal row, or rewrite history, and every
//! change it does make is audited.

use crate::harness::fresh_pool;
use command_ledger::domain::{CommandState, TRANSITIONS, can_transition};
use sqlx::PgPool;
use std::collections::BTreeSet;

/// A principal and a pending command, inserted by hand.
async fn insert_command(pool: &PgPool, key: &str) -> uuid::Uuid {
    let principal = crate::harness::device_principal(pool, &format!("p-{key}")).await;
    sqlx::query_scalar(
        "insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind, authority_id, args, canonical) \
         values (gen_random_uuid(), $1, $2, sha256($2::bytea), 1, 'refund', 'payments', '{}', '{}') returning id",
    )
    .bind(principal)
    .bind(key)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn set_state(pool: &PgPool, id: uuid::Uuid, to: CommandState) -> Result<u64, sqlx::Error> {
    sqlx::query(
        "update commands set state = $2, authority_generation = coalesce(authority_generation, 1) where id = $1",
    )
    .bind(id)
    .bind(to.as_str())
    .execute(pool)
    .await
    .map(|r| r.rows_affected())
}

/// Walks a new command along legal edges to `target`.
async fn command_in(pool: &PgPool, key: &str, target: CommandState) -> uuid::Uuid {
    use CommandState::*;
    let id = insert_command(pool, key).await;
    let path: &[CommandState] = match target {
        Pending => &[],
        Prepared => &[Prepared],
        EffectStarted => &[Prepared, EffectStarted],
        Applied | Failed | Ambiguous => &[Prepared, EffectStarted, target],
        Cancelled | Expired => &[target],
    };
    for &step in path {
        set_state(pool, id, step).await.unwrap();
    }
    id
}

/// The immutable columns' rules are checked once, at insert (0034, where
/// they were CHECK constraints tested again at every transition): each is
/// refused with 23514 under its former constraint's name, and since the
/// columns are frozen (CL003), no later update can break one.
#[tokio::test]
async fn the_immutable_columns_rules_are_checked_at_insert_and_hold_for_the_row_s_life() {
    let pool = fresh_pool().await;
    let principal = crate::harness::device_principal(&pool, "p-rules").await;
    for (rule, column, value) in [
        ("commands_authority_format", "authority_id", "'-payments'"),
        ("commands_kind_format", "kind", "'Refund'"),
        ("commands_key_length", "idempotency_key", "''"),
        ("commands_digest_is_sha256", "request_digest", "'\\x00'"),
        (
            "commands_intent_digest_is_sha256",
            "intent_digest",
            "'\\x00'",
        ),
        ("commands_intent_epoch_positive", "intent_epoch", "0"),
        (
            "commands_pinned_generation_non_negative",
            "pinned_generation",
            "-1",
        ),
        ("commands_priority_in_range", "priority", "101"),
    ] {
        let mut cols = vec![
            ("idempotency_key", "'k-rules'"),
            ("request_digest", "sha256('r')"),
            ("kind", "'refund'"),
            ("authority_id", "'payments'"),
        ];
        cols.retain(|(c, _)| *c != column);
        cols.push((column, value));
        let (names, vals): (Vec<&str>, Vec<&str>) = cols.into_iter().unzip();
        let sql = format!(
            "insert into commands (id, scope, digest_version, args, canonical, {}) \
             values (gen_random_uuid(), $1, 1, '{{}}', '{{}}', {})",
            names.join(", "),
            vals.join(", ")
        );
        let err = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(principal)
            .execute(&pool)
            .await
            .unwrap_err();
        assert_eq!(sqlstate(&err), "23514", "{rule}: {err}");
        assert!(err.to_string().contains(rule), "{rule}: {err}");
    }
    let count: i64 = sqlx::query_scalar("select count(*) from commands")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(count, 0, "nothing was recorded");

    // A well-formed command goes in; none of its frozen columns can then be
    // set to a value its rule refuses.
    let id = insert_command(&pool, "rules").await;
    for edit in [
        "update commands set kind = 'Refund' where id = $1",
        "update commands set idempotency_key = '' where id = $1",
        "update commands set request_digest = '\\x00' where id = $1",
        "update commands set intent_digest = '\\x00' where id = $1",
        "update commands set intent_epoch = 0 where id = $1",
        "update commands set pinned_generation = -1 where id = $1",
        "update commands set priority = 101 where id = $1",
    ] {
        let err = sqlx::query(edit).bind(id).execute(&pool).await.unwrap_err();
        assert_eq!(sqlstate(&err), "CL003", "{edit}: {err}");
    }
}

fn sqlstate(e: &sqlx::Error) -> String {
    e.as_database_error()
        .and_then(|d| d.code())
        .map(|c| c.into_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_rust_transition_table_and_the_database_table_are_identical() {
    let pool = fresh_pool().await;
    let rows: Vec<(String, String)> =
        sqlx::query_as("select from_state, to_state from command_transitions")
            .fetch_all(&pool)
            .await
            .unwrap();
    let in_db: BTreeSet<(CommandState, CommandState)> = rows
        .iter()
        .map(|(f, t)| (f.parse().unwrap(), t.parse().unwrap()))
        .collect();
    let in_rust: BTreeSet<(CommandState, CommandState)> = TRANSITIONS.iter().copied().collect();
    assert_eq!(
        in_db, in_rust,
        "every database edge is in Rust and every Rust edge in the database"
    );

    let states: Vec<(String, bool)> = sqlx::query_as("select state, terminal from command_states")
        .fetch_all(&pool)
        .await
        .unwrap();
    let db_states: BTreeSet<(CommandState, bool)> = states
        .iter()
        .map(|(s, t)| (s.parse().unwrap(), *t))
        .collect();
    let rust_states: BTreeSet<(CommandState, bool)> = CommandState::ALL
        .iter()
        .map(|s| (*s, s.is_terminal()))
        .collect();
    assert_eq!(db_states, rust_states);
}

#[tokio::test]
async fn every_state_change_typed_by_hand_is_checked_against_the_table() {
    let pool = fresh_pool().await;
    for from in CommandState::ALL {
        for to in CommandState::ALL {
            if from == to {
                continue;
            }
            let id = command_in(&pool, &format!("{from}-{to}"), from).await;
            let result = set_state(&pool, id, to).await;
            if can_transition(from, to) {
                assert_eq!(result.unwrap(), 1, "{from} -> {to} is allowed");
            } else {
                let err = result.expect_err(&format!("{from} -> {to} must be refused"));
                let expected = if from.is_terminal() { "CL002" } else { "CL001" };
                assert_eq!(sqlstate(&err), expected, "{from} -> {to}: {err}");
                let state: String = sqlx::query_scalar("select state from commands where id = $1")
                    .bind(id)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                assert_eq!(state, from.as_str());
            }
        }
    }
}

#[tokio::test]
async fn terminal_rows_cannot_be_edited_at_all() {
    let pool = fresh_pool().await;
    let id = command_in(&pool, "done", CommandState::Applied).await;
    for edit in [
        "update commands set result = '{\"forged\": true}' where id = $1",
        "update commands set error = '{}' where id = $1",
        "update commands set finished_at = now() - interval '1 day' where id = $1",
        "update commands set deadline_at = now() where id = $1",
    ] {
        let err = sqlx::query(edit).bind(id).execute(&pool).await.unwrap_err();
        assert_eq!(sqlstate(&err), "CL002", "{edit}: {err}");
    }
}

#[tokio::test]
async fn identity_columns_are_immutable_and_live_rows_cannot_be_deleted() {
    let pool = fresh_pool().await;
    let id = command_in(&pool, "live", CommandState::Pending).await;
    for edit in [
        "update commands set args = '{\"amount\": 999}' where id = $1",
        "update commands set idempotency_key = 'other' where id = $1",
        "update commands set kind = 'charge' where id = $1",
        "update commands set authority_id = 'elsewhere' where id = $1",
        "update commands set request_digest = sha256('x') where id = $1",
        "update commands set intent_digest = sha256('x') where id = $1",
        "update commands set canonical_rules = '{money@/amount}' where id = $1",
        "update commands set intent_epoch = 2 where id = $1",
        "update commands set pinned_generation = 3 where id = $1",
    ] {
        let err = sqlx::query(edit).bind(id).execute(&pool).await.unwrap_err();
        // Where the tables are distributed by authority, the distribution
        // column cannot change at all: the backend refuses the statement
        // before the guard sees it.
        let expected =
            if !crate::harness::ledger_backend().local_tables && edit.contains("authority_id") {
                "0A000"
            } else {
                "CL003"
            };
        assert_eq!(sqlstate(&err), expected, "{edit}: {err}");
    }
    let err = sqlx::query("delete from commands where id = $1")
        .bind(id)
        .execute(&pool)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "CL002");
}

#[tokio::test]
async fn commands_are_created_pending_and_checks_tie_state_to_columns() {
    let pool = fresh_pool().await;
    let id = insert_command(&pool, "seed").await;
    let scope: uuid::Uuid = sqlx::query_scalar("select scope from commands where id = $1")
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap();
    let err = sqlx::query(
        "insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind, authority_id, args, canonical, state) \
         values (gen_random_uuid(), $1, 'x', sha256('x'), 1, 'refund', 'payments', '{}', '{}', 'applied')",
    )
    .bind(scope)
    .execute(&pool)
    .await
    .unwrap_err();
    assert_eq!(sqlstate(&err), "CL001");

    // Prepared needs a generation.
    let err = sqlx::query("update commands set state = 'prepared' where id = $1")
        .bind(id)
        .execute(&pool)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "23514", "{err}");
    // A live row has no finish time.
    let err = sqlx::query("update commands set finished_at = now() where id = $1")
        .bind(id)
        .execute(&pool)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "23514", "{err}");
    // The generation, once bound, only moves forward and only on a prepared row.
    set_state(&pool, id, CommandState::Prepared).await.unwrap();
    let err = sqlx::query("update commands set authority_generation = 0 where id = $1")
        .bind(id)
        .execute(&pool)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "CL003");
    sqlx::query("update commands set authority_generation = 2 where id = $1")
        .bind(id)
        .execute(&pool)
        .await
        .unwrap();
    set_state(&pool, id, CommandState::EffectStarted)
        .await
        .unwrap();
    let err = sqlx::query("update commands set authority_generation = 3 where id = $1")
        .bind(id)
        .execute(&pool)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "CL003");
}

#[tokio::test]
async fn every_change_is_in_the_history_and_the_history_cannot_be_rewritten() {
    let pool = fresh_pool().await;
    let id = command_in(&pool, "audited", CommandState::Prepared).await;
    // An operator names themself and a reason for a change typed by hand.
    let mut tx = pool.begin().await.unwrap();
    sqlx::raw_sql(
        "set local command_ledger.actor = 'operator:alice'; \
         set local command_ledger.reason = 'customer called'",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    sqlx::query("update commands set state = 'cancelled' where id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    type Entry = (Option<String>, String, String, Option<i64>, Option<String>);
    let history: Vec<Entry> = sqlx::query_as(
        "select from_state, to_state, actor, authority_generation, reason from command_history where command_id = $1 order by seq",
    )
    .bind(id)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        history,
        vec![
            (None, "pending".into(), "sql:postgres".into(), None, None),
            (
                Some("pending".into()),
                "prepared".into(),
                "sql:postgres".into(),
                Some(1),
                None
            ),
            (
                Some("prepared".into()),
                "cancelled".into(),
                "operator:alice".into(),
                Some(1),
                Some("customer called".into())
            ),
        ]
    );

    for sql in [
        "update command_history set actor = 'nobody'",
        "delete from command_history",
        "truncate command_history",
    ] {
        let err = sqlx::query(sql).execute(&pool).await.unwrap_err();
        assert_eq!(sqlstate(&err), "CL003", "{sql}: {err}");
    }
    for sql in [
        "insert into command_transitions values ('applied', 'pending')",
        "delete from command_transitions",
        "update command_states set terminal = false",
    ] {
        let err = sqlx::query(sql).execute(&pool).await.unwrap_err();
        assert_eq!(sqlstate(&err), "CL004", "{sql}: {err}");
    }
}

#[tokio::test]
async fn the_views_count_commands_by_state_and_age_the_oldest() {
    let pool = fresh_pool().await;
    command_in(&pool, "a", CommandState::Pending).await;
    command_in(&pool, "b", CommandState::Pending).await;
    command_in(&pool, "c", CommandState::Applied).await;
    let counts: Vec<(String, i64)> =
        sqlx::query_as("select state, commands from command_counts_by_state order by state")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        counts.len(),
        CommandState::ALL.len(),
        "every state is listed, zeros included"
    );
    let count = |s: &str| counts.iter().find(|(state, _)| state == s).unwrap().1;
    assert_eq!(
        (count("pending"), count("applied"), count("failed")),
        (2, 1, 0)
    );

    let (n, has_age): (i64, bool) = sqlx::query_as(
        "select commands, oldest_age is not null from command_oldest_in_flight where state = 'pending'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((n, has_age), (2, true));
    let in_flight_states: i64 = sqlx::query_scalar("select count(*) from command_oldest_in_flight")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(in_flight_states, 3);
}

/// An authority at generation 6, taken twice by custodians (1, then 2) and
/// moved on by hand.
async fn authority_at_six(pool: &PgPool) {
    use command_ledger::db::authorities;
    let ttl = std::time::Duration::ZERO;
    let first = authorities::acquire(pool, "payments", "custodian-a", ttl)
        .await
        .unwrap()
        .unwrap();
    let second = authorities::acquire(pool, "payments", "custodian-b", ttl)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((first.generation, second.generation), (1, 2));
    sqlx::query("update authorities set generation = 6 where id = 'payments'")
        .execute(pool)
        .await
        .unwrap();
}

/// The next custodian to take `payments` gets a generation above 6.
async fn next_generation_is_new(pool: &PgPool) {
    let next = command_ledger::db::authorities::acquire(
        pool,
        "payments",
        "custodian-c",
        std::time::Duration::from_secs(30),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(next.generation, 7, "a generation is never issued twice");
}

#[tokio::test]
async fn an_authority_generation_never_goes_back() {
    let pool = fresh_pool().await;
    authority_at_six(&pool).await;
    let err = sqlx::query("update authorities set generation = 4 where id = 'payments'")
        .execute(&pool)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "CL005");
    next_generation_is_new(&pool).await;
}

#[tokio::test]
async fn deleting_an_authority_is_refused_so_its_generations_are_never_reissued() {
    let pool = fresh_pool().await;
    authority_at_six(&pool).await;
    let err = sqlx::query("delete from authorities where id = 'payments'")
        .execute(&pool)
        .await
        .expect_err("deleting an authority would let its generations be issued again");
    assert_eq!(sqlstate(&err), "CL005", "{err}");
    next_generation_is_new(&pool).await;
}

#[tokio::test]
async fn truncating_authorities_is_refused_so_no_generation_is_reissued() {
    let pool = fresh_pool().await;
    authority_at_six(&pool).await;
    for sql in ["truncate authorities", "truncate authorities cascade"] {
        let err = sqlx::query(sql)
            .execute(&pool)
            .await
            .expect_err("truncating authorities would let generations be issued again");
        assert_eq!(sqlstate(&err), "CL005", "{sql}: {err}");
    }
    next_generation_is_new(&pool).await;
}

/// The inspection role reads everything but secrets, and writes nothing.
#[tokio::test]
async fn the_inspector_role_reads_the_ledger_but_no_token_hash_and_writes_nothing() {
    let (url, pool) = crate::harness::fresh_database().await;
    command_in(&pool, "seen", CommandState::Pending).await;
    command_ledger::cli::issue_token(&pool, "someone", command_ledger::db::Role::Device, None)
        .await
        .unwrap();
    let role = format!("inspector_{}", uuid::Uuid::now_v7().simple());
    let mut conn = pool.acquire().await.unwrap();
    command_ledger::db::inspector::grant(&mut conn, &role, Some("s3cret"))
        .await
        .unwrap();
    drop(conn);

    let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    let inspector = PgPool::connect_with(options.username(&role).password("s3cret"))
        .await
        .unwrap();
    for read in [
        "select count(*) from commands",
        "select count(*) from command_history",
        "select count(*) from holds",
        "select count(*) from coalesced_requests",
        "select count(*) from command_counts_by_state",
        "select count(*) from command_oldest_in_flight",
        "select count(*) from holds_awaiting_decision",
        "select count(*) from principals",
        "select count(prefix) from api_tokens",
    ] {
        let n: i64 = sqlx::query_scalar(read)
            .fetch_one(&inspector)
            .await
            .unwrap_or_else(|e| panic!("{read}: {e}"));
        assert!(n >= 0);
    }
    for refused in [
        "select token_hash from api_tokens",
        "select * from api_tokens",
        "update commands set deadline_at = now()",
        "insert into authorities (id) values ('mine')",
        "delete from command_history",
        "update principals set role = 'operator'",
        "insert into api_tokens (id, principal_id, token_hash, prefix) values (gen_random_uuid(), gen_random_uuid(), sha256('x'), 'x')",
    ] {
        let err = sqlx::query(refused)
            .execute(&inspector)
            .await
            .expect_err(refused);
        assert_eq!(sqlstate(&err), "42501", "{refused}: {err}");
    }
    inspector.close().await;
}

#[tokio::test]
async fn the_state_checks_name_exactly_the_states_of_the_reference_table() {
    let pool = fresh_pool().await;
    let states: BTreeSet<String> = sqlx::query_scalar("select state from command_states")
        .fetch_all(&pool)
        .await
        .unwrap()
        .into_iter()
        .collect();
    for (table, constraint, columns) in [
        ("commands", "commands_state_known", 1),
        ("command_history", "command_history_states_known", 2),
    ] {
        let definition: String = sqlx::query_scalar(
            "select pg_get_constraintdef(oid) from pg_constraint \
             where conname = $1 and conrelid = $2::regclass",
        )
        .bind(constraint)
        .bind(table)
        .fetch_one(&pool)
        .await
        .unwrap();
        let quoted: Vec<&str> = definition.split('\'').skip(1).step_by(2).collect();
        assert_eq!(quoted.len(), states.len() * columns, "{definition}");
        let named: BTreeSet<String> = quoted.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(named, states, "{constraint}: {definition}");
    }
    let id = insert_command(&pool, "unknown-state").await;
    let err = sqlx::query(
        "insert into command_history (authority_id, command_id, to_state, actor, seq) values ('payments', $1, 'done', 'x', 1)",
    )
    .bind(id)
    .execute(&pool)
    .await
    .unwrap_err();
    assert_eq!(sqlstate(&err), "23514", "{err}");
}

#[tokio::test]
async fn one_statement_changing_many_rows_audits_and_announces_each_row() {
    let pool = fresh_pool().await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(command_in(&pool, &format!("batch-{i}"), CommandState::EffectStarted).await);
    }
    let untouched = command_in(&pool, "batch-untouched", CommandState::EffectStarted).await;
    let mut listener = sqlx::postgres::PgListener::connect_with(&pool)
        .await
        .unwrap();
    listener.listen("command_ledger_outcome").await.unwrap();

    let mut tx = pool.begin().await.unwrap();
    sqlx::raw_sql("set local command_ledger.actor = 'custodian:batch'")
        .execute(&mut *tx)
        .await
        .unwrap();
    // Four rows finish; a fifth is rewritten to its own state, which changes nothing.
    let changed = sqlx::query(
        "update commands set state = case when id = $2 then state else 'applied' end, \
         result = case when id = $2 then null else '{}'::jsonb end where id = any($1)",
    )
    .bind(&ids)
    .bind(ids[4])
    .execute(&mut *tx)
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(changed, 5);
    tx.commit().await.unwrap();

    let entries: Vec<(uuid::Uuid, String, String)> = sqlx::query_as(
        "select command_id, from_state || '->' || to_state, actor from command_history \
         where actor = 'custodian:batch' order by command_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let mut expected: Vec<(uuid::Uuid, String, String)> = ids[..4]
        .iter()
        .map(|id| {
            (
                *id,
                "effect_started->applied".into(),
                "custodian:batch".into(),
            )
        })
        .collect();
    expected.sort();
    assert_eq!(entries, expected);
    if crate::harness::lacks!(
        outcome_notify_in_transaction,
        "the commit announces nothing there (docs/SCALING.md); the audit above is the part that holds"
    ) {
        return;
    }

    let mut announced = BTreeSet::new();
    while announced.len() < 4 {
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), listener.recv())
            .await
            .expect("one notification per finished row")
            .unwrap();
        announced.insert(n.payload().parse::<uuid::Uuid>().unwrap());
    }
    assert_eq!(announced, ids[..4].iter().copied().collect());
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(300), listener.recv())
            .await
            .is_err(),
        "no notification for the row that did not change, nor for {untouched}"
    );
}

/// Tables the ledger keeps no promise about, so truncating them is the
/// owner's business. Every other table in the schema (principals, fleets and
/// tokens too, since 0016: revoke a token, do not erase it) must refuse
/// truncate with a trigger of its own; a new table lands here only with a
/// reason. No service role is granted truncate on any table.
const TRUNCATE_ALLOWED: &[(&str, &str)] = &[
    (
        "ledger_counts",
        "statistics (request and execution counts per minute), not commands: emptying it resets the counters and loses no command or history",
    ),
    (
        "ledger_counts_by_authority",
        "statistics, as ledger_counts (the shards' execution counts on Citus; empty on one node): emptying it loses no command or history",
    ),
    (
        "ledger_distribution",
        "how ledger_distribute() lays the tables out on Citus, configuration rather than ledger data: emptying it distributes nothing more, and tables already distributed stay so",
    ),
    (
        "ledger_function_sources",
        "migrate's bookkeeping of the function files applied (0041), not ledger data: emptying it makes the next migrate apply every file again",
    ),
    (
        "_sqlx_migrations",
        "sqlx's bookkeeping of applied migrations, not ledger data",
    ),
];

#[tokio::test]
async fn every_table_the_ledger_keeps_refuses_truncate_as_the_catalog_lists_them() {
    let pool = fresh_pool().await;
    // Every ordinary or partitioned table of the schema, with whether it has
    // an enabled trigger that fires before truncate (tgtype: bit 5 truncate,
    // bit 1 before).
    let tables: Vec<(String, bool)> = sqlx::query_as(
        "select c.relname::text, exists ( \
             select 1 from pg_trigger t \
             where t.tgrelid = c.oid and not t.tgisinternal and t.tgenabled <> 'D' \
               and t.tgtype & 32 <> 0 and t.tgtype & 2 <> 0) \
         from pg_class c join pg_namespace n on n.oid = c.relnamespace \
         where n.nspname = current_schema() and c.relkind in ('r', 'p') \
         order by 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let names: BTreeSet<&str> = tables.iter().map(|(t, _)| t.as_str()).collect();
    for (allowed, _why) in TRUNCATE_ALLOWED {
        assert!(
            names.contains(allowed),
            "{allowed} is allow-listed but no longer exists: drop it from TRUNCATE_ALLOWED"
        );
    }
    let kept: Vec<&str> = tables
        .iter()
        .map(|(t, _)| t.as_str())
        .filter(|t| !TRUNCATE_ALLOWED.iter().any(|(a, _)| a == t))
        .collect();
    assert!(
        kept.contains(&"commands") && kept.contains(&"holds"),
        "{kept:?}"
    );
    let unguarded: Vec<&str> = tables
        .iter()
        .filter(|(t, guarded)| !guarded && kept.contains(&t.as_str()))
        .map(|(t, _)| t.as_str())
        .collect();
    assert!(
        unguarded.is_empty(),
        "tables whose rows the ledger keeps but that accept truncate: {unguarded:?} \
         (add a before-truncate trigger, or a reason in TRUNCATE_ALLOWED)"
    );
    // And they do refuse: with cascade (which takes the referencing tables
    // along) a trigger answers; without it, a table other tables refer to
    // may be refused by PostgreSQL's foreign-key check (0A000) first.
    for table in kept {
        for (sql, fk_check_may_answer) in [
            (format!("truncate {table}"), true),
            (format!("truncate {table} cascade"), false),
        ] {
            let err = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .execute(&pool)
                .await
                .expect_err(&sql);
            let code = sqlstate(&err);
            assert!(
                code.starts_with("CL") || (fk_check_may_answer && code == "0A000"),
                "{sql}: {code} {err}"
            );
        }
    }
}

//! Storage v2 (migration 0013): the claimable and live sets live in
//! `command_queue` and `command_in_flight`, kept by the triggers of
//! `commands`; no index of `commands` names a column a transition changes,
//! so transitions are HOT updates; a populated v1 database migrates without
//! losing a row or a history entry.

use crate::harness::{empty_database, fresh_pool};
use command_ledger::db;
use command_ledger::domain::EffectOutcome;
use serde_json::json;
use sqlx::PgPool;
use std::collections::BTreeSet;
use std::time::Duration;
use uuid::Uuid;

/// A principal of its own and `n` pending commands for `authority`,
/// inserted by hand in one statement.
pub(crate) async fn insert_commands(pool: &PgPool, authority: &str, n: i32) -> Vec<Uuid> {
    let principal =
        crate::harness::device_principal(pool, &format!("storage-{}", Uuid::now_v7())).await;
    insert_commands_of(pool, principal, authority, n).await
}

/// `n` pending commands of `principal` for `authority`, in one statement.
async fn insert_commands_of(pool: &PgPool, principal: Uuid, authority: &str, n: i32) -> Vec<Uuid> {
    sqlx::query_scalar(
        "insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind, authority_id, args, canonical) \
         select gen_random_uuid(), $1, 'k-' || i, sha256(('k-' || i)::bytea), 2, 'noop', $2, \
                '{\"n\": 1}', '{\"n\": 1}' \
         from generate_series(1, $3) as i \
         returning id",
    )
    .bind(principal)
    .bind(authority)
    .bind(n)
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn update(pool: &PgPool, ids: &[Uuid], state: &str) {
    sqlx::query(
        "update commands set state = $2, authority_generation = coalesce(authority_generation, 1) \
         where id = any($1)",
    )
    .bind(ids)
    .bind(state)
    .execute(pool)
    .await
    .unwrap();
}

/// The custodian's claim-and-start step for one authority, as it runs it:
/// in a transaction of its own, acting as `holder`.
async fn claim_start(
    pool: &PgPool,
    authority: &str,
    holder: &str,
    limit: i64,
) -> Vec<db::CommandRow> {
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("select set_config($1, $2, true)")
        .bind(db::txn::ACTOR)
        .bind(format!("custodian:{holder}"))
        .execute(&mut *tx)
        .await
        .unwrap();
    let rows = db::lifecycle::claim_start_authority(&mut *tx, None, authority, holder, limit)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    rows
}

async fn ids_in(pool: &PgPool, table: &str) -> BTreeSet<Uuid> {
    sqlx::query_scalar::<_, Uuid>(sqlx::AssertSqlSafe(format!("select id from {table}")))
        .fetch_all(pool)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

fn set(ids: &[Uuid]) -> BTreeSet<Uuid> {
    ids.iter().copied().collect()
}

fn sqlstate(e: &sqlx::Error) -> String {
    e.as_database_error()
        .and_then(|d| d.code())
        .map(|c| c.into_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_queue_and_the_in_flight_table_follow_every_transition() {
    let pool = fresh_pool().await;
    let ids = insert_commands(&pool, "payments", 6).await;
    assert_eq!(ids_in(&pool, "command_queue").await, set(&ids));
    assert!(ids_in(&pool, "command_in_flight").await.is_empty());

    // Cancelled and expired while pending: out of the queue, never in flight.
    update(&pool, &ids[0..1], "cancelled").await;
    update(&pool, &ids[1..2], "expired").await;
    // Claimed: in flight.
    update(&pool, &ids[2..6], "prepared").await;
    assert!(ids_in(&pool, "command_queue").await.is_empty());
    assert_eq!(ids_in(&pool, "command_in_flight").await, set(&ids[2..6]));

    // Started: still in flight; cancelled while prepared: out.
    update(&pool, &ids[2..5], "effect_started").await;
    update(&pool, &ids[5..6], "cancelled").await;
    assert_eq!(ids_in(&pool, "command_in_flight").await, set(&ids[2..5]));

    // Terminal: out.
    update(&pool, &ids[2..3], "applied").await;
    update(&pool, &ids[3..4], "failed").await;
    assert_eq!(ids_in(&pool, "command_in_flight").await, set(&ids[4..5]));
    update(&pool, &ids[4..5], "ambiguous").await;
    assert!(ids_in(&pool, "command_in_flight").await.is_empty());

    // The ambiguous count reads the history's index.
    assert_eq!(
        db::commands::count_unresolved_ambiguous(&pool)
            .await
            .unwrap(),
        1
    );
}

#[tokio::test]
async fn the_queue_and_the_in_flight_table_refuse_writes_by_hand() {
    let pool = fresh_pool().await;
    let ids = insert_commands(&pool, "payments", 2).await;
    update(&pool, &ids[1..2], "prepared").await;
    for sql in [
        "delete from command_queue",
        "update command_queue set id = '0190d8c8-0000-7000-8000-000000000000'",
        "insert into command_queue values ('payments', gen_random_uuid())",
        "truncate command_queue",
        "delete from command_in_flight",
        "insert into command_in_flight values ('payments', gen_random_uuid())",
        "truncate command_in_flight",
    ] {
        let e = sqlx::query(sql).execute(&pool).await.unwrap_err();
        assert_eq!(sqlstate(&e), "CL008", "{sql}: {e}");
    }
    assert_eq!(ids_in(&pool, "command_queue").await, set(&ids[0..1]));
    assert_eq!(ids_in(&pool, "command_in_flight").await, set(&ids[1..2]));
}

/// The columns a transition may change. An index that names one of them
/// (as a key, an expression or a partial predicate) makes every transition
/// a non-HOT update that rewrites every index of the row.
const CHANGING: &[&str] = &[
    "state",
    "authority_generation",
    "result",
    "error",
    "updated_at",
    "finished_at",
];

#[tokio::test]
async fn no_index_of_commands_names_a_column_a_transition_changes() {
    let pool = fresh_pool().await;
    let indexed: Vec<(String, String)> = sqlx::query_as(
        "select i.indexrelid::regclass::text, a.attname::text \
         from pg_index i \
         join pg_attribute a on a.attrelid = i.indrelid and a.attnum > 0 \
         where i.indrelid = 'commands'::regclass \
           and (a.attnum = any(i.indkey::int2[]) \
                or pg_get_expr(i.indexprs, i.indrelid) ~ ('\\m' || a.attname || '\\M') \
                or pg_get_expr(i.indpred, i.indrelid) ~ ('\\m' || a.attname || '\\M'))",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(!indexed.is_empty(), "the catalog query sees the indexes");
    let offending: Vec<_> = indexed
        .iter()
        .filter(|(_, column)| CHANGING.contains(&column.as_str()))
        .collect();
    assert!(
        offending.is_empty(),
        "indexes naming transition columns: {offending:?}"
    );
    let fillfactor: Option<String> = sqlx::query_scalar(
        "select option_value from pg_options_to_table((select reloptions from pg_class where oid = 'commands'::regclass)) \
         where option_name = 'fillfactor'",
    )
    .fetch_optional(&pool)
    .await
    .unwrap();
    assert_eq!(fillfactor.as_deref(), Some("40"));
}

#[tokio::test]
async fn a_transition_is_a_hot_update() {
    if crate::harness::lacks!(
        local_tables,
        "HOT updates are counted where the rows are, in the statistics of the node holding them"
    ) {
        return;
    }
    let pool = fresh_pool().await;
    let ids = insert_commands(&pool, "payments", 50).await;
    let mut tx = pool.begin().await.unwrap();
    let counts = "select pg_stat_get_xact_tuples_updated('commands'::regclass), \
                  pg_stat_get_xact_tuples_hot_updated('commands'::regclass)";
    // PostgreSQL 15 keeps a backend's counts until it reports them, so the
    // transaction's own are the difference.
    let (updated_before, hot_before): (i64, i64) =
        sqlx::query_as(counts).fetch_one(&mut *tx).await.unwrap();
    sqlx::query(
        "update commands set state = 'prepared', authority_generation = 1 where id = any($1)",
    )
    .bind(&ids)
    .execute(&mut *tx)
    .await
    .unwrap();
    let (updated, hot): (i64, i64) = sqlx::query_as(counts).fetch_one(&mut *tx).await.unwrap();
    // The start, while the claim's old versions are still there (as the
    // custodian's overlapping transactions keep them in a real run).
    sqlx::query("update commands set state = 'effect_started' where id = any($1)")
        .bind(&ids)
        .execute(&mut *tx)
        .await
        .unwrap();
    let (updated_twice, hot_twice): (i64, i64) =
        sqlx::query_as(counts).fetch_one(&mut *tx).await.unwrap();
    tx.rollback().await.unwrap();
    let (updated, hot) = (updated - updated_before, hot - hot_before);
    let (second, second_hot) = (
        updated_twice - updated - updated_before,
        hot_twice - hot - hot_before,
    );
    assert_eq!(updated, 50);
    assert_eq!(second, 50);
    // At fillfactor 40 (0026) a page has room for about half as many
    // versions again; at 50 the first update used all of it.
    eprintln!("second update: {second_hot} of {second} HOT");
    assert!(
        second_hot * 3 >= second,
        "at least a third of the second updates are HOT: {second_hot} of {second}"
    );
    // In one transaction nothing can be pruned, so a row updates in place
    // only if its page has room for one more version of it. At fillfactor
    // 50 (0024) every row of a page has that room; at 60 (0013) about two
    // thirds had, and before 0013 none. Across transactions pruning frees
    // the room again (the benchmark measures the share in W3b).
    assert!(
        hot * 10 >= updated * 9,
        "at least nine updates in ten are HOT: {hot} of {updated}"
    );
}

#[tokio::test]
async fn the_claim_takes_from_the_queue_oldest_first_and_skips_rows_another_claim_holds() {
    let pool = fresh_pool().await;
    let ids = insert_commands(&pool, "payments", 5).await;
    let mut sorted = ids.clone();
    sorted.sort();
    let lease = db::authorities::acquire(&pool, "payments", "holder-a", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();

    // Another transaction holds the oldest command's row (a cancel in progress).
    let mut other = pool.begin().await.unwrap();
    sqlx::query("select 1 from commands where authority_id = 'payments' and id = $1 for update")
        .bind(sorted[0])
        .execute(&mut *other)
        .await
        .unwrap();
    let claimed = claim_start(&pool, "payments", "holder-a", 2).await;
    let got: Vec<Uuid> = claimed.iter().map(|c| c.id).collect();
    assert_eq!(
        got.len(),
        1,
        "the held row is skipped, not waited for: {got:?}"
    );
    assert_eq!(got[0], sorted[1]);
    assert!(
        claimed.iter().all(
            |c| c.state == "effect_started" && c.authority_generation == Some(lease.generation)
        )
    );
    other.rollback().await.unwrap();

    let claimed = claim_start(&pool, "payments", "holder-a", 10).await;
    let mut got: Vec<Uuid> = claimed.iter().map(|c| c.id).collect();
    got.sort();
    assert_eq!(
        got,
        vec![sorted[0], sorted[2], sorted[3], sorted[4]],
        "the rest, once"
    );
    assert!(ids_in(&pool, "command_queue").await.is_empty());
    assert_eq!(ids_in(&pool, "command_in_flight").await, set(&ids));
}

/// Index entries of `command_queue` this transaction has read so far, in
/// any of its indexes (the claim orders, under no provider limit and by
/// provider group, and the key).
async fn queue_entries_read(tx: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar(
        "select pg_stat_get_xact_tuples_returned('command_queue_claim_order_unlimited'::regclass) \
              + pg_stat_get_xact_tuples_returned('command_queue_provider_order'::regclass) \
              + pg_stat_get_xact_tuples_returned('command_queue_pkey'::regclass)",
    )
    .fetch_one(tx)
    .await
    .unwrap()
}

/// Autovacuum off for `tables`, so that nothing analyzes them behind a
/// test's back.
pub(crate) async fn autovacuum_off(pool: &PgPool, tables: &[&str]) {
    for table in tables {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "alter table {table} set (autovacuum_enabled = false)"
        )))
        .execute(pool)
        .await
        .unwrap();
    }
}

/// The case of a backlog newer than the statistics: with autovacuum off,
/// 50 authorities of 4 pending commands analyzed, then 5,000 pending
/// commands for `backlog`, whose lease `holder-q` holds. Returns their ids.
pub(crate) async fn backlog_after_analyze(pool: &PgPool) -> Vec<Uuid> {
    autovacuum_off(pool, &["commands", "command_queue"]).await;
    // What the last ANALYZE saw: many authorities with a few rows each.
    for i in 0..50 {
        insert_commands(pool, &format!("busy-{i}"), 4).await;
    }
    sqlx::query("analyze commands, command_queue")
        .execute(pool)
        .await
        .unwrap();
    let backlog = insert_commands(pool, "backlog", 5_000).await;
    db::authorities::acquire(pool, "backlog", "holder-q", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    backlog
}

/// A backlog that came after the last ANALYZE is, to its authority's
/// statistics, a handful of rows; the claim order and the key then cost
/// alike, and a delete naming the authority and `id = any(...)` took the
/// claim order with the ids as a filter: each claim read the authority's
/// whole queue (W3 with batch clients, 62,000 rows a claim). The claim and
/// the trigger path take their rows out of the queue by key (0035), with the
/// custodian's one plan for every authority and with a plan for these
/// statistics alike.
#[tokio::test]
async fn rows_leave_the_queue_by_their_key_whatever_the_authority_s_statistics() {
    if crate::harness::lacks!(
        local_tables,
        "on a distributed backend the queue is kept by the engine steps of 0033 and a row-level trigger"
    ) {
        return;
    }
    let pool = fresh_pool().await;
    let backlog = backlog_after_analyze(&pool).await;
    let limit = 128;
    // Beside the rows it takes, the claim reads the queue's head in claim
    // order: about twice the batch, not the 5,000 of the backlog.
    let bound = 4 * limit;
    for generic in [false, true] {
        let mut tx = pool.begin().await.unwrap();
        if generic {
            let (name, value) = db::txn::GENERIC_PLANS;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("set local {name} = {value}")))
                .execute(&mut *tx)
                .await
                .unwrap();
        }
        let before = queue_entries_read(&mut tx).await;
        let claimed =
            db::lifecycle::claim_start_authority(&mut *tx, None, "backlog", "holder-q", limit)
                .await
                .unwrap();
        let read = queue_entries_read(&mut tx).await - before;
        assert_eq!(claimed.len(), usize::try_from(limit).unwrap());
        assert!(
            read <= bound,
            "a claim of {limit} (generic plan: {generic}) read {read} queue entries"
        );
        tx.rollback().await.unwrap();
    }
    // A hand-typed update out of pending (a cancel of 100), through the
    // statement trigger.
    let mut tx = pool.begin().await.unwrap();
    let before = queue_entries_read(&mut tx).await;
    let cancelled = sqlx::query(
        "update commands set state = 'cancelled', finished_at = now() \
         where authority_id = 'backlog' and id = any($1)",
    )
    .bind(&backlog[..100])
    .execute(&mut *tx)
    .await
    .unwrap()
    .rows_affected();
    let read = queue_entries_read(&mut tx).await - before;
    assert_eq!(cancelled, 100);
    assert!(read <= bound, "a cancel of 100 read {read} queue entries");
    let left: i64 =
        sqlx::query_scalar("select count(*) from command_queue where authority_id = 'backlog'")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
    assert_eq!(left, 4_900);
    tx.rollback().await.unwrap();
}

/// Walks one command to each state by hand, under the v1 schema.
async fn populate_v1(pool: &PgPool) -> Vec<(Uuid, &'static str)> {
    let mut made = Vec::new();
    let paths: &[(&str, &[&str])] = &[
        ("pending", &[]),
        ("prepared", &["prepared"]),
        ("effect_started", &["prepared", "effect_started"]),
        ("applied", &["prepared", "effect_started", "applied"]),
        ("failed", &["prepared", "effect_started", "failed"]),
        ("ambiguous", &["prepared", "effect_started", "ambiguous"]),
        ("cancelled", &["cancelled"]),
        ("expired", &["prepared", "expired"]),
    ];
    for (state, path) in paths {
        for authority in ["payments", "steering"] {
            // A v1 principal of its own (fleets came with 0014).
            let principal: Uuid = sqlx::query_scalar(
                "insert into principals (id, name, role) \
                 values (gen_random_uuid(), 'v1-' || gen_random_uuid(), 'device') returning id",
            )
            .fetch_one(pool)
            .await
            .unwrap();
            let ids = insert_commands_of(pool, principal, authority, 3).await;
            for step in *path {
                update(pool, &ids, step).await;
            }
            made.extend(ids.into_iter().map(|id| (id, *state)));
        }
    }
    made
}

/// Everything a row and its history hold, as text, for comparison: the
/// columns `commands` had at v1 (later migrations may add columns).
async fn fingerprint(pool: &PgPool, columns: &[String]) -> (Vec<String>, Vec<String>) {
    let commands = sqlx::query_scalar(
        "select (select jsonb_object_agg(e.key, e.value) from jsonb_each(to_jsonb(c)) e \
                 where e.key = any($1))::text \
         from commands c order by id",
    )
    .bind(columns)
    .fetch_all(pool)
    .await
    .unwrap();
    // History's authority_id came later (0019, filled from the command),
    // and so did its place in the chain (0037); both are checked below. The
    // state an entry passed through came later still (0045), null on every
    // entry written before.
    let history = sqlx::query_scalar(
        "select (to_jsonb(h) - 'authority_id' - 'seq' - 'through')::text from command_history h order by id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    (commands, history)
}

async fn columns_of_commands(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "select column_name::text from information_schema.columns where table_name = 'commands'",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_populated_v1_database_migrates_to_v2_without_losing_a_row_or_an_entry() {
    let (_url, pool) = empty_database().await;
    let v1 = sqlx::migrate::Migrator::with_migrations(
        db::migrations::LEGACY_MIGRATOR
            .iter()
            .filter(|m| m.version <= 12)
            .cloned()
            .collect(),
    );
    v1.run(&pool).await.unwrap();
    let made = populate_v1(&pool).await;
    let v1_columns = columns_of_commands(&pool).await;
    let before = fingerprint(&pool, &v1_columns).await;
    assert_eq!(before.0.len(), 48);

    db::migrate(&pool).await.unwrap();
    assert!(db::migrations_current(&pool).await.unwrap());
    let after = fingerprint(&pool, &v1_columns).await;
    assert_eq!(before, after, "every row and every history entry as it was");
    let through: i64 =
        sqlx::query_scalar("select count(*) from command_history where through is not null")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        through, 0,
        "no entry written before 0045 names a state it passed through"
    );
    let misplaced: i64 = sqlx::query_scalar(
        "select count(*) from command_history h join commands c on c.id = h.command_id \
         where h.authority_id is distinct from c.authority_id",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(misplaced, 0, "each entry carries its command's authority");
    let out_of_place: i64 = sqlx::query_scalar(
        "select count(*) from (
             select seq, row_number() over (partition by command_id order by id) as n,
                    prev_hash is not distinct from lag(hash) over (partition by command_id order by id) as linked
             from command_history) e
         where e.seq <> e.n or not e.linked",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        out_of_place, 0,
        "each entry is numbered in its chain's order, which was its order by id on one node"
    );

    let of = |states: &[&str]| -> BTreeSet<Uuid> {
        made.iter()
            .filter(|(_, s)| states.contains(s))
            .map(|(id, _)| *id)
            .collect()
    };
    assert_eq!(ids_in(&pool, "command_queue").await, of(&["pending"]));
    assert_eq!(
        ids_in(&pool, "command_in_flight").await,
        of(&["prepared", "effect_started"])
    );
    assert_eq!(
        db::commands::count_unresolved_ambiguous(&pool)
            .await
            .unwrap(),
        6
    );

    // The chains still verify, and the migrated queue is claimable.
    let reports = db::verify::chains(&pool, None, None).await.unwrap();
    assert_eq!(reports.len(), 48);
    assert!(reports.iter().all(|r| r.breaks.is_empty()), "{reports:?}");
    db::authorities::acquire(&pool, "payments", "holder-v2", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let claimed = claim_start(&pool, "payments", "holder-v2", 100).await;
    assert_eq!(claimed.len(), 3, "the three pending payments");

    // Their chains, begun by v1's triggers (entry-v1, row-v1), go on with
    // today's steps: the claim's one entry (entry-v2) and the record's
    // (row-v2), and still verify.
    let generation = claimed[0].authority_generation.unwrap();
    let outcomes: Vec<_> = claimed
        .iter()
        .map(|r| {
            db::lifecycle::Outcome::new(r.id, EffectOutcome::Applied(json!({"refund_id": "rf_v2"})))
        })
        .collect();
    let recorded = db::lifecycle::record_outcomes(&pool, None, &outcomes, "payments", generation)
        .await
        .unwrap();
    assert_eq!(recorded.len(), 3);
    let ids: Vec<Uuid> = claimed.iter().map(|r| r.id).collect();
    let forms: Vec<(i64, bool)> = sqlx::query_as(
        "select count(*), through is not null from command_history where command_id = any($1) \
         group by through is not null order by 2",
    )
    .bind(&ids)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        forms,
        [(6, false), (3, true)],
        "v1's pending entries and today's records; today's claims"
    );
    let reports = db::verify::chains(&pool, None, None).await.unwrap();
    assert_eq!(reports.len(), 48);
    assert!(reports.iter().all(|r| r.breaks.is_empty()), "{reports:?}");
}

#[tokio::test]
async fn the_guard_s_compiled_rules_are_the_frozen_tables() {
    let pool = fresh_pool().await;
    let disagreements: Vec<(String, String)> = sqlx::query_as(
        "select f.state, t.state from command_states f cross join command_states t \
         where ledger_transition_allowed(f.state, t.state) \
               <> exists (select 1 from command_transitions x where x.from_state = f.state and x.to_state = t.state) \
         union all \
         select s.state, '' from command_states s where ledger_state_terminal(s.state) <> s.terminal",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(disagreements.is_empty(), "{disagreements:?}");
    let pairs: i64 = sqlx::query_scalar(
        "select count(*) from command_states f cross join command_states t \
         where ledger_transition_allowed(f.state, t.state)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(pairs, 9, "the nine edges of the state machine");
}

/// One statement that moves thousands of commands keeps its bookkeeping
/// (history entries, queue, in-flight table, notifications: the statement
/// trigger of `commands`) linear in their number, whatever the planner
/// believes. Before 0023 the trigger joined `old_rows` to `new_rows` with a
/// filter on each side; transition tables have no statistics, and with
/// `command_in_flight` analyzed while empty (it often is) the planner chose a
/// nested loop that rescans `new_rows` for every changed row: 5,000 rows to
/// `effect_started` took 13.5 s instead of a tenth of that (8,000 here: about
/// 35 s). The timeout is ten times what the linear form needs on a busy
/// 2-core machine.
#[tokio::test]
async fn a_statement_moving_thousands_of_commands_keeps_its_bookkeeping_linear() {
    if crate::harness::lacks!(
        local_tables,
        "row-level bookkeeping works one row at a time (0019)"
    ) {
        return;
    }
    let pool = fresh_pool().await;
    for table in ["command_in_flight", "command_queue"] {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "alter table {table} set (autovacuum_enabled = false)"
        )))
        .execute(&pool)
        .await
        .unwrap();
    }
    // The statistics that misled the planner: pages, and no live row.
    let first = insert_commands(&pool, "bulk", 1_000).await;
    for state in ["prepared", "effect_started", "applied"] {
        update(&pool, &first, state).await;
    }
    sqlx::query("analyze command_in_flight")
        .execute(&pool)
        .await
        .unwrap();
    let (pages, tuples): (i32, f32) = sqlx::query_as(
        "select relpages, reltuples from pg_class where relname = 'command_in_flight'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(pages > 0 && tuples == 0.0, "{pages} pages, {tuples} rows");

    let ids = insert_commands(&pool, "bulk", 8_000).await;
    let mut conn = pool.acquire().await.unwrap();
    sqlx::query("set statement_timeout = '10s'")
        .execute(&mut *conn)
        .await
        .unwrap();
    for state in ["prepared", "effect_started", "applied"] {
        sqlx::query("update commands set state = $2, authority_generation = 1 where id = any($1)")
            .bind(&ids)
            .bind(state)
            .execute(&mut *conn)
            .await
            .unwrap_or_else(|e| panic!("moving 8,000 commands to {state}: {e}"));
    }
    drop(conn);

    assert!(ids_in(&pool, "command_queue").await.is_empty());
    assert!(ids_in(&pool, "command_in_flight").await.is_empty());
    let entries: i64 =
        sqlx::query_scalar("select count(*) from command_history where command_id = any($1)")
            .bind(&ids)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(entries, 4 * 8_000);
    let reports = db::verify::chains(&pool, Some("bulk"), None).await.unwrap();
    assert_eq!(reports.len(), 9_000);
    assert!(reports.iter().all(|r| r.breaks.is_empty()));
}

/// The statement trigger looks each changed command's last history entry up
/// once, not once per place its hash is used. Before 0025 PostgreSQL
/// flattened the subquery that computes an entry's previous hash and row
/// digest into the select that uses each of them twice, and evaluated both
/// twice per entry: 100 scans of the history index for 50 rows. The row
/// digest (a JSON text of every column, then SHA-256) was computed twice
/// with it; it is an inlined SQL function, so the index scans are what can
/// be counted. The chains stay those verify recomputes.
#[tokio::test]
async fn a_transition_looks_up_each_commands_last_entry_once() {
    if crate::harness::lacks!(
        local_tables,
        "the row-level trigger looks the entry up once into a variable (0019)"
    ) {
        return;
    }
    let pool = fresh_pool().await;
    let ids = insert_commands(&pool, "payments", 50).await;
    let mut tx = pool.begin().await.unwrap();
    let counts = "select pg_stat_get_xact_numscans('command_history_chain_order'::regclass), \
                  pg_stat_get_xact_tuples_inserted('command_history'::regclass)";
    // PostgreSQL 15 keeps a backend's counts until it reports them, so the
    // transaction's own are the difference.
    let (scans_before, entries_before): (i64, i64) =
        sqlx::query_as(counts).fetch_one(&mut *tx).await.unwrap();
    sqlx::query(
        "update commands set state = 'prepared', authority_generation = 1 where id = any($1)",
    )
    .bind(&ids)
    .execute(&mut *tx)
    .await
    .unwrap();
    let (scans, entries): (i64, i64) = sqlx::query_as(counts).fetch_one(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    let (scans, entries) = (scans - scans_before, entries - entries_before);
    assert_eq!(entries, 50);
    assert_eq!(
        scans, 50,
        "one look-up of the previous entry per entry written"
    );
    let reports = db::verify::chains(&pool, Some("payments"), None)
        .await
        .unwrap();
    assert_eq!(reports.len(), 50);
    assert!(
        reports
            .iter()
            .all(|r| r.breaks.is_empty() && r.entries == 2)
    );
}

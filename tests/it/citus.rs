//! The ledger's rules hold whatever the layout: on one node, and on a Citus
//! cluster where `migrate` distributed the tables by authority (run with
//! `TEST_CITUS=1` and `TEST_DATABASE_URL` at a coordinator, e.g. the one
//! `scripts/citus-cluster up` prints). On Citus the commands' triggers run on
//! the workers, row by row (migration 0019): these tests type SQL by hand,
//! so they prove what the database enforces, not what the API asks of it.

use crate::harness::{citus, fresh_pool, ledger_backend};
use crate::telemetry::Captured;
use command_ledger::db::txn::{ACTOR, Isolation, Opening};
use command_ledger::telemetry::LogFormat;
use sqlx::{PgPool, Row as _};
use uuid::Uuid;

pub(crate) fn sqlstate(e: &sqlx::Error) -> String {
    e.as_database_error()
        .and_then(|d| d.code())
        .map(|c| c.into_owned())
        .unwrap_or_default()
}

/// Runs `sql` (one statement, `$1` = authority, `$2` = command id) as `actor`.
/// The actor travels in a transaction-local setting; `SET LOCAL` (unlike
/// `set_config`) reaches the workers when Citus propagates it.
async fn as_actor(
    pool: &PgPool,
    actor: &str,
    sql: &str,
    authority: &str,
    id: Uuid,
) -> Result<u64, sqlx::Error> {
    let mut tx = pool.begin().await?;
    if citus() {
        sqlx::query("set local citus.propagate_set_commands = 'local'")
            .execute(&mut *tx)
            .await?;
    }
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "set local command_ledger.actor = '{actor}'"
    )))
    .execute(&mut *tx)
    .await?;
    let done = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .bind(authority)
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(done.rows_affected())
}

/// A pending command of `authority`, inserted by hand.
async fn insert_command(pool: &PgPool, authority: &str, key: &str) -> Uuid {
    let id = Uuid::now_v7();
    as_actor(
        pool,
        "tester",
        &format!(
            "insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind, \
             authority_id, args, canonical) \
             values ($2, '00000000-0000-0000-0000-0000000000aa', '{key}', sha256('{key}'::bytea), 1, \
             'refund', $1, '{{}}', '{{}}')"
        ),
        authority,
        id,
    )
    .await
    .unwrap();
    id
}

async fn set_state(pool: &PgPool, authority: &str, id: Uuid, to: &str) -> Result<u64, sqlx::Error> {
    as_actor(
        pool,
        "tester",
        &format!(
            "update commands set state = '{to}', authority_generation = coalesce(authority_generation, 1) \
             where authority_id = $1 and id = $2"
        ),
        authority,
        id,
    )
    .await
}

#[tokio::test]
async fn on_citus_every_table_is_laid_out_as_ledger_distribution_says() {
    if ledger_backend().local_tables {
        eprintln!(
            "not run: the backend has local_tables (TEST_CITUS=1 is not set): nothing is distributed"
        );
        return;
    }
    let pool = fresh_pool().await;
    let rows = sqlx::query(
        "select d.table_name, d.method, p.partmethod::text as partmethod, p.repmodel::text as repmodel, \
                p.colocationid, \
                (select column_to_column_name(p.logicalrelid, p.partkey)) as column_name \
         from ledger_distribution d \
         left join pg_dist_partition p on p.logicalrelid = d.table_name::regclass \
         order by d.position",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(rows.len() >= 13, "every ledger table is listed");
    let mut groups = std::collections::BTreeSet::new();
    for row in &rows {
        let table: String = row.get("table_name");
        let method: String = row.get("method");
        let partmethod: Option<String> = row.get("partmethod");
        let repmodel: Option<String> = row.get("repmodel");
        if method == "reference" {
            assert_eq!(
                repmodel.as_deref(),
                Some("t"),
                "{table} is a reference table"
            );
        } else {
            assert_eq!(
                partmethod.as_deref(),
                Some("h"),
                "{table} is hash-distributed"
            );
            let column: Option<String> = row.get("column_name");
            let expected = match table.as_str() {
                "authorities" => "id",
                // The key rule across authorities (0020): by scope, alone.
                "command_keys" => "scope",
                _ => "authority_id",
            };
            assert_eq!(
                column.as_deref(),
                Some(expected),
                "{table} is distributed by {expected}"
            );
            if table != "command_keys" {
                groups.insert(row.get::<i32, _>("colocationid"));
            }
        }
    }
    assert_eq!(groups.len(), 1, "the per-authority tables are co-located");
    let again: i32 = sqlx::query_scalar("select ledger_distribute()")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(again, 0, "distributing again changes nothing");
}

#[tokio::test]
async fn history_queue_and_in_flight_follow_a_command_and_the_chain_holds_with_its_authority() {
    let pool = fresh_pool().await;
    let id = insert_command(&pool, "payments-eu", "k-chain").await;
    let queued: i64 = sqlx::query_scalar(
        "select count(*) from command_queue where authority_id = 'payments-eu' and id = $1",
    )
    .bind(id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(queued, 1, "a new command is queued");
    set_state(&pool, "payments-eu", id, "prepared")
        .await
        .unwrap();
    set_state(&pool, "payments-eu", id, "effect_started")
        .await
        .unwrap();
    let in_flight: i64 = sqlx::query_scalar(
        "select (select count(*) from command_in_flight where authority_id = 'payments-eu' and id = $1) \
              + (select count(*) from command_queue where authority_id = 'payments-eu' and id = $1)",
    )
    .bind(id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(in_flight, 1, "a started command is in flight, not queued");
    set_state(&pool, "payments-eu", id, "applied")
        .await
        .unwrap();

    let entries = sqlx::query(
        "select authority_id, from_state, to_state, actor, prev_hash, hash, \
                hash = ledger_entry_hash(prev_hash, command_id, from_state, to_state, at, actor, \
                                         authority_generation, reason, row_digest) as hash_ok \
         from command_history where authority_id = 'payments-eu' and command_id = $1 order by seq",
    )
    .bind(id)
    .fetch_all(&pool)
    .await
    .unwrap();
    let states: Vec<String> = entries.iter().map(|r| r.get("to_state")).collect();
    assert_eq!(states, ["pending", "prepared", "effect_started", "applied"]);
    let mut prev: Option<Vec<u8>> = None;
    for entry in &entries {
        assert_eq!(entry.get::<String, _>("authority_id"), "payments-eu");
        assert_eq!(
            entry.get::<String, _>("actor"),
            "tester",
            "the actor reaches the history"
        );
        assert!(
            entry.get::<bool, _>("hash_ok"),
            "each entry's hash is its own"
        );
        assert_eq!(
            entry.get::<Option<Vec<u8>>, _>("prev_hash"),
            prev,
            "the chain links"
        );
        prev = Some(entry.get("hash"));
    }
    let live: i64 = sqlx::query_scalar(
        "select (select count(*) from command_in_flight where authority_id = 'payments-eu') \
              + (select count(*) from command_queue where authority_id = 'payments-eu')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        live, 0,
        "a finished command is neither queued nor in flight"
    );
}

#[tokio::test]
async fn the_guard_and_the_refusals_hold_on_every_layout() {
    let pool = fresh_pool().await;
    let pending = insert_command(&pool, "payments-us", "k-guard-1").await;
    let done = insert_command(&pool, "payments-us", "k-guard-2").await;
    set_state(&pool, "payments-us", done, "cancelled")
        .await
        .unwrap();

    let err = set_state(&pool, "payments-us", pending, "applied")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "CL001", "an illegal transition: {err}");
    let err = set_state(&pool, "payments-us", done, "pending")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "CL002", "a terminal command: {err}");
    let err = as_actor(
        &pool,
        "tester",
        "delete from commands where authority_id = $1 and id = $2",
        "payments-us",
        done,
    )
    .await
    .unwrap_err();
    assert_eq!(sqlstate(&err), "CL002", "a delete outside pruning: {err}");
    let err = as_actor(
        &pool,
        "tester",
        "delete from command_history where authority_id = $1 and command_id = $2",
        "payments-us",
        done,
    )
    .await
    .unwrap_err();
    assert_eq!(sqlstate(&err), "CL003", "history is append-only: {err}");
    let err = as_actor(
        &pool,
        "tester",
        "update command_history set actor = 'forger' where authority_id = $1 and command_id = $2",
        "payments-us",
        done,
    )
    .await
    .unwrap_err();
    assert_eq!(sqlstate(&err), "CL003", "history is append-only: {err}");
    let err = as_actor(
        &pool,
        "tester",
        "insert into command_queue (authority_id, id) values ($1, $2)",
        "payments-us",
        Uuid::now_v7(),
    )
    .await
    .unwrap_err();
    assert_eq!(sqlstate(&err), "CL008", "the queue follows commands: {err}");
    sqlx::query("insert into authorities (id) values ('payments-us') on conflict do nothing")
        .execute(&pool)
        .await
        .unwrap();
    let err = as_actor(
        &pool,
        "tester",
        "delete from authorities where id = $1 and $2::uuid is not null",
        "payments-us",
        done,
    )
    .await
    .unwrap_err();
    assert_eq!(sqlstate(&err), "CL005", "authorities are kept: {err}");
    let err = sqlx::query("update command_states set terminal = terminal")
        .execute(&pool)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "CL004", "reference data is frozen: {err}");
}

/// The index entries of every placement of `command_queue` read so far, as
/// the workers' statistics count them, once they hold still: a worker's
/// backend reports what it read when it goes idle, at most once a second.
async fn queue_entries_read_on_placements(pool: &PgPool, at_least: i64) -> i64 {
    let read = || async {
        sqlx::query_scalar::<_, i64>(
            "select coalesce(sum(result::bigint), 0)::bigint from run_command_on_placements('command_queue', \
             $$select coalesce(sum(idx_tup_read), 0) from pg_stat_user_indexes where relid = '%s'::regclass$$)",
        )
        .fetch_one(pool)
        .await
        .unwrap()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut last = read().await;
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
        let now = read().await;
        if now == last && now >= at_least {
            return now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the workers' statistics did not settle ({last}, then {now}; at least {at_least} expected)"
        );
        last = now;
    }
}

/// A backlog that came after the last ANALYZE is, to its shard's
/// statistics, a handful of rows; a delete naming the authority and
/// `id = any(...)` then took the claim order with the ids as a filter and
/// read the authority's whole queue (0035 on one node). On Citus the claim
/// is 0033's step on the worker; since 0036 its delete is bounded by the
/// head's place in the claim order, for a waiting call's few rows and for
/// a batch.
#[tokio::test]
async fn on_citus_a_claim_reads_no_more_of_the_queue_than_its_head_whatever_the_shard_s_statistics()
{
    if !citus() {
        eprintln!(
            "not run: TEST_CITUS=1 is not set (one node: storage::rows_leave_the_queue_by_their_key_whatever_the_authority_s_statistics)"
        );
        return;
    }
    use command_ledger::db;
    let pool = fresh_pool().await;
    crate::storage::backlog_after_analyze(&pool).await;
    let mut before = queue_entries_read_on_placements(&pool, 0).await;
    let mut left = 5_000;
    // A waiting call's few rows (a statement a row), then a batch.
    for limit in [3_i64, 128] {
        let claimed =
            db::lifecycle::claim_start_authority(&pool, None, "backlog", "holder-q", limit)
                .await
                .unwrap();
        assert_eq!(claimed.len(), usize::try_from(limit).unwrap());
        left -= limit;
        // The claim reads the queue's head (its batch) and deletes each row
        // by key: about twice the batch, not the 5,000 of the backlog.
        let after = queue_entries_read_on_placements(&pool, before + limit).await;
        let read = after - before;
        assert!(
            read <= 4 * limit + 8,
            "a claim of {limit} read {read} queue entries on the workers"
        );
        before = after;
    }
    // Counted last: the count reads the queue too.
    let queued: i64 =
        sqlx::query_scalar("select count(*) from command_queue where authority_id = 'backlog'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(queued, left);
}

/// On Citus a custodian sends its engine steps (claim-and-start, record)
/// straight to the worker holding its authority's shards, not through the
/// coordinator (`db::placement`): that worker sees the custodian's own
/// sessions, the other worker none, the commands end as through the
/// coordinator, and the history names the custodian (its `SET LOCAL` acts
/// on the worker itself).
#[tokio::test]
async fn on_citus_a_custodian_s_steps_go_straight_to_the_worker_holding_its_authority() {
    if !citus() {
        eprintln!("not run: TEST_CITUS=1 is not set (one node has no workers)");
        return;
    }
    use command_ledger::custodian::{Effects, StepReport};
    use command_ledger::db::placement;
    let pool = fresh_pool().await;
    let app = format!("steps-{}", &Uuid::now_v7().simple().to_string()[20..]);
    let named = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect_lazy_with((*pool.connect_options()).clone().application_name(&app));
    let holder = placement::holder_of(&pool, "routed")
        .await
        .unwrap()
        .0
        .expect("a worker holds the authority's shards");
    let c = crate::harness::custodian(
        &named,
        &["routed"],
        Effects::default(),
        std::time::Duration::from_secs(10),
    );
    c.heartbeat().await.unwrap();
    let mut report = StepReport::default();
    // Two turns: a custodian's first claim also looks for stale prepared
    // rows (the trigger path); the second claims with the engine's step.
    for turn in 0..2 {
        let id = crate::storage::insert_commands(&pool, "routed", 1).await[0];
        let started = c.claim_and_start(10, &mut report).await.unwrap();
        assert_eq!(started.len(), 1, "turn {turn}");
        let done = c.execute(started).await;
        c.record_outcomes(done, &mut report).await;
        let state: String = sqlx::query_scalar(
            "select state from commands where authority_id = 'routed' and id = $1",
        )
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(state, "applied", "turn {turn}");
    }
    let sessions: Vec<(String, i32, String)> = sqlx::query_as(
        "select nodename::text, nodeport, result from run_command_on_workers(
             format($$select count(*) from pg_stat_activity where application_name = %L$$, $1::text))",
    )
    .bind(&app)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(sessions.len() >= 2, "two workers expected: {sessions:?}");
    for (host, port, result) in &sessions {
        let n: i64 = result.parse().expect("a count");
        if *host == holder.host && i64::from(*port) == i64::from(holder.port) {
            assert!(
                n >= 1,
                "the worker holding the shards ({holder}) has no session of the custodian's"
            );
        } else {
            assert_eq!(
                n, 0,
                "{host}:{port} does not hold the shards, yet has the custodian's sessions"
            );
        }
    }
    let actors: Vec<String> = sqlx::query_scalar(
        "select distinct actor from command_history where authority_id = 'routed' and from_state is not null",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(
        !actors.is_empty() && actors.iter().all(|a| a.starts_with("custodian:")),
        "the steps' entries name {actors:?}"
    );
    c.release_leases().await;
}

/// Every chain of `authority`'s commands holds (`verify`).
async fn chains_hold(pool: &PgPool, authority: &str) {
    let reports = command_ledger::db::verify::chains(pool, Some(authority), None)
        .await
        .unwrap();
    assert!(!reports.is_empty());
    for r in &reports {
        assert!(r.breaks.is_empty(), "{}: {:?}", r.command_id, r.breaks);
    }
}

/// On Citus each node holds copies of the engine steps that name the shards
/// of each group it hosts (migration 0039), and a custodian runs them on the
/// node holding its authority's shards: the route names the copy, the
/// node's function statistics count its calls, and the commands end as
/// through the steps as they are, their chains whole.
#[tokio::test]
async fn on_citus_a_custodian_runs_the_steps_copies_that_name_its_authority_s_shards() {
    if !citus() {
        eprintln!("not run: TEST_CITUS=1 is not set (one node has no shards)");
        return;
    }
    use command_ledger::custodian::{Effects, StepReport};
    use command_ledger::db::placement::{self, Placements};
    let pool = fresh_pool().await;
    let authority = "copied";
    // Function call counts on every node, for the sessions opened from now.
    sqlx::query(
        "select * from run_command_on_all_nodes(
             format('alter database %I set track_functions = ''pl''', current_database()))",
    )
    .execute(&pool)
    .await
    .unwrap();
    let (holder, shard) = placement::holder_of(&pool, authority).await.unwrap();
    let holder = holder.expect("a worker holds the authority's shards");
    let placements = Placements::new(pool.clone());
    let route = placements.route_for(authority).await;
    assert_eq!(route.copy, Some(shard), "the route names the copy");
    assert_eq!(route.pool.connect_options().get_port(), holder.port);

    let c = crate::harness::custodian(
        &pool,
        &[authority],
        Effects::default(),
        std::time::Duration::from_secs(10),
    );
    c.heartbeat().await.unwrap();
    let mut report = StepReport::default();
    let mut ids = Vec::new();
    // Two turns: a custodian's first claim also looks for stale prepared
    // rows (the trigger path); the second claims with the engine's step.
    for turn in 0..2 {
        let id = crate::storage::insert_commands(&pool, authority, 1).await[0];
        let started = c.claim_and_start(10, &mut report).await.unwrap();
        assert_eq!(started.len(), 1, "turn {turn}");
        let done = c.execute(started).await;
        c.record_outcomes(done, &mut report).await;
        ids.push(id);
    }
    c.release_leases().await;
    for id in &ids {
        let states: Vec<String> = sqlx::query_scalar(
            "select coalesce(through || '>', '') || to_state from command_history \
             where authority_id = $1 and command_id = $2 order by seq",
        )
        .bind(authority)
        .bind(id)
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(states, ["pending", "prepared>effect_started", "applied"]);
    }
    chains_hold(&pool, authority).await;

    let node = placements
        .pool_to(&holder)
        .await
        .expect("the worker answers");
    let calls = || async {
        sqlx::query_as::<_, (i64, i64)>(
            "select coalesce(sum(calls) filter (where funcname = $1), 0)::bigint,
                    coalesce(sum(calls) filter (where funcname = $2), 0)::bigint
             from pg_stat_user_functions",
        )
        .bind(format!("ledger_claim_start_authority_s{shard}"))
        .bind(format!("ledger_record_outcomes_s{shard}"))
        .fetch_one(&node)
        .await
        .unwrap()
    };
    // A backend reports its counts when it goes idle, at most once a second.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (claims, records) = calls().await;
        if claims >= 1 && records >= 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the copies of shard {shard} ran {claims} claims and {records} records on {holder}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    placements.close().await;
}

/// A copy of a step that names shards refuses an authority of another
/// shard; it holds its shard group's metadata lock (which a move takes in
/// exclusive mode before it switches the group over) from its first
/// statement; after its group moved away it changes nothing where it was
/// left; and migrating again makes the copies where the shards are, through
/// which a custodian finishes the command.
#[tokio::test]
async fn on_citus_a_step_copy_serves_only_its_own_shards_where_they_are() {
    if !citus() {
        eprintln!("not run: TEST_CITUS=1 is not set (one node has no shards)");
        return;
    }
    use command_ledger::custodian::Effects;
    use command_ledger::db::placement::{self, Placements};
    let pool = fresh_pool().await;
    let authority = "guarded";
    let (holder, shard) = placement::holder_of(&pool, authority).await.unwrap();
    let holder = holder.expect("a worker holds the authority's shards");
    let mut other = String::new();
    for i in 0.. {
        other = format!("elsewhere-{i}");
        if placement::holder_of(&pool, &other).await.unwrap().1 != shard {
            break;
        }
    }
    let placements = Placements::new(pool.clone());
    let node = placements
        .pool_to(&holder)
        .await
        .expect("the worker answers");
    let id = crate::storage::insert_commands(&pool, authority, 1).await[0];
    let lease = command_ledger::db::authorities::acquire(
        &pool,
        authority,
        "holder-g",
        std::time::Duration::from_secs(60),
    )
    .await
    .unwrap()
    .expect("the lease");
    let state = || async {
        sqlx::query_scalar::<_, String>(
            "select state from commands where authority_id = $1 and id = $2",
        )
        .bind(authority)
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    // A claim by the copy on the node, acting as a tester, rolled back.
    let claim_on = |node: PgPool, authority: String, holder: &'static str| async move {
        let mut tx = node.begin().await.unwrap();
        sqlx::query("set local command_ledger.actor = 'tester'")
            .execute(&mut *tx)
            .await
            .unwrap();
        let locks = "select count(*) from pg_locks where pid = pg_backend_pid() \
                     and locktype = 'advisory' and objsubid = 8 and mode = 'ShareLock' and granted";
        let before: i64 = sqlx::query_scalar(locks).fetch_one(&mut *tx).await.unwrap();
        let ran = sqlx::query(sqlx::AssertSqlSafe(format!(
            "select ledger_claim_start_authority_s{shard}($1, $2, 10)"
        )))
        .bind(&authority)
        .bind(holder)
        .execute(&mut *tx)
        .await;
        let held = match ran {
            Ok(_) => Ok(sqlx::query_scalar::<_, i64>(locks)
                .fetch_one(&mut *tx)
                .await
                .unwrap()
                - before),
            Err(e) => Err(e),
        };
        tx.rollback().await.unwrap();
        held
    };

    // Another shard's authority: refused before anything is read.
    let err = claim_on(node.clone(), other.clone(), "holder-g")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "CL015", "{err}");
    // Its own (a holder without the lease: nothing claimed): the group's
    // metadata lock is held.
    let held = claim_on(node.clone(), authority.to_owned(), "nobody")
        .await
        .unwrap();
    assert!(held >= 1, "the copy holds no shard metadata lock");
    assert_eq!(state().await, "pending");

    // The group moves to the other worker; the copy left behind refuses
    // (the old shard tables are still there, to be dropped later).
    let workers: Vec<(String, i32)> = sqlx::query_as(
        "select nodename::text, nodeport from pg_dist_node
         where noderole = 'primary' and shouldhaveshards and groupid > 0 and nodeport <> $1 order by groupid",
    )
    .bind(i32::from(holder.port))
    .fetch_all(&pool)
    .await
    .unwrap();
    move_authority_to(&pool, authority, &workers[0]).await;
    let left_behind = claim_on(node.clone(), authority.to_owned(), "holder-g").await;
    assert!(
        left_behind.is_err(),
        "a copy ran where its shards were: {left_behind:?}"
    );
    assert_eq!(state().await, "pending");

    // Migrating again (as every process does when it starts) finds the
    // copies not current: they follow the shards, and a custodian uses them.
    command_ledger::db::migrate(&pool).await.unwrap();
    assert!(!placement::copies_current(&node, shard).await.unwrap());
    let fresh = Placements::new(pool.clone());
    let route = fresh.route_for(authority).await;
    assert_eq!(route.copy, Some(shard));
    assert_eq!(
        i32::from(route.pool.connect_options().get_port()),
        workers[0].1
    );
    fresh.close().await;
    placements.close().await;
    command_ledger::db::authorities::release(&pool, authority, "holder-g", lease.generation)
        .await
        .unwrap();
    let c = crate::harness::custodian(
        &pool,
        &[authority],
        Effects::default(),
        std::time::Duration::from_secs(10),
    );
    c.heartbeat().await.unwrap();
    crate::harness::claim_execute_record(&c, 3).await;
    c.release_leases().await;
    assert_eq!(state().await, "applied");
    chains_hold(&pool, authority).await;
}

/// Moves the shard group holding `authority`'s rows onto the worker `to`
/// (host, port), writes blocked meanwhile; a no-op when it is there already.
async fn move_authority_to(pool: &PgPool, authority: &str, to: &(String, i32)) {
    let (shard, host, port): (i64, String, i32) = sqlx::query_as(
        "select s.shardid, n.nodename::text, n.nodeport
         from pg_dist_placement s join pg_dist_node n using (groupid)
         where s.shardid = get_shard_id_for_distribution_column('commands', $1::text)",
    )
    .bind(authority)
    .fetch_one(pool)
    .await
    .unwrap();
    if (&host, port) == (&to.0, to.1) {
        return;
    }
    sqlx::query(
        "select citus_move_shard_placement($1, $2, $3, $4, $5, shard_transfer_mode := 'block_writes')",
    )
    .bind(shard)
    .bind(&host)
    .bind(port)
    .bind(&to.0)
    .bind(to.1)
    .execute(pool)
    .await
    .unwrap();
}

/// On Citus each node draws history ids from a range of its own (its group
/// in the high bits), so a shard group moved onto a node of a lower group
/// goes on with lower ids than its commands' earlier entries. Their chains
/// go on all the same: the triggers' path and the engine's steps both chain
/// each entry to the last one in chain order, and `verify` finds no break.
/// With the previous entry found by the highest id (before migration 0037)
/// the second transition after the move chained to an entry before the
/// first, and `verify` named four breaks for the trigger's command.
#[tokio::test]
async fn on_citus_a_command_s_chain_holds_across_a_move_onto_a_node_of_a_lower_group() {
    if !citus() {
        eprintln!(
            "not run: TEST_CITUS=1 is not set (one node has one range of ids: verify::a_chain_cannot_fork)"
        );
        return;
    }
    use command_ledger::custodian::{Effects, StepReport};
    let pool = fresh_pool().await;
    let workers: Vec<(String, i32)> = sqlx::query_as(
        "select nodename::text, nodeport from pg_dist_node
         where noderole = 'primary' and shouldhaveshards and groupid > 0 order by groupid",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(workers.len() >= 2, "two workers expected: {workers:?}");
    let (lowest, highest) = (&workers[0], &workers[workers.len() - 1]);
    let authority = "moved";
    move_authority_to(&pool, authority, highest).await;

    // The custodian holds the lease first: taking it adopts prepared rows,
    // and the command moved by hand is to be left to the hand.
    let c = crate::harness::custodian(
        &pool,
        &[authority],
        Effects::default(),
        std::time::Duration::from_secs(10),
    );
    c.heartbeat().await.unwrap();
    let mut report = StepReport::default();
    // One command along the triggers' path, one along the engine's steps,
    // each with part of its history written on the highest group.
    let by_hand = insert_command(&pool, authority, "k-moved").await;
    set_state(&pool, authority, by_hand, "prepared")
        .await
        .unwrap();
    let by_engine = crate::storage::insert_commands(&pool, authority, 1).await[0];

    move_authority_to(&pool, authority, lowest).await;
    set_state(&pool, authority, by_hand, "effect_started")
        .await
        .unwrap();
    set_state(&pool, authority, by_hand, "applied")
        .await
        .unwrap();
    let mut started = Vec::new();
    for _ in 0..3 {
        started.extend(c.claim_and_start(10, &mut report).await.unwrap());
        if started.iter().any(|s| s.call.command_id == by_engine) {
            break;
        }
    }
    assert!(
        started.iter().any(|s| s.call.command_id == by_engine),
        "the engine's command is claimed after the move"
    );
    let done = c.execute(started).await;
    c.record_outcomes(done, &mut report).await;
    c.release_leases().await;

    for id in [by_hand, by_engine] {
        let entries = sqlx::query(
            "select id, seq, coalesce(through || '>', '') || to_state as to_state, prev_hash, hash
             from command_history where authority_id = $1 and command_id = $2 order by seq",
        )
        .bind(authority)
        .bind(id)
        .fetch_all(&pool)
        .await
        .unwrap();
        let states: Vec<String> = entries.iter().map(|r| r.get("to_state")).collect();
        // The hand's updates write an entry each; the engine's claim one
        // for pending -> prepared -> effect_started (0045).
        let path: &[&str] = if id == by_hand {
            &["pending", "prepared", "effect_started", "applied"]
        } else {
            &["pending", "prepared>effect_started", "applied"]
        };
        assert_eq!(states, path, "{id}");
        let ids: Vec<i64> = entries.iter().map(|r| r.get("id")).collect();
        assert!(
            ids[ids.len() - 1] < ids[0],
            "{id}: the last entry was written on the lower group, with a lower id: {ids:?}"
        );
        let mut prev: Option<Vec<u8>> = None;
        for (n, entry) in (1..).zip(&entries) {
            assert_eq!(entry.get::<i32, _>("seq"), n, "{id}");
            assert_eq!(
                entry.get::<Option<Vec<u8>>, _>("prev_hash"),
                prev,
                "{id}: entry {n} chains to the one before it"
            );
            prev = Some(entry.get("hash"));
        }
    }
    let reports = command_ledger::db::verify::chains(&pool, Some(authority), None)
        .await
        .unwrap();
    assert_eq!(reports.len(), 2);
    for r in &reports {
        assert!(r.breaks.is_empty(), "{}: {:?}", r.command_id, r.breaks);
    }
}

/// A node this process cannot reach (a network that lets it reach only the
/// coordinator) is left aside: asked for, it gives no pool within the
/// patience, and asked again at once it is not tried again; a node it
/// reaches gives a pool that answers. Off Citus an authority's steps stay
/// on the coordinator's pool.
#[tokio::test]
async fn a_node_this_process_cannot_reach_leaves_the_steps_on_the_coordinator() {
    use command_ledger::db::placement::{CONNECT_PATIENCE, Node, Placements};
    use std::time::{Duration, Instant};
    let pool = fresh_pool().await;
    let placements = Placements::new(pool.clone());
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let nowhere = Node {
        host: "127.0.0.1".into(),
        port: closed,
    };
    let began = Instant::now();
    assert!(placements.pool_to(&nowhere).await.is_none());
    assert!(began.elapsed() < CONNECT_PATIENCE + Duration::from_secs(1));
    let again = Instant::now();
    assert!(placements.pool_to(&nowhere).await.is_none());
    assert!(
        again.elapsed() < Duration::from_millis(200),
        "an unreachable node was tried again at once"
    );
    let options = pool.connect_options();
    let here = Node {
        host: options.get_host().to_owned(),
        port: options.get_port(),
    };
    let reached = placements
        .pool_to(&here)
        .await
        .expect("the coordinator's own address answers");
    let one: i32 = sqlx::query_scalar("select 1")
        .fetch_one(&reached)
        .await
        .unwrap();
    assert_eq!(one, 1);
    let steps = placements.route_for("anywhere").await.pool;
    if citus() {
        let (holder, _) = command_ledger::db::placement::holder_of(&pool, "anywhere")
            .await
            .unwrap();
        let port = holder.map_or(options.get_port(), |node| node.port);
        assert_eq!(steps.connect_options().get_port(), port);
    } else {
        assert_eq!(steps.connect_options().get_port(), options.get_port());
    }
    placements.close().await;
}

/// Moves pending command `id` of `authority` to prepared in a transaction
/// opened by `opening`, after a read of every shard (on Citus: every
/// worker), the way the service opens its transactions.
async fn prepare_in(pool: &PgPool, opening: &Opening, authority: &str, id: Uuid) {
    let mut tx = opening.on(pool).await.unwrap();
    sqlx::query("select count(*) from commands")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    sqlx::query(
        "update commands set state = 'prepared', authority_generation = 1 \
         where authority_id = $1 and id = $2",
    )
    .bind(authority)
    .bind(id)
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
}

/// Who the history says moved `id` to prepared.
async fn preparer(pool: &PgPool, authority: &str, id: Uuid) -> String {
    sqlx::query_scalar(
        "select actor from command_history \
         where authority_id = $1 and command_id = $2 and to_state = 'prepared'",
    )
    .bind(authority)
    .bind(id)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Every transaction of the service opens acting for someone
/// (`db::txn::Opening`). Citus sends a `SET`'s whole message again to each
/// worker a transaction reaches, so `BEGIN` and the `SET LOCAL`s in one
/// message made every worker a transaction touched receive that `BEGIN`
/// inside its own transaction, warn "there is already a transaction in
/// progress", log it, and send it to the service, which logged it too: two
/// of each for every submission. There the `SET LOCAL`s go in a message of
/// their own; no worker warns, and the actor still reaches the shards'
/// triggers. One node keeps the one message.
#[tokio::test]
async fn a_transaction_opens_acting_for_someone_and_no_worker_warns() {
    const WARNING: &str = "there is already a transaction in progress";
    let logs = Captured::default();
    let _logging = tracing::dispatcher::set_default(&logs.subscriber(LogFormat::Text));
    let pool = fresh_pool().await;
    let warnings = || logs.lines().iter().filter(|l| l.contains(WARNING)).count();

    let id = insert_command(&pool, "opening", "as-the-service-opens").await;
    let opening = Opening::new(
        ledger_backend(),
        Isolation::ReadCommitted,
        &[(ACTOR, "opener")],
    );
    prepare_in(&pool, &opening, "opening", id).await;
    assert_eq!(preparer(&pool, "opening", id).await, "opener");
    assert_eq!(warnings(), 0, "{:?}", logs.lines());

    if citus() {
        // The one message, on Citus: each worker reached warns.
        let backend = command_ledger::db::Backend {
            set_local_in_begin: true,
            ..ledger_backend()
        };
        let id = insert_command(&pool, "opening", "in-one-message").await;
        let opening = Opening::new(backend, Isolation::ReadCommitted, &[(ACTOR, "opener")]);
        prepare_in(&pool, &opening, "opening", id).await;
        assert_eq!(preparer(&pool, "opening", id).await, "opener");
        assert!(warnings() > 0, "{:?}", logs.lines());
    }
}

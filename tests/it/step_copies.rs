//! On Citus the engine steps' copies that name a shard group's tables
//! (migration 0039) run only while they are current: each what its step
//! makes of it today, on the node holding the group. A step changed, a
//! group split or moved leaves them stale or missing; a custodian then runs
//! the steps as they are, says so (an error log each time its route is
//! asked, and the `ledger_step_copies_not_current` gauge), and the commands
//! still end; the next `migrate` makes the copies again. The maker raises
//! (`CL016`) where a step's text does not fit how a copy is made.

use crate::citus::sqlstate;
use crate::harness::{citus, fresh_pool};
use command_ledger::custodian::Effects;
use command_ledger::db::placement::{self, Placements};
use sqlx::PgPool;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Where a custodian's steps for `authority` would run now, asked afresh:
/// the copy's shard (or `None`: the steps as they are), and the gauge.
async fn route_now(pool: &PgPool, authority: &str) -> (Option<i64>, u64) {
    let gauge = Arc::new(AtomicU64::new(0));
    let placements = Placements::counting_stale_copies(pool.clone(), Arc::clone(&gauge));
    let route = placements.route_for(authority).await;
    placements.close().await;
    (route.copy, gauge.load(Ordering::Relaxed))
}

/// A command of `authority` inserted and driven to its end by a custodian.
async fn one_command_ends(pool: &PgPool, authority: &str) {
    let id = crate::storage::insert_commands(pool, authority, 1).await[0];
    let c = crate::harness::custodian(
        pool,
        &[authority],
        Effects::default(),
        Duration::from_secs(10),
    );
    c.heartbeat().await.unwrap();
    crate::harness::claim_execute_record(&c, 5).await;
    c.release_leases().await;
    let state: String =
        sqlx::query_scalar("select state from commands where authority_id = $1 and id = $2")
            .bind(authority)
            .bind(id)
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(state, "applied");
}

/// Whether every node says its copies are current.
async fn every_node_current(pool: &PgPool) -> bool {
    let answers: Vec<(bool, String)> = sqlx::query_as(
        "select success, result from run_command_on_all_nodes('select ledger_shard_steps_current()')",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(answers.iter().all(|(ok, _)| *ok), "{answers:?}");
    answers.iter().all(|(_, result)| result == "t")
}

/// A step changed (here by hand, as an upgrade's file would): the copies
/// made from its earlier text still exist but are not current, so the
/// custodian runs the step as it is now; `migrate` makes them from it.
/// With currency judged by the copies' existence alone (as before) the
/// route named the stale copy.
#[tokio::test]
async fn a_copy_made_from_an_earlier_text_of_its_step_is_not_run() {
    if !citus() {
        eprintln!("not run: TEST_CITUS=1 is not set (one node has no copies)");
        return;
    }
    let pool = fresh_pool().await;
    let authority = "restepped";
    let (_, shard) = placement::holder_of(&pool, authority).await.unwrap();
    assert_eq!(route_now(&pool, authority).await, (Some(shard), 0));
    assert!(every_node_current(&pool).await);

    // The record step gains a line; Citus propagates the new text to every
    // node, the copies keep the old one.
    let def: String =
        sqlx::query_scalar("select pg_get_functiondef('ledger_record_outcomes'::regproc)")
            .fetch_one(&pool)
            .await
            .unwrap();
    let changed = def.replacen(
        "declare\n",
        "declare\n            -- changed after the copies were made\n",
        1,
    );
    assert_ne!(changed, def);
    sqlx::raw_sql(sqlx::AssertSqlSafe(changed))
        .execute(&pool)
        .await
        .unwrap();
    assert!(!every_node_current(&pool).await);
    assert_eq!(
        route_now(&pool, authority).await,
        (None, 1),
        "the stale copy is not run, and the gauge counts the authority"
    );
    one_command_ends(&pool, authority).await;

    command_ledger::db::migrate(&pool).await.unwrap();
    assert!(every_node_current(&pool).await);
    assert_eq!(route_now(&pool, authority).await, (Some(shard), 0));
    let copy: String = sqlx::query_scalar(
        "select result from run_command_on_all_nodes(
             format('select count(*) from pg_proc where proname = %L and prosrc like %L',
                    'ledger_record_outcomes_s' || $1, '%changed after the copies were made%'))
         where result <> '0'",
    )
    .bind(shard)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(copy, "1", "the copy made again holds the step's new text");
    one_command_ends(&pool, authority).await;
}

/// A split gives the authority's rows a new shard group, which has no
/// copies until `migrate` makes them; the old group's copies are left
/// behind. The custodian runs the steps as they are meanwhile.
#[tokio::test]
async fn after_a_split_the_new_group_runs_the_steps_as_they_are_until_migrate() {
    if !citus() {
        eprintln!("not run: TEST_CITUS=1 is not set (one node has no shards)");
        return;
    }
    let pool = fresh_pool().await;
    let authority = "split";
    let (_, shard) = placement::holder_of(&pool, authority).await.unwrap();
    assert_eq!(route_now(&pool, authority).await, (Some(shard), 0));
    let (lo, hi, node): (String, String, i32) = sqlx::query_as(
        "select s.shardminvalue, s.shardmaxvalue, n.nodeid
         from pg_dist_shard s join pg_dist_placement p using (shardid) join pg_dist_node n using (groupid)
         where s.shardid = $1",
    )
    .bind(shard)
    .fetch_one(&pool)
    .await
    .unwrap();
    let mid = (lo.parse::<i64>().unwrap() + hi.parse::<i64>().unwrap()) / 2;
    sqlx::query(
        "select citus_split_shard_by_split_points($1, array[$2::text], array[$3, $3]::int[], 'block_writes')",
    )
    .bind(shard)
    .bind(mid.to_string())
    .bind(node)
    .execute(&pool)
    .await
    .unwrap();
    let (_, split) = placement::holder_of(&pool, authority).await.unwrap();
    assert_ne!(split, shard, "the authority's rows are in a new group");
    assert!(!every_node_current(&pool).await);
    assert_eq!(route_now(&pool, authority).await, (None, 1));
    one_command_ends(&pool, authority).await;

    command_ledger::db::migrate(&pool).await.unwrap();
    assert!(every_node_current(&pool).await);
    assert_eq!(route_now(&pool, authority).await, (Some(split), 0));
    one_command_ends(&pool, authority).await;
}

/// A move takes the group to another node, which has no copies for it
/// until `migrate` makes them (the old node's copies refuse to run there:
/// `citus::on_citus_a_step_copy_serves_only_its_own_shards_where_they_are`).
#[tokio::test]
async fn after_a_move_the_group_runs_the_steps_as_they_are_until_migrate() {
    if !citus() {
        eprintln!("not run: TEST_CITUS=1 is not set (one node has no shards)");
        return;
    }
    let pool = fresh_pool().await;
    let authority = "moved";
    let (holder, shard) = placement::holder_of(&pool, authority).await.unwrap();
    let holder = holder.expect("a worker holds the authority's shards");
    assert_eq!(route_now(&pool, authority).await, (Some(shard), 0));
    let (host, port): (String, i32) = sqlx::query_as(
        "select nodename::text, nodeport from pg_dist_node
         where noderole = 'primary' and shouldhaveshards and groupid > 0 and nodeport <> $1
         order by groupid limit 1",
    )
    .bind(i32::from(holder.port))
    .fetch_one(&pool)
    .await
    .unwrap();
    sqlx::query(
        "select citus_move_shard_placement($1, $2, $3, $4, $5, shard_transfer_mode := 'block_writes')",
    )
    .bind(shard)
    .bind(&holder.host)
    .bind(i32::from(holder.port))
    .bind(&host)
    .bind(port)
    .execute(&pool)
    .await
    .unwrap();
    assert!(!every_node_current(&pool).await);
    assert_eq!(route_now(&pool, authority).await, (None, 1));
    one_command_ends(&pool, authority).await;

    command_ledger::db::migrate(&pool).await.unwrap();
    assert!(every_node_current(&pool).await);
    assert_eq!(route_now(&pool, authority).await, (Some(shard), 0));
    one_command_ends(&pool, authority).await;
}

/// The copy's maker applies each substitution as the copy needs or raises
/// `CL016`, naming what did not fit; the steps as they are today fit.
#[tokio::test]
async fn a_step_text_the_copies_cannot_be_made_from_is_refused() {
    if !citus() {
        eprintln!("not run: TEST_CITUS=1 is not set (one node has no copies)");
        return;
    }
    let pool = fresh_pool().await;
    let shards: serde_json::Value = serde_json::json!({
        "commands": "commands_9", "command_history": "command_history_9",
        "command_queue": "command_queue_9", "command_in_flight": "command_in_flight_9",
        "ledger_counts_by_authority": "ledger_counts_by_authority_9", "authorities": "authorities_9",
    });
    let make = |def: String, step: &'static str| {
        let pool = pool.clone();
        let shards = shards.clone();
        async move {
            sqlx::query_scalar::<_, String>(
                "select ledger_shard_step_copy($1, $2, 9, -100, 100, $3, 1)",
            )
            .bind(def)
            .bind(step)
            .bind(shards)
            .fetch_one(&pool)
            .await
        }
    };
    let def_of = async |step: &str| -> String {
        sqlx::query_scalar("select pg_get_functiondef(to_regproc($1))")
            .bind(step)
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    for step in ["ledger_claim_start_authority", "ledger_record_outcomes"] {
        let def = def_of(step).await;
        let copy = make(def.clone(), step).await.unwrap();
        assert!(copy.contains(&format!("FUNCTION public.{step}_s9(")));
        assert!(copy.contains("is not in shard 9"), "the guard");
        assert!(copy.contains("insert into command_history_9 (id, authority_id,"));
        assert!(!copy.contains(" commands c"), "every table by its shard");

        let refused = [
            ("no body", def.replace("\nAS $function$", "\nAS $body$")),
            (
                "a head naming another function",
                def.replacen(
                    &format!("FUNCTION public.{step}("),
                    "FUNCTION public.other(",
                    1,
                ),
            ),
            (
                "no line to open the guard after",
                def.replace("begin\n", "begin -- here\n"),
            ),
            (
                "an insert into the history in another form",
                def.replacen(
                    "insert into command_history (authority_id,",
                    "insert  into command_history (authority_id,",
                    1,
                ),
            ),
            (
                "a table of the group the copies do not name",
                def.replacen(
                    "declare\n",
                    "declare\n    seen bigint := (select count(*) from coalesced_requests);\n",
                    1,
                ),
            ),
        ];
        for (what, text) in refused {
            assert_ne!(text, def, "{step}: {what}: the text is changed");
            let err = make(text, step).await.expect_err(what);
            assert_eq!(sqlstate(&err), "CL016", "{step}: {what}: {err}");
        }
    }
}

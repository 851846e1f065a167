//! The custodian's steps read the queue and the in-flight table by key and
//! in claim order, never by a bitmap scan of an authority's range. Both
//! tables churn (a row lives from submit to claim, or from claim to
//! outcome), so what the planner believes of them is rarely what they hold:
//! never analyzed, a table of 300,000 queued rows looked like 4 rows an
//! authority. For so few rows a bitmap scan of the authority's whole range
//! costs as little as a probe by key, and it is what the steps took: each
//! claim read the authority's whole queue and sorted it, each record step
//! its whole range of the in-flight index. A bitmap scan also never marks
//! the dead entries it passes, so the range only grew: a burn-down after a
//! burst of batch submits drained at half its speed
//! (`docs/runs/bitmap-scans-after-w7.txt`).

use crate::harness::{fresh_pool, ledger_backend};
use command_ledger::db;
use command_ledger::db::txn::{Isolation, Opening};
use command_ledger::domain::EffectOutcome;
use serde_json::json;
use sqlx::PgPool;
use std::time::Duration;

/// 5,000 pending commands for `backlog`, whose lease `holder-p` holds, in
/// tables nothing has analyzed (autovacuum is off for them). Returns the
/// lease's generation.
async fn backlog_never_analyzed(pool: &PgPool) -> i64 {
    crate::storage::autovacuum_off(pool, &["commands", "command_queue", "command_in_flight"]).await;
    crate::storage::insert_commands(pool, "backlog", 5_000).await;
    db::authorities::acquire(pool, "backlog", "holder-p", Duration::from_secs(120))
        .await
        .unwrap()
        .unwrap()
        .generation
}

/// Index entries of `index` this transaction has read so far.
async fn entries_read(tx: &mut sqlx::PgConnection, index: &str) -> i64 {
    sqlx::query_scalar("select pg_stat_get_xact_tuples_returned($1::regclass)")
        .bind(index)
        .fetch_one(tx)
        .await
        .unwrap()
}

/// A transaction opened as the custodian opens its own: at `isolation`,
/// acting as `holder-p`, with its generic plans.
async fn as_custodian(
    pool: &PgPool,
    isolation: Isolation,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    Opening::new(
        ledger_backend(),
        isolation,
        &[
            (db::txn::ACTOR, "custodian:holder-p"),
            db::txn::GENERIC_PLANS,
        ],
    )
    .on(pool)
    .await
    .unwrap()
}

/// The custodian's turns on one node (claim a batch, record its outcomes)
/// through a backlog: the record step's reads of the in-flight index stay
/// near one entry a command instead of growing with every turn before.
#[tokio::test]
async fn the_record_step_reads_the_in_flight_table_by_key_turn_after_turn() {
    if crate::harness::lacks!(
        local_tables,
        "on a distributed backend the steps run on the worker holding the authority's shards \
         (the next test checks their settings there)"
    ) {
        return;
    }
    let pool = fresh_pool().await;
    let generation = backlog_never_analyzed(&pool).await;
    let (limit, turns) = (128, 39);
    let authorities = ["backlog".to_owned()];
    let (mut read, mut moved) = (0, 0);
    for _ in 0..turns {
        // The claim at the custodian's isolation, the record at SERIALIZABLE.
        let mut tx = as_custodian(&pool, Isolation::ReadCommitted).await;
        let rows = db::lifecycle::claim_start(&mut *tx, &authorities, "holder-p", limit)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(rows.len(), usize::try_from(limit).unwrap());
        let outcomes: Vec<_> = rows
            .iter()
            .map(|r| db::lifecycle::Outcome::new(r.id, EffectOutcome::Applied(json!({}))))
            .collect();
        let mut tx = as_custodian(&pool, Isolation::Serializable).await;
        let before = entries_read(&mut tx, "command_in_flight_pkey").await;
        let recorded =
            db::lifecycle::record_outcomes(&mut *tx, None, &outcomes, "backlog", generation)
                .await
                .unwrap();
        read += entries_read(&mut tx, "command_in_flight_pkey").await - before;
        tx.commit().await.unwrap();
        assert_eq!(recorded.len(), rows.len());
        moved += limit;
    }
    // A bitmap scan of the range reads every entry any turn left: 128 the
    // first turn, 39 * 128 the last, 20 times the commands moved in all.
    assert!(
        read <= 8 * moved,
        "recording {moved} outcomes in turns of {limit} read {read} in-flight index entries"
    );
}

/// Each engine step that reads the queue or the in-flight table is
/// configured without bitmap scans, on one node and on Citus (where the
/// claim is `ledger_claim_start_authority` and the per-shard copies carry
/// their step's settings).
#[tokio::test]
async fn the_steps_that_read_the_queue_and_the_in_flight_table_take_no_bitmap_scan() {
    let pool = fresh_pool().await;
    let steps: Vec<(String, Option<Vec<String>>)> = sqlx::query_as(
        "select p.proname::text, p.proconfig from pg_proc p \
         where p.pronamespace = 'public'::regnamespace \
           and p.proname in ('ledger_claim_start', 'ledger_claim_start_authority', \
                             'ledger_record_outcomes') \
           and p.prolang = (select oid from pg_language where lanname = 'plpgsql')",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let names: Vec<&str> = steps.iter().map(|(name, _)| name.as_str()).collect();
    assert!(
        names.contains(&"ledger_record_outcomes") && names.len() == 2,
        "the claim and the record step, each in PL/pgSQL: {names:?}"
    );
    for (name, config) in &steps {
        let config = config.clone().unwrap_or_default();
        assert!(
            config.iter().any(|c| c == "enable_bitmapscan=off"),
            "{name} runs with {config:?}"
        );
    }
}

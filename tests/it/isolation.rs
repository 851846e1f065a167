//! The custodian's steps where production runs them, and the races their
//! fences decide (docs/design/isolation.md argues each):
//!
//! - the isolation of every change of a `commands` row, seen from inside
//!   the database (a trigger notes it): claim and start in one engine
//!   statement and the start of prepared rows at READ COMMITTED, fenced by
//!   the lease row held for share; the record, a cancel, the adoption when
//!   a custodian takes a lease over, and recovery's expire, adopt and
//!   resolve at SERIALIZABLE;
//! - concurrent claims start each command once;
//! - a takeover waits for a claim in flight to commit, then finds its rows
//!   started under the generation before it;
//! - a zombie (a custodian whose lease was taken over) claims, starts and
//!   records nothing.

use crate::harness::{TestApp, TestSink, as_role, custodian, prepare, refund};
use command_ledger::custodian::effects::Effects;
use command_ledger::custodian::http_executor::HttpExecutor;
use command_ledger::custodian::recovery::Recovery;
use command_ledger::custodian::{Custodian, CustodianConfig, StepReport};
use command_ledger::db::roles::ServiceRole;
use command_ledger::db::{self, CommandRow, Role};
use command_ledger::demo_sink::Mode;
use command_ledger::domain::EffectOutcome;
use serde_json::json;
use sqlx::PgPool;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

const SECOND: Duration = Duration::from_secs(1);

/// Notes `(old state, new state, isolation)` for every update of `commands`
/// made by one of the service's steps (those name their actor: the test's
/// own writes do not).
async fn watch_isolation(app: &TestApp) {
    for sql in [
        "create table isolation_seen (from_state text, to_state text, isolation text)",
        "create function note_isolation() returns trigger language plpgsql security definer as $$ \
         begin if coalesce(current_setting('command_ledger.actor', true), '') <> '' then \
               insert into isolation_seen \
               values (old.state, new.state, current_setting('transaction_isolation')); end if; \
               return null; end $$",
        "create trigger zz_note_isolation after update on commands \
         for each row execute function note_isolation()",
    ] {
        sqlx::query(sql).execute(&app.pool).await.unwrap();
    }
}

fn effects(sink: &TestSink) -> Effects {
    let mut effects = Effects::default();
    let executor = HttpExecutor::new(
        format!("{}/refunds", sink.url),
        Default::default(),
        5 * SECOND,
    )
    .unwrap()
    .with_reconcile_url(Some(format!("{}/applied/{{key}}", sink.url)));
    effects.register("refund", executor, 5 * SECOND);
    effects
}

async fn sql(app: &TestApp, text: &'static str) {
    sqlx::query(text).execute(&app.pool).await.unwrap();
}

#[tokio::test]
async fn every_change_of_a_commands_state_but_the_starts_runs_at_serializable() {
    if crate::harness::lacks!(
        local_tables,
        "the watching trigger would run on the shards, which cannot write the coordinator's table it fills"
    ) {
        return;
    }
    let app = TestApp::spawn().await;
    watch_isolation(&app).await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let recovery = || {
        Recovery::new(
            app.pool.clone(),
            crate::harness::ledger_backend(),
            Arc::new(effects(&sink)),
            "recovery".into(),
        )
    };

    // Claim and start, then record: pending → effect_started → applied.
    let c = custodian(&app.pool, &["payments"], effects(&sink), 10 * SECOND);
    app.create(&token, "runs", &refund(1)).await;
    let report = c.run_once().await.unwrap();
    assert_eq!(report.applied, 1, "{report:?}");

    // The start of a row another writer left prepared: prepared → effect_started.
    let left = app.create(&token, "left", &refund(6)).await;
    assert_eq!(prepare(&app.pool, &[&left]).await, 1);
    let started = c
        .start_prepared(10, &mut StepReport::default())
        .await
        .unwrap();
    assert_eq!(started.len(), 1);

    // A cancel: pending → cancelled.
    let cancelled = app.create(&token, "cancelled", &refund(2)).await;
    let resp = app
        .post(&token, &format!("/v1/commands/{cancelled}/cancel"))
        .await;
    assert_eq!(resp.status(), 200);

    // Recovery's expire: an overdue pending command.
    let mut overdue = refund(3);
    overdue["deadline"] = json!((chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339());
    let overdue = app.create(&token, "overdue", &overdue).await;
    sqlx::query(
        "update commands set deadline_at = now() - interval '1 second' where id = $1::uuid",
    )
    .bind(&overdue)
    .execute(&app.pool)
    .await
    .unwrap();
    assert_eq!(recovery().run_once().await.unwrap().expired, 1);

    // Recovery's adopt: a prepared row of a generation that lost its lease.
    let adopted = app.create(&token, "adopted", &refund(4)).await;
    assert_eq!(prepare(&app.pool, &[&adopted]).await, 1);
    sql(
        &app,
        "update authorities set generation = generation + 1, lease_holder = 'someone', \
               lease_expires_at = now() + interval '1 minute' where id = 'payments'",
    )
    .await;
    assert_eq!(recovery().run_once().await.unwrap().adopted, 1);

    // Recovery's resolve: started by an executor that died after dispatch.
    let b = custodian(&app.pool, &["receipts"], effects(&sink), 10 * SECOND);
    let mut started = refund(5);
    started["authority"] = json!("receipts");
    app.create(&token, "resolved", &started).await;
    b.heartbeat().await.unwrap();
    let calls = b
        .claim_and_start(1, &mut StepReport::default())
        .await
        .unwrap();
    assert_eq!(calls.len(), 1);
    let _never_recorded = b.execute(calls).await;
    sql(&app, "update authorities set lease_expires_at = now() - interval '1 second' where id = 'receipts'").await;
    assert_eq!(recovery().run_once().await.unwrap().applied, 1);

    let seen: Vec<(String, String, String)> = sqlx::query_as(
        "select distinct from_state, to_state, isolation from isolation_seen order by 1, 2, 3",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let expected: Vec<(String, String, String)> = [
        ("effect_started", "applied", "serializable"),
        ("pending", "cancelled", "serializable"),
        ("pending", "effect_started", "read committed"),
        ("pending", "expired", "serializable"),
        ("prepared", "effect_started", "read committed"),
        ("prepared", "prepared", "serializable"),
    ]
    .iter()
    .map(|&(from, to, isolation)| (from.to_owned(), to.to_owned(), isolation.to_owned()))
    .collect();
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn a_custodian_taking_a_lease_over_adopts_at_serializable() {
    if crate::harness::lacks!(
        local_tables,
        "the watching trigger would run on the shards, which cannot write the coordinator's table it fills"
    ) {
        return;
    }
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let ttl = Duration::from_millis(400);

    // Two commands left prepared under A's generation 1 (by another writer:
    // A's own claim starts at once), one of them pinned to generation 1;
    // A dies.
    let a = custodian(&app.pool, &["payments"], effects(&sink), ttl);
    a.heartbeat().await.unwrap();
    let adopted = app.create(&token, "adopted", &refund(1)).await;
    let mut pinned = refund(2);
    pinned["authority"] = json!({"id": "payments", "generation": 1});
    let pinned = app.create(&token, "pinned", &pinned).await;
    assert_eq!(prepare(&app.pool, &[&adopted, &pinned]).await, 2);
    sql(
        &app,
        "update authorities set lease_expires_at = now() - interval '1 second' where id = 'payments'",
    )
    .await;

    // B takes the lease (generation 2): its own adoption, not recovery's.
    watch_isolation(&app).await;
    let b = custodian(&app.pool, &["payments"], effects(&sink), 10 * SECOND);
    b.heartbeat().await.unwrap();

    let seen: Vec<(String, String, String)> =
        sqlx::query_as("select from_state, to_state, isolation from isolation_seen order by 1, 2")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    let expected: Vec<(String, String, String)> =
        [("prepared", "expired"), ("prepared", "prepared")]
            .iter()
            .map(|&(f, t)| (f.to_owned(), t.to_owned(), "serializable".to_owned()))
            .collect();
    assert_eq!(seen, expected);
    let states: Vec<(String, String, i64)> =
        sqlx::query_as("select id::text, state, authority_generation from commands order by id")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        states,
        [
            (adopted, "prepared".to_owned(), 2),
            (pinned, "expired".to_owned(), 1)
        ]
    );
}

/// The engine's claim-and-start step for one authority, as the custodian
/// runs it (`db::lifecycle::claim_start_authority`): in a transaction of its
/// own at READ COMMITTED, acting as `holder`, as the custodian's role. The
/// transaction is returned open.
async fn claim_in_tx(
    pool: &PgPool,
    holder: &str,
    limit: i64,
) -> (sqlx::Transaction<'static, sqlx::Postgres>, Vec<CommandRow>) {
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("select set_config($1, $2, true)")
        .bind(db::txn::ACTOR)
        .bind(format!("custodian:{holder}"))
        .execute(&mut *tx)
        .await
        .unwrap();
    let rows = db::lifecycle::claim_start_authority(&mut *tx, None, "payments", holder, limit)
        .await
        .unwrap();
    (tx, rows)
}

/// [`claim_in_tx`], committed.
async fn claim(pool: &PgPool, holder: &str, limit: i64) -> Vec<CommandRow> {
    let (tx, rows) = claim_in_tx(pool, holder, limit).await;
    tx.commit().await.unwrap();
    rows
}

async fn states(app: &TestApp) -> Vec<(String, String, Option<i64>)> {
    sqlx::query_as("select id::text, state, authority_generation from commands order by id")
        .fetch_all(&app.pool)
        .await
        .unwrap()
}

/// Custodians of one holder claiming the same authority at once (each
/// statement at READ COMMITTED) start every command exactly once: the
/// command rows are locked skipping those another claim holds, and only a
/// row still `pending` is moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_start_each_command_once() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let commands = 120;
    let mut ids = BTreeSet::new();
    for n in 0..commands {
        ids.insert(app.create(&token, &format!("c{n}"), &refund(n + 1)).await);
    }
    let custodians: Vec<Arc<Custodian>> = (0..6)
        .map(|_| {
            let mut config = CustodianConfig::new(vec!["payments".to_owned()]);
            config.holder = "shared".to_owned();
            config.lease_ttl = 30 * SECOND;
            Arc::new(Custodian::new(
                as_role(&app.pool, ServiceRole::Custodian),
                crate::harness::ledger_backend(),
                config,
                effects(&sink),
            ))
        })
        .collect();
    for c in &custodians {
        c.heartbeat().await.unwrap();
    }
    let mut tasks = tokio::task::JoinSet::new();
    for c in &custodians {
        let c = Arc::clone(c);
        tasks.spawn(async move {
            let mut mine = Vec::new();
            let mut empty = 0;
            while empty < 3 {
                let started = c
                    .claim_and_start(3, &mut StepReport::default())
                    .await
                    .expect("a claim");
                if started.is_empty() {
                    empty += 1;
                }
                mine.extend(started.into_iter().map(|s| s.call.command_id.to_string()));
            }
            mine
        });
    }
    let mut all = Vec::new();
    while let Some(mine) = tasks.join_next().await {
        all.extend(mine.unwrap());
    }
    let once: BTreeSet<String> = all.iter().cloned().collect();
    assert_eq!(all.len(), once.len(), "a command was started twice");
    assert_eq!(once, ids, "every command started");
    let entries: i64 = sqlx::query_scalar(
        "select count(*) from command_history where to_state = 'effect_started'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(entries, commands);
}

/// A claim in flight holds the authority's row for share: a takeover of
/// the lapsed lease waits until the claim commits, then takes the next
/// generation; the rows the claim started stay under the claim's
/// generation, and its custodian's record of them is fenced out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takeover_waits_for_a_claim_in_flight() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let custodian_pool = as_role(&app.pool, ServiceRole::Custodian);
    // Long enough that a loaded machine claims before it lapses.
    let ttl = 2 * SECOND;
    let granted = db::authorities::acquire(&custodian_pool, "payments", "holder-a", ttl)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(granted.generation, 1);
    for n in 0..3 {
        app.create(&token, &format!("t{n}"), &refund(n + 1)).await;
    }
    let (tx, claimed) = claim_in_tx(&custodian_pool, "holder-a", 10).await;
    assert_eq!(claimed.len(), 3);
    // The lease lapses while the claim's transaction is open.
    tokio::time::sleep(ttl + Duration::from_millis(200)).await;
    let takeover = {
        let pool = custodian_pool.clone();
        tokio::spawn(async move {
            db::authorities::acquire(&pool, "payments", "holder-b", 10 * SECOND)
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !takeover.is_finished(),
        "the takeover did not wait for the claim in flight"
    );
    tx.commit().await.unwrap();
    let taken = takeover.await.unwrap().expect("the lapsed lease is taken");
    assert_eq!(taken.generation, 2);
    assert!(
        states(&app)
            .await
            .iter()
            .all(|(_, state, generation)| state == "effect_started" && *generation == Some(1)),
        "{:?}",
        states(&app).await
    );
    // Nothing left for the new holder to claim; the old holder's record is
    // fenced (recovery decides those rows).
    assert!(claim(&custodian_pool, "holder-b", 10).await.is_empty());
    let outcomes: Vec<_> = claimed
        .iter()
        .map(|row| db::lifecycle::Outcome::new(row.id, EffectOutcome::Applied(json!({}))))
        .collect();
    let recorded = db::lifecycle::record_outcomes(&custodian_pool, None, &outcomes, "payments", 1)
        .await
        .unwrap();
    assert!(
        recorded.is_empty(),
        "a record under a superseded generation"
    );
}

/// A custodian paused past its lease (a zombie) wakes after another took
/// the lease over: its claim, its start of prepared rows and its record
/// move nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_zombie_claims_starts_and_records_nothing() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let custodian_pool = as_role(&app.pool, ServiceRole::Custodian);
    db::authorities::acquire(&custodian_pool, "payments", "zombie", 30 * SECOND)
        .await
        .unwrap()
        .unwrap();
    let before = app.create(&token, "before", &refund(1)).await;
    let started = claim(&custodian_pool, "zombie", 10).await;
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].id.to_string(), before);

    // Paused past its lease; another takes it over (generation 2).
    sql(
        &app,
        "update authorities set lease_expires_at = now() - interval '1 second' where id = 'payments'",
    )
    .await;
    let taken = db::authorities::acquire(&custodian_pool, "payments", "successor", 10 * SECOND)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(taken.generation, 2);
    let queued = app.create(&token, "queued", &refund(2)).await;
    let left = app.create(&token, "left", &refund(3)).await;
    assert_eq!(prepare(&app.pool, &[&left]).await, 1);

    // The zombie wakes.
    assert!(
        claim(&custodian_pool, "zombie", 10).await.is_empty(),
        "a zombie's claim"
    );
    let mut tx = custodian_pool.begin().await.unwrap();
    let late = db::lifecycle::start_prepared(&mut *tx, "payments", "zombie", 10)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(late.is_empty(), "a zombie's start of prepared rows");
    let outcomes = [db::lifecycle::Outcome::new(
        started[0].id,
        EffectOutcome::Applied(json!({})),
    )];
    let recorded = db::lifecycle::record_outcomes(&custodian_pool, None, &outcomes, "payments", 1)
        .await
        .unwrap();
    assert!(recorded.is_empty(), "a zombie's record");

    let now = states(&app).await;
    let state_of = |id: &str| now.iter().find(|(i, _, _)| i == id).cloned().unwrap();
    assert_eq!(state_of(&before).1, "effect_started");
    assert_eq!(state_of(&queued).1, "pending");
    assert_eq!(
        state_of(&left),
        (left.clone(), "prepared".to_owned(), Some(2))
    );
    // The successor starts both.
    assert_eq!(claim(&custodian_pool, "successor", 10).await.len(), 1);
}

#[tokio::test]
async fn a_transaction_that_never_stops_conflicting_gives_up_after_the_bound() {
    use command_ledger::db::txn::{Isolation, MAX_ATTEMPTS, Retrying, TxError};
    use std::sync::atomic::{AtomicU64, Ordering};
    let app = TestApp::spawn().await;
    let retries = AtomicU64::new(0);
    let mut retry = Retrying::new(
        &app.pool,
        crate::harness::ledger_backend(),
        &retries,
        "always conflicting",
        Isolation::Serializable,
        "test",
    );
    let mut attempts = 0;
    let outcome = loop {
        let mut tx = match retry.next_attempt().await {
            Ok(tx) => tx,
            Err(e) => break e,
        };
        attempts += 1;
        let conflict = sqlx::query(
            "do $$ begin raise exception 'always' using errcode = 'serialization_failure'; end $$",
        )
        .execute(&mut *tx)
        .await
        .map(|_| ());
        match retry.finish(tx, conflict).await {
            Ok(Some(())) => panic!("a conflicting transaction committed"),
            Ok(None) => {}
            Err(e) => break e,
        }
    };
    assert!(matches!(outcome, TxError::Exhausted), "{outcome:?}");
    assert_eq!(attempts, MAX_ATTEMPTS);
    assert_eq!(retries.load(Ordering::Relaxed), u64::from(MAX_ATTEMPTS));
}

/// A request cancelled while its transaction's `BEGIN` is in flight (a client
/// that hangs up, a timeout) leaves nothing open on the pooled connection.
/// Otherwise the next borrower's statements run inside that transaction: a
/// write it was told had succeeded stays uncommitted (and is lost when the
/// connection closes), and its own `BEGIN`'s isolation is ignored (PostgreSQL
/// only warns "there is already a transaction in progress"). sqlx 0.9.0 left
/// it open (transact-rs/sqlx#4393); 0.9.1 queues the rollback.
#[tokio::test]
async fn a_transaction_cancelled_during_its_begin_leaves_nothing_open_on_the_pooled_connection() {
    let (url, _admin) = crate::harness::fresh_database().await;
    // One connection, so the next borrower gets the cancelled one's.
    let pool = db::connect(&url, 1).await.unwrap();
    // Connected already, so the timeout falls in the BEGIN's round trip.
    sqlx::query("select 1").execute(&pool).await.unwrap();
    let slow_begin = pool.begin_with("begin isolation level read committed; select pg_sleep(0.5)");
    assert!(
        tokio::time::timeout(Duration::from_millis(100), slow_begin)
            .await
            .is_err(),
        "the BEGIN was to be cancelled in flight"
    );

    sqlx::query("create table written_after_a_cancelled_begin (n int)")
        .execute(&pool)
        .await
        .unwrap();
    let mut other = <sqlx::PgConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    let committed: bool =
        sqlx::query_scalar("select to_regclass('written_after_a_cancelled_begin') is not null")
            .fetch_one(&mut other)
            .await
            .unwrap();
    assert!(
        committed,
        "a statement run after the cancelled BEGIN, on its connection, is not committed"
    );

    let mut tx = pool
        .begin_with("begin isolation level serializable")
        .await
        .unwrap();
    let isolation: String = sqlx::query_scalar("show transaction_isolation")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(isolation, "serializable");
}

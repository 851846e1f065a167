//! The isolation of each statement that moves a command, seen from inside
//! the database (a trigger notes the isolation of the transaction behind
//! each change of a `commands` row), on the paths this test drives: a
//! custodian's first claim, which takes the two-step path (the claim at
//! READ COMMITTED, fenced by the lease: `CustodianConfig::claim_isolation`
//! and W5 in docs/PERFORMANCE.md; the start at SERIALIZABLE), the record, a
//! cancel, the adoption when a custodian takes a lease over, and recovery's
//! expire, adopt and resolve, all SERIALIZABLE. The path a busy custodian
//! takes after its first claim, claim and start in one engine statement
//! (`ledger_claim_start`) at READ COMMITTED, fenced by the authority row it
//! holds for share, is not watched here.

use crate::harness::{TestApp, TestSink, custodian, refund};
use command_ledger::custodian::StepReport;
use command_ledger::custodian::effects::Effects;
use command_ledger::custodian::http_executor::HttpExecutor;
use command_ledger::custodian::recovery::Recovery;
use command_ledger::db::Role;
use command_ledger::demo_sink::Mode;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const SECOND: Duration = Duration::from_secs(1);

/// Notes `(old state, new state, isolation)` for every update of `commands`.
async fn watch_isolation(app: &TestApp) {
    for sql in [
        "create table isolation_seen (from_state text, to_state text, isolation text)",
        "create function note_isolation() returns trigger language plpgsql security definer as $$ \
         begin insert into isolation_seen \
               values (old.state, new.state, current_setting('transaction_isolation')); \
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
async fn every_change_of_a_commands_state_but_the_claim_runs_at_serializable() {
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

    // Claim, start and record: pending → prepared → effect_started → applied.
    let c = custodian(&app.pool, &["payments"], effects(&sink), 10 * SECOND);
    app.create(&token, "runs", &refund(1)).await;
    let report = c.run_once().await.unwrap();
    assert_eq!(report.applied, 1, "{report:?}");

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
    app.create(&token, "adopted", &refund(4)).await;
    c.heartbeat().await.unwrap();
    assert_eq!(
        c.claim(1, &mut StepReport::default()).await.unwrap().len(),
        1
    );
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
        // pending → pending is this test's own change of a deadline.
        "select distinct from_state, to_state, isolation from isolation_seen \
         where not (from_state = 'pending' and to_state = 'pending') order by 1, 2, 3",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let expected: Vec<(String, String, String)> = [
        ("effect_started", "applied"),
        ("pending", "cancelled"),
        ("pending", "expired"),
        ("pending", "prepared"),
        ("prepared", "effect_started"),
        ("prepared", "prepared"),
    ]
    .iter()
    .map(|&(from, to)| {
        let isolation = if (from, to) == ("pending", "prepared") {
            "read committed"
        } else {
            "serializable"
        };
        (from.to_owned(), to.to_owned(), isolation.to_owned())
    })
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

    // A claims two commands (prepared under generation 1), one of them
    // pinned to generation 1, and dies before starting them.
    let a = custodian(&app.pool, &["payments"], effects(&sink), ttl);
    a.heartbeat().await.unwrap();
    let adopted = app.create(&token, "adopted", &refund(1)).await;
    let mut pinned = refund(2);
    pinned["authority"] = json!({"id": "payments", "generation": 1});
    let pinned = app.create(&token, "pinned", &pinned).await;
    assert_eq!(
        a.claim(10, &mut StepReport::default()).await.unwrap().len(),
        2
    );
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
    let pool = command_ledger::db::connect(&url, 1).await.unwrap();
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

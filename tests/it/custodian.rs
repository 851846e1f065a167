//! The custodian against a real PostgreSQL and a real HTTP sink: honest
//! outcomes, fencing, expiry, cancellation, waiting, retries.

use crate::harness::{TestApp, TestSink, custodian, prepare, problem, refund, refund_effects};
use command_ledger::custodian::StepReport;
use command_ledger::db::Role;
use command_ledger::demo_sink::Mode;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::time::Duration;

async fn command(app: &TestApp, token: &str, id: &str) -> Value {
    app.get(token, &format!("/v1/commands/{id}"))
        .await
        .json()
        .await
        .unwrap()
}

async fn history(app: &TestApp, token: &str, id: &str) -> Vec<String> {
    let h: Value = app
        .get(token, &format!("/v1/commands/{id}/history"))
        .await
        .json()
        .await
        .unwrap();
    h["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["to"].as_str().unwrap().to_owned())
        .collect()
}

const SECOND: Duration = Duration::from_secs(1);

async fn lease_holder(app: &TestApp, authority: &str) -> Option<String> {
    sqlx::query_scalar("select lease_holder from authorities where id = $1")
        .bind(authority)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

/// A custodian's long-lived loop in a task of its own, and the way to stop it.
struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), command_ledger::custodian::CustodianError>>,
}

impl Running {
    fn start(c: &std::sync::Arc<command_ledger::custodian::Custodian>) -> Self {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(std::sync::Arc::clone(c).run(async move {
            let _ = stopped.await;
        }));
        Running { stop, task }
    }

    /// Asks for a shutdown; `run` must return within `limit`.
    async fn stop(self, limit: Duration) {
        self.stop.send(()).unwrap();
        tokio::time::timeout(limit, self.task)
            .await
            .expect("the custodian stops in time")
            .unwrap()
            .unwrap();
    }
}

/// The usual set-up: the API, a device token, a sink in `mode`, and a
/// custodian of `payments` whose refunds go to the sink (5 s deadline).
async fn rig(
    mode: Mode,
) -> (
    TestApp,
    String,
    TestSink,
    command_ledger::custodian::Custodian,
) {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(mode).await;
    let c = custodian(
        &app.pool,
        &["payments"],
        refund_effects(&sink.url, 5 * SECOND),
        10 * SECOND,
    );
    (app, token, sink, c)
}

#[tokio::test]
async fn a_refund_goes_pending_to_applied_through_the_sink_once() {
    let (app, token, sink, c) = rig(Mode::Ok).await;
    let id = app.create(&token, "r1", &refund(1200)).await;

    let report = c.run_once().await.unwrap();
    assert_eq!(
        report,
        StepReport {
            claimed: 1,
            started: 1,
            applied: 1,
            ..Default::default()
        }
    );
    let cmd = command(&app, &token, &id).await;
    assert_eq!(cmd["state"], "applied");
    assert_eq!(cmd["authority"]["generation"], 1);
    assert_eq!(
        cmd["result"]["key"],
        format!("cl-{id}"),
        "the downstream key is derived from the command id"
    );
    assert_eq!(
        history(&app, &token, &id).await,
        ["pending", "prepared", "effect_started", "applied"]
    );
    assert_eq!(sink.count("applied"), 1);

    // Nothing more to do, ever.
    assert_eq!(c.run_once().await.unwrap(), StepReport::default());
    assert_eq!(sink.requests(), 1);
}

/// A step that moves one command and one that moves a batch write the same
/// chain: on Citus the steps take a statement a row for a few commands and
/// set-based statements for more (migration 0033), so both ways, an expiry
/// among them, must verify clean with every entry in place.
#[tokio::test]
async fn one_command_and_a_batch_leave_entries_that_verify() {
    let (app, token, sink, c) = rig(Mode::Ok).await;
    let alone = app.create(&token, "alone", &refund(1)).await;
    assert_eq!(c.run_once().await.unwrap().applied, 1);

    let mut overdue = refund(2);
    overdue["deadline"] = json!((chrono::Utc::now() - chrono::Duration::seconds(1)).to_rfc3339());
    let expired = app.create(&token, "late", &overdue).await;
    let mut batch = Vec::new();
    for k in 0..9 {
        batch.push(app.create(&token, &format!("b{k}"), &refund(10 + k)).await);
    }
    let report = c.run_once().await.unwrap();
    assert_eq!((report.claimed, report.expired, report.applied), (10, 1, 9));
    assert_eq!(sink.count("applied"), 10);

    assert_eq!(
        history(&app, &token, &alone).await,
        ["pending", "prepared", "effect_started", "applied"]
    );
    assert_eq!(
        history(&app, &token, &expired).await,
        ["pending", "expired"]
    );
    for id in &batch {
        assert_eq!(
            history(&app, &token, id).await,
            ["pending", "prepared", "effect_started", "applied"]
        );
    }
    let (ok, out, err) = crate::harness::cli(&app.db_url, &["verify", "--json"]).await;
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    assert!(ok, "{doc}");
    assert_eq!(
        (
            doc["commands"].as_i64(),
            doc["breaks"].as_array().map(Vec::len)
        ),
        (Some(11), Some(0)),
        "{doc}"
    );
}

/// Makes updates of `table`'s rows fail when `when` holds (a trigger
/// named `name` that the owner adds), until [`allow_updates`].
async fn refuse_updates(app: &TestApp, table: &str, name: &str, when: &str) {
    alter_triggers(
        app,
        &[
            format!(
                "create function {name}() returns trigger language plpgsql as $$ begin \
                   if {when} then raise exception '{name}: refused by the test'; end if; \
                   return new; end $$"
            ),
            format!(
                "create trigger {name} before update on {table} \
                 for each row execute function {name}()"
            ),
        ],
    )
    .await;
}

async fn allow_updates(app: &TestApp, table: &str, name: &str) {
    alter_triggers(app, &[format!("drop trigger {name} on {table}")]).await;
}

/// Runs `statements` as the owner, one message each, in a transaction that
/// on Citus allows triggers on distributed tables.
async fn alter_triggers(app: &TestApp, statements: &[String]) {
    let mut tx = app.pool.begin().await.unwrap();
    let citus =
        crate::harness::citus().then(|| "set local citus.enable_unsafe_triggers = on".to_owned());
    for statement in citus.iter().chain(statements) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement.clone()))
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
}

/// One authority's step failing never strands what another's committed in
/// the same turn. On Citus a claim failed while its shard moved, and a
/// command started beside it was never dispatched, its `effect_started`
/// left under a live lease (the rebalance trial). Here one node claims an
/// authority per statement, as Citus does, and `beta`'s starts fail: each
/// turn claims and starts in one step per authority, `beta` first, then
/// last, then first again.
#[tokio::test]
async fn a_step_failing_for_one_authority_dispatches_what_the_others_started() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let backend = command_ledger::db::Backend {
        claims_per_authority: true,
        ..crate::harness::ledger_backend()
    };
    let c = crate::harness::custodian_on(
        backend,
        &app.pool,
        &["alpha", "beta"],
        refund_effects(&sink.url, 5 * SECOND),
        10 * SECOND,
    );
    let on = |authority: &str, amount: i64| {
        let mut body = refund(amount);
        body["authority"] = json!(authority);
        body
    };
    refuse_updates(
        &app,
        "commands",
        "test_refuse_start",
        "new.authority_id = 'beta' and new.state = 'effect_started'",
    )
    .await;

    let mut held = Vec::new();
    for turn in 0..3 {
        let a = app
            .create(&token, &format!("a{turn}"), &on("alpha", 1 + turn))
            .await;
        let b = app
            .create(&token, &format!("b{turn}"), &on("beta", 10 + turn))
            .await;
        let report = c
            .run_once()
            .await
            .expect("what alpha started is dispatched");
        assert_eq!(
            (report.applied, report.started),
            (1, 1),
            "turn {turn}: {report:?}"
        );
        assert_eq!(
            command(&app, &token, &a).await["state"],
            "applied",
            "turn {turn}"
        );
        assert_eq!(
            command(&app, &token, &b).await["state"],
            "pending",
            "turn {turn}"
        );
        held.push(b);
    }
    assert_eq!(sink.count("applied"), 3);

    // Allowed again, the next turn claims and starts what waited.
    allow_updates(&app, "commands", "test_refuse_start").await;
    let report = c.run_once().await.unwrap();
    assert_eq!(report.applied, 3, "{report:?}");
    for b in &held {
        assert_eq!(command(&app, &token, b).await["state"], "applied");
    }
    assert_eq!(sink.count("applied"), 6);
    assert_eq!(sink.requests(), 6);
}

/// A lease whose renewal fails (its shard switching over, say) keeps
/// neither the other leases from being renewed nor the outcomes waiting to
/// be recorded from being written: `beta`, tended first, fails to renew
/// while `alpha`'s outcome waits.
#[tokio::test]
async fn a_lease_failing_to_renew_holds_up_neither_the_other_leases_nor_waiting_outcomes() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let c = custodian(
        &app.pool,
        &["beta", "alpha"],
        refund_effects(&sink.url, 5 * SECOND),
        10 * SECOND,
    );
    let mut body = refund(1);
    body["authority"] = json!("alpha");
    let id = app.create(&token, "a", &body).await;

    // The effect runs; its outcome cannot be recorded yet, and waits.
    refuse_updates(
        &app,
        "commands",
        "test_refuse_record",
        "new.authority_id = 'alpha' and new.state = 'applied'",
    )
    .await;
    let report = c.run_once().await.unwrap();
    assert_eq!((report.started, report.applied), (1, 0), "{report:?}");
    assert_eq!(sink.count("applied"), 1);
    assert_eq!(command(&app, &token, &id).await["state"], "effect_started");

    // Now beta's lease cannot be renewed, and alpha's outcome can be recorded.
    refuse_updates(
        &app,
        "authorities",
        "test_refuse_renewal",
        "new.id = 'beta'",
    )
    .await;
    allow_updates(&app, "commands", "test_refuse_record").await;
    let expires = || async {
        sqlx::query_scalar::<_, chrono::DateTime<chrono::Utc>>(
            "select lease_expires_at from authorities where id = 'alpha'",
        )
        .fetch_one(&app.pool)
        .await
        .unwrap()
    };
    let before = expires().await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let failed = c.run_once().await.expect_err("beta's renewal fails");
    assert!(
        failed.to_string().contains("test_refuse_renewal"),
        "{failed}"
    );
    assert!(expires().await > before, "alpha's lease was renewed");
    assert_eq!(command(&app, &token, &id).await["state"], "applied");
    assert_eq!(sink.requests(), 1, "recorded, not run again");
}

#[tokio::test]
async fn a_hanging_sink_makes_the_command_ambiguous_and_it_is_never_retried() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Hang).await;
    let c = custodian(
        &app.pool,
        &["payments"],
        refund_effects(&sink.url, 2 * SECOND),
        10 * SECOND,
    );
    let id = app.create(&token, "r1", &refund(1)).await;

    let report = c.run_once().await.unwrap();
    assert_eq!(report.ambiguous, 1);
    let cmd = command(&app, &token, &id).await;
    assert_eq!(cmd["state"], "ambiguous");
    assert_eq!(cmd["error"]["reason"], "timeout");
    // The sink's own record may land after the deadline on a loaded machine.
    for _ in 0..50 {
        if sink.count("applied") == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        sink.count("applied"),
        1,
        "the sink did apply it: ambiguous, not failed"
    );
    for _ in 0..3 {
        assert_eq!(c.run_once().await.unwrap(), StepReport::default());
    }
    assert_eq!(sink.requests(), 1, "no retry behind anyone's back");
}

#[tokio::test]
async fn a_connection_reset_after_the_sink_applied_is_ambiguous() {
    let (app, token, sink, c) = rig(Mode::ResetAfterApply).await;
    let id = app.create(&token, "r1", &refund(1)).await;
    c.run_once().await.unwrap();
    let cmd = command(&app, &token, &id).await;
    assert_eq!(cmd["state"], "ambiguous", "{cmd}");
    assert_eq!(cmd["error"]["reason"], "connection_lost");
    assert_eq!(sink.count("applied"), 1);
}

#[tokio::test]
async fn an_unreachable_sink_is_failed_not_dispatched_and_a_refusal_is_failed() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let c = custodian(
        &app.pool,
        &["payments"],
        refund_effects(&closed, 5 * SECOND),
        10 * SECOND,
    );
    let id = app.create(&token, "r1", &refund(1)).await;
    assert_eq!(c.run_once().await.unwrap().failed, 1);
    let cmd = command(&app, &token, &id).await;
    assert_eq!(
        (cmd["state"].as_str(), cmd["error"]["reason"].as_str()),
        (Some("failed"), Some("not_dispatched"))
    );

    let sink = TestSink::start(Mode::Reject).await;
    let c = custodian(
        &app.pool,
        &["refusals"],
        refund_effects(&sink.url, 5 * SECOND),
        10 * SECOND,
    );
    let mut body = refund(2);
    body["authority"] = json!("refusals");
    let id = app.create(&token, "r2", &body).await;
    assert_eq!(c.run_once().await.unwrap().failed, 1);
    let cmd = command(&app, &token, &id).await;
    assert_eq!(
        (cmd["state"].as_str(), cmd["error"]["reason"].as_str()),
        (Some("failed"), Some("rejected"))
    );
    assert_eq!(cmd["error"]["detail"]["status"], 422);
    assert_eq!((sink.count("applied"), sink.count("rejected")), (0, 1));
}

#[tokio::test]
async fn a_kind_without_an_executor_fails_without_dispatch() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let c = custodian(
        &app.pool,
        &["payments"],
        command_ledger::custodian::Effects::default(),
        10 * SECOND,
    );
    let id = app.create(&token, "r1", &refund(1)).await;
    c.run_once().await.unwrap();
    let cmd = command(&app, &token, &id).await;
    assert_eq!(
        (cmd["state"].as_str(), cmd["error"]["reason"].as_str()),
        (Some("failed"), Some("not_dispatched"))
    );
}

#[tokio::test]
async fn expired_and_cancelled_commands_are_never_executed() {
    let (app, token, sink, c) = rig(Mode::Ok).await;

    let mut overdue = refund(1);
    overdue["deadline"] = json!((chrono::Utc::now() - chrono::Duration::seconds(1)).to_rfc3339());
    let expired = app.create(&token, "late", &overdue).await;
    let cancelled = app.create(&token, "cancel-me", &refund(2)).await;
    assert_eq!(
        app.post(&token, &format!("/v1/commands/{cancelled}/cancel"))
            .await
            .status(),
        200
    );

    let report = c.run_once().await.unwrap();
    assert_eq!((report.expired, report.started), (1, 0));
    let cmd = command(&app, &token, &expired).await;
    assert_eq!(
        (cmd["state"].as_str(), cmd["error"]["reason"].as_str()),
        (Some("expired"), Some("deadline_passed"))
    );
    assert_eq!(
        history(&app, &token, &expired).await,
        ["pending", "expired"]
    );
    assert_eq!(
        command(&app, &token, &cancelled).await["state"],
        "cancelled"
    );
    assert_eq!(sink.requests(), 0);
}

#[tokio::test]
async fn a_cancel_between_prepare_and_start_wins_and_the_effect_never_runs() {
    let (app, token, sink, c) = rig(Mode::Ok).await;
    let id = app.create(&token, "r1", &refund(1)).await;

    c.heartbeat().await.unwrap();
    let mut report = StepReport::default();
    // Prepared by another writer (the custodian's claim starts at once).
    assert_eq!(prepare(&app.pool, &[&id]).await, 1);
    assert_eq!(
        app.post(&token, &format!("/v1/commands/{id}/cancel"))
            .await
            .status(),
        200
    );
    let started = c.start_prepared(10, &mut report).await.unwrap();
    assert!(started.is_empty(), "a cancelled row is never started");
    assert_eq!(
        history(&app, &token, &id).await,
        ["pending", "prepared", "cancelled"]
    );
    assert_eq!(sink.requests(), 0);

    // Once started, cancel is too late.
    let id = app.create(&token, "r2", &refund(2)).await;
    assert_eq!(prepare(&app.pool, &[&id]).await, 1);
    let started = c.start_prepared(10, &mut report).await.unwrap();
    assert_eq!(started.len(), 1);
    let body = problem(
        app.post(&token, &format!("/v1/commands/{id}/cancel")).await,
        409,
        "/problems/cancel-too-late",
    )
    .await;
    assert_eq!(body["state"], "effect_started");
    let done = c.execute(started).await;
    c.record_outcomes(done, &mut report).await;
    assert_eq!(command(&app, &token, &id).await["state"], "applied");
}

/// The first custodian is paused (not dead) with a command started and
/// another prepared; its lease lapses; a second takes over. The first can
/// record nothing afterwards, and the sink refuses its stale generation.
#[tokio::test]
async fn a_paused_custodian_is_fenced_out_after_another_takes_over() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    // Long enough that B's lease outlives the reads and the submission
    // between its takeover and its turn on a loaded cluster.
    let ttl = Duration::from_secs(2);
    let a = custodian(
        &app.pool,
        &["payments"],
        refund_effects(&sink.url, 5 * SECOND),
        ttl,
    );
    let b = custodian(
        &app.pool,
        &["payments"],
        refund_effects(&sink.url, 5 * SECOND),
        ttl,
    );

    let started_by_a = app.create(&token, "r1", &refund(1)).await;
    a.heartbeat().await.unwrap();
    let mut ra = StepReport::default();
    let a_started = a.claim_and_start(1, &mut ra).await.unwrap();
    assert_eq!(a_started.len(), 1);
    // A row left prepared under A's generation (by another writer: A's
    // own claim starts at once).
    let prepared_by_a = app.create(&token, "r2", &refund(2)).await;
    assert_eq!(prepare(&app.pool, &[&prepared_by_a]).await, 1);

    // B cannot take a live lease; after it lapses, B takes generation 2.
    b.heartbeat().await.unwrap();
    assert!(b.held().is_empty());
    tokio::time::sleep(ttl + Duration::from_millis(200)).await;
    b.heartbeat().await.unwrap();
    assert_eq!(b.held()["payments"].generation, 2);
    // B adopted the prepared row: no effect had been attempted.
    let adopted = command(&app, &token, &prepared_by_a).await;
    assert_eq!(
        (
            adopted["state"].as_str(),
            adopted["authority"]["generation"].as_i64()
        ),
        (Some("prepared"), Some(2))
    );
    assert_eq!(
        history(&app, &token, &prepared_by_a).await,
        ["pending", "prepared", "prepared"]
    );

    // B runs its own work under generation 2; the sink learns generation 2.
    let fresh = app.create(&token, "r3", &refund(3)).await;
    let rb = b.run_once().await.unwrap();
    assert_eq!(rb.applied, 2, "the adopted command and the fresh one");
    assert_eq!(command(&app, &token, &fresh).await["state"], "applied");

    // A wakes up: it cannot start what it prepared, its stale dispatch is
    // refused by the sink, and its outcome write is fenced out.
    let mut ra = StepReport::default();
    assert!(a.start_prepared(10, &mut ra).await.unwrap().is_empty());
    let done = a.execute(a_started).await;
    assert_eq!(
        done[0].outcome.state(),
        command_ledger::domain::CommandState::Failed,
        "the sink refused generation 1"
    );
    a.record_outcomes(done, &mut ra).await;
    assert_eq!(ra.fenced, 1);
    assert_eq!(a.stats().fenced.load(Ordering::Relaxed), 1);
    assert_eq!(
        command(&app, &token, &started_by_a).await["state"],
        "effect_started",
        "left for recovery, not overwritten"
    );
    assert_eq!(sink.count("fenced"), 1);
    // And A's heartbeat finds the lease gone: it claims nothing more.
    a.heartbeat().await.unwrap();
    let _ = app.create(&token, "r4", &refund(4)).await;
    let mut ra = StepReport::default();
    assert!(a.claim_and_start(10, &mut ra).await.unwrap().is_empty());
    assert_eq!(sink.count("applied"), 2);
}

#[tokio::test]
async fn a_command_pinned_to_a_superseded_generation_expires_unexecuted() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    // Long enough that B's lease, taken at the start of its turn, is still
    // live when the turn claims, on a loaded cluster.
    let ttl = Duration::from_secs(2);
    let a = custodian(
        &app.pool,
        &["agent-7"],
        refund_effects(&sink.url, 5 * SECOND),
        ttl,
    );
    a.heartbeat().await.unwrap();
    let authority: Value = app
        .get(&token, "/v1/authorities/agent-7")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(authority["generation"], 1);
    assert_eq!(authority["leased"], true);

    let mut pinned = refund(5);
    pinned["authority"] = json!({"id": "agent-7", "generation": 1});
    let id = app.create(&token, "pinned", &pinned).await;
    assert_eq!(
        command(&app, &token, &id).await["authority"],
        json!({"id": "agent-7", "generation": 1, "pinned": true})
    );
    // A pinned request is a different request from an unpinned one.
    let mut unpinned = refund(5);
    unpinned["authority"] = json!("agent-7");
    problem(
        app.submit(&token, Some("pinned"), &unpinned).await,
        422,
        "/problems/idempotency-key-conflict",
    )
    .await;

    a.release_leases().await;
    let b = custodian(
        &app.pool,
        &["agent-7"],
        refund_effects(&sink.url, 5 * SECOND),
        ttl,
    );
    let report = b.run_once().await.unwrap();
    assert_eq!((report.expired, report.started), (1, 0));
    let cmd = command(&app, &token, &id).await;
    assert_eq!(
        (cmd["state"].as_str(), cmd["error"]["reason"].as_str()),
        (Some("expired"), Some("authority_superseded"))
    );
    assert_eq!(history(&app, &token, &id).await, ["pending", "expired"]);
    assert_eq!(sink.requests(), 0);

    problem(
        app.get(&token, "/v1/authorities/nobody").await,
        404,
        "/problems/not-found",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_waiters_receive_the_same_terminal_body() {
    let (app, token, sink, c) = rig(Mode::Ok).await;
    let id = app.create(&token, "r1", &refund(1)).await;

    let mut waiters = Vec::new();
    for _ in 0..20 {
        let (client, url, token) = (
            app.client.clone(),
            app.url(&format!("/v1/commands/{id}?wait=30")),
            token.clone(),
        );
        waiters.push(tokio::spawn(async move {
            let started = std::time::Instant::now();
            let resp = client.get(url).bearer_auth(token).send().await.unwrap();
            assert_eq!(resp.headers()["preference-applied"], "wait=30");
            (resp.text().await.unwrap(), started.elapsed())
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.run_once().await.unwrap();
    let mut bodies = Vec::new();
    for w in waiters {
        let (body, elapsed) = w.await.unwrap();
        assert!(
            elapsed < Duration::from_secs(10),
            "woken by the outcome, not by the end of the wait"
        );
        bodies.push(body);
    }
    let first: Value = serde_json::from_str(&bodies[0]).unwrap();
    assert_eq!(first["state"], "applied");
    assert!(
        bodies.iter().all(|b| *b == bodies[0]),
        "every waiter got the same body"
    );
    assert_eq!(sink.count("applied"), 1, "twenty waiters, one execution");
}

#[tokio::test]
async fn a_wait_that_ends_first_returns_the_current_state() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let id = app.create(&token, "r1", &refund(1)).await;
    let started = std::time::Instant::now();
    let resp = app.get(&token, &format!("/v1/commands/{id}?wait=1")).await;
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(resp.headers()["preference-applied"], "wait=1");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["state"], "pending");
    for bad in ["soon", "86401", "-1", "1.5"] {
        problem(
            app.get(&token, &format!("/v1/commands/{id}?wait={bad}"))
                .await,
            400,
            "/problems/invalid-query",
        )
        .await;
    }
}

/// The loop wakes on the API's NOTIFY, not on its poll (set to a minute here),
/// and `Prefer: wait` returns the outcome in the submit response.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_running_custodian_is_woken_by_a_submission_and_the_submitter_gets_the_outcome() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let mut config = command_ledger::custodian::CustodianConfig::new(vec!["payments".into()]);
    config.poll_interval = Duration::from_secs(60);
    let c = std::sync::Arc::new(command_ledger::custodian::Custodian::new(
        crate::harness::as_role(&app.pool, command_ledger::db::roles::ServiceRole::Custodian),
        crate::harness::ledger_backend(),
        config,
        refund_effects(&sink.url, 5 * SECOND),
    ));
    let running = Running::start(&c);
    // Let the loop take its lease and start listening.
    for _ in 0..50 {
        if !c.held().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    for i in 0..3 {
        let started = std::time::Instant::now();
        let resp = app
            .client
            .post(app.url("/v1/commands"))
            .bearer_auth(&token)
            .header("Idempotency-Key", format!("w{i}"))
            .header("Prefer", "wait=20")
            .json(&refund(i))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 202);
        assert_eq!(resp.headers()["preference-applied"], "wait=20");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["state"], "applied", "{body}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "woken by NOTIFY, not the 60 s poll"
        );
    }
    running.stop(30 * SECOND).await;
    assert_eq!(
        lease_holder(&app, "payments").await,
        None,
        "the lease is released on shutdown"
    );
    assert_eq!(sink.count("applied"), 3);
}

/// A concurrent writer makes the SERIALIZABLE record conflict; the
/// custodian retries, counts the retry, and records the outcome once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serialization_conflicts_are_retried_and_counted() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let c = std::sync::Arc::new(custodian(
        &app.pool,
        &["payments"],
        refund_effects(&sink.url, 5 * SECOND),
        10 * SECOND,
    ));
    let id = app.create(&token, "r1", &refund(1)).await;
    c.heartbeat().await.unwrap();
    let mut report = StepReport::default();
    let started = c.claim_and_start(10, &mut report).await.unwrap();
    assert_eq!(started.len(), 1);
    let done = c.execute(started).await;

    // Another transaction holds the row with an update it has not committed.
    let mut other = app.pool.begin().await.unwrap();
    sqlx::query("update commands set deadline_at = deadline_at where id = $1::uuid")
        .bind(&id)
        .execute(&mut *other)
        .await
        .unwrap();
    let recorder = {
        let c = std::sync::Arc::clone(&c);
        tokio::spawn(async move {
            let mut report = StepReport::default();
            c.record_outcomes(done, &mut report).await;
            report
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    other.commit().await.unwrap();
    let recorded = recorder.await.unwrap();
    assert_eq!(recorded.applied, 1, "{recorded:?}");
    assert!(c.stats().serialization_retries.load(Ordering::Relaxed) >= 1);
    assert_eq!(
        history(&app, &token, &id).await,
        ["pending", "prepared", "effect_started", "applied"]
    );
}

/// A shutdown stops claiming and waits out its grace period: an effect that
/// answered is recorded as it answered, one still running is recorded
/// `ambiguous` (reason `shutdown`), and the lease is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shutdown_records_what_answered_and_makes_the_rest_ambiguous() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let hanging = TestSink::start(Mode::Hang).await;
    let ok = TestSink::start(Mode::Ok).await;
    let mut effects = refund_effects(&hanging.url, 60 * SECOND);
    let answering = command_ledger::custodian::http_executor::HttpExecutor::new(
        format!("{}/refunds", ok.url),
        Default::default(),
        5 * SECOND,
    )
    .unwrap();
    effects.register("charge", answering, 5 * SECOND);
    let mut config = command_ledger::custodian::CustodianConfig::new(vec!["payments".into()]);
    config.shutdown_grace = SECOND;
    let c = std::sync::Arc::new(command_ledger::custodian::Custodian::new(
        crate::harness::as_role(&app.pool, command_ledger::db::roles::ServiceRole::Custodian),
        crate::harness::ledger_backend(),
        config,
        effects,
    ));
    let hung = app.create(&token, "hangs", &refund(1)).await;
    let mut charge = refund(2);
    charge["kind"] = json!("charge");
    let answered = app.create(&token, "answers", &charge).await;

    let running = Running::start(&c);
    for _ in 0..100 {
        if hanging.requests() == 1 && command(&app, &token, &answered).await["state"] == "applied" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        command(&app, &token, &hung).await["state"],
        "effect_started"
    );
    // The shutdown ends after its one-second grace period.
    running.stop(10 * SECOND).await;

    let cmd = command(&app, &token, &hung).await;
    assert_eq!(cmd["state"], "ambiguous", "{cmd}");
    assert_eq!(cmd["error"]["reason"], "shutdown");
    assert_eq!(command(&app, &token, &answered).await["state"], "applied");
    assert_eq!(
        lease_holder(&app, "payments").await,
        None,
        "the lease is released on shutdown"
    );
    assert_eq!(hanging.requests(), 1, "dispatched once, never again");
}

/// A backlog that keeps every claim full starves neither the lease heartbeat
/// nor the shutdown: the custodian keeps its one lease (generation 1) and
/// stops promptly with work left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_backlog_starves_neither_the_heartbeat_nor_the_shutdown() {
    let app = TestApp::spawn().await;
    app.token("dev", Role::Device).await;
    let scope: uuid::Uuid = sqlx::query_scalar("select id from principals where name = 'dev'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    sqlx::query(
        "insert into commands (id, scope, idempotency_key, request_digest, digest_version, \
         kind, authority_id, args, canonical, intent_digest) \
         select gen_random_uuid(), $1, 'backlog-' || i, sha256(i::text::bytea), 2, 'noop', 'busy', \
         '{}', '{}', sha256(i::text::bytea) from generate_series(1, 20000) as i",
    )
    .bind(scope)
    .execute(&app.pool)
    .await
    .unwrap();
    let mut config = command_ledger::custodian::CustodianConfig::new(vec!["busy".into()]);
    // On Citus each renewal is a distributed statement, and with the suite
    // running beside it on two cores one renewal once took longer than
    // 1.5 s (the lease was retaken: generation 2) though nothing starved
    // it; there the lease lasts twice as long and the run is longer.
    let (ttl, run) = if crate::harness::citus() {
        (3 * SECOND, 6 * SECOND)
    } else {
        (Duration::from_millis(1500), 4 * SECOND)
    };
    config.lease_ttl = ttl;
    config.heartbeat = Duration::from_millis(300);
    config.batch_size = 1;
    let c = std::sync::Arc::new(command_ledger::custodian::Custodian::new(
        crate::harness::as_role(&app.pool, command_ledger::db::roles::ServiceRole::Custodian),
        crate::harness::ledger_backend(),
        config,
        command_ledger::custodian::Effects::default(),
    ));
    let running = Running::start(&c);
    tokio::time::sleep(run).await;
    let busy = |states: &'static [&'static str]| {
        sqlx::query_scalar::<_, i64>(
            "select count(*) from commands where authority_id = 'busy' and state = any($1)",
        )
        .bind(states)
        .fetch_one(&app.pool)
    };
    assert!(
        busy(&["pending"]).await.unwrap() > 0,
        "the backlog outlasts the test"
    );
    assert!(
        busy(&["applied"]).await.unwrap() > 0,
        "the custodian was working"
    );

    // The shutdown is noticed with work left.
    running.stop(5 * SECOND).await;
    let generation: i64 =
        sqlx::query_scalar("select generation from authorities where id = 'busy'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        generation, 1,
        "the lease was renewed all along, never retaken"
    );
    assert_eq!(c.stats().leases_acquired.load(Ordering::Relaxed), 1);
    let left: Vec<(String, i64)> = sqlx::query_as(
        "select state, count(*) from commands where authority_id = 'busy' \
         and state in ('prepared', 'effect_started', 'ambiguous') group by state",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        left,
        vec![],
        "everything started was recorded as it answered"
    );
}

/// A row another writer left prepared under the lease's generation (an
/// operator's SQL, an older release's claim that died before its start) is
/// started by a later turn's pass over every leased authority, which runs
/// once per half lease, not on every turn.
#[tokio::test]
async fn a_prepared_row_whose_start_never_came_is_started_by_the_periodic_pass() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let c = custodian(
        &app.pool,
        &["payments"],
        refund_effects(&sink.url, 5 * SECOND),
        4 * SECOND,
    );
    c.heartbeat().await.unwrap();
    let mut report = StepReport::default();
    // The first turn makes the pass (nothing to start yet).
    assert!(c.claim_and_start(10, &mut report).await.unwrap().is_empty());
    let id = app.create(&token, "r1", &refund(1)).await;
    assert_eq!(prepare(&app.pool, &[&id]).await, 1);
    // Not on every turn: the next turn claims from the queue only.
    assert!(c.claim_and_start(10, &mut report).await.unwrap().is_empty());
    // Half a lease later, the lease kept alive, the pass starts it.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    c.heartbeat().await.unwrap();
    let started = c.claim_and_start(10, &mut report).await.unwrap();
    assert_eq!(started.len(), 1, "the prepared row was not started");
    let done = c.execute(started).await;
    c.record_outcomes(done, &mut report).await;
    assert_eq!(command(&app, &token, &id).await["state"], "applied");
    assert_eq!(sink.requests(), 1);
}

/// What `serve` and `custodian` start (`spawn_custodian`) runs on a runtime
/// of its own: with the caller's runtime blocked outright (this test's one
/// thread asleep), a pending command is still claimed, started and applied.
/// On the caller's runtime, nothing of the custodian ran until it woke.
#[tokio::test]
async fn the_custodian_runs_on_a_runtime_of_its_own() {
    let pool = crate::harness::fresh_pool().await;
    let id = crate::storage::insert_commands(&pool, "apart", 1).await[0];
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let custodian_pool =
        crate::harness::as_role(&pool, command_ledger::db::roles::ServiceRole::Custodian);
    let (task, _stats) = command_ledger::cli::spawn_custodian(
        &custodian_pool,
        crate::harness::ledger_backend(),
        command_ledger::custodian::CustodianConfig::new(vec!["apart".into()]),
        command_ledger::custodian::Effects::default(),
        async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        },
    )
    .await
    .unwrap();

    // Block this runtime's only thread: nothing spawned on it can run.
    std::thread::sleep(Duration::from_secs(4));
    let woke = chrono::Utc::now();

    let (state, finished): (String, Option<chrono::DateTime<chrono::Utc>>) =
        sqlx::query_as("select state, finished_at from commands where id = $1")
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(state, "applied");
    let finished = finished.expect("an applied command has finished");
    assert!(
        finished < woke,
        "applied at {finished}, while the caller's runtime was blocked (until {woke})"
    );
    stop.send(true).unwrap();
    tokio::time::timeout(30 * SECOND, task)
        .await
        .expect("the custodian stops in time")
        .unwrap()
        .unwrap();
}

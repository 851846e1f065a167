//! Waking waiting clients: every way a command becomes terminal announces it
//! on the outcome channel the API listens to, on one node (the trigger, in
//! the commit) and on Citus (whoever committed, right after the commit); a
//! waiter is woken by that, not by a poll; and an outcome whose notification
//! was lost still ends the wait, by the fallback re-read.

use crate::harness::{
    TestApp, TestSink, as_role, custodian, fresh_database, refund, refund_effects, serve_state,
};
use command_ledger::custodian::StepReport;
use command_ledger::custodian::recovery::Recovery;
use command_ledger::db::Role;
use command_ledger::db::notify::OUTCOME_CHANNEL;
use command_ledger::db::roles::ServiceRole;
use command_ledger::demo_sink::Mode;
use command_ledger::http::AppState;
use serde_json::{Value, json};
use sqlx::postgres::PgListener;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

const SECOND: Duration = Duration::from_secs(1);

/// What the API's listener hears, heard by the test.
struct Announcements {
    listener: PgListener,
    heard: HashSet<String>,
}

impl Announcements {
    async fn listen(app: &TestApp) -> Self {
        let mut listener = PgListener::connect_with(&app.pool).await.unwrap();
        listener.listen(OUTCOME_CHANNEL).await.unwrap();
        Announcements {
            listener,
            heard: HashSet::new(),
        }
    }

    /// Waits until `id` is announced (or was, among what came meanwhile).
    async fn expect(&mut self, id: &str, how: &str) {
        let deadline = tokio::time::Instant::now() + 10 * SECOND;
        while !self.heard.contains(id) {
            let heard = tokio::time::timeout_at(deadline, self.listener.recv())
                .await
                .unwrap_or_else(|_| panic!("no outcome notification for {id} ({how})"))
                .unwrap();
            self.heard.insert(heard.payload().to_owned());
        }
    }
}

async fn state_of(app: &TestApp, id: &str) -> String {
    sqlx::query_scalar("select state from commands where id = $1::uuid")
        .bind(id)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

/// The lease of `authority` lapses, as if its holder had died.
async fn lease_dies(app: &TestApp, authority: &str) {
    sqlx::query(
        "update authorities set lease_expires_at = now() - interval '1 second' where id = $1",
    )
    .bind(authority)
    .execute(&app.pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn every_way_a_custodian_ends_a_command_wakes_its_waiters() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let mut heard = Announcements::listen(&app).await;
    let c = custodian(
        &app.pool,
        &["payments"],
        refund_effects(&sink.url, 5 * SECOND),
        10 * SECOND,
    );

    // Recorded: the effect's outcome.
    let applied = app.create(&token, "applied", &refund(1)).await;
    // Expired by the claim: its deadline passed before anyone started it.
    let mut overdue = refund(2);
    overdue["deadline"] = json!((chrono::Utc::now() - chrono::Duration::seconds(1)).to_rfc3339());
    let expired_at_claim = app.create(&token, "late", &overdue).await;
    let report = c.run_once().await.unwrap();
    assert_eq!((report.applied, report.expired), (1, 1), "{report:?}");
    heard.expect(&applied, "recorded").await;
    heard
        .expect(&expired_at_claim, "expired by the claim")
        .await;

    // Expired by the start: prepared (by another writer: the claim starts
    // at once), then its deadline passed.
    let expired_at_start = app.create(&token, "late-start", &refund(3)).await;
    let mut report = StepReport::default();
    assert_eq!(
        crate::harness::prepare(&app.pool, &[&expired_at_start]).await,
        1
    );
    sqlx::query(
        "update commands set deadline_at = now() - interval '1 second' where id = $1::uuid",
    )
    .bind(&expired_at_start)
    .execute(&app.pool)
    .await
    .unwrap();
    assert!(c.start_prepared(10, &mut report).await.unwrap().is_empty());
    assert_eq!(state_of(&app, &expired_at_start).await, "expired");
    heard
        .expect(&expired_at_start, "expired by the start")
        .await;
}

#[tokio::test]
async fn every_way_recovery_or_a_cancel_ends_a_command_wakes_its_waiters() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let mut heard = Announcements::listen(&app).await;
    let recovery = || {
        Recovery::new(
            as_role(&app.pool, ServiceRole::Custodian),
            crate::harness::ledger_backend(),
            Arc::new(refund_effects(&sink.url, 5 * SECOND)),
            "recovery:test".into(),
        )
    };

    // Cancelled through the API.
    let cancelled = app.create(&token, "cancel-me", &refund(1)).await;
    let resp = app
        .post(&token, &format!("/v1/commands/{cancelled}/cancel"))
        .await;
    assert_eq!(resp.status(), 200);
    heard.expect(&cancelled, "cancelled").await;

    // Expired by recovery: overdue and never claimed.
    let overdue = app.create(&token, "overdue", &refund(2)).await;
    sqlx::query(
        "update commands set deadline_at = now() - interval '1 second' where id = $1::uuid",
    )
    .bind(&overdue)
    .execute(&app.pool)
    .await
    .unwrap();
    assert_eq!(recovery().run_once().await.unwrap().expired, 1);
    heard.expect(&overdue, "expired by recovery").await;

    // Resolved by recovery: started by a custodian that died before its
    // effect ran (the executor's probe has no reconcile URL: ambiguous).
    let c = custodian(
        &app.pool,
        &["payments"],
        refund_effects(&sink.url, 5 * SECOND),
        10 * SECOND,
    );
    let started = app.create(&token, "started", &refund(3)).await;
    c.heartbeat().await.unwrap();
    let mut report = StepReport::default();
    assert_eq!(c.claim_and_start(10, &mut report).await.unwrap().len(), 1);
    lease_dies(&app, "payments").await;
    assert_eq!(recovery().run_once().await.unwrap().ambiguous, 1);
    heard.expect(&started, "resolved by recovery").await;
}

/// On Citus the API re-reads its waiters' commands only as a fallback, at
/// long intervals (`http::wait::REREAD_FALLBACK`); a waiter is woken by its
/// command's outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_is_woken_by_its_outcome_not_by_a_poll() {
    let (_, pool) = fresh_database().await;
    let state = AppState::new(
        as_role(&pool, ServiceRole::Api),
        crate::harness::ledger_backend(),
        command_ledger::domain::admission::Policies::default(),
    );
    let waiters = state.waiters.clone();
    let addr = serve_state(state).await;
    let client = reqwest::Client::new();
    let token = command_ledger::cli::issue_token(&pool, "dev", Role::Device, None)
        .await
        .unwrap();
    let resp = client
        .post(format!("http://{addr}/v1/commands"))
        .bearer_auth(&token)
        .header("Idempotency-Key", "k")
        .json(&refund(1))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let id: Value = resp.json().await.unwrap();
    let id = id["id"].as_str().unwrap().to_owned();
    // The listener has connected (and, on Citus, started its fallback).
    tokio::time::sleep(SECOND).await;

    let mut subscription = waiters.subscribe(id.parse().unwrap());
    let mut wakes = 0;
    let quiet = tokio::time::sleep(2 * SECOND);
    tokio::pin!(quiet);
    loop {
        tokio::select! {
            () = subscription.changed() => wakes += 1,
            () = &mut quiet => break,
        }
    }
    assert!(
        wakes <= 1,
        "woken {wakes} times in 2 s while its command was pending"
    );

    let resp = client
        .post(format!("http://{addr}/v1/commands/{id}/cancel"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    tokio::time::timeout(2 * SECOND, subscription.changed())
        .await
        .expect("woken by the cancel's notification");
}

/// A command finished by SQL typed by hand: on Citus nothing announces it
/// (the shards' triggers cannot), as when a process dies between its commit
/// and its notification. The waiter still learns the outcome well before
/// its wait ends, from the fallback re-read.
#[tokio::test]
async fn an_outcome_whose_notification_was_lost_still_ends_the_wait() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let id = app.create(&token, "k", &refund(1)).await;
    let waiter = {
        let (client, url, token) = (
            app.client.clone(),
            app.url(&format!("/v1/commands/{id}?wait=30")),
            token.clone(),
        );
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let body: Value = client
                .get(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            (body, started.elapsed())
        })
    };
    tokio::time::sleep(SECOND / 2).await;
    sqlx::query(
        "update commands set state = 'cancelled', error = '{\"reason\": \"cancelled\"}' \
         where authority_id = 'payments' and id = $1::uuid",
    )
    .bind(&id)
    .execute(&app.pool)
    .await
    .unwrap();
    let (body, elapsed) = waiter.await.unwrap();
    assert_eq!(body["state"], "cancelled", "{body}");
    assert!(
        elapsed < 15 * SECOND,
        "answered by the fallback within its interval, not at the end of the wait: {elapsed:?}"
    );
}

//! Failures that free their intent (`on_failure = "release"`, the default):
//! after `failed`, `expired` or `cancelled`, the next request of the intent
//! from another run records a new command, linked to the one it retries;
//! the same run asking again still sees its failure; `ambiguous` never frees
//! itself; `on_failure = "replay"` keeps the failure.

use crate::admission::invoke_nowait;
use crate::harness::{TestApp, TestSink, custodian, refund_effects};
use command_ledger::db::Role;
use command_ledger::demo_sink::Mode;
use command_ledger::domain::admission::Policies;
use command_ledger::domain::admission::{KeyMode, KindPolicy, NearDuplicate, OnFailure};
use serde_json::{Value, json};
use std::time::Duration;

fn policies(on_failure: OnFailure) -> Policies {
    let mut p = Policies::default();
    p.set(
        "refund",
        KindPolicy {
            key: KeyMode::Fingerprint,
            authority: Some("payments".into()),
            window: Duration::from_secs(5),
            near_duplicate: NearDuplicate::Hold,
            on_failure,
            ..KindPolicy::default()
        },
    );
    p
}

fn refund(run: &str) -> Value {
    json!({"tool": "refund", "runId": run, "args": {"to": "ada@example.com", "amount": "12.00 USD"}})
}

/// An address where nothing listens: a request to it is never sent.
async fn nowhere() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    url
}

async fn state(app: &TestApp, token: &str, id: &Value) -> Value {
    app.get(token, &format!("/v1/commands/{}", id.as_str().unwrap()))
        .await
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_definite_failure_frees_its_intent_for_the_next_run() {
    let app = TestApp::spawn_with(policies(OnFailure::Release)).await;
    let agent = app.token("agent", Role::Device).await;
    let timeout = Duration::from_secs(5);

    // The first attempt is never dispatched: failed, not_dispatched.
    let (_, first) = invoke_nowait(&app, &agent, &refund("run-1")).await;
    let broken = custodian(
        &app.pool,
        &["payments"],
        refund_effects(&nowhere().await, timeout),
        timeout,
    );
    broken.run_once().await.unwrap();
    broken.release_leases().await;
    let failed = state(&app, &agent, &first["command_id"]).await;
    assert_eq!(failed["state"], "failed", "{failed}");
    assert_eq!(failed["error"]["reason"], "not_dispatched");

    // The same run asking again still sees the failure it saw ...
    let (_, same) = invoke_nowait(&app, &agent, &refund("run-1")).await;
    assert_eq!(
        (
            same["outcome"].as_str(),
            &same["command_id"],
            same["state"].as_str()
        ),
        (Some("replay"), &first["command_id"], Some("failed"))
    );
    // ... and the next run executes it: a new command, linked to the failed one.
    let sink = TestSink::start(Mode::Ok).await;
    let (status, retry) = invoke_nowait(&app, &agent, &refund("run-2")).await;
    assert_eq!(status, 202, "{retry}");
    assert_ne!(retry["command_id"], first["command_id"]);
    custodian(
        &app.pool,
        &["payments"],
        refund_effects(&sink.url, timeout),
        timeout,
    )
    .run_once()
    .await
    .unwrap();
    let applied = state(&app, &agent, &retry["command_id"]).await;
    assert_eq!(applied["state"], "applied", "{applied}");
    assert_eq!(applied["retry_of"], first["command_id"]);
    assert_eq!(sink.count("applied"), 1);

    // Once applied, the intent is guarded again: a third run is held.
    let (_, third) = invoke_nowait(&app, &agent, &refund("run-3")).await;
    assert_eq!(third["outcome"], "replay", "inside the window: {third}");
    assert_eq!(third["command_id"], retry["command_id"]);
}

#[tokio::test]
async fn a_cancelled_or_expired_intent_is_free_and_a_keyless_retry_without_run_runs_again() {
    let app = TestApp::spawn_with(policies(OnFailure::Release)).await;
    let agent = app.token("agent", Role::Device).await;
    // No custodian: the command waits, and is cancelled.
    let (_, first) = invoke_nowait(&app, &agent, &refund("run-1")).await;
    let id = first["command_id"].as_str().unwrap();
    let resp = app.post(&agent, &format!("/v1/commands/{id}/cancel")).await;
    assert_eq!(resp.status(), 200);
    let (_, second) = invoke_nowait(&app, &agent, &refund("run-2")).await;
    assert_ne!(second["command_id"], first["command_id"]);
    assert_eq!(
        state(&app, &agent, &second["command_id"]).await["retry_of"],
        id
    );

    // Expired (its deadline passed before it started) frees it too.
    let id2 = second["command_id"].as_str().unwrap().to_owned();
    sqlx::query("update commands set state = 'expired', error = '{\"reason\":\"deadline_passed\"}' where id = $1::uuid")
        .bind(&id2)
        .execute(&app.pool)
        .await
        .unwrap();
    let (_, third) = invoke_nowait(&app, &agent, &refund("run-3")).await;
    assert_eq!(
        state(&app, &agent, &third["command_id"]).await["retry_of"],
        id2.as_str()
    );
    // The link is the database's to keep: it cannot be rewritten by hand.
    let rewrite = sqlx::query(
        "update commands set retry_of = null where state = 'pending' and retry_of is not null",
    )
    .execute(&app.pool)
    .await
    .unwrap_err();
    assert_eq!(
        rewrite
            .as_database_error()
            .and_then(|e| e.code())
            .as_deref(),
        Some("CL003")
    );

    // Keyless POST /v1/commands names no run: after a cancel, the same
    // request runs again instead of replaying the cancel.
    let body = json!({"kind": "refund", "authority": "payments", "args": {"to": "bob@example.com", "amount": "1 USD"}});
    let a: Value = app.submit(&agent, None, &body).await.json().await.unwrap();
    app.post(
        &agent,
        &format!("/v1/commands/{}/cancel", a["id"].as_str().unwrap()),
    )
    .await;
    let b = app.submit(&agent, None, &body).await;
    assert_eq!(b.status(), 202);
    let b: Value = b.json().await.unwrap();
    assert_eq!(
        (b["disposition"].as_str(), &b["retry_of"]),
        (Some("new"), &a["id"])
    );
}

#[tokio::test]
async fn ambiguous_never_frees_its_intent_and_replay_kinds_keep_their_failures() {
    let app = TestApp::spawn_with(policies(OnFailure::Release)).await;
    let agent = app.token("agent", Role::Device).await;
    let sink = TestSink::start(Mode::Hang).await;
    let timeout = Duration::from_millis(500);
    let (_, first) = invoke_nowait(&app, &agent, &refund("run-1")).await;
    custodian(
        &app.pool,
        &["payments"],
        refund_effects(&sink.url, timeout),
        Duration::from_secs(5),
    )
    .run_once()
    .await
    .unwrap();
    assert_eq!(
        state(&app, &agent, &first["command_id"]).await["state"],
        "ambiguous"
    );
    // Inside the window: the same command; after it: held for a human.
    let (_, again) = invoke_nowait(&app, &agent, &refund("run-2")).await;
    assert_eq!(
        (again["outcome"].as_str(), &again["command_id"]),
        (Some("replay"), &first["command_id"])
    );
    assert_eq!(app.command_count().await, 1);

    // on_failure = "replay": a failure is replayed to every run in the window.
    let app = TestApp::spawn_with(policies(OnFailure::Replay)).await;
    let agent = app.token("agent", Role::Device).await;
    let (_, first) = invoke_nowait(&app, &agent, &refund("run-1")).await;
    app.post(
        &agent,
        &format!(
            "/v1/commands/{}/cancel",
            first["command_id"].as_str().unwrap()
        ),
    )
    .await;
    let (_, again) = invoke_nowait(&app, &agent, &refund("run-2")).await;
    assert_eq!(
        (again["outcome"].as_str(), &again["command_id"]),
        (Some("replay"), &first["command_id"])
    );
    assert_eq!(app.command_count().await, 1);
}

//! Fleets: principals that share one dedup space. Two agents of one fleet
//! racing one intent make one execution; two fleets make two; reads follow
//! the scope, and another fleet's command stays a 404.

use crate::admission::{invoke_nowait, spellings, start_custodian};
use crate::harness::{TestApp, TestSink, problem, refund_policy};
use command_ledger::db::Role;
use command_ledger::demo_sink::Mode;
use command_ledger::domain::admission::{DedupScope, KeyMode, KindPolicy, NearDuplicate};
use serde_json::{Value, json};
use std::time::Duration;

async fn fleet_token(app: &TestApp, name: &str, fleet: &str) -> String {
    command_ledger::cli::issue_token_in(&app.pool, name, Role::Device, Some(fleet), None)
        .await
        .unwrap()
}

/// Sends the three spellings at once, the i-th with `tokens[i]`, waits
/// until all three are admitted, then lets a custodian run them. Returns
/// the three answers.
async fn race(app: &TestApp, sink: &TestSink, tokens: [&str; 3]) -> Vec<Value> {
    let answers = futures_join(app, tokens).await;
    let (_c, stop) = start_custodian(app, sink).await;
    let operator = app.token("ops-reader", Role::Operator).await;
    let mut settled = Vec::new();
    for a in answers {
        let id = a["command_id"].as_str().unwrap().to_owned();
        let done: Value = app
            .get(&operator, &format!("/v1/commands/{id}?wait=20"))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(done["state"], "applied", "{done}");
        settled.push(a);
    }
    let _ = stop.send(());
    settled
}

async fn futures_join(app: &TestApp, tokens: [&str; 3]) -> Vec<Value> {
    let calls: Vec<_> = spellings()
        .into_iter()
        .zip(tokens)
        .map(|(body, token)| {
            let (client, url, token) =
                (app.client.clone(), app.url("/v1/invoke"), token.to_owned());
            tokio::spawn(async move {
                let resp = client
                    .post(url)
                    .bearer_auth(token)
                    .header("Prefer", "wait=0")
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status(), 202);
                resp.json::<Value>().await.unwrap()
            })
        })
        .collect();
    let mut answers = Vec::new();
    for c in calls {
        answers.push(c.await.unwrap());
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_agents_of_one_fleet_racing_three_spellings_make_one_execution() {
    let app = TestApp::spawn_with(refund_policy(Duration::from_secs(5), NearDuplicate::Hold)).await;
    let sink = TestSink::start(Mode::Ok).await;
    let a1 = fleet_token(&app, "agent-1", "checkout").await;
    let a2 = fleet_token(&app, "agent-2", "checkout").await;

    let answers = race(&app, &sink, [&a1, &a2, &a1]).await;
    let ids: Vec<&Value> = answers.iter().map(|a| &a["command_id"]).collect();
    assert!(
        ids.iter().all(|id| *id == ids[0]),
        "one command: {answers:?}"
    );
    assert_eq!(sink.count("applied"), 1);
    assert_eq!(app.command_count().await, 1);

    // Every member of the fleet reads it, cancels under the same rule, and
    // a retry by either is a replay of the same command.
    let id = ids[0].as_str().unwrap();
    for t in [&a1, &a2] {
        let resp = app.get(t, &format!("/v1/commands/{id}")).await;
        assert_eq!(resp.status(), 200);
        let listed: Value = app.get(t, "/v1/commands").await.json().await.unwrap();
        assert_eq!(listed["items"][0]["id"], id);
    }
    let (_, replay) = invoke_nowait(&app, &a2, &spellings()[1]).await;
    assert_eq!(
        (replay["outcome"].as_str(), replay["command_id"].as_str()),
        (Some("replay"), Some(id))
    );

    // Another fleet never sees it.
    let outsider = fleet_token(&app, "agent-9", "elsewhere").await;
    problem(
        app.get(&outsider, &format!("/v1/commands/{id}")).await,
        404,
        "/problems/not-found",
    )
    .await;
    problem(
        app.post(&outsider, &format!("/v1/commands/{id}/cancel"))
            .await,
        404,
        "/problems/not-found",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_fleets_sending_one_intent_make_two_executions() {
    let app = TestApp::spawn_with(refund_policy(Duration::from_secs(5), NearDuplicate::Hold)).await;
    let sink = TestSink::start(Mode::Ok).await;
    let a = fleet_token(&app, "agent-a", "fleet-a").await;
    let b = fleet_token(&app, "agent-b", "fleet-b").await;

    let answers = race(&app, &sink, [&a, &b, &a]).await;
    assert_eq!(answers[0]["command_id"], answers[2]["command_id"]);
    assert_ne!(answers[0]["command_id"], answers[1]["command_id"]);
    assert_eq!(sink.count("applied"), 2);
    assert_eq!(app.command_count().await, 2);
}

#[tokio::test]
async fn a_principal_scoped_kind_keeps_each_member_in_its_own_space() {
    let mut policies = refund_policy(Duration::from_secs(5), NearDuplicate::Hold);
    policies.set(
        "refund",
        KindPolicy {
            key: KeyMode::Fingerprint,
            authority: Some("payments".into()),
            dedup_scope: DedupScope::Principal,
            ..KindPolicy::default()
        },
    );
    let app = TestApp::spawn_with(policies).await;
    let a1 = fleet_token(&app, "agent-1", "checkout").await;
    let a2 = fleet_token(&app, "agent-2", "checkout").await;
    let (_, first) = invoke_nowait(&app, &a1, &spellings()[0]).await;
    let (_, second) = invoke_nowait(&app, &a2, &spellings()[1]).await;
    assert_ne!(first["command_id"], second["command_id"]);
    // Keys too: the same key from two members is two commands.
    let body = json!({"kind": "refund", "authority": "payments", "args": {"to": "a@b.co", "amount": "1 USD"}});
    let x = app.create(&a1, "k-1", &body).await;
    let y = app.create(&a2, "k-1", &body).await;
    assert_ne!(x, y);
    // And reads: a principal-scoped command is its principal's alone.
    problem(
        app.get(&a2, &format!("/v1/commands/{x}")).await,
        404,
        "/problems/not-found",
    )
    .await;
}

#[tokio::test]
async fn keys_are_shared_by_a_fleet_and_a_principal_never_changes_fleet() {
    let app = TestApp::spawn().await;
    let a1 = fleet_token(&app, "agent-1", "checkout").await;
    let a2 = fleet_token(&app, "agent-2", "checkout").await;
    let body = json!({"kind": "steer", "authority": "agent-7", "args": {"direction": "left"}});
    let id = app.create(&a1, "steer-1", &body).await;
    let again = app.submit(&a2, Some("steer-1"), &body).await;
    assert_eq!(again.status(), 200);
    let again: Value = again.json().await.unwrap();
    assert_eq!(
        (again["id"].as_str(), again["disposition"].as_str()),
        (Some(id.as_str()), Some("replay"))
    );
    let other = json!({"kind": "steer", "authority": "agent-7", "args": {"direction": "right"}});
    problem(
        app.submit(&a2, Some("steer-1"), &other).await,
        422,
        "/problems/idempotency-key-conflict",
    )
    .await;

    // A principal keeps its fleet: naming another is refused.
    let moved = command_ledger::cli::issue_token_in(
        &app.pool,
        "agent-1",
        Role::Device,
        Some("other"),
        None,
    )
    .await;
    assert!(format!("{:#}", moved.unwrap_err()).contains("checkout"));
    // A principal created without a fleet forms its own, named after it.
    app.token("kiosk-7", Role::Device).await;
    let fleet: String = sqlx::query_scalar(
        "select f.name from principals p join fleets f on f.id = p.fleet_id where p.name = 'kiosk-7'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(fleet, "kiosk-7");
    // Its fleet is its own: its id is the principal's scope, so nobody joins it.
    let joining = command_ledger::cli::issue_token_in(
        &app.pool,
        "kiosk-8",
        Role::Device,
        Some("kiosk-7"),
        None,
    )
    .await;
    assert!(format!("{:#}", joining.unwrap_err()).contains("alone"));
}

//! The operator's command line against a live ledger: the real binary, the
//! test database's URL.

use command_ledger::db::Role;
use command_ledger::domain::admission::NearDuplicate;
use serde_json::{Value, json};
use std::time::Duration;

use crate::harness::{TestApp, refund, refund_policy};

/// Runs the binary against the app's database: (exit success, stdout, stderr).
async fn cli(app: &TestApp, args: &[&str]) -> (bool, String, String) {
    crate::harness::cli(&app.db_url, args).await
}

async fn cli_json(app: &TestApp, args: &[&str]) -> Value {
    let (ok, out, err) = cli(app, args).await;
    assert!(ok, "{args:?} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?} printed no JSON ({e}): {out}"))
}

async fn invoke(app: &TestApp, token: &str, run: &str) -> Value {
    app.client
        .post(app.url("/v1/invoke"))
        .bearer_auth(token)
        .header("Prefer", "wait=0")
        .json(&json!({"tool": "refund", "runId": run,
                      "args": {"to": "ada@example.com", "amount": "12.00 USD"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn commands_list_and_show_answer_from_the_database() {
    let app = TestApp::spawn().await;
    let token = app.token("kiosk-7", Role::Device).await;
    let first = app.create(&token, "k1", &refund(1)).await;
    let second = app.create(&token, "k2", &refund(2)).await;

    let all = cli_json(&app, &["commands", "list", "--json"]).await;
    let ids: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [second.as_str(), first.as_str()], "newest first");

    let pending = cli_json(&app, &["commands", "list", "--state", "pending", "--json"]).await;
    assert_eq!(pending.as_array().unwrap().len(), 2);
    let applied = cli_json(&app, &["commands", "list", "--state", "applied", "--json"]).await;
    assert_eq!(applied, json!([]));
    let recent = cli_json(&app, &["commands", "list", "--since", "1h", "--json"]).await;
    assert_eq!(recent.as_array().unwrap().len(), 2);
    let future = [
        "commands",
        "list",
        "--since",
        "2999-01-01T00:00:00Z",
        "--json",
    ];
    assert_eq!(cli_json(&app, &future).await, json!([]));
    let elsewhere = ["commands", "list", "--authority", "elsewhere", "--json"];
    assert_eq!(cli_json(&app, &elsewhere).await, json!([]));

    let shown = cli_json(&app, &["commands", "show", &first, "--json"]).await;
    assert_eq!(shown["idempotency_key"], "k1");
    assert_eq!(shown["history"][0]["to"], "pending");

    // The human forms.
    let (ok, table, _) = cli(&app, &["commands", "list"]).await;
    assert!(ok);
    assert!(table.starts_with("ID"), "{table}");
    assert!(
        table.contains(&first) && table.contains("pending"),
        "{table}"
    );
    let (ok, text, _) = cli(&app, &["commands", "show", &first]).await;
    assert!(ok);
    assert!(text.contains("key       k1"), "{text}");

    // Bad input is refused, clearly.
    let (ok, _, err) = cli(&app, &["commands", "list", "--since", "lately"]).await;
    assert!(!ok && err.contains("lately"), "{err}");
    let missing = uuid::Uuid::now_v7().to_string();
    let (ok, _, err) = cli(&app, &["commands", "show", &missing]).await;
    assert!(!ok && err.contains("no command"), "{err}");
}

#[tokio::test]
async fn holds_are_listed_released_and_rejected_from_the_command_line() {
    let app = TestApp::spawn_with(refund_policy(Duration::ZERO, NearDuplicate::Hold)).await;
    let agent = app.token("agent-1", Role::Device).await;
    invoke(&app, &agent, "run-1").await;
    let held_a = invoke(&app, &agent, "run-2").await;
    let held_b = invoke(&app, &agent, "run-3").await;
    let (a, b) = (
        held_a["hold_id"].as_str().unwrap(),
        held_b["hold_id"].as_str().unwrap(),
    );

    let open = cli_json(&app, &["holds", "list", "--state", "open", "--json"]).await;
    assert_eq!(open.as_array().unwrap().len(), 2);

    let released = cli_json(
        &app,
        &["holds", "release", a, "--reason", "checked", "--json"],
    )
    .await;
    assert_eq!(released["hold"]["state"], "released");
    assert_eq!(released["hold"]["decided_by"], "cli:ops-alice");
    assert_eq!(released["hold"]["decision_reason"], "checked");
    assert_eq!(released["command"]["state"], "pending");
    assert_eq!(
        released["hold"]["command_id"], released["command"]["id"],
        "the hold names the command it recorded"
    );
    let rejected = cli_json(&app, &["holds", "reject", b, "--json"]).await;
    assert_eq!(rejected["hold"]["state"], "rejected");

    // A decided hold cannot be decided again; nothing more is recorded.
    let before = app.command_count().await;
    let (ok, _, err) = cli(&app, &["holds", "release", b]).await;
    assert!(!ok && err.contains("not open"), "{err}");
    assert_eq!(app.command_count().await, before);
    let open = cli_json(&app, &["holds", "list", "--state", "open", "--json"]).await;
    assert_eq!(open, json!([]));
}

#[tokio::test]
async fn authorities_list_shows_holder_generation_and_expiry() {
    let app = TestApp::spawn().await;
    let ttl = Duration::from_secs(30);
    command_ledger::db::authorities::acquire(&app.pool, "payments", "vm:1:aa", ttl)
        .await
        .unwrap();
    command_ledger::db::authorities::acquire(&app.pool, "payments", "vm:2:bb", ttl)
        .await
        .unwrap();
    let listed = cli_json(&app, &["authorities", "list", "--json"]).await;
    assert_eq!(listed[0]["id"], "payments");
    assert_eq!(
        listed[0]["lease_holder"], "vm:1:aa",
        "a live lease is not taken"
    );
    assert_eq!(listed[0]["generation"], 1);
    assert!(listed[0]["lease_expires_at"].is_string());
    let (ok, table, _) = cli(&app, &["authorities", "list"]).await;
    assert!(
        ok && table.contains("vm:1:aa") && table.contains("held"),
        "{table}"
    );
}

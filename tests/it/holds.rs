//! A hold decided on where its intent stands now, not on where it stood
//! when the hold opened: a hold opened while its intent's command was
//! ambiguous, whose command was then resolved `not_applied` and whose
//! intent another run then applied, says so when listed and shown, and its
//! release is refused (naming the applied command) unless it confirms that
//! command, which the hold then keeps.

use command_ledger::db::Role;
use command_ledger::demo_sink::Mode;
use command_ledger::domain::admission::NearDuplicate;
use serde_json::{Value, json};
use std::time::Duration;

use crate::admission::invoke_nowait;
use crate::harness::{TestApp, TestSink, custodian, refund_effects, refund_policy};

const SECOND: Duration = Duration::from_secs(1);

async fn post(app: &TestApp, token: &str, path: &str, body: Value) -> (u16, Value) {
    let resp = app
        .client
        .post(app.url(path))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

async fn get(app: &TestApp, token: &str, path: &str) -> Value {
    app.get(token, path).await.json().await.unwrap()
}

async fn state(app: &TestApp, id: &str) -> String {
    sqlx::query_scalar("select state from commands where id = $1::uuid")
        .bind(id)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn releasing_a_hold_whose_intent_was_applied_since_needs_that_command_confirmed() {
    let app = TestApp::spawn_with(refund_policy(Duration::ZERO, NearDuplicate::Hold)).await;
    let agent = app.token("agent", Role::Device).await;
    let operator = app.token("ops", Role::Operator).await;
    let run = |run: &str| {
        json!({"tool": "refund", "runId": run,
               "args": {"customer": "kim@example.com", "amount": "3.00 USD"}})
    };

    // Run 1: the provider applies, then drops the connection: ambiguous.
    let lost = TestSink::start(Mode::ResetAfterApply).await;
    let first_custodian = custodian(
        &app.pool,
        &["payments"],
        refund_effects(&lost.url, 5 * SECOND),
        10 * SECOND,
    );
    let (_, first) = invoke_nowait(&app, &agent, &run("run-1")).await;
    let ambiguous = first["command_id"].as_str().unwrap().to_owned();
    first_custodian.run_once().await.unwrap();
    assert_eq!(state(&app, &ambiguous).await, "ambiguous");

    // Run 2 is held: its intent's command is ambiguous.
    let (status, held) = invoke_nowait(&app, &agent, &run("run-2")).await;
    assert_eq!(
        (status, held["outcome"].as_str()),
        (202, Some("held")),
        "{held}"
    );
    let hold = held["hold_id"].as_str().unwrap().to_owned();
    let shown = get(&app, &operator, &format!("/v1/holds/{hold}")).await;
    assert_eq!(shown["hold"]["intent"]["standing"], "current", "{shown}");
    assert_eq!(shown["hold"]["intent"]["resembles_state"], "ambiguous");

    // An operator resolves the ambiguous command: not applied (wrongly,
    // as it happens). The hold's reason has gone, and it says so.
    let (status, _) = post(
        &app,
        &operator,
        &format!("/v1/commands/{ambiguous}/resolution"),
        json!({"outcome": "not_applied", "evidence": "the provider's dashboard shows nothing"}),
    )
    .await;
    assert_eq!(status, 201);
    let shown = get(&app, &operator, &format!("/v1/holds/{hold}")).await;
    let intent = &shown["hold"]["intent"];
    assert_eq!(intent["standing"], "reason_gone", "{shown}");
    assert_eq!(intent["resembles_resolution"], "not_applied");
    assert!(
        intent["note"]
            .as_str()
            .unwrap()
            .contains("resolved not_applied")
    );

    // Run 3 runs the freed intent, under a new custodian: applied.
    let ok = TestSink::start(Mode::Ok).await;
    sqlx::query("update authorities set lease_expires_at = now() - interval '1 second' where id = 'payments'")
        .execute(&app.pool)
        .await
        .unwrap();
    let second_custodian = custodian(
        &app.pool,
        &["payments"],
        refund_effects(&ok.url, 5 * SECOND),
        10 * SECOND,
    );
    let (_, third) = invoke_nowait(&app, &agent, &run("run-3")).await;
    let applied = third["command_id"].as_str().unwrap().to_owned();
    second_custodian.run_once().await.unwrap();
    assert_eq!(state(&app, &applied).await, "applied");

    // Listed and shown, the old hold now names the applied command.
    let listed = get(&app, &operator, "/v1/holds?state=open").await;
    let item = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["id"] == hold.as_str())
        .unwrap()
        .clone();
    assert_eq!(item["intent"]["standing"], "applied_since", "{item}");
    assert_eq!(item["intent"]["applied_since"], applied.as_str());
    assert_eq!(item["intent"]["latest_command"]["id"], applied.as_str());

    // A release without the confirmation is refused, naming it; nothing ran.
    let path = format!("/v1/holds/{hold}/release");
    let (status, problem) = post(&app, &operator, &path, json!({"reason": "looks fine"})).await;
    assert_eq!(status, 409, "{problem}");
    assert_eq!(problem["type"], "/problems/hold-intent-applied");
    assert_eq!(problem["applied_command_id"], applied.as_str());
    // Confirming another command is no confirmation.
    let (status, _) = post(
        &app,
        &operator,
        &path,
        json!({"confirm_applied": ambiguous}),
    )
    .await;
    assert_eq!(status, 409);
    let commands: i64 = sqlx::query_scalar("select count(*) from commands")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(commands, 2, "a refused release records nothing");
    assert_eq!(
        get(&app, &operator, &format!("/v1/holds/{hold}")).await["hold"]["state"],
        "open"
    );

    // Confirmed, it runs, and the hold keeps what was confirmed.
    let (status, released) = post(
        &app,
        &operator,
        &path,
        json!({"confirm_applied": applied, "reason": "the customer asked for a second refund"}),
    )
    .await;
    assert_eq!(status, 200, "{released}");
    assert_eq!(released["hold"]["state"], "released");
    assert_eq!(released["hold"]["confirmed_applied"], applied.as_str());
    let kept: Option<uuid::Uuid> =
        sqlx::query_scalar("select confirmed_applied from holds where id = $1::uuid")
            .bind(&hold)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(kept.map(|u| u.to_string()), Some(applied));
}

/// The command line shows the same: `holds list` says the intent was
/// applied since, `holds release` without `--confirm-applied` refuses and
/// says how to confirm.
#[tokio::test]
async fn the_command_line_shows_a_holds_intent_now_and_asks_for_the_confirmation() {
    let app = TestApp::spawn_with(refund_policy(Duration::ZERO, NearDuplicate::Hold)).await;
    let agent = app.token("agent", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let c = custodian(
        &app.pool,
        &["payments"],
        refund_effects(&sink.url, 5 * SECOND),
        10 * SECOND,
    );
    let run = |run: &str| {
        json!({"tool": "refund", "runId": run,
               "args": {"customer": "lee@example.com", "amount": "4.00 USD"}})
    };
    // The first run applies; the second is held; then a cancelled...
    let (_, first) = invoke_nowait(&app, &agent, &run("run-1")).await;
    c.run_once().await.unwrap();
    let first = first["command_id"].as_str().unwrap().to_owned();
    assert_eq!(state(&app, &first).await, "applied");
    let (_, held) = invoke_nowait(&app, &agent, &run("run-2")).await;
    let hold = held["hold_id"].as_str().unwrap().to_owned();
    // ...and a command of the same intent applied after the hold opened
    // (released from a second hold, as an operator might have done).
    let (_, held_again) = invoke_nowait(&app, &agent, &run("run-3")).await;
    let other_hold = held_again["hold_id"].as_str().unwrap().to_owned();
    let (ok, out, err) = crate::harness::cli(&app.db_url, &["holds", "release", &other_hold]).await;
    assert!(ok, "{out}{err}");
    c.run_once().await.unwrap();

    let (ok, out, err) =
        crate::harness::cli(&app.db_url, &["holds", "list", "--state", "open"]).await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("APPLIED since by"), "{out}");

    let (ok, out, err) = crate::harness::cli(&app.db_url, &["holds", "release", &hold]).await;
    assert!(!ok, "{out}");
    assert!(err.contains("--confirm-applied"), "{err}");
    let applied = err
        .split("--confirm-applied ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let (ok, out, err) = crate::harness::cli(
        &app.db_url,
        &[
            "holds",
            "release",
            &hold,
            "--confirm-applied",
            &applied,
            "--json",
        ],
    )
    .await;
    assert!(ok, "{out}{err}");
    let released: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(released["hold"]["confirmed_applied"], applied.as_str());
}

/// A decision's body is a JSON object (or nothing, or null): an array is
/// not one (serde would read it as the struct's fields in order), and a
/// rejection takes no confirmation.
#[tokio::test]
async fn a_decisions_body_is_an_object_and_a_rejection_takes_no_confirmation() {
    let app = TestApp::spawn_with(refund_policy(Duration::ZERO, NearDuplicate::Hold)).await;
    let agent = app.token("agent", Role::Device).await;
    let operator = app.token("ops", Role::Operator).await;
    let run = |run: &str| {
        json!({"tool": "refund", "runId": run,
               "args": {"customer": "max@example.com", "amount": "2.00 USD"}})
    };
    invoke_nowait(&app, &agent, &run("run-1")).await;
    let (_, held) = invoke_nowait(&app, &agent, &run("run-2")).await;
    let hold = held["hold_id"].as_str().unwrap().to_owned();
    for (decision, body) in [
        ("reject", json!([null, null])),
        ("release", json!([null, null])),
        ("reject", json!("no")),
        ("reject", json!({"confirm_applied": uuid::Uuid::now_v7()})),
    ] {
        let (status, problem) = post(
            &app,
            &operator,
            &format!("/v1/holds/{hold}/{decision}"),
            body.clone(),
        )
        .await;
        assert_eq!(status, 400, "{decision} {body}: {problem}");
        assert_eq!(problem["type"], "/problems/invalid-body");
    }
    let shown = get(&app, &operator, &format!("/v1/holds/{hold}")).await;
    assert_eq!(shown["hold"]["state"], "open", "nothing was decided");
}

//! The admission layer's own API (`/api/*`) over the ledger: the demo's
//! requests, sent verbatim, get the answers the layer documents (the
//! `coalesced`/`replay` booleans included); `/api/state` counts requests
//! against executions per epoch; `/api/reset` exists only in the embedded
//! demo and deletes nothing; `POST /v1/intents/explain` records nothing.

use crate::admission::start_custodian;
use crate::harness::{TestApp, TestSink, problem, quickstart_refund};
use command_ledger::db::Role;
use command_ledger::demo_sink::Mode;
use command_ledger::domain::admission::NearDuplicate;
use command_ledger::http::AppState;
use serde_json::{Value, json};
use std::time::Duration;

async fn post(app: &TestApp, token: &str, path: &str, body: &str) -> (u16, Value) {
    let resp = app
        .client
        .post(app.url(path))
        .bearer_auth(token)
        .header("Content-Type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

/// The demo's requests, byte for byte.
const DEMO: [&str; 3] = [
    r#"{"tool":"refund","runId":"worker-a","args":{"to":"Ada@Example.com","amount":"$12.00","currency":"usd","trace_id":"a-1"}}"#,
    r#"{"runId":"worker-b","tool":"refund","args":{"trace_id":"b-7","amount":"12.00 USD","to":"ada@example.com"}}"#,
    r#"{"tool":"refund","runId":"worker-c","args":{"amount":"1200 cents","currency":"USD","to":"ADA@example.com","trace_id":"c-3"}}"#,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_demo_requests_sent_verbatim_to_the_api_paths_get_the_documented_answers() {
    let app = TestApp::spawn_with(quickstart_refund(
        Duration::from_secs(3),
        NearDuplicate::Hold,
    ))
    .await;
    let sink = TestSink::start(Mode::Ok).await;
    let (_c, _stop) = start_custodian(&app, &sink).await;
    let op = app.token("ops", Role::Operator).await;
    let agent = app.token("agent-1", Role::Device).await;

    let (status, first) = post(&app, &agent, "/api/invoke", DEMO[0]).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(
        (
            &first["outcome"],
            &first["coalesced"],
            &first["replay"],
            &first["state"]
        ),
        (
            &json!("executed"),
            &json!(false),
            &json!(false),
            &json!("applied")
        )
    );
    for body in &DEMO[1..] {
        let (status, again) = post(&app, &agent, "/api/invoke", body).await;
        assert_eq!(status, 200, "{again}");
        // Within the window, after the first finished: its outcome, replayed.
        assert_eq!(again["command_id"], first["command_id"]);
        assert_eq!(again["outcome"], "replay", "{again}");
        assert_eq!(
            (&again["replay"], &again["coalesced"]),
            (&json!(true), &json!(false))
        );
        assert_eq!(again["fingerprint"], first["fingerprint"]);
    }
    assert_eq!(sink.count("applied"), 1);

    // After the window, a new run is held; /api/release {"id"} releases it.
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let (status, held) = post(
        &app,
        &agent,
        "/api/invoke",
        r#"{"tool":"refund","runId":"worker-d","args":{"to":"ada@example.com","amount":"USD 12"}}"#,
    )
    .await;
    assert_eq!(
        (status, held["outcome"].as_str()),
        (202, Some("held")),
        "{held}"
    );
    let hold = held["hold_id"].as_str().unwrap();
    problem(
        app.client
            .post(app.url("/api/release"))
            .bearer_auth(&agent)
            .json(&json!({"id": hold}))
            .send()
            .await
            .unwrap(),
        403,
        "/problems/forbidden",
    )
    .await;
    let (status, released) =
        post(&app, &op, "/api/release", &json!({"id": hold}).to_string()).await;
    assert_eq!(status, 200, "{released}");
    assert_eq!(released["hold"]["state"], "released");
    let id = released["command"]["id"].as_str().unwrap();
    let done: Value = app
        .get(&op, &format!("/v1/commands/{id}?wait=20"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(done["state"], "applied");
    let (status, _) = post(&app, &op, "/api/release", &json!({"id": hold}).to_string()).await;
    assert_eq!(status, 409, "a decided hold");
    let (status, bad) = post(&app, &op, "/api/release", r#"{"id":"not-a-uuid"}"#).await;
    assert_eq!(
        (status, bad["type"].as_str()),
        (400, Some("/problems/invalid-body"))
    );

    // The counters: four requests, two executions; /healthz answers.
    let state: Value = app.get(&op, "/api/state").await.json().await.unwrap();
    assert_eq!(
        (
            &state["epoch"],
            &state["requests"],
            &state["executions"],
            &state["replay"],
            &state["held"]
        ),
        (&json!(0), &json!(4), &json!(2), &json!(2), &json!(1)),
        "{state}"
    );
    problem(
        app.get(&agent, "/api/state").await,
        403,
        "/problems/forbidden",
    )
    .await;
    assert_eq!(app.get(&agent, "/healthz").await.status(), 200);
    // Outside the embedded demo there is no reset, and nothing changed.
    let (status, refused) = post(&app, &op, "/api/reset", "").await;
    assert_eq!(
        (status, refused["type"].as_str()),
        (403, Some("/problems/forbidden"))
    );
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .contains("embedded demo")
    );
    assert_eq!(app.command_count().await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copies_racing_a_command_in_flight_are_answered_coalesced_with_its_outcome() {
    let app = TestApp::spawn_with(quickstart_refund(
        Duration::from_secs(30),
        NearDuplicate::Hold,
    ))
    .await;
    // The effect takes a second: the copies arrive while it is in flight.
    let sink = TestSink::start_slow(Mode::Ok, Duration::from_secs(1)).await;
    let (_c, _stop) = start_custodian(&app, &sink).await;
    let agent = app.token("agent-1", Role::Device).await;

    let (status, first) = {
        let (app, agent) = (&app, &agent);
        let first = post(app, agent, "/api/invoke", DEMO[0]);
        let copies = async {
            // Sent once the first is recorded, before its effect answers.
            tokio::time::sleep(Duration::from_millis(300)).await;
            tokio::join!(
                post(app, agent, "/api/invoke", DEMO[1]),
                post(app, agent, "/api/invoke", DEMO[2]),
            )
        };
        let ((status, first), copies) = tokio::join!(first, copies);
        for (status, copy) in [copies.0, copies.1] {
            assert_eq!(status, 200, "{copy}");
            assert_eq!(
                (
                    &copy["outcome"],
                    &copy["coalesced"],
                    &copy["replay"],
                    &copy["state"]
                ),
                (
                    &json!("coalesced"),
                    &json!(true),
                    &json!(false),
                    &json!("applied")
                ),
                "{copy}"
            );
            assert_eq!(copy["command_id"], first["command_id"]);
            assert_eq!(copy["result"], first["result"]);
        }
        (status, first)
    };
    assert_eq!(status, 200, "{first}");
    assert_eq!(
        (&first["outcome"], &first["coalesced"]),
        (&json!("executed"), &json!(false)),
        "{first}"
    );
    assert_eq!(sink.count("applied"), 1);
    assert_eq!(app.command_count().await, 1);
}

#[tokio::test]
async fn in_the_embedded_demo_reset_starts_a_new_epoch_and_deletes_nothing() {
    let (_url, pool) = crate::harness::fresh_database().await;
    let mut state = AppState::new(
        crate::harness::as_role(&pool, command_ledger::db::roles::ServiceRole::Api),
        crate::harness::ledger_backend(),
        quickstart_refund(Duration::from_secs(5), NearDuplicate::Hold),
    );
    state.api_reset = true;
    let addr = crate::harness::serve_state(state).await;
    let app = TestApp {
        base: format!("http://{addr}"),
        db_url: String::new(),
        pool,
        client: reqwest::Client::new(),
    };
    let op = app.token("ops", Role::Operator).await;
    let agent = app.token("agent", Role::Device).await;
    let (status, _) = post(&app, &agent, "/api/invoke", DEMO[0]).await;
    assert!(status == 200 || status == 202);
    problem(
        app.client
            .post(app.url("/api/reset"))
            .bearer_auth(&agent)
            .send()
            .await
            .unwrap(),
        403,
        "/problems/forbidden",
    )
    .await;
    let (status, reset) = post(&app, &op, "/api/reset", "").await;
    assert_eq!(status, 200, "{reset}");
    assert_eq!(
        (&reset["epoch"], &reset["requests"]),
        (&json!(1), &json!(0))
    );
    assert_eq!(app.command_count().await, 1, "no row deleted");
    let state: Value = app.get(&op, "/api/state").await.json().await.unwrap();
    assert_eq!(
        (&state["epoch"], &state["requests"]),
        (&json!(1), &json!(0))
    );
}

#[tokio::test]
async fn explain_shows_canonical_form_fingerprint_and_rules_and_records_nothing() {
    let app = TestApp::spawn_with(quickstart_refund(
        Duration::from_secs(5),
        NearDuplicate::Hold,
    ))
    .await;
    let agent = app.token("agent", Role::Device).await;
    let mut prints = Vec::new();
    for body in DEMO {
        let (status, e) = post(&app, &agent, "/v1/intents/explain", body).await;
        assert_eq!(status, 200, "{e}");
        assert_eq!(
            e["canonical"]["args"],
            json!({"to": "ada@example.com", "amount": {"amount_minor": 1200, "currency": "USD"}})
        );
        assert!(
            e["canonical_rules"]
                .as_array()
                .unwrap()
                .contains(&json!("money@/amount"))
        );
        assert!(
            e["canonical_rules"]
                .as_array()
                .unwrap()
                .contains(&json!("drop_volatile@/trace_id"))
        );
        assert_eq!(e["policy"]["key"], "fingerprint");
        prints.push(e["fingerprint"].clone());
    }
    assert!(prints.iter().all(|p| *p == prints[0]), "{prints:?}");
    let (status, e) = post(
        &app,
        &agent,
        "/v1/intents/explain",
        r#"{"kind":"refund","authority":"payments","args":{"to":"ada@example.com","amount":"12.00"}}"#,
    )
    .await;
    assert_eq!(
        (status, e["type"].as_str()),
        (400, Some("/problems/invalid-args"))
    );
    assert_eq!(app.command_count().await, 0);
    // The stored command shows the same form and rules.
    let (_, invoked) = post(&app, &agent, "/v1/invoke", DEMO[2]).await;
    let c: Value = app
        .get(
            &agent,
            &format!("/v1/commands/{}", invoked["command_id"].as_str().unwrap()),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(c["fingerprint"], prints[0]);
    assert!(
        c["canonical_rules"]
            .as_array()
            .unwrap()
            .contains(&json!("currency_merged@/currency"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn invoke_refuses_args_the_kind_does_not_declare_and_nothing_reaches_the_sink() {
    use crate::harness::{assert_names_fields, hold_count, malformed_refunds};
    let app = TestApp::spawn_with(quickstart_refund(
        Duration::from_secs(5),
        NearDuplicate::Hold,
    ))
    .await;
    let sink = TestSink::start(Mode::Ok).await;
    let (_c, _stop) = start_custodian(&app, &sink).await;
    let agent = app.token("agent-1", Role::Device).await;
    for (i, (args, fields)) in malformed_refunds().into_iter().enumerate() {
        let body = json!({"tool": "refund", "runId": format!("run-{i}"), "args": args}).to_string();
        for path in ["/v1/invoke", "/api/invoke", "/v1/intents/explain"] {
            let (status, p) = post(&app, &agent, path, &body).await;
            assert_eq!(status, 400, "{path}: {p}");
            assert_names_fields(&p, &fields);
        }
    }
    // A refund that matches runs (so the custodian and the sink are live),
    // and it is the only thing that ever reached the sink.
    let (status, ok) = post(
        &app,
        &agent,
        "/v1/invoke",
        r#"{"tool":"refund","runId":"run-ok","args":{"to":"x@y.z","amount":"1.00 USD"}}"#,
    )
    .await;
    assert_eq!((status, &ok["state"]), (200, &json!("applied")), "{ok}");
    assert_eq!(app.command_count().await, 1);
    assert_eq!(hold_count(&app.pool).await, 0);
    assert_eq!((sink.requests(), sink.count("applied")), (1, 1));
}

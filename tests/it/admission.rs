//! Intent admission: one intent however it is spelled, coalescing, replay,
//! held near-duplicates, the invoke API, the counters, failing closed.

use crate::harness::{TestApp, TestSink, problem, refund_effects, refund_policy};
use command_ledger::custodian::{Custodian, CustodianConfig};
use command_ledger::db::Role;
use command_ledger::demo_sink::Mode;
use command_ledger::domain::admission::Policies;
use command_ledger::domain::admission::{KindPolicy, NearDuplicate};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

pub(crate) async fn invoke(app: &TestApp, token: &str, body: Value) -> (u16, Value) {
    let resp = app
        .client
        .post(app.url("/v1/invoke"))
        .bearer_auth(token)
        .header("Prefer", "wait=20")
        .json(&body)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

/// The three spellings of the refund.
pub(crate) fn spellings() -> [Value; 3] {
    [
        json!({"tool": "refund", "runId": "worker-a",
               "args": {"customer": "Ada@Example.com", "amount": "$12.00", "currency": "usd", "trace_id": "t-a"}}),
        json!({"runId": "worker-b", "tool": "refund",
               "args": {"trace_id": "t-b", "amount": "12.00 USD", "customer": "ada@example.com"}}),
        json!({"tool": "refund", "runId": "worker-c",
               "args": {"currency": "USD", "amount": "1200 cents", "customer": "ADA@example.com", "trace_id": "t-c"}}),
    ]
}

pub(crate) async fn start_custodian(
    app: &TestApp,
    sink: &TestSink,
) -> (Arc<Custodian>, tokio::sync::oneshot::Sender<()>) {
    let mut config = CustodianConfig::new(vec!["payments".into()]);
    config.poll_interval = Duration::from_millis(100);
    let c = Arc::new(Custodian::new(
        crate::harness::as_role(&app.pool, command_ledger::db::roles::ServiceRole::Custodian),
        crate::harness::ledger_backend(),
        config,
        refund_effects(&sink.url, Duration::from_secs(5)),
    ));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(Arc::clone(&c).run(async move {
        let _ = rx.await;
    }));
    (c, tx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_spellings_from_three_workers_make_one_execution() {
    let app = TestApp::spawn_with(refund_policy(Duration::from_secs(1), NearDuplicate::Hold)).await;
    let token = app.token("agent", Role::Device).await;
    let operator = app.token("ops", Role::Operator).await;
    let sink = TestSink::start(Mode::Ok).await;

    // The three workers race; nothing executes until all three are admitted.
    let workers: Vec<_> = spellings()
        .into_iter()
        .enumerate()
        .map(|(i, body)| {
            let (client, url, token) = (app.client.clone(), app.url("/v1/invoke"), token.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50 * i as u64)).await;
                let resp = client
                    .post(url)
                    .bearer_auth(token)
                    .header("Prefer", "wait=20")
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                resp.json::<Value>().await.unwrap()
            })
        })
        .collect();
    // Wait until all three are admitted (one new, two coalesced), however
    // slow the machine is, before anything may execute.
    for _ in 0..200 {
        let state: Value = app.get(&operator, "/v1/state").await.json().await.unwrap();
        if state["since_start"]["new"] == 1 && state["since_start"]["coalesced"] == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_c, stop) = start_custodian(&app, &sink).await;
    let mut outcomes = Vec::new();
    for w in workers {
        outcomes.push(w.await.unwrap());
    }
    // One of them executed (the first to be admitted: usually the first
    // sent, but the stagger is no promise on a loaded machine or a Citus
    // coordinator), the other two were coalesced into it.
    let mut names: Vec<&str> = outcomes
        .iter()
        .map(|o| o["outcome"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["coalesced", "coalesced", "executed"],
        "{outcomes:?}"
    );
    let ids: Vec<&Value> = outcomes.iter().map(|o| &o["command_id"]).collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "one command");
    assert!(
        outcomes
            .iter()
            .all(|o| o["fingerprint"] == outcomes[0]["fingerprint"])
    );
    assert!(
        outcomes
            .iter()
            .all(|o| o["state"] == "applied" && o["result"] == outcomes[0]["result"])
    );
    assert_eq!(sink.count("applied"), 1);
    assert_eq!(app.command_count().await, 1);

    // Later (after the window): the first worker retrying is a replay ...
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (status, replay) = invoke(&app, &token, spellings()[0].clone()).await;
    assert_eq!((status, replay["outcome"].as_str()), (200, Some("replay")));
    assert_eq!(replay["command_id"], outcomes[0]["command_id"]);

    // ... and a new run with the same intent is held, not executed.
    let mut fresh = spellings()[1].clone();
    fresh["runId"] = json!("worker-d");
    let (status, held) = invoke(&app, &token, fresh.clone()).await;
    assert_eq!(
        (status, held["outcome"].as_str()),
        (202, Some("held")),
        "{held}"
    );
    let hold_id = held["hold_id"].as_str().unwrap().to_owned();
    // The agent can read its hold; another device cannot.
    let own: Value = app
        .get(&token, &format!("/v1/holds/{hold_id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(own["hold"]["state"], "open");
    let stranger = app.token("stranger", Role::Device).await;
    problem(
        app.get(&stranger, &format!("/v1/holds/{hold_id}")).await,
        404,
        "/problems/not-found",
    )
    .await;
    // Retrying the held request finds the same hold.
    let (_, again) = invoke(&app, &token, fresh).await;
    assert_eq!(again["hold_id"], hold_id.as_str());
    assert_eq!(sink.count("applied"), 1);

    // An operator sees it and releases it: executed once more, audited.
    let holds: Value = app
        .get(&operator, "/v1/holds?state=open")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(holds["items"].as_array().unwrap().len(), 1);
    assert_eq!(holds["items"][0]["resembles"], outcomes[0]["command_id"]);
    problem(
        app.post(&token, &format!("/v1/holds/{hold_id}/release"))
            .await,
        403,
        "/problems/forbidden",
    )
    .await;
    let released: Value = app
        .client
        .post(app.url(&format!("/v1/holds/{hold_id}/release")))
        .bearer_auth(&operator)
        .json(&json!({"reason": "the customer asked twice"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(released["hold"]["state"], "released");
    assert_eq!(released["hold"]["decided_by"], "operator:ops");
    assert_eq!(
        released["hold"]["decision_reason"],
        "the customer asked twice"
    );
    let command_id = released["command"]["id"].as_str().unwrap().to_owned();
    let done: Value = app
        .get(&operator, &format!("/v1/commands/{command_id}?wait=20"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(done["state"], "applied");
    assert_eq!(sink.count("applied"), 2);
    let history: Value = app
        .get(&operator, &format!("/v1/commands/{command_id}/history"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        history["entries"][0]["actor"], "operator:ops",
        "the release is who recorded it"
    );
    problem(
        app.post(&operator, &format!("/v1/holds/{hold_id}/reject"))
            .await,
        409,
        "/problems/hold-decided",
    )
    .await;

    // Requests went up; executions did not.
    let state: Value = app.get(&operator, "/v1/state").await.json().await.unwrap();
    assert_eq!(state["since_start"]["requests"], 6);
    assert_eq!(state["since_start"]["coalesced"], 2);
    assert_eq!(state["since_start"]["held"], 2);
    assert_eq!(state["ledger"]["executions_started"], 2);
    assert_eq!(state["ledger"]["holds_open"], 0);
    problem(
        app.get(&token, "/v1/state").await,
        403,
        "/problems/forbidden",
    )
    .await;
    stop.send(()).unwrap();
}

/// The run: worker-a's request is coalesced into worker-b's
/// command. Every caller that was given that command's result gets it again
/// when it retries the same request after the window, whoever executed;
/// only a new run of the intent is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coalesced_callers_retry_after_the_window_is_a_replay_not_a_hold() {
    let app = TestApp::spawn_with(refund_policy(Duration::from_secs(1), NearDuplicate::Hold)).await;
    let token = app.token("agent", Role::Device).await;
    let operator = app.token("ops", Role::Operator).await;
    let sink = TestSink::start(Mode::Ok).await;
    let [worker_a, worker_b, _] = spellings();

    let (_, executing) = invoke_nowait(&app, &token, &worker_b).await;
    assert_eq!(executing["outcome"], "pending", "{executing}");
    let command_id = executing["command_id"].clone();
    let (_, coalesced) = invoke_nowait(&app, &token, &worker_a).await;
    assert_eq!(coalesced["command_id"], command_id, "{coalesced}");
    let (_c, stop) = start_custodian(&app, &sink).await;
    // worker-a waits for the outcome (coalesced while it runs, or a replay
    // if the custodian was quicker than this request).
    let (status, done) = invoke(&app, &token, worker_a.clone()).await;
    assert_eq!(
        (status, done["state"].as_str()),
        (200, Some("applied")),
        "{done}"
    );
    assert_eq!(done["command_id"], command_id, "{done}");

    // After the window, both callers' identical retries are replays.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for (who, body) in [("worker-a", &worker_a), ("worker-b", &worker_b)] {
        let (status, again) = invoke(&app, &token, body.clone()).await;
        assert_eq!(
            (status, again["outcome"].as_str()),
            (200, Some("replay")),
            "{who}: {again}"
        );
        assert_eq!(again["command_id"], command_id, "{who}");
        assert!(again["hold_id"].is_null(), "{who}: {again}");
    }

    // A new run of the intent is held; released, it runs once more ...
    let mut fresh = worker_b.clone();
    fresh["runId"] = json!("worker-d");
    let (status, held) = invoke(&app, &token, fresh).await;
    assert_eq!(
        (status, held["outcome"].as_str()),
        (202, Some("held")),
        "{held}"
    );
    let hold_id = held["hold_id"].as_str().unwrap();
    let released = app
        .post(&operator, &format!("/v1/holds/{hold_id}/release"))
        .await;
    assert_eq!(released.status(), 200);
    let released: Value = released.json().await.unwrap();
    let second = released["command"]["id"].clone();
    let done: Value = app
        .get(
            &operator,
            &format!("/v1/commands/{}?wait=20", second.as_str().unwrap()),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(done["state"], "applied");

    // ... and the first callers still get the command they were given, not
    // a hold against the newer one.
    for (who, body) in [("worker-a", &worker_a), ("worker-b", &worker_b)] {
        let (status, again) = invoke(&app, &token, body.clone()).await;
        assert_eq!(
            (status, again["outcome"].as_str(), &again["command_id"]),
            (200, Some("replay"), &command_id),
            "{who}: {again}"
        );
    }
    let open: Value = app
        .get(&operator, "/v1/holds?state=open")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(open["items"].as_array().unwrap().len(), 0, "{open}");
    assert_eq!(sink.count("applied"), 2);
    assert_eq!(app.command_count().await, 2);
    stop.send(()).unwrap();
}

#[tokio::test]
async fn a_near_duplicate_can_be_rejected_by_an_operator_or_by_policy() {
    let app = TestApp::spawn_with(refund_policy(Duration::ZERO, NearDuplicate::Hold)).await;
    let token = app.token("agent", Role::Device).await;
    let operator = app.token("ops", Role::Operator).await;
    let mut body = spellings()[0].clone();
    let (_, first) = invoke_nowait(&app, &token, &body).await;
    assert_eq!(first["outcome"], "pending");
    body["runId"] = json!("another");
    let (_, held) = invoke_nowait(&app, &token, &body).await;
    let hold_id = held["hold_id"].as_str().unwrap();
    let decide = |body: Value| {
        app.client
            .post(app.url(&format!("/v1/holds/{hold_id}/reject")))
            .bearer_auth(&operator)
            .json(&body)
            .send()
    };
    // A reason PostgreSQL could not store is refused before anything is decided.
    let refused = decide(json!({"reason": "no\u{0}"})).await.unwrap();
    problem(refused, 400, "/problems/invalid-body").await;
    // A JSON null body is no reason at all.
    let rejected: Value = decide(Value::Null).await.unwrap().json().await.unwrap();
    assert_eq!(rejected["hold"]["state"], "rejected");
    assert!(rejected["hold"]["command_id"].is_null());
    assert_eq!(app.command_count().await, 1);

    let app = TestApp::spawn_with(refund_policy(Duration::ZERO, NearDuplicate::Reject)).await;
    let token = app.token("agent", Role::Device).await;
    let mut body = spellings()[0].clone();
    invoke_nowait(&app, &token, &body).await;
    body["runId"] = json!("another");
    let resp = app
        .client
        .post(app.url("/v1/invoke"))
        .bearer_auth(&token)
        .header("Prefer", "wait=0")
        .json(&body)
        .send()
        .await
        .unwrap();
    problem(resp, 409, "/problems/near-duplicate").await;
}

pub(crate) async fn invoke_nowait(app: &TestApp, token: &str, body: &Value) -> (u16, Value) {
    let resp = app
        .client
        .post(app.url("/v1/invoke"))
        .bearer_auth(token)
        .header("Prefer", "wait=0")
        .json(body)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

#[tokio::test]
async fn keyless_submissions_need_a_kind_that_allows_them() {
    let app = TestApp::spawn_with(refund_policy(Duration::from_secs(5), NearDuplicate::Hold)).await;
    let token = app.token("agent", Role::Device).await;
    let body = json!({"kind": "refund", "authority": "payments", "args": {"amount": "5 EUR", "to": "x@y.org"}});
    let first = app.submit(&token, None, &body).await;
    assert_eq!(first.status(), 202);
    let first: Value = first.json().await.unwrap();
    assert!(
        first["idempotency_key"]
            .as_str()
            .unwrap()
            .starts_with("intent:")
    );
    let again: Value = app.submit(&token, None, &body).await.json().await.unwrap();
    assert_eq!(
        (again["id"].clone(), again["disposition"].as_str()),
        (first["id"].clone(), Some("coalesced"))
    );
    // steer needs a key.
    let steer = json!({"kind": "steer", "authority": "agent-7", "args": {"direction": "left"}});
    problem(
        app.submit(&token, None, &steer).await,
        400,
        "/problems/missing-idempotency-key",
    )
    .await;
}

#[tokio::test]
async fn money_without_a_currency_is_refused_and_nothing_is_written() {
    let app = TestApp::spawn().await;
    let token = app.token("agent", Role::Device).await;
    let body = json!({"kind": "refund", "authority": "payments", "args": {"amount": "12.00", "to": "x@y.org"}});
    let p = problem(
        app.submit(&token, Some("k"), &body).await,
        400,
        "/problems/invalid-args",
    )
    .await;
    assert!(
        p["detail"].as_str().unwrap().contains("without a currency"),
        "{p}"
    );
    assert_eq!(app.command_count().await, 0);
}

#[tokio::test]
async fn a_conflict_names_the_canonical_fields_that_differ() {
    let app = TestApp::spawn().await;
    let token = app.token("agent", Role::Device).await;
    let body = json!({"kind": "refund", "authority": "payments", "args": {"amount": "$12.00", "to": "ada@example.com"}});
    app.create(&token, "k", &body).await;
    // Respelled, it is the same request.
    let same = json!({"kind": "refund", "authority": "payments", "args": {"to": "Ada@Example.com", "amount": "1200 cents", "currency": "USD", "trace_id": "x"}});
    assert_eq!(app.submit(&token, Some("k"), &same).await.status(), 200);
    let other = json!({"kind": "refund", "authority": "payments", "args": {"amount": "13 USD", "to": "bob@example.com"}});
    let p = problem(
        app.submit(&token, Some("k"), &other).await,
        422,
        "/problems/idempotency-key-conflict",
    )
    .await;
    assert_eq!(
        p["differences"],
        json!(["/args/amount/amount_minor", "/args/to"])
    );
}

#[tokio::test]
async fn with_the_database_unreachable_submissions_fail_closed_with_503() {
    // A pool whose server is gone: every request that needs the ledger fails
    // with 503 and Retry-After, and nothing can have been executed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(500))
        .connect_lazy(&format!("postgres://postgres@127.0.0.1:{closed}/nothing"))
        .unwrap();
    let state = command_ledger::http::AppState::new(
        crate::harness::as_role(&pool, command_ledger::db::roles::ServiceRole::Api),
        crate::harness::ledger_backend(),
        Policies::default(),
    );
    let base = format!("http://{}", crate::harness::serve_state(state).await);
    let resp = reqwest::Client::new()
        .post(format!("{base}/v1/commands"))
        .bearer_auth("clt_whatever")
        .header("Idempotency-Key", "k")
        .json(&json!({"kind": "refund", "authority": "payments", "args": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["retry-after"], "1");
    problem(resp, 503, "/problems/unavailable").await;
    let ready = reqwest::get(format!("{base}/readyz")).await.unwrap();
    assert_eq!(ready.status(), 503);
}

/// The opt-in guard for keyed kinds: an agent that makes a new key on every
/// re-plan still gets one command per intent, however many copies race.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_intent_guard_makes_fresh_keys_for_one_intent_one_command() {
    let mut policies = Policies::default();
    policies.set(
        "refund",
        KindPolicy {
            guard_keyed: true,
            near_duplicate: NearDuplicate::Hold,
            ..KindPolicy::default()
        },
    );
    let app = TestApp::spawn_with(policies).await;
    let token = app.token("agent", Role::Device).await;
    let body = |run: &str| {
        json!({"kind": "refund", "authority": "payments", "run_id": run,
               "args": {"amount": "7.50 EUR", "to": "cy@example.com"}})
    };
    let mut racers = Vec::new();
    for i in 0..10 {
        let (client, url, token, body) = (
            app.client.clone(),
            app.url("/v1/commands"),
            token.clone(),
            body(&format!("plan-{i}")),
        );
        racers.push(tokio::spawn(async move {
            let resp = client
                .post(url)
                .bearer_auth(token)
                .header("Idempotency-Key", format!("fresh-{i}"))
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            let v: Value = resp.json().await.unwrap();
            (
                status,
                v["id"].as_str().unwrap().to_owned(),
                v["disposition"].as_str().unwrap().to_owned(),
            )
        }));
    }
    let mut results = Vec::new();
    for r in racers {
        results.push(r.await.unwrap());
    }
    assert_eq!(app.command_count().await, 1, "{results:?}");
    assert!(results.iter().all(|(_, id, _)| *id == results[0].1));
    assert_eq!(
        results
            .iter()
            .filter(|(s, _, d)| *s == 202 && d == "new")
            .count(),
        1,
        "{results:?}"
    );
    assert_eq!(
        results.iter().filter(|(_, _, d)| d == "coalesced").count(),
        9,
        "{results:?}"
    );
    // The first key still replays by key.
    let first = results.iter().find(|(_, _, d)| d == "new").unwrap();
    let index = results.iter().position(|r| r == first).unwrap();
    let again = app
        .submit(
            &token,
            Some(&format!("fresh-{index}")),
            &body(&format!("plan-{index}")),
        )
        .await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
}

/// `refund` with the outside run's short horizon: copies within 1 s are one
/// command; another run's copy is held until 3 s, and new after that.
fn short_horizon() -> Policies {
    let mut policies = refund_policy(Duration::from_secs(1), NearDuplicate::Hold);
    let refund = KindPolicy {
        horizon: Duration::from_secs(3),
        ..policies.get("refund").clone()
    };
    policies.set("refund", refund);
    policies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_runs_retry_after_the_horizon_replays_and_pays_once() {
    let app = TestApp::spawn_with(short_horizon()).await;
    let token = app.token("agent", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let (_c, stop) = start_custodian(&app, &sink).await;
    let late = json!({"tool": "refund", "runId": "late-run",
                      "args": {"customer": "x@example.com", "amount": "2.00 USD"}});

    let (status, first) = invoke(&app, &token, late.clone()).await;
    assert_eq!(
        (status, first["outcome"].as_str(), first["state"].as_str()),
        (200, Some("executed"), Some("applied")),
        "{first}"
    );
    tokio::time::sleep(Duration::from_millis(4000)).await;
    let (status, again) = invoke(&app, &token, late.clone()).await;
    assert_eq!(
        (status, again["outcome"].as_str(), &again["command_id"]),
        (200, Some("replay"), &first["command_id"]),
        "{again}"
    );
    assert_eq!(again["result"], first["result"]);
    assert_eq!(sink.count("applied"), 1, "the retry paid again");

    // The horizon still frees the intent for another run.
    let mut other = late.clone();
    other["runId"] = json!("next-day");
    let (status, new) = invoke(&app, &token, other).await;
    assert_eq!(
        (status, new["outcome"].as_str()),
        (200, Some("executed")),
        "{new}"
    );
    assert_ne!(new["command_id"], first["command_id"]);
    assert_eq!(sink.count("applied"), 2);
    stop.send(()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ambiguous_command_resolved_not_applied_frees_its_intent_with_its_lineage() {
    let app = TestApp::spawn_with(refund_policy(Duration::ZERO, NearDuplicate::Hold)).await;
    let token = app.token("agent", Role::Device).await;
    let operator = app.token("ops", Role::Operator).await;
    // The sink applies, then drops the connection: the outcome is ambiguous.
    let sink = TestSink::start(Mode::ResetAfterApply).await;
    let (_c, stop) = start_custodian(&app, &sink).await;
    let run = |run: &str| {
        json!({"tool": "refund", "runId": run,
               "args": {"customer": "kim@example.com", "amount": "3.00 USD"}})
    };

    let (_, first) = invoke(&app, &token, run("run-1")).await;
    assert_eq!(first["state"], "ambiguous", "{first}");
    let ambiguous = first["command_id"].as_str().unwrap().to_owned();
    // Unresolved, it frees nothing: another run is held.
    let (status, held) = invoke(&app, &token, run("run-2")).await;
    assert_eq!(
        (status, held["outcome"].as_str()),
        (202, Some("held")),
        "{held}"
    );

    let resolved = app
        .client
        .post(app.url(&format!("/v1/commands/{ambiguous}/resolution")))
        .bearer_auth(&operator)
        .json(&json!({"outcome": "not_applied", "evidence": "the provider has no such refund"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resolved.status(), 201);

    // Resolved not_applied, it is as free as after a failure.
    let (status, retry) = invoke(&app, &token, run("run-3")).await;
    assert_eq!(
        (status, retry["outcome"].as_str()),
        (200, Some("executed")),
        "{retry}"
    );
    assert_ne!(retry["command_id"].as_str(), Some(ambiguous.as_str()));
    let shown: Value = app
        .get(
            &operator,
            &format!("/v1/commands/{}", retry["command_id"].as_str().unwrap()),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        shown["retry_of"].as_str(),
        Some(ambiguous.as_str()),
        "{shown}"
    );
    // The run that saw the ambiguous outcome still sees it.
    let (_, again) = invoke(&app, &token, run("run-1")).await;
    assert_eq!(
        (again["outcome"].as_str(), again["command_id"].as_str()),
        (Some("replay"), Some(ambiguous.as_str())),
        "{again}"
    );
    assert_eq!(sink.count("applied"), 2);
    stop.send(()).unwrap();
}

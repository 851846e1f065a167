//! Retries of failures with nothing done (`domain::retry`), through the
//! custodian's own loop and a provider that answers as a script says: each
//! attempt a command of its own, written in the failure's transaction; the
//! key and a waiting submission answer with the chain's last attempt; an
//! ambiguous outcome is never retried.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use command_ledger::custodian::http_executor::HttpExecutor;
use command_ledger::custodian::{Custodian, Effects};
use command_ledger::db::Role;
use command_ledger::db::roles::ServiceRole;
use command_ledger::domain::retry::{NotAppliedContract, RetryPolicy};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::harness::{TestApp, as_role, ledger_backend, refund};

const SECOND: Duration = Duration::from_secs(1);

/// What the provider answers, request by request; after the script, `200`.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// 503, with this `Retry-After` (seconds) if any: nothing applied.
    Busy(Option<u64>),
    /// Never answers.
    Hang,
    /// 422: refused, nothing applied, and no contract says "not applied".
    Refuse,
}

/// One request the provider saw.
#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    key: String,
    attempt: String,
    applied: bool,
}

#[derive(Debug, Clone, Default)]
struct Provider {
    script: Arc<Mutex<Vec<Answer>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Provider {
    async fn start(script: Vec<Answer>) -> (Provider, String) {
        let provider = Provider {
            script: Arc::new(Mutex::new(script.into_iter().rev().collect())),
            seen: Arc::default(),
        };
        let router = axum::Router::new()
            .route("/refunds", axum::routing::post(answer))
            .with_state(provider.clone());
        let url = format!("{}/refunds", crate::harness::serve_router(router).await);
        (provider, url)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn answer(State(p): State<Provider>, headers: HeaderMap) -> axum::response::Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let next = p.script.lock().unwrap().pop();
    let mut seen = Seen {
        at: Instant::now(),
        key: header("idempotency-key"),
        attempt: header("ledger-command-attempt"),
        applied: false,
    };
    match next {
        Some(Answer::Busy(retry_after)) => {
            p.seen.lock().unwrap().push(seen);
            let mut response = (
                StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(json!({"error": "busy"})),
            )
                .into_response();
            if let Some(s) = retry_after {
                response
                    .headers_mut()
                    .insert("retry-after", s.to_string().parse().unwrap());
            }
            response
        }
        Some(Answer::Refuse) => {
            p.seen.lock().unwrap().push(seen);
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                axum::Json(json!({"error": "no"})),
            )
                .into_response()
        }
        Some(Answer::Hang) => {
            p.seen.lock().unwrap().push(seen);
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::OK.into_response()
        }
        None => {
            seen.applied = true;
            p.seen.lock().unwrap().push(seen);
            axum::Json(json!({"refund": "done"})).into_response()
        }
    }
}

/// A policy that retries the provider's 503 quickly, without jitter.
fn busy_is_not_applied(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        initial_interval: Duration::from_millis(100),
        coefficient: 2.0,
        max_interval: SECOND,
        deadline: None,
        jitter: 0.0,
        contract: NotAppliedContract {
            statuses: vec![503],
            ..NotAppliedContract::default()
        },
    }
}

/// A custodian of `payments` running its loop, `refund` going to `url`
/// under `timeout`, retried under `policy`.
fn running_custodian(
    app: &TestApp,
    url: &str,
    timeout: Duration,
    policy: Option<RetryPolicy>,
) -> (Arc<Custodian>, tokio::sync::oneshot::Sender<()>) {
    let contract = policy
        .as_ref()
        .map(|p| p.contract.clone())
        .unwrap_or_default();
    let executor = HttpExecutor::new(url.to_owned(), Default::default(), timeout)
        .unwrap()
        .with_contract(contract);
    let mut effects = Effects::default();
    effects.register("refund", executor, timeout);
    if let Some(policy) = policy {
        effects.retry("refund", policy);
    }
    crate::harness::running_custodian(&app.pool, &["payments"], effects)
}

/// The command rows of the chain `first` starts, in attempt order:
/// `(id, state, attempt, retry_of)`.
async fn chain(app: &TestApp, first: &str) -> Vec<(String, String, i32, Option<String>)> {
    sqlx::query_as(
        "select id::text, state, attempt, retry_of::text from commands
         where id = $1::uuid or (retry_of = $1::uuid and attempt > 1)
         order by attempt",
    )
    .bind(first)
    .fetch_all(&app.pool)
    .await
    .unwrap()
}

/// Resubmits under `key` and waits (`Prefer: wait`) for the outcome.
async fn resubmit_and_wait(app: &TestApp, token: &str, key: &str) -> Value {
    let resp = app
        .client
        .post(app.url("/v1/commands"))
        .bearer_auth(token)
        .header("Idempotency-Key", key)
        .header("Prefer", "wait=20")
        .json(&refund(1200))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "a replay");
    resp.json().await.unwrap()
}

#[tokio::test]
async fn a_provider_busy_twice_then_applying_takes_three_attempts_and_applies_once() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let (provider, url) = Provider::start(vec![Answer::Busy(None), Answer::Busy(None)]).await;
    let (_c, stop) = running_custodian(&app, &url, 5 * SECOND, Some(busy_is_not_applied(5)));

    let first = app.create(&token, "r-busy", &refund(1200)).await;
    // The key answers with the chain's last outcome, waiting for it.
    let answer = resubmit_and_wait(&app, &token, "r-busy").await;
    assert_eq!(answer["state"], "applied", "{answer}");
    assert_eq!(answer["attempt"], 3);
    assert_eq!(answer["retry_of"], first.as_str());
    assert_eq!(answer["idempotency_key"], "r-busy", "the caller's key");
    assert_ne!(answer["id"], first.as_str());

    // Three commands, each with its own history; the provider applied once.
    let rows = chain(&app, &first).await;
    let states: Vec<_> = rows.iter().map(|r| (r.1.as_str(), r.2)).collect();
    assert_eq!(states, [("failed", 1), ("failed", 2), ("applied", 3)]);
    assert!(
        rows[1..]
            .iter()
            .all(|r| r.3.as_deref() == Some(first.as_str()))
    );
    let seen = provider.seen();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen.iter().filter(|s| s.applied).count(), 1);
    let attempts: Vec<_> = seen.iter().map(|s| s.attempt.as_str()).collect();
    assert_eq!(attempts, ["1", "2", "3"]);
    // Each attempt is a command of its own, under a downstream key of its own.
    let mut keys: Vec<_> = seen.iter().map(|s| s.key.clone()).collect();
    keys.dedup();
    assert_eq!(keys.len(), 3);
    for (id, _, _, _) in &rows {
        let h: Value = app
            .get(&token, &format!("/v1/commands/{id}/history"))
            .await
            .json()
            .await
            .unwrap();
        let to: Vec<_> = h["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["to"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            to.first().map(String::as_str),
            Some("pending"),
            "{id}: {to:?}"
        );
        assert!(to.contains(&"effect_started".to_owned()), "{id}: {to:?}");
    }
    // Read by id, the first attempt points at the last.
    let read: Value = app
        .get(&token, &format!("/v1/commands/{first}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(read["state"], "failed");
    assert_eq!(read["error"]["reason"], "not_applied");
    assert_eq!(read["last_attempt"], answer["id"]);
    // So does the command line, in both its forms.
    let (ok, out, err) =
        crate::harness::cli(&app.db_url, &["commands", "show", &first, "--json"]).await;
    assert!(ok, "{err}");
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["last_attempt"], answer["id"]);
    let (ok, out, err) = crate::harness::cli(&app.db_url, &["commands", "show", &first]).await;
    assert!(ok, "{err}");
    let last = answer["id"].as_str().unwrap();
    assert!(
        out.contains(&format!(
            "retried   its chain's last attempt is {last} (attempt 3, applied)"
        )),
        "{out}"
    );
    let (ok, out, err) = crate::harness::cli(&app.db_url, &["commands", "show", last]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("attempt   3 of the chain {first} began")),
        "{out}"
    );
    // A batch item under the key answers with the chain's outcome too.
    let mut item = refund(1200);
    item["idempotency_key"] = json!("r-busy");
    let batch: Value = app
        .client
        .post(app.url("/v1/commands/batch"))
        .bearer_auth(&token)
        .json(&json!({"items": [item]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let replayed = &batch["items"][0]["command"];
    assert_eq!(replayed["id"], answer["id"], "{batch}");
    assert_eq!(replayed["state"], "applied");
    assert_eq!(replayed["idempotency_key"], "r-busy");
    // The waits grew: 100 ms, then 200 ms.
    assert!(seen[1].at - seen[0].at >= Duration::from_millis(100));
    assert!(seen[2].at - seen[1].at >= Duration::from_millis(200));
    let _ = stop.send(());
}

#[tokio::test]
async fn a_timeout_is_ambiguous_and_never_retried_whatever_the_policy() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let (provider, url) = Provider::start(vec![Answer::Hang]).await;
    let (_c, stop) = running_custodian(
        &app,
        &url,
        Duration::from_millis(300),
        Some(busy_is_not_applied(10)),
    );

    let first = app.create(&token, "r-hang", &refund(1200)).await;
    let answer = resubmit_and_wait(&app, &token, "r-hang").await;
    assert_eq!(answer["state"], "ambiguous", "{answer}");
    assert_eq!(answer["id"], first.as_str());
    // Time for any attempt to have been scheduled and run: none is.
    tokio::time::sleep(SECOND).await;
    assert_eq!(chain(&app, &first).await.len(), 1);
    assert_eq!(provider.seen().len(), 1);
    let _ = stop.send(());
}

#[tokio::test]
async fn a_providers_retry_after_is_waited_out() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let (provider, url) = Provider::start(vec![Answer::Busy(Some(2))]).await;
    let (_c, stop) = running_custodian(&app, &url, 5 * SECOND, Some(busy_is_not_applied(3)));

    let first = app.create(&token, "r-later", &refund(1200)).await;
    let answer = resubmit_and_wait(&app, &token, "r-later").await;
    assert_eq!(answer["state"], "applied", "{answer}");
    let seen = provider.seen();
    assert_eq!(seen.len(), 2);
    let gap = seen[1].at - seen[0].at;
    assert!(
        gap >= 2 * SECOND,
        "the next attempt came {gap:?} after the first"
    );
    let rows = chain(&app, &first).await;
    assert_eq!(rows.len(), 2);
    let recorded: Value = sqlx::query_scalar("select error from commands where id = $1::uuid")
        .bind(&first)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(recorded["detail"]["retry_after_s"], 2.0);
    let _ = stop.send(());
}

#[tokio::test]
async fn without_a_policy_the_busy_answer_is_what_it_always_was() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let (provider, url) = Provider::start(vec![Answer::Busy(None)]).await;
    let (_c, stop) = running_custodian(&app, &url, 5 * SECOND, None);

    let first = app.create(&token, "r-once", &refund(1200)).await;
    let answer = resubmit_and_wait(&app, &token, "r-once").await;
    // A 503 the kind's contract does not name: nobody knows what happened.
    assert_eq!(answer["state"], "ambiguous", "{answer}");
    assert!(answer.get("attempt").is_none());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(chain(&app, &first).await.len(), 1);
    assert_eq!(provider.seen().len(), 1);
    let _ = stop.send(());
}

#[tokio::test]
async fn the_last_attempt_allowed_ends_the_chain_failed() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let (provider, url) = Provider::start(vec![Answer::Busy(None); 5]).await;
    let (_c, stop) = running_custodian(&app, &url, 5 * SECOND, Some(busy_is_not_applied(2)));

    let first = app.create(&token, "r-tired", &refund(1200)).await;
    let answer = resubmit_and_wait(&app, &token, "r-tired").await;
    assert_eq!(answer["state"], "failed", "{answer}");
    assert_eq!(answer["attempt"], 2);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(chain(&app, &first).await.len(), 2);
    assert_eq!(provider.seen().len(), 2);
    let _ = stop.send(());
}

#[tokio::test]
async fn only_the_engine_writes_a_later_attempt() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let first = app.create(&token, "r-typed", &refund(1200)).await;
    // A hand-typed later attempt, as the owner of the tables: refused.
    let admin = as_role(&app.pool, ServiceRole::Owner);
    let err = sqlx::query(
        "insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind,
                               authority_id, args, canonical, retry_of, attempt)
         select gen_random_uuid(), scope, 'typed', request_digest, digest_version, kind,
                authority_id, args, canonical, id, 2
         from commands where id = $1::uuid",
    )
    .bind(&first)
    .execute(&admin)
    .await
    .unwrap_err();
    assert!(err.to_string().contains("attempt"), "{err}");
    let err = sqlx::query("update commands set attempt = 2 where id = $1::uuid")
        .bind(&first)
        .execute(&admin)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("immutable"), "{err}");
    // The engine's own step writes an attempt only after a failure with
    // nothing done, whoever asks: not after a pending command, nor after a
    // refusal.
    let custodian = as_role(&app.pool, ServiceRole::Custodian);
    let next = |id: String| {
        let custodian = custodian.clone();
        async move {
            sqlx::query_scalar::<_, bool>(
                "select ledger_next_attempt('payments', $1::uuid, 0.1, null)",
            )
            .bind(id)
            .fetch_one(&custodian)
            .await
            .unwrap()
        }
    };
    assert!(!next(first.clone()).await, "a pending command");
    let (_provider, url) = Provider::start(vec![Answer::Refuse]).await;
    let (_c, stop) = running_custodian(&app, &url, 5 * SECOND, Some(busy_is_not_applied(3)));
    let answer = resubmit_and_wait(&app, &token, "r-typed").await;
    assert_eq!(answer["state"], "failed", "{answer}");
    assert_eq!(answer["error"]["reason"], "rejected");
    let _ = stop.send(());
    assert!(!next(first.clone()).await, "a refusal");
    assert_eq!(chain(&app, &first).await.len(), 1);
}

#[tokio::test]
async fn a_webhook_announces_the_chains_last_outcome_once_under_its_key() {
    let app = TestApp::spawn_configured(
        command_ledger::domain::admission::Policies::default(),
        |s| s.webhooks.allow_private = true,
    )
    .await;
    let token = app.token("dev", Role::Device).await;
    let resp = app
        .client
        .post(app.url("/v1/webhooks"))
        .bearer_auth(&token)
        .json(&json!({"url": "http://127.0.0.1:9/hook"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let (_provider, url) = Provider::start(vec![Answer::Busy(None), Answer::Busy(None)]).await;
    let (_c, stop) = running_custodian(&app, &url, 5 * SECOND, Some(busy_is_not_applied(5)));

    app.create(&token, "r-hooked", &refund(1200)).await;
    let answer = resubmit_and_wait(&app, &token, "r-hooked").await;
    assert_eq!(answer["state"], "applied", "{answer}");
    // One event: the applied attempt's, under the caller's key; none for
    // the two failures that were retried.
    let events: Vec<(String, Value)> =
        sqlx::query_as("select command_id::text, payload from webhook_events order by id")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, answer["id"].as_str().unwrap());
    assert_eq!(events[0].1["state"], "applied");
    assert_eq!(events[0].1["key"], "r-hooked");
    assert_eq!(events[0].1["attempts"], 3);
    let _ = stop.send(());
}

#[tokio::test]
async fn the_probes_certain_not_applied_is_retried_as_the_policy_says() {
    use command_ledger::custodian::StepReport;
    use command_ledger::custodian::recovery::Recovery;
    use command_ledger::demo_sink::Mode;
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = crate::harness::TestSink::start(Mode::Ok).await;
    let effects = || {
        let executor = HttpExecutor::new(
            format!("{}/refunds", sink.url),
            Default::default(),
            Duration::from_millis(300),
        )
        .unwrap()
        .with_reconcile_url(Some(format!("{}/applied/{{key}}", sink.url)));
        let mut effects = Effects::default();
        effects.register_with_margin(
            "refund",
            executor,
            Duration::from_millis(300),
            Duration::from_millis(300),
        );
        effects.retry("refund", busy_is_not_applied(3));
        effects
    };
    let first = app.create(&token, "r-vanished", &refund(1200)).await;
    // A custodian starts the refund and dies before dispatching it.
    let c = crate::harness::custodian(&app.pool, &["payments"], effects(), 10 * SECOND);
    c.heartbeat().await.unwrap();
    let started = c
        .claim_and_start(10, &mut StepReport::default())
        .await
        .unwrap();
    assert_eq!(started.len(), 1);
    sqlx::query("update authorities set lease_expires_at = now() - interval '1 second'")
        .execute(&app.pool)
        .await
        .unwrap();
    // Once the effect's window closed, the probe's "not found" is certain.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let recovery = Recovery::new(
        as_role(&app.pool, ServiceRole::Custodian),
        ledger_backend(),
        Arc::new(effects()),
        "recovery:test".into(),
    );
    let report = recovery.run_once().await.unwrap();
    assert_eq!(report.failed, 1, "{report:?}");
    let rows = chain(&app, &first).await;
    let states: Vec<_> = rows.iter().map(|r| (r.1.as_str(), r.2)).collect();
    assert_eq!(states, [("failed", 1), ("pending", 2)]);
    // The next attempt runs, once.
    let (_c, stop) = running_custodian(&app, &format!("{}/refunds", sink.url), SECOND, None);
    let answer = resubmit_and_wait(&app, &token, "r-vanished").await;
    assert_eq!(answer["state"], "applied", "{answer}");
    assert_eq!(answer["attempt"], 2);
    assert_eq!(sink.count("applied"), 1);
    assert_eq!(sink.requests(), 1, "the first attempt was never sent");
    let _ = stop.send(());
}

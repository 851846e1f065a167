//! OpenTelemetry, end to end: a caller's W3C trace context taken in with a
//! submission, kept with the command, and joined by the custodian that runs
//! it (a process of its own, started after another custodian stopped), whose
//! spans reach an OTLP/HTTP endpoint of the test's own and whose request to
//! the provider carries the trace on.

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use serde_json::{Value, json};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::harness::TestApp;
use crate::serve_binary::interrupt_and_wait_term;
use command_ledger::db::Role;

const BIN: &str = env!("CARGO_BIN_EXE_command-ledger");

/// The caller's trace and span.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// A span as OTLP/JSON carries it.
#[derive(Debug, Clone)]
struct Exported {
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    name: String,
    service: String,
    /// The spans it links to, as (trace id, span id).
    links: Vec<(String, String)>,
}

#[derive(Debug, Default)]
struct Seen {
    spans: Vec<Exported>,
    /// The `traceparent` of each request the provider got.
    provider: Vec<Option<String>>,
    /// The `traceparent` of each question its reconcile probe got.
    probe: Vec<Option<String>>,
}

type Shared = Arc<Mutex<Seen>>;

async fn traces(State(seen): State<Shared>, body: axum::body::Bytes) -> &'static str {
    let v: Value = serde_json::from_slice(&body).expect("OTLP/JSON");
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    for rs in v["resourceSpans"].as_array().into_iter().flatten() {
        let service = rs["resource"]["attributes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["key"] == "service.name")
            .map(|a| text(&a["value"]["stringValue"]))
            .unwrap_or_default();
        for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
            for s in ss["spans"].as_array().into_iter().flatten() {
                seen.lock().unwrap().spans.push(Exported {
                    trace_id: text(&s["traceId"]),
                    span_id: text(&s["spanId"]),
                    parent_span_id: text(&s["parentSpanId"]),
                    name: text(&s["name"]),
                    service: service.clone(),
                    links: s["links"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|l| (text(&l["traceId"]), text(&l["spanId"])))
                        .collect(),
                });
            }
        }
    }
    "{}"
}

async fn refunds(State(seen): State<Shared>, headers: HeaderMap) -> axum::Json<Value> {
    let parent = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    seen.lock().unwrap().provider.push(parent);
    axum::Json(json!({"refund_id": "rf_1"}))
}

/// The provider's reconcile probe: it never saw the refund.
async fn applied(State(seen): State<Shared>, headers: HeaderMap) -> axum::http::StatusCode {
    let parent = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    seen.lock().unwrap().probe.push(parent);
    axum::http::StatusCode::NOT_FOUND
}

/// An OTLP/HTTP endpoint (`/v1/traces`) and a provider (`/refunds`, and its
/// probe `/applied/{key}`) on one listener; returns its base URL.
async fn collector_and_provider(seen: Shared) -> String {
    let app = Router::new()
        .route("/v1/traces", post(traces))
        .route("/refunds", post(refunds))
        .route("/applied/{key}", axum::routing::get(applied))
        .with_state(seen);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

fn custodian(app: &TestApp, catalog: &std::path::Path, collector: &str) -> Child {
    Command::new(BIN)
        .args([
            "custodian",
            "--authority",
            "payments",
            "--poll-interval",
            "200ms",
        ])
        .arg("--catalog")
        .arg(catalog)
        .env("DATABASE_URL", &app.db_url)
        .env("RUST_LOG", "warn")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .env("OTEL_SERVICE_NAME", "ledger-custodian")
        .env("OTEL_BSP_SCHEDULE_DELAY", "200")
        .spawn()
        .unwrap()
}

/// Waits until a custodian holds `payments` (its signal handlers are set by
/// then: a SIGTERM before would end it by the signal).
async fn leased(app: &TestApp) {
    for _ in 0..300 {
        let holder: Option<String> =
            sqlx::query_scalar("select lease_holder from authorities where id = 'payments'")
                .fetch_optional(&app.pool)
                .await
                .unwrap()
                .flatten();
        if holder.is_some() {
            // The process sets its signal handlers as its custodian starts.
            tokio::time::sleep(Duration::from_millis(300)).await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no custodian took the lease within 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_trace_runs_from_its_request_to_the_providers_call_across_a_custodian_restart() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let seen: Shared = Arc::default();
    let base = collector_and_provider(Arc::clone(&seen)).await;
    let dir = std::env::temp_dir().join(format!(
        "command-ledger-traces-{}",
        uuid::Uuid::now_v7().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let catalog = dir.join("ledger.toml");
    std::fs::write(
        &catalog,
        format!("[kinds.refund]\nurl = \"{base}/refunds\"\ntimeout = \"5s\"\n"),
    )
    .unwrap();

    // A first custodian takes the lease, and stops before the command is due.
    let first = custodian(&app, &catalog, &base);
    leased(&app).await;
    let not_before = chrono::Utc::now() + chrono::Duration::seconds(4);
    let mut body = crate::harness::refund(700);
    body["not_before"] = json!(not_before.to_rfc3339());
    let resp = app
        .client
        .post(app.url("/v1/commands"))
        .bearer_auth(&token)
        .header("Idempotency-Key", "traced-1")
        .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN}-01"))
        .header("tracestate", "congo=t61rcWkgMzE")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let id = resp.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let stored: (Option<String>, Option<String>) =
        sqlx::query_as("select trace_parent, trace_state from commands where id = $1::uuid")
            .bind(&id)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        stored,
        (
            Some(format!("00-{TRACE_ID}-{CALLER_SPAN}-01")),
            Some("congo=t61rcWkgMzE".to_owned())
        ),
        "the command keeps the caller's context"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    // SIGTERM: the spans queued are flushed before it exits.
    interrupt_and_wait_term(first);

    // Another custodian process runs it when it comes due.
    let second = custodian(&app, &catalog, &base);
    let mut state = String::new();
    for _ in 0..200 {
        state = sqlx::query_scalar("select state from commands where id = $1::uuid")
            .bind(&id)
            .fetch_one(&app.pool)
            .await
            .unwrap();
        if state == "applied" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(state, "applied");
    interrupt_and_wait_term(second);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let seen = seen.lock().unwrap();
    // The provider's request carries the trace, from the effect's span.
    let [Some(sent)] = seen.provider.as_slice() else {
        panic!("one provider call with a traceparent: {:?}", seen.provider);
    };
    let sent_parts: Vec<&str> = sent.split('-').collect();
    assert_eq!(sent_parts[1], TRACE_ID, "{sent}");
    let effect = seen
        .spans
        .iter()
        .find(|s| s.name == "effect" && s.trace_id == TRACE_ID)
        .unwrap_or_else(|| panic!("an effect span in the caller's trace: {:?}", seen.spans));
    assert_eq!(effect.service, "ledger-custodian");
    assert_eq!(
        effect.parent_span_id, CALLER_SPAN,
        "the effect's span is a child of the caller's"
    );
    // The claim that started it served it among others: a link, not a parent.
    assert!(
        seen.spans.iter().any(|s| s.name == "claim_start"
            && s.links
                .contains(&(TRACE_ID.to_owned(), CALLER_SPAN.to_owned()))),
        "a claim span linked to the caller's: {:?}",
        seen.spans
            .iter()
            .filter(|s| s.name == "claim_start" && !s.links.is_empty())
            .collect::<Vec<_>>()
    );
    // And so did the record of its outcome.
    assert!(
        seen.spans.iter().any(|s| s.name == "record"
            && s.links
                .contains(&(TRACE_ID.to_owned(), CALLER_SPAN.to_owned()))),
        "a record span linked to the caller's"
    );
    // The provider's call is the effect span's child, or its descendant's.
    let in_trace: Vec<&Exported> = seen
        .spans
        .iter()
        .filter(|s| s.trace_id == TRACE_ID)
        .collect();
    let mut parent = sent_parts[2].to_owned();
    let mut hops = 0;
    while parent != effect.span_id {
        let span = in_trace
            .iter()
            .find(|s| s.span_id == parent)
            .unwrap_or_else(|| panic!("{parent} is no span of the trace: {in_trace:?}"));
        parent = span.parent_span_id.clone();
        hops += 1;
        assert!(hops < 10, "{in_trace:?}");
    }
    drop(seen);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `traceparent` that does not conform is ignored, as the specification
/// says: the command is recorded, without a trace context.
#[tokio::test]
async fn a_traceparent_that_does_not_conform_is_ignored_not_refused() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let resp = app
        .client
        .post(app.url("/v1/commands"))
        .bearer_auth(&token)
        .header("Idempotency-Key", "untraced-1")
        .header(
            "traceparent",
            format!("00-{}-{CALLER_SPAN}-01", "0".repeat(32)),
        )
        .header("tracestate", "congo=1")
        .json(&crate::harness::refund(100))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let stored: (Option<String>, Option<String>) = sqlx::query_as(
        "select trace_parent, trace_state from commands where idempotency_key = 'untraced-1'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(stored, (None, None));
}

/// A trace context is not part of a command's fingerprint: the same request
/// sent again from another trace is a replay of the first command, which
/// keeps the first context.
#[tokio::test]
async fn a_copy_sent_from_another_trace_is_the_same_command() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let send = |span: &'static str| {
        app.client
            .post(app.url("/v1/commands"))
            .bearer_auth(&token)
            .header("Idempotency-Key", "twice-traced")
            .header("traceparent", format!("00-{TRACE_ID}-{span}-01"))
            .json(&crate::harness::refund(100))
            .send()
    };
    let first = send(CALLER_SPAN).await.unwrap();
    assert_eq!(first.status(), 202);
    let again = send("00000000000000aa").await.unwrap();
    assert_eq!(again.status(), 200, "a replay, not a conflict");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["disposition"], "replay", "{again}");
    let kept: Option<String> = sqlx::query_scalar(
        "select trace_parent from commands where idempotency_key = 'twice-traced'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(kept, Some(format!("00-{TRACE_ID}-{CALLER_SPAN}-01")));
}

/// Every item of a batch is recorded with the batch request's context, and
/// the database refuses a context written by hand that does not conform,
/// or a change to one.
#[tokio::test]
async fn a_batch_carries_its_context_to_every_item_and_the_database_guards_the_form() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let item = |key: &str| {
        let mut b = crate::harness::refund(100);
        b["idempotency_key"] = json!(key);
        b
    };
    let resp = app
        .client
        .post(app.url("/v1/commands/batch"))
        .bearer_auth(&token)
        .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN}-00"))
        .json(&json!({"items": [item("b-1"), item("b-2")]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let parents: Vec<Option<String>> = sqlx::query_scalar(
        "select trace_parent from commands where idempotency_key in ('b-1', 'b-2') order by 1",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        parents,
        vec![Some(format!("00-{TRACE_ID}-{CALLER_SPAN}-00")); 2]
    );
    let change =
        sqlx::query("update commands set trace_parent = null where idempotency_key = 'b-1'")
            .execute(&app.pool)
            .await
            .unwrap_err();
    assert!(change.to_string().contains("immutable"), "{change}");
}

/// Recovery asks the provider's reconcile probe about a command a dead
/// custodian left `effect_started`: the question carries the command's
/// trace too.
#[tokio::test]
async fn the_reconcile_probe_asks_in_the_commands_trace() {
    use command_ledger::custodian::StepReport;
    use command_ledger::custodian::http_executor::HttpExecutor;
    use command_ledger::custodian::recovery::Recovery;

    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let seen: Shared = Arc::default();
    let base = collector_and_provider(Arc::clone(&seen)).await;
    let effects = || {
        let mut effects = command_ledger::custodian::Effects::default();
        let executor = HttpExecutor::new(
            format!("{base}/refunds"),
            Default::default(),
            Duration::from_millis(200),
        )
        .unwrap()
        .with_reconcile_url(Some(format!("{base}/applied/{{key}}")));
        effects.register_with_margin(
            "refund",
            executor,
            Duration::from_millis(200),
            Duration::ZERO,
        );
        effects
    };
    let traced = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    let resp = app
        .client
        .post(app.url("/v1/commands"))
        .bearer_auth(&token)
        .header("Idempotency-Key", "probed-1")
        .header("traceparent", &traced)
        .json(&crate::harness::refund(100))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    // A custodian starts it and dies before dispatching; its lease lapses.
    let c = crate::harness::custodian(&app.pool, &["payments"], effects(), Duration::from_secs(10));
    c.heartbeat().await.unwrap();
    let started = c
        .claim_and_start(10, &mut StepReport::default())
        .await
        .unwrap();
    assert_eq!(started.len(), 1);
    sqlx::query("update authorities set lease_expires_at = now() - interval '1 second' where id = 'payments'")
        .execute(&app.pool)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let recovery = Recovery::new(
        crate::harness::as_role(&app.pool, command_ledger::db::roles::ServiceRole::Custodian),
        crate::harness::ledger_backend(),
        Arc::new(effects()),
        "recovery:test".into(),
    );
    assert_eq!(
        recovery.run_once().await.unwrap().failed,
        1,
        "the probe said not applied"
    );
    assert_eq!(seen.lock().unwrap().probe, vec![Some(traced)]);
}

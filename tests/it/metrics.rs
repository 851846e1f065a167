//! `/metrics`: operators only; the API's dispositions, the in-process
//! custodian's transitions and effect latencies, and the ledger's gauges.

use command_ledger::db::Role;
use command_ledger::domain::admission::Policies;
use command_ledger::http::AppState;
use std::sync::Arc;

use crate::harness::{TestApp, custodian, fresh_database, problem, refund, serve_state};

/// The value of the sample whose line starts with `series` (name and labels).
pub(crate) fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .unwrap_or_else(|| panic!("no sample {series} in\n{text}"))
        .parse()
        .unwrap()
}

/// An API process serving a fresh database with an in-process custodian of
/// `authority` (its families in `/metrics`), and an operator's token.
pub(crate) async fn serve_with_custodian(
    authority: &str,
) -> (
    std::net::SocketAddr,
    String,
    command_ledger::custodian::Custodian,
) {
    let (_, pool) = fresh_database().await;
    let runner = custodian(
        &pool,
        &[authority],
        command_ledger::custodian::Effects::default(),
        std::time::Duration::from_secs(10),
    );
    let mut state = AppState::new(
        crate::harness::as_role(&pool, command_ledger::db::roles::ServiceRole::Api),
        crate::harness::ledger_backend(),
        Policies::default(),
    );
    state.custodian_stats = Some(Arc::clone(runner.stats()));
    let addr = serve_state(state).await;
    let operator = command_ledger::cli::issue_token(&pool, "ops", Role::Operator, None)
        .await
        .unwrap();
    (addr, operator, runner)
}

/// `/metrics` of the API at `addr`, as `token` reads it.
pub(crate) async fn scrape(addr: std::net::SocketAddr, token: &str) -> String {
    reqwest::Client::new()
        .get(format!("http://{addr}/metrics"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn metrics_are_for_operators_and_count_what_happened() {
    let app = TestApp::spawn().await;
    let device = app.token("kiosk-7", Role::Device).await;
    let operator = app.token("ops", Role::Operator).await;
    app.create(&device, "k1", &refund(1)).await;
    app.create(&device, "k2", &refund(2)).await;
    // A replay and a conflict.
    app.submit(&device, Some("k1"), &refund(1)).await;
    app.submit(&device, Some("k1"), &refund(9)).await;

    problem(
        app.get(&device, "/metrics").await,
        403,
        "/problems/forbidden",
    )
    .await;
    let unauthenticated = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(unauthenticated.status(), 401);

    let resp = app.get(&operator, "/metrics").await;
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = resp.text().await.unwrap();
    assert_eq!(
        sample(&text, "ledger_submissions_total{disposition=\"new\"}"),
        2.0
    );
    assert_eq!(
        sample(&text, "ledger_submissions_total{disposition=\"replay\"}"),
        1.0
    );
    assert_eq!(
        sample(&text, "ledger_submissions_total{disposition=\"conflict\"}"),
        1.0
    );
    assert_eq!(
        sample(&text, "ledger_commands_in_flight{state=\"pending\"}"),
        2.0
    );
    assert!(sample(&text, "ledger_oldest_in_flight_seconds{state=\"pending\"}") >= 0.0);
    assert_eq!(
        sample(&text, "ledger_oldest_in_flight_seconds{state=\"prepared\"}"),
        0.0
    );
    assert_eq!(sample(&text, "ledger_holds_awaiting_decision"), 0.0);
    assert_eq!(sample(&text, "ledger_ambiguous_unresolved"), 0.0);
    assert_eq!(sample(&text, "ledger_ambiguous_total"), 0.0);
    assert_eq!(sample(&text, "ledger_database_up"), 1.0);
    // No custodian in this process: no custodian families.
    assert!(!text.contains("ledger_transitions_total"));
}

#[tokio::test]
async fn the_in_process_custodian_reports_transitions_latency_and_generation() {
    let (addr, operator, runner) = serve_with_custodian("agent-7").await;
    let client = reqwest::Client::new();
    for key in ["p1", "p2", "p3"] {
        let resp = client
            .post(format!("http://{addr}/v1/commands"))
            .bearer_auth(&operator)
            .header("Idempotency-Key", key)
            .json(&serde_json::json!({"kind": "noop", "authority": "agent-7"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 202);
    }
    let report = runner.run_once().await.unwrap();
    assert_eq!(report.applied, 3, "{report:?}");

    let text = scrape(addr, &operator).await;
    let transition = |from: &str, to: &str| {
        sample(
            &text,
            &format!("ledger_transitions_total{{from=\"{from}\",to=\"{to}\"}}"),
        )
    };
    assert_eq!(transition("pending", "prepared"), 3.0);
    assert_eq!(transition("prepared", "effect_started"), 3.0);
    assert_eq!(transition("effect_started", "applied"), 3.0);
    assert_eq!(
        sample(
            &text,
            "ledger_effect_duration_seconds_count{kind=\"noop\",outcome=\"applied\"}"
        ),
        3.0
    );
    assert_eq!(
        sample(
            &text,
            "ledger_effect_duration_seconds_bucket{kind=\"noop\",outcome=\"applied\",le=\"+Inf\"}"
        ),
        3.0
    );
    assert_eq!(
        sample(&text, "ledger_lease_changes_total{change=\"acquired\"}"),
        1.0
    );
    assert_eq!(
        sample(&text, "ledger_authority_generation{authority=\"agent-7\"}"),
        1.0
    );
    assert_eq!(
        sample(&text, "ledger_authority_lease_held{authority=\"agent-7\"}"),
        1.0
    );
    assert_eq!(
        sample(&text, "ledger_commands_in_flight{state=\"pending\"}"),
        0.0
    );
}

/// A custodian process of its own serves its metrics on the address given.
#[tokio::test]
async fn a_standalone_custodian_serves_its_metrics() {
    let app = TestApp::spawn().await;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_command-ledger"))
        .args([
            "--database-url",
            &app.db_url,
            "custodian",
            "--authority",
            "agent-9",
        ])
        .args(["--metrics-listen", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "error")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let mut text = String::new();
    for _ in 0..100 {
        if let Ok(resp) = app.client.get(&url).send().await {
            text = resp.text().await.unwrap();
            if text.contains("ledger_lease_changes_total{change=\"acquired\"} 1") {
                break;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    child.kill().await.unwrap();
    assert_eq!(
        sample(&text, "ledger_lease_changes_total{change=\"acquired\"}"),
        1.0
    );
    assert!(
        text.contains("# TYPE ledger_transitions_total counter"),
        "{text}"
    );
}

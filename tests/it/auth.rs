//! Authentication: every endpoint but the probes needs a live bearer token.

use crate::harness::{TestApp, problem, refund};
use command_ledger::db::Role;
use serde_json::Value;

#[tokio::test]
async fn requests_without_a_live_token_are_401_and_write_nothing() {
    let app = TestApp::spawn().await;
    let token = app.token("dev-1", Role::Device).await;
    let revoked = app.token("dev-2", Role::Device).await;
    command_ledger::db::principals::revoke(&app.pool, Some("dev-2"), None)
        .await
        .unwrap();
    let expired = command_ledger::cli::issue_token(
        &app.pool,
        "dev-3",
        Role::Device,
        Some(chrono::Utc::now() - chrono::Duration::seconds(1)),
    )
    .await
    .unwrap();

    let id: Value = app
        .submit(&token, Some("k"), &refund(1))
        .await
        .json()
        .await
        .unwrap();
    let id = id["id"].as_str().unwrap().to_owned();
    let paths = [
        ("POST", "/v1/commands".to_owned()),
        ("GET", "/v1/commands".to_owned()),
        ("GET", format!("/v1/commands/{id}")),
        ("GET", format!("/v1/commands/{id}/history")),
        ("POST", format!("/v1/commands/{id}/cancel")),
    ];
    let bad_headers = [
        None,
        Some("Bearer clt_not-a-real-token".to_owned()),
        Some(format!("Bearer {revoked}")),
        Some(format!("Bearer {expired}")),
        Some(format!("Basic {token}")),
        Some("Bearer ".to_owned()),
    ];
    for (method, path) in &paths {
        for header in &bad_headers {
            let mut req = app
                .client
                .request(method.parse().unwrap(), app.url(path))
                .header("Idempotency-Key", "k2")
                .json(&refund(2));
            if let Some(h) = header {
                req = req.header("authorization", h);
            }
            let resp = req.send().await.unwrap();
            assert_eq!(resp.headers()["www-authenticate"], "Bearer");
            problem(resp, 401, "/problems/unauthorized").await;
        }
    }
    assert_eq!(app.command_count().await, 1);
    let state: String = sqlx::query_scalar("select state from commands")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(state, "pending", "no unauthenticated cancel went through");
}

#[tokio::test]
async fn the_probes_need_no_token_and_report_readiness() {
    let app = TestApp::spawn().await;
    let health = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let body: Value = ready.json().await.unwrap();
    assert_eq!(body["status"], "ready");
    let spec = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(spec.status(), 200);
    let spec: Value = spec.json().await.unwrap();
    assert_eq!(spec["openapi"], "3.1.0");
    assert!(spec["paths"]["/v1/invoke"]["post"].is_object());
}

#[tokio::test]
async fn readiness_fails_when_a_migration_is_missing() {
    let app = TestApp::spawn().await;
    sqlx::query("delete from _sqlx_migrations")
        .execute(&app.pool)
        .await
        .unwrap();
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
}

#[tokio::test]
async fn unknown_paths_are_problem_404s() {
    let app = TestApp::spawn().await;
    let resp = app
        .client
        .get(app.url("/v2/whatever"))
        .send()
        .await
        .unwrap();
    problem(resp, 404, "/problems/not-found").await;
}

#[tokio::test]
async fn the_rate_limit_stops_the_noisy_device_and_no_other() {
    use command_ledger::http::limits::{Limiter, RateLimit};
    use std::num::NonZeroU32;
    let (_, pool) = crate::harness::fresh_database().await;
    let noisy = command_ledger::cli::issue_token(&pool, "noisy", Role::Device, None)
        .await
        .unwrap();
    let quiet = command_ledger::cli::issue_token(&pool, "quiet", Role::Device, None)
        .await
        .unwrap();
    let mut state = command_ledger::http::AppState::new(
        crate::harness::as_role(&pool, command_ledger::db::roles::ServiceRole::Api),
        crate::harness::ledger_backend(),
        Default::default(),
    );
    // A burst of 5, refilled at 1 per second: the 30 requests below are
    // limited however slowly a loaded machine sends them (up to 5 s).
    state.limiter = Limiter::new(RateLimit {
        per_second: NonZeroU32::new(1).unwrap(),
        burst: NonZeroU32::new(5).unwrap(),
    });
    let base = format!("http://{}", crate::harness::serve_state(state).await);
    let client = reqwest::Client::new();

    let mut limited = 0;
    for _ in 0..30 {
        let resp = client
            .get(format!("{base}/v1/commands"))
            .bearer_auth(&noisy)
            .send()
            .await
            .unwrap();
        if resp.status() == 429 {
            let wait: u64 = resp.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!(wait >= 1);
            problem(resp, 429, "/problems/rate-limited").await;
            limited += 1;
        }
    }
    assert!(limited >= 20, "{limited} of 30 limited");
    let resp = client
        .get(format!("{base}/v1/commands"))
        .bearer_auth(&quiet)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "another device is not affected");
    // A rejected submission changes nothing.
    let body = serde_json::json!({"kind": "steer", "authority": "a", "args": {}});
    let resp = client
        .post(format!("{base}/v1/commands"))
        .bearer_auth(&noisy)
        .header("Idempotency-Key", "x")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    let rows: i64 = sqlx::query_scalar("select count(*) from commands")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 0);
}

/// Sends `request` on a raw connection while reading, and returns all the
/// server answers before it closes (it may answer, and close, before it has
/// read everything sent).
async fn raw_exchange(app: &TestApp, request: String) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let addr = app.base.trim_start_matches("http://").to_owned();
    let (mut read, mut write) = tokio::net::TcpStream::connect(&addr)
        .await
        .unwrap()
        .into_split();
    let writer = tokio::spawn(async move {
        let _ = write.write_all(request.as_bytes()).await;
        write
    });
    let mut response = Vec::new();
    let mut chunk = [0u8; 4096];
    let read_all = async {
        loop {
            match read.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => response.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), read_all)
        .await
        .expect("the server answered and closed within 10 s");
    drop(writer.await);
    String::from_utf8_lossy(&response).into_owned()
}

/// `GET /healthz` with `headers` header lines in all (`Host` and
/// `Connection: close` among them).
fn request_with_headers(headers: usize) -> String {
    let mut request = String::from("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
    for i in 0..headers - 2 {
        request.push_str(&format!("X-Filler-{i}: {i}\r\n"));
    }
    request.push_str("\r\n");
    request
}

/// The documented limit (docs/SECURITY.md, "Limits"): 100 headers are
/// served, the 101st is `431 /problems/headers-too-large`, and ten thousand
/// get the same answer, never a bare close, before any handler (or the
/// database) sees the request.
#[tokio::test]
async fn past_a_hundred_headers_the_answer_is_431_headers_too_large() {
    let app = TestApp::spawn().await;
    let served = raw_exchange(&app, request_with_headers(100)).await;
    assert!(served.starts_with("HTTP/1.1 200 "), "{served}");
    for headers in [101, 10_000] {
        let refused = raw_exchange(&app, request_with_headers(headers)).await;
        let (head, body) = refused
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("{headers} headers: no response: {refused:?}"));
        assert!(
            head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{headers} headers: {head}"
        );
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/problem+json"),
            "{head}"
        );
        let problem: Value = serde_json::from_str(body).unwrap();
        assert_eq!(problem["type"], "/problems/headers-too-large");
        assert_eq!(problem["status"], 431);
    }
}

/// Connections past the bound wait until one closes; they never pile up.
#[tokio::test]
async fn connections_past_the_bound_wait_for_one_to_close() {
    let (_, pool) = crate::harness::fresh_database().await;
    let mut state = command_ledger::http::AppState::new(
        crate::harness::as_role(&pool, command_ledger::db::roles::ServiceRole::Api),
        crate::harness::ledger_backend(),
        Default::default(),
    );
    state.max_connections = 2;
    let addr = crate::harness::serve_state(state).await;

    let idle_a = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _idle_b = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_millis(700))
        .build()
        .unwrap();
    assert!(
        client
            .get(format!("http://{addr}/healthz"))
            .send()
            .await
            .is_err(),
        "a third connection waits"
    );
    drop(idle_a);
    let ok = reqwest::Client::new()
        .get(format!("http://{addr}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200, "and is served once a place frees up");
}

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

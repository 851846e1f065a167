//! Reading commands back: one, a page of them, a history; and who may see what.

use crate::harness::{TestApp, problem, refund};
use command_ledger::db::Role;
use serde_json::Value;

#[tokio::test]
async fn a_device_reads_its_own_command_and_gets_404_for_anothers() {
    let app = TestApp::spawn().await;
    let a = app.token("dev-a", Role::Device).await;
    let b = app.token("dev-b", Role::Device).await;
    let op = app.token("ops", Role::Operator).await;
    let id = app.create(&a, "k", &refund(1)).await;

    let own: Value = app
        .get(&a, &format!("/v1/commands/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(own["id"], id.as_str());
    assert!(own.get("disposition").is_none());

    // Another device cannot tell the command exists.
    problem(
        app.get(&b, &format!("/v1/commands/{id}")).await,
        404,
        "/problems/not-found",
    )
    .await;
    problem(
        app.get(&b, &format!("/v1/commands/{id}/history")).await,
        404,
        "/problems/not-found",
    )
    .await;
    problem(
        app.post(&b, &format!("/v1/commands/{id}/cancel")).await,
        404,
        "/problems/not-found",
    )
    .await;
    let missing = uuid::Uuid::now_v7();
    problem(
        app.get(&b, &format!("/v1/commands/{missing}")).await,
        404,
        "/problems/not-found",
    )
    .await;

    // An operator sees every command.
    assert_eq!(
        app.get(&op, &format!("/v1/commands/{id}")).await.status(),
        200
    );
    problem(
        app.get(&a, "/v1/commands/not-a-uuid").await,
        400,
        "/problems/invalid-id",
    )
    .await;
}

#[tokio::test]
async fn listing_is_newest_first_scoped_and_paginated() {
    let app = TestApp::spawn().await;
    let a = app.token("dev-a", Role::Device).await;
    let b = app.token("dev-b", Role::Device).await;
    let op = app.token("ops", Role::Operator).await;
    let mut mine = Vec::new();
    for i in 0..5 {
        mine.push(app.create(&a, &format!("a{i}"), &refund(1)).await);
    }
    let theirs = app.create(&b, "b0", &refund(1)).await;
    mine.reverse();

    let page1: Value = app
        .get(&a, "/v1/commands?limit=2")
        .await
        .json()
        .await
        .unwrap();
    let ids = |page: &Value| -> Vec<String> {
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(&page1), mine[..2]);
    let cursor = page1["next_after"].as_str().unwrap();
    let page2: Value = app
        .get(&a, &format!("/v1/commands?limit=2&after={cursor}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(ids(&page2), mine[2..4]);
    let cursor = page2["next_after"].as_str().unwrap();
    let page3: Value = app
        .get(&a, &format!("/v1/commands?limit=2&after={cursor}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(ids(&page3), mine[4..]);
    assert!(page3["next_after"].is_null());

    let all: Value = app.get(&op, "/v1/commands").await.json().await.unwrap();
    assert_eq!(all["items"].as_array().unwrap().len(), 6);
    assert_eq!(all["items"][0]["id"], theirs.as_str());

    let pending: Value = app
        .get(&a, "/v1/commands?state=pending&authority=payments")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(pending["items"].as_array().unwrap().len(), 5);
    let none: Value = app
        .get(&a, "/v1/commands?state=applied")
        .await
        .json()
        .await
        .unwrap();
    assert!(none["items"].as_array().unwrap().is_empty());
    let other: Value = app
        .get(&a, "/v1/commands?authority=elsewhere")
        .await
        .json()
        .await
        .unwrap();
    assert!(other["items"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn bad_list_parameters_are_400() {
    let app = TestApp::spawn().await;
    let a = app.token("dev-a", Role::Device).await;
    for q in [
        "state=done",
        "limit=0",
        "limit=501",
        "limit=x",
        "after=nope",
        "authority=a%20b",
        "colour=red",
    ] {
        problem(
            app.get(&a, &format!("/v1/commands?{q}")).await,
            400,
            "/problems/invalid-query",
        )
        .await;
    }
}

#[tokio::test]
async fn history_lists_each_state_change_with_its_actor() {
    let app = TestApp::spawn().await;
    let a = app.token("dev-a", Role::Device).await;
    let id = app.create(&a, "k", &refund(1)).await;
    assert_eq!(
        app.post(&a, &format!("/v1/commands/{id}/cancel"))
            .await
            .status(),
        200
    );

    let h: Value = app
        .get(&a, &format!("/v1/commands/{id}/history"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(h["command_id"], id.as_str());
    let entries = h["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert!(entries[0]["from"].is_null());
    assert_eq!(entries[0]["to"], "pending");
    assert_eq!(entries[0]["actor"], "device:dev-a");
    assert_eq!(entries[1]["from"], "pending");
    assert_eq!(entries[1]["to"], "cancelled");
    assert_eq!(entries[1]["actor"], "device:dev-a");
    assert_eq!(entries[1]["reason"], "cancel requested");
}

/// Every response names its request: the client's `x-request-id`, or one
/// made for it (the same id is on the request's log lines).
#[tokio::test]
async fn responses_carry_the_request_id() {
    let app = TestApp::spawn().await;
    let token = app.token("dev-a", Role::Device).await;
    let made = app.get(&token, "/v1/commands").await;
    let id = made.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");
    let again = app.get(&token, "/v1/commands").await;
    assert_ne!(again.headers()["x-request-id"].to_str().unwrap(), id);
    let given = app
        .client
        .get(app.url("/v1/commands"))
        .bearer_auth(&token)
        .header("x-request-id", "trace-42")
        .send()
        .await
        .unwrap();
    assert_eq!(given.headers()["x-request-id"], "trace-42");
    // Errors too.
    let refused = app
        .client
        .get(app.url("/v1/commands"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    assert!(refused.headers().contains_key("x-request-id"));
}

/// A method a path does not have is a 405 problem with `Allow`, like every
/// other error: not an empty body.
#[tokio::test]
async fn a_method_a_path_does_not_have_is_a_405_problem_with_allow() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let id = app.create(&token, "k", &refund(1)).await;
    for (method, path, allow) in [
        (
            reqwest::Method::DELETE,
            format!("/v1/commands/{id}"),
            "GET,HEAD",
        ),
        (
            reqwest::Method::PUT,
            "/v1/commands".to_owned(),
            "GET,HEAD,POST",
        ),
        (reqwest::Method::GET, "/v1/invoke".to_owned(), "POST"),
        (reqwest::Method::PATCH, "/readyz".to_owned(), "GET,HEAD"),
    ] {
        let resp = app
            .client
            .request(method.clone(), app.url(&path))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        let allowed = resp
            .headers()
            .get("allow")
            .unwrap_or_else(|| panic!("{method} {path}: no Allow header"))
            .to_str()
            .unwrap()
            .replace(' ', "");
        let mut allowed: Vec<&str> = allowed.split(',').collect();
        allowed.sort_unstable();
        assert_eq!(allowed.join(","), allow, "{method} {path}");
        let p = problem(resp, 405, "/problems/method-not-allowed").await;
        assert!(
            p["detail"].as_str().unwrap().contains(method.as_str()),
            "{p}"
        );
    }
}

/// Sends raw bytes (a client library refuses to send what hyper refuses to
/// parse) and returns the status, the head and the body of the answer.
async fn raw_request(app: &TestApp, request: &[u8]) -> (u16, String, Vec<u8>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let addr = app.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut answer),
    )
    .await
    .expect("the server answers and closes")
    .unwrap();
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    let status = head[9..12].parse().unwrap();
    (status, head, answer[split + 4..].to_vec())
}

/// Header values with control bytes never reach a handler: the HTTP layer
/// refuses them. The answer is still the problem document.
#[tokio::test]
async fn a_header_with_control_bytes_is_a_400_problem_not_a_bare_400() {
    let app = TestApp::spawn().await;
    for request in [
        &b"GET /v1/commands HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\x01b\r\n\r\n"[..],
        b"POST /v1/commands HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k\x7f\r\nContent-Length: 2\r\n\r\n{}",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Trace: \x00\r\n\r\n",
    ] {
        let (status, head, body) = raw_request(&app, request).await;
        let shown = String::from_utf8_lossy(request);
        assert_eq!(status, 400, "{shown:?}: {head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/problem+json"),
            "{shown:?}: {head}"
        );
        let body: Value = serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("{shown:?}: body is not JSON ({e}): {head}"));
        assert_eq!(body["type"], "/problems/malformed-request", "{body}");
        assert_eq!(body["status"], 400);
        assert!(body["title"].is_string() && body["detail"].is_string());
    }
    // More headers than the HTTP layer takes: 431, a problem as well.
    let mut many = String::from("GET /healthz HTTP/1.1\r\nHost: x\r\n");
    for i in 0..150 {
        many.push_str(&format!("X-Filler-{i}: {i}\r\n"));
    }
    many.push_str("\r\n");
    let (status, head, body) = raw_request(&app, many.as_bytes()).await;
    assert_eq!(status, 431, "{head}");
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["type"], "/problems/headers-too-large", "{body}");

    // A well-formed request on a raw connection is answered as usual.
    let (status, _, _) = raw_request(
        &app,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200);
}

/// The router takes each route from its handler's OpenAPI attribute: every
/// documented path and method is served (a missing route would be the
/// router's 404 or 405), and an undocumented path is not.
#[tokio::test]
async fn every_documented_operation_is_routed_and_nothing_else_is() {
    use utoipa::OpenApi as _;
    let app = TestApp::spawn().await;
    let doc = command_ledger::http::openapi::ApiDoc::openapi();
    let mut operations = 0;
    for (path, item) in &doc.paths.paths {
        let path = path.replace("{id}", "0190b5e4-0000-7000-8000-000000000000");
        for (method, present) in [
            (reqwest::Method::GET, item.get.is_some()),
            (reqwest::Method::POST, item.post.is_some()),
            (reqwest::Method::DELETE, item.delete.is_some()),
        ] {
            if !present {
                continue;
            }
            operations += 1;
            // No token: a routed operation behind auth answers 401 before
            // anything else; the open ones (health, ready) answer for real.
            let resp = app
                .client
                .request(method.clone(), app.url(&path))
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            assert!(
                status != 404 && status != 405,
                "{method} {path} is documented but answered {status}"
            );
        }
    }
    assert!(operations >= 20, "{operations} operations");
    let resp = app
        .client
        .get(app.url("/v1/nothing-here"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
}

/// A newcomer's browser opening the API's root is sent to the console; any
/// other caller is told where things are (it was a JSON 404).
#[tokio::test]
async fn the_root_sends_a_browser_to_the_console_and_tells_others_where_things_are() {
    let app = TestApp::spawn().await;
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let browser = no_redirects
        .get(app.url("/"))
        .header("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
        .send()
        .await
        .unwrap();
    assert_eq!(browser.status(), 303);
    assert_eq!(browser.headers()["location"], "/console");
    let other = no_redirects.get(app.url("/")).send().await.unwrap();
    assert_eq!(other.status(), 200);
    let body: Value = other.json().await.unwrap();
    assert_eq!(body["console"], "/console");
    assert_eq!(body["openapi"], "/openapi.json");
    let page = app.client.get(app.url("/console")).send().await.unwrap();
    let html = page.text().await.unwrap();
    assert!(
        html.contains(".command-ledger/operator-token"),
        "the token box says where the token is"
    );
}

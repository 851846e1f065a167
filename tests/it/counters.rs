//! The ledger's counters span processes and restarts: requests by outcome
//! from every API process and executions from the history, the same numbers
//! in `GET /v1/state` and `/metrics`, whichever process answers.

use command_ledger::db::Role;
use command_ledger::domain::admission::Policies;
use command_ledger::http::AppState;
use serde_json::{Value, json};
use std::time::Duration;

use crate::harness::{custodian, fresh_database, serve_state};

async fn state_of(client: &reqwest::Client, addr: std::net::SocketAddr, token: &str) -> Value {
    client
        .get(format!("http://{addr}/v1/state"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn submit(
    client: &reqwest::Client,
    addr: std::net::SocketAddr,
    token: &str,
    key: &str,
    body: &Value,
) -> u16 {
    client
        .post(format!("http://{addr}/v1/commands"))
        .bearer_auth(token)
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn two_api_processes_on_one_database_show_the_same_counters() {
    let (url, pool) = fresh_database().await;
    // Two processes: their own pools, their own in-memory counts.
    let other_pool = command_ledger::db::connect(&url, 4).await.unwrap();
    let a = serve_state(AppState::new(
        pool.clone(),
        crate::harness::ledger_backend(),
        Policies::default(),
    ))
    .await;
    let b = serve_state(AppState::new(
        other_pool,
        crate::harness::ledger_backend(),
        Policies::default(),
    ))
    .await;
    let token = command_ledger::cli::issue_token(&pool, "ops", Role::Operator, None)
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let noop = |n: i64| json!({"kind": "noop", "authority": "agent-7", "args": {"n": n}});

    assert_eq!(submit(&client, a, &token, "k1", &noop(1)).await, 202);
    assert_eq!(submit(&client, b, &token, "k2", &noop(2)).await, 202);
    // A replay and a conflict through b, something refused through a.
    assert_eq!(submit(&client, b, &token, "k1", &noop(1)).await, 200);
    assert_eq!(submit(&client, b, &token, "k1", &noop(9)).await, 422);
    let keyless = client
        .post(format!("http://{a}/v1/commands"))
        .bearer_auth(&token)
        .json(&noop(3))
        .send()
        .await
        .unwrap();
    assert_eq!(keyless.status(), 400, "noop needs an idempotency key");
    let runner = custodian(
        &pool,
        &["agent-7"],
        command_ledger::custodian::Effects::default(),
        Duration::from_secs(10),
    );
    assert_eq!(runner.run_once().await.unwrap().applied, 2);

    let expected = json!({
        "requests": 5, "new": 2, "replay": 1, "coalesced": 0,
        "held": 0, "conflict": 1, "refused": 1,
    });
    // Each process adds its counts within a second; both then agree.
    let mut seen = (Value::Null, Value::Null);
    for _ in 0..50 {
        seen = (
            state_of(&client, a, &token).await["ledger"].clone(),
            state_of(&client, b, &token).await["ledger"].clone(),
        );
        if seen.0 == seen.1 && seen.0["requests"] == expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (from_a, from_b) = seen;
    assert_eq!(from_a, from_b, "both processes show the same counters");
    assert_eq!(from_a["requests"], expected);
    assert_eq!(from_a["executions_started"], 2);
    assert_eq!(from_a["outcomes"]["applied"], 2);

    // /metrics reads the same numbers, from either process.
    for addr in [a, b] {
        let text = crate::metrics::scrape(addr, &token).await;
        for line in [
            "ledger_requests_total 5",
            "ledger_submissions_total{disposition=\"replay\"} 1",
            "ledger_submissions_total{disposition=\"conflict\"} 1",
            "ledger_executions_total 2",
            "ledger_outcomes_total{state=\"applied\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
}

#[tokio::test]
async fn the_counters_outlive_the_process_that_counted() {
    let (_, pool) = fresh_database().await;
    let token = command_ledger::cli::issue_token(&pool, "ops", Role::Operator, None)
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let first = listener.local_addr().unwrap();
    let serving = tokio::spawn(command_ledger::http::serve(
        listener,
        AppState::new(
            pool.clone(),
            crate::harness::ledger_backend(),
            Policies::default(),
        ),
        async move {
            stopped.await.ok();
        },
    ));
    let body = json!({"kind": "noop", "authority": "agent-7"});
    assert_eq!(submit(&client, first, &token, "k1", &body).await, 202);
    assert_eq!(submit(&client, first, &token, "k1", &body).await, 200);
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();

    let second = serve_state(AppState::new(
        pool.clone(),
        crate::harness::ledger_backend(),
        Policies::default(),
    ))
    .await;
    let state = state_of(&client, second, &token).await;
    assert_eq!(state["since_start"]["requests"], 0, "{state}");
    assert_eq!(state["ledger"]["requests"]["requests"], 2, "{state}");
    assert_eq!(state["ledger"]["requests"]["new"], 1, "{state}");
    assert_eq!(state["ledger"]["requests"]["replay"], 1, "{state}");
}

#[tokio::test]
async fn folding_finished_minutes_keeps_every_total() {
    let (_, pool) = fresh_database().await;
    sqlx::query(
        "insert into ledger_counts (minute, counter, source, n) values
         (date_trunc('minute', now()) - interval '10 minutes', 'new', 'api:a', 3),
         (date_trunc('minute', now()) - interval '10 minutes', 'new', 'api:b', 4),
         (date_trunc('minute', now()) - interval '3 days', 'executions', 'pg:1', 5),
         (date_trunc('minute', now()) - interval '3 days' - interval '1 hour', 'executions', 'pg:2', 6),
         (date_trunc('minute', now()), 'new', 'api:a', 1)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let before = command_ledger::db::counts::totals(&pool).await.unwrap();
    assert!(
        command_ledger::db::counts::compact(&pool)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        command_ledger::db::counts::totals(&pool).await.unwrap(),
        before
    );
    let rows: i64 = sqlx::query_scalar("select count(*) from ledger_counts")
        .fetch_one(&pool)
        .await
        .unwrap();
    // The current minute's row, one for the folded minute, and at most two
    // days (the two old rows may straddle midnight UTC).
    assert!((3..=4).contains(&rows), "{rows} rows");
}

/// The next `stats` event's JSON from a server-sent event stream.
async fn next_stats(resp: &mut reqwest::Response, buffer: &mut String) -> Value {
    loop {
        if let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            if let Some(data) = frame
                .strip_prefix("event: stats\ndata: ")
                .map(str::trim_end)
            {
                return serde_json::from_str(data).unwrap();
            }
            continue;
        }
        let chunk = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
            .await
            .expect("an event within the refresh interval")
            .unwrap()
            .expect("the stream stays open");
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
    }
}

#[tokio::test]
async fn the_event_stream_sends_a_new_snapshot_when_commands_finish() {
    let (_, pool) = fresh_database().await;
    let addr = serve_state(AppState::new(
        pool.clone(),
        crate::harness::ledger_backend(),
        Policies::default(),
    ))
    .await;
    let token = command_ledger::cli::issue_token(&pool, "ops", Role::Operator, None)
        .await
        .unwrap();
    let device = command_ledger::cli::issue_token(&pool, "kiosk", Role::Device, None)
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let forbidden = client
        .get(format!("http://{addr}/v1/events"))
        .bearer_auth(&device)
        .send()
        .await
        .unwrap();
    assert_eq!(forbidden.status(), 403);

    let mut resp = client
        .get(format!("http://{addr}/v1/events"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut buffer = String::new();
    let first = next_stats(&mut resp, &mut buffer).await;
    assert!(first["totals"].get("executions").is_none(), "{first}");

    let body = json!({"kind": "noop", "authority": "agent-7"});
    assert_eq!(submit(&client, addr, &token, "k1", &body).await, 202);
    let runner = custodian(
        &pool,
        &["agent-7"],
        command_ledger::custodian::Effects::default(),
        Duration::from_secs(10),
    );
    assert_eq!(runner.run_once().await.unwrap().applied, 1);
    let started = tokio::time::Instant::now();
    let mut seen = next_stats(&mut resp, &mut buffer).await;
    while seen["totals"]["executions"] != 1 {
        seen = next_stats(&mut resp, &mut buffer).await;
    }
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "pushed on the outcome's notification, not the periodic refresh"
    );
    assert_eq!(seen["totals"]["requests"], 1, "{seen}");
    assert_eq!(seen["latency_ms"]["applied"], 1, "{seen}");
    assert!(seen["latency_ms"]["p50"].is_number(), "{seen}");
    // In whichever minute it fell: the API counts its requests in the
    // minute its counters are written, a moment after the custodian's
    // claim counted the execution in its own, so across a minute's turn
    // they are a minute apart (the last minute then holds the request only).
    let executions: u64 = seen["minutes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["counts"]["executions"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(executions, 1, "{seen}");
    assert_eq!(seen["authorities"][0]["id"], "agent-7", "{seen}");
}

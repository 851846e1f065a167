//! The client library against a live API: keys made and returned, retries
//! that cannot make a second command (through a proxy that loses answers
//! after the server committed, or answers 503 first), and `ambiguous` as an
//! outcome of its own. Also `command-ledger submit`'s exit statuses.

use command_ledger::db::Role;
use command_ledger::demo_sink::Mode;
use command_ledger_client::{Client, Error, Outcome, RetryPolicy, State, Submission, Submitted};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use crate::harness::{TestApp, TestSink, custodian, refund_effects};

/// What the proxy does with the n-th connection.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Forward the request, let the server answer, and drop the answer.
    LoseAnswer,
    /// Answer 503 with `Retry-After: 1` without forwarding.
    Unavailable,
}

/// A one-request-per-connection HTTP proxy in front of `upstream` that
/// applies `faults` to the first connections, in order, then forwards.
async fn proxy(upstream: String, faults: Vec<Fault>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                return;
            };
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let fault = faults.get(n).copied();
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let request = read_request(&mut client).await;
                if let Some(Fault::Unavailable) = fault {
                    let body = r#"{"type":"/problems/unavailable","title":"Unavailable","status":503,"detail":"try again"}"#;
                    let answer = format!(
                        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\nretry-after: 1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = client.write_all(answer.as_bytes()).await;
                    return;
                }
                let mut server = TcpStream::connect(&upstream).await.unwrap();
                server.write_all(&request).await.unwrap();
                let mut answer = Vec::new();
                let _ = server.read_to_end(&mut answer).await;
                if let Some(Fault::LoseAnswer) = fault {
                    return; // the server committed and answered; the client never hears it
                }
                let _ = client.write_all(&answer).await;
            });
        }
    });
    (format!("http://{addr}"), seen)
}

/// Reads one request (headers and a content-length body) and rewrites it to
/// close the connection after the answer.
async fn read_request(stream: &mut TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the client closed before a whole request");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_string();
    let length = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    while buf.len() < header_end + length {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0);
        buf.extend_from_slice(&chunk[..n]);
    }
    let mut head: Vec<String> = head
        .trim_end()
        .lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .map(str::to_owned)
        .collect();
    head.push("connection: close".to_owned());
    let mut request = (head.join("\r\n") + "\r\n\r\n").into_bytes();
    request.extend_from_slice(&buf[header_end..]);
    request
}

fn quick_retries() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 6,
        max_elapsed: Duration::from_secs(20),
        base_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(200),
        attempt_timeout: Duration::from_secs(5),
    }
}

fn steer() -> Submission {
    Submission::new("steer", "agent-7").args(json!({"direction": "left"}))
}

#[tokio::test]
async fn a_submission_without_a_key_gets_one_and_repeating_it_replays() {
    let app = TestApp::spawn().await;
    let token = app.token("kiosk", Role::Device).await;
    let client = Client::new(&app.base, &token);
    let first = client.submit(&steer()).await.unwrap();
    let key = first.key().to_owned();
    assert_eq!(uuid::Uuid::parse_str(&key).unwrap().get_version_num(), 7);
    let command = first.command().unwrap();
    assert_eq!(command.disposition.as_deref(), Some("new"));
    assert_eq!(command.idempotency_key, key);

    let again = client.submit(&steer().key(&key)).await.unwrap();
    assert_eq!(again.command().unwrap().id, command.id);
    assert_eq!(
        again.command().unwrap().disposition.as_deref(),
        Some("replay")
    );
    assert_eq!(app.command_count().await, 1);
}

#[tokio::test]
async fn answers_lost_after_the_commit_are_retried_into_one_command_and_the_right_answer() {
    let app = TestApp::spawn().await;
    let token = app.token("kiosk", Role::Device).await;
    let upstream = app.base.trim_start_matches("http://").to_owned();
    let (via, seen) = proxy(upstream, vec![Fault::LoseAnswer, Fault::LoseAnswer]).await;
    let client = Client::new(via, &token).with_retry(quick_retries());

    let submitted = client.submit(&steer()).await.unwrap();
    assert_eq!(
        seen.load(Ordering::SeqCst),
        3,
        "two lost answers, then one heard"
    );
    assert_eq!(
        app.command_count().await,
        1,
        "one command, however often it was sent"
    );
    let command = submitted.command().unwrap();
    assert_eq!(
        command.disposition.as_deref(),
        Some("replay"),
        "the first attempt recorded it"
    );
    assert_eq!(command.idempotency_key, submitted.key());
    assert_eq!(command.state, State::Pending);
}

#[tokio::test]
async fn a_503_is_retried_no_sooner_than_retry_after() {
    let app = TestApp::spawn().await;
    let token = app.token("kiosk", Role::Device).await;
    let upstream = app.base.trim_start_matches("http://").to_owned();
    let (via, seen) = proxy(upstream, vec![Fault::Unavailable]).await;
    let client = Client::new(via, &token).with_retry(quick_retries());
    let started = Instant::now();
    let submitted = client.submit(&steer()).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After: 1 was honoured ({:?})",
        started.elapsed()
    );
    assert_eq!(seen.load(Ordering::SeqCst), 2);
    assert_eq!(
        submitted.command().unwrap().disposition.as_deref(),
        Some("new")
    );
}

#[tokio::test]
async fn retries_are_bounded_and_say_what_they_saw_last() {
    let app = TestApp::spawn().await;
    let token = app.token("kiosk", Role::Device).await;
    let upstream = app.base.trim_start_matches("http://").to_owned();
    let (via, seen) = proxy(upstream, vec![Fault::LoseAnswer; 10]).await;
    let mut policy = quick_retries();
    policy.max_attempts = 3;
    let client = Client::new(via, &token).with_retry(policy);
    match client.submit(&steer()).await {
        Err(Error::GaveUp { attempts, last, .. }) => {
            assert_eq!(attempts, 3);
            assert!(matches!(*last, Error::Transport(_)), "{last}");
        }
        other => panic!("expected GaveUp, got {other:?}"),
    }
    assert_eq!(seen.load(Ordering::SeqCst), 3);
    assert_eq!(
        app.command_count().await,
        1,
        "every attempt carried the same key"
    );
}

#[tokio::test]
async fn a_refusal_is_not_retried_and_keeps_its_problem() {
    let app = TestApp::spawn().await;
    let token = app.token("kiosk", Role::Device).await;
    let client = Client::new(&app.base, &token).with_retry(quick_retries());
    client.submit(&steer().key("k-1")).await.unwrap();
    let other = Submission::new("steer", "agent-7")
        .args(json!({"direction": "right"}))
        .key("k-1");
    match client.submit(&other).await {
        Err(Error::Problem {
            status,
            problem_type,
            ..
        }) => {
            assert_eq!(status, 422);
            assert_eq!(problem_type, "/problems/idempotency-key-conflict");
        }
        other => panic!("expected the conflict, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_is_an_outcome_of_its_own_and_wait_returns_it() {
    let app = TestApp::spawn().await;
    let token = app.token("kiosk", Role::Device).await;
    let sink = TestSink::start(Mode::Hang).await;
    let custodian = Arc::new(custodian(
        &app.pool,
        &["payments"],
        refund_effects(&sink.url, Duration::from_millis(300)),
        Duration::from_secs(5),
    ));
    let client = Client::new(&app.base, &token);
    let refund = Submission::new("refund", "payments")
        .args(json!({"to": "ada@example.com", "amount": "12.00 USD"}))
        .key("refund-ada-1");
    let Submitted::Command { command, .. } = client.submit(&refund).await.unwrap() else {
        panic!("a keyed refund is never held");
    };
    let stepping = tokio::spawn({
        let custodian = Arc::clone(&custodian);
        async move { custodian.run_once().await.unwrap() }
    });
    let finished = client
        .wait(command.id, Duration::from_secs(10))
        .await
        .unwrap();
    stepping.await.unwrap();
    assert_eq!(finished.state, State::Ambiguous);
    assert!(
        matches!(finished.outcome(), Outcome::Ambiguous(e) if e["reason"] == "timeout"),
        "{:?}",
        finished.outcome()
    );
    let history = client.history(command.id).await.unwrap();
    assert_eq!(history.last().unwrap().to, "ambiguous");
}

#[tokio::test]
async fn the_submit_command_reports_the_outcome_in_its_exit_status() {
    use command_ledger::cli::submit_exit;
    let app = TestApp::spawn().await;
    let token = app.token("kiosk", Role::Device).await;
    let run = |args: &[&str]| {
        // Not std::process: the API answers on this test's runtime.
        tokio::process::Command::new(env!("CARGO_BIN_EXE_command-ledger"))
            .arg("submit")
            .args(args)
            .env("COMMAND_LEDGER_URL", &app.base)
            .env("COMMAND_LEDGER_TOKEN", &token)
            .output()
    };
    let keyed = [
        "steer",
        "--authority",
        "agent-7",
        "--arg",
        "direction=left",
        "--key",
        "s-1",
    ];
    // Recorded, nobody runs agent-7: without --wait that is success.
    let out = run(&keyed).await.unwrap();
    assert_eq!(
        out.status.code(),
        Some(i32::from(submit_exit::APPLIED_OR_RECORDED))
    );
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(
        line.starts_with("pending") && line.contains("key s-1") && line.contains("(new)"),
        "{line}"
    );
    // Waiting, it is still in flight when the wait ends.
    let mut waiting = keyed.to_vec();
    waiting.extend(["--wait", "1s", "--json"]);
    let out = run(&waiting).await.unwrap();
    assert_eq!(out.status.code(), Some(i32::from(submit_exit::IN_FLIGHT)));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (json["state"].as_str(), json["disposition"].as_str()),
        (Some("pending"), Some("replay"))
    );
    // Cancelled: its own status.
    let id = json["id"].as_str().unwrap();
    Client::new(&app.base, &token)
        .cancel(id.parse().unwrap())
        .await
        .unwrap();
    assert_eq!(
        run(&keyed).await.unwrap().status.code(),
        Some(i32::from(submit_exit::CANCELLED_OR_EXPIRED))
    );
    // A refusal: the same key for another request.
    let other = [
        "steer",
        "--authority",
        "agent-7",
        "--arg",
        "direction=right",
        "--key",
        "s-1",
    ];
    let out = run(&other).await.unwrap();
    assert_eq!(out.status.code(), Some(i32::from(submit_exit::ERROR)));
    assert!(String::from_utf8_lossy(&out.stderr).contains("idempotency-key-conflict"));
    assert_eq!(app.command_count().await, 1);
}

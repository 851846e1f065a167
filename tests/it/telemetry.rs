//! What the logs promise (docs/devices/http.md, "Reading and searching"):
//! a request's log lines sit in a `request` span with its `request_id` (the
//! client's `x-request-id`, or the one made for it and returned); an
//! effect's lines sit in an `effect` span
//! with the command id, kind, authority and generation; `--log-format json`
//! writes one JSON object per line. Read from the subscriber the binary
//! installs (`telemetry::subscriber`), writing to a buffer, and from the
//! binary's own stderr.

use command_ledger::custodian::effects::{Effect, EffectCall, EffectFuture};
use command_ledger::db::Role;
use command_ledger::domain::EffectOutcome;
use command_ledger::telemetry::{self, LogFormat};
use serde_json::Value;
use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tracing_subscriber::EnvFilter;

use crate::harness::{TestApp, refund};

/// Log output kept in memory.
#[derive(Debug, Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// The binary's subscriber in `format`, at its default levels (plus
    /// this test crate's own events at info), writing here.
    pub(crate) fn subscriber(&self, format: LogFormat) -> tracing::Dispatch {
        // tracing caches, when a callsite is first hit, whether any
        // subscriber wants it. While one dispatcher alone is registered, it
        // asks only the hitting thread's default: another test's thread
        // (no subscriber) hitting `effect` first would have it cached as
        // unwanted, here too. A second dispatcher, kept for the process,
        // makes it ask every registered one.
        static SECOND: OnceLock<tracing::Dispatch> = OnceLock::new();
        SECOND.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
        let filter = EnvFilter::new(format!("{},it=info", telemetry::DEFAULT_FILTER));
        let sink = self.clone();
        telemetry::subscriber(format, filter, move || sink.clone(), false)
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        String::from_utf8(self.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// Cancels `id` (which logs `command cancelled` inside the request), with
/// this `x-request-id` if given; returns the `x-request-id` answered.
async fn cancel(app: &TestApp, token: &str, id: &str, request_id: Option<&str>) -> String {
    let mut req = app
        .client
        .post(app.url(&format!("/v1/commands/{id}/cancel")))
        .bearer_auth(token);
    if let Some(request_id) = request_id {
        req = req.header("x-request-id", request_id);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.headers()["x-request-id"].to_str().unwrap().to_owned()
}

/// The one line that logs `message` about command `id`.
fn line_about<'a>(lines: &'a [String], message: &str, id: &str) -> &'a str {
    let found: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains(message) && l.contains(id))
        .collect();
    assert_eq!(found.len(), 1, "one {message:?} line for {id}: {lines:#?}");
    found[0]
}

#[tokio::test]
async fn a_requests_log_lines_carry_its_request_id_sent_or_made() {
    let logs = Captured::default();
    let _logging = tracing::dispatcher::set_default(&logs.subscriber(LogFormat::Text));
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sent = app.create(&token, "sent", &refund(100)).await;
    let made = app.create(&token, "made", &refund(200)).await;

    let echoed = cancel(&app, &token, &sent, Some("req-from-the-client")).await;
    assert_eq!(echoed, "req-from-the-client");
    let generated = cancel(&app, &token, &made, None).await;
    assert!(uuid::Uuid::parse_str(&generated).is_ok(), "{generated}");

    let lines = logs.lines();
    let line = line_about(&lines, "command cancelled", &sent);
    assert!(
        line.contains("request{") && line.contains("request_id=req-from-the-client"),
        "{line}"
    );
    let line = line_about(&lines, "command cancelled", &made);
    assert!(
        line.contains("request{") && line.contains(&format!("request_id={generated}")),
        "{line}"
    );
}

/// An in-process effect that logs while it runs, as a library user's would.
#[derive(Debug)]
struct LoggingEffect;

impl Effect for LoggingEffect {
    fn execute<'a>(&'a self, call: &'a EffectCall) -> EffectFuture<'a> {
        Box::pin(async move {
            tracing::info!(key = %call.downstream_key, "refund sent to the provider");
            EffectOutcome::Applied(serde_json::json!({"refund": "rf_1"}))
        })
    }
}

#[tokio::test]
async fn an_effects_log_lines_sit_in_a_span_naming_its_command_authority_and_generation() {
    let logs = Captured::default();
    let _logging = tracing::dispatcher::set_default(&logs.subscriber(LogFormat::Json));
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let id = app.create(&token, "e1", &refund(300)).await;
    let mut effects = command_ledger::custodian::Effects::default();
    effects.register("refund", LoggingEffect, Duration::from_secs(5));
    let custodian =
        crate::harness::custodian(&app.pool, &["payments"], effects, Duration::from_secs(10));
    assert_eq!(custodian.run_once().await.unwrap().applied, 1);

    let lines = logs.lines();
    let line: Value =
        serde_json::from_str(line_about(&lines, "refund sent to the provider", &id)).unwrap();
    let effect = serde_json::json!({
        "name": "effect",
        "command.id": id,
        "kind": "refund",
        "authority": "payments",
        "generation": 1,
    });
    assert_eq!(line["span"], effect, "{line}");
    assert!(
        line["spans"].as_array().unwrap().contains(&effect),
        "{line}"
    );
}

/// The binary itself, with `--log-format json`: every line it writes to
/// stderr is one JSON object, and a request's lines carry its request id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_logs_one_json_object_per_line_with_the_request_id() {
    let (db_url, pool) = crate::harness::fresh_database().await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_command-ledger"))
        .args([
            "--log-format",
            "json",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--no-custodian",
        ])
        .env("DATABASE_URL", &db_url)
        .env("RUST_LOG", telemetry::DEFAULT_FILTER)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
            lines.push(line);
        }
        lines
    });
    // The listening line names the API's address (the port is the kernel's).
    let api = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("serve logged that it listens");
        let value: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if value["message"] == "command-ledger listening" {
            break value["api"].as_str().unwrap().to_owned();
        }
    };

    let token = command_ledger::cli::issue_token(&pool, "dev", Role::Device, None)
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("{api}/v1/commands"))
        .bearer_auth(&token)
        .header("Idempotency-Key", "j1")
        .json(&refund(400))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let id = resp.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let resp = client
        .post(format!("{api}/v1/commands/{id}/cancel"))
        .bearer_auth(&token)
        .header("x-request-id", "req-json-1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);

    assert!(
        Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = child.wait().unwrap();
    assert!(status.success(), "serve exited with {status}");
    let lines = reader.join().unwrap();

    let objects: Vec<Value> = lines
        .iter()
        .map(|line| match serde_json::from_str::<Value>(line) {
            Ok(value) if value.is_object() => value,
            _ => panic!("not one JSON object: {line:?}"),
        })
        .collect();
    let cancelled: Vec<&Value> = objects
        .iter()
        .filter(|o| o["message"] == "command cancelled" && o["command.id"] == id.as_str())
        .collect();
    assert_eq!(cancelled.len(), 1, "{lines:#?}");
    assert_eq!(cancelled[0]["level"], "INFO");
    assert_eq!(cancelled[0]["span"]["name"], "request", "{}", cancelled[0]);
    assert_eq!(
        cancelled[0]["span"]["request_id"], "req-json-1",
        "{}",
        cancelled[0]
    );
    assert!(
        objects
            .iter()
            .any(|o| o["message"] == "API and custodian stopped; closing the database"),
        "{lines:#?}"
    );
}

//! The demo sink: a small HTTP "payments provider" that really applies
//! things, for the quickstart and the tests. It keeps a durable log (one JSON
//! line per request, fsynced before it answers), honours idempotency keys,
//! and fences: it refuses a generation older than one it has seen for that
//! authority. Its log is the external count of effects.
//!
//! An optional latency makes it take its time before applying (so that
//! copies of one request visibly overlap). Modes (the default from the
//! command line, or `"mode"` in the args):
//! `ok` applies and answers; `reject` refuses (422, nothing applied); `hang`
//! applies and never answers; `stall` takes the request and sits on it,
//! never applying it nor answering (a provider that went down before doing
//! anything); `reset-after-apply` applies and breaks the connection before
//! the response body; `late` takes the request, never answers, and applies
//! it 3 s later whether or not its caller is still there (a provider that
//! finishes what it was sent after its caller gave up); `busy` answers
//! `503` with `Retry-After: 1`, nothing applied, until the request says it
//! is attempt [`BUSY_UNTIL`] (`Ledger-Command-Attempt`), and then applies as `ok`
//! (a provider that is over its limit for a while).
//!
//! `GET /stats` counts what it logged, by outcome, and the most requests it
//! was answering at once (`most_at_once`: what a limit per provider let
//! through).

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path as FsPath;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use crate::custodian::http_executor::{
    HEADER_ATTEMPT, HEADER_AUTHORITY, HEADER_GENERATION, HEADER_KEY,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Ok,
    Reject,
    Hang,
    Stall,
    ResetAfterApply,
    Late,
    Busy,
}

/// The attempt from which the `busy` mode applies.
pub const BUSY_UNTIL: u32 = 3;

/// How long after a request the `late` mode applies it.
pub const LATE_BY: std::time::Duration = std::time::Duration::from_secs(3);

/// One line of the sink's log.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LogLine {
    /// `applied`, `replayed` (key seen before, nothing applied), `rejected`, `fenced`.
    pub event: String,
    pub key: String,
    pub authority: String,
    pub generation: i64,
    pub at: chrono::DateTime<chrono::Utc>,
    #[serde(default)]
    pub response: Value,
    /// The W3C `traceparent` the request carried, if any: which trace the
    /// refund belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

#[derive(Debug)]
struct Ledger {
    log: File,
    applied: HashMap<String, Value>,
    highest_generation: HashMap<String, i64>,
    counts: HashMap<String, u64>,
}

#[derive(Debug, Clone)]
struct Sink {
    mode: Mode,
    /// How long the "provider" takes before it applies a request.
    latency: std::time::Duration,
    ledger: Arc<Mutex<Ledger>>,
    /// Requests being answered now, and the most there ever were at once
    /// (`/stats`: what a limit per provider let through).
    at_once: Arc<AtomicUsize>,
    most_at_once: Arc<AtomicUsize>,
}

/// One request being answered, counted in [`Sink::at_once`] until dropped
/// (answered, or abandoned by its caller).
struct Answering(Arc<AtomicUsize>);

impl Answering {
    fn start(sink: &Sink) -> Answering {
        let now = sink.at_once.fetch_add(1, Ordering::SeqCst) + 1;
        sink.most_at_once.fetch_max(now, Ordering::SeqCst);
        Answering(Arc::clone(&sink.at_once))
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Reads a sink log (for tests and checks).
pub fn read_log(path: &FsPath) -> std::io::Result<Vec<LogLine>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    BufReader::new(file)
        .lines()
        .map(|line| {
            let line = line?;
            serde_json::from_str(&line)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        })
        .collect()
}

/// The sink's router over the log at `log_path` (created, or replayed to
/// rebuild its state).
/// `latency` is how long each request takes before it is applied.
pub fn router(
    log_path: &FsPath,
    mode: Mode,
    latency: std::time::Duration,
) -> std::io::Result<Router> {
    let mut ledger = Ledger {
        log: OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)?,
        applied: HashMap::new(),
        highest_generation: HashMap::new(),
        counts: HashMap::new(),
    };
    for line in read_log(log_path)? {
        ledger.note(&line);
    }
    let sink = Sink {
        mode,
        latency,
        ledger: Arc::new(Mutex::new(ledger)),
        at_once: Arc::default(),
        most_at_once: Arc::default(),
    };
    Ok(Router::new()
        .route("/applied/{key}", get(applied))
        .route("/stats", get(stats))
        .route("/{*path}", post(apply))
        .with_state(sink))
}

impl Ledger {
    fn note(&mut self, line: &LogLine) {
        *self.counts.entry(line.event.clone()).or_default() += 1;
        if line.event == "applied" {
            self.applied.insert(line.key.clone(), line.response.clone());
        }
        if line.event != "fenced" {
            let g = self
                .highest_generation
                .entry(line.authority.clone())
                .or_default();
            *g = (*g).max(line.generation);
        }
    }

    /// Appends and fsyncs: nothing is answered before its line is durable.
    fn append(&mut self, line: &LogLine) -> std::io::Result<()> {
        let mut text = serde_json::to_string(&line).map_err(std::io::Error::other)?;
        text.push('\n');
        self.log.write_all(text.as_bytes())?;
        self.log.sync_data()?;
        self.note(line);
        Ok(())
    }
}

fn bad_request(why: &str) -> Response {
    (StatusCode::BAD_REQUEST, axum::Json(json!({"error": why}))).into_response()
}

async fn apply(State(sink): State<Sink>, headers: HeaderMap, body: Bytes) -> Response {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (Some(key), Some(authority)) = (text(HEADER_KEY), text(HEADER_AUTHORITY)) else {
        return bad_request("Idempotency-Key and Ledger-Authority are required");
    };
    let Some(generation) = text(HEADER_GENERATION).and_then(|g| g.parse::<i64>().ok()) else {
        return bad_request("Ledger-Generation must be an integer");
    };
    let _answering = Answering::start(&sink);
    let trace = text("traceparent");
    let args: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mode = args
        .get("mode")
        .and_then(|m| serde_json::from_value::<Mode>(m.clone()).ok())
        .unwrap_or(sink.mode);

    if !sink.latency.is_zero() {
        tokio::time::sleep(sink.latency).await;
    }
    match mode {
        // Nothing applied, nothing logged, no answer.
        Mode::Stall => return std::future::pending().await,
        Mode::Late => {
            // Apart from the request, so that a caller hanging up does not
            // stop it.
            tokio::spawn(async move {
                tokio::time::sleep(LATE_BY).await;
                let _ = record(&sink, &key, &authority, generation, mode, trace.as_deref());
            });
            return std::future::pending().await;
        }
        Mode::Busy
            if text(HEADER_ATTEMPT)
                .and_then(|a| a.parse::<u32>().ok())
                .unwrap_or(1)
                < BUSY_UNTIL =>
        {
            return busy(&sink, &key, &authority, generation, trace.as_deref());
        }
        _ => {}
    }
    let (status, response) =
        match record(&sink, &key, &authority, generation, mode, trace.as_deref()) {
            Ok(answer) => answer,
            Err(failed) => return (StatusCode::INTERNAL_SERVER_ERROR, failed).into_response(),
        };
    if status != StatusCode::OK {
        return (status, axum::Json(response)).into_response();
    }
    match mode {
        Mode::Hang => std::future::pending().await,
        Mode::ResetAfterApply => Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, "64")
            .body(Body::new(Broken))
            .expect("a valid response"),
        Mode::Ok | Mode::Reject | Mode::Stall | Mode::Late | Mode::Busy => {
            (StatusCode::OK, axum::Json(response)).into_response()
        }
    }
}

/// One line of the log, for a request under `key` from `authority` at
/// `generation`, written now.
fn log_line(
    event: &str,
    response: Value,
    key: &str,
    authority: &str,
    generation: i64,
    traceparent: Option<&str>,
) -> LogLine {
    LogLine {
        event: event.to_owned(),
        key: key.to_owned(),
        authority: authority.to_owned(),
        generation,
        at: chrono::Utc::now(),
        response,
        traceparent: traceparent.map(str::to_owned),
    }
}

/// The `busy` mode's answer before [`BUSY_UNTIL`]: logged (`busy`), nothing
/// applied, `503` with `Retry-After: 1`.
fn busy(
    sink: &Sink,
    key: &str,
    authority: &str,
    generation: i64,
    traceparent: Option<&str>,
) -> Response {
    let response = json!({"error": "busy", "retry_after_s": 1});
    let line = log_line(
        "busy",
        response.clone(),
        key,
        authority,
        generation,
        traceparent,
    );
    if let Err(e) = sink.ledger.lock().expect("sink lock").append(&line) {
        tracing::error!(error = %e, "demo sink log write failed");
        return (StatusCode::INTERNAL_SERVER_ERROR, "log write failed").into_response();
    }
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "1")],
        axum::Json(response),
    )
        .into_response()
}

/// Applies (or fences, refuses, replays) one request and logs it, durably,
/// before anything is answered.
fn record(
    sink: &Sink,
    key: &str,
    authority: &str,
    generation: i64,
    mode: Mode,
    traceparent: Option<&str>,
) -> Result<(StatusCode, Value), &'static str> {
    let line = |event: &str, response: Value| {
        log_line(event, response, key, authority, generation, traceparent)
    };
    let mut ledger = sink.ledger.lock().expect("sink lock");
    let highest = ledger
        .highest_generation
        .get(authority)
        .copied()
        .unwrap_or(0);
    let (event, status, response) = if generation < highest {
        (
            "fenced",
            StatusCode::CONFLICT,
            json!({"error": "stale_generation", "highest_seen": highest}),
        )
    } else if mode == Mode::Reject {
        (
            "rejected",
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"error": "refused by the provider"}),
        )
    } else if let Some(previous) = ledger.applied.get(key) {
        ("replayed", StatusCode::OK, previous.clone())
    } else {
        let n = ledger.applied.len() + 1;
        (
            "applied",
            StatusCode::OK,
            json!({"refund_id": format!("rf_{n:06}"), "key": key}),
        )
    };
    if let Err(e) = ledger.append(&line(event, response.clone())) {
        tracing::error!(error = %e, "demo sink log write failed");
        return Err("log write failed");
    }
    Ok((status, response))
}

/// The reconcile probe: did the effect with this key run?
async fn applied(State(sink): State<Sink>, Path(key): Path<String>) -> Response {
    match sink.ledger.lock().expect("sink lock").applied.get(&key) {
        Some(response) => (StatusCode::OK, axum::Json(response.clone())).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": "not applied"})),
        )
            .into_response(),
    }
}

async fn stats(State(sink): State<Sink>) -> axum::Json<Value> {
    let ledger = sink.ledger.lock().expect("sink lock");
    axum::Json(json!({
        "counts": ledger.counts,
        "highest_generation": ledger.highest_generation,
        "most_at_once": sink.most_at_once.load(Ordering::SeqCst),
    }))
}

/// A response body that fails at once: the connection breaks mid-response.
#[derive(Debug)]
struct Broken;

impl http_body::Body for Broken {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        Poll::Ready(Some(Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset after apply",
        ))))
    }
}

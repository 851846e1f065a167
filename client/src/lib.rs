//! command-ledger-client: call the ledger's HTTP API so that a retry can
//! never make a second command.
//!
//! Every submission carries an idempotency key (a UUIDv7 made here unless you
//! give one) and is returned with it, so you can persist the key next to
//! your own record. A request whose answer is lost (connection reset,
//! timeout) or refused for the moment (`429`, `500`, `502`, `503`, `504`) is
//! sent again with the **same key and body**, after an exponentially growing,
//! fully jittered pause (at least the server's `Retry-After`), bounded in
//! count and in time: the ledger answers a repeat with the one command it
//! recorded (`replay`), never a second one. A definite refusal (`400`, `401`,
//! `403`, `404`, `409`, `422`, ...) is returned at once as [`Error::Problem`].
//! `409` is never retried: the ledger answers a copy that arrives while the
//! first is in flight with that in-flight command, not with `409`; its
//! `409`s are decisions (too late to cancel, a near-duplicate refused, a
//! hold already decided).
//!
//! An outcome is read with [`Command::outcome`]: `ambiguous` is its own
//! variant, [`Outcome::Ambiguous`], never an error, because retrying an
//! ambiguous command blindly is exactly what must not happen (the effect may
//! have run). A person, or a reconcile probe, decides; a new attempt is a new
//! command, submitted knowingly with a new key.
//!
//! ```no_run
//! use command_ledger_client::{Client, Outcome, Submission};
//! use serde_json::json;
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), command_ledger_client::Error> {
//! let client = Client::new("http://127.0.0.1:8080", "clt_…");
//! let refund = Submission::new("refund", "payments")
//!     .args(json!({"to": "ada@example.com", "amount": "12.00 USD"}))
//!     .wait(Duration::from_secs(10));
//! let submitted = client.submit(&refund).await?;
//! // Persist submitted.key() before anything else: resubmitting with it is safe.
//! if let Some(command) = submitted.command() {
//!     match command.outcome() {
//!         Outcome::Applied(result) => println!("refunded: {result}"),
//!         Outcome::Failed(error) => println!("not refunded: {error}"),
//!         Outcome::Ambiguous(error) => println!("unknown, ask a person: {error}"),
//!         other => println!("not finished yet: {other:?}"),
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! Outcome webhooks are managed here too: [`Client::register_webhook`],
//! [`Client::webhooks`], [`Client::disable_webhook`],
//! [`Client::webhook_events`] and [`Client::redeliver_webhook_event`]
//! (docs/WEBHOOKS.md says what is sent and how to check its signature).
//!
//! Plain HTTP only (loopback, or behind a TLS-terminating proxy). With the
//! `outbox` feature, [`outbox::Outbox`] keeps commands in a local SQLite
//! file, written before they are sent, for devices that lose power or
//! network.

#[cfg(feature = "outbox")]
pub mod outbox;

use chrono::{DateTime, Utc};
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// The longest wait the server grants by default; longer waits are made of
/// several requests.
const SERVER_WAIT_CAP: Duration = Duration::from_secs(60);

/// How retries are bounded and spaced.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Most attempts of one request, the first included.
    pub max_attempts: u32,
    /// No attempt starts after this much time since the first.
    pub max_elapsed: Duration,
    /// The pause before the second attempt is drawn from `[0, base_delay]`,
    /// and the bound doubles with each attempt (full jitter) ...
    pub base_delay: Duration,
    /// ... up to this.
    pub max_delay: Duration,
    /// How long one attempt may take, beyond any wait it asks the server for.
    pub attempt_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 8,
            max_elapsed: Duration::from_secs(60),
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(10),
            attempt_timeout: Duration::from_secs(30),
        }
    }
}

/// Why a call did not produce an answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server refused the request with a problem document (RFC 9457).
    #[error("{status} {problem_type}: {detail}")]
    Problem {
        status: u16,
        /// The stable problem type, such as `/problems/idempotency-key-conflict`.
        problem_type: String,
        detail: String,
        /// The whole document (it may carry more, such as `command_id`).
        body: Value,
    },
    /// Every attempt allowed failed for a reason worth retrying; `last` is
    /// the last one. For a submission, the command may or may not have been
    /// recorded: resubmit with the same key later to find out.
    #[error("gave up after {attempts} attempts in {elapsed:?}: {last}")]
    GaveUp {
        attempts: u32,
        elapsed: Duration,
        last: Box<Error>,
    },
    /// The connection failed or the answer did not arrive.
    #[error("transport: {0}")]
    Transport(#[from] reqwest::Error),
    /// A transient refusal (`429`, `5xx`) as the last attempt saw it.
    #[error("{status} (retryable): {body}")]
    Transient { status: u16, body: String },
    /// The answer was not what the API documents.
    #[error("unexpected answer ({status}): {body}")]
    Unexpected { status: u16, body: String },
}

/// A command's state in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Pending,
    Prepared,
    EffectStarted,
    Applied,
    Failed,
    Ambiguous,
    Cancelled,
    Expired,
}

impl State {
    pub fn is_terminal(self) -> bool {
        !matches!(
            self,
            State::Pending | State::Prepared | State::EffectStarted
        )
    }
}

/// A command as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Command {
    pub id: Uuid,
    pub kind: String,
    pub state: State,
    pub authority: AuthorityView,
    pub idempotency_key: String,
    pub run_id: Option<String>,
    pub args: Value,
    pub result: Option<Value>,
    pub error: Option<Value>,
    pub request_digest: String,
    pub deadline: Option<DateTime<Utc>>,
    /// Not claimed before this instant.
    #[serde(default)]
    pub not_before: Option<DateTime<Utc>>,
    /// Pending and waiting for `not_before`, when the server answered.
    #[serde(default)]
    pub scheduled: bool,
    /// Higher is claimed first within the authority.
    #[serde(default)]
    pub priority: i16,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// On a submission's answer: `new`, `replay` or `coalesced`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disposition: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuthorityView {
    pub id: String,
    pub generation: Option<i64>,
    pub pinned: bool,
}

/// What a command's state means for the caller.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome<'a> {
    /// The effect ran; its result.
    Applied(&'a Value),
    /// The effect certainly did not happen (refused, never sent, or the
    /// provider's probe says it never ran); why.
    Failed(&'a Value),
    /// Nobody can tell whether the effect ran. Never retry this blindly.
    Ambiguous(&'a Value),
    /// Cancelled before any effect.
    Cancelled(&'a Value),
    /// Expired before any effect (deadline passed, or its pinned generation
    /// was superseded).
    Expired(&'a Value),
    /// Not finished yet.
    InFlight(State),
}

impl Command {
    pub fn outcome(&self) -> Outcome<'_> {
        const NULL: &Value = &Value::Null;
        let error = self.error.as_ref().unwrap_or(NULL);
        match self.state {
            State::Applied => Outcome::Applied(self.result.as_ref().unwrap_or(NULL)),
            State::Failed => Outcome::Failed(error),
            State::Ambiguous => Outcome::Ambiguous(error),
            State::Cancelled => Outcome::Cancelled(error),
            State::Expired => Outcome::Expired(error),
            s @ (State::Pending | State::Prepared | State::EffectStarted) => Outcome::InFlight(s),
        }
    }
}

/// A near-duplicate held for a person's decision.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hold {
    pub id: Uuid,
    pub state: String,
    pub kind: String,
    pub authority: String,
    pub run_id: Option<String>,
    pub args: Value,
    /// The earlier command with the same intent.
    pub resembles: Uuid,
    /// The command recorded when the hold was released.
    pub command_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

/// The answer to a submission, with the key it was made under.
#[derive(Debug, Clone)]
pub enum Submitted {
    /// Recorded (or found recorded: `disposition` says which).
    Command { key: String, command: Command },
    /// Held as a near-duplicate of an earlier command, for a person.
    Held { key: String, hold: Hold },
}

impl Submitted {
    /// The idempotency key the submission was made under (generated unless
    /// given): resubmitting with it is always safe.
    pub fn key(&self) -> &str {
        match self {
            Submitted::Command { key, .. } | Submitted::Held { key, .. } => key,
        }
    }

    pub fn command(&self) -> Option<&Command> {
        match self {
            Submitted::Command { command, .. } => Some(command),
            Submitted::Held { .. } => None,
        }
    }
}

/// One item's answer in a batch.
#[derive(Debug, Clone)]
pub enum ItemAnswer {
    /// Recorded, or found recorded (the command's `disposition` says which).
    Submitted(Box<Submitted>),
    /// Refused: the problem the server answered for this item alone (a key
    /// conflict, invalid arguments, ...). Sending it again changes nothing.
    Refused {
        key: String,
        status: u16,
        problem: Value,
    },
}

impl ItemAnswer {
    fn from_json(a: &Value, key: String) -> Result<ItemAnswer, Error> {
        let status = a["status"]
            .as_u64()
            .and_then(|s| u16::try_from(s).ok())
            .unwrap_or(0);
        if let Some(command) = a.get("command") {
            let command =
                serde_json::from_value(command.clone()).map_err(|e| unexpected(status, &e))?;
            return Ok(ItemAnswer::Submitted(Box::new(Submitted::Command {
                key,
                command,
            })));
        }
        if let Some(held) = a.get("hold") {
            let hold =
                serde_json::from_value(held["hold"].clone()).map_err(|e| unexpected(status, &e))?;
            return Ok(ItemAnswer::Submitted(Box::new(Submitted::Held {
                key,
                hold,
            })));
        }
        Ok(ItemAnswer::Refused {
            key,
            status,
            problem: a.get("problem").cloned().unwrap_or(Value::Null),
        })
    }

    /// The idempotency key the item was sent under.
    pub fn key(&self) -> &str {
        match self {
            ItemAnswer::Submitted(s) => s.key(),
            ItemAnswer::Refused { key, .. } => key,
        }
    }
}

/// A command to submit.
#[derive(Debug, Clone)]
pub struct Submission {
    pub kind: String,
    pub authority: String,
    /// Pin the command to this generation of the authority.
    pub generation: Option<i64>,
    pub args: Value,
    /// The idempotency key; `None` makes a UUIDv7 once, at the first attempt.
    pub key: Option<String>,
    pub run_id: Option<String>,
    pub deadline: Option<DateTime<Utc>>,
    /// Not to be claimed before this instant.
    pub not_before: Option<DateTime<Utc>>,
    /// -100..=100; `None`: the kind's.
    pub priority: Option<i16>,
    /// Ask the server to answer once the command is terminal, or after this long.
    pub wait: Option<Duration>,
}

impl Submission {
    pub fn new(kind: impl Into<String>, authority: impl Into<String>) -> Self {
        Submission {
            kind: kind.into(),
            authority: authority.into(),
            generation: None,
            args: json!({}),
            key: None,
            run_id: None,
            deadline: None,
            not_before: None,
            priority: None,
            wait: None,
        }
    }

    #[must_use]
    pub fn args(mut self, args: Value) -> Self {
        self.args = args;
        self
    }

    #[must_use]
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    #[must_use]
    pub fn run_id(mut self, run_id: impl Into<String>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }

    #[must_use]
    pub fn pinned(mut self, generation: i64) -> Self {
        self.generation = Some(generation);
        self
    }

    #[must_use]
    pub fn deadline(mut self, deadline: DateTime<Utc>) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Not to be claimed before `at` (recorded at once; cancellable until
    /// it starts).
    #[must_use]
    pub fn not_before(mut self, at: DateTime<Utc>) -> Self {
        self.not_before = Some(at);
        self
    }

    /// Claimed before lower priorities of its authority (with aging), within
    /// what the kind allows.
    #[must_use]
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = Some(priority);
        self
    }

    #[must_use]
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    fn body(&self) -> Value {
        let authority = match self.generation {
            Some(g) => json!({"id": self.authority, "generation": g}),
            None => json!(self.authority),
        };
        let mut body = json!({"kind": self.kind, "authority": authority, "args": self.args});
        if let Some(run_id) = &self.run_id {
            body["run_id"] = json!(run_id);
        }
        if let Some(deadline) = &self.deadline {
            body["deadline"] = json!(deadline);
        }
        if let Some(at) = &self.not_before {
            body["not_before"] = json!(at);
        }
        if let Some(priority) = self.priority {
            body["priority"] = json!(priority);
        }
        body
    }
}

/// One entry of a command's history.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub from: Option<String>,
    pub to: String,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub generation: Option<i64>,
    pub reason: Option<String>,
}

/// What `POST /v1/invoke` answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Invoked {
    /// `executed`, `coalesced`, `replay`, `held` or `pending`.
    pub outcome: String,
    /// The intent digest: equal for every spelling of one intent.
    pub fingerprint: String,
    pub command_id: Option<Uuid>,
    pub state: Option<State>,
    pub result: Option<Value>,
    pub error: Option<Value>,
    pub hold_id: Option<Uuid>,
    /// How many attempts the command took, when the ledger retried a
    /// failure with nothing done (`None`: one); `command_id` is the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
}

/// A kind the ledger knows, as `GET /v1/kinds` lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Kind {
    pub kind: String,
    /// The authority `invoke` uses for it; `None`: the caller must name one.
    pub authority: Option<String>,
    /// `required` or `fingerprint` (the intent may stand in for a key).
    pub key: String,
    pub description: Option<String>,
    /// A JSON Schema of the args (an object schema).
    pub args_schema: Value,
}

/// Whose commands a webhook endpoint receives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookScope {
    /// The caller's fleet: kinds with `dedup_scope = fleet` (the default), any member's commands.
    #[default]
    Fleet,
    /// The caller alone: kinds with `dedup_scope = principal`.
    Principal,
}

/// An endpoint to register (`POST /v1/webhooks`).
#[derive(Debug, Clone, Serialize)]
pub struct WebhookRegistration {
    pub url: String,
    /// Only these kinds (`None`: every kind).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<String>>,
    /// Only these terminal states (`None`: all five).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub states: Option<Vec<String>>,
    pub scope: WebhookScope,
}

impl WebhookRegistration {
    pub fn new(url: impl Into<String>) -> Self {
        WebhookRegistration {
            url: url.into(),
            kinds: None,
            states: None,
            scope: WebhookScope::default(),
        }
    }

    #[must_use]
    pub fn kinds<I: IntoIterator<Item = S>, S: Into<String>>(mut self, kinds: I) -> Self {
        self.kinds = Some(kinds.into_iter().map(Into::into).collect());
        self
    }

    #[must_use]
    pub fn states<I: IntoIterator<Item = S>, S: Into<String>>(mut self, states: I) -> Self {
        self.states = Some(states.into_iter().map(Into::into).collect());
        self
    }

    #[must_use]
    pub fn scope(mut self, scope: WebhookScope) -> Self {
        self.scope = scope;
        self
    }
}

/// A webhook endpoint, as listed (never its secret).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Webhook {
    pub id: Uuid,
    pub url: String,
    /// The dedup space whose commands it receives (a fleet's or a principal's id).
    pub scope: Uuid,
    pub kinds: Option<Vec<String>>,
    pub states: Option<Vec<String>>,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub disabled_at: Option<DateTime<Utc>>,
}

/// A registered endpoint and its secret, which is shown this once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegisteredWebhook {
    #[serde(flatten)]
    pub webhook: Webhook,
    /// The key of `Ledger-Signature` (HMAC-SHA256 over `"{t}.{body}"`).
    pub secret: String,
}

/// One attempt at sending a webhook event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WebhookAttempt {
    pub n: i32,
    pub at: DateTime<Utc>,
    /// The receiver's status; `None` when none came back.
    pub status: Option<i32>,
    pub error: Option<String>,
    pub duration_ms: i32,
}

/// A webhook event: an outcome to push to one endpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WebhookEvent {
    /// Sent as `Ledger-Event-Id`: the receiver's key for duplicates.
    pub id: Uuid,
    pub endpoint_id: Uuid,
    pub command_id: Uuid,
    /// `pending`, `delivered` or `expired`.
    pub state: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    /// What is sent beside `event_id` and `created_at`.
    pub payload: Value,
    pub attempts: Vec<WebhookAttempt>,
}

/// A client of one ledger API, with one bearer token.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
    retry: RetryPolicy,
    /// The caller's W3C trace context, sent on every request
    /// (`traceparent`, `tracestate`): the ledger keeps it with the commands
    /// it records and carries it on to the provider.
    trace: Option<(String, Option<String>)>,
}

impl Client {
    /// `base` is the API's root, such as `http://127.0.0.1:8080`.
    pub fn new(base: impl Into<String>, token: impl Into<String>) -> Self {
        Client {
            http: reqwest::Client::new(),
            base: base.into().trim_end_matches('/').to_owned(),
            token: token.into(),
            retry: RetryPolicy::default(),
            trace: None,
        }
    }

    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The same API, each request sent in the caller's trace: `traceparent`
    /// (and `tracestate`) as W3C Trace Context writes them, for example
    /// from the caller's OpenTelemetry span. The ledger ignores a value that
    /// does not conform, as the specification says.
    #[must_use]
    pub fn with_trace_context(
        &self,
        traceparent: impl Into<String>,
        tracestate: Option<String>,
    ) -> Self {
        Client {
            trace: Some((traceparent.into(), tracestate)),
            ..self.clone()
        }
    }

    /// The same API as another principal (sharing connections).
    #[must_use]
    pub fn with_token(&self, token: impl Into<String>) -> Self {
        Client {
            token: token.into(),
            ..self.clone()
        }
    }

    /// The kinds the ledger knows (`GET /v1/kinds`), by name.
    pub async fn kinds(&self) -> Result<Vec<Kind>, Error> {
        #[derive(Deserialize)]
        struct Kinds {
            items: Vec<Kind>,
        }
        let k: Kinds = decode(
            self.send(Method::GET, "/v1/kinds", Duration::ZERO, |r| r)
                .await?,
        )
        .await?;
        Ok(k.items)
    }

    /// Records a command (`POST /v1/commands`), retrying safely: every
    /// attempt carries the same key and body.
    pub async fn submit(&self, s: &Submission) -> Result<Submitted, Error> {
        let key = s.key.clone().unwrap_or_else(|| Uuid::now_v7().to_string());
        let body = s.body();
        let wait = s.wait.unwrap_or_default().min(SERVER_WAIT_CAP);
        let response = self
            .send(Method::POST, "/v1/commands", wait, |r| {
                let r = r.header("Idempotency-Key", &key).json(&body);
                if wait.is_zero() {
                    r
                } else {
                    r.header("Prefer", format!("wait={}", wait.as_secs()))
                }
            })
            .await?;
        let value: Value = decode(response).await?;
        if value.get("disposition").and_then(Value::as_str) == Some("held") {
            let hold =
                serde_json::from_value(value["hold"].clone()).map_err(|e| unexpected(200, &e))?;
            return Ok(Submitted::Held { key, hold });
        }
        let command = serde_json::from_value(value).map_err(|e| unexpected(200, &e))?;
        Ok(Submitted::Command { key, command })
    }

    /// Records up to 500 commands in one request and one commit
    /// (`POST /v1/commands/batch`), retrying the whole batch safely: every
    /// attempt carries the same keys and bodies, so a batch whose answer was
    /// lost comes back as replays. One answer per submission, in order; a
    /// refused item is an [`ItemAnswer::Refused`], never an error of the batch.
    pub async fn submit_batch(&self, batch: &[Submission]) -> Result<Vec<ItemAnswer>, Error> {
        let keys: Vec<String> = batch
            .iter()
            .map(|s| s.key.clone().unwrap_or_else(|| Uuid::now_v7().to_string()))
            .collect();
        let items: Vec<Value> = batch
            .iter()
            .zip(&keys)
            .map(|(s, key)| {
                let mut body = s.body();
                body["idempotency_key"] = json!(key);
                body
            })
            .collect();
        let body = json!({ "items": items });
        let response = self
            .send(Method::POST, "/v1/commands/batch", Duration::ZERO, |r| {
                r.json(&body)
            })
            .await?;
        let value: Value = decode(response).await?;
        let answers = value["items"]
            .as_array()
            .filter(|a| a.len() == keys.len())
            .ok_or_else(|| Error::Unexpected {
                status: 200,
                body: format!("a batch of {} answered with {value}", keys.len()),
            })?;
        answers
            .iter()
            .zip(keys)
            .map(|(a, key)| ItemAnswer::from_json(a, key))
            .collect()
    }

    /// One command as it is now.
    pub async fn get(&self, id: Uuid) -> Result<Command, Error> {
        decode(
            self.send(
                Method::GET,
                &format!("/v1/commands/{id}"),
                Duration::ZERO,
                |r| r,
            )
            .await?,
        )
        .await
    }

    /// Waits until the command is terminal or `timeout` passes (the server
    /// wakes the request when it finishes; no polling), and returns it as
    /// it is then.
    pub async fn wait(&self, id: Uuid, timeout: Duration) -> Result<Command, Error> {
        let until = Instant::now() + timeout;
        loop {
            let left = until
                .saturating_duration_since(Instant::now())
                .min(SERVER_WAIT_CAP);
            let path = format!("/v1/commands/{id}?wait={}", left.as_secs());
            let command: Command =
                decode(self.send(Method::GET, &path, left, |r| r).await?).await?;
            if command.state.is_terminal() || Instant::now() + Duration::from_secs(1) > until {
                return Ok(command);
            }
        }
    }

    /// Cancels a command before its effect starts (`409 cancel-too-late`
    /// after). Repeating it is harmless.
    pub async fn cancel(&self, id: Uuid) -> Result<Command, Error> {
        let path = format!("/v1/commands/{id}/cancel");
        decode(
            self.send(Method::POST, &path, Duration::ZERO, |r| r)
                .await?,
        )
        .await
    }

    /// Every state change of a command, oldest first.
    pub async fn history(&self, id: Uuid) -> Result<Vec<HistoryEntry>, Error> {
        #[derive(Deserialize)]
        struct History {
            entries: Vec<HistoryEntry>,
        }
        let path = format!("/v1/commands/{id}/history");
        let h: History =
            decode(self.send(Method::GET, &path, Duration::ZERO, |r| r).await?).await?;
        Ok(h.entries)
    }

    /// Records an intent for an agent's tool call (`POST /v1/invoke`) and
    /// waits (the server's default, 30 s) for its outcome. The same `run_id`
    /// and arguments, retried, get the same answer.
    pub async fn invoke(&self, tool: &str, run_id: &str, args: &Value) -> Result<Invoked, Error> {
        let body = json!({"tool": tool, "runId": run_id, "args": args});
        let wait = Duration::from_secs(30);
        decode(
            self.send(Method::POST, "/v1/invoke", wait, |r| r.json(&body))
                .await?,
        )
        .await
    }

    /// Registers a webhook endpoint (`POST /v1/webhooks`); the answer holds
    /// its secret, shown this once. Sent once, never retried: a lost answer
    /// could leave an endpoint registered (`webhooks` lists it, and
    /// `disable_webhook` removes it).
    pub async fn register_webhook(
        &self,
        registration: &WebhookRegistration,
    ) -> Result<RegisteredWebhook, Error> {
        let once = Client {
            retry: RetryPolicy {
                max_attempts: 1,
                ..self.retry.clone()
            },
            ..self.clone()
        };
        decode(
            once.send(Method::POST, "/v1/webhooks", Duration::ZERO, |r| {
                r.json(registration)
            })
            .await?,
        )
        .await
    }

    /// The caller's webhook endpoints (an operator's: every endpoint).
    pub async fn webhooks(&self) -> Result<Vec<Webhook>, Error> {
        #[derive(Deserialize)]
        struct List {
            items: Vec<Webhook>,
        }
        let l: List = decode(
            self.send(Method::GET, "/v1/webhooks", Duration::ZERO, |r| r)
                .await?,
        )
        .await?;
        Ok(l.items)
    }

    /// Disables an endpoint: no more events; its pending ones expire.
    /// Repeating it is harmless.
    pub async fn disable_webhook(&self, id: Uuid) -> Result<Webhook, Error> {
        let path = format!("/v1/webhooks/{id}");
        decode(
            self.send(Method::DELETE, &path, Duration::ZERO, |r| r)
                .await?,
        )
        .await
    }

    /// An endpoint's latest events (at most `limit`, 1-100), newest first,
    /// each with its attempts.
    pub async fn webhook_events(&self, id: Uuid, limit: u8) -> Result<Vec<WebhookEvent>, Error> {
        #[derive(Deserialize)]
        struct List {
            items: Vec<WebhookEvent>,
        }
        let path = format!("/v1/webhooks/{id}/events?limit={limit}");
        let l: List = decode(self.send(Method::GET, &path, Duration::ZERO, |r| r).await?).await?;
        Ok(l.items)
    }

    /// Sends an event again (operators): pending, due now, same id.
    pub async fn redeliver_webhook_event(&self, id: Uuid) -> Result<WebhookEvent, Error> {
        let path = format!("/v1/webhooks/events/{id}/redeliver");
        decode(
            self.send(Method::POST, &path, Duration::ZERO, |r| r)
                .await?,
        )
        .await
    }

    /// Sends a request until it gets an answer worth returning, within the
    /// retry policy. `wait` is how long the server may hold the request.
    async fn send(
        &self,
        method: Method,
        path: &str,
        wait: Duration,
        build: impl Fn(RequestBuilder) -> RequestBuilder,
    ) -> Result<Response, Error> {
        let url = format!("{}{path}", self.base);
        let started = Instant::now();
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let mut request = self
                .http
                .request(method.clone(), &url)
                .bearer_auth(&self.token)
                .timeout(self.retry.attempt_timeout + wait);
            if let Some((parent, state)) = &self.trace {
                request = request.header("traceparent", parent);
                if let Some(state) = state {
                    request = request.header("tracestate", state);
                }
            }
            let (failure, retry_after) = match build(request).send().await {
                Ok(response) if retryable(response.status()) => {
                    let status = response.status().as_u16();
                    let retry_after = retry_after(response.headers());
                    let body = response.text().await.unwrap_or_default();
                    (Error::Transient { status, body }, retry_after)
                }
                Ok(response) => return Ok(response),
                Err(e) => (Error::Transport(e), None),
            };
            let pause = backoff(&self.retry, attempt).max(retry_after.unwrap_or_default());
            let elapsed = started.elapsed();
            if attempt >= self.retry.max_attempts || elapsed + pause > self.retry.max_elapsed {
                return Err(Error::GaveUp {
                    attempts: attempt,
                    elapsed,
                    last: Box::new(failure),
                });
            }
            tokio::time::sleep(pause).await;
        }
    }
}

fn retryable(status: StatusCode) -> bool {
    matches!(status.as_u16(), 429 | 500 | 502 | 503 | 504)
}

fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(Duration::from_secs(seconds))
}

/// Full jitter: a pause drawn uniformly from `[0, min(max, base * 2^(attempt-1))]`.
fn backoff(policy: &RetryPolicy, attempt: u32) -> Duration {
    let exp = attempt.saturating_sub(1).min(20);
    let bound = policy
        .base_delay
        .saturating_mul(1u32 << exp)
        .min(policy.max_delay);
    let mut bytes = [0u8; 8];
    let fraction = match getrandom::fill(&mut bytes) {
        Ok(()) => (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64,
        Err(_) => 0.5,
    };
    bound.mul_f64(fraction)
}

async fn decode<T: DeserializeOwned>(response: Response) -> Result<T, Error> {
    let status = response.status().as_u16();
    let text = response.text().await?;
    if status >= 400 {
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text.clone()));
        return Err(Error::Problem {
            status,
            problem_type: body["type"].as_str().unwrap_or("").to_owned(),
            detail: body["detail"].as_str().unwrap_or(&text).to_owned(),
            body,
        });
    }
    serde_json::from_str(&text).map_err(|e| Error::Unexpected {
        status,
        body: format!("{e}: {text}"),
    })
}

fn unexpected(status: u16, e: &serde_json::Error) -> Error {
    Error::Unexpected {
        status,
        body: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_stays_within_its_exponential_bound() {
        let policy = RetryPolicy::default();
        for attempt in 1..30 {
            let bound = policy
                .base_delay
                .saturating_mul(1 << (attempt - 1).min(20))
                .min(policy.max_delay);
            for _ in 0..50 {
                assert!(backoff(&policy, attempt) <= bound);
            }
        }
    }

    #[test]
    fn backoff_is_jittered() {
        let policy = RetryPolicy::default();
        let draws: std::collections::HashSet<Duration> =
            (0..20).map(|_| backoff(&policy, 5)).collect();
        assert!(draws.len() > 1, "twenty equal pauses: {draws:?}");
    }

    #[test]
    fn only_transient_statuses_are_retried() {
        for s in [429, 500, 502, 503, 504] {
            assert!(retryable(StatusCode::from_u16(s).unwrap()), "{s}");
        }
        for s in [200, 202, 400, 401, 403, 404, 405, 408, 409, 413, 415, 422] {
            assert!(!retryable(StatusCode::from_u16(s).unwrap()), "{s}");
        }
    }

    #[test]
    fn ambiguous_is_an_outcome_of_its_own() {
        let mut command: Command = serde_json::from_value(json!({
            "id": Uuid::now_v7(), "kind": "refund", "state": "ambiguous",
            "authority": {"id": "payments", "generation": 1, "pinned": false},
            "idempotency_key": "k", "run_id": null, "args": {}, "result": null,
            "error": {"reason": "timeout"}, "request_digest": "d", "deadline": null,
            "created_at": "2026-12-01T00:00:00Z", "updated_at": "2026-12-01T00:00:00Z",
            "finished_at": "2026-12-01T00:00:00Z"
        }))
        .unwrap();
        assert_eq!(
            command.outcome(),
            Outcome::Ambiguous(&json!({"reason": "timeout"}))
        );
        command.state = State::EffectStarted;
        assert_eq!(command.outcome(), Outcome::InFlight(State::EffectStarted));
    }

    #[test]
    fn a_submission_body_has_only_what_the_api_takes() {
        let s = Submission::new("refund", "payments")
            .args(json!({"amount": "12.00 USD"}))
            .pinned(3)
            .run_id("r1");
        assert_eq!(
            s.body(),
            json!({"kind": "refund", "authority": {"id": "payments", "generation": 3},
                   "args": {"amount": "12.00 USD"}, "run_id": "r1"})
        );
    }
}

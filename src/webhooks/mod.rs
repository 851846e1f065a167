//! The webhook deliverer: takes up due events (written by the database with
//! each terminal outcome, migration 0029), sends each signed to its
//! endpoint, records every attempt, and schedules the next one by the
//! backoff until a 2xx or the event's expiry. Delivery is at least once:
//! the event id (`Ledger-Event-Id`) is the receiver's key for duplicates.
//!
//! Every `serve` and `custodian` process runs one unless told not to; they
//! share the work through `for update skip locked` and a lease on each
//! event taken up (`next_attempt_at` moves past the request's timeout), so
//! an event whose deliverer dies mid-send is sent again by another.
//!
//! - `send.rs`: one request, to an address the URL rule allows, resolved
//!   when the connection is made.

pub mod send;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use sqlx::PgPool;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;
use tracing::Instrument as _;

use crate::db::webhooks::{self as db, Claimed, Next, SendingEndpoint};
use crate::domain::webhook::{
    ATTEMPT_HEADER, AfterAttempt, Backoff, EVENT_ID_HEADER, SIGNATURE_HEADER, after_attempt, later,
    parse_url, signature_header, standard,
};

/// How a deliverer works; one copy of the defaults.
#[derive(Debug, Clone)]
pub struct DelivererConfig {
    /// Whether endpoints may be in the ledger's own network (loopback,
    /// private, link-local, unique-local). Off by default.
    pub allow_private: bool,
    /// How long one attempt may take: resolution, connection, TLS, answer.
    pub timeout: Duration,
    /// How long an event is tried, from its first attempt (or a redelivery).
    pub expiry: Duration,
    pub backoff: Backoff,
    /// How often due events are looked for.
    pub poll_interval: Duration,
    /// Most events taken up per authority in one turn.
    pub batch_size: i64,
    /// Beyond the timeout, how long an event taken up stays with its
    /// deliverer (time to record the attempt) before another may send it.
    pub lease_margin: Duration,
}

impl Default for DelivererConfig {
    fn default() -> Self {
        DelivererConfig {
            allow_private: false,
            timeout: send::DEFAULT_TIMEOUT,
            expiry: Duration::from_secs(24 * 3600),
            backoff: Backoff::DEFAULT,
            poll_interval: Duration::from_secs(1),
            batch_size: 32,
            lease_margin: Duration::from_secs(30),
        }
    }
}

impl DelivererConfig {
    /// How long an event taken up is kept from other deliverers: the
    /// attempt's timeout and a margin to record it.
    fn lease(&self) -> Duration {
        self.timeout + self.lease_margin
    }
}

/// What one turn did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeliveryReport {
    /// Attempts made.
    pub attempted: usize,
    /// Answered 2xx.
    pub delivered: usize,
    /// Failed, and scheduled again.
    pub retried: usize,
    /// No more attempts (expired now).
    pub expired: usize,
}

/// The deliverer of one process.
#[derive(Debug, Clone)]
pub struct Deliverer {
    pool: PgPool,
    config: Arc<DelivererConfig>,
}

impl Deliverer {
    pub fn new(pool: PgPool, config: DelivererConfig) -> Self {
        Deliverer {
            pool,
            config: Arc::new(config),
        }
    }

    pub fn config(&self) -> &DelivererConfig {
        &self.config
    }

    /// Runs until `shutdown` completes: a turn every poll interval. An
    /// attempt in flight when it is asked to stop is finished and recorded
    /// (it lasts at most the timeout).
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) {
        tokio::pin!(shutdown);
        loop {
            if let Err(e) = self.run_once().await {
                tracing::warn!(error = %e, "webhook deliverer: a turn failed; trying again");
            }
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(self.config.poll_interval) => {}
            }
        }
        tracing::debug!("webhook deliverer stopped");
    }

    /// One turn: every authority with due events, its overdue events
    /// expired, the rest taken up and sent, concurrently, each attempt
    /// recorded.
    pub async fn run_once(&self) -> Result<DeliveryReport, sqlx::Error> {
        let mut report = DeliveryReport::default();
        let now = Utc::now();
        let authorities = db::due_authorities(&self.pool, now, 256).await?;
        let mut sends = JoinSet::new();
        for authority in authorities {
            for e in db::expire_overdue(
                &self.pool,
                &authority,
                now,
                "expired before another attempt (its deliverer stopped while it was in flight)",
            )
            .await?
            {
                report.expired += 1;
                if e.in_flight {
                    tracing::warn!(event.id = %e.id, endpoint.id = %e.endpoint_id, attempts = e.attempts,
                        "webhook event expired: its expiry passed while no deliverer held it");
                } else {
                    tracing::warn!(event.id = %e.id, endpoint.id = %e.endpoint_id, attempts = e.attempts,
                        "webhook event expired: its expiry passed before its next attempt; no more attempts");
                }
            }
            let claimed = db::claim(
                &self.pool,
                &authority,
                now,
                later(now, self.config.lease()),
                later(now, self.config.expiry),
                self.config.batch_size,
            )
            .await?;
            if claimed.is_empty() {
                continue;
            }
            let mut ids: Vec<uuid::Uuid> = claimed.iter().map(|c| c.endpoint_id).collect();
            ids.sort_unstable();
            ids.dedup();
            let endpoints: HashMap<uuid::Uuid, SendingEndpoint> =
                db::endpoints_for_sending(&self.pool, &ids)
                    .await?
                    .into_iter()
                    .map(|e| (e.id, e))
                    .collect();
            for event in claimed {
                let endpoint = endpoints.get(&event.endpoint_id).cloned();
                let this = self.clone();
                sends.spawn(async move { this.attempt(event, endpoint).await });
            }
        }
        while let Some(done) = sends.join_next().await {
            match done {
                Ok(Ok(after)) => {
                    report.attempted += usize::from(after.is_some());
                    match after {
                        Some(AfterAttempt::Delivered) => report.delivered += 1,
                        Some(AfterAttempt::RetryAt(_)) => report.retried += 1,
                        Some(AfterAttempt::Expired) | None => report.expired += 1,
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "webhook deliverer: an attempt could not be recorded; the event is sent again after its lease");
                }
                Err(e) => {
                    tracing::error!(error = %e, "webhook deliverer: an attempt's task failed");
                }
            }
        }
        Ok(report)
    }

    /// One attempt at `event`, recorded; what became of the event (`None`:
    /// expired without an attempt, its endpoint gone or disabled).
    async fn attempt(
        &self,
        event: Claimed,
        endpoint: Option<SendingEndpoint>,
    ) -> Result<Option<AfterAttempt>, sqlx::Error> {
        let Some(endpoint) = endpoint.filter(|e| e.disabled_at.is_none()) else {
            let error = crate::ledger::webhooks::DISABLED;
            db::finish(
                &self.pool,
                &event.authority_id,
                event.id,
                event.attempt,
                Next::Expired { error },
            )
            .await?;
            tracing::info!(event.id = %event.id, endpoint.id = %event.endpoint_id, "webhook event expired: {error}");
            return Ok(None);
        };
        let body = body(&event);
        let at = Utc::now();
        let started = Instant::now();
        let id = event.id.to_string();
        let mut headers = vec![
            (EVENT_ID_HEADER, id.clone()),
            (ATTEMPT_HEADER, event.attempt.to_string()),
            (
                SIGNATURE_HEADER,
                signature_header(&endpoint.secret, at.timestamp(), &body),
            ),
            (standard::ID_HEADER, id.clone()),
            (standard::TIMESTAMP_HEADER, at.timestamp().to_string()),
        ];
        // Every secret the ledger makes holds a base64 key; one set by hand
        // may not, and its deliveries then carry `Ledger-Signature` alone.
        match standard::signature(&endpoint.secret, &id, at.timestamp(), &body) {
            Some(signature) => headers.push((standard::SIGNATURE_HEADER, signature)),
            None => {
                tracing::warn!(endpoint.id = %event.endpoint_id, "the endpoint's secret holds no base64 key after whsec_: its deliveries carry no webhook-signature");
            }
        }
        // The command's trace goes on to the receiver: from this attempt's
        // span when traces are exported (a child of the command's), else as
        // the command was submitted with it.
        let stored = crate::domain::trace_context::TraceContext::from_headers(
            event.trace_parent.as_deref(),
            event.trace_state.as_deref(),
        );
        let span = tracing::info_span!("webhook", event.id = %event.id, attempt = event.attempt);
        crate::telemetry::join(&span, stored.as_ref());
        if let Some(trace) = span.in_scope(|| crate::telemetry::current_trace(stored)) {
            headers.push(("traceparent", trace.parent.to_string()));
            if let Some(state) = trace.state {
                headers.push(("tracestate", state));
            }
        }
        let answer = match parse_url(&endpoint.url, self.config.allow_private) {
            Err(e) => Err(send::SendError::Refused(e).to_string()),
            Ok(target) => match tokio::time::timeout(
                self.config.timeout,
                send::post(&target, self.config.allow_private, &headers, body.into()),
            )
            .instrument(span)
            .await
            {
                Err(_) => Err(format!(
                    "no answer within {} ms",
                    self.config.timeout.as_millis()
                )),
                Ok(Err(e)) => Err(e.to_string()),
                Ok(Ok(status)) => Ok(status),
            },
        };
        let duration_ms = i32::try_from(started.elapsed().as_millis()).unwrap_or(i32::MAX);
        let (status, error) = match &answer {
            Ok(status) if (200..300).contains(status) => (Some(i32::from(*status)), None),
            Ok(status) => (
                Some(i32::from(*status)),
                Some(format!("the receiver answered {status}")),
            ),
            Err(e) => (None, Some(e.clone())),
        };
        db::insert_attempt(
            &self.pool,
            &db::NewAttempt {
                authority_id: &event.authority_id,
                event_id: event.id,
                n: event.attempt,
                at,
                status,
                error: error.as_deref(),
                duration_ms,
            },
        )
        .await?;
        let now = Utc::now();
        let after = after_attempt(
            error.is_none(),
            u32::try_from(event.attempt).unwrap_or(1),
            now,
            event.expires_at,
            self.config.backoff,
        );
        let why = error.as_deref().unwrap_or("");
        let next = match after {
            AfterAttempt::Delivered => Next::Delivered { at: now },
            AfterAttempt::RetryAt(at) => Next::Retry { at, error: why },
            AfterAttempt::Expired => Next::Expired { error: why },
        };
        let recorded = db::finish(
            &self.pool,
            &event.authority_id,
            event.id,
            event.attempt,
            next,
        )
        .await?;
        let span = (event.id, event.endpoint_id, event.command_id, event.attempt);
        match after {
            AfterAttempt::Delivered => tracing::info!(
                event.id = %span.0, endpoint.id = %span.1, command.id = %span.2, attempt = span.3,
                status = ?status, duration_ms, "webhook delivered"
            ),
            AfterAttempt::RetryAt(at) => tracing::warn!(
                event.id = %span.0, endpoint.id = %span.1, command.id = %span.2, attempt = span.3,
                status = ?status, duration_ms, error = why, next_attempt_at = %at,
                "webhook attempt failed; trying again"
            ),
            AfterAttempt::Expired => tracing::warn!(
                event.id = %span.0, endpoint.id = %span.1, command.id = %span.2, attempt = span.3,
                status = ?status, duration_ms, error = why,
                "webhook attempt failed and the event expired: no more attempts"
            ),
        }
        if !recorded {
            tracing::info!(event.id = %event.id, attempt = event.attempt,
                "webhook event changed meanwhile (redelivered, or taken up again after this attempt's lease); its state is left as it is");
        }
        Ok(Some(after))
    }
}

/// What is sent for an event: its payload with `event_id` and
/// `created_at`, as canonical JSON (keys sorted), so that every attempt
/// sends the same bytes.
pub fn body(event: &Claimed) -> Vec<u8> {
    body_of(event.id, event.created_at, &event.payload)
}

/// [`body`] from its parts (an event's id, its time, its payload).
pub fn body_of(id: uuid::Uuid, created_at: DateTime<Utc>, payload: &Value) -> Vec<u8> {
    let mut doc = match crate::domain::webhook::payload_shown(payload) {
        Value::Object(m) => m,
        other => {
            let mut m = Map::new();
            m.insert("payload".into(), other);
            m
        }
    };
    doc.insert("event_id".into(), Value::String(id.to_string()));
    doc.insert(
        "created_at".into(),
        Value::String(created_at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
    );
    crate::domain::digest::canonical_json(&Value::Object(doc)).into_bytes()
}

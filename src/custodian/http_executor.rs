//! The HTTP executor: POSTs a command's args to a tool endpoint with the
//! derived idempotency key and the fencing token, and classifies what came
//! back with `domain::classify_http_under`: first the kind's contract (the
//! answers its retry policy lists as "not applied" are `failed`,
//! `not_applied`, with the provider's `Retry-After`), then the table:
//!
//! | what happened | outcome |
//! |---|---|
//! | nothing sent (connection refused, DNS, TLS) | `failed`, `not_dispatched` |
//! | 2xx | `applied`, the JSON response as result |
//! | 4xx | `failed`, `rejected`, with the response |
//! | 5xx, other statuses | `ambiguous`, `uncertain_response` |
//! | timeout, reset, truncated response after sending | `ambiguous` |

use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

use super::effects::{Effect, EffectCall, EffectFuture, ProbeFuture};
use crate::domain::recovery::ProbeAnswer;
use crate::domain::retry::{NotAppliedContract, parse_retry_after};
use crate::domain::{HttpAttempt, classify_http_under};

/// Header names sent with every call.
pub const HEADER_KEY: &str = "Idempotency-Key";
pub const HEADER_AUTHORITY: &str = "Ledger-Authority";
pub const HEADER_GENERATION: &str = "Ledger-Generation";
pub const HEADER_COMMAND: &str = "Ledger-Command-Id";
/// Which attempt of its chain the command is (1 unless the ledger retried
/// a failure with nothing done).
pub const HEADER_ATTEMPT: &str = "Ledger-Command-Attempt";

#[derive(Debug, Clone)]
pub struct HttpExecutor {
    client: reqwest::Client,
    url: String,
    headers: BTreeMap<String, String>,
    /// GET here (`{key}` replaced by the downstream key, which is also sent
    /// as `Idempotency-Key`) to ask whether an effect ran: 200 yes (the body
    /// is the result), 404 no, anything else unknown.
    reconcile_url: Option<String>,
    /// The answers the provider's contract says mean "not applied".
    contract: NotAppliedContract,
}

impl HttpExecutor {
    pub fn new(
        url: String,
        headers: BTreeMap<String, String>,
        timeout: Duration,
    ) -> reqwest::Result<Self> {
        // A connection that cannot be made is "not dispatched": give it a
        // bounded share of the deadline so it reports as such.
        let connect = (timeout / 3).min(Duration::from_secs(5));
        let client = reqwest::Client::builder()
            .connect_timeout(connect)
            .build()?;
        Ok(HttpExecutor {
            client,
            url,
            headers,
            reconcile_url: None,
            contract: NotAppliedContract::default(),
        })
    }

    pub fn with_reconcile_url(mut self, url: Option<String>) -> Self {
        self.reconcile_url = url;
        self
    }

    /// Answers listed here are `failed`, `not_applied` (and so retryable
    /// under the kind's policy) instead of the table's outcome.
    pub fn with_contract(mut self, contract: NotAppliedContract) -> Self {
        self.contract = contract;
        self
    }

    async fn probe(&self, url: &str, call: &EffectCall) -> ProbeAnswer {
        use tracing::Instrument as _;
        let url = url.replace("{key}", &call.downstream_key);
        let mut request = self
            .client
            .get(&url)
            .header(HEADER_KEY, &call.downstream_key);
        // The question is asked in the command's trace: from a span of its
        // own, a child of the command's context, when traces are exported.
        let span = tracing::info_span!("probe", command.id = %call.command_id, kind = %call.kind);
        crate::telemetry::join(&span, call.trace.as_ref());
        let trace = span.in_scope(|| crate::telemetry::current_trace(call.trace.clone()));
        request = traced(request, trace);
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        let response = match request
            .timeout(Duration::from_secs(10))
            .send()
            .instrument(span)
            .await
        {
            Ok(r) => r,
            Err(e) => return ProbeAnswer::Unknown(e.to_string()),
        };
        match response.status().as_u16() {
            200 => match response.bytes().await {
                Ok(bytes) => {
                    ProbeAnswer::Applied(serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                        Value::String(String::from_utf8_lossy(&bytes).into_owned())
                    }))
                }
                Err(e) => ProbeAnswer::Unknown(format!("probe response cut short: {e}")),
            },
            404 => ProbeAnswer::NotApplied,
            other => ProbeAnswer::Unknown(format!("probe answered {other}")),
        }
    }

    async fn attempt(&self, call: &EffectCall) -> (HttpAttempt, Option<Duration>) {
        let mut request = self
            .client
            .post(&self.url)
            .header(HEADER_KEY, &call.downstream_key)
            .header(HEADER_AUTHORITY, &call.authority)
            .header(HEADER_GENERATION, call.generation.to_string())
            .header(HEADER_COMMAND, call.command_id.to_string())
            .header(HEADER_ATTEMPT, call.attempt.to_string())
            .json(&call.args);
        // The command's trace goes on to the provider: from the effect's span
        // when traces are exported, else as the caller sent it.
        request = traced(request, crate::telemetry::current_trace(call.trace.clone()));
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) if e.is_connect() || e.is_builder() => {
                return (HttpAttempt::NotSent(e.to_string()), None);
            }
            Err(e) if e.is_timeout() => return (HttpAttempt::TimedOut, None),
            Err(e) => return (HttpAttempt::LostAfterSend(e.to_string()), None),
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, chrono::Utc::now()));
        let attempt = match response.bytes().await {
            Ok(bytes) => {
                let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                    Value::String(String::from_utf8_lossy(&bytes).into_owned())
                });
                HttpAttempt::Response { status, body }
            }
            Err(e) => HttpAttempt::LostAfterSend(format!("response {status} cut short: {e}")),
        };
        (attempt, retry_after)
    }
}

impl Effect for HttpExecutor {
    fn execute<'a>(&'a self, call: &'a EffectCall) -> EffectFuture<'a> {
        Box::pin(async move {
            let (attempt, retry_after) = self.attempt(call).await;
            classify_http_under(attempt, &self.contract, retry_after)
        })
    }

    fn reconcile<'a>(&'a self, call: &'a EffectCall) -> Option<ProbeFuture<'a>> {
        let url = self.reconcile_url.as_deref()?;
        Some(Box::pin(async move { self.probe(url, call).await }))
    }
}

/// `request` with `trace`'s W3C headers (`traceparent`, `tracestate`).
fn traced(
    request: reqwest::RequestBuilder,
    trace: Option<crate::domain::trace_context::TraceContext>,
) -> reqwest::RequestBuilder {
    let Some(trace) = trace else { return request };
    let request = request.header("traceparent", trace.parent.to_string());
    match trace.state {
        Some(state) => request.header("tracestate", state),
        None => request,
    }
}

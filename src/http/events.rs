//! `GET /v1/events`: server-sent events for the console's charts, for
//! operators. Each `stats` event is a snapshot: the ledger's per-minute
//! counts of the last half hour (requests by outcome, executions, outcomes,
//! the submit-to-applied latency histogram), their totals, the backlog per
//! authority, and the authorities' leases and generations.
//!
//! A snapshot is sent at once, then whenever a command becomes terminal
//! (the process's one LISTEN on the outcome channel, shared with the
//! waiters), at most every [`MIN_GAP`]; and every [`REFRESH`] regardless,
//! because request counts from other API processes arrive without a
//! notification. The stream reads the database, never the client.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;

use super::AppState;
use super::error::{ApiError, Problem};
use super::extract::Auth;
use crate::db::{self, Role};

/// The least time between two snapshots.
const MIN_GAP: Duration = Duration::from_millis(500);
/// The most time between two snapshots.
const REFRESH: Duration = Duration::from_secs(5);
/// Minutes of history a snapshot carries.
const MINUTES: i32 = 30;

/// Live snapshots of the ledger's counters, backlog and leases (operators).
#[utoipa::path(get, path = "/v1/events", operation_id = "streamEvents", tag = "operations",
    responses((status = 200, description = "text/event-stream of `stats` events (JSON snapshots)", content_type = "text/event-stream", body = String),
              (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn stream(
    State(state): State<AppState>,
    Auth(principal): Auth,
) -> Result<Response, ApiError> {
    if principal.role != Role::Operator {
        return Err(ApiError::Forbidden("the ledger's events are for operators"));
    }
    let (tx, rx) = mpsc::channel::<Bytes>(2);
    tokio::spawn(async move {
        let mut finished = state.waiters.finished();
        loop {
            let frame = match snapshot(&state).await {
                Ok(s) => format!("event: stats\ndata: {s}\n\n"),
                Err(e) => {
                    tracing::warn!(error = %e, "events: the database did not answer");
                    "event: unavailable\ndata: {}\n\n".to_owned()
                }
            };
            // The client went away: stop reading for it.
            if tx.send(Bytes::from(frame)).await.is_err() {
                return;
            }
            tokio::time::sleep(MIN_GAP).await;
            tokio::select! {
                changed = finished.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(REFRESH) => {}
                () = tx.closed() => return,
            }
        }
    });
    Ok((
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::new(Frames(rx)),
    )
        .into_response())
}

/// The body: what the task sends, until it stops.
struct Frames(mpsc::Receiver<Bytes>);

impl http_body::Body for Frames {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|b| b.map(|b| Ok(http_body::Frame::data(b))))
    }
}

/// Upper bounds (ms) of the latency buckets of migration 0017, in order.
const BUCKETS: [(&str, f64); 13] = [
    ("latency_le_10", 10.0),
    ("latency_le_25", 25.0),
    ("latency_le_50", 50.0),
    ("latency_le_100", 100.0),
    ("latency_le_250", 250.0),
    ("latency_le_500", 500.0),
    ("latency_le_1000", 1000.0),
    ("latency_le_2500", 2500.0),
    ("latency_le_5000", 5000.0),
    ("latency_le_10000", 10000.0),
    ("latency_le_30000", 30000.0),
    ("latency_le_60000", 60000.0),
    ("latency_le_inf", f64::INFINITY),
];

/// The bucket bound under which a fraction `q` of the counts lies (an upper
/// estimate); `None` without counts.
fn quantile(counts: &[i64; 13], q: f64) -> Option<f64> {
    let total: i64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    #[allow(clippy::cast_precision_loss)]
    let rank = (q * total as f64).ceil().max(1.0);
    let mut seen = 0;
    for (n, (_, bound)) in counts.iter().zip(BUCKETS) {
        seen += n;
        #[allow(clippy::cast_precision_loss)]
        if seen as f64 >= rank {
            return Some(bound);
        }
    }
    None
}

async fn snapshot(state: &AppState) -> Result<Value, sqlx::Error> {
    // This process's own counts first.
    if let Err(e) = state.counters.flush(state.pool()).await {
        tracing::warn!(error = %e, "request counts not added to the ledger before a snapshot");
    }
    // One snapshot for every read, so the minutes, the totals and the
    // backlog agree.
    let db::counts::Snapshot {
        recent,
        totals,
        backlog,
        authorities,
        providers,
    } = db::counts::snapshot(state.pool(), MINUTES).await?;
    let now = chrono::Utc::now();

    let mut minutes: std::collections::BTreeMap<String, serde_json::Map<String, Value>> =
        std::collections::BTreeMap::new();
    let mut latency = [0i64; 13];
    for m in &recent {
        minutes
            .entry(m.minute.to_rfc3339())
            .or_default()
            .insert(m.counter.clone(), json!(m.n));
        if let Some(i) = BUCKETS.iter().position(|(name, _)| *name == m.counter) {
            latency[i] += m.n;
        }
    }
    let ms = |b: Option<f64>| {
        b.map(|b| {
            if b.is_finite() {
                json!(b)
            } else {
                json!("inf")
            }
        })
    };
    Ok(json!({
        "at": now,
        "minutes": minutes
            .into_iter()
            .map(|(minute, counts)| json!({"minute": minute, "counts": counts}))
            .collect::<Vec<_>>(),
        "totals": totals,
        "latency_ms": {
            "p50": ms(quantile(&latency, 0.5)),
            "p99": ms(quantile(&latency, 0.99)),
            "applied": latency.iter().sum::<i64>(),
        },
        "providers": providers,
        "backlog": backlog
            .iter()
            .map(|b| json!({"authority": b.authority_id, "pending": b.pending, "oldest_seconds": b.oldest_seconds}))
            .collect::<Vec<_>>(),
        "authorities": authorities
            .iter()
            .map(|a| json!({
                "id": a.id,
                "generation": a.generation,
                "lease_holder": a.lease_holder,
                "lease_live": a.lease_holder.is_some() && a.lease_expires_at.is_some_and(|t| t > now),
            }))
            .collect::<Vec<_>>(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_the_bucket_bounds_that_cover_them() {
        let mut counts = [0; 13];
        assert_eq!(quantile(&counts, 0.5), None);
        counts[1] = 98; // <= 25 ms
        counts[6] = 1; // <= 1 s
        counts[12] = 1; // over a minute
        assert_eq!(quantile(&counts, 0.5), Some(25.0));
        assert_eq!(quantile(&counts, 0.99), Some(1000.0));
        assert_eq!(quantile(&counts, 1.0), Some(f64::INFINITY));
    }
}

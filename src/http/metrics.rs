//! `GET /metrics`: Prometheus text format, for operators (scrape with the
//! operator token as a bearer credential). The request, execution and
//! outcome counters are the ledger's (`ledger_counts`: every API process,
//! durable across restarts), the same numbers as `GET /v1/state`; the
//! in-process custodian's transitions, retries, leases and effect latencies
//! are this process's since it started. Gauges come from the database, so
//! every API process reports the same ledger.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::counters::REQUEST_COUNTERS;
use super::error::{ApiError, Problem};
use super::extract::Auth;
use crate::db::{self, Role};
use crate::metrics::{CONTENT_TYPE, Exposition, load};

/// The ledger's metrics (names and labels in docs/OPERATIONS.md). Operators only.
#[utoipa::path(get, path = "/metrics", operation_id = "getMetrics", tag = "operations",
    responses((status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain", body = String),
              (status = 403, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn get(
    State(state): State<AppState>,
    Auth(principal): Auth,
) -> Result<Response, ApiError> {
    if principal.role != Role::Operator {
        return Err(ApiError::Forbidden("metrics are for operators"));
    }
    let mut e = Exposition::default();
    // This process's own counts first, so a scrape sees its own requests.
    if let Err(err) = state.counters.flush(state.pool()).await {
        tracing::warn!(error = %err, "request counts not added to the ledger before a scrape");
    }
    e.counter(
        "ledger_api_serialization_retries_total",
        "Serialization conflicts retried by this process's SERIALIZABLE writes (cancels).",
        &[(&[], load(&state.serialization_retries))],
    );
    if let Some(s) = &state.custodian_stats {
        crate::metrics::custodian(&mut e, s);
    }
    let up = match ledger(&mut e, &state).await {
        Ok(()) => 1.0,
        Err(err) => {
            tracing::warn!(error = %err, "metrics: the database did not answer");
            0.0
        }
    };
    e.gauge(
        "ledger_database_up",
        "Whether the database answered this scrape.",
        &[(&[], up)],
    );
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], e.finish()).into_response())
}

async fn ledger(e: &mut Exposition, state: &AppState) -> Result<(), sqlx::Error> {
    let totals = db::counts::totals(state.pool()).await?;
    #[allow(clippy::cast_precision_loss)]
    let total = |name: &str| totals.get(name).copied().unwrap_or(0) as f64;
    e.counter(
        "ledger_requests_total",
        "Submissions received by every API process (POST /v1/commands, /v1/invoke, each batch item).",
        &[(&[], total("requests"))],
    );
    let dispositions: Vec<_> = REQUEST_COUNTERS[1..]
        .iter()
        .map(|d| ([("disposition", *d)], total(d)))
        .collect();
    let dispositions: Vec<_> = dispositions.iter().map(|(l, v)| (&l[..], *v)).collect();
    e.counter(
        "ledger_submissions_total",
        "Submissions by disposition, every API process (refused: invalid, unauthorised or failed before a disposition).",
        &dispositions,
    );
    e.counter(
        "ledger_executions_total",
        "Effects started (the executions the ledger allowed).",
        &[(&[], total("executions"))],
    );
    let outcomes: Vec<_> = ["applied", "failed", "ambiguous"]
        .iter()
        .map(|s| ([("state", *s)], total(s)))
        .collect();
    let outcomes: Vec<_> = outcomes.iter().map(|(l, v)| (&l[..], *v)).collect();
    e.counter(
        "ledger_outcomes_total",
        "Commands that ended applied, failed or ambiguous after their effect started.",
        &outcomes,
    );
    e.counter(
        "ledger_ambiguous_total",
        "Commands that ended ambiguous (dispatched, outcome unknown), ever: pruning does not lower it.",
        &[(&[], total("ambiguous"))],
    );
    let in_flight = db::commands::oldest_in_flight(state.pool()).await?;
    let holds = db::holds::count_open(state.pool()).await?;
    let unresolved = db::commands::count_unresolved_ambiguous(state.pool()).await?;
    let authorities = db::authorities::list(state.pool()).await?;
    #[allow(clippy::cast_precision_loss)]
    let counts: Vec<_> = in_flight
        .iter()
        .map(|(s, n, _)| ([("state", s.as_str())], *n as f64))
        .collect();
    let counts: Vec<_> = counts.iter().map(|(l, v)| (&l[..], *v)).collect();
    e.gauge(
        "ledger_commands_in_flight",
        "Commands in each live state.",
        &counts,
    );
    let ages: Vec<_> = in_flight
        .iter()
        .map(|(s, _, age)| ([("state", s.as_str())], age.unwrap_or(0.0)))
        .collect();
    let ages: Vec<_> = ages.iter().map(|(l, v)| (&l[..], *v)).collect();
    e.gauge(
        "ledger_oldest_in_flight_seconds",
        "Age of the oldest command in each live state (0 when there is none).",
        &ages,
    );
    #[allow(clippy::cast_precision_loss)]
    {
        e.gauge(
            "ledger_holds_awaiting_decision",
            "Near-duplicates held for an operator.",
            &[(&[], holds as f64)],
        );
        e.gauge(
            "ledger_ambiguous_unresolved",
            "Ambiguous commands in the ledger with no resolution recorded yet: what a person must look into now.",
            &[(&[], unresolved as f64)],
        );
    }
    let now = chrono::Utc::now();
    #[allow(clippy::cast_precision_loss)]
    let generations: Vec<_> = authorities
        .iter()
        .map(|a| ([("authority", a.id.as_str())], a.generation as f64))
        .collect();
    let generations: Vec<_> = generations.iter().map(|(l, v)| (&l[..], *v)).collect();
    e.gauge(
        "ledger_authority_generation",
        "Each authority's current generation (its fencing token).",
        &generations,
    );
    let held: Vec<_> = authorities
        .iter()
        .map(|a| {
            let live = a.lease_holder.is_some() && a.lease_expires_at.is_some_and(|t| t > now);
            ([("authority", a.id.as_str())], if live { 1.0 } else { 0.0 })
        })
        .collect();
    let held: Vec<_> = held.iter().map(|(l, v)| (&l[..], *v)).collect();
    e.gauge(
        "ledger_authority_lease_held",
        "Whether someone holds each authority's lease now.",
        &held,
    );
    backlog(e, state).await
}

/// Each authority's backlog, and the webhook events still to deliver.
async fn backlog(e: &mut Exposition, state: &AppState) -> Result<(), sqlx::Error> {
    let backlog = db::commands::backlog_by_authority(state.pool()).await?;
    #[allow(clippy::cast_precision_loss)]
    let ready: Vec<_> = backlog
        .iter()
        .map(|(a, ready, _)| ([("authority", a.as_str())], *ready as f64))
        .collect();
    let ready: Vec<_> = ready.iter().map(|(l, v)| (&l[..], *v)).collect();
    e.gauge(
        "ledger_authority_ready_commands",
        "Each authority's pending commands that are ready to run (not scheduled for later).",
        &ready,
    );
    let waits: Vec<_> = backlog
        .iter()
        .map(|(a, _, wait)| ([("authority", a.as_str())], *wait))
        .collect();
    let waits: Vec<_> = waits.iter().map(|(l, v)| (&l[..], *v)).collect();
    e.gauge(
        "ledger_authority_oldest_ready_seconds",
        "How long each authority's oldest ready pending command has waited since it became ready (0 when none): its backlog's age.",
        &waits,
    );
    providers(e, state).await?;
    let (pending, expiring, oldest) = db::webhooks::pending_summary(state.pool()).await?;
    #[allow(clippy::cast_precision_loss)]
    {
        e.gauge(
            "ledger_webhook_events_pending",
            "Webhook events not yet delivered (nor expired).",
            &[(&[], pending as f64)],
        );
        e.gauge(
            "ledger_webhook_events_expiring",
            "Webhook events not yet delivered that expire within the hour.",
            &[(&[], expiring as f64)],
        );
    }
    e.gauge(
        "ledger_webhook_events_oldest_pending_seconds",
        "Age of the oldest webhook event not yet delivered (0 when none).",
        &[(&[], oldest)],
    );
    Ok(())
}

/// Each provider group's limits (`[providers.<name>]`): what waits on it,
/// what is in flight, and its bucket's tokens.
#[allow(clippy::cast_precision_loss)]
async fn providers(e: &mut Exposition, state: &AppState) -> Result<(), sqlx::Error> {
    let groups = db::limits::status(&mut *state.pool().acquire().await?).await?;
    let gauge = |value: &dyn Fn(&db::limits::ProviderStatus) -> Option<f64>| {
        groups
            .iter()
            .filter_map(|g| value(g).map(|v| ([("provider", g.name.as_str())], v)))
            .collect::<Vec<_>>()
    };
    let series = [
        (
            "ledger_provider_waiting_commands",
            "Each provider group's commands queued and ready, on every authority: waiting for its limits' room (or a custodian).",
            gauge(&|g| Some(g.waiting as f64)),
        ),
        (
            "ledger_provider_in_flight_commands",
            "Each provider group's commands claimed and not terminal, on every authority.",
            gauge(&|g| Some(g.in_flight as f64)),
        ),
        (
            "ledger_provider_max_in_flight",
            "Each provider group's limit of commands in flight (groups with one).",
            gauge(&|g| g.max_in_flight.map(f64::from)),
        ),
        (
            "ledger_provider_tokens",
            "Tokens in each provider group's bucket now (groups with a rate): how many may start at once.",
            gauge(&|g| g.tokens),
        ),
        (
            "ledger_provider_rate",
            "Each provider group's rate, in commands started per second (groups with one).",
            gauge(&|g| g.rate),
        ),
    ];
    for (name, help, values) in &series {
        let values: Vec<_> = values.iter().map(|(l, v)| (&l[..], *v)).collect();
        e.gauge(name, help, &values);
    }
    Ok(())
}

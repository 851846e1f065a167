//! The HTTP API: the router, what every handler shares ([`AppState`]), and
//! handlers that parse, call the use cases (`ledger`) or read the database,
//! and answer; they record intents and read outcomes, and never run an effect.

mod adapter;
mod authorities;
pub mod batch;
mod commands;
mod console;
pub mod counters;
pub mod error;
mod events;
mod explain;
mod extract;
mod health;
mod holds;
mod kinds;
pub mod limits;
mod listener;
mod malformed;
mod metrics;
pub mod openapi;
mod resolutions;
mod submit;
mod tls;
pub mod wait;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use sqlx::PgPool;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::catalog::Policies;
use tokio::net::TcpListener;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

pub use tls::{TlsConfig, TlsConfigError};

/// Largest accepted request body.
pub const BODY_LIMIT: usize = 64 * 1024;

/// Longest wait a request may ask for (`?wait=`, `Prefer: wait=`).
pub const MAX_WAIT: Duration = Duration::from_secs(60);
/// How long a request body may take to arrive.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Most HTTP connections held at once.
pub const MAX_CONNECTIONS: usize = 1024;

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    pub pool: PgPool,
    /// Admission policies by kind (from the catalog).
    pub policies: Arc<Policies>,
    pub counters: Arc<counters::Counters>,
    pub waiters: wait::Waiters,
    pub wake: crate::ledger::PendingWake,
    /// Concurrent submissions share one insert statement and one commit.
    pub group: crate::db::group_commit::GroupCommit,
    pub max_wait: Duration,
    pub body_timeout: Duration,
    /// Per-principal request rate limit.
    pub limiter: limits::Limiter,
    /// Most HTTP connections held at once; more wait in the backlog.
    pub max_connections: usize,
    /// The catalog's executors, used here only for their reconcile probes
    /// (`POST /v1/commands/{id}/probe`): a probe reads, it never runs an
    /// effect. `None`: no probe in this process.
    pub probes: Option<crate::custodian::Effects>,
    /// The counters of the custodian running in this process, if any, for `/metrics`.
    pub custodian_stats: Option<Arc<crate::metrics::CustodianStats>>,
    /// The advertised replay window: how long a finished command's key is
    /// kept before pruning may remove it.
    pub retention: Option<Duration>,
    /// The counting epoch of `GET /api/state`.
    pub epoch: Arc<std::sync::Mutex<adapter::Epoch>>,
    /// Whether `POST /api/reset` may start a new counting epoch: only in the
    /// embedded demo (it deletes nothing anywhere, but resets what the demo shows).
    pub api_reset: bool,
}

impl AppState {
    /// Starts the process's outcome listener and custodian wake-up task.
    pub fn new(pool: PgPool, policies: Policies) -> Self {
        let waiters = wait::Waiters::default();
        waiters.spawn_listener(pool.clone());
        let wake = crate::ledger::PendingWake::spawn(pool.clone());
        let counters = Arc::new(counters::Counters::default());
        counters.spawn_flusher(pool.clone());
        let group = crate::db::group_commit::GroupCommit::spawn(
            pool.clone(),
            crate::db::group_commit::FLUSHERS,
            crate::db::group_commit::MAX_ROWS,
        );
        AppState {
            pool,
            group,
            policies: Arc::new(policies),
            counters,
            waiters,
            wake,
            max_wait: MAX_WAIT,
            body_timeout: BODY_TIMEOUT,
            limiter: limits::Limiter::new(limits::RateLimit::default()),
            max_connections: MAX_CONNECTIONS,
            probes: None,
            custodian_stats: None,
            retention: None,
            epoch: adapter::Epoch::first(),
            api_reset: false,
        }
    }
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/commands", post(submit::submit).get(commands::list))
        .route(
            "/v1/commands/batch",
            post(batch::submit_batch).layer(DefaultBodyLimit::max(batch::BODY_LIMIT)),
        )
        .route("/v1/invoke", post(submit::invoke))
        .route("/v1/kinds", get(kinds::list))
        .route("/v1/intents/explain", post(explain::explain))
        .route("/api/invoke", post(adapter::invoke))
        .route("/api/state", get(adapter::get_state))
        .route("/api/release", post(adapter::release))
        .route("/api/reset", post(adapter::reset))
        .route("/v1/holds", get(holds::list))
        .route("/v1/holds/{id}", get(holds::get_one))
        .route("/v1/holds/{id}/release", post(holds::release))
        .route("/v1/holds/{id}/reject", post(holds::reject))
        .route("/v1/state", get(counters::get))
        .route("/v1/events", get(events::stream))
        .route("/v1/commands/{id}", get(commands::get_one))
        .route("/v1/commands/{id}/history", get(commands::history))
        .route("/v1/commands/{id}/cancel", post(commands::cancel))
        .route("/v1/commands/{id}/resolution", post(resolutions::resolve))
        .route("/v1/commands/{id}/probe", post(resolutions::probe))
        .route("/v1/authorities/{id}", get(authorities::get_one))
        .route(
            "/v1/authorities/{id}/probe-ambiguous",
            post(resolutions::probe_authority),
        )
        .route("/openapi.json", get(openapi::serve))
        .route("/metrics", get(metrics::get))
        .route("/console", get(console::page))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .fallback(|| async { error::ApiError::NotFound })
        // After every route: a path that exists, with a method it does not
        // have, is a 405 problem; axum adds the `Allow` header.
        .method_not_allowed_fallback(|method: axum::http::Method| async move {
            error::ApiError::MethodNotAllowed {
                method: method.to_string(),
            }
        })
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(TraceLayer::new_for_http().make_span_with(request_span))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .with_state(state)
}

/// The API's JSON for a command, a history entry and a hold, for other
/// front ends (the command line) to print exactly what the API returns.
pub mod json {
    use serde_json::Value;

    use crate::db::commands::{CommandRow, HistoryRow};
    use crate::db::holds::HoldRow;

    fn value(v: impl serde::Serialize) -> Value {
        serde_json::to_value(v).expect("a view serializes")
    }

    /// As `GET /v1/commands/{id}` returns it.
    pub fn command(row: &CommandRow) -> Value {
        value(super::commands::view(row, None))
    }

    /// As `GET /v1/commands/{id}/history` lists it.
    pub fn history_entry(row: &HistoryRow) -> Value {
        value(super::commands::HistoryEntry::from(row.clone()))
    }

    /// A command's resolution, as `GET /v1/commands/{id}` shows it.
    pub fn resolution(row: &crate::db::resolutions::ResolutionRow) -> Value {
        value(super::resolutions::resolution_view(row))
    }

    /// As `GET /v1/holds/{id}` returns it.
    pub fn hold(row: &HoldRow) -> Value {
        value(super::holds::hold_view(row))
    }
}

/// One span per request, named by its `x-request-id` (the client's, or one
/// made here and returned in the response), so every log line of a request
/// can be found from either side.
fn request_span<B>(request: &axum::http::Request<B>) -> tracing::Span {
    let id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map_or("-", |v| &v[..v.len().min(128)]);
    tracing::info_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
        request_id = %id,
    )
}

/// Serves the API on an already bound listener until `shutdown` completes,
/// then lets requests in flight finish.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, state, None, shutdown).await
}

/// [`serve`], over TLS when `tls` is given.
pub async fn serve_with(
    listener: TcpListener,
    state: AppState,
    tls: Option<TlsConfig>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = listener::BoundedListener::new(listener, state.max_connections);
    let (counters, pool) = (state.counters.clone(), state.pool.clone());
    let app = router(state);
    let served = match tls {
        None => {
            axum::serve(malformed::ProblemListener(listener), app)
                .with_graceful_shutdown(shutdown)
                .await
        }
        Some(config) => {
            let tls = tls::TlsListener::new(listener, &config)?;
            axum::serve(malformed::ProblemListener(tls), app)
                .with_graceful_shutdown(shutdown)
                .await
        }
    };
    // The last requests' counts, before the process goes.
    if let Err(e) = counters.flush(&pool).await {
        tracing::warn!(error = %e, "the last request counts were not added to the ledger");
    }
    served
}

//! The HTTP API: the router, what every handler shares ([`AppState`]), and
//! handlers that parse, call the use cases (`ledger`) or read the database,
//! and answer; they record intents and read outcomes, and never run an effect.
//!
//! One module per group of routes (`submit`, `batch`, `commands`, `holds`,
//! `resolutions`, `webhooks`, …); what they share is below them, never in
//! another handler: `params` reads what clients send, `views` is what the
//! API shows (and, through [`json`], what the command line prints), `wait`
//! waits for outcomes, `extract` and `error` turn requests and failures
//! into our types.

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
mod ledger_counts;
pub mod limits;
mod listener;
mod malformed;
mod metrics;
pub mod openapi;
mod params;
mod resolutions;
mod submit;
mod tls;
mod views;
pub mod wait;
mod webhooks;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{MethodFilter, MethodRouter, get, on};
use sqlx::PgPool;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::domain::admission::Policies;
use tokio::net::TcpListener;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

pub use tls::{TlsConfig, TlsConfigError};
pub use views::json;

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
    /// The database: the pool every statement goes through, what it can do,
    /// and where the shards live on other nodes (a waiter re-reads on the
    /// node holding its command's shards,
    /// [`crate::db::Backend::reads_on_shard_nodes`]).
    pub db: Arc<crate::db::Cluster>,
    /// Admission policies by kind (from the catalog).
    pub policies: Arc<Policies>,
    pub counters: Arc<counters::Counters>,
    pub waiters: wait::Waiters,
    pub wake: crate::ledger::PendingWake,
    /// Wakes waiters (in every API process) after a cancel, where the
    /// commit does not.
    pub outcomes: crate::ledger::OutcomeWake,
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
    pub probes: Option<Arc<dyn crate::ledger::probe::Prober>>,
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
    /// Serialization conflicts retried by this process's SERIALIZABLE
    /// writes (cancels), for `/metrics`.
    pub serialization_retries: Arc<std::sync::atomic::AtomicU64>,
    /// The webhook settings the API applies too: whether endpoints may be
    /// private addresses (registration), and how long a redelivered event
    /// is tried (the deliverers' expiry).
    pub webhooks: crate::webhooks::DelivererConfig,
}

impl AppState {
    /// Starts the process's outcome listener and custodian wake-up task, on
    /// `pool`, whose database is `backend`.
    pub fn new(pool: PgPool, backend: crate::db::Backend, policies: Policies) -> Self {
        let waiters = wait::Waiters::default();
        waiters.spawn_listener(pool.clone(), backend);
        let wake = crate::ledger::PendingWake::spawn(pool.clone());
        let outcomes = crate::ledger::OutcomeWake::new(pool.clone(), backend);
        let counters = Arc::new(counters::Counters::default());
        counters.spawn_flusher(pool.clone());
        let group = crate::db::group_commit::GroupCommit::spawn(
            pool.clone(),
            backend,
            crate::db::group_commit::FLUSHERS,
            crate::db::group_commit::MAX_ROWS,
        );
        AppState {
            db: Arc::new(crate::db::Cluster::for_reads(pool, backend)),
            group,
            policies: Arc::new(policies),
            counters,
            waiters,
            wake,
            outcomes,
            max_wait: MAX_WAIT,
            body_timeout: BODY_TIMEOUT,
            limiter: limits::Limiter::new(limits::RateLimit::default()),
            max_connections: MAX_CONNECTIONS,
            probes: None,
            custodian_stats: None,
            retention: None,
            epoch: adapter::Epoch::first(),
            api_reset: false,
            serialization_retries: Arc::default(),
            webhooks: crate::webhooks::DelivererConfig::default(),
        }
    }

    /// The pool every statement goes through.
    pub fn pool(&self) -> &PgPool {
        self.db.pool()
    }

    /// What the database can do, detected when it was opened.
    pub fn backend(&self) -> crate::db::Backend {
        self.db.backend()
    }
}

/// A documented handler, routed at the path and with the methods its
/// `#[utoipa::path]` attribute names: each route is written once, there, so
/// the router and the OpenAPI document cannot disagree.
fn documented<P: utoipa::Path, H, T>(_operation: P, handler: H) -> (String, MethodRouter<AppState>)
where
    H: axum::handler::Handler<T, AppState>,
    T: 'static,
{
    use utoipa::openapi::path::HttpMethod;
    let filter = P::methods()
        .into_iter()
        .map(|method| match method {
            HttpMethod::Get => MethodFilter::GET,
            HttpMethod::Post => MethodFilter::POST,
            HttpMethod::Put => MethodFilter::PUT,
            HttpMethod::Delete => MethodFilter::DELETE,
            HttpMethod::Options => MethodFilter::OPTIONS,
            HttpMethod::Head => MethodFilter::HEAD,
            HttpMethod::Patch => MethodFilter::PATCH,
            HttpMethod::Trace => MethodFilter::TRACE,
        })
        .reduce(MethodFilter::or)
        .expect("a documented operation has a method");
    (P::path(), on(filter, handler))
}

pub fn router(state: AppState) -> Router {
    let (batch_path, batch_route) = documented(batch::__path_submit_batch, batch::submit_batch);
    // Every operation in the OpenAPI document (openapi.rs lists the same
    // handlers; a test checks each documented path answers).
    let operations = [
        documented(submit::__path_submit, submit::submit),
        documented(commands::__path_list, commands::list),
        (
            batch_path,
            batch_route.layer(DefaultBodyLimit::max(batch::BODY_LIMIT)),
        ),
        documented(submit::__path_invoke, submit::invoke),
        documented(kinds::__path_list, kinds::list),
        documented(explain::__path_explain, explain::explain),
        documented(submit::__path_api_invoke, submit::api_invoke),
        documented(adapter::__path_get_state, adapter::get_state),
        documented(adapter::__path_release, adapter::release),
        documented(adapter::__path_reset, adapter::reset),
        documented(holds::__path_list, holds::list),
        documented(holds::__path_get_one, holds::get_one),
        documented(holds::__path_release, holds::release),
        documented(holds::__path_reject, holds::reject),
        documented(ledger_counts::__path_get, ledger_counts::get),
        documented(commands::__path_get_one, commands::get_one),
        documented(commands::__path_history, commands::history),
        documented(commands::__path_cancel, commands::cancel),
        documented(authorities::__path_get_one, authorities::get_one),
        documented(events::__path_stream, events::stream),
        documented(resolutions::__path_resolve, resolutions::resolve),
        documented(resolutions::__path_probe, resolutions::probe),
        documented(
            resolutions::__path_probe_authority,
            resolutions::probe_authority,
        ),
        documented(webhooks::__path_register, webhooks::register),
        documented(webhooks::__path_list, webhooks::list),
        documented(webhooks::__path_disable, webhooks::disable),
        documented(webhooks::__path_events, webhooks::events),
        documented(webhooks::__path_redeliver, webhooks::redeliver),
        documented(metrics::__path_get, metrics::get),
        documented(health::__path_healthz, health::healthz),
        documented(health::__path_readyz, health::readyz),
    ];
    let mut router = Router::new();
    for (path, route) in operations {
        router = router.route(&path, route);
    }
    router
        .route("/openapi.json", get(openapi::serve))
        .route("/", get(console::index))
        .route("/console", get(console::page))
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

/// One span per request, named by its `x-request-id` (the client's, or one
/// made here and returned in the response), so every log line of a request
/// can be found from either side.
fn request_span<B>(request: &axum::http::Request<B>) -> tracing::Span {
    let id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map_or("-", |v| &v[..v.len().min(128)]);
    let span = tracing::info_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
        request_id = %id,
    );
    crate::telemetry::join(&span, params::callers_trace(request.headers()).as_ref());
    span
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
    let (counters, pool) = (state.counters.clone(), state.pool().clone());
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

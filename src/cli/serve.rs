//! `command-ledger serve`: open the database (or the private cluster), bind,
//! serve until Ctrl-C or SIGTERM, drain, then stop the cluster.

use anyhow::Context as _;
use clap::Args;
use std::fs;
use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpListener;

use super::token::issue_token;
use super::{CustodianArgs, Database, spawn_custodian};
use crate::custodian::effects::Effects;
use crate::custodian::http_executor::HttpExecutor;
use crate::db::Role;
use crate::db::roles::ServiceRole;
use crate::demo_sink;
use crate::http::{self, AppState};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Size of the database connection pool.
    #[arg(long, env = "DB_MAX_CONNECTIONS", default_value_t = 16)]
    pub max_connections: u32,
    /// Run a custodian in this process for these authorities (comma
    /// separated). Default: `payments` with the private cluster, none otherwise.
    #[arg(long, env = "SERVE_CUSTODIAN", value_delimiter = ',', value_parser = super::custodian::authority)]
    pub custodian: Option<Vec<String>>,
    /// Run no custodian in this process (commands stay pending until one runs elsewhere).
    #[arg(long, conflicts_with = "custodian")]
    pub no_custodian: bool,
    /// With the private cluster, do not start the demo sink (which serves the `refund` kind).
    #[arg(long)]
    pub no_demo_sink: bool,
    /// Requests per second each principal may make (then 429 with Retry-After).
    #[arg(long, env = "RATE_LIMIT_PER_SECOND", default_value_t = http::limits::RateLimit::DEFAULT.per_second)]
    pub rate_limit_per_second: std::num::NonZeroU32,
    /// Most HTTP connections held at once; more wait in the backlog.
    #[arg(long, env = "MAX_HTTP_CONNECTIONS", default_value_t = http::MAX_CONNECTIONS)]
    pub max_http_connections: usize,
    /// Burst each principal may make above its rate.
    #[arg(long, env = "RATE_LIMIT_BURST", default_value_t = http::limits::RateLimit::DEFAULT.burst)]
    pub rate_limit_burst: std::num::NonZeroU32,
    /// Serve HTTPS with this PEM certificate chain (leaf first); needs `--tls-key`.
    #[arg(long, env = "TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key for `--tls-cert`.
    #[arg(long, env = "TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// The replay window to advertise: how long after a command finishes
    /// its key is kept (run `prune --older-than` with the same value).
    /// Responses then carry `Idempotency-Key-Expires`.
    #[arg(long, env = "RETENTION", value_parser = super::duration)]
    pub retention: Option<std::time::Duration>,
    /// Longest a request may wait for an outcome (`?wait=`, `Prefer: wait=`);
    /// longer asks are clamped to it.
    #[arg(long, env = "MAX_WAIT_SECONDS", default_value_t = http::MAX_WAIT.as_secs())]
    pub max_wait_seconds: u64,
    /// Connect the API as this URL's user (a login of `ledger_api`, or of
    /// a role granted it). Default: the private cluster's `ledger_api`
    /// login, else `DATABASE_URL` with `SET ROLE ledger_api`.
    #[arg(long, env = "API_DATABASE_URL", hide_env_values = true)]
    pub api_database_url: Option<String>,
    #[command(flatten)]
    pub custodian_options: CustodianArgs,
    #[command(flatten)]
    pub webhooks: super::WebhookArgs,
}

pub(super) async fn run(
    database_url: Option<String>,
    state_dir: &Path,
    args: ServeArgs,
) -> anyhow::Result<()> {
    // A bad certificate is a start-up error, before anything else starts.
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(http::TlsConfig::from_pem_files(cert, key)?),
        _ => None,
    };
    // The service's own pools act as its roles (below); this one migrates
    // (or, given only the API's URL, checks the migrations).
    let mut db = Database::open_for_role(
        database_url,
        args.api_database_url.as_deref(),
        state_dir,
        "command-ledger-api",
    )
    .await?;
    db.own_private_cluster(state_dir)?;
    // Bind before announcing anything, so the printed URL is live.
    let listener = match TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            db.close().await?;
            return Err(e).with_context(|| format!("binding {}", args.listen));
        }
    };
    let addr = listener.local_addr()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let api = format!("{scheme}://{addr}");
    let mut extras = Vec::new();

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };

    let embedded = db.cluster.is_some();
    let catalog = args.custodian_options.catalog()?;
    let mut effects = catalog.effects()?;
    let mut policies = catalog.policies()?;
    if embedded && !catalog.kinds.contains_key("refund") {
        crate::catalog::quickstart_refund(&mut policies);
    }
    if embedded && !args.no_demo_sink && effects.get("refund").is_none() {
        let url = start_demo_sink(state_dir, stopped()).await?;
        let timeout = std::time::Duration::from_secs(5);
        // The sink answers "did this key run?", so recovery can settle a
        // refund whose custodian died mid-effect instead of calling it
        // ambiguous. Its port changes at every start; its log does not.
        // It applies a request at once or never (its `late` mode, 3 s after
        // the request, stays inside the deadline), so 2 s of margin is ample.
        // Its 503 (the `busy` mode) means "not applied": retried.
        let retry = crate::catalog::quickstart_refund_retry();
        effects.register_with_margin(
            "refund",
            HttpExecutor::new(format!("{url}/refunds"), Default::default(), timeout)?
                .with_reconcile_url(Some(format!("{url}/applied/{{key}}")))
                .with_contract(retry.contract.clone()),
            timeout,
            std::time::Duration::from_secs(2),
        );
        effects.retry("refund", retry);
        extras.push(format!(
            "demo sink:      {url} (kind refund, log {})",
            state_dir.join("demo-sink.log").display()
        ));
    }
    let authorities = args
        .custodian
        .clone()
        .or_else(|| embedded.then(|| vec!["payments".to_owned()]))
        .filter(|_| !args.no_custodian);
    let custodian = match authorities.filter(|a| !a.is_empty()) {
        Some(authorities) => {
            let config = args.custodian_options.config(authorities)?;
            extras.push(format!(
                "custodian:      authorities {} (kinds: {})",
                config.authorities.join(","),
                kinds(&effects)
            ));
            let pool = args
                .custodian_options
                .pool(&db, "command-ledger-custodian")
                .await?;
            let custodian =
                spawn_custodian(&pool, db.backend, config, effects.clone(), stopped()).await?;
            // It only proved the role can connect: the custodian connects on
            // its own runtime, with the same options.
            pool.close().await;
            Some(custodian)
        }
        None => None,
    };

    // Requests fail fast (503, Retry-After: 1) when the database refuses
    // connections.
    let api_pool = db
        .role_pool(
            ServiceRole::Api,
            args.api_database_url.as_deref(),
            args.max_connections,
            "command-ledger-api",
            crate::db::API_ACQUIRE_TIMEOUT,
        )
        .await?;
    let mut state = AppState::new(api_pool.clone(), db.backend, policies);
    state.custodian_stats = custodian.as_ref().map(|(_, stats)| Arc::clone(stats));
    state.probes = Some(Arc::new(effects));
    state.max_connections = args.max_http_connections;
    state.max_wait = std::time::Duration::from_secs(args.max_wait_seconds);
    state.retention = args.retention;
    // The embedded demo may start a new counting epoch for /api/state.
    state.api_reset = embedded && !args.no_demo_sink;
    state.limiter = http::limits::Limiter::new(http::limits::RateLimit {
        per_second: args.rate_limit_per_second,
        burst: args.rate_limit_burst,
    });
    state.webhooks = args.webhooks.config();
    // Outcome webhooks are sent by this process too, acting as the API.
    let deliverer = args.webhooks.spawn(api_pool.clone(), stopped());
    if args.webhooks.webhooks_allow_private {
        extras
            .push("webhooks:       private targets allowed (--webhooks-allow-private)".to_owned());
    }
    let api_task = tokio::spawn(http::serve_with(listener, state, tls, stopped()));
    if embedded {
        let token = first_operator_token(&db, state_dir).await?;
        let inspector = db.role_url(ServiceRole::Inspector).unwrap_or(&db.url);
        announce_embedded(&api, inspector, token.as_deref(), state_dir, &extras);
    } else {
        tracing::info!(%api, extras = ?extras, "command-ledger listening");
    }
    super::shutdown_signal().await;
    let _ = stop_tx.send(true);
    let served = api_task.await.context("API task")?;
    if let Some((custodian, _)) = custodian {
        match custodian.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "custodian stopped with an error"),
            Err(e) => tracing::error!(error = %e, "custodian task failed"),
        }
    }
    if let Some(deliverer) = deliverer
        && let Err(e) = deliverer.await
    {
        tracing::error!(error = %e, "webhook deliverer task failed");
    }
    tracing::info!("API and custodian stopped; closing the database");
    api_pool.close().await;
    db.close().await?;
    served.context("serving HTTP")
}

fn kinds(effects: &Effects) -> String {
    let mut kinds: Vec<&str> = effects.kinds().collect();
    kinds.sort_unstable();
    kinds.join(", ")
}

/// The demo provider takes its time, as real ones do, so that copies of one
/// refund sent together visibly coalesce.
const DEMO_LATENCY: std::time::Duration = std::time::Duration::from_millis(500);

/// The demo sink on a free loopback port, logging under the state dir.
async fn start_demo_sink(
    state_dir: &Path,
    stopped: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the demo sink")?;
    let url = format!("http://{}", listener.local_addr()?);
    let router = demo_sink::router(
        &state_dir.join("demo-sink.log"),
        demo_sink::Mode::Ok,
        DEMO_LATENCY,
    )
    .context("opening the demo sink log")?;
    tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(stopped)
            .await
    });
    Ok(url)
}

/// On the first start of a private cluster, an operator token is created and
/// kept in `<state-dir>/operator-token` (0600) so the quickstart can use it.
/// Returns it when it was created now.
async fn first_operator_token(db: &Database, state_dir: &Path) -> anyhow::Result<Option<String>> {
    let path = state_dir.join("operator-token");
    if path.exists() {
        return Ok(None);
    }
    let token = issue_token(&db.pool, "admin", Role::Operator, None).await?;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    writeln!(f, "{token}")?;
    Ok(Some(token))
}

/// What the private-cluster quickstart needs, printed once everything runs.
fn announce_embedded(
    api: &str,
    inspector_url: &str,
    new_token: Option<&str>,
    state_dir: &Path,
    extras: &[String],
) {
    let token_file = state_dir.join("operator-token");
    let token_line = match new_token {
        Some(t) => format!("{t}\n                  (saved in {})", token_file.display()),
        None => format!("in {}", token_file.display()),
    };
    let mut text =
        String::from("\ncommand-ledger is running with a private PostgreSQL cluster.\n\n");
    text.push_str(&format!(
        "  API:            {api}\n  console:        {api}/console (in a browser; it asks for the operator token)\n  operator token: {token_line}\n  psql:           psql '{inspector_url}'\n                  (read-only, as ledger_inspector; the owner's password: {})\n",
        super::database::role_password_file(state_dir, ServiceRole::Owner).display()
    ));
    for line in extras {
        text.push_str(&format!("  {line}\n"));
    }
    text.push_str(&format!(
        "\nTry (waits up to 10 s for the outcome):\n  TOKEN=$(cat {tf})\n  curl -s -X POST {api}/v1/commands \\\n    \
         -H \"Authorization: Bearer $TOKEN\" -H 'Idempotency-Key: try-1' -H 'Prefer: wait=10' \\\n    \
         -H 'Content-Type: application/json' \\\n    \
         -d '{{\"kind\":\"refund\",\"authority\":\"payments\",\"args\":{{\"to\":\"ada@example.com\",\"amount\":\"12.00 USD\"}}}}'\n\
         \nCtrl-C stops the API and the custodian, then the cluster.\n",
        tf = token_file.display(),
    ));
    println!("{text}");
}

//! `command-ledger custodian`: a custodian process, with its webhook
//! deliverer and, if asked, its own metrics endpoint.

use anyhow::Context as _;
use clap::Args;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use super::{CustodianArgs, spawn_custodian};
use crate::cli::Database;

#[derive(Debug, Args)]
pub struct CustodianCommand {
    /// Authorities to serve, comma separated.
    #[arg(long, env = "AUTHORITIES", value_delimiter = ',', required = true, value_parser = super::authority)]
    pub authority: Vec<String>,
    /// Serve this custodian's Prometheus metrics at `http://ADDR/metrics`.
    /// No token is asked: bind it to an address only your scraper reaches.
    #[arg(long, env = "METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    #[command(flatten)]
    pub options: CustodianArgs,
    #[command(flatten)]
    pub webhooks: crate::cli::WebhookArgs,
}

pub(in crate::cli) async fn run(
    database_url: Option<String>,
    state_dir: &Path,
    cmd: CustodianCommand,
) -> anyhow::Result<()> {
    let config = cmd.options.config(cmd.authority)?;
    let effects = cmd.options.effects()?;
    let db = Database::open_for_role(
        database_url,
        cmd.options.custodian_database_url.as_deref(),
        state_dir,
        "command-ledger-custodian",
    )
    .await?;
    let pool = cmd.options.pool(&db, "command-ledger-custodian").await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };
    let (task, stats) = spawn_custodian(&pool, db.backend, config, effects, stopped()).await?;
    // Outcome webhooks are sent by custodians too, acting as the custodian.
    let deliverer = cmd.webhooks.spawn(pool.clone(), stopped());
    if let Some(addr) = cmd.metrics_listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding the metrics address {addr}"))?;
        tracing::info!(addr = %listener.local_addr()?, "custodian metrics at /metrics");
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let stats = Arc::clone(&stats);
                async move {
                    let mut e = crate::metrics::Exposition::default();
                    crate::metrics::custodian(&mut e, &stats);
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            crate::metrics::CONTENT_TYPE,
                        )],
                        e.finish(),
                    )
                }
            }),
        );
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "metrics server stopped");
            }
        });
    }
    crate::cli::shutdown_signal().await;
    let _ = stop_tx.send(true);
    let result = task.await.context("custodian task")?;
    if let Some(deliverer) = deliverer
        && let Err(e) = deliverer.await
    {
        tracing::error!(error = %e, "webhook deliverer task failed");
    }
    pool.close().await;
    db.close().await?;
    result
}

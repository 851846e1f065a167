//! `command-ledger serve`: open the database (or the private cluster), bind,
//! serve until Ctrl-C or SIGTERM, drain, then stop the cluster.

use anyhow::Context as _;
use clap::Args;
use std::fs;
use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use tokio::net::TcpListener;

use super::Database;
use super::token::issue_token;
use crate::db::Role;
use crate::http::{self, AppState};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Size of the database connection pool.
    #[arg(long, env = "DB_MAX_CONNECTIONS", default_value_t = 16)]
    pub max_connections: u32,
}

pub(super) async fn run(
    database_url: Option<String>,
    state_dir: &Path,
    args: ServeArgs,
) -> anyhow::Result<()> {
    let db = Database::open_with(database_url, state_dir, args.max_connections).await?;
    // Bind before announcing anything, so the printed URL is live.
    let listener = match TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            db.close().await?;
            return Err(e).with_context(|| format!("binding {}", args.listen));
        }
    };
    let addr = listener.local_addr()?;
    let api = format!("http://{addr}");

    if db.cluster.is_some() {
        let token = first_operator_token(&db, state_dir).await?;
        announce_embedded(&api, &db.url, token.as_deref(), state_dir);
    } else {
        tracing::info!(%api, "command-ledger listening");
    }

    let served = http::serve(
        listener,
        AppState {
            pool: db.pool.clone(),
        },
        shutdown_signal(),
    )
    .await;
    tracing::info!("API stopped; closing the database");
    db.close().await?;
    served.context("serving HTTP")
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

fn announce_embedded(api: &str, db_url: &str, new_token: Option<&str>, state_dir: &Path) {
    let token_file = state_dir.join("operator-token");
    let token_line = match new_token {
        Some(t) => format!(
            "operator token: {t}\n                (saved in {})",
            token_file.display()
        ),
        None => format!("operator token: in {}", token_file.display()),
    };
    println!(
        "\ncommand-ledger is running with a private PostgreSQL cluster.\n\
         \n  API:            {api}\n  {token_line}\n  psql:           psql '{db_url}'\n\
         \nTry:\n  TOKEN=$(cat {tf})\n  curl -s -X POST {api}/v1/commands \\\n    \
         -H \"Authorization: Bearer $TOKEN\" -H 'Idempotency-Key: try-1' \\\n    \
         -H 'Content-Type: application/json' \\\n    \
         -d '{{\"kind\":\"refund\",\"authority\":\"payments\",\"args\":{{\"amount\":\"12.00 USD\"}}}}'\n\
         \nCtrl-C stops the API, then the cluster.\n",
        tf = token_file.display(),
    );
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutdown requested");
}

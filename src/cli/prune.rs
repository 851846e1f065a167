//! `command-ledger prune --older-than 30d [--every 1h]`: removes finished
//! commands past the retention window in bounded batches, each its own
//! transaction, archiving every command with its history first
//! (`pruned_commands`). Never a live command, never one a hold refers to.

use anyhow::Context as _;
use clap::Args;
use std::path::Path;
use std::time::{Duration, Instant};

use super::{Database, duration};

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Remove commands that finished longer ago than this (30d, 12h, 90m).
    /// Advertise the same window to clients with `serve --retention`.
    #[arg(long, value_parser = duration)]
    older_than: Duration,
    /// Most commands per batch (one transaction each).
    #[arg(long, default_value_t = 1000)]
    batch: i32,
    /// Keep running, pruning again at this interval (e.g. 1h).
    #[arg(long, value_parser = duration)]
    every: Option<Duration>,
    /// Connect as this URL's user (a login of `ledger_retention`, or of a
    /// role granted it). Default: the private cluster's `ledger_retention`
    /// login, else `DATABASE_URL` with `SET ROLE ledger_retention`.
    #[arg(long, env = "RETENTION_DATABASE_URL", hide_env_values = true)]
    retention_database_url: Option<String>,
}

pub(super) async fn run(
    url: Option<String>,
    state_dir: &Path,
    args: PruneArgs,
) -> anyhow::Result<()> {
    let db = Database::open_for_role(
        url,
        args.retention_database_url.as_deref(),
        state_dir,
        "command-ledger-prune",
    )
    .await?;
    let pool = db
        .role_pool(
            crate::db::roles::ServiceRole::Retention,
            args.retention_database_url.as_deref(),
            2,
            "command-ledger-prune",
            crate::db::ACQUIRE_TIMEOUT,
        )
        .await?;
    let result = loop {
        if let Err(e) = prune_once(&pool, db.backend, &args).await {
            break Err(e);
        }
        let Some(every) = args.every else {
            break Ok(());
        };
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = super::shutdown_signal() => break Ok(()),
        }
    };
    pool.close().await;
    db.close().await?;
    result
}

/// Batches until nothing is left to prune, then says how many went.
async fn prune_once(
    pool: &sqlx::PgPool,
    backend: crate::db::Backend,
    args: &PruneArgs,
) -> anyhow::Result<()> {
    let actor = format!("prune:{}", super::os_user());
    let started = Instant::now();
    let mut total = 0u64;
    loop {
        let n =
            crate::db::commands::prune_batch(pool, backend, args.older_than, args.batch, &actor)
                .await
                .context("pruning a batch")?;
        total += u64::try_from(n).unwrap_or(0);
        if n < args.batch {
            break;
        }
    }
    #[allow(clippy::print_stdout)]
    {
        println!(
            "pruned {total} finished command(s) older than {:?} in {:.1} s (archived in pruned_commands)",
            args.older_than,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

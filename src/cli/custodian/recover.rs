//! `command-ledger recover`: one recovery pass, acting as the custodian.

use anyhow::Context as _;
use clap::Args;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cli::Database;
use crate::custodian::recovery::Recovery;
use crate::db::roles::ServiceRole;

#[derive(Debug, Args)]
pub struct RecoverCommand {
    /// Catalog of kinds (for their reconcile probes); default: ledger.toml when it exists.
    #[arg(long, env = "LEDGER_CATALOG")]
    pub catalog: Option<PathBuf>,
    /// Connect as this URL's user (see `custodian --custodian-database-url`).
    #[arg(long, env = "CUSTODIAN_DATABASE_URL", hide_env_values = true)]
    pub custodian_database_url: Option<String>,
}

/// One recovery pass, for cron after a crash.
pub(in crate::cli) async fn run(
    database_url: Option<String>,
    state_dir: &Path,
    cmd: RecoverCommand,
) -> anyhow::Result<()> {
    let effects = Arc::new(super::load_catalog(cmd.catalog.as_deref())?.effects()?);
    let db = Database::open_for_role(
        database_url,
        cmd.custodian_database_url.as_deref(),
        state_dir,
        "command-ledger-recover",
    )
    .await?;
    let pool = db
        .role_pool(
            ServiceRole::Custodian,
            cmd.custodian_database_url.as_deref(),
            2,
            "command-ledger-recover",
            crate::db::ACQUIRE_TIMEOUT,
        )
        .await?;
    let actor = format!("recovery:{}", crate::custodian::default_holder());
    let outcome = Recovery::new(pool.clone(), db.backend, effects, actor)
        .run_once()
        .await;
    pool.close().await;
    db.close().await?;
    let r = outcome.context("recovery pass")?;
    println!(
        "examined {}, expired {}, adopted {}, resolved applied {}, failed {}, ambiguous {}, not yet {}, changed meanwhile {}",
        r.examined, r.expired, r.adopted, r.applied, r.failed, r.ambiguous, r.waiting, r.skipped
    );
    if r.waiting > 0 {
        println!(
            "not yet: {} started command(s) left effect_started: the probe found no effect, but one dispatched may still take hold until the kind's timeout plus its probe_margin has passed since effect_started; run recover again after that",
            r.waiting
        );
    }
    Ok(())
}

//! The operator's questions about holds and authorities, answered from
//! the database: `holds list|release|reject`, `authorities list`; and the
//! output every operator subcommand shares: human tables by default,
//! `--json` (the API's views) for scripts. Hold decisions go through the
//! same use case as the API's (`ledger::holds`) and are audited under
//! `cli:<user>`.

use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use std::path::Path;
use uuid::Uuid;

use super::Database;
use crate::db::authorities::AuthorityRow;
use crate::db::commands::CommandRow;
use crate::domain::hold::Standing;
use crate::ledger::holds::HoldNow;

#[derive(Debug, Args)]
pub struct Output {
    /// Print JSON (one document) instead of a table.
    #[arg(long, global = true)]
    pub(super) json: bool,
}

#[derive(Debug, Subcommand)]
pub enum HoldsCommand {
    /// Holds, newest first.
    List {
        /// open, released or rejected (default: all).
        #[arg(long)]
        state: Option<HoldState>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[command(flatten)]
        output: Output,
    },
    /// Release an open hold: its command is recorded and runs.
    Release {
        id: Uuid,
        /// Why, for the audit.
        #[arg(long)]
        reason: Option<String>,
        /// The command that applied the hold's intent after the hold opened
        /// (`holds list` shows it): run the intent again knowingly. Without
        /// it such a release is refused.
        #[arg(long, value_name = "COMMAND_ID")]
        confirm_applied: Option<Uuid>,
        #[command(flatten)]
        output: Output,
    },
    /// Reject an open hold: nothing runs.
    Reject {
        id: Uuid,
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        output: Output,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum HoldState {
    Open,
    Released,
    Rejected,
}

impl HoldState {
    fn as_str(self) -> &'static str {
        match self {
            HoldState::Open => "open",
            HoldState::Released => "released",
            HoldState::Rejected => "rejected",
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum AuthoritiesCommand {
    /// Every authority: holder, generation, lease expiry.
    List {
        #[command(flatten)]
        output: Output,
    },
}

/// Who acts from the command line, as history, holds and resolutions name them.
pub(super) fn actor() -> String {
    format!("cli:{}", super::os_user())
}

pub(super) async fn holds(
    url: Option<String>,
    state_dir: &Path,
    cmd: HoldsCommand,
) -> anyhow::Result<()> {
    Database::with(url, state_dir, async |db| holds_on(db, cmd).await).await
}

async fn holds_on(db: &Database, cmd: HoldsCommand) -> anyhow::Result<()> {
    match cmd {
        HoldsCommand::List {
            state,
            limit,
            output,
        } => {
            let rows =
                crate::ledger::holds::list(&db.pool, state.map(HoldState::as_str), limit).await?;
            if output.json {
                print_json(&Value::Array(
                    rows.iter().map(crate::http::json::hold).collect(),
                ));
            } else {
                print_table(
                    &[
                        "id",
                        "state",
                        "kind",
                        "authority",
                        "resembles",
                        "intent now",
                        "created",
                        "decided by",
                    ],
                    rows.iter().map(hold_cells).collect(),
                );
            }
        }
        HoldsCommand::Release {
            id,
            reason,
            confirm_applied,
            output,
        } => {
            // Recorded, then the authority's custodians woken, as the API does.
            let wake = crate::ledger::PendingWake::direct(db.pool.clone());
            let (hold, command) = crate::ledger::holds::release(
                &db.pool,
                db.backend,
                &wake,
                id,
                confirm_applied,
                &actor(),
                reason.as_deref(),
            )
            .await
            .map_err(|e| undecided(e, id))?;
            if output.json {
                print_json(
                    &json!({"hold": crate::http::json::hold(&hold), "command": command_json(&command)}),
                );
            } else {
                println!(
                    "hold {} released; command {} recorded (pending)",
                    hold.hold.id, command.id
                );
            }
        }
        HoldsCommand::Reject { id, reason, output } => {
            let hold = crate::ledger::holds::reject(&db.pool, id, &actor(), reason.as_deref())
                .await
                .map_err(|e| undecided(e, id))?;
            if output.json {
                print_json(&json!({"hold": crate::http::json::hold(&hold)}));
            } else {
                println!("hold {} rejected; nothing runs", hold.hold.id);
            }
        }
    }
    Ok(())
}

/// A decision that did not happen: the hold is not open (as before), or the
/// database failed.
fn undecided(e: crate::ledger::LedgerError, id: Uuid) -> anyhow::Error {
    use crate::ledger::LedgerError;
    match e {
        LedgerError::NotFound | LedgerError::HoldDecided { .. } => anyhow::anyhow!(not_open(id)),
        LedgerError::HoldIntentApplied {
            applied_command_id, ..
        } => anyhow::anyhow!(
            "command {applied_command_id} applied this hold's intent after the hold was opened: releasing would apply it again; to do so knowingly: holds release {id} --confirm-applied {applied_command_id}"
        ),
        e => e.into(),
    }
}

fn not_open(id: Uuid) -> String {
    format!("hold {id} is not open (already decided, or no such hold); `holds list` shows it")
}

pub(super) async fn authorities(
    url: Option<String>,
    state_dir: &Path,
    cmd: AuthoritiesCommand,
) -> anyhow::Result<()> {
    let db = Database::open(url, state_dir).await?;
    let AuthoritiesCommand::List { output } = cmd;
    let rows = crate::db::authorities::list(&db.pool).await;
    db.close().await?;
    let rows = rows?;
    if output.json {
        print_json(&Value::Array(rows.iter().map(authority_json).collect()));
    } else {
        let now = Utc::now();
        print_table(
            &["id", "generation", "holder", "lease expires", "lease"],
            rows.iter()
                .map(|a| {
                    let live =
                        a.lease_holder.is_some() && a.lease_expires_at.is_some_and(|t| t > now);
                    vec![
                        a.id.clone(),
                        a.generation.to_string(),
                        a.lease_holder.clone().unwrap_or_else(|| "-".into()),
                        time(a.lease_expires_at),
                        if live { "held" } else { "free" }.to_owned(),
                    ]
                })
                .collect(),
        );
    }
    Ok(())
}

pub(super) fn time(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(
        || "-".to_owned(),
        |t| t.format("%Y-%m-%d %H:%M:%S").to_string(),
    )
}

/// The API's view of a command, plus its scope (the CLI sees every scope).
pub(super) fn command_json(c: &CommandRow) -> Value {
    let mut doc = crate::http::json::command(c);
    doc["scope"] = json!(c.scope);
    doc
}

fn hold_cells(now: &HoldNow) -> Vec<String> {
    let h = &now.hold;
    let intent = match crate::domain::hold::standing(&now.intent) {
        Standing::Current => match now.intent.resembles {
            Some(s) => format!("resembled is {s}"),
            None => "resembled was pruned".to_owned(),
        },
        Standing::ReasonGone {
            resembles,
            resolved_not_applied,
        } => format!(
            "reason gone: resembled {resembles}{}",
            if resolved_not_applied {
                ", resolved not_applied"
            } else {
                ""
            }
        ),
        Standing::AppliedSince(id) => format!("APPLIED since by {id}"),
    };
    vec![
        h.id.to_string(),
        h.state.clone(),
        h.kind.clone(),
        h.authority_id.clone(),
        h.resembles.to_string(),
        intent,
        time(Some(h.created_at)),
        h.decided_by.clone().unwrap_or_else(|| "-".into()),
    ]
}

fn authority_json(a: &AuthorityRow) -> Value {
    json!({
        "id": a.id, "generation": a.generation, "lease_holder": a.lease_holder,
        "lease_expires_at": a.lease_expires_at, "updated_at": a.updated_at,
    })
}

#[allow(clippy::print_stdout)]
pub(super) fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("a JSON value serializes")
    );
}

/// Columns padded to their widest cell.
#[allow(clippy::print_stdout)]
pub(super) fn print_table(header: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_uppercase()).collect());
    let count = rows.len();
    for row in rows {
        line(row);
    }
    if count == 0 {
        println!("(none)");
    }
}

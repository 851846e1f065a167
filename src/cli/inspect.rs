//! The operator's first questions, answered from the database: `commands
//! list|show`, `holds list|release|reject`, `authorities list`. Human tables
//! by default, `--json` for scripts. Hold decisions go through the same
//! transaction as the API's and are audited under `cli:<user>`.

use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use std::path::Path;
use uuid::Uuid;

use super::Database;
use crate::db::authorities::AuthorityRow;
use crate::db::commands::{CommandRow, HistoryRow, ListFilter};
use crate::db::holds::HoldRow;
use crate::domain::state::State;

#[derive(Debug, Args)]
pub struct Output {
    /// Print JSON (one document) instead of a table.
    #[arg(long, global = true)]
    pub(super) json: bool,
}

#[derive(Debug, Subcommand)]
pub enum CommandsCommand {
    /// Commands, newest first.
    List {
        /// Only this state (pending, prepared, effect_started, applied,
        /// failed, ambiguous, cancelled, expired).
        #[arg(long)]
        state: Option<State>,
        /// Only this authority.
        #[arg(long)]
        authority: Option<String>,
        /// Only those recorded since: a duration back from now (30m, 2h,
        /// 7d) or an RFC 3339 instant.
        #[arg(long, value_parser = since)]
        since: Option<DateTime<Utc>>,
        /// Only pending commands waiting for their not_before.
        #[arg(long)]
        scheduled: bool,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[command(flatten)]
        output: Output,
    },
    /// One command with its history.
    Show {
        id: Uuid,
        #[command(flatten)]
        output: Output,
    },
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

fn since(s: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(d) = super::duration(s) {
        let d = chrono::Duration::from_std(d).map_err(|e| e.to_string())?;
        return Ok(Utc::now() - d);
    }
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| format!("{s:?} is neither a duration (30m, 2h, 7d) nor an RFC 3339 instant"))
}

/// Who decides from the command line, as history and holds name them.
fn actor() -> String {
    format!("cli:{}", super::os_user())
}

pub(super) async fn commands(
    url: Option<String>,
    state_dir: &Path,
    cmd: CommandsCommand,
) -> anyhow::Result<()> {
    let db = Database::open(url, state_dir).await?;
    let result = match cmd {
        CommandsCommand::List {
            state,
            authority,
            since,
            scheduled,
            limit,
            output,
        } => {
            let filter = ListFilter {
                scope: None,
                state,
                authority_id: authority,
                before_id: None,
                since,
                until: None,
                kind: None,
                key: None,
                principal: None,
                scheduled,
                limit,
            };
            let rows = crate::db::commands::list(&db.pool, &filter).await?;
            if output.json {
                print_json(&Value::Array(rows.iter().map(command_json).collect()));
            } else if scheduled {
                print_table(
                    &[
                        "id",
                        "kind",
                        "authority",
                        "priority",
                        "key",
                        "created",
                        "not_before",
                    ],
                    rows.iter().map(scheduled_cells).collect(),
                );
            } else {
                print_table(
                    &[
                        "id",
                        "state",
                        "kind",
                        "authority",
                        "gen",
                        "key",
                        "created",
                        "finished",
                    ],
                    rows.iter().map(command_cells).collect(),
                );
            }
            Ok(())
        }
        CommandsCommand::Show { id, output } => {
            match crate::db::commands::get(&db.pool, id, None).await? {
                None => Err(anyhow::anyhow!("no command {id}")),
                Some(row) => {
                    let history = crate::db::commands::history(&db.pool, id).await?;
                    let resolution =
                        crate::db::resolutions::get(&db.pool, &row.authority_id, id).await?;
                    if output.json {
                        let mut doc = command_json(&row);
                        if let Some(r) = &resolution {
                            doc["resolution"] = crate::http::json::resolution(r);
                        }
                        doc["history"] = history
                            .iter()
                            .map(crate::http::json::history_entry)
                            .collect();
                        print_json(&doc);
                    } else {
                        show_command(&row, &history, resolution.as_ref());
                    }
                    Ok(())
                }
            }
        }
    };
    db.close().await?;
    result
}

pub(super) async fn holds(
    url: Option<String>,
    state_dir: &Path,
    cmd: HoldsCommand,
) -> anyhow::Result<()> {
    let db = Database::open(url, state_dir).await?;
    let result = holds_on(&db, cmd).await;
    db.close().await?;
    result
}

async fn holds_on(db: &Database, cmd: HoldsCommand) -> anyhow::Result<()> {
    match cmd {
        HoldsCommand::List {
            state,
            limit,
            output,
        } => {
            let rows =
                crate::db::holds::list(&db.pool, state.map(HoldState::as_str), limit).await?;
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
                        "created",
                        "decided by",
                    ],
                    rows.iter().map(hold_cells).collect(),
                );
            }
        }
        HoldsCommand::Release { id, reason, output } => {
            // Recorded, then the authority's custodians woken, as the API does.
            let wake = crate::ledger::PendingWake::direct(db.pool.clone());
            let (hold, command) =
                crate::ledger::holds::release(&db.pool, &wake, id, &actor(), reason.as_deref())
                    .await
                    .map_err(|e| undecided(e, id))?;
            if output.json {
                print_json(
                    &json!({"hold": crate::http::json::hold(&hold), "command": command_json(&command)}),
                );
            } else {
                println!(
                    "hold {} released; command {} recorded (pending)",
                    hold.id, command.id
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
                println!("hold {} rejected; nothing runs", hold.id);
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
fn command_json(c: &CommandRow) -> Value {
    let mut doc = crate::http::json::command(c);
    doc["scope"] = json!(c.scope);
    doc
}

fn command_cells(c: &CommandRow) -> Vec<String> {
    vec![
        c.id.to_string(),
        c.state.clone(),
        c.kind.clone(),
        c.authority_id.clone(),
        c.authority_generation
            .map_or_else(|| "-".into(), |g| g.to_string()),
        c.idempotency_key.chars().take(24).collect(),
        time(Some(c.created_at)),
        time(c.finished_at),
    ]
}

fn scheduled_cells(c: &CommandRow) -> Vec<String> {
    vec![
        c.id.to_string(),
        c.kind.clone(),
        c.authority_id.clone(),
        c.priority.to_string(),
        c.idempotency_key.chars().take(24).collect(),
        time(Some(c.created_at)),
        time(c.not_before),
    ]
}

fn show_command(
    c: &CommandRow,
    history: &[HistoryRow],
    resolution: Option<&crate::db::resolutions::ResolutionRow>,
) {
    println!("command   {}", c.id);
    println!("state     {}", c.state);
    println!("kind      {}", c.kind);
    let generation = c
        .authority_generation
        .map_or_else(|| "-".into(), |g| g.to_string());
    println!("authority {} (generation {generation})", c.authority_id);
    println!("key       {}", c.idempotency_key);
    println!("args      {}", c.args);
    println!(
        "canonical {}",
        crate::domain::digest::canonical_json(&c.canonical)
    );
    println!(
        "rules     {}",
        if c.canonical_rules.is_empty() {
            "-".to_owned()
        } else {
            c.canonical_rules.join(" ")
        }
    );
    if let Some(d) = &c.intent_digest {
        println!("intent    {}", hex::encode(d));
    }
    if let Some(r) = c.retry_of {
        println!("retry of  {r}");
    }
    if let Some(t) = c.not_before {
        println!("not before {}", t.format("%Y-%m-%d %H:%M:%S%.3f UTC"));
    }
    if c.priority != 0 {
        println!("priority  {}", c.priority);
    }
    if let Some(r) = &c.result {
        println!("result    {r}");
    }
    if let Some(e) = &c.error {
        println!("error     {e}");
    }
    println!(
        "downstream key {}",
        crate::custodian::EffectCall::downstream_key_for(c.id)
    );
    if let Some(r) = resolution {
        println!(
            "resolved  {} ({}, by {} at {}): {}{}",
            r.outcome,
            r.source,
            r.actor,
            r.at.format("%Y-%m-%d %H:%M:%S"),
            r.evidence,
            r.reference
                .as_ref()
                .map_or_else(String::new, |re| format!(" [ref {re}]")),
        );
    }
    println!();
    print_table(
        &["at", "from", "to", "actor", "gen", "reason"],
        history
            .iter()
            .map(|h| {
                vec![
                    h.at.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
                    h.from_state.clone().unwrap_or_else(|| "-".into()),
                    h.to_state.clone(),
                    h.actor.clone(),
                    h.authority_generation
                        .map_or_else(|| "-".into(), |g| g.to_string()),
                    h.reason.clone().unwrap_or_default(),
                ]
            })
            .collect(),
    );
}

fn hold_cells(h: &HoldRow) -> Vec<String> {
    vec![
        h.id.to_string(),
        h.state.clone(),
        h.kind.clone(),
        h.authority_id.clone(),
        h.resembles.to_string(),
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

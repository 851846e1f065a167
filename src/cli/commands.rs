//! The operator's `commands`: `list` and `show` answer from the database;
//! `cancel` and `resolve` change it through the same use cases as the API
//! (`ledger::cancel`, `ledger::resolutions`), audited under `cli:<user>`.
//! Human output by default, `--json` (the API's views) for scripts.

use chrono::{DateTime, Utc};
use clap::Subcommand;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use uuid::Uuid;

use super::Database;
use super::inspect::{Output, actor, command_json, print_json, print_table, time};
use crate::db::HistoryRow;
use crate::db::commands::{CommandRow, ListFilter};
use crate::db::resolutions::ResolutionRow;
use crate::domain::CommandState;
use crate::http::json;
use crate::ledger::{self, LedgerError, cancel::Cancelled, resolutions::Finding};

#[derive(Debug, Subcommand)]
pub enum CommandsCommand {
    /// Commands, newest first.
    List {
        /// Only this state (pending, prepared, effect_started, applied,
        /// failed, ambiguous, cancelled, expired).
        #[arg(long)]
        state: Option<CommandState>,
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
    /// Cancel a command that no effect was attempted for yet (pending or
    /// prepared), as `POST /v1/commands/{id}/cancel` does; cancelling a
    /// cancelled command again changes nothing.
    Cancel {
        id: Uuid,
        #[command(flatten)]
        output: Output,
    },
    /// Record what became of an ambiguous command's effect, as
    /// `POST /v1/commands/{id}/resolution` does: once per command; the
    /// command stays ambiguous and nothing is retried.
    Resolve {
        id: Uuid,
        /// applied (the provider says the effect ran) or not_applied (it never ran).
        #[arg(long)]
        outcome: String,
        /// What says so, 1-2000 characters ("provider ticket 4411: refund done").
        #[arg(long)]
        evidence: String,
        /// The provider's reference for the effect, 1-200 characters.
        #[arg(long)]
        reference: Option<String>,
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

pub(super) async fn run(
    url: Option<String>,
    state_dir: &Path,
    cmd: CommandsCommand,
) -> anyhow::Result<()> {
    Database::with(url, state_dir, async |db| run_on(db, cmd).await).await
}

async fn run_on(db: &Database, cmd: CommandsCommand) -> anyhow::Result<()> {
    match cmd {
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
                unresolved: false,
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
                    let history = crate::db::history::history(&db.pool, id).await?;
                    let resolution =
                        crate::db::resolutions::get(&db.pool, &row.authority_id, id).await?;
                    let last_attempt = crate::db::attempts::later_attempt(&db.pool, &row).await?;
                    if output.json {
                        let mut doc = json::command_resolved(
                            &row,
                            resolution.as_ref(),
                            last_attempt.as_ref(),
                        );
                        doc["scope"] = json!(row.scope);
                        doc["history"] = history.iter().map(json::history_entry).collect();
                        print_json(&doc);
                    } else {
                        show_command(&row, &history, resolution.as_ref(), last_attempt.as_ref());
                    }
                    Ok(())
                }
            }
        }
        CommandsCommand::Cancel { id, output } => {
            // The API's use case, with its wake-up for waiters.
            let outcomes = ledger::OutcomeWake::new(db.pool.clone(), db.backend);
            let retries = AtomicU64::new(0);
            let cancelled = ledger::cancel::cancel(
                &db.pool,
                db.backend,
                &outcomes,
                &retries,
                id,
                None,
                &actor(),
            )
            .await
            .map_err(|e| refused(e, id))?;
            if output.json {
                print_json(&command_json(cancelled.row()));
            } else if let Cancelled::Now(_) = cancelled {
                println!("command {id} cancelled");
            } else {
                println!("command {id} was already cancelled; nothing changed");
            }
            Ok(())
        }
        CommandsCommand::Resolve {
            id,
            outcome,
            evidence,
            reference,
            output,
        } => {
            let finding = Finding {
                outcome: &outcome,
                evidence: &evidence,
                reference: reference.as_deref(),
            };
            let (row, resolution) =
                ledger::resolutions::resolve(&db.pool, db.backend, id, &finding, &actor())
                    .await
                    .map_err(|e| refused(e, id))?;
            if output.json {
                print_json(&json!({
                    "command": command_json(&row),
                    "resolution": json::resolution(&resolution),
                }));
            } else {
                println!(
                    "command {id} resolved {} (by {}); it stays ambiguous",
                    resolution.outcome, resolution.actor
                );
            }
            Ok(())
        }
    }
}

/// A change the ledger refused, said as the command line says it.
fn refused(e: LedgerError, id: Uuid) -> anyhow::Error {
    match e {
        LedgerError::NotFound => anyhow::anyhow!("no command {id}"),
        e => e.into(),
    }
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
    resolution: Option<&ResolutionRow>,
    last_attempt: Option<&CommandRow>,
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
    match c.retry_of {
        Some(r) if c.attempt > 1 => println!("attempt   {} of the chain {r} began", c.attempt),
        Some(r) => println!("retry of  {r}"),
        None => {}
    }
    if let Some(last) = last_attempt {
        println!(
            "retried   its chain's last attempt is {} (attempt {}, {})",
            last.id, last.attempt, last.state
        );
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

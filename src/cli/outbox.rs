//! `command-ledger outbox`: a device's durable outbox from the shell. `add`
//! writes a command (with its key) to a local SQLite file before anything
//! is sent; `flush` sends what is unanswered and records each answer; `list`
//! shows both.

use anyhow::Context as _;
use clap::{Args, Subcommand};
use command_ledger_client::outbox::{FlushStep, Outbox};
use command_ledger_client::{Client, Submission};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct OutboxCommand {
    /// The outbox file (created if missing).
    #[arg(long, env = "COMMAND_LEDGER_OUTBOX", default_value = "outbox.sqlite")]
    pub db: PathBuf,
    #[command(subcommand)]
    pub action: OutboxAction,
}

#[derive(Debug, Subcommand)]
pub enum OutboxAction {
    /// Record a command in the outbox (durably; nothing is sent) and print its key.
    Add {
        kind: String,
        #[arg(long)]
        authority: String,
        /// `name=value`, as for `submit`.
        #[arg(long = "arg", value_name = "NAME=VALUE")]
        args: Vec<String>,
        /// The idempotency key (default: a new UUIDv7).
        #[arg(long)]
        key: Option<String>,
        /// Not to be claimed before this instant: RFC 3339, or a duration
        /// from now (`30s`, `5m`), fixed when the entry is added.
        #[arg(long, value_parser = super::instant_ahead)]
        not_before: Option<chrono::DateTime<chrono::Utc>>,
        /// Priority, -100 to 100 (default: the kind's).
        #[arg(long, allow_hyphen_values = true)]
        priority: Option<i16>,
    },
    /// Send every unanswered command, in order, in batches (one request and
    /// one commit each), and record each answer.
    Flush {
        #[arg(
            long,
            env = "COMMAND_LEDGER_URL",
            default_value = "http://127.0.0.1:8080"
        )]
        url: String,
        #[arg(long, env = "COMMAND_LEDGER_TOKEN", hide_env_values = true)]
        token: String,
        /// Most commands per request (1 to 500).
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u16).range(1..=500))]
        batch: u16,
    },
    /// Every command in the outbox with its answer (one JSON object per line).
    List,
}

/// For the outbox's crash tests: `COMMAND_LEDGER_OUTBOX_CRASH_AT` names a
/// flush step (`before_send`, `after_answer`, `after_record`) at which the
/// process aborts the first time it gets there, like a device losing power.
fn crash_step() -> Option<FlushStep> {
    match std::env::var("COMMAND_LEDGER_OUTBOX_CRASH_AT")
        .ok()?
        .as_str()
    {
        "before_send" => Some(FlushStep::BeforeSend),
        "after_answer" => Some(FlushStep::AfterAnswer),
        "after_record" => Some(FlushStep::AfterRecord),
        _ => None,
    }
}

pub(super) async fn run(cmd: OutboxCommand) -> anyhow::Result<()> {
    let outbox = Outbox::open(&cmd.db).with_context(|| format!("opening {}", cmd.db.display()))?;
    match cmd.action {
        OutboxAction::Add {
            kind,
            authority,
            args,
            key,
            not_before,
            priority,
        } => {
            let mut s = Submission::new(kind, authority).args(super::submit::parse_args(&args)?);
            s.key = key;
            s.not_before = not_before;
            s.priority = priority;
            println!("{}", outbox.record(&s)?);
        }
        OutboxAction::Flush { url, token, batch } => {
            let client = Client::new(url, token);
            let crash = crash_step();
            let report = outbox
                .flush_observed(&client, usize::from(batch), |step, _| {
                    if Some(step) == crash {
                        std::process::abort();
                    }
                })
                .await?;
            println!(
                "answered {}, refused {}, still pending {}",
                report.answered, report.refused, report.pending
            );
            if let Some(why) = report.stopped_by {
                anyhow::bail!("flush stopped: {why}");
            }
        }
        OutboxAction::List => {
            for e in outbox.entries()? {
                println!(
                    "{}",
                    serde_json::json!({"key": e.key, "kind": e.kind, "authority": e.authority,
                                       "args": e.args, "answer": e.answer})
                );
            }
        }
    }
    Ok(())
}

//! The command line: `serve` (serve.rs), `custodian`, `demo-sink` and
//! `recover` (custodian/, a file each), `migrate`, `role-password` and `inspector-role` (here), `token`
//! (token.rs), `prune` (prune.rs), `verify` (verify.rs), the operator's
//! `commands` (commands.rs), `holds` and `authorities` (inspect.rs), `webhooks`
//! (webhooks.rs, with the deliverer's options), and the API's clients
//! `submit` (submit.rs), `outbox` (outbox.rs) and `mcp` (mcp.rs); plus what they share: the
//! database (database.rs), durations and the shutdown signal. Every
//! subcommand but the API's clients talks to `DATABASE_URL` when it is set,
//! else to the private cluster under `--state-dir` (started on demand,
//! stopped after if this process started it).

mod commands;
mod custodian;
mod database;
mod inspect;
mod mcp;
mod outbox;
mod prune;
mod serve;
mod submit;
mod token;
mod verify;
mod webhooks;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

use crate::telemetry::LogFormat;

pub use custodian::{CustodianArgs, spawn_custodian};
pub use database::Database;
pub use submit::exit as submit_exit;
pub use token::{issue_token, issue_token_in};
pub use webhooks::WebhookArgs;

/// A duration argument (500ms, 10s, 2m, 12h, 30d), for every subcommand.
fn duration(s: &str) -> Result<std::time::Duration, String> {
    crate::catalog::parse_duration(s)
        .ok_or_else(|| format!("{s:?} is not a duration like 500ms, 10s, 2m or 30d"))
}

/// An instant ahead: RFC 3339, or a duration from now (`30s`, `5m`, `2h`).
fn instant_ahead(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&chrono::Utc));
    }
    let ahead = crate::catalog::parse_duration(s).ok_or_else(|| {
        format!("{s:?} is neither an RFC 3339 instant nor a duration like 30s, 5m or 2h")
    })?;
    chrono::Duration::from_std(ahead)
        .map(|d| chrono::Utc::now() + d)
        .map_err(|_| format!("{s:?} is too far ahead"))
}

/// The operating-system user running this command, for audit actors.
fn os_user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".to_owned())
}

#[derive(Debug, Parser)]
#[command(
    name = "command-ledger",
    version,
    about = "A durable command ledger on PostgreSQL"
)]
pub struct Cli {
    /// PostgreSQL URL. Unset: a private cluster under --state-dir is used.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,

    /// Where the private cluster, its password and the first operator token live.
    #[arg(
        long,
        env = "COMMAND_LEDGER_STATE_DIR",
        default_value = ".command-ledger",
        global = true
    )]
    pub state_dir: PathBuf,

    /// Log format.
    #[arg(
        long,
        env = "LOG_FORMAT",
        value_enum,
        default_value = "text",
        global = true
    )]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP API.
    Serve(serve::ServeArgs),
    /// Run a custodian: lease authorities and execute their commands.
    Custodian(custodian::CustodianCommand),
    /// Run the demo payments sink (an HTTP effect target with a durable log).
    DemoSink(custodian::DemoSinkCommand),
    /// One recovery pass: expire overdue commands, adopt prepared ones of
    /// superseded generations, resolve started ones whose executor vanished.
    Recover(custodian::RecoverCommand),
    // Apply database migrations and exit; on a distributed backend, lay the
    // tables out by authority. The help names the product: `db::backend`.
    #[command(about = crate::db::backend::migrate_help::ABOUT)]
    Migrate {
        #[arg(
            long = crate::db::backend::migrate_help::REQUIRE_FLAG,
            help = crate::db::backend::migrate_help::REQUIRE_HELP
        )]
        require_distributed: bool,
    },
    /// Let a service role log in with a password, or rotate it (the
    /// sessions open stay; new ones need the new password). Needs a
    /// superuser's (or a CREATEROLE role's) DATABASE_URL.
    RolePassword {
        /// The role: owner, api, custodian, inspector or retention.
        #[arg(long, value_enum)]
        role: crate::db::roles::ServiceRole,
        /// The environment variable holding the new password.
        #[arg(long)]
        password_env: String,
    },
    /// Create (or refresh) a login for inspecting the ledger with SQL: a
    /// member of ledger_inspector, it reads commands, history, holds and the
    /// views, never a token hash, and cannot write.
    InspectorRole {
        /// Role name.
        #[arg(long, default_value = "ledger_inspector")]
        name: String,
        /// Let it log in with the password in this environment variable.
        #[arg(long)]
        password_env: Option<String>,
    },
    /// Manage API tokens.
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// The ledger's commands: `list [--state --authority --since]`, `show
    /// ID`, `cancel ID`, `resolve ID --outcome --evidence` (an ambiguous one).
    #[command(subcommand)]
    Commands(commands::CommandsCommand),
    /// Near-duplicates held for a decision: `list`, `release ID`, `reject ID`.
    #[command(subcommand)]
    Holds(inspect::HoldsCommand),
    /// Authorities and their leases: `list`.
    #[command(subcommand)]
    Authorities(inspect::AuthoritiesCommand),
    /// Outcome webhooks: `list` (endpoints and their events' states),
    /// `events ENDPOINT`, `redeliver EVENT`.
    #[command(subcommand)]
    Webhooks(webhooks::WebhooksCommand),
    /// Remove finished commands past the retention window, in bounded
    /// batches, archiving each with its history first.
    Prune(prune::PruneArgs),
    /// Record a command through the HTTP API (safe to repeat: one key, one
    /// command), optionally wait for its outcome; the exit status tells
    /// applied (0), failed (2), ambiguous (3), still in flight (4),
    /// cancelled or expired (5), held (6) and errors (1) apart.
    Submit(submit::SubmitArgs),
    /// A device's durable outbox (one SQLite file): `add` records a command
    /// before anything is sent, `flush` sends what is unanswered and records
    /// each answer, `list` shows both.
    Outbox(outbox::OutboxCommand),
    /// Serve the catalog's kinds as MCP tools for agents, over stdio (or
    /// streamable HTTP with --http); every call is admitted as an intent
    /// through the API's /v1/invoke.
    Mcp(mcp::McpArgs),
    /// Recompute the history's hash chains (live and archived commands) and
    /// name every break; write or check a published digest of the chain heads.
    Verify(verify::VerifyArgs),
    /// The private cluster of --state-dir: `reset --yes` stops it and
    /// deletes it, with the ledger in it (for a cluster whose password is
    /// gone, or to start afresh).
    #[command(subcommand)]
    Database(DatabaseCommand),
}

#[derive(Debug, Subcommand)]
pub enum DatabaseCommand {
    /// Stop the private cluster of --state-dir and delete it (every
    /// command, token and history entry in it) and the files of the state
    /// directory that belong to it (its passwords, port and operator
    /// token). The next `serve` makes a new one.
    Reset {
        /// Yes, delete it.
        #[arg(long)]
        yes: bool,
    },
}

/// Runs a subcommand; the exit status is success unless it says otherwise
/// (`submit` reports the command's outcome in it).
pub async fn run(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    match cli.command {
        Command::Submit(args) => submit::run(args).await.map(std::process::ExitCode::from),
        Command::Outbox(cmd) => outbox::run(cmd)
            .await
            .map(|()| std::process::ExitCode::SUCCESS),
        Command::Mcp(args) => mcp::run(args)
            .await
            .map(|()| std::process::ExitCode::SUCCESS),
        command => run_command(cli.database_url, &cli.state_dir, command)
            .await
            .map(|()| std::process::ExitCode::SUCCESS),
    }
}

async fn run_command(
    database_url: Option<String>,
    state_dir: &std::path::Path,
    command: Command,
) -> anyhow::Result<()> {
    let cli = CliContext {
        database_url,
        state_dir,
    };
    match command {
        Command::Submit(_) | Command::Outbox(_) | Command::Mcp(_) => {
            unreachable!("the API's clients are run above, without a database")
        }
        Command::Serve(args) => serve::run(cli.database_url, cli.state_dir, args).await,
        Command::InspectorRole { name, password_env } => {
            let password = match password_env {
                Some(var) => {
                    Some(std::env::var(&var).map_err(|_| anyhow::anyhow!("{var} is not set"))?)
                }
                None => None,
            };
            let db = Database::open(cli.database_url, cli.state_dir).await?;
            let mut conn = db.pool.acquire().await?;
            crate::db::inspector::grant(&mut conn, &name, password.as_deref()).await?;
            drop(conn);
            println!("role {name} can read the ledger (not token hashes) and write nothing");
            db.close().await
        }
        Command::RolePassword { role, password_env } => {
            let password = std::env::var(&password_env)
                .map_err(|_| anyhow::anyhow!("{password_env} is not set"))?;
            anyhow::ensure!(!password.is_empty(), "{password_env} is empty");
            let db = Database::open(cli.database_url, cli.state_dir).await?;
            let mut conn = db.pool.acquire().await?;
            crate::db::roles::set_login(&mut conn, role, &password).await?;
            drop(conn);
            println!("{} logs in with the new password", role.name());
            db.close().await
        }
        Command::Migrate {
            require_distributed,
        } => {
            let db = Database::open(cli.database_url, cli.state_dir).await?;
            if !db.backend.local_tables {
                println!(
                    "migrations applied; tables distributed by authority ({})",
                    db.backend.product()
                );
            } else if require_distributed {
                db.close().await?;
                anyhow::bail!(crate::db::backend::migrate_help::NOT_DISTRIBUTED);
            } else {
                println!("migrations applied");
            }
            db.close().await
        }
        Command::Token(cmd) => token::run(cli.database_url, cli.state_dir, cmd).await,
        Command::Custodian(cmd) => custodian::run(cli.database_url, cli.state_dir, cmd).await,
        Command::DemoSink(cmd) => custodian::run_demo_sink(cmd).await,
        Command::Prune(args) => prune::run(cli.database_url, cli.state_dir, args).await,
        Command::Verify(args) => verify::run(cli.database_url, cli.state_dir, args).await,
        Command::Commands(cmd) => commands::run(cli.database_url, cli.state_dir, cmd).await,
        Command::Holds(cmd) => inspect::holds(cli.database_url, cli.state_dir, cmd).await,
        Command::Authorities(cmd) => {
            inspect::authorities(cli.database_url, cli.state_dir, cmd).await
        }
        Command::Webhooks(cmd) => webhooks::run(cli.database_url, cli.state_dir, cmd).await,
        Command::Recover(cmd) => custodian::run_recover(cli.database_url, cli.state_dir, cmd).await,
        Command::Database(DatabaseCommand::Reset { yes }) => {
            database_reset(cli.database_url.is_some(), cli.state_dir, yes)
        }
    }
}

#[allow(clippy::print_stdout)]
fn database_reset(external: bool, state_dir: &std::path::Path, yes: bool) -> anyhow::Result<()> {
    anyhow::ensure!(
        !external,
        "database reset removes the private cluster of --state-dir; with DATABASE_URL the database is yours to drop"
    );
    let data_dir = crate::embedded_pg::data_dir_for(state_dir);
    anyhow::ensure!(
        yes,
        "this stops and deletes the private cluster in {} and every command in it; run again with --yes",
        data_dir.display()
    );
    let (data_dir, removed) = database::reset_private_cluster(state_dir)?;
    if removed {
        println!(
            "removed the private cluster in {}; the next `serve` makes a new one",
            data_dir.display()
        );
    } else {
        println!(
            "no private cluster in {}; nothing to remove",
            data_dir.display()
        );
    }
    Ok(())
}

/// Where the database-backed subcommands find their database.
struct CliContext<'a> {
    database_url: Option<String>,
    state_dir: &'a std::path::Path,
}

/// Resolves at Ctrl-C or SIGTERM: every long-running subcommand stops on it.
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

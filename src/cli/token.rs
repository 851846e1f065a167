//! `command-ledger token create|revoke|list`.

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use clap::Subcommand;
use sqlx::PgPool;
use std::path::Path;

use super::Database;
use crate::db::{self, Role};
use crate::domain::token::{format_token, listed_prefix, token_hash};

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token (and the principal, if new). The token is printed once.
    Create {
        /// Principal name (letters, digits, `_.@:-`).
        #[arg(long)]
        principal: String,
        #[arg(long, value_parser = parse_role)]
        role: Role,
        /// The fleet the principal joins (created if new): its members share
        /// one dedup space for the kinds whose dedup_scope is fleet. Without
        /// it, a new principal forms a fleet of its own, named after it. A
        /// principal never changes fleet.
        #[arg(long)]
        fleet: Option<String>,
        /// Lifetime such as 90d, 12h or 30m; no expiry when omitted.
        #[arg(long, value_parser = parse_lifetime)]
        expires_in: Option<chrono::Duration>,
    },
    /// Revoke every token of a principal, or one token by its listed prefix.
    Revoke {
        #[arg(long, required_unless_present = "prefix", conflicts_with = "prefix")]
        principal: Option<String>,
        #[arg(long)]
        prefix: Option<String>,
    },
    /// List tokens (prefixes only, never the tokens).
    List,
}

fn parse_role(s: &str) -> Result<Role, String> {
    Role::parse(s).ok_or_else(|| format!("role must be device or operator, not {s:?}"))
}

/// `90d`, `12h`, `30m`, `45s`.
fn parse_lifetime(s: &str) -> Result<chrono::Duration, String> {
    let err = || format!("lifetime must look like 90d, 12h, 30m or 45s, not {s:?}");
    let split = s.len().checked_sub(1).ok_or_else(err)?;
    let (number, unit) = s.split_at(split);
    let n: i64 = number.parse().map_err(|_| err())?;
    if n <= 0 {
        return Err(err());
    }
    let seconds = match unit {
        "d" => n.checked_mul(86_400),
        "h" => n.checked_mul(3_600),
        "m" => n.checked_mul(60),
        "s" => Some(n),
        _ => None,
    }
    .ok_or_else(err)?;
    chrono::Duration::try_seconds(seconds).ok_or_else(err)
}

pub(super) async fn run(
    database_url: Option<String>,
    state_dir: &Path,
    cmd: TokenCommand,
) -> anyhow::Result<()> {
    let db = Database::open(database_url, state_dir).await?;
    let outcome = run_on(&db.pool, cmd).await;
    db.close().await?;
    outcome
}

async fn run_on(pool: &PgPool, cmd: TokenCommand) -> anyhow::Result<()> {
    match cmd {
        TokenCommand::Create {
            principal,
            role,
            fleet,
            expires_in,
        } => {
            let expires_at = expires_in.map(|d| Utc::now() + d);
            let token =
                issue_token_in(pool, &principal, role, fleet.as_deref(), expires_at).await?;
            let fleet = fleet.as_deref().unwrap_or(&principal);
            // Said where the token is: on the terminal, or in what captured
            // standard output (`DEVICE=$(... token create ...)`).
            if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
                eprintln!(
                    "token for {principal} ({role}, fleet {fleet}); it is shown only this once:"
                );
            } else {
                eprintln!(
                    "token for {principal} ({role}, fleet {fleet}) written to standard output, once; keep what captured it"
                );
            }
            println!("{token}");
        }
        TokenCommand::Revoke { principal, prefix } => {
            let n = db::principals::revoke(pool, principal.as_deref(), prefix.as_deref()).await?;
            println!("revoked {n} token(s)");
            if n == 0 {
                anyhow::bail!("no live token matched");
            }
        }
        TokenCommand::List => {
            println!(
                "{:<14} {:<24} {:<9} {:<24} {:<20} {:<20} revoked",
                "prefix", "principal", "role", "fleet", "created", "expires"
            );
            let fmt = |t: Option<DateTime<Utc>>| {
                t.map_or_else(
                    || "-".to_owned(),
                    |t| t.format("%Y-%m-%d %H:%M:%S").to_string(),
                )
            };
            for t in db::principals::list_tokens(pool).await? {
                println!(
                    "{:<14} {:<24} {:<9} {:<24} {:<20} {:<20} {}",
                    t.prefix,
                    t.principal,
                    t.role,
                    t.fleet,
                    fmt(Some(t.created_at)),
                    fmt(t.expires_at),
                    fmt(t.revoked_at),
                );
            }
        }
    }
    Ok(())
}

/// Creates a token for `principal` (created with `role` if new, in a fleet
/// of its own) and returns it.
pub async fn issue_token(
    pool: &PgPool,
    principal: &str,
    role: Role,
    expires_at: Option<DateTime<Utc>>,
) -> anyhow::Result<String> {
    issue_token_in(pool, principal, role, None, expires_at).await
}

/// [`issue_token`], the principal (if new) joining `fleet` (created if new).
pub async fn issue_token_in(
    pool: &PgPool,
    principal: &str,
    role: Role,
    fleet: Option<&str>,
    expires_at: Option<DateTime<Utc>>,
) -> anyhow::Result<String> {
    let mut random = [0u8; 32];
    getrandom::fill(&mut random).map_err(|e| anyhow::anyhow!("no randomness available: {e}"))?;
    let token = format_token(&random);
    db::principals::issue_token(
        pool,
        principal,
        role,
        fleet,
        &token_hash(&token),
        listed_prefix(&token),
        expires_at,
    )
    .await
    .with_context(|| format!("creating principal {principal}"))?;
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_parse_in_days_hours_minutes_and_seconds() {
        assert_eq!(parse_lifetime("90d"), Ok(chrono::Duration::days(90)));
        assert_eq!(parse_lifetime("12h"), Ok(chrono::Duration::hours(12)));
        assert_eq!(parse_lifetime("30m"), Ok(chrono::Duration::minutes(30)));
        assert_eq!(parse_lifetime("45s"), Ok(chrono::Duration::seconds(45)));
        for bad in [
            "",
            "d",
            "0d",
            "-1d",
            "10",
            "10w",
            "1.5h",
            "99999999999999999d",
        ] {
            assert!(parse_lifetime(bad).is_err(), "{bad:?}");
        }
    }
}

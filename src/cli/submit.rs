//! `command-ledger submit`: record a command from the shell through the HTTP
//! API (with the client library's safe retries), optionally wait for its
//! outcome, and say it in the exit status.

use anyhow::Context as _;
use clap::Args;
use command_ledger_client::{Client, Command, Error, Outcome, Submission, Submitted};
use serde_json::{Map, Value, json};

/// Exit statuses, one per thing a script must tell apart.
pub mod exit {
    /// Applied; or, without `--wait`, recorded.
    pub const APPLIED_OR_RECORDED: u8 = 0;
    /// Refused (a problem answer), bad arguments, or no answer at all.
    pub const ERROR: u8 = 1;
    /// The effect certainly did not happen.
    pub const FAILED: u8 = 2;
    /// Nobody can tell whether the effect ran: a person decides.
    pub const AMBIGUOUS: u8 = 3;
    /// Still pending or running when the wait ended.
    pub const IN_FLIGHT: u8 = 4;
    /// Cancelled or expired before any effect.
    pub const CANCELLED_OR_EXPIRED: u8 = 5;
    /// Held as a near-duplicate for a person's decision.
    pub const HELD: u8 = 6;
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The command's kind (`refund`, `steer`, ...).
    pub kind: String,
    /// The authority that may run it.
    #[arg(long)]
    pub authority: String,
    /// An argument, `name=value`; the value is JSON when it parses as JSON
    /// (a number, `true`, `"quoted text"`, an object), else text as written.
    /// Repeat for more.
    #[arg(long = "arg", value_name = "NAME=VALUE")]
    pub args: Vec<String>,
    /// The idempotency key (default: a new UUIDv7, printed so that the same
    /// submission can be repeated safely).
    #[arg(long)]
    pub key: Option<String>,
    /// Not to be claimed before this instant: RFC 3339, or a duration from
    /// now (`30s`, `5m`). Recorded at once; cancellable until it starts.
    #[arg(long, value_parser = super::instant_ahead)]
    pub not_before: Option<chrono::DateTime<chrono::Utc>>,
    /// Priority, -100 to 100 (default: the kind's; at most its max_priority).
    #[arg(long, allow_hyphen_values = true)]
    pub priority: Option<i16>,
    /// Wait this long for the outcome (`10s`, `2m`); default: return once recorded.
    #[arg(long, value_parser = super::duration)]
    pub wait: Option<std::time::Duration>,
    /// Print the API's JSON (the command, plus `"key"`) instead of one line.
    #[arg(long)]
    pub json: bool,
    /// The API's base URL.
    #[arg(
        long,
        env = "COMMAND_LEDGER_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub url: String,
    /// A bearer token (`token create` prints one).
    #[arg(long, env = "COMMAND_LEDGER_TOKEN", hide_env_values = true)]
    pub token: String,
}

/// Parses `name=value` arguments into the command's args object.
pub(super) fn parse_args(pairs: &[String]) -> anyhow::Result<Value> {
    let mut args = Map::new();
    for pair in pairs {
        let (name, value) = pair
            .split_once('=')
            .with_context(|| format!("--arg {pair:?} is not NAME=VALUE"))?;
        anyhow::ensure!(!name.is_empty(), "--arg {pair:?} has no name");
        let value = serde_json::from_str::<Value>(value)
            .unwrap_or_else(|_| Value::String(value.to_owned()));
        args.insert(name.to_owned(), value);
    }
    Ok(Value::Object(args))
}

fn code_for(command: &Command, waited: bool) -> u8 {
    match command.outcome() {
        Outcome::Applied(_) => exit::APPLIED_OR_RECORDED,
        Outcome::Failed(_) => exit::FAILED,
        Outcome::Ambiguous(_) => exit::AMBIGUOUS,
        Outcome::Cancelled(_) | Outcome::Expired(_) => exit::CANCELLED_OR_EXPIRED,
        Outcome::InFlight(_) if waited => exit::IN_FLIGHT,
        Outcome::InFlight(_) => exit::APPLIED_OR_RECORDED,
    }
}

/// Runs `submit` and returns the exit status.
pub(super) async fn run(a: SubmitArgs) -> anyhow::Result<u8> {
    let mut submission = Submission::new(&a.kind, &a.authority).args(parse_args(&a.args)?);
    if let Some(key) = &a.key {
        submission = submission.key(key);
    }
    submission.not_before = a.not_before;
    submission.priority = a.priority;
    let client = Client::new(&a.url, &a.token);
    let submitted = match client.submit(&submission).await {
        Ok(s) => s,
        Err(e) => {
            report_error(&e, a.json);
            return Ok(exit::ERROR);
        }
    };
    let key = submitted.key().to_owned();
    let (command, disposition) = match submitted {
        Submitted::Held { hold, .. } => {
            if a.json {
                println!(
                    "{}",
                    json!({"key": key, "disposition": "held", "hold": hold_json(&hold)})
                );
            } else {
                println!(
                    "held        hold {}  key {key}  (a near-duplicate of {}: an operator releases or rejects it)",
                    hold.id, hold.resembles
                );
            }
            return Ok(exit::HELD);
        }
        Submitted::Command { command, .. } => {
            let disposition = command.disposition.clone().unwrap_or_default();
            (command, disposition)
        }
    };
    let command = match a.wait {
        Some(wait) if !command.state.is_terminal() => match client.wait(command.id, wait).await {
            Ok(c) => c,
            Err(e) => {
                report_error(&e, a.json);
                return Ok(exit::ERROR);
            }
        },
        _ => command,
    };
    if a.json {
        let mut v = serde_json::to_value(&command)?;
        v["key"] = json!(key);
        v["disposition"] = json!(disposition);
        println!("{v}");
    } else {
        let detail = match command.outcome() {
            Outcome::Applied(r) => format!("result {r}"),
            Outcome::InFlight(_) => String::new(),
            Outcome::Failed(e)
            | Outcome::Ambiguous(e)
            | Outcome::Cancelled(e)
            | Outcome::Expired(e) => format!("error {e}"),
        };
        let state = serde_json::to_value(command.state)?;
        println!(
            "{:<11} {}  key {key}  ({disposition})  {detail}",
            state.as_str().unwrap_or_default(),
            command.id
        );
    }
    Ok(code_for(&command, a.wait.is_some()))
}

fn hold_json(hold: &command_ledger_client::Hold) -> Value {
    serde_json::to_value(hold).unwrap_or(Value::Null)
}

fn report_error(e: &Error, as_json: bool) {
    match e {
        Error::Problem { body, .. } if as_json => println!("{body}"),
        _ => eprintln!("command-ledger submit: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_are_json_when_they_parse_as_json_else_text() {
        let args = parse_args(&[
            "to=ada@example.com".to_owned(),
            "amount=12.00 USD".to_owned(),
            "count=3".to_owned(),
            "ok=true".to_owned(),
            "quoted=\"7\"".to_owned(),
            "nested={\"a\":1}".to_owned(),
            "eq=a=b".to_owned(),
        ])
        .unwrap();
        assert_eq!(
            args,
            json!({"to": "ada@example.com", "amount": "12.00 USD", "count": 3, "ok": true,
                   "quoted": "7", "nested": {"a": 1}, "eq": "a=b"})
        );
        assert!(parse_args(&["novalue".to_owned()]).is_err());
        assert!(parse_args(&["=x".to_owned()]).is_err());
    }
}

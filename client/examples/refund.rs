//! One refund through the client library, from submission to outcome:
//!
//! ```sh
//! COMMAND_LEDGER_TOKEN=clt_… cargo run -p command-ledger-client --example refund -- ada@example.com "12.00 USD"
//! ```
//!
//! `COMMAND_LEDGER_URL` defaults to `http://127.0.0.1:8080`.

use command_ledger_client::{Client, Outcome, Submission, Submitted};
use serde_json::json;
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(to), Some(amount)) = (args.next(), args.next()) else {
        return Err("usage: refund TO AMOUNT".into());
    };
    let url =
        std::env::var("COMMAND_LEDGER_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let token = std::env::var("COMMAND_LEDGER_TOKEN").map_err(|_| "set COMMAND_LEDGER_TOKEN")?;
    let client = Client::new(url, token);

    let refund = Submission::new("refund", "payments")
        .args(json!({"to": to, "amount": amount}))
        .wait(Duration::from_secs(10));
    let submitted = client.submit(&refund).await?;
    // A real caller stores the key before anything else: resubmitting the
    // same refund under it can never pay twice.
    println!("key: {}", submitted.key());
    let command = match submitted {
        Submitted::Command { command, .. } => command,
        Submitted::Held { hold, .. } => {
            println!("held: {} (a person decides)", hold.id);
            return Ok(());
        }
    };
    match command.outcome() {
        Outcome::Applied(result) => println!("applied: {result}"),
        Outcome::Failed(error) => println!("failed, nothing was paid: {error}"),
        Outcome::Ambiguous(error) => {
            println!("ambiguous, ask a person before paying again: {error}");
        }
        Outcome::Cancelled(error) | Outcome::Expired(error) => println!("never ran: {error}"),
        Outcome::InFlight(state) => println!("still {state:?} after 10 s; wait on {}", command.id),
    }
    Ok(())
}

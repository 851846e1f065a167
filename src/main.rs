//! The binary, thin: parse the command line, set up logging, run the
//! subcommand. Everything else is the library (`src/lib.rs`).

use clap::Parser as _;
use command_ledger::{cli, telemetry};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    let telemetry = match telemetry::init(args.log_format) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let code = match cli::run(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    };
    // The spans still queued go out before the process ends.
    tokio::task::spawn_blocking(move || telemetry.shutdown())
        .await
        .ok();
    code
}

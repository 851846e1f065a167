//! The binary, thin: parse the command line, set up logging, run the
//! subcommand. Everything else is the library (`src/lib.rs`).

use clap::Parser as _;
use command_ledger::{cli, telemetry};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    telemetry::init(args.log_format);
    match cli::run(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

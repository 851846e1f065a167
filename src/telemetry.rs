//! Logging: human-readable text by default, one JSON object per line on request.
//! `RUST_LOG` picks the levels (default: info for this crate, warn elsewhere).

use std::io::IsTerminal as _;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The levels logged when `RUST_LOG` is unset.
pub const DEFAULT_FILTER: &str = "warn,command_ledger=info,tower_http=warn";

pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let ansi = std::io::stderr().is_terminal();
    // A second init (tests) keeps the first subscriber.
    let _ = subscriber(format, filter, std::io::stderr, ansi).try_init();
}

/// The subscriber the binary logs with, writing to `writer`: [`init`]
/// installs it over stderr; tests install it over a buffer of their own, so
/// what they read is what an operator reads.
pub fn subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    writer: W,
    ansi: bool,
) -> tracing::Dispatch
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder.finish().into(),
        LogFormat::Json => builder.json().flatten_event(true).finish().into(),
    }
}

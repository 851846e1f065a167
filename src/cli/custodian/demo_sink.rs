//! `command-ledger demo-sink`: the demo payments provider, served.

use anyhow::Context as _;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::demo_sink;

#[derive(Debug, Args)]
pub struct DemoSinkCommand {
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: SocketAddr,
    /// The durable log of every request.
    #[arg(long, default_value = "demo-sink.log")]
    pub log: PathBuf,
    #[arg(long, value_enum, default_value = "ok")]
    pub mode: demo_sink::Mode,
    /// How long each request takes before it is applied, like 300ms.
    #[arg(long, default_value = "0ms", value_parser = duration_or_zero)]
    pub latency: Duration,
}

fn duration_or_zero(s: &str) -> Result<Duration, String> {
    if s.trim_end_matches("ms").trim_end_matches('s') == "0" {
        return Ok(Duration::ZERO);
    }
    crate::cli::duration(s)
}

pub(in crate::cli) async fn run(cmd: DemoSinkCommand) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(cmd.listen)
        .await
        .with_context(|| format!("binding {}", cmd.listen))?;
    println!(
        "demo sink on http://{} (mode {:?}), log {}",
        listener.local_addr()?,
        cmd.mode,
        cmd.log.display()
    );
    let router =
        demo_sink::router(&cmd.log, cmd.mode, cmd.latency).context("opening the sink log")?;
    axum::serve(listener, router)
        .with_graceful_shutdown(crate::cli::shutdown_signal())
        .await?;
    Ok(())
}

//! Outcome webhooks from the command line: the deliverer's options, which
//! `serve` and `custodian` share (each runs a deliverer), and the
//! operator's `webhooks list|events|redeliver`, answered from the database.

use chrono::Utc;
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;
use uuid::Uuid;

use super::inspect::{Output, print_json, print_table, time};
use super::{Database, duration};
use crate::db::webhooks::{AttemptRow, EndpointRow, EventRow};
use crate::domain::webhook::Backoff;
use crate::webhooks::{Deliverer, DelivererConfig};

#[derive(Debug, Clone, Args)]
pub struct WebhookArgs {
    /// Let webhook endpoints be addresses of this machine's own network
    /// (loopback, private, link-local, unique-local, carrier-grade NAT): off,
    /// the ledger cannot be turned against the network it runs in.
    #[arg(long, env = "WEBHOOKS_ALLOW_PRIVATE")]
    pub webhooks_allow_private: bool,
    /// Send no webhooks from this process (another serve or custodian does).
    #[arg(long)]
    pub no_webhook_delivery: bool,
    /// How long one webhook attempt may take: resolution, connection, TLS, answer.
    #[arg(long, env = "WEBHOOK_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub webhook_timeout: Duration,
    /// How long an event is tried, from its first attempt (or a redelivery).
    #[arg(long, env = "WEBHOOK_EXPIRY", default_value = "24h", value_parser = duration)]
    pub webhook_expiry: Duration,
    /// The wait after a first failed attempt; it doubles after each further one.
    #[arg(long, env = "WEBHOOK_RETRY_FIRST", default_value = "10s", value_parser = duration)]
    pub webhook_retry_first: Duration,
    /// The longest wait between two attempts.
    #[arg(long, env = "WEBHOOK_RETRY_CAP", default_value = "1h", value_parser = duration)]
    pub webhook_retry_cap: Duration,
}

impl WebhookArgs {
    pub fn config(&self) -> DelivererConfig {
        DelivererConfig {
            allow_private: self.webhooks_allow_private,
            timeout: self.webhook_timeout,
            expiry: self.webhook_expiry,
            backoff: Backoff {
                first: self.webhook_retry_first,
                cap: self.webhook_retry_cap.max(self.webhook_retry_first),
            },
            ..DelivererConfig::default()
        }
    }

    /// A deliverer on `pool` until `shutdown`, unless this process sends none.
    pub fn spawn(
        &self,
        pool: sqlx::PgPool,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Option<tokio::task::JoinHandle<()>> {
        if self.no_webhook_delivery {
            return None;
        }
        let deliverer = Deliverer::new(pool, self.config());
        Some(tokio::spawn(deliverer.run(shutdown)))
    }
}

#[derive(Debug, Subcommand)]
pub enum WebhooksCommand {
    /// Every endpoint, with how many of its events are pending, delivered and expired.
    List {
        #[command(flatten)]
        output: Output,
    },
    /// An endpoint's latest events, newest first, with each attempt.
    Events {
        /// The endpoint.
        id: Uuid,
        #[arg(long, default_value_t = 20)]
        limit: i64,
        #[command(flatten)]
        output: Output,
    },
    /// Send an event again: pending, due now, tried for --expiry from now
    /// (its id stays, so a receiver that has it drops the copy).
    Redeliver {
        /// The event.
        id: Uuid,
        /// How long it is tried from now (the deliverers' --webhook-expiry).
        #[arg(long, default_value = "24h", value_parser = duration)]
        expiry: Duration,
        #[command(flatten)]
        output: Output,
    },
}

pub(super) async fn run(
    url: Option<String>,
    state_dir: &Path,
    cmd: WebhooksCommand,
) -> anyhow::Result<()> {
    Database::with(url, state_dir, async |db| run_on(db, cmd).await).await
}

async fn run_on(db: &Database, cmd: WebhooksCommand) -> anyhow::Result<()> {
    match cmd {
        WebhooksCommand::List { output } => {
            let endpoints = crate::db::webhooks::list_endpoints(&db.pool, None).await?;
            let mut counts: HashMap<(Uuid, String), i64> = HashMap::new();
            for (endpoint, state, n) in crate::db::webhooks::event_counts(&db.pool).await? {
                counts.insert((endpoint, state), n);
            }
            let count = |e: &EndpointRow, s: &str| {
                counts
                    .get(&(e.id, s.to_owned()))
                    .copied()
                    .unwrap_or_default()
            };
            if output.json {
                print_json(&Value::Array(
                    endpoints
                        .iter()
                        .map(|e| {
                            let mut doc = crate::http::json::webhook(e);
                            doc["events"] = json!({
                                "pending": count(e, "pending"),
                                "delivered": count(e, "delivered"),
                                "expired": count(e, "expired"),
                            });
                            doc
                        })
                        .collect(),
                ));
            } else {
                print_table(
                    &[
                        "id",
                        "url",
                        "kinds",
                        "states",
                        "pending",
                        "delivered",
                        "expired",
                        "disabled",
                    ],
                    endpoints
                        .iter()
                        .map(|e| {
                            vec![
                                e.id.to_string(),
                                e.url.clone(),
                                e.kinds.as_ref().map_or_else(|| "*".into(), |k| k.join(",")),
                                e.states
                                    .as_ref()
                                    .map_or_else(|| "*".into(), |s| s.join(",")),
                                count(e, "pending").to_string(),
                                count(e, "delivered").to_string(),
                                count(e, "expired").to_string(),
                                time(e.disabled_at),
                            ]
                        })
                        .collect(),
                );
            }
        }
        WebhooksCommand::Events { id, limit, output } => {
            crate::db::webhooks::get_endpoint(&db.pool, id, None)
                .await?
                .ok_or_else(|| anyhow::anyhow!("no webhook endpoint {id}"))?;
            let events =
                crate::db::webhooks::events_of_endpoint(&db.pool, id, limit.clamp(1, 500)).await?;
            let ids: Vec<Uuid> = events.iter().map(|e| e.id).collect();
            let attempts = crate::db::webhooks::attempts_of(&db.pool, &ids).await?;
            if output.json {
                print_json(&Value::Array(
                    events
                        .iter()
                        .map(|e| crate::http::json::webhook_event(e, &attempts))
                        .collect(),
                ));
            } else {
                print_events(&events, &attempts);
            }
        }
        WebhooksCommand::Redeliver { id, expiry, output } => {
            let event = crate::ledger::webhooks::redeliver(&db.pool, id, expiry)
                .await?
                .ok_or_else(|| anyhow::anyhow!("no webhook event {id}"))?;
            tracing::info!(event.id = %id, actor = %super::inspect::actor(), "webhook event redelivered");
            if output.json {
                let attempts = crate::db::webhooks::attempts_of(&db.pool, &[id]).await?;
                print_json(&crate::http::json::webhook_event(&event, &attempts));
            } else {
                println!(
                    "event {} is pending again, due now, tried until {}",
                    event.id,
                    time(event.expires_at)
                );
            }
        }
    }
    Ok(())
}

/// Each event on a line, and its attempts under it.
fn print_events(events: &[EventRow], attempts: &[AttemptRow]) {
    let now = Utc::now();
    let mut rows = Vec::new();
    for e in events {
        let due = match e.next_attempt_at {
            Some(t) if t <= now => "now".to_owned(),
            Some(t) => time(Some(t)),
            None => "-".to_owned(),
        };
        rows.push(vec![
            e.id.to_string(),
            e.state.clone(),
            e.payload["state"].as_str().unwrap_or("-").to_owned(),
            e.command_id.to_string(),
            e.attempts.to_string(),
            due,
            e.last_error.clone().unwrap_or_default(),
        ]);
        for a in attempts.iter().filter(|a| a.event_id == e.id) {
            rows.push(vec![
                format!("  attempt {}", a.n),
                a.status.map_or_else(|| "-".into(), |s| s.to_string()),
                String::new(),
                time(Some(a.at)),
                format!("{} ms", a.duration_ms),
                String::new(),
                a.error.clone().unwrap_or_default(),
            ]);
        }
    }
    print_table(
        &[
            "event", "state", "outcome", "command", "attempts", "next", "error",
        ],
        rows,
    );
}

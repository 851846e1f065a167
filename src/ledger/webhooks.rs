//! Redelivering a webhook event, for the API and the command line alike.

use chrono::Utc;
use sqlx::PgPool;
use std::time::Duration;
use uuid::Uuid;

use crate::db::webhooks::{self as db, EventRow};
use crate::domain::webhook::later;

/// Makes event `id` pending again, due now and tried for `expiry` from now,
/// whatever became of it before (delivered, expired or pending); its id
/// stays, so a receiver that has it drops the copy. An event of a disabled
/// endpoint expires at once instead (`the endpoint was disabled`). `None`:
/// no such event.
pub async fn redeliver(
    pool: &PgPool,
    id: Uuid,
    expiry: Duration,
) -> Result<Option<EventRow>, sqlx::Error> {
    // Found by id (on a distributed backend, on every shard), then changed on its own.
    let Some(event) = db::get_event(pool, id).await? else {
        return Ok(None);
    };
    let now = Utc::now();
    let endpoint = db::get_endpoint(pool, event.endpoint_id, None).await?;
    if endpoint.is_none_or(|e| e.disabled_at.is_none()) {
        return db::redeliver(pool, &event.authority_id, id, now, later(now, expiry)).await;
    }
    // A disabled endpoint is sent nothing: the event, made pending again,
    // expires at once, saying why, in one transaction (no deliverer sees it
    // pending).
    db::redeliver_to_disabled(
        pool,
        &event.authority_id,
        id,
        event.endpoint_id,
        now,
        later(now, expiry),
        DISABLED,
    )
    .await?;
    db::get_event(pool, id).await
}

/// Why the events of a disabled endpoint expire.
pub const DISABLED: &str = "the endpoint was disabled";

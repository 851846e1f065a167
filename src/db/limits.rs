//! Limits per provider (migration 0048; `domain::limits`): the catalog's
//! groups written for every custodian to draw from, when the claim will
//! find room again, and what waits on each limit.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;

use crate::domain::limits::ProviderLimit;

/// Writes `limits` as the database's provider groups (the engine step
/// `ledger_set_providers`): groups not in `limits` go, queued commands of a
/// kind whose group changed follow it. Returns how many queued commands
/// moved. Refused on Citus when `limits` is not empty.
pub async fn write(ex: impl PgExecutor<'_>, limits: &[ProviderLimit]) -> Result<i64, sqlx::Error> {
    let groups: Vec<serde_json::Value> = limits.iter().map(ProviderLimit::to_json).collect();
    let moved = sqlx::query_scalar!(
        r#"select ledger_set_providers($1::jsonb) as "moved!""#,
        serde_json::Value::Array(groups),
    )
    .fetch_one(ex)
    .await?;
    Ok(moved)
}

/// How long a claim that passed over a group held at its in-flight limit
/// waits before it asks again: a place frees when any custodian records
/// an outcome, and nothing announces it.
pub const IN_FLIGHT_RECHECK: std::time::Duration = std::time::Duration::from_millis(20);

/// When a group whose commands wait, ready, at `authorities` may have room
/// again (`None`: none waits on a limit): when its bucket next holds a
/// token, or shortly when it is at its in-flight limit.
pub async fn next_room(
    ex: impl PgExecutor<'_>,
    authorities: &[String],
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        select min(case when b.tokens < 1
                        then clock_timestamp() + make_interval(secs => (1 - b.tokens) / p.rate)
                        else clock_timestamp() + make_interval(secs => $2::float8)
                   end) as "at"
        from provider_limits p
        cross join lateral (select ledger_provider_tokens(p.tokens, p.rate, p.burst, p.refilled_at, clock_timestamp()) as tokens) b
        where exists (select 1 from command_queue q
                      where q.authority_id = any($1) and q.provider = p.name
                        and (q.ready_at is null or q.ready_at <= now()))
        "#,
        authorities,
        IN_FLIGHT_RECHECK.as_secs_f64(),
    )
    .fetch_one(ex)
    .await
}

/// One provider group as it stands: its limits, its commands in flight, the
/// commands waiting for it, and its bucket's tokens now.
#[derive(Debug, Clone, Serialize)]
pub struct ProviderStatus {
    pub name: String,
    pub max_in_flight: Option<i32>,
    pub rate: Option<f64>,
    pub burst: i32,
    /// Tokens in the bucket now (`None`: no rate limit).
    pub tokens: Option<f64>,
    /// Its commands claimed and not terminal, on every authority.
    pub in_flight: i64,
    /// Its commands queued and ready, on every authority: waiting for the
    /// group's room (or for a custodian).
    pub waiting: i64,
}

/// Every provider group, by name. Nothing more is read when there is none
/// (always so on a distributed backend, where the groups are refused).
pub async fn status(conn: &mut sqlx::PgConnection) -> Result<Vec<ProviderStatus>, sqlx::Error> {
    let any = sqlx::query_scalar!(r#"select exists (select 1 from provider_limits) as "any!""#)
        .fetch_one(&mut *conn)
        .await?;
    if !any {
        return Ok(Vec::new());
    }
    sqlx::query_as!(
        ProviderStatus,
        r#"
        select p.name, p.max_in_flight, p.rate, p.burst,
               ledger_provider_tokens(p.tokens, p.rate, p.burst, p.refilled_at, clock_timestamp()) as "tokens",
               ledger_provider_in_flight(p.name) as "in_flight!",
               (select count(*) from command_queue q
                where q.provider = p.name and (q.ready_at is null or q.ready_at <= now())) as "waiting!"
        from provider_limits p
        order by p.name
        "#
    )
    .fetch_all(conn)
    .await
}

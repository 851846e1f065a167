//! Outcome webhooks (migration 0029): endpoints registered by principals,
//! the events the `commands_webhook_events` trigger writes with each
//! terminal outcome, and what the deliverers do with them. Every write
//! names the event's authority, so on Citus it runs on one shard group; an
//! endpoint's secret is read only by [`endpoints_for_sending`].

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgExecutor;
use uuid::Uuid;

/// An endpoint, as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointRow {
    pub id: Uuid,
    /// The dedup space whose commands it receives (a fleet's or a principal's id).
    pub scope: Uuid,
    pub url: String,
    /// Only these kinds (none: every kind).
    pub kinds: Option<Vec<String>>,
    /// Only these terminal states (none: all).
    pub states: Option<Vec<String>>,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub disabled_at: Option<DateTime<Utc>>,
}

/// What a registration records.
#[derive(Debug, Clone)]
pub struct NewEndpoint<'a> {
    pub id: Uuid,
    pub scope: Uuid,
    pub url: &'a str,
    pub kinds: Option<&'a [String]>,
    pub states: Option<&'a [String]>,
    pub secret: &'a str,
    pub created_by: &'a str,
}

pub async fn insert_endpoint(
    ex: impl PgExecutor<'_>,
    e: &NewEndpoint<'_>,
) -> Result<EndpointRow, sqlx::Error> {
    sqlx::query_as!(
        EndpointRow,
        r#"
        insert into webhook_endpoints (id, scope, url, kinds, states, secret, created_by)
        values ($1, $2, $3, $4, $5, $6, $7)
        returning id, scope, url, kinds, states, created_at, created_by, disabled_at
        "#,
        e.id,
        e.scope,
        e.url,
        e.kinds,
        e.states,
        e.secret,
        e.created_by,
    )
    .fetch_one(ex)
    .await
}

/// Endpoints of these scopes (every endpoint when `None`), oldest first.
pub async fn list_endpoints(
    ex: impl PgExecutor<'_>,
    scopes: Option<&[Uuid]>,
) -> Result<Vec<EndpointRow>, sqlx::Error> {
    sqlx::query_as!(
        EndpointRow,
        r#"
        select id, scope, url, kinds, states, created_at, created_by, disabled_at
        from webhook_endpoints
        where $1::uuid[] is null or scope = any($1)
        order by id
        "#,
        scopes,
    )
    .fetch_all(ex)
    .await
}

/// One endpoint, if it is of these scopes (any scope when `None`).
pub async fn get_endpoint(
    ex: impl PgExecutor<'_>,
    id: Uuid,
    scopes: Option<&[Uuid]>,
) -> Result<Option<EndpointRow>, sqlx::Error> {
    sqlx::query_as!(
        EndpointRow,
        r#"
        select id, scope, url, kinds, states, created_at, created_by, disabled_at
        from webhook_endpoints
        where id = $1 and ($2::uuid[] is null or scope = any($2))
        "#,
        id,
        scopes,
    )
    .fetch_optional(ex)
    .await
}

/// Disables an endpoint of these scopes at `now`: no event is written for
/// it from then on. Disabling it again keeps the first time. `None` when
/// there is no such endpoint (or it is another scope's).
pub async fn disable_endpoint(
    ex: impl PgExecutor<'_>,
    id: Uuid,
    scopes: Option<&[Uuid]>,
    now: DateTime<Utc>,
) -> Result<Option<EndpointRow>, sqlx::Error> {
    sqlx::query_as!(
        EndpointRow,
        r#"
        update webhook_endpoints set disabled_at = coalesce(disabled_at, $3)
        where id = $1 and ($2::uuid[] is null or scope = any($2))
        returning id, scope, url, kinds, states, created_at, created_by, disabled_at
        "#,
        id,
        scopes,
        now,
    )
    .fetch_optional(ex)
    .await
}

#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    pub id: Uuid,
    pub authority_id: String,
    pub endpoint_id: Uuid,
    pub command_id: Uuid,
    pub payload: Value,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub attempts: i32,
    pub delivered_at: Option<DateTime<Utc>>,
    /// `pending`, `delivered` or `expired`.
    pub state: String,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRow {
    pub event_id: Uuid,
    pub n: i32,
    pub at: DateTime<Utc>,
    pub status: Option<i32>,
    pub error: Option<String>,
    pub duration_ms: i32,
}

/// An endpoint's latest events, newest first.
pub async fn events_of_endpoint(
    ex: impl PgExecutor<'_>,
    endpoint_id: Uuid,
    limit: i64,
) -> Result<Vec<EventRow>, sqlx::Error> {
    sqlx::query_as!(
        EventRow,
        r#"
        select id, authority_id, endpoint_id, command_id, payload, created_at, expires_at, next_attempt_at,
               attempts, delivered_at, state, last_error
        from webhook_events
        where endpoint_id = $1
        order by id desc
        limit $2
        "#,
        endpoint_id,
        limit,
    )
    .fetch_all(ex)
    .await
}

/// How many events each endpoint has in each state: (endpoint, state, count).
pub async fn event_counts(
    ex: impl PgExecutor<'_>,
) -> Result<Vec<(Uuid, String, i64)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select endpoint_id, state, count(*) as "n!"
        from webhook_events
        group by endpoint_id, state
        "#
    )
    .fetch_all(ex)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.endpoint_id, r.state, r.n))
        .collect())
}

/// The events still to deliver: how many, how many of them expire within
/// the hour, and the age in seconds of the oldest (0 when none).
pub async fn pending_summary(ex: impl PgExecutor<'_>) -> Result<(i64, i64, f64), sqlx::Error> {
    let row = sqlx::query!(
        r#"
        select count(*) as "pending!",
               count(*) filter (where expires_at < now() + interval '1 hour') as "expiring!",
               coalesce(extract(epoch from now() - min(created_at)), 0)::float8 as "oldest_seconds!"
        from webhook_events
        where state = 'pending'
        "#
    )
    .fetch_one(ex)
    .await?;
    Ok((row.pending, row.expiring, row.oldest_seconds))
}

/// The events of a command (each endpoint's), oldest first.
pub async fn events_of_command(
    ex: impl PgExecutor<'_>,
    command_id: Uuid,
) -> Result<Vec<EventRow>, sqlx::Error> {
    sqlx::query_as!(
        EventRow,
        r#"
        select id, authority_id, endpoint_id, command_id, payload, created_at, expires_at, next_attempt_at,
               attempts, delivered_at, state, last_error
        from webhook_events
        where command_id = $1
        order by id
        "#,
        command_id,
    )
    .fetch_all(ex)
    .await
}

/// Every attempt at these events, in order.
pub async fn attempts_of(
    ex: impl PgExecutor<'_>,
    event_ids: &[Uuid],
) -> Result<Vec<AttemptRow>, sqlx::Error> {
    sqlx::query_as!(
        AttemptRow,
        r#"
        select event_id, n, at, status, error, duration_ms
        from webhook_attempts
        where event_id = any($1)
        order by event_id, n
        "#,
        event_ids,
    )
    .fetch_all(ex)
    .await
}

/// One event by id (every shard is asked on Citus; what follows names its authority).
pub async fn get_event(ex: impl PgExecutor<'_>, id: Uuid) -> Result<Option<EventRow>, sqlx::Error> {
    sqlx::query_as!(
        EventRow,
        r#"
        select id, authority_id, endpoint_id, command_id, payload, created_at, expires_at, next_attempt_at,
               attempts, delivered_at, state, last_error
        from webhook_events
        where id = $1
        "#,
        id,
    )
    .fetch_optional(ex)
    .await
}

/// An operator's redelivery: pending again, due at `now`, tried until
/// `expires_at`, whatever it was (delivered, expired or pending). Attempts
/// keep their numbers.
pub async fn redeliver(
    ex: impl PgExecutor<'_>,
    authority_id: &str,
    id: Uuid,
    now: DateTime<Utc>,
    expires_at: DateTime<Utc>,
) -> Result<Option<EventRow>, sqlx::Error> {
    sqlx::query_as!(
        EventRow,
        r#"
        update webhook_events
        set state = 'pending', next_attempt_at = $3, expires_at = $4, delivered_at = null, last_error = null
        where authority_id = $1 and id = $2
        returning id, authority_id, endpoint_id, command_id, payload, created_at, expires_at, next_attempt_at,
                  attempts, delivered_at, state, last_error
        "#,
        authority_id,
        id,
        now,
        expires_at,
    )
    .fetch_optional(ex)
    .await
}

/// Authorities with events due at `now`, at most `limit` (a read across
/// shards on Citus; each is then claimed on its own shard group).
pub async fn due_authorities(
    ex: impl PgExecutor<'_>,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        select distinct authority_id as "authority_id!"
        from webhook_events
        where state = 'pending' and next_attempt_at <= $1
        limit $2
        "#,
        now,
        limit,
    )
    .fetch_all(ex)
    .await
}

/// An event that expired without another attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    pub id: Uuid,
    pub endpoint_id: Uuid,
    pub attempts: i32,
    /// Whether its last attempt was started and never recorded (its
    /// deliverer stopped while it was in flight). Otherwise the event's
    /// last error, that attempt's, is kept.
    pub in_flight: bool,
}

/// Due events of `authority` whose expiry has passed: expired. An event
/// whose last attempt was recorded keeps that attempt's error (its retry
/// simply came due after its expiry); one whose deliverer died holding it
/// gets `in_flight_reason`.
pub async fn expire_overdue(
    ex: impl PgExecutor<'_>,
    authority_id: &str,
    now: DateTime<Utc>,
    in_flight_reason: &str,
) -> Result<Vec<Expired>, sqlx::Error> {
    sqlx::query_as!(
        Expired,
        r#"
        update webhook_events e
        set state = 'expired', next_attempt_at = null,
            last_error = case
                when e.attempts > 0 and not exists (
                    select 1 from webhook_attempts a
                    where a.authority_id = $1 and a.event_id = e.id and a.n = e.attempts
                ) then $3
                else e.last_error
            end
        where e.authority_id = $1 and e.state = 'pending'
          and e.next_attempt_at <= $2 and e.expires_at <= $2
        returning e.id, e.endpoint_id, e.attempts,
            e.attempts > 0 and not exists (
                select 1 from webhook_attempts a
                where a.authority_id = $1 and a.event_id = e.id and a.n = e.attempts
            ) as "in_flight!"
        "#,
        authority_id,
        now,
        in_flight_reason,
    )
    .fetch_all(ex)
    .await
}

/// An event taken up for one attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    pub id: Uuid,
    pub authority_id: String,
    pub endpoint_id: Uuid,
    pub command_id: Uuid,
    pub payload: Value,
    pub created_at: DateTime<Utc>,
    /// The number of this attempt (1 for the first).
    pub attempt: i32,
    pub expires_at: DateTime<Utc>,
    /// The command's W3C trace context, carried on to the receiver.
    pub trace_parent: Option<String>,
    pub trace_state: Option<String>,
}

/// Takes up to `limit` due events of `authority` for one attempt each,
/// skipping those another deliverer holds: the attempt is counted, the
/// event is due again only at `lease_until` (so that it is sent again if
/// this deliverer dies before it records the attempt), and an event tried
/// for the first time expires at `expires_at`.
pub async fn claim(
    ex: impl PgExecutor<'_>,
    authority_id: &str,
    now: DateTime<Utc>,
    lease_until: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<Claimed>, sqlx::Error> {
    sqlx::query_as!(
        Claimed,
        r#"
        with due as (
            select id from webhook_events
            where authority_id = $1 and state = 'pending' and next_attempt_at <= $2
              and (expires_at is null or expires_at > $2)
            order by next_attempt_at
            limit $5
            for update skip locked
        )
        update webhook_events e
        set attempts = e.attempts + 1, next_attempt_at = $3, expires_at = coalesce(e.expires_at, $4)
        from due
        where e.authority_id = $1 and e.id = due.id
        returning e.id, e.authority_id, e.endpoint_id, e.command_id, e.payload, e.created_at,
                  e.attempts as attempt, e.expires_at as "expires_at!",
                  (select c.trace_parent from commands c
                   where c.authority_id = $1 and c.id = e.command_id) as trace_parent,
                  (select c.trace_state from commands c
                   where c.authority_id = $1 and c.id = e.command_id) as trace_state
        "#,
        authority_id,
        now,
        lease_until,
        expires_at,
        limit,
    )
    .fetch_all(ex)
    .await
}

/// What a deliverer needs of an endpoint: where, and the key to sign with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendingEndpoint {
    pub id: Uuid,
    pub url: String,
    pub secret: String,
    pub disabled_at: Option<DateTime<Utc>>,
}

/// The endpoints of claimed events, with their secrets.
pub async fn endpoints_for_sending(
    ex: impl PgExecutor<'_>,
    ids: &[Uuid],
) -> Result<Vec<SendingEndpoint>, sqlx::Error> {
    sqlx::query_as!(
        SendingEndpoint,
        "select id, url, secret, disabled_at from webhook_endpoints where id = any($1)",
        ids,
    )
    .fetch_all(ex)
    .await
}

/// One finished attempt.
#[derive(Debug, Clone)]
pub struct NewAttempt<'a> {
    pub authority_id: &'a str,
    pub event_id: Uuid,
    pub n: i32,
    pub at: DateTime<Utc>,
    pub status: Option<i32>,
    pub error: Option<&'a str>,
    pub duration_ms: i32,
}

pub async fn insert_attempt(
    ex: impl PgExecutor<'_>,
    a: &NewAttempt<'_>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        insert into webhook_attempts (authority_id, event_id, n, at, status, error, duration_ms)
        values ($1, $2, $3, $4, $5, $6, $7)
        on conflict do nothing
        "#,
        a.authority_id,
        a.event_id,
        a.n,
        a.at,
        a.status,
        a.error,
        a.duration_ms,
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// Where an event goes after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next<'a> {
    Delivered { at: DateTime<Utc> },
    Retry { at: DateTime<Utc>, error: &'a str },
    Expired { error: &'a str },
}

/// Records where event `id` goes after attempt `attempt`, if that attempt
/// is still its latest (a compare-and-set: a deliverer whose lease lapsed
/// and whose event another took up changes nothing). Whether it did.
pub async fn finish(
    ex: impl PgExecutor<'_>,
    authority_id: &str,
    id: Uuid,
    attempt: i32,
    next: Next<'_>,
) -> Result<bool, sqlx::Error> {
    let (state, delivered_at, next_attempt_at, error) = match next {
        Next::Delivered { at } => ("delivered", Some(at), None, None),
        Next::Retry { at, error } => ("pending", None, Some(at), Some(error)),
        Next::Expired { error } => ("expired", None, None, Some(error)),
    };
    let done = sqlx::query!(
        r#"
        update webhook_events
        set state = $4, delivered_at = $5, next_attempt_at = $6, last_error = $7
        where authority_id = $1 and id = $2 and attempts = $3 and state = 'pending'
        "#,
        authority_id,
        id,
        attempt,
        state,
        delivered_at,
        next_attempt_at,
        error,
    )
    .execute(ex)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Makes event `id` of a disabled endpoint pending again and expires the
/// endpoint's pending events at once (`reason`), in one transaction: no
/// deliverer sees it pending. Returns how many expired.
pub async fn redeliver_to_disabled(
    pool: &sqlx::PgPool,
    authority_id: &str,
    id: Uuid,
    endpoint_id: Uuid,
    now: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    reason: &str,
) -> Result<u64, sqlx::Error> {
    let mut tx = pool.begin().await?;
    redeliver(&mut *tx, authority_id, id, now, expires_at).await?;
    let expired = expire_events_of_endpoint(&mut *tx, endpoint_id, reason).await?;
    tx.commit().await?;
    Ok(expired)
}

/// Expires the pending events of a disabled endpoint (a read and write on
/// every shard on Citus: the endpoint's events are spread over authorities).
pub async fn expire_events_of_endpoint(
    ex: impl PgExecutor<'_>,
    endpoint_id: Uuid,
    reason: &str,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query!(
        r#"
        update webhook_events set state = 'expired', next_attempt_at = null, last_error = $2
        where endpoint_id = $1 and state = 'pending'
        "#,
        endpoint_id,
        reason,
    )
    .execute(ex)
    .await?;
    Ok(done.rows_affected())
}

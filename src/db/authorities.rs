//! Authority leases. Whoever takes a lease from another holder, or after it
//! lapsed, increments the generation: a fencing token every later transition
//! of the authority's commands is checked against.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use std::time::Duration;

/// An authority row.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthorityRow {
    pub id: String,
    pub generation: i64,
    pub lease_holder: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
}

/// A lease as granted by the database.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Granted {
    pub generation: i64,
    pub expires_at: DateTime<Utc>,
}

/// Takes (or keeps) the lease on `authority` for `holder`. Returns `None`
/// while another holder's lease is live. Renewing one's own live lease keeps
/// the generation; anything else moves it forward.
///
/// The clock is read once, in `values` (`excluded.updated_at` is that
/// `now()`): Citus refuses a function that is not immutable in `do update`,
/// and evaluates the ones in `values` on the coordinator before routing.
pub async fn acquire(
    ex: impl PgExecutor<'_>,
    authority: &str,
    holder: &str,
    ttl: Duration,
) -> Result<Option<Granted>, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        insert into authorities as a (id, generation, lease_holder, lease_expires_at, updated_at)
        values ($1, 1, $2, now() + make_interval(secs => $3), now())
        on conflict (id) do update
        set generation = case when a.lease_holder = $2 and a.lease_expires_at > excluded.updated_at
                              then a.generation else a.generation + 1 end,
            lease_holder = $2,
            lease_expires_at = excluded.lease_expires_at
        where a.lease_holder is null or a.lease_holder = $2
           or a.lease_expires_at <= excluded.updated_at
        returning generation, lease_expires_at as "lease_expires_at!"
        "#,
        authority,
        holder,
        ttl.as_secs_f64(),
    )
    .fetch_optional(ex)
    .await?;
    Ok(row.map(|r| Granted {
        generation: r.generation,
        expires_at: r.lease_expires_at,
    }))
}

/// Extends a live lease held at `generation`. `None`: the lease is lost
/// (lapsed, or taken by someone else) and the holder must stop at once.
pub async fn renew(
    ex: impl PgExecutor<'_>,
    authority: &str,
    holder: &str,
    generation: i64,
    ttl: Duration,
) -> Result<Option<Granted>, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        update authorities
        set lease_expires_at = now() + make_interval(secs => $4)
        where id = $1 and lease_holder = $2 and generation = $3 and lease_expires_at > now()
        returning generation, lease_expires_at as "lease_expires_at!"
        "#,
        authority,
        holder,
        generation,
        ttl.as_secs_f64(),
    )
    .fetch_optional(ex)
    .await?;
    Ok(row.map(|r| Granted {
        generation: r.generation,
        expires_at: r.lease_expires_at,
    }))
}

/// Gives the lease up (graceful shutdown); the next holder moves the generation on.
pub async fn release(
    ex: impl PgExecutor<'_>,
    authority: &str,
    holder: &str,
    generation: i64,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!(
        r#"
        update authorities set lease_holder = null, lease_expires_at = null
        where id = $1 and lease_holder = $2 and generation = $3
        "#,
        authority,
        holder,
        generation,
    )
    .execute(ex)
    .await?;
    Ok(done.rows_affected() == 1)
}

pub async fn get(
    ex: impl PgExecutor<'_>,
    authority: &str,
) -> Result<Option<AuthorityRow>, sqlx::Error> {
    sqlx::query_as!(
        AuthorityRow,
        "select * from authorities where id = $1",
        authority
    )
    .fetch_optional(ex)
    .await
}

/// Every authority, by id: holder, generation, lease expiry.
pub async fn list(ex: impl PgExecutor<'_>) -> Result<Vec<AuthorityRow>, sqlx::Error> {
    sqlx::query_as!(AuthorityRow, "select * from authorities order by id")
        .fetch_all(ex)
        .await
}

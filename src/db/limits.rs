//! Limits per provider (migration 0048; `domain::limits`): the catalog's
//! groups written for every custodian to draw from, when the claim will
//! find room again, and what waits on each limit.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor, PgPool};
use uuid::Uuid;

use super::commands::CommandRow;
use crate::domain::limits::ProviderLimit;
use crate::domain::state::CommandState;

/// Writes `limits` as the database's provider groups (the engine step
/// `ledger_set_providers`): groups not in `limits` go, queued commands of a
/// kind whose group changed follow it. Returns how many queued commands
/// moved. On Citus the queued commands follow at each authority's shards
/// ([`regroup_authority`]).
pub async fn write(ex: impl PgExecutor<'_>, limits: &[ProviderLimit]) -> Result<i64, sqlx::Error> {
    let groups: Vec<Value> = limits.iter().map(ProviderLimit::to_json).collect();
    let moved = sqlx::query_scalar!(
        r#"select ledger_set_providers($1::jsonb) as "moved!""#,
        Value::Array(groups),
    )
    .fetch_one(ex)
    .await?;
    Ok(moved)
}

/// Which group each kind of `limits` belongs to: `{"<kind>": "<group>"}`.
fn kinds_of(limits: &[ProviderLimit]) -> BTreeMap<&str, &str> {
    limits
        .iter()
        .flat_map(|l| l.kinds.iter().map(|k| (k.as_str(), l.name.as_str())))
        .collect()
}

/// On Citus: writes `limits`'s groups as the kinds' groups at `authority`,
/// on its shards (the engine step `ledger_regroup_authority`, migration
/// 0049), which a new command's queue row takes there; the authority's
/// queued commands of a kind whose group changed follow it. Returns how
/// many moved.
pub async fn regroup_authority(
    ex: impl PgExecutor<'_>,
    authority: &str,
    limits: &[ProviderLimit],
) -> Result<i64, sqlx::Error> {
    let kinds = serde_json::to_value(kinds_of(limits)).expect("a map of strings");
    // A Citus step: no database of one node has it to check against.
    sqlx::query_scalar::<_, i64>("select ledger_regroup_authority($1, $2::jsonb)")
        .bind(authority)
        .bind(kinds)
        .fetch_one(ex)
        .await
}

/// On Citus: claims and starts up to `limit` of `authority`'s commands of
/// the groups of `limits`, within their room, in the caller's transaction
/// on the coordinator (migration 0049): the groups locked and their room
/// read there (`ledger_provider_rooms`), the claim on the worker holding
/// the authority's shards with that room (`ledger_claim_start_authority`'s
/// `p_rooms`), a place held and a token spent for each command started
/// (`ledger_provider_hold`). The locks hold until the transaction ends.
pub async fn claim_start_limited(
    conn: &mut PgConnection,
    authority: &str,
    holder: &str,
    limit: i64,
    limits: &[ProviderLimit],
) -> Result<Vec<CommandRow>, sqlx::Error> {
    let names: Vec<&str> = limits.iter().map(|l| l.name.as_str()).collect();
    // Citus steps: no database of one node has them to check against.
    let rooms: Value = sqlx::query_scalar("select ledger_provider_rooms($1)")
        .bind(&names)
        .fetch_one(&mut *conn)
        .await?;
    if !rooms
        .as_object()
        .is_some_and(|r| r.values().any(|n| n.as_i64().unwrap_or(0) > 0))
    {
        return Ok(Vec::new());
    }
    let rows: Vec<CommandRow> = sqlx::query_scalar(
        "select ledger_claim_start_authority($1, $2, $3::bigint::integer, $4::jsonb)",
    )
    .bind(authority)
    .bind(holder)
    .bind(limit)
    .bind(&rooms)
    .fetch_all(&mut *conn)
    .await?;
    let kinds = kinds_of(limits);
    let places: Vec<Place> = rows
        .iter()
        .filter(|r| r.state() == CommandState::EffectStarted)
        .filter_map(|r| {
            Some(Place {
                provider: (*kinds.get(r.kind.as_str())?).to_owned(),
                authority: r.authority_id.clone(),
                id: r.id,
            })
        })
        .collect();
    hold(&mut *conn, &places).await?;
    Ok(rows)
}

/// A command of a provider group in flight, holding a place of its group
/// (on Citus, `provider_places`, migration 0049).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct Place {
    provider: String,
    authority: String,
    id: Uuid,
}

/// Holds `places`, each taking a token of its group (`ledger_provider_hold`).
async fn hold(ex: impl PgExecutor<'_>, places: &[Place]) -> Result<(), sqlx::Error> {
    if places.is_empty() {
        return Ok(());
    }
    sqlx::query("select ledger_provider_hold($1::jsonb)")
        .bind(serde_json::to_value(places).expect("places serialize"))
        .execute(ex)
        .await?;
    Ok(())
}

/// On Citus: frees the places of `authority`'s commands `ids`, whose
/// outcomes are recorded (`ledger_provider_release`). Returns how many.
pub async fn release(
    ex: impl PgExecutor<'_>,
    authority: &str,
    ids: &[Uuid],
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("select ledger_provider_release($1, $2)")
        .bind(authority)
        .bind(ids)
        .fetch_one(ex)
        .await
}

/// How long a place is left alone by [`reconcile`]: longer than a claim's
/// transaction takes to commit on every node it wrote.
pub const PLACE_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// On Citus: the places of `authorities`' commands set right (a place is
/// freed when its outcome is recorded, in a transaction of its own after
/// the outcome's, so a crash between them leaves it held; and the claim's
/// worker commits before the coordinator, so a crash between them leaves a
/// started command without one). Frees the places held over
/// [`PLACE_GRACE`] by commands no longer in flight, and holds one for each
/// command of a group in flight without one. Returns (freed, held).
pub async fn reconcile(pool: &PgPool, authorities: &[String]) -> Result<(i64, i64), sqlx::Error> {
    let places = sqlx::query!(
        r#"
        select p.authority_id, p.command_id, p.held_at < now() - make_interval(secs => $2) as "old!"
        from provider_places p
        where p.authority_id = any($1)
        "#,
        authorities,
        PLACE_GRACE.as_secs_f64(),
    )
    .fetch_all(pool)
    .await?;
    let in_flight = sqlx::query!(
        r#"
        select f.authority_id, f.id, k.provider
        from command_in_flight f
        join commands c on c.authority_id = f.authority_id and c.id = f.id
        join authority_provider_kinds k on k.authority_id = c.authority_id and k.kind = c.kind
        where f.authority_id = any($1)
        "#,
        authorities,
    )
    .fetch_all(pool)
    .await?;
    let flying: HashSet<(&str, Uuid)> = in_flight
        .iter()
        .map(|f| (f.authority_id.as_str(), f.id))
        .collect();
    let placed: HashSet<(&str, Uuid)> = places
        .iter()
        .map(|p| (p.authority_id.as_str(), p.command_id))
        .collect();
    let mut gone: BTreeMap<&str, Vec<Uuid>> = BTreeMap::new();
    for p in places
        .iter()
        .filter(|p| p.old && !flying.contains(&(p.authority_id.as_str(), p.command_id)))
    {
        gone.entry(p.authority_id.as_str())
            .or_default()
            .push(p.command_id);
    }
    let mut freed = 0;
    for (authority, ids) in gone {
        freed += release(pool, authority, &ids).await?;
    }
    let missing: Vec<Place> = in_flight
        .iter()
        .filter(|f| !placed.contains(&(f.authority_id.as_str(), f.id)))
        .map(|f| Place {
            provider: f.provider.clone(),
            authority: f.authority_id.clone(),
            id: f.id,
        })
        .collect();
    hold(pool, &missing).await?;
    Ok((freed, missing.len() as i64))
}

/// How long a claim that passed over a group held at its in-flight limit
/// waits before it asks again: a place frees when any custodian records
/// an outcome, and nothing announces it.
pub const IN_FLIGHT_RECHECK: std::time::Duration = std::time::Duration::from_millis(20);

/// When a group whose commands wait, ready, at `authorities` may have room
/// again (`None`: none waits on a limit): when its bucket next holds a
/// token, or shortly when it is at its in-flight limit.
pub async fn next_room(
    pool: &PgPool,
    authorities: &[String],
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    // A question for each group, then one of the groups' rows: Citus
    // joins no table of the coordinator's own (provider_limits) with a
    // distributed one (command_queue) in one statement.
    let names = sqlx::query_scalar!("select name from provider_limits order by name")
        .fetch_all(pool)
        .await?;
    let mut waiting = Vec::new();
    for name in names {
        let waits = sqlx::query_scalar!(
            r#"
            select exists (select 1 from command_queue q
                           where q.authority_id = any($1) and q.provider = $2
                             and (q.ready_at is null or q.ready_at <= now())) as "waits!"
            "#,
            authorities,
            name,
        )
        .fetch_one(pool)
        .await?;
        if waits {
            waiting.push(name);
        }
    }
    if waiting.is_empty() {
        return Ok(None);
    }
    sqlx::query_scalar!(
        r#"
        select min(case when b.tokens < 1
                        then clock_timestamp() + make_interval(secs => (1 - b.tokens) / p.rate)
                        else clock_timestamp() + make_interval(secs => $2::float8)
                   end) as "at"
        from provider_limits p
        cross join lateral (select ledger_provider_tokens(p.tokens, p.rate, p.burst, p.refilled_at, clock_timestamp()) as tokens) b
        where p.name = any($1)
        "#,
        &waiting,
        IN_FLIGHT_RECHECK.as_secs_f64(),
    )
    .fetch_one(pool)
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

/// Every provider group, by name. Nothing more is read when there is none.
pub async fn status(conn: &mut PgConnection) -> Result<Vec<ProviderStatus>, sqlx::Error> {
    let any = sqlx::query_scalar!(r#"select exists (select 1 from provider_limits) as "any!""#)
        .fetch_one(&mut *conn)
        .await?;
    if !any {
        return Ok(Vec::new());
    }
    // The waiting counted apart: Citus joins no table of the coordinator's
    // own (provider_limits) with a distributed one (command_queue).
    let waiting = sqlx::query!(
        r#"
        select q.provider as "provider!", count(*) as "waiting!"
        from command_queue q
        where q.provider is not null and (q.ready_at is null or q.ready_at <= now())
        group by q.provider
        "#
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut groups = sqlx::query_as!(
        ProviderStatus,
        r#"
        select p.name, p.max_in_flight, p.rate, p.burst,
               ledger_provider_tokens(p.tokens, p.rate, p.burst, p.refilled_at, clock_timestamp()) as "tokens",
               ledger_provider_in_flight(p.name) as "in_flight!",
               0::bigint as "waiting!"
        from provider_limits p
        order by p.name
        "#
    )
    .fetch_all(&mut *conn)
    .await?;
    for group in &mut groups {
        group.waiting = waiting
            .iter()
            .find(|w| w.provider == group.name)
            .map_or(0, |w| w.waiting);
    }
    Ok(groups)
}

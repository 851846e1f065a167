//! Cluster-wide counters (`ledger_counts`, migration 0017): per-minute rows
//! added to by one writer each (an API process's flush, or the history
//! trigger of one database backend), summed on read. On Citus the shards
//! count executions and outcomes beside their commands
//! (`ledger_counts_by_authority`, migration 0022; empty on one node), and
//! every read sums both tables.

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use std::collections::BTreeMap;

/// Adds `deltas` (counter, how many) to `source`'s rows of the current minute.
pub async fn add(
    ex: impl PgExecutor<'_>,
    source: &str,
    deltas: &[(&str, i64)],
) -> Result<(), sqlx::Error> {
    let (counters, ns): (Vec<String>, Vec<i64>) = deltas
        .iter()
        .filter(|(_, n)| *n != 0)
        .map(|(c, n)| ((*c).to_owned(), *n))
        .unzip();
    if counters.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        r#"
        insert into ledger_counts (minute, counter, source, n)
        select date_trunc('minute', now()), d.counter, $1, d.n
        from unnest($2::text[], $3::int8[]) as d (counter, n)
        on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n
        "#,
        source,
        &counters,
        &ns,
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// Every counter's total since counting began.
pub async fn totals(ex: impl PgExecutor<'_>) -> Result<BTreeMap<String, i64>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select counter as "counter!", sum(n)::int8 as "n!"
        from (select counter, n from ledger_counts
              union all
              select counter, n from ledger_counts_by_authority) c
        group by counter
        "#
    )
    .fetch_all(ex)
    .await?;
    Ok(rows.into_iter().map(|r| (r.counter, r.n)).collect())
}

/// One minute of one counter, summed over its sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MinuteCount {
    pub minute: DateTime<Utc>,
    pub counter: String,
    pub n: i64,
}

/// The counts of the last `minutes` minutes (the current one included), by
/// minute and counter; minutes with nothing counted are absent.
pub async fn recent(
    ex: impl PgExecutor<'_>,
    minutes: i32,
) -> Result<Vec<MinuteCount>, sqlx::Error> {
    sqlx::query_as!(
        MinuteCount,
        r#"
        select minute as "minute!", counter as "counter!", sum(n)::int8 as "n!"
        from (select minute, counter, n from ledger_counts
              union all
              select minute, counter, n from ledger_counts_by_authority) c
        where minute >= date_trunc('minute', now()) - make_interval(mins => $1 - 1)
        group by minute, counter
        order by minute, counter
        "#,
        minutes,
    )
    .fetch_all(ex)
    .await
}

/// Folds finished minutes' rows together (one process at a time: the others
/// skip). Returns how many rows were written, or `None` when another process
/// was compacting.
pub async fn compact(pool: &PgPool) -> Result<Option<i64>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let locked = sqlx::query_scalar!(
        r#"select pg_try_advisory_xact_lock(hashtext('command_ledger.ledger_counts_compact')) as "locked!""#
    )
    .fetch_one(&mut *tx)
    .await?;
    if !locked {
        return Ok(None);
    }
    let folded = sqlx::query_scalar!(r#"select ledger_counts_compact() as "folded!""#)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Some(folded))
}

/// Pending commands per authority (the claim queue) and the age of the
/// oldest, in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Backlog {
    pub authority_id: String,
    pub pending: i64,
    pub oldest_seconds: f64,
}

/// The backlog of every authority with pending commands (read through the
/// queue, small by construction).
pub async fn backlog(ex: impl PgExecutor<'_>) -> Result<Vec<Backlog>, sqlx::Error> {
    sqlx::query_as!(
        Backlog,
        r#"
        select q.authority_id as "authority_id!", count(*)::int8 as "pending!",
               coalesce(extract(epoch from now() - min(c.created_at))::float8, 0) as "oldest_seconds!"
        from command_queue q join commands c on c.authority_id = q.authority_id and c.id = q.id
        group by q.authority_id
        order by q.authority_id
        "#
    )
    .fetch_all(ex)
    .await
}

/// What the events endpoint shows, read in one snapshot (REPEATABLE READ,
/// read only) so that the minutes, the totals and the backlog agree: read
/// one after another, an outcome committed between two reads was in the
/// totals and missing from its minute.
#[derive(Debug)]
pub struct Snapshot {
    pub recent: Vec<MinuteCount>,
    pub totals: BTreeMap<String, i64>,
    pub backlog: Vec<Backlog>,
    pub authorities: Vec<super::authorities::AuthorityRow>,
    /// Each provider group's limits and what waits on them.
    pub providers: Vec<super::limits::ProviderStatus>,
}

/// [`Snapshot`] of the last `minutes` minutes.
pub async fn snapshot(pool: &PgPool, minutes: i32) -> Result<Snapshot, sqlx::Error> {
    let mut tx = pool
        .begin_with("begin isolation level repeatable read, read only")
        .await?;
    let recent = recent(&mut *tx, minutes).await?;
    let totals = totals(&mut *tx).await?;
    let backlog = backlog(&mut *tx).await?;
    let authorities = super::authorities::list(&mut *tx).await?;
    let providers = super::limits::status(&mut tx).await?;
    tx.commit().await?;
    Ok(Snapshot {
        recent,
        totals,
        backlog,
        authorities,
        providers,
    })
}

//! Resolutions of ambiguous commands (`command_resolutions`, migration
//! 0018): what an operator or the reconcile probe later learned about an
//! effect, recorded beside the terminal `ambiguous` row, append-only.

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use super::{CommandRow, txn};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolutionRow {
    pub command_id: Uuid,
    /// The command's authority (where the resolution is kept on Citus).
    pub authority_id: String,
    /// `applied` or `not_applied`.
    pub outcome: String,
    pub evidence: String,
    pub reference: Option<String>,
    /// `operator` or `probe`.
    pub source: String,
    pub actor: String,
    pub at: DateTime<Utc>,
    pub anchor_hash: Vec<u8>,
    pub hash: Vec<u8>,
}

/// A resolution to append.
#[derive(Debug, Clone)]
pub struct NewResolution<'a> {
    pub command_id: Uuid,
    /// The command's authority: the database checks the command is of it.
    pub authority_id: &'a str,
    pub outcome: &'a str,
    pub evidence: &'a str,
    pub reference: Option<&'a str>,
    pub source: &'a str,
    pub actor: &'a str,
}

/// Why a resolution was not appended.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("the command is not ambiguous")]
    NotAmbiguous,
    #[error("the command has a resolution already")]
    AlreadyResolved,
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Appends a resolution in a transaction of its own, acting as its actor;
/// the database checks the command is ambiguous and stamps the time and
/// hashes.
pub async fn append(
    pool: &PgPool,
    backend: super::Backend,
    r: &NewResolution<'_>,
) -> Result<ResolutionRow, ResolveError> {
    let mut tx = txn::begin_as(pool, backend, txn::Isolation::ReadCommitted, r.actor).await?;
    let row = insert(&mut *tx, r).await?;
    tx.commit().await?;
    Ok(row)
}

async fn insert(
    ex: impl PgExecutor<'_>,
    r: &NewResolution<'_>,
) -> Result<ResolutionRow, ResolveError> {
    sqlx::query_as!(
        ResolutionRow,
        r#"
        insert into command_resolutions (command_id, authority_id, outcome, evidence, reference, source,
                                         actor, anchor_hash, hash)
        values ($1, $2, $3, $4, $5, $6, $7, '', '')
        returning command_id, authority_id, outcome, evidence, reference, source, actor, at, anchor_hash, hash
        "#,
        r.command_id,
        r.authority_id,
        r.outcome,
        r.evidence,
        r.reference,
        r.source,
        r.actor,
    )
    .fetch_one(ex)
    .await
    .map_err(|e| match &e {
        sqlx::Error::Database(d) if d.code().as_deref() == Some("CL012") => {
            ResolveError::NotAmbiguous
        }
        sqlx::Error::Database(d) if d.is_unique_violation() => ResolveError::AlreadyResolved,
        _ => ResolveError::Db(e),
    })
}

/// The resolution of a command of `authority_id`, if one was recorded.
pub async fn get(
    ex: impl PgExecutor<'_>,
    authority_id: &str,
    command_id: Uuid,
) -> Result<Option<ResolutionRow>, sqlx::Error> {
    sqlx::query_as!(
        ResolutionRow,
        r#"
        select command_id, authority_id, outcome, evidence, reference, source, actor, at, anchor_hash, hash
        from command_resolutions where authority_id = $1 and command_id = $2
        "#,
        authority_id,
        command_id,
    )
    .fetch_optional(ex)
    .await
}

/// Ambiguous commands of `authority` with no resolution yet, oldest first,
/// at most `limit` (found through the history's ambiguous index).
pub async fn unresolved(
    ex: impl PgExecutor<'_>,
    authority: &str,
    limit: i64,
) -> Result<Vec<CommandRow>, sqlx::Error> {
    sqlx::query_as!(
        CommandRow,
        r#"
        select c.* from commands c
        where c.id in (select command_id from command_history
                       where to_state = 'ambiguous' and authority_id = $1)
          and c.state = 'ambiguous' and c.authority_id = $1
          and not exists (select 1 from command_resolutions r
                          where r.authority_id = $1 and r.command_id = c.id)
        order by c.id
        limit $2
        "#,
        authority,
        limit,
    )
    .fetch_all(ex)
    .await
}

/// When command `id` of `authority` was recorded `effect_started` (its
/// latest such entry; `None`: never), and the database's clock now: what
/// decides whether its effect may still take hold.
pub async fn effect_started_at(
    ex: impl PgExecutor<'_>,
    authority: &str,
    id: Uuid,
) -> Result<(Option<DateTime<Utc>>, DateTime<Utc>), sqlx::Error> {
    let row = sqlx::query!(
        r#"
        select max(h.at) as "started_at?", now() as "now!"
        from command_history h
        where h.authority_id = $1 and h.command_id = $2 and h.to_state = 'effect_started'
        "#,
        authority,
        id,
    )
    .fetch_one(ex)
    .await?;
    Ok((row.started_at, row.now))
}

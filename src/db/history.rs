//! A command's history as readers list it: a transition a row.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

/// One transition of a command's history.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryRow {
    pub id: i64,
    pub from_state: Option<String>,
    pub to_state: String,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub authority_generation: Option<i64>,
    pub reason: Option<String>,
}

/// The history of a command, oldest first, a transition a row: an entry
/// that names the state it passed through (the claim's, 0045) is listed
/// as its two transitions, with the entry's id, time, actor and reason.
pub async fn history(ex: impl PgExecutor<'_>, id: Uuid) -> Result<Vec<HistoryRow>, sqlx::Error> {
    let entries = sqlx::query!(
        r#"
        select id, from_state, through, to_state, at, actor, authority_generation, reason
        from command_history
        where command_id = $1
        order by seq
        "#,
        id,
    )
    .fetch_all(ex)
    .await?;
    let mut rows = Vec::with_capacity(entries.len() + 1);
    for e in entries {
        let row = |from_state, to_state| HistoryRow {
            id: e.id,
            from_state,
            to_state,
            at: e.at,
            actor: e.actor.clone(),
            authority_generation: e.authority_generation,
            reason: e.reason.clone(),
        };
        match e.through {
            Some(through) => {
                rows.push(row(e.from_state, through.clone()));
                rows.push(row(Some(through), e.to_state));
            }
            None => rows.push(row(e.from_state, e.to_state)),
        }
    }
    Ok(rows)
}

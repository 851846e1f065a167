//! Attempt chains (migration 0046): a failure with nothing done that its
//! kind's retry policy retries is followed by a next attempt, a command of
//! its own naming the chain's first in `retry_of`. What answers a key, a
//! wait or an invocation follows a chain to its last attempt.

use sqlx::PgExecutor;

use super::CommandRow;
use crate::domain::CommandState;

/// The last attempt of `row`'s chain after `row`, as far as the chain has
/// gone: `Some` when `row` failed with nothing done and the record step
/// scheduled another (`domain::retry`), `None` otherwise. One probe of
/// `commands_attempts`, only for a failed row.
pub async fn later_attempt(
    ex: impl PgExecutor<'_>,
    row: &CommandRow,
) -> Result<Option<CommandRow>, sqlx::Error> {
    if row.state() != CommandState::Failed {
        return Ok(None);
    }
    sqlx::query_as!(
        CommandRow,
        r#"
        select * from commands
        where authority_id = $1 and retry_of = $2 and attempt > $3
        order by attempt desc
        limit 1
        "#,
        row.authority_id,
        row.first_attempt(),
        row.attempt,
    )
    .fetch_optional(ex)
    .await
}

//! The read-only inspection role: sees commands, history, holds, coalesced requests, the
//! archive of pruned commands, authorities, principals and the views, never a token hash, and cannot
//! write. `command-ledger inspector-role --name NAME` creates (or refreshes)
//! it; run it again after an upgrade that adds tables.

use sqlx::{AssertSqlSafe, PgConnection};

/// Tables and views the inspector may read whole.
const READABLE: &[&str] = &[
    "commands",
    "command_history",
    "command_states",
    "command_transitions",
    "holds",
    "coalesced_requests",
    "pruned_commands",
    "authorities",
    "principals",
    "fleets",
    "command_counts_by_state",
    "command_oldest_in_flight",
    "holds_awaiting_decision",
];

/// Columns of `api_tokens` it may read: everything but the hash.
const TOKEN_COLUMNS: &str = "id, principal_id, prefix, created_at, expires_at, revoked_at";

fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// Creates `role` if it does not exist (able to log in with `password` when
/// one is given), and grants it read access to the ledger and nothing else.
pub async fn grant(
    conn: &mut PgConnection,
    role: &str,
    password: Option<&str>,
) -> Result<(), sqlx::Error> {
    let exists: bool =
        sqlx::query_scalar("select exists (select 1 from pg_roles where rolname = $1)")
            .bind(role)
            .fetch_one(&mut *conn)
            .await?;
    let r = ident(role);
    let login = match password {
        Some(p) => format!("login password {}", literal(p)),
        None => "nologin".to_owned(),
    };
    let mut sql = if exists {
        format!("alter role {r} {login};")
    } else {
        format!("create role {r} {login};")
    };
    sql.push_str(&format!("grant usage on schema public to {r};"));
    for object in READABLE {
        sql.push_str(&format!("grant select on {object} to {r};"));
    }
    sql.push_str(&format!("revoke all on api_tokens from {r};"));
    sql.push_str(&format!(
        "grant select ({TOKEN_COLUMNS}) on api_tokens to {r};"
    ));
    sqlx::raw_sql(AssertSqlSafe(sql)).execute(conn).await?;
    Ok(())
}

//! Inspectors: roles that read the ledger with SQL (commands, history, holds,
//! coalesced requests, the archive, authorities, principals, fleets and the
//! views, never a token hash) and write nothing. What they may read is granted
//! once, to `ledger_inspector`, by the migrations (0016, and every migration
//! that adds a table); `command-ledger inspector-role --name NAME` makes NAME
//! one more login of it, or lets `ledger_inspector` itself log in.

use sqlx::{AssertSqlSafe, PgConnection};

use super::roles::{ServiceRole, ident, literal};

/// Creates `role` if it does not exist (able to log in with `password` when
/// one is given) and makes it a member of `ledger_inspector`, whose grants it
/// inherits: it reads the ledger and writes nothing.
pub async fn grant(
    conn: &mut PgConnection,
    role: &str,
    password: Option<&str>,
) -> Result<(), sqlx::Error> {
    let inspector = ServiceRole::Inspector.name();
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
    if role != inspector {
        sql.push_str(&format!("grant {} to {r};", ident(inspector)));
    }
    sqlx::raw_sql(AssertSqlSafe(sql)).execute(conn).await?;
    Ok(())
}

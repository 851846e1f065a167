//! Principals and their bearer tokens. Only SHA-256 hashes of tokens are
//! stored; a token is shown once, when it is created.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use std::fmt;
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Submits commands; sees and cancels only its own.
    Device,
    /// Sees and cancels every command.
    Operator,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Device => "device",
            Role::Operator => "operator",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "device" => Some(Role::Device),
            "operator" => Some(Role::Operator),
            _ => None,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub id: Uuid,
    pub name: String,
    pub role: Role,
}

impl Principal {
    /// The scope a listing or lookup is restricted to: a device sees its own
    /// commands, an operator every command.
    pub fn visible_scope(&self) -> Option<Uuid> {
        match self.role {
            Role::Device => Some(self.id),
            Role::Operator => None,
        }
    }

    /// How this principal is named in history rows.
    pub fn actor(&self) -> String {
        format!("{}:{}", self.role, self.name)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PrincipalError {
    #[error("principal {name} already exists with role {existing}")]
    RoleMismatch { name: String, existing: String },
    #[error(transparent)]
    Sqlx(#[from] sqlx::Error),
}

/// The principal named `name`, created with `role` if it does not exist.
pub async fn ensure_principal(
    ex: impl PgExecutor<'_>,
    name: &str,
    role: Role,
) -> Result<Uuid, PrincipalError> {
    let row = sqlx::query!(
        r#"
        insert into principals (id, name, role) values ($1, $2, $3)
        on conflict (name) do update set name = excluded.name
        returning id, role
        "#,
        Uuid::now_v7(),
        name,
        role.as_str(),
    )
    .fetch_one(ex)
    .await?;
    if row.role != role.as_str() {
        return Err(PrincipalError::RoleMismatch {
            name: name.to_owned(),
            existing: row.role,
        });
    }
    Ok(row.id)
}

pub async fn insert_token(
    ex: impl PgExecutor<'_>,
    principal_id: Uuid,
    token_hash: &[u8],
    prefix: &str,
    expires_at: Option<DateTime<Utc>>,
) -> Result<Uuid, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        insert into api_tokens (id, principal_id, token_hash, prefix, expires_at)
        values ($1, $2, $3, $4, $5)
        returning id
        "#,
        Uuid::now_v7(),
        principal_id,
        token_hash,
        prefix,
        expires_at,
    )
    .fetch_one(ex)
    .await
}

/// Creates `name` (with `role`) unless it exists, and gives it a token,
/// in one transaction.
pub async fn issue_token(
    pool: &sqlx::PgPool,
    name: &str,
    role: Role,
    token_hash: &[u8],
    prefix: &str,
    expires_at: Option<DateTime<Utc>>,
) -> Result<Uuid, PrincipalError> {
    let mut tx = pool.begin().await?;
    let id = ensure_principal(&mut *tx, name, role).await?;
    insert_token(&mut *tx, id, token_hash, prefix, expires_at).await?;
    tx.commit().await?;
    Ok(id)
}

/// The principal a live (unrevoked, unexpired) token hash belongs to.
pub async fn authenticate(
    ex: impl PgExecutor<'_>,
    token_hash: &[u8],
) -> Result<Option<Principal>, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        select p.id, p.name, p.role
        from api_tokens t
        join principals p on p.id = t.principal_id
        where t.token_hash = $1
          and t.revoked_at is null
          and (t.expires_at is null or t.expires_at > now())
        "#,
        token_hash,
    )
    .fetch_optional(ex)
    .await?;
    Ok(row.and_then(|r| {
        Some(Principal {
            id: r.id,
            name: r.name,
            role: Role::parse(&r.role)?,
        })
    }))
}

/// Revokes every live token of a principal, or the tokens starting with
/// `prefix`. Returns how many were revoked.
pub async fn revoke(
    ex: impl PgExecutor<'_>,
    principal: Option<&str>,
    prefix: Option<&str>,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query!(
        r#"
        update api_tokens t set revoked_at = now()
        from principals p
        where p.id = t.principal_id
          and t.revoked_at is null
          and ($1::text is null or p.name = $1)
          and ($2::text is null or t.prefix = $2)
        "#,
        principal,
        prefix,
    )
    .execute(ex)
    .await?;
    Ok(done.rows_affected())
}

/// A token as listed: never the token, only its prefix.
#[derive(Debug, Clone)]
pub struct TokenRow {
    pub prefix: String,
    pub principal: String,
    pub role: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

pub async fn list_tokens(ex: impl PgExecutor<'_>) -> Result<Vec<TokenRow>, sqlx::Error> {
    sqlx::query_as!(
        TokenRow,
        r#"
        select t.prefix, p.name as principal, p.role, t.created_at, t.expires_at, t.revoked_at
        from api_tokens t
        join principals p on p.id = t.principal_id
        order by t.created_at
        "#
    )
    .fetch_all(ex)
    .await
}

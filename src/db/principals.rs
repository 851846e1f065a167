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
    /// The fleet it belongs to: the dedup space of fleet-scoped kinds. A
    /// principal alone in its fleet has `fleet_id == id`.
    pub fleet_id: Uuid,
}

impl Principal {
    /// The scopes a listing or lookup is restricted to: a device sees the
    /// commands of its own scope and of its fleet's, an operator every command.
    pub fn visible_scope(&self) -> Option<Vec<Uuid>> {
        match self.role {
            Role::Device if self.fleet_id == self.id => Some(vec![self.id]),
            Role::Device => Some(vec![self.id, self.fleet_id]),
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
    #[error(
        "principal {name} already belongs to fleet {existing}; a principal never changes fleet"
    )]
    FleetMismatch { name: String, existing: String },
    #[error(
        "fleet {0} is the fleet of principal {0} alone (its id is that principal's scope); create a new fleet name instead"
    )]
    PrivateFleet(String),
    #[error(
        "a fleet named {0} exists; pass --fleet {0} to join it, or choose another principal name"
    )]
    FleetNameTaken(String),
    #[error(transparent)]
    Sqlx(#[from] sqlx::Error),
}

/// The principal named `name`, created with `role` if it does not exist.
/// A new principal joins the fleet named `fleet` (created if new), or,
/// without one, forms a fleet of its own, named after it, whose id is its
/// own (the two scopes coincide). A fleet of one principal's own takes no
/// other member: its id is that principal's scope. An existing principal
/// keeps its fleet, and naming another one is an error.
pub async fn ensure_principal(
    conn: &mut sqlx::PgConnection,
    name: &str,
    role: Role,
    fleet: Option<&str>,
) -> Result<Uuid, PrincipalError> {
    let existing = sqlx::query!(
        r#"
        select p.id, p.role, f.name as fleet
        from principals p join fleets f on f.id = p.fleet_id
        where p.name = $1
        "#,
        name,
    )
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(p) = existing {
        if p.role != role.as_str() {
            return Err(PrincipalError::RoleMismatch {
                name: name.to_owned(),
                existing: p.role,
            });
        }
        if fleet.is_some_and(|f| f != p.fleet) {
            return Err(PrincipalError::FleetMismatch {
                name: name.to_owned(),
                existing: p.fleet,
            });
        }
        return Ok(p.id);
    }
    let id = Uuid::now_v7();
    let fleet_id = match fleet {
        Some(fleet) => {
            let fleet_id = sqlx::query_scalar!(
                r#"
                insert into fleets (id, name) values ($1, $2)
                on conflict (name) do update set name = excluded.name
                returning id
                "#,
                Uuid::now_v7(),
                fleet,
            )
            .fetch_one(&mut *conn)
            .await?;
            // A principal's own fleet has its id (a separate statement: on
            // Citus an insert may not carry a subquery).
            let private = sqlx::query_scalar!(
                r#"select exists (select 1 from principals where id = $1) as "private!""#,
                fleet_id,
            )
            .fetch_one(&mut *conn)
            .await?;
            if private {
                return Err(PrincipalError::PrivateFleet(fleet.to_owned()));
            }
            fleet_id
        }
        None => sqlx::query_scalar!(
            r#"
            insert into fleets (id, name) values ($1, $2)
            on conflict (name) do nothing
            returning id
            "#,
            id,
            name,
        )
        .fetch_optional(&mut *conn)
        .await?
        .ok_or_else(|| PrincipalError::FleetNameTaken(name.to_owned()))?,
    };
    sqlx::query!(
        "insert into principals (id, name, role, fleet_id) values ($1, $2, $3, $4)",
        id,
        name,
        role.as_str(),
        fleet_id,
    )
    .execute(&mut *conn)
    .await?;
    Ok(id)
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

/// Creates `name` (with `role`, in `fleet`) unless it exists, and gives
/// it a token, in one transaction.
pub async fn issue_token(
    pool: &sqlx::PgPool,
    name: &str,
    role: Role,
    fleet: Option<&str>,
    token_hash: &[u8],
    prefix: &str,
    expires_at: Option<DateTime<Utc>>,
) -> Result<Uuid, PrincipalError> {
    let mut tx = pool.begin().await?;
    let id = ensure_principal(&mut tx, name, role, fleet).await?;
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
        select p.id, p.name, p.role, p.fleet_id
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
            fleet_id: r.fleet_id,
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
    pub fleet: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

pub async fn list_tokens(ex: impl PgExecutor<'_>) -> Result<Vec<TokenRow>, sqlx::Error> {
    sqlx::query_as!(
        TokenRow,
        r#"
        select t.prefix, p.name as principal, p.role, f.name as fleet,
               t.created_at, t.expires_at, t.revoked_at
        from api_tokens t
        join principals p on p.id = t.principal_id
        join fleets f on f.id = p.fleet_id
        order by t.created_at
        "#
    )
    .fetch_all(ex)
    .await
}

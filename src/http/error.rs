//! One error type for the API, one mapping to status codes, every error sent
//! as `application/problem+json` (RFC 9457) with a stable `type`. Causes of a
//! 500 are logged and never sent to the client.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::domain::args_schema::SchemaMismatch;
use crate::domain::{CanonError, CommandState, KeyError};
use crate::ledger::LedgerError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("authentication required")]
    Unauthorized(&'static str),
    #[error("{0}")]
    Forbidden(&'static str),
    #[error("not found")]
    NotFound,
    #[error("{method} is not allowed here; the Allow header lists the methods that are")]
    MethodNotAllowed { method: String },
    /// A request the HTTP layer could not parse (a header with control
    /// bytes, an unreadable request line); answered before any handler runs.
    #[error(
        "the request could not be parsed as HTTP (a header value with control bytes, or a malformed request line); nothing was read"
    )]
    Malformed,
    #[error("the request's header section is larger than the server accepts")]
    HeadersTooLarge,
    #[error("the request target is longer than the server accepts")]
    UriTooLong,
    #[error("{0}")]
    IdempotencyKey(#[from] KeyError),
    #[error("{0}")]
    InvalidBody(String),
    /// A JSON object names a key twice (`domain::json_keys`).
    #[error("{0}; nothing was recorded")]
    DuplicateKey(crate::domain::json_keys::DuplicateKey),
    #[error("{0}")]
    InvalidArgs(#[from] CanonError),
    #[error("{0}")]
    ArgsMismatch(#[from] SchemaMismatch),
    #[error("{0}")]
    InvalidQuery(String),
    #[error("{0}")]
    InvalidId(String),
    #[error("the request body must be JSON (Content-Type: application/json)")]
    UnsupportedMediaType,
    #[error("the request body is larger than {limit} bytes")]
    BodyTooLarge { limit: usize },
    #[error("the request body did not arrive within {seconds} s")]
    BodyTimeout { seconds: f64 },
    #[error("the idempotency key was already used for a different request")]
    KeyConflict {
        command_id: uuid::Uuid,
        stored_digest: String,
        incoming_digest: String,
        /// JSON pointers into the canonical forms where the two requests differ.
        differences: Vec<String>,
    },
    #[error(
        "the same intent was submitted recently by another run, and this kind refuses near-duplicates"
    )]
    NearDuplicate { command_id: uuid::Uuid },
    #[error("the command is {state} and can no longer be cancelled")]
    CancelTooLate {
        command_id: uuid::Uuid,
        state: CommandState,
    },
    #[error("the hold is {state} already")]
    HoldDecided { hold_id: uuid::Uuid, state: String },
    #[error(
        "command {applied_command_id} applied this intent after the hold was opened: releasing would apply it again; to do so knowingly, release with {{\"confirm_applied\": \"{applied_command_id}\"}}"
    )]
    HoldIntentApplied {
        hold_id: uuid::Uuid,
        applied_command_id: uuid::Uuid,
    },
    #[error(
        "the command is {state}, not ambiguous: only an ambiguous command is probed again or resolved"
    )]
    NotAmbiguous {
        command_id: uuid::Uuid,
        state: CommandState,
    },
    #[error("the command has a recorded resolution already; resolutions are never changed")]
    AlreadyResolved { command_id: uuid::Uuid },
    #[error(
        "this scope has {limit} live webhook endpoints already, the most it may have; disable one first"
    )]
    TooManyWebhooks { limit: usize },
    #[error("too many requests from this principal; retry after the time in Retry-After")]
    RateLimited { retry_after: std::time::Duration },
    #[error("the ledger database is unavailable")]
    Unavailable(#[source] sqlx::Error),
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl From<LedgerError> for ApiError {
    fn from(e: LedgerError) -> Self {
        match e {
            LedgerError::NotFound => ApiError::NotFound,
            LedgerError::Key(e) => ApiError::IdempotencyKey(e),
            LedgerError::InvalidArgs(e) => ApiError::InvalidArgs(e),
            LedgerError::ArgsMismatch(e) => ApiError::ArgsMismatch(e),
            LedgerError::Schedule(e) => ApiError::InvalidBody(e.to_string()),
            LedgerError::KeyConflict {
                command_id,
                stored_digest,
                incoming_digest,
                differences,
            } => ApiError::KeyConflict {
                command_id,
                stored_digest,
                incoming_digest,
                differences,
            },
            LedgerError::NearDuplicate { command_id } => ApiError::NearDuplicate { command_id },
            LedgerError::HoldDecided { hold_id, state } => ApiError::HoldDecided { hold_id, state },
            LedgerError::HoldIntentApplied {
                hold_id,
                applied_command_id,
            } => ApiError::HoldIntentApplied {
                hold_id,
                applied_command_id,
            },
            LedgerError::CancelTooLate { command_id, state } => {
                ApiError::CancelTooLate { command_id, state }
            }
            LedgerError::NotAmbiguous { command_id, state } => {
                ApiError::NotAmbiguous { command_id, state }
            }
            LedgerError::AlreadyResolved { command_id } => ApiError::AlreadyResolved { command_id },
            LedgerError::InvalidResolution(e) => ApiError::InvalidBody(e),
            LedgerError::Db(e) => e.into(),
            LedgerError::Tx(e) => e.into(),
            LedgerError::Internal(e) => ApiError::Internal(e),
        }
    }
}

impl From<crate::db::txn::TxError> for ApiError {
    fn from(e: crate::db::txn::TxError) -> Self {
        use crate::db::txn::TxError;
        match e {
            TxError::Failed(e) => e.into(),
            // Whether it committed is unknown: a 503, and the client's retry
            // (every write behind this is idempotent) finds out.
            TxError::CommitUnknown(e) => ApiError::Unavailable(e),
            TxError::Exhausted => ApiError::Internal(e.into()),
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        if is_unavailable(&e) {
            ApiError::Unavailable(e)
        } else if is_unstorable_text(&e) {
            // The handlers refuse U+0000 before any write; this catches a
            // path that forgot, as the client's error rather than ours.
            ApiError::InvalidBody("the request holds text PostgreSQL cannot store (U+0000)".into())
        } else {
            ApiError::Internal(e.into())
        }
    }
}

/// Errors that mean "the database cannot be reached or cannot serve now":
/// nothing was recorded, and the client should retry. Fail closed.
fn is_unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(d) => d.code().is_some_and(|c| {
            // 08: connection exception; 57P01-57P03: shutdown, crash, cannot connect
            // now; 53: insufficient resources; 55000: database not accepting connections.
            c.starts_with("08") || c.starts_with("57P") || c.starts_with("53") || c == "55000"
            // A distributed backend, when a worker holding the statement's
            // shards went away mid-transaction: a connection failure it
            // reports without a connection-exception code (the fault trial of
            // docs/SCALING.md).
                || (c == "XX000" && d.message().starts_with("failure on connection marked as essential"))
        }),
        _ => false,
    }
}

/// 22P05 (`\u0000` in jsonb) and 22021 (a NUL byte in text): the value, not
/// the database, is at fault.
fn is_unstorable_text(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.code().is_some_and(|c| c == "22P05" || c == "22021"))
}

impl ApiError {
    pub(super) fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Malformed => StatusCode::BAD_REQUEST,
            ApiError::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ApiError::UriTooLong => StatusCode::URI_TOO_LONG,
            ApiError::IdempotencyKey(_)
            | ApiError::InvalidBody(_)
            | ApiError::InvalidArgs(_)
            | ApiError::ArgsMismatch(_)
            | ApiError::DuplicateKey(_)
            | ApiError::InvalidQuery(_)
            | ApiError::InvalidId(_) => StatusCode::BAD_REQUEST,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::KeyConflict { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::NearDuplicate { .. }
            | ApiError::CancelTooLate { .. }
            | ApiError::HoldDecided { .. }
            | ApiError::HoldIntentApplied { .. }
            | ApiError::NotAmbiguous { .. }
            | ApiError::AlreadyResolved { .. }
            | ApiError::TooManyWebhooks { .. } => StatusCode::CONFLICT,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable problem type, relative to the API's base URL.
    fn problem_type(&self) -> &'static str {
        match self {
            ApiError::Unauthorized(_) => "/problems/unauthorized",
            ApiError::Forbidden(_) => "/problems/forbidden",
            ApiError::NotFound => "/problems/not-found",
            ApiError::MethodNotAllowed { .. } => "/problems/method-not-allowed",
            ApiError::Malformed => "/problems/malformed-request",
            ApiError::HeadersTooLarge => "/problems/headers-too-large",
            ApiError::UriTooLong => "/problems/uri-too-long",
            ApiError::IdempotencyKey(KeyError::Missing) => "/problems/missing-idempotency-key",
            ApiError::IdempotencyKey(_) => "/problems/invalid-idempotency-key",
            ApiError::InvalidBody(_) | ApiError::DuplicateKey(_) => "/problems/invalid-body",
            ApiError::InvalidArgs(_) | ApiError::ArgsMismatch(_) => "/problems/invalid-args",
            ApiError::InvalidQuery(_) => "/problems/invalid-query",
            ApiError::InvalidId(_) => "/problems/invalid-id",
            ApiError::UnsupportedMediaType => "/problems/unsupported-media-type",
            ApiError::BodyTooLarge { .. } => "/problems/body-too-large",
            ApiError::BodyTimeout { .. } => "/problems/body-timeout",
            ApiError::KeyConflict { .. } => "/problems/idempotency-key-conflict",
            ApiError::NearDuplicate { .. } => "/problems/near-duplicate",
            ApiError::CancelTooLate { .. } => "/problems/cancel-too-late",
            ApiError::HoldDecided { .. } => "/problems/hold-decided",
            ApiError::HoldIntentApplied { .. } => "/problems/hold-intent-applied",
            ApiError::NotAmbiguous { .. } => "/problems/not-ambiguous",
            ApiError::AlreadyResolved { .. } => "/problems/already-resolved",
            ApiError::TooManyWebhooks { .. } => "/problems/too-many-webhooks",
            ApiError::RateLimited { .. } => "/problems/rate-limited",
            ApiError::Unavailable(_) => "/problems/unavailable",
            ApiError::Internal(_) => "/problems/internal",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            ApiError::Unauthorized(_) => "Authentication required",
            ApiError::Forbidden(_) => "Forbidden",
            ApiError::NotFound => "Not found",
            ApiError::MethodNotAllowed { .. } => "Method not allowed",
            ApiError::Malformed => "Malformed request",
            ApiError::HeadersTooLarge => "Request header fields too large",
            ApiError::UriTooLong => "Request target too long",
            ApiError::IdempotencyKey(KeyError::Missing) => "Missing idempotency key",
            ApiError::IdempotencyKey(_) => "Invalid idempotency key",
            ApiError::InvalidBody(_) | ApiError::DuplicateKey(_) => "Invalid request body",
            ApiError::InvalidArgs(_) | ApiError::ArgsMismatch(_) => "Invalid arguments",
            ApiError::InvalidQuery(_) => "Invalid query parameters",
            ApiError::InvalidId(_) => "Invalid id",
            ApiError::UnsupportedMediaType => "Unsupported media type",
            ApiError::BodyTooLarge { .. } => "Request body too large",
            ApiError::BodyTimeout { .. } => "Request body too slow",
            ApiError::KeyConflict { .. } => "Idempotency key reused for a different request",
            ApiError::NearDuplicate { .. } => "Near-duplicate refused",
            ApiError::CancelTooLate { .. } => "Too late to cancel",
            ApiError::HoldDecided { .. } => "Hold already decided",
            ApiError::HoldIntentApplied { .. } => "Intent applied since the hold opened",
            ApiError::NotAmbiguous { .. } => "Command is not ambiguous",
            ApiError::AlreadyResolved { .. } => "Command already resolved",
            ApiError::TooManyWebhooks { .. } => "Too many webhook endpoints",
            ApiError::RateLimited { .. } => "Too many requests",
            ApiError::Unavailable(_) => "Service unavailable",
            ApiError::Internal(_) => "Internal error",
        }
    }

    fn extensions(&self) -> Map<String, Value> {
        let mut ext = Map::new();
        let field = |pointer: &str, detail: String| json!({"pointer": pointer, "detail": detail});
        match self {
            // Each failing field of the args: a JSON pointer into `args`
            // (RFC 9457's `errors`), so a caller can fix them all at once.
            ApiError::InvalidArgs(e) => {
                ext.insert("errors".into(), json!([field(e.path(), e.to_string())]));
            }
            ApiError::ArgsMismatch(e) => {
                let errors: Vec<Value> = e
                    .violations
                    .iter()
                    .map(|v| field(&v.pointer, v.message.clone()))
                    .collect();
                ext.insert("errors".into(), Value::Array(errors));
            }
            ApiError::DuplicateKey(d) => {
                let detail = format!("duplicate key {:?}", d.key);
                ext.insert("errors".into(), json!([field(&d.pointer(), detail)]));
            }
            ApiError::KeyConflict {
                command_id,
                stored_digest,
                incoming_digest,
                differences,
            } => {
                ext.insert("command_id".into(), json!(command_id));
                ext.insert("stored_digest".into(), json!(stored_digest));
                ext.insert("incoming_digest".into(), json!(incoming_digest));
                ext.insert("differences".into(), json!(differences));
            }
            ApiError::NearDuplicate { command_id } => {
                ext.insert("command_id".into(), json!(command_id));
            }
            ApiError::CancelTooLate { command_id, state } => {
                ext.insert("command_id".into(), json!(command_id));
                ext.insert("state".into(), json!(state.as_str()));
            }
            ApiError::HoldDecided { hold_id, state } => {
                ext.insert("hold_id".into(), json!(hold_id));
                ext.insert("state".into(), json!(state));
            }
            ApiError::HoldIntentApplied {
                hold_id,
                applied_command_id,
            } => {
                ext.insert("hold_id".into(), json!(hold_id));
                ext.insert("applied_command_id".into(), json!(applied_command_id));
            }
            ApiError::NotAmbiguous { command_id, state } => {
                ext.insert("command_id".into(), json!(command_id));
                ext.insert("state".into(), json!(state.as_str()));
            }
            ApiError::AlreadyResolved { command_id } => {
                ext.insert("command_id".into(), json!(command_id));
            }
            ApiError::TooManyWebhooks { limit } => {
                ext.insert("limit".into(), json!(limit));
            }
            _ => {}
        }
        ext
    }
}

/// The problem document (RFC 9457) every error is sent as, a 405 (with
/// `Allow`) and a request the HTTP layer cannot parse (400) included; the
/// standard members come first, in RFC order.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(super) struct Problem {
    #[serde(rename = "type")]
    problem_type: &'static str,
    title: &'static str,
    status: u16,
    detail: String,
    /// Extension members (`command_id`, `state`, `differences`, ...).
    #[serde(flatten)]
    #[schema(value_type = Object)]
    extensions: Map<String, Value>,
}

impl ApiError {
    /// The problem document for this error (causes of a 500 are logged here).
    pub(super) fn problem(&self) -> Problem {
        let status = self.status();
        let detail = match self {
            ApiError::Unauthorized(why) => (*why).to_owned(),
            ApiError::Unavailable(e) => {
                tracing::warn!(error = %e, "database unavailable");
                "the ledger database cannot be reached; nothing was recorded, retry later"
                    .to_owned()
            }
            ApiError::Internal(e) => {
                tracing::error!(error = ?e, "internal error");
                "an internal error occurred; it has been logged".to_owned()
            }
            other => other.to_string(),
        };
        Problem {
            problem_type: self.problem_type(),
            title: self.title(),
            status: status.as_u16(),
            detail,
            extensions: self.extensions(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), axum::Json(self.problem())).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        match self {
            ApiError::Unauthorized(_) => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::RateLimited { retry_after } => {
                let seconds = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
                let value = HeaderValue::from_str(&seconds.max(1).to_string()).expect("digits");
                headers.insert(header::RETRY_AFTER, value);
            }
            ApiError::Unavailable(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        response
    }
}

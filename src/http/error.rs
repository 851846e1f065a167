//! One error type for the API, one mapping to status codes, every error sent
//! as `application/problem+json` (RFC 9457) with a stable `type`. Causes of a
//! 500 are logged and never sent to the client.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::domain::{KeyError, State};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("authentication required")]
    Unauthorized(&'static str),
    #[error("not found")]
    NotFound,
    #[error("{0}")]
    IdempotencyKey(#[from] KeyError),
    #[error("{0}")]
    InvalidBody(String),
    #[error("{0}")]
    InvalidQuery(String),
    #[error("{0}")]
    InvalidId(String),
    #[error("the request body must be JSON (Content-Type: application/json)")]
    UnsupportedMediaType,
    #[error("the request body is larger than {limit} bytes")]
    BodyTooLarge { limit: usize },
    #[error("the idempotency key was already used for a different request")]
    KeyConflict {
        command_id: uuid::Uuid,
        stored_digest: String,
        incoming_digest: String,
    },
    #[error("the command is {state} and can no longer be cancelled")]
    CancelTooLate {
        command_id: uuid::Uuid,
        state: State,
    },
    #[error("the ledger database is unavailable")]
    Unavailable(#[source] sqlx::Error),
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        match e {
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
                ApiError::Unavailable(e)
            }
            other => ApiError::Internal(other.into()),
        }
    }
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::IdempotencyKey(_)
            | ApiError::InvalidBody(_)
            | ApiError::InvalidQuery(_)
            | ApiError::InvalidId(_) => StatusCode::BAD_REQUEST,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::KeyConflict { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::CancelTooLate { .. } => StatusCode::CONFLICT,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable problem type, relative to the API's base URL.
    fn problem_type(&self) -> &'static str {
        match self {
            ApiError::Unauthorized(_) => "/problems/unauthorized",
            ApiError::NotFound => "/problems/not-found",
            ApiError::IdempotencyKey(KeyError::Missing) => "/problems/missing-idempotency-key",
            ApiError::IdempotencyKey(_) => "/problems/invalid-idempotency-key",
            ApiError::InvalidBody(_) => "/problems/invalid-body",
            ApiError::InvalidQuery(_) => "/problems/invalid-query",
            ApiError::InvalidId(_) => "/problems/invalid-id",
            ApiError::UnsupportedMediaType => "/problems/unsupported-media-type",
            ApiError::BodyTooLarge { .. } => "/problems/body-too-large",
            ApiError::KeyConflict { .. } => "/problems/idempotency-key-conflict",
            ApiError::CancelTooLate { .. } => "/problems/cancel-too-late",
            ApiError::Unavailable(_) => "/problems/unavailable",
            ApiError::Internal(_) => "/problems/internal",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            ApiError::Unauthorized(_) => "Authentication required",
            ApiError::NotFound => "Not found",
            ApiError::IdempotencyKey(KeyError::Missing) => "Missing idempotency key",
            ApiError::IdempotencyKey(_) => "Invalid idempotency key",
            ApiError::InvalidBody(_) => "Invalid request body",
            ApiError::InvalidQuery(_) => "Invalid query parameters",
            ApiError::InvalidId(_) => "Invalid command id",
            ApiError::UnsupportedMediaType => "Unsupported media type",
            ApiError::BodyTooLarge { .. } => "Request body too large",
            ApiError::KeyConflict { .. } => "Idempotency key reused for a different request",
            ApiError::CancelTooLate { .. } => "Too late to cancel",
            ApiError::Unavailable(_) => "Service unavailable",
            ApiError::Internal(_) => "Internal error",
        }
    }

    fn extensions(&self) -> Map<String, Value> {
        let mut ext = Map::new();
        match self {
            ApiError::KeyConflict {
                command_id,
                stored_digest,
                incoming_digest,
            } => {
                ext.insert("command_id".into(), json!(command_id));
                ext.insert("stored_digest".into(), json!(stored_digest));
                ext.insert("incoming_digest".into(), json!(incoming_digest));
            }
            ApiError::CancelTooLate { command_id, state } => {
                ext.insert("command_id".into(), json!(command_id));
                ext.insert("state".into(), json!(state.as_str()));
            }
            _ => {}
        }
        ext
    }
}

/// The problem document; the standard members come first, in RFC order.
#[derive(Debug, serde::Serialize)]
struct Problem {
    #[serde(rename = "type")]
    problem_type: &'static str,
    title: &'static str,
    status: u16,
    detail: String,
    #[serde(flatten)]
    extensions: Map<String, Value>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let detail = match &self {
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
        let body = Problem {
            problem_type: self.problem_type(),
            title: self.title(),
            status: status.as_u16(),
            detail,
            extensions: self.extensions(),
        };
        let mut response = (status, axum::Json(body)).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        match self {
            ApiError::Unauthorized(_) => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::Unavailable(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        response
    }
}

//! Extractors that turn rejections into our problem+json errors: the JSON
//! body, query strings, and the bearer token; and the operators-only check.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRef, FromRequest, FromRequestParts, Request};
use axum::http::{StatusCode, header, request::Parts};
use serde::de::DeserializeOwned;

use super::{AppState, error::ApiError};
use crate::db::{self, Principal, Role};
use crate::domain::token::token_hash;

/// A JSON body: `Content-Type: application/json` (or `+json`), within the
/// body limit, decoded with unknown fields refused by the target type.
#[derive(Debug)]
pub(super) struct AppJson<T, const LIMIT: usize = { super::BODY_LIMIT }>(pub T);

impl<S, T, const LIMIT: usize> FromRequest<S> for AppJson<T, LIMIT>
where
    S: Send + Sync,
    T: DeserializeOwned,
    AppState: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !is_json(req.headers().get(header::CONTENT_TYPE)) {
            return Err(ApiError::UnsupportedMediaType);
        }
        let limit = LIMIT;
        // A body that trickles in (slow loris) is cut off, not waited for.
        let timeout = AppState::from_ref(state).body_timeout;
        let bytes = tokio::time::timeout(timeout, Bytes::from_request(req, state))
            .await
            .map_err(|_| ApiError::BodyTimeout {
                seconds: timeout.as_secs_f64(),
            })?
            .map_err(|e: BytesRejection| {
                if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::BodyTooLarge { limit }
                } else {
                    ApiError::InvalidBody(format!("the request body could not be read: {e}"))
                }
            })?;
        // Before any parse that keeps one of two values for a key.
        if let Some(duplicate) = crate::domain::json_keys::first_duplicate(&bytes) {
            return Err(ApiError::DuplicateKey(duplicate));
        }
        serde_json::from_slice(&bytes)
            .map(AppJson)
            .map_err(|e| ApiError::InvalidBody(format!("the request body is not valid: {e}")))
    }
}

fn is_json(content_type: Option<&header::HeaderValue>) -> bool {
    let Some(ct) = content_type.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let mime = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

/// Query parameters, unknown ones refused.
#[derive(Debug)]
pub(super) struct AppQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for AppQuery<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| AppQuery(q.0))
            .map_err(|e| ApiError::InvalidQuery(e.body_text()))
    }
}

/// The principal behind `Authorization: Bearer <token>`.
#[derive(Debug, Clone)]
pub(super) struct Auth(pub Principal);

/// Refuses (403, saying `what`) a principal that is not an operator.
pub(super) fn operator(principal: &Principal, what: &'static str) -> Result<(), ApiError> {
    match principal.role {
        Role::Operator => Ok(()),
        Role::Device => Err(ApiError::Forbidden(what)),
    }
}

impl<S> FromRequestParts<S> for Auth
where
    S: Send + Sync,
    AppState: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let state = AppState::from_ref(state);
        let mut values = parts.headers.get_all(header::AUTHORIZATION).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return Err(ApiError::Unauthorized(
                "send exactly one Authorization: Bearer <token> header",
            ));
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| {
                let (scheme, token) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .filter(|t| !t.is_empty())
            .ok_or(ApiError::Unauthorized(
                "the Authorization header must be Bearer <token>",
            ))?;
        let principal = db::principals::authenticate(state.pool(), &token_hash(token))
            .await?
            .ok_or(ApiError::Unauthorized(
                "the token is unknown, revoked or expired",
            ))?;
        state
            .limiter
            .check(principal.id)
            .map_err(|wait| ApiError::RateLimited { retry_after: wait })?;
        Ok(Auth(principal))
    }
}

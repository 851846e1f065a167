//! `/v1/commands` reads and cancels: one command, the list, its history,
//! cancel (`ledger::cancel`, which the command line calls too). Recording
//! is `submit.rs`; what a command looks like is `views.rs`.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use uuid::Uuid;

use super::AppState;
use super::error::{ApiError, Problem};
use super::extract::{AppQuery, Auth};
use super::params::{authority_id_schema, kind_schema, parse_id};
use super::views::{CommandView, HistoryEntry, applied_wait, key_expiry, resolved_view, view};
use super::wait::{Follow, settle};
use crate::db::{self, ListFilter};
use crate::domain::{AuthorityId, CommandState};
use crate::ledger;

/// Default and largest page for listings.
const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 500;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct GetQuery {
    /// Seconds to wait for a terminal state, 0-86400; the server's maximum
    /// (`--max-wait-seconds`) clamps it.
    #[param(minimum = 0, maximum = 86400)]
    wait: Option<u64>,
}

/// The most `?wait=` may ask for; the server's own maximum then clamps it.
const WAIT_LIMIT: u64 = 86_400;

/// `GET /v1/commands/{id}[?wait=N]`: another principal's command is 404,
/// like a missing one. With `wait`, answers as soon as the command is
/// terminal, or with its current state when the wait ends.
#[utoipa::path(get, path = "/v1/commands/{id}", operation_id = "getCommand", tag = "commands",
    params(("id" = Uuid, Path, description = "command id"), GetQuery),
    responses((status = 200, body = CommandView<'static>), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 404, body = Problem), (status = 429, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn get_one(
    State(state): State<AppState>,
    Auth(principal): Auth,
    Path(id): Path<String>,
    AppQuery(q): AppQuery<GetQuery>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "a command id")?;
    if q.wait.is_some_and(|w| w > WAIT_LIMIT) {
        return Err(ApiError::InvalidQuery(format!(
            "wait must be 0-{WAIT_LIMIT} seconds"
        )));
    }
    let row = db::commands::get(state.pool(), id, principal.visible_scope().as_deref())
        .await?
        .ok_or(ApiError::NotFound)?;
    let wait = q.wait.map(|w| Duration::from_secs(w).min(state.max_wait));
    let (row, waited) = settle(&state, row, wait, Follow::Row).await?;
    let resolution = if row.state() == CommandState::Ambiguous {
        db::resolutions::get(state.pool(), &row.authority_id, row.id).await?
    } else {
        None
    };
    let last_attempt = db::attempts::later_attempt(state.pool(), &row)
        .await?
        .map(|later| later.id);
    let mut response = Json(resolved_view(&row, resolution.as_ref(), last_attempt)).into_response();
    applied_wait(&mut response, waited);
    key_expiry(&mut response, &row, state.retention);
    Ok(response)
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    #[param(
        pattern = "^(pending|prepared|effect_started|applied|failed|ambiguous|cancelled|expired)$"
    )]
    state: Option<String>,
    #[param(schema_with = authority_id_schema)]
    authority: Option<String>,
    /// Page size, 1-500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<i64>,
    /// The `next_after` of the previous page.
    #[param(format = Uuid)]
    after: Option<String>,
    /// Only this kind.
    #[param(schema_with = kind_schema)]
    kind: Option<String>,
    /// Only commands under this idempotency key.
    #[param(min_length = 1, max_length = 255)]
    key: Option<String>,
    /// Only commands of the principal of this name (operators search every
    /// principal; a device sees only its own commands whatever it asks).
    #[param(pattern = "^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}$")]
    principal: Option<String>,
    /// Only commands recorded at or after this instant (RFC 3339).
    #[param(format = DateTime)]
    since: Option<String>,
    /// Only commands recorded before this instant (RFC 3339).
    #[param(format = DateTime)]
    until: Option<String>,
    /// `true`: only pending commands waiting for their `not_before`.
    scheduled: Option<bool>,
    /// `true`: only ambiguous commands nobody has resolved yet (no
    /// resolution recorded beside them); implies `state=ambiguous`.
    unresolved: Option<bool>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
struct ListView<'a> {
    items: Vec<CommandView<'a>>,
    /// Pass as `after` for the next (older) page; null on the last page.
    next_after: Option<Uuid>,
}

/// Reads the listing's query parameters (untrusted input) into a filter and
/// the page size.
fn list_filter(q: &ListQuery, scope: Option<Vec<Uuid>>) -> Result<(ListFilter, i64), ApiError> {
    let invalid = |e: &dyn std::fmt::Display| ApiError::InvalidQuery(e.to_string());
    let mut state = q
        .state
        .as_deref()
        .map(|s| s.parse::<CommandState>().map_err(|e| invalid(&e)))
        .transpose()?;
    let unresolved = q.unresolved.unwrap_or(false);
    if unresolved {
        match state {
            None | Some(CommandState::Ambiguous) => state = Some(CommandState::Ambiguous),
            Some(other) => {
                return Err(invalid(&format_args!(
                    "unresolved lists ambiguous commands, not {other} ones"
                )));
            }
        }
    }
    let authority = q
        .authority
        .as_deref()
        .map(|a| AuthorityId::parse(a).map_err(|e| invalid(&e)))
        .transpose()?;
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(invalid(&format_args!(
            "limit must be between 1 and {MAX_LIMIT}"
        )));
    }
    let after = q
        .after
        .as_deref()
        .map(|a| Uuid::parse_str(a).map_err(|_| invalid(&"after must be a command id")))
        .transpose()?;
    let instant = |name: &str, raw: Option<&str>| {
        raw.map(|t| {
            DateTime::parse_from_rfc3339(t)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| {
                    invalid(&format_args!(
                        "{name} must be an RFC 3339 instant, like 2026-12-01T08:00:00Z"
                    ))
                })
        })
        .transpose()
    };
    let since = instant("since", q.since.as_deref())?;
    let until = instant("until", q.until.as_deref())?;
    if let (Some(s), Some(u)) = (since, until)
        && s >= u
    {
        return Err(invalid(&"since must be before until"));
    }
    let kind = q
        .kind
        .as_deref()
        .map(|k| {
            crate::domain::Kind::parse(k)
                .map(|_| k.to_owned())
                .map_err(|e| invalid(&e))
        })
        .transpose()?;
    if let Some(k) = &q.key
        && (k.is_empty() || k.len() > 255 || k.contains('\0'))
    {
        return Err(invalid(&"key must be 1-255 bytes"));
    }
    if let Some(p) = &q.principal
        && (p.is_empty()
            || p.len() > 128
            || !p
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.@:-".contains(c)))
    {
        return Err(invalid(&"principal must be a principal name"));
    }
    let filter = ListFilter {
        scope,
        state,
        authority_id: authority.map(|a| a.as_str().to_owned()),
        before_id: after,
        since,
        until,
        kind,
        key: q.key.clone(),
        principal: q.principal.clone(),
        scheduled: q.scheduled.unwrap_or(false),
        unresolved,
        limit: limit + 1,
    };
    Ok((filter, limit))
}

/// `GET /v1/commands`: search by state, authority, kind, key, principal and
/// time range; newest first, keyset pagination with `after`.
#[utoipa::path(get, path = "/v1/commands", operation_id = "listCommands", tag = "commands",
    params(ListQuery),
    responses((status = 200, body = ListView<'static>), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 429, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn list(
    State(state): State<AppState>,
    Auth(principal): Auth,
    AppQuery(q): AppQuery<ListQuery>,
) -> Result<Response, ApiError> {
    let (filter, limit) = list_filter(&q, principal.visible_scope())?;
    let mut rows = db::commands::list(state.pool(), &filter).await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(usize::try_from(limit).expect("limit is positive and small"));
    let next_after = if more {
        rows.last().map(|r| r.id)
    } else {
        None
    };
    let items = rows.iter().map(|r| view(r, None)).collect();
    Ok(Json(ListView { items, next_after }).into_response())
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
struct HistoryView {
    command_id: Uuid,
    entries: Vec<HistoryEntry>,
}

/// `GET /v1/commands/{id}/history`: every state change, oldest first.
#[utoipa::path(get, path = "/v1/commands/{id}/history", operation_id = "getCommandHistory", tag = "commands",
    params(("id" = Uuid, Path, description = "command id")),
    responses((status = 200, body = HistoryView), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 404, body = Problem), (status = 429, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn history(
    State(state): State<AppState>,
    Auth(principal): Auth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "a command id")?;
    db::commands::get(state.pool(), id, principal.visible_scope().as_deref())
        .await?
        .ok_or(ApiError::NotFound)?;
    let entries = db::history::history(state.pool(), id).await?;
    Ok(Json(HistoryView {
        command_id: id,
        entries: entries.into_iter().map(Into::into).collect(),
    })
    .into_response())
}

/// `POST /v1/commands/{id}/cancel`: wins only while no effect was attempted.
/// Cancelling a cancelled command again is a no-op that succeeds.
#[utoipa::path(post, path = "/v1/commands/{id}/cancel", operation_id = "cancelCommand", tag = "commands",
    params(("id" = Uuid, Path, description = "command id")),
    responses((status = 200, body = CommandView<'static>), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 404, body = Problem), (status = 409, body = Problem), (status = 429, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn cancel(
    State(state): State<AppState>,
    Auth(principal): Auth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "a command id")?;
    let cancelled = ledger::cancel::cancel(
        state.pool(),
        state.backend(),
        &state.outcomes,
        &state.serialization_retries,
        id,
        principal.visible_scope().as_deref(),
        &principal.actor(),
    )
    .await?;
    Ok(Json(view(cancelled.row(), None)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(s: &str) -> String {
        s.bytes().map(|b| format!("%{b:02X}")).collect()
    }

    proptest::proptest! {
        /// Arbitrary query strings never panic: they parse into a filter
        /// that keeps the rules, or into a 400.
        #[test]
        fn arbitrary_list_queries_are_refused_or_kept_within_the_rules(
            pairs in proptest::collection::vec(
                (proptest::prop_oneof!["state", "authority", "limit", "after", "kind", "key", "principal", "since", "until", "[a-z]{1,6}"], "\\PC{0,40}"),
                0..6,
            ),
        ) {
            let query: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
            let uri: axum::http::Uri = format!("/v1/commands?{}", query.join("&")).parse().unwrap();
            if let Ok(axum::extract::Query(q)) = axum::extract::Query::<ListQuery>::try_from_uri(&uri)
                && let Ok((filter, limit)) = list_filter(&q, None)
            {
                proptest::prop_assert!((1..=MAX_LIMIT).contains(&limit));
                proptest::prop_assert_eq!(filter.limit, limit + 1);
                if let Some(a) = &filter.authority_id {
                    proptest::prop_assert!(AuthorityId::parse(a).is_ok());
                }
            }
        }
    }

    #[test]
    fn list_parameters_are_checked() {
        let q = |s: &str| {
            let uri: axum::http::Uri = format!("/v1/commands?{s}").parse().unwrap();
            axum::extract::Query::<ListQuery>::try_from_uri(&uri).map(|q| list_filter(&q.0, None))
        };
        assert!(matches!(q("state=pending&limit=5"), Ok(Ok((_, 5)))));
        assert!(matches!(q(""), Ok(Ok((_, DEFAULT_LIMIT)))));
        assert!(matches!(
            q(
                "kind=refund&key=k1&principal=kiosk-7&since=2026-12-01T00:00:00Z&until=2026-12-01T02:00:00%2B01:00"
            ),
            Ok(Ok(_))
        ));
        for bad in [
            "state=done",
            "limit=0",
            "limit=501",
            "after=x",
            "authority=a%20b",
            "kind=Refund",
            "since=yesterday",
            "until=2026-13-01T00:00:00Z",
            "since=2026-12-01T00:00:00Z&until=2026-11-30T00:00:00Z",
            "principal=a%20b",
            "key=",
        ] {
            assert!(matches!(q(bad), Ok(Err(_))), "{bad}");
        }
        assert!(
            q("colour=red").is_err(),
            "unknown parameters are refused by the extractor"
        );
        assert!(q("limit=lots").is_err());
    }
}

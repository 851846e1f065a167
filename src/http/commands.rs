//! `/v1/commands` reads and cancels: one command, the list, its history,
//! cancel; and the answer helpers `submit.rs` shares (waiting for the
//! outcome, `Location`, `Idempotency-Key-Expires`). Recording is `submit.rs`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;
use uuid::Uuid;

use super::AppState;
use super::error::{ApiError, Problem};
use super::extract::{AppQuery, Auth};
use crate::db::{self, CancelOutcome, CommandRow, HistoryRow, ListFilter, txn};
use crate::domain::{AuthorityId, Disposition, State as CommandState};

/// Default and largest page for listings.
const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 500;

/// A command as the API shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct CommandView<'a> {
    id: Uuid,
    kind: &'a str,
    state: &'a str,
    authority: AuthorityView<'a>,
    idempotency_key: &'a str,
    run_id: Option<&'a str>,
    #[schema(value_type = Object)]
    args: &'a Value,
    #[schema(value_type = Option<Object>)]
    result: Option<&'a Value>,
    #[schema(value_type = Option<Object>)]
    error: Option<&'a Value>,
    request_digest: String,
    deadline: Option<DateTime<Utc>>,
    /// Not claimed before this instant; null: as soon as possible.
    not_before: Option<DateTime<Utc>>,
    /// Pending and waiting for its `not_before`, when this was read.
    scheduled: bool,
    /// Higher is claimed first within the authority (-100..=100, with aging).
    priority: i16,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    finished_at: Option<DateTime<Utc>>,
    /// The request in canonical form: what its digests were computed over.
    #[schema(value_type = Object)]
    canonical: &'a Value,
    /// The canonicalization rules that fired (why two spellings are one intent).
    canonical_rules: &'a [String],
    /// The intent digest (hex): equal for every spelling of one intent in one
    /// authority, whatever the run; null for commands recorded before intents.
    fingerprint: Option<String>,
    /// The command of the same intent this one retries (that one ended with
    /// nothing done and the kind releases such intents); null otherwise.
    retry_of: Option<Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disposition: Option<&'static str>,
    /// For an ambiguous command read by id: what was later learned about its
    /// effect (`POST /v1/commands/{id}/resolution` or `/probe`), if anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) resolution: Option<Box<super::resolutions::ResolutionView>>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
struct AuthorityView<'a> {
    id: &'a str,
    /// The generation bound when the command was prepared, or the pinned
    /// one; null while an unpinned command is pending.
    generation: Option<i64>,
    /// Whether the submission pinned the generation.
    pinned: bool,
}

pub(super) fn view(row: &CommandRow, disposition: Option<Disposition>) -> CommandView<'_> {
    CommandView {
        id: row.id,
        kind: &row.kind,
        state: &row.state,
        authority: AuthorityView {
            id: &row.authority_id,
            generation: row.authority_generation.or(row.pinned_generation),
            pinned: row.pinned_generation.is_some(),
        },
        idempotency_key: &row.idempotency_key,
        run_id: row.run_id.as_deref(),
        args: &row.args,
        result: row.result.as_ref(),
        error: row.error.as_ref(),
        request_digest: hex::encode(&row.request_digest),
        deadline: row.deadline_at,
        not_before: row.not_before,
        scheduled: crate::domain::schedule::scheduled(
            row.state() == crate::domain::State::Pending,
            row.not_before,
            Utc::now(),
        ),
        priority: row.priority,
        created_at: row.created_at,
        updated_at: row.updated_at,
        finished_at: row.finished_at,
        canonical: &row.canonical,
        canonical_rules: &row.canonical_rules,
        fingerprint: row.intent_digest.as_deref().map(hex::encode),
        retry_of: row.retry_of,
        disposition: disposition.map(Disposition::as_str),
        resolution: None,
    }
}

pub(super) fn location(id: Uuid) -> HeaderValue {
    HeaderValue::from_str(&format!("/v1/commands/{id}")).expect("a uuid path is a valid header")
}

fn parse_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw)
        .map_err(|_| ApiError::InvalidId(format!("{raw:?} is not a command id (UUID)")))
}

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
    let id = parse_id(&id)?;
    if q.wait.is_some_and(|w| w > WAIT_LIMIT) {
        return Err(ApiError::InvalidQuery(format!(
            "wait must be 0-{WAIT_LIMIT} seconds"
        )));
    }
    let row = db::commands::get(&state.pool, id, principal.visible_scope().as_deref())
        .await?
        .ok_or(ApiError::NotFound)?;
    let wait = q.wait.map(|w| Duration::from_secs(w).min(state.max_wait));
    let (row, waited) = settle(&state, row, wait).await?;
    let resolution = if row.state() == CommandState::Ambiguous {
        db::resolutions::get(&state.pool, &row.authority_id, row.id).await?
    } else {
        None
    };
    let mut shown = view(&row, None);
    shown.resolution = resolution
        .as_ref()
        .map(|r| Box::new(super::resolutions::resolution_view(r)));
    let mut response = Json(shown).into_response();
    applied_wait(&mut response, waited);
    key_expiry(&mut response, &row, state.retention);
    Ok(response)
}

/// Waits up to `wait` for `row` (one the caller may see) to become terminal. Registers interest
/// before re-reading, so an outcome between the read and the wait is not
/// missed; wakes on notifications (and on Citus, every [`super::wait::CITUS_FALLBACK`]).
/// Re-reads by authority and id, so that on Citus it asks one shard.
/// Returns the row as it is when the wait ends, and the wait applied.
pub(super) async fn settle(
    state: &AppState,
    row: CommandRow,
    wait: Option<Duration>,
) -> Result<(CommandRow, Option<Duration>), ApiError> {
    let Some(wait) = wait.filter(|w| !w.is_zero()) else {
        return Ok((row, None));
    };
    if row.state().is_terminal() {
        return Ok((row, Some(wait)));
    }
    let deadline = tokio::time::Instant::now() + wait;
    let mut subscription = state.waiters.subscribe(row.id);
    loop {
        let current = db::commands::get_in(&state.pool, &row.authority_id, row.id)
            .await?
            .ok_or(ApiError::NotFound)?;
        if current.state().is_terminal() {
            return Ok((current, Some(wait)));
        }
        tokio::select! {
            () = subscription.changed() => {}
            () = tokio::time::sleep_until(deadline) => {
                let last = db::commands::get_in(&state.pool, &row.authority_id, row.id).await?.ok_or(ApiError::NotFound)?;
                return Ok((last, Some(wait)));
            }
        }
    }
}

/// The header [`key_expiry`] sets.
pub(super) const KEY_EXPIRES: &str = "Idempotency-Key-Expires";

/// What [`KEY_EXPIRES`] means, for the OpenAPI document (which adds it to
/// every response that carries the header).
pub(super) const KEY_EXPIRES_DESCRIPTION: &str = "with serve --retention: the earliest HTTP date at which pruning may forget this command and its key";

/// `Idempotency-Key-Expires` (an HTTP date): the earliest instant pruning
/// may forget this command and its key, its finish plus the retention
/// window; for a live command, now plus the window (a lower bound, since it
/// has not finished). Sent only when a window is configured.
pub(super) fn key_expiry(response: &mut Response, row: &CommandRow, retention: Option<Duration>) {
    let Some(window) = retention.and_then(|w| chrono::Duration::from_std(w).ok()) else {
        return;
    };
    let at = row.finished_at.unwrap_or_else(Utc::now) + window;
    let value = HeaderValue::from_str(&at.format("%a, %d %b %Y %H:%M:%S GMT").to_string())
        .expect("an HTTP date is a valid header");
    response.headers_mut().insert(
        header::HeaderName::from_bytes(KEY_EXPIRES.as_bytes()).expect("a valid header name"),
        value,
    );
}

pub(super) fn applied_wait(response: &mut Response, waited: Option<Duration>) {
    if let Some(w) = waited {
        let value = HeaderValue::from_str(&format!("wait={}", w.as_secs()))
            .expect("digits are a valid header");
        response.headers_mut().insert("preference-applied", value);
    }
}

/// `Prefer: wait=N` (RFC 7240), among other preferences; `None` when absent
/// or malformed (a preference that cannot be honoured is ignored).
pub(super) fn prefer_wait(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get_all(header::HeaderName::from_static("prefer"))
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|pref| {
            let (name, value) = pref.split_once('=')?;
            if !name.trim().eq_ignore_ascii_case("wait") {
                return None;
            }
            let value = value.split(';').next()?.trim().trim_matches('"');
            value.parse::<u64>().ok().map(Duration::from_secs)
        })
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    #[param(
        pattern = "^(pending|prepared|effect_started|applied|failed|ambiguous|cancelled|expired)$"
    )]
    state: Option<String>,
    #[param(schema_with = super::submit::authority_id_schema)]
    authority: Option<String>,
    /// Page size, 1-500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<i64>,
    /// The `next_after` of the previous page.
    #[param(format = Uuid)]
    after: Option<String>,
    /// Only this kind.
    #[param(pattern = "^[a-z][a-z0-9_.-]{0,63}$")]
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
    let state = q
        .state
        .as_deref()
        .map(|s| s.parse::<CommandState>().map_err(|e| invalid(&e)))
        .transpose()?;
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
    let mut rows = db::commands::list(&state.pool, &filter).await?;
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

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct HistoryEntry {
    from: Option<String>,
    to: String,
    at: DateTime<Utc>,
    actor: String,
    generation: Option<i64>,
    reason: Option<String>,
}

impl From<HistoryRow> for HistoryEntry {
    fn from(h: HistoryRow) -> Self {
        HistoryEntry {
            from: h.from_state,
            to: h.to_state,
            at: h.at,
            actor: h.actor,
            generation: h.authority_generation,
            reason: h.reason,
        }
    }
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
    let id = parse_id(&id)?;
    db::commands::get(&state.pool, id, principal.visible_scope().as_deref())
        .await?
        .ok_or(ApiError::NotFound)?;
    let entries = db::commands::history(&state.pool, id).await?;
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
    let id = parse_id(&id)?;
    let (scope, actor) = (principal.visible_scope(), principal.actor());
    // SERIALIZABLE: a custodian that moves the row on meanwhile makes this
    // transaction retry and then report the state it found.
    let mut retry = txn::Retrying::with_settings(
        &state.pool,
        &state.serialization_retries,
        "cancel",
        txn::Isolation::Serializable,
        &[(txn::ACTOR, &actor), (txn::REASON, "cancel requested")],
    );
    let outcome = loop {
        let mut tx = retry.begin().await?;
        let attempt = db::commands::cancel(&mut tx, id, scope.as_deref(), &actor).await;
        if let Some(outcome) = retry.finish(tx, attempt).await? {
            break outcome;
        }
    };
    match outcome {
        CancelOutcome::Cancelled(row) => {
            tracing::info!(command.id = %row.id, actor = %principal.actor(), "command cancelled");
            state.outcomes.finished(&[row.id]).await;
            Ok(Json(view(&row, None)).into_response())
        }
        CancelOutcome::AlreadyCancelled(row) => Ok(Json(view(&row, None)).into_response()),
        CancelOutcome::TooLate(row) => Err(ApiError::CancelTooLate {
            command_id: row.id,
            state: row.state(),
        }),
        CancelOutcome::NotFound => Err(ApiError::NotFound),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("prefer", HeaderValue::from_str(v).unwrap());
        }
        h
    }

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

    #[test]
    fn prefer_wait_is_found_among_other_preferences() {
        assert_eq!(
            prefer_wait(&headers(&["wait=30"])),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            prefer_wait(&headers(&["respond-async, Wait = 5"])),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            prefer_wait(&headers(&["return=minimal", "wait=\"7\""])),
            Some(Duration::from_secs(7))
        );
        assert_eq!(prefer_wait(&headers(&["wait=soon"])), None);
        assert_eq!(prefer_wait(&headers(&["wait=-1"])), None);
        assert_eq!(prefer_wait(&headers(&[])), None);
    }
}

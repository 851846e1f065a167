//! What the API shows, for every handler and for the command line: a
//! command, a history entry, a resolution, a hold, a webhook endpoint and
//! its events; and the headers an answer about a command carries
//! (`Location`, `Idempotency-Key-Expires`, `Preference-Applied`). Handlers
//! import this module and `params`, never each other; [`json`] gives the
//! command line the same documents.

use axum::http::{HeaderValue, header};
use axum::response::Response;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use std::time::Duration;
use uuid::Uuid;

use crate::db::holds::HoldRow;
use crate::db::resolutions::ResolutionRow;
use crate::db::webhooks::{AttemptRow, EndpointRow, EventRow};
use crate::db::{CommandRow, HistoryRow};
use crate::domain::Disposition;
use crate::domain::hold::IntentNow;
use crate::ledger::holds::HoldNow;

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
    /// Which attempt of its chain this is, when the ledger retried a failure
    /// with nothing done (absent: the first); such an attempt names the
    /// chain's first command in `retry_of`.
    #[serde(skip_serializing_if = "Option::is_none")]
    attempt: Option<u32>,
    /// For a failure the ledger retried, read by id: the chain's last
    /// attempt so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_attempt: Option<Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disposition: Option<&'static str>,
    /// For an ambiguous command read by id: what was later learned about its
    /// effect (`POST /v1/commands/{id}/resolution` or `/probe`), if anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    resolution: Option<Box<ResolutionView>>,
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

/// A command, with the disposition of the submission that answered with it.
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
            row.state() == crate::domain::CommandState::Pending,
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
        attempt: (row.attempt() > 1).then(|| row.attempt()),
        last_attempt: None,
        disposition: disposition.map(Disposition::as_str),
        resolution: None,
    }
}

/// The answer to a submission: the chain's last attempt (`row`), under the
/// key the submission named (`asked`'s), not the one the ledger recorded a
/// later attempt under.
pub(super) fn chain_view<'a>(
    row: &'a CommandRow,
    asked: &'a Asked,
    disposition: Option<Disposition>,
) -> CommandView<'a> {
    let mut v = view(row, disposition);
    if row.id != asked.id && row.first_attempt() == asked.first_attempt {
        v.idempotency_key = &asked.key;
    }
    v
}

/// What a submission was answered with before its chain was followed: the
/// command its key (or intent) named.
#[derive(Debug)]
pub(super) struct Asked {
    id: Uuid,
    first_attempt: Uuid,
    key: String,
}

impl Asked {
    pub(super) fn of(row: &CommandRow) -> Asked {
        Asked {
            id: row.id,
            first_attempt: row.first_attempt(),
            key: row.idempotency_key.clone(),
        }
    }
}

/// A command read by id, with its resolution if one was recorded, and the
/// last attempt of its chain when it failed and the ledger retried it.
pub(super) fn resolved_view<'a>(
    row: &'a CommandRow,
    resolution: Option<&ResolutionRow>,
    last_attempt: Option<Uuid>,
) -> CommandView<'a> {
    CommandView {
        resolution: resolution.map(|r| Box::new(resolution_view(r))),
        last_attempt: last_attempt.filter(|id| *id != row.id),
        ..view(row, None)
    }
}

/// One entry of a command's history.
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

/// A recorded resolution as the API shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct ResolutionView {
    /// `applied`: the effect ran; `not_applied`: it never ran.
    outcome: String,
    evidence: String,
    /// The provider's reference for the effect, if given.
    reference: Option<String>,
    /// `operator` (recorded by hand) or `probe` (the reconcile probe answered).
    source: String,
    actor: String,
    at: DateTime<Utc>,
    /// SHA-256 (hex) chaining the resolution to the command's ambiguous
    /// history entry; `verify` recomputes it.
    hash: String,
}

pub(super) fn resolution_view(r: &ResolutionRow) -> ResolutionView {
    ResolutionView {
        outcome: r.outcome.clone(),
        evidence: r.evidence.clone(),
        reference: r.reference.clone(),
        source: r.source.clone(),
        actor: r.actor.clone(),
        at: r.at,
        hash: hex::encode(&r.hash),
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct HoldView<'a> {
    id: Uuid,
    state: &'a str,
    kind: &'a str,
    authority: &'a str,
    run_id: Option<&'a str>,
    #[schema(value_type = Object)]
    args: &'a Value,
    #[schema(value_type = Object)]
    canonical: &'a Value,
    /// The earlier command with the same intent.
    resembles: Uuid,
    created_at: DateTime<Utc>,
    decided_at: Option<DateTime<Utc>>,
    decided_by: Option<&'a str>,
    decision_reason: Option<&'a str>,
    /// The command recorded when the hold was released.
    command_id: Option<Uuid>,
    /// The applied command a release confirmed running the intent again
    /// despite (`confirm_applied`).
    confirmed_applied: Option<Uuid>,
    /// What the ledger says now about the hold's intent (on listing,
    /// showing and deciding a hold).
    #[serde(skip_serializing_if = "Option::is_none")]
    intent: Option<IntentView>,
}

/// The hold's intent now: an operator decides on this, not on the hold as
/// it was opened.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct IntentView {
    /// `current` (the question the hold was opened with stands),
    /// `reason_gone` (the command it resembles ended with nothing done) or
    /// `applied_since` (another command applied the intent after the hold
    /// opened: a release must confirm it).
    standing: &'static str,
    /// What to know before deciding, in a sentence; null when `current`.
    note: Option<String>,
    /// The state now of the command the hold resembles (null: pruned).
    resembles_state: Option<&'static str>,
    /// Its resolution (`applied` or `not_applied`), when it is ambiguous and resolved.
    resembles_resolution: Option<String>,
    /// The newest command of the intent.
    latest_command: Option<IntentCommand>,
    /// The newest command that applied the intent after the hold opened:
    /// a release must name it in `confirm_applied`.
    applied_since: Option<Uuid>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct IntentCommand {
    id: Uuid,
    state: &'static str,
}

fn intent_view(now: &IntentNow) -> IntentView {
    let standing = crate::domain::hold::standing(now);
    IntentView {
        standing: standing.as_str(),
        note: standing.note(),
        resembles_state: now.resembles.map(|s| s.as_str()),
        resembles_resolution: now.resembles_resolution.clone(),
        latest_command: now.latest.map(|(id, state)| IntentCommand {
            id,
            state: state.as_str(),
        }),
        applied_since: now.applied_since,
    }
}

/// A hold as it was recorded, without its intent's state now (a hold
/// just opened: its question is the current one).
pub(super) fn hold_view(h: &HoldRow) -> HoldView<'_> {
    hold_view_now(h, None)
}

/// A hold and what the ledger says now about its intent.
pub(super) fn hold_view_now<'a>(h: &'a HoldRow, intent: Option<&IntentNow>) -> HoldView<'a> {
    HoldView {
        id: h.id,
        state: &h.state,
        kind: &h.kind,
        authority: &h.authority_id,
        run_id: h.run_id.as_deref(),
        args: &h.args,
        canonical: &h.canonical,
        resembles: h.resembles,
        created_at: h.created_at,
        decided_at: h.decided_at,
        decided_by: h.decided_by.as_deref(),
        decision_reason: h.decision_reason.as_deref(),
        command_id: h.command_id,
        confirmed_applied: h.confirmed_applied,
        intent: intent.map(intent_view),
    }
}

/// `{"hold": hold}`, and with `command` once a release recorded one.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct HoldAnswer<'a> {
    hold: HoldView<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<CommandView<'a>>,
}

impl<'a> HoldAnswer<'a> {
    /// A hold as it stands (open, or decided), with its intent now.
    pub(super) fn hold(hold: &'a HoldNow) -> Self {
        HoldAnswer {
            hold: hold_view_now(&hold.hold, Some(&hold.intent)),
            command: None,
        }
    }

    /// A released hold and the command its release recorded.
    pub(super) fn released(hold: &'a HoldNow, command: &'a CommandRow) -> Self {
        HoldAnswer {
            hold: hold_view_now(&hold.hold, Some(&hold.intent)),
            command: Some(view(command, None)),
        }
    }
}

/// A held submission: `{"disposition": "held", "hold": hold}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct HeldAnswer<'a> {
    /// Always `held`.
    disposition: &'static str,
    hold: HoldView<'a>,
}

impl<'a> HeldAnswer<'a> {
    pub(super) fn new(h: &'a HoldRow) -> Self {
        HeldAnswer {
            disposition: "held",
            hold: hold_view(h),
        }
    }
}

/// An endpoint as the API shows it: never its secret.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct WebhookView {
    id: Uuid,
    url: String,
    /// The dedup space whose commands it receives: the registering
    /// principal's fleet id or its own id (commands.scope).
    scope: Uuid,
    /// Only these kinds; null: every kind.
    kinds: Option<Vec<String>>,
    /// Only these terminal states; null: all five.
    states: Option<Vec<String>>,
    created_at: DateTime<Utc>,
    created_by: String,
    /// Set once disabled: no new events, and pending ones expired.
    disabled_at: Option<DateTime<Utc>>,
}

pub(super) fn webhook_view(e: &EndpointRow) -> WebhookView {
    WebhookView {
        id: e.id,
        url: e.url.clone(),
        scope: e.scope,
        kinds: e.kinds.clone(),
        states: e.states.clone(),
        created_at: e.created_at,
        created_by: e.created_by.clone(),
        disabled_at: e.disabled_at,
    }
}

/// One attempt at sending an event.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct AttemptView {
    /// 1 for the first (as sent in `Ledger-Attempt`).
    n: i32,
    at: DateTime<Utc>,
    /// The receiver's HTTP status; null when none came back.
    status: Option<i32>,
    /// Why it failed; null for a 2xx.
    error: Option<String>,
    duration_ms: i32,
}

fn attempt_view(a: &AttemptRow) -> AttemptView {
    AttemptView {
        n: a.n,
        at: a.at,
        status: a.status,
        error: a.error.clone(),
        duration_ms: a.duration_ms,
    }
}

/// An event: what is sent, where it stands, each attempt.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct EventView {
    /// Sent as `Ledger-Event-Id` and `event_id`: the receiver's key for duplicates.
    id: Uuid,
    endpoint_id: Uuid,
    command_id: Uuid,
    /// `pending`, `delivered` or `expired`.
    state: String,
    created_at: DateTime<Utc>,
    /// No attempt after this; null until the first attempt.
    expires_at: Option<DateTime<Utc>>,
    /// When a pending event is due.
    next_attempt_at: Option<DateTime<Utc>>,
    delivered_at: Option<DateTime<Utc>>,
    last_error: Option<String>,
    /// The body sent, apart from `event_id` and `created_at`: command_id,
    /// key, kind, authority, state, result, error, finished_at, history_hash.
    #[schema(value_type = Object)]
    payload: Value,
    /// Every attempt that finished, first first.
    attempts: Vec<AttemptView>,
}

/// An event with its attempts (`attempts` may hold other events' too).
pub(super) fn event_view(e: &EventRow, attempts: &[AttemptRow]) -> EventView {
    EventView {
        id: e.id,
        endpoint_id: e.endpoint_id,
        command_id: e.command_id,
        state: e.state.clone(),
        created_at: e.created_at,
        expires_at: e.expires_at,
        next_attempt_at: e.next_attempt_at,
        delivered_at: e.delivered_at,
        last_error: e.last_error.clone(),
        payload: crate::domain::webhook::payload_shown(&e.payload),
        attempts: attempts
            .iter()
            .filter(|a| a.event_id == e.id)
            .map(attempt_view)
            .collect(),
    }
}

/// `Location` of a command.
pub(super) fn location(id: Uuid) -> HeaderValue {
    HeaderValue::from_str(&format!("/v1/commands/{id}")).expect("a uuid path is a valid header")
}

/// `Location` of a hold.
pub(super) fn hold_location(id: Uuid) -> HeaderValue {
    HeaderValue::from_str(&format!("/v1/holds/{id}")).expect("a uuid path is a valid header")
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

/// `Preference-Applied: wait=N` when the answer waited (`Prefer: wait`).
pub(super) fn applied_wait(response: &mut Response, waited: Option<Duration>) {
    if let Some(w) = waited {
        let value = HeaderValue::from_str(&format!("wait={}", w.as_secs()))
            .expect("digits are a valid header");
        response.headers_mut().insert("preference-applied", value);
    }
}

/// The API's JSON for a command, a history entry, a resolution, a hold and
/// a webhook endpoint or event, for other front ends (the command line) to
/// print exactly what the API returns.
pub mod json {
    use serde_json::Value;

    use crate::db::resolutions::ResolutionRow;
    use crate::db::webhooks::{AttemptRow, EndpointRow, EventRow};
    use crate::db::{CommandRow, HistoryRow};
    use crate::ledger::holds::HoldNow;

    fn value(v: impl serde::Serialize) -> Value {
        serde_json::to_value(v).expect("a view serializes")
    }

    /// As `GET /v1/commands/{id}` returns it (without its resolution).
    pub fn command(row: &CommandRow) -> Value {
        value(super::view(row, None))
    }

    /// As `GET /v1/commands/{id}` returns it: with its resolution, if any,
    /// and its chain's last attempt when the ledger retried it.
    pub fn command_resolved(
        row: &CommandRow,
        resolution: Option<&ResolutionRow>,
        last_attempt: Option<&CommandRow>,
    ) -> Value {
        value(super::resolved_view(
            row,
            resolution,
            last_attempt.map(|l| l.id),
        ))
    }

    /// As `GET /v1/commands/{id}/history` lists it.
    pub fn history_entry(row: &HistoryRow) -> Value {
        value(super::HistoryEntry::from(row.clone()))
    }

    /// A command's resolution, as `GET /v1/commands/{id}` shows it.
    pub fn resolution(row: &ResolutionRow) -> Value {
        value(super::resolution_view(row))
    }

    /// As `GET /v1/holds/{id}` returns it: with its intent now.
    pub fn hold(now: &HoldNow) -> Value {
        value(super::hold_view_now(&now.hold, Some(&now.intent)))
    }

    /// A webhook endpoint as `GET /v1/webhooks` lists it (no secret).
    pub fn webhook(row: &EndpointRow) -> Value {
        value(super::webhook_view(row))
    }

    /// A webhook event with its attempts, as `GET /v1/webhooks/{id}/events` lists it.
    pub fn webhook_event(row: &EventRow, attempts: &[AttemptRow]) -> Value {
        value(super::event_view(row, attempts))
    }
}

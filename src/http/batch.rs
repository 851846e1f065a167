//! `POST /v1/commands/batch`: a device flushing its offline queue sends up
//! to [`MAX_ITEMS`] commands at once, each with its own idempotency key,
//! and gets one answer per item. The keyed items are recorded by one insert
//! statement (one commit), so the batch is durable before the answer; the
//! same batch sent again (after a lost response) answers with the same
//! commands, as replays.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::AppState;
use super::error::{ApiError, Problem};
use super::extract::{AppJson, Auth};
use super::params::{AuthorityField, SubmitBody, kind_schema, submission, trace_of};
use super::views::{Asked, CommandView, HeldAnswer, chain_view, view};
use crate::db;
use crate::domain::trace_context::TraceContext;
use crate::domain::{Disposition, IdempotencyKey};
use crate::ledger::submit::{Admitted, BatchItem, admit_batch};

/// Most items in one batch.
pub const MAX_ITEMS: usize = 500;
/// Largest accepted batch body. Each item is held to the limit of a
/// single submission on its own (`http::BODY_LIMIT`, measured written
/// compactly), so it gets the answer it would get alone.
pub const BODY_LIMIT: usize = 1024 * 1024;

/// The body of `POST /v1/commands/batch`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct BatchBody {
    /// 1 to 500 JSON objects, each a `BatchItemBody`. Each is read on its
    /// own: an object that is not one (a missing or unknown field, a wrong
    /// type) is answered `invalid` in its place and does not affect the
    /// others, so the document does not hold the items to that schema.
    #[schema(value_type = Vec<Object>, min_items = 1, max_items = 500)]
    items: Vec<serde_json::Map<String, Value>>,
}

/// One item: the body of `POST /v1/commands` plus its idempotency key.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct BatchItemBody {
    /// As the `Idempotency-Key` header of `POST /v1/commands` (decoded: no
    /// quoting). Kinds whose policy lets the intent stand in for a key may
    /// omit it.
    #[serde(default)]
    #[schema(pattern = r"^[ -~]{1,255}$")]
    idempotency_key: Option<String>,
    #[schema(schema_with = kind_schema)]
    kind: String,
    authority: AuthorityField,
    /// A JSON object (default `{}`).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    args: Option<Value>,
    #[serde(default)]
    #[schema(pattern = r"^[ -~]{1,128}$")]
    run_id: Option<String>,
    #[serde(default, deserialize_with = "super::params::instant::deadline")]
    deadline: Option<DateTime<Utc>>,
    /// As in `POST /v1/commands`.
    #[serde(default, deserialize_with = "super::params::instant::not_before")]
    not_before: Option<DateTime<Utc>>,
    /// As in `POST /v1/commands`.
    #[serde(default)]
    #[schema(minimum = -100, maximum = 100)]
    priority: Option<i64>,
}

/// One item's answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct ItemAnswer<'a> {
    /// The item's position in the request, from 0.
    index: usize,
    /// The status `POST /v1/commands` would have answered for this item alone.
    status: u16,
    /// `new`, `replay`, `coalesced`, `held`, `conflict` or `invalid` (any
    /// other refusal: `refused`).
    disposition: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<CommandView<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hold: Option<HeldAnswer<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<Problem>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct BatchAnswer<'a> {
    items: Vec<ItemAnswer<'a>>,
}

/// `POST /v1/commands/batch`: 200 with one answer per item, once every
/// recorded item is durable. The whole request is refused (and nothing
/// recorded) only when the body itself is unusable: not JSON, no `items`,
/// no items or more than 500.
#[utoipa::path(post, path = "/v1/commands/batch", operation_id = "submitBatch", tag = "commands",
    request_body = BatchBody,
    params(("traceparent" = Option<String>, Header, description = "W3C Trace Context, kept with every item's command (not part of its fingerprint); one that does not conform is ignored"),
           ("tracestate" = Option<String>, Header, description = "W3C Trace Context, beside traceparent")),
    responses((status = 200, description = "one answer per item, in order", body = BatchAnswer<'static>),
              (status = 400, body = Problem), (status = 401, body = Problem), (status = 408, body = Problem),
              (status = 413, body = Problem), (status = 415, body = Problem),
              (status = 429, body = Problem), (status = 503, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn submit_batch(
    State(state): State<AppState>,
    Auth(principal): Auth,
    headers: HeaderMap,
    AppJson(body): AppJson<BatchBody, BODY_LIMIT>,
) -> Result<Json<Value>, ApiError> {
    // Every item is recorded with the request's trace context.
    let trace = trace_of(&headers);
    if body.items.is_empty() || body.items.len() > MAX_ITEMS {
        return Err(ApiError::InvalidBody(format!(
            "a batch holds 1 to {MAX_ITEMS} items, not {}",
            body.items.len()
        )));
    }
    let n = body.items.len();
    state.counters.requests(n as u64);
    // Read each item on its own; the readable ones go to admission together.
    let mut refused: Vec<Option<ApiError>> = Vec::with_capacity(n);
    let mut items = Vec::with_capacity(n);
    for raw in body.items {
        if compact_len(&raw) > super::BODY_LIMIT {
            refused.push(Some(ApiError::BodyTooLarge {
                limit: super::BODY_LIMIT,
            }));
            continue;
        }
        match item(&state, Value::Object(raw), trace.clone()) {
            Ok(item) => {
                items.push(item);
                refused.push(None);
            }
            Err(e) => refused.push(Some(e)),
        }
    }
    let mut admitted = admit_batch(state.pool(), &state.wake, &state.group, &principal, items)
        .await
        .into_iter();
    let mut answers: Vec<Result<Admitted, ApiError>> = refused
        .into_iter()
        .map(|r| match r {
            Some(e) => Err(e),
            None => admitted
                .next()
                .expect("one answer per admitted item")
                .map_err(ApiError::from),
        })
        .collect();
    // Every item failed for want of the database: nothing was recorded, and
    // the whole batch can be sent again.
    if let Some(Err(ApiError::Unavailable(_))) = answers.first()
        && answers
            .iter()
            .all(|a| matches!(a, Err(ApiError::Unavailable(_))))
    {
        return Err(answers
            .into_iter()
            .next()
            .expect("a first answer")
            .expect_err("unavailable"));
    }
    // A key whose command failed and was retried answers with its chain's
    // last attempt, under the key it was sent with (as a single submission).
    let mut asked: Vec<Option<Asked>> = Vec::with_capacity(answers.len());
    for answer in &mut answers {
        let mut was = None;
        if let Ok(Admitted::Command { row, .. }) = answer
            && let Some(later) = db::attempts::later_attempt(state.pool(), row).await?
        {
            was = Some(Asked::of(row));
            *row = later;
        }
        asked.push(was);
    }
    let items: Vec<ItemAnswer<'_>> = answers
        .iter()
        .zip(&asked)
        .enumerate()
        .map(|(index, (answer, asked))| answer_for(&state, index, answer, asked.as_ref()))
        .collect();
    Ok(Json(
        serde_json::to_value(BatchAnswer { items }).expect("a batch answer serializes"),
    ))
}

/// How many bytes `item` takes written compactly (no whitespace): what a
/// client sending it alone sends at least.
fn compact_len(item: &serde_json::Map<String, Value>) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, item).expect("a JSON value writes");
    count.0
}

fn item(state: &AppState, raw: Value, trace: Option<TraceContext>) -> Result<BatchItem, ApiError> {
    let body: BatchItemBody = serde_json::from_value(raw)
        .map_err(|e| ApiError::InvalidBody(format!("the item is not valid: {e}")))?;
    let key = body
        .idempotency_key
        .as_deref()
        .map(IdempotencyKey::new)
        .transpose()?;
    let sub = submission(
        SubmitBody {
            kind: body.kind,
            authority: body.authority,
            args: body.args,
            run_id: body.run_id,
            deadline: body.deadline,
            not_before: body.not_before,
            priority: body.priority,
        },
        trace,
    )?;
    let policy = state.policies.get(sub.kind.as_str()).clone();
    Ok(BatchItem { key, sub, policy })
}

fn answer_for<'a>(
    state: &AppState,
    index: usize,
    answer: &'a Result<Admitted, ApiError>,
    asked: Option<&'a Asked>,
) -> ItemAnswer<'a> {
    let none = ItemAnswer {
        index,
        status: 0,
        disposition: "",
        command: None,
        hold: None,
        problem: None,
    };
    match answer {
        Ok(Admitted::Command { row, disposition }) => {
            state.counters.count(*disposition);
            ItemAnswer {
                status: if *disposition == Disposition::New {
                    202
                } else {
                    200
                },
                disposition: disposition.as_str(),
                command: Some(match asked {
                    Some(asked) => chain_view(row, asked, Some(*disposition)),
                    None => view(row, Some(*disposition)),
                }),
                ..none
            }
        }
        Ok(Admitted::Held(hold)) => {
            state.counters.count(Disposition::Held);
            ItemAnswer {
                status: 202,
                disposition: "held",
                hold: Some(HeldAnswer::new(hold)),
                ..none
            }
        }
        Err(e) => {
            state.counters.refused(e);
            let disposition = match e {
                ApiError::KeyConflict { .. } => "conflict",
                ApiError::IdempotencyKey(_)
                | ApiError::InvalidBody(_)
                | ApiError::BodyTooLarge { .. }
                | ApiError::InvalidArgs(_)
                | ApiError::ArgsMismatch(_) => "invalid",
                _ => "refused",
            };
            ItemAnswer {
                status: e.status().as_u16(),
                disposition,
                problem: Some(e.problem()),
                ..none
            }
        }
    }
}

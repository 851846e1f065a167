//! What a submission records: the request as the ledger records it (for a
//! command and for a hold alike), and the command assembled from it, with
//! its id, its time and its identity digest, ready to wait in the group
//! commit's queue. Inserting it is [`super::submissions`].

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::domain::identity;
use crate::domain::trace_context::TraceContext;

/// A request as the ledger records it, for a command and for a hold alike:
/// who asked, for what, under which authority, in canonical form.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub scope: Uuid,
    pub kind: &'a str,
    pub authority_id: &'a str,
    pub pinned_generation: Option<i64>,
    pub run_id: Option<&'a str>,
    pub args: &'a Value,
    pub canonical: &'a Value,
    pub canonical_rules: &'a [String],
    pub request_digest: &'a [u8],
    pub intent_digest: &'a [u8],
    pub digest_version: i16,
    pub deadline_at: Option<DateTime<Utc>>,
    pub not_before: Option<DateTime<Utc>>,
    pub priority: i16,
    /// The caller's trace (not part of the request's digests).
    pub trace: Option<&'a TraceContext>,
}

/// What a submission records. Assembled only by [`NewCommand::new`]. It owns
/// its values, so that it can wait in the group commit's queue.
#[derive(Debug, Clone)]
pub struct NewCommand {
    pub id: Uuid,
    pub scope: Uuid,
    pub idempotency_key: String,
    pub request_digest: Vec<u8>,
    pub digest_version: i16,
    pub kind: String,
    pub authority_id: String,
    pub pinned_generation: Option<i64>,
    pub intent_digest: Vec<u8>,
    /// Set for commands admitted under the intent guard.
    pub intent_epoch: Option<i32>,
    pub canonical_rules: Vec<String>,
    pub run_id: Option<String>,
    pub args: Value,
    pub canonical: Value,
    pub deadline_at: Option<DateTime<Utc>>,
    pub not_before: Option<DateTime<Utc>>,
    pub priority: i16,
    pub actor: String,
    /// The command of the same intent this one retries, if any.
    pub retry_of: Option<Uuid>,
    pub trace_parent: Option<String>,
    pub trace_state: Option<String>,
    /// When it was admitted, to the microsecond (the row's `created_at`).
    pub created_at: DateTime<Utc>,
}

impl NewCommand {
    /// The one place a command to record is assembled: a fresh id, the
    /// request, the key it is recorded under, its intent epoch (under the
    /// intent guard) and the actor history names.
    pub fn new(
        request: &Request<'_>,
        idempotency_key: &str,
        intent_epoch: Option<i32>,
        actor: &str,
    ) -> Self {
        NewCommand {
            id: Uuid::now_v7(),
            scope: request.scope,
            idempotency_key: idempotency_key.to_owned(),
            request_digest: request.request_digest.to_vec(),
            digest_version: request.digest_version,
            kind: request.kind.to_owned(),
            authority_id: request.authority_id.to_owned(),
            pinned_generation: request.pinned_generation,
            intent_digest: request.intent_digest.to_vec(),
            intent_epoch,
            canonical_rules: request.canonical_rules.to_vec(),
            run_id: request.run_id.map(str::to_owned),
            args: request.args.clone(),
            canonical: request.canonical.clone(),
            deadline_at: request.deadline_at.map(identity::to_micros),
            not_before: request.not_before,
            priority: request.priority,
            actor: actor.to_owned(),
            retry_of: None,
            trace_parent: request.trace.map(|t| t.parent.to_string()),
            trace_state: request.trace.and_then(|t| t.state.clone()),
            created_at: identity::to_micros(Utc::now()),
        }
    }

    /// Its identity digest (`identity-v2`), stored with the pending row so
    /// that the claim does not hash the row again ([`identity`]).
    pub fn identity_digest(&self) -> Vec<u8> {
        identity::Identity {
            id: self.id,
            scope: self.scope,
            idempotency_key: &self.idempotency_key,
            request_digest: &self.request_digest,
            digest_version: self.digest_version,
            kind: &self.kind,
            authority_id: &self.authority_id,
            run_id: self.run_id.as_deref(),
            args: &self.args,
            canonical: &self.canonical,
            created_at: self.created_at,
            deadline_at: self.deadline_at,
            pinned_generation: self.pinned_generation,
            intent_digest: Some(&self.intent_digest),
            canonical_rules: &self.canonical_rules,
            intent_epoch: self.intent_epoch,
        }
        .digest()
        .to_vec()
    }

    /// The same command, recorded as the retry of `failed` (a command of
    /// the same intent that ended with nothing done).
    pub fn retrying(mut self, failed: Uuid) -> Self {
        self.retry_of = Some(failed);
        self
    }
}

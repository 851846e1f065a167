//! Admission: where a request becomes a row, for every front end. A
//! validated submission's args are checked against its kind's declared
//! schema and canonicalized (the pure domain; args refused by either are
//! never recorded, not even as a hold), then admitted
//! under its key (new / replay / conflict) or, keyless, under its intent
//! (new / the same command: coalesced or replay / held / refused). The
//! unique index on (scope, key) decides every race; keyless commands are
//! recorded under a key derived from the intent, so racing copies collide.
//! The scope is the principal's fleet or the principal itself, as the
//! kind's `dedup_scope` says; an intent whose latest command ended with
//! nothing done (failed, expired, cancelled, or ambiguous and resolved
//! `not_applied`) is free again for another run when the kind's
//! `on_failure` is `release` (the new command names the one it retries).

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgPool;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;
use uuid::Uuid;

use super::{LedgerError, PendingWake};
use crate::db::group_commit::GroupCommit;
use crate::db::holds::{HoldRow, NewHold};
use crate::db::{self, CommandRow, NewCommand, Principal, Request};
use crate::domain::admission::{
    IntentVerdict, KeyMode, KindPolicy, Latest, derived_key, intent_verdict,
};
use crate::domain::schedule;
use crate::domain::{
    AuthorityRef, CanonicalRequest, CommandState, Disposition, IdempotencyKey, KeyError, Kind,
    RequestDigest, canonical_request, canonical_request_at, differences, disposition,
    request_digest_v1,
};

/// A validated submission: what the front end parsed, before canonical form.
#[derive(Debug)]
pub struct Submission {
    pub kind: Kind,
    pub authority: AuthorityRef,
    pub args: Value,
    pub run_id: Option<String>,
    pub deadline: Option<DateTime<Utc>>,
    /// Not to be claimed before this instant.
    pub not_before: Option<DateTime<Utc>>,
    /// The priority asked for; `None`: the kind's.
    pub priority: Option<i64>,
    /// The caller's W3C trace context, kept with the command it records
    /// (not part of its fingerprint).
    pub trace: Option<crate::domain::trace_context::TraceContext>,
}

/// What admission works with besides the request.
struct Ctx<'a> {
    pool: &'a PgPool,
    wake: &'a PendingWake,
    group: &'a GroupCommit,
    /// The dedup space the request is admitted in: the principal's fleet or
    /// the principal itself, as the kind's `dedup_scope` says.
    scope: Uuid,
    /// The command's priority: the one asked for, or the kind's.
    priority: i16,
}

/// What admission did with a request.
#[derive(Debug)]
pub enum Admitted {
    Command {
        row: CommandRow,
        disposition: Disposition,
    },
    Held(HoldRow),
}

/// Admits a validated submission: records it, or finds what it repeats.
/// Returns what it did and the request's canonical form.
pub async fn admit(
    pool: &PgPool,
    wake: &PendingWake,
    group: &GroupCommit,
    principal: &Principal,
    key: Option<IdempotencyKey>,
    sub: &Submission,
    policy: &KindPolicy,
) -> Result<(Admitted, CanonicalRequest), LedgerError> {
    let canonical = read(sub, policy)?;
    let ctx = &Ctx {
        pool,
        wake,
        group,
        scope: policy.dedup_scope.scope(principal.id, principal.fleet_id),
        priority: priority(sub, policy)?,
    };
    let admitted = match key {
        Some(key) if policy.guard_keyed => {
            match under_key(ctx, &key, sub, &canonical, policy).await? {
                Some(admitted) => admitted,
                None => guarded(ctx, principal, Some(&key), sub, &canonical, policy).await?,
            }
        }
        Some(key) => keyed(ctx, principal, &key, sub, &canonical, policy).await?,
        None if policy.key == KeyMode::Fingerprint => {
            guarded(ctx, principal, None, sub, &canonical, policy).await?
        }
        None => return Err(LedgerError::Key(KeyError::Missing)),
    };
    Ok((admitted, canonical))
}

/// A submission's canonical form, once its args are what its kind declares
/// (the catalog's `args_schema`, when it has one) and canonical form can
/// read them (money with a currency, say). Every front end passes here
/// before anything is recorded; `POST /v1/intents/explain` too, so that it
/// refuses what admission would.
pub fn read(sub: &Submission, policy: &KindPolicy) -> Result<CanonicalRequest, LedgerError> {
    schedule::check_window(sub.not_before, sub.deadline)?;
    priority(sub, policy)?;
    let canonical = canonical_request(
        sub.kind.as_str(),
        &sub.authority.canonical(),
        &sub.args,
        sub.run_id.as_deref(),
        &policy.canonical,
    );
    if let Some(schema) = &policy.args_schema
        && let Err(mut mismatch) = schema.check(&sub.args)
    {
        // One refusal names every failing field, unreadable money included.
        if let Err(e) = &canonical {
            mismatch.also(e.path(), e.to_string());
        }
        return Err(mismatch.into());
    }
    Ok(canonical?)
}

/// The priority a submission's command gets: the one it asked for, within
/// what its kind allows, or the kind's.
fn priority(sub: &Submission, policy: &KindPolicy) -> Result<i16, LedgerError> {
    Ok(policy.priority.resolve(sub.kind.as_str(), sub.priority)?)
}

/// The request a submission records, as a command or as a hold.
fn request<'a>(ctx: &Ctx<'_>, sub: &'a Submission, canonical: &'a CanonicalRequest) -> Request<'a> {
    Request {
        scope: ctx.scope,
        kind: sub.kind.as_str(),
        authority_id: sub.authority.id.as_str(),
        pinned_generation: sub.authority.pinned_generation,
        run_id: sub.run_id.as_deref(),
        args: &sub.args,
        canonical: &canonical.form,
        canonical_rules: &canonical.rules,
        request_digest: canonical.digest.as_bytes(),
        intent_digest: canonical.intent_digest.as_bytes(),
        digest_version: canonical.version,
        deadline_at: sub.deadline,
        not_before: sub.not_before,
        priority: ctx.priority,
        trace: sub.trace.as_ref(),
    }
}

/// How many times a keyed submission inserts and looks its key up before it
/// gives up (an internal error): with [`KEY_LOOKUP_PAUSE`] doubled after
/// each, about a quarter of a second in all.
const KEY_LOOKUPS: u32 = 7;

/// The first pause between a key found taken with no command under it and
/// the next attempt.
const KEY_LOOKUP_PAUSE: Duration = Duration::from_millis(2);

/// Under a client key: the unique index decides.
async fn keyed(
    ctx: &Ctx<'_>,
    principal: &Principal,
    key: &IdempotencyKey,
    sub: &Submission,
    canonical: &CanonicalRequest,
    policy: &KindPolicy,
) -> Result<Admitted, LedgerError> {
    let actor = principal.actor();
    let new = NewCommand::new(&request(ctx, sub, canonical), key.as_str(), None, &actor);
    // The key is taken, yet no command is found under it: its row vanished
    // in between (retention), so insert again; or, where the key's row is
    // written first in a shard of its own (`key_table_first`), the other
    // submission's two shards commit one after the other (two-phase), and
    // its key can be seen a moment before its command: wait a little more
    // each time before asking again.
    for attempt in 0..KEY_LOOKUPS {
        if let Some(row) = ctx.group.insert(&new).await? {
            return Ok(admitted_new(ctx, row).await);
        }
        if let Some(admitted) = under_key(ctx, key, sub, canonical, policy).await? {
            return Ok(admitted);
        }
        tokio::time::sleep(KEY_LOOKUP_PAUSE * (1 << attempt)).await;
    }
    Err(LedgerError::Internal(anyhow::anyhow!(
        "idempotency key {key} kept disappearing between insert and lookup"
    )))
}

/// What the ledger already holds under `key`: the same request (replay,
/// compared at the stored row's digest version) or a conflict; `None` when
/// the key is unused.
async fn under_key(
    ctx: &Ctx<'_>,
    key: &IdempotencyKey,
    sub: &Submission,
    canonical: &CanonicalRequest,
    policy: &KindPolicy,
) -> Result<Option<Admitted>, LedgerError> {
    let backend = ctx.group.backend();
    let mut conn = ctx.pool.acquire().await?;
    let Some(stored) =
        db::submissions::find_by_key(&mut conn, backend, ctx.scope, key.as_str()).await?
    else {
        return Ok(None);
    };
    judge(stored, sub, canonical, policy).map(Some)
}

/// A request against the command its key already names: a replay of the
/// same request (compared at the stored row's digest version), or a conflict.
fn judge(
    stored: CommandRow,
    sub: &Submission,
    canonical: &CanonicalRequest,
    policy: &KindPolicy,
) -> Result<Admitted, LedgerError> {
    // The incoming request in the stored row's version, when that is older.
    let older = match stored.digest_version {
        v if v == canonical.version || v < 2 => None,
        v => Some(
            canonical_request_at(
                v,
                sub.kind.as_str(),
                &sub.authority.canonical(),
                &sub.args,
                sub.run_id.as_deref(),
                &policy.canonical,
            )
            .map_err(LedgerError::InvalidArgs)?,
        ),
    };
    let compared = older.as_ref().unwrap_or(canonical);
    let incoming = match stored.digest_version {
        1 => request_digest_v1(sub.kind.as_str(), &sub.authority.canonical(), &sub.args),
        _ => compared.digest,
    };
    match disposition(
        RequestDigest::from_slice(&stored.request_digest).as_ref(),
        &incoming,
    ) {
        Disposition::Replay => Ok(Admitted::Command {
            row: stored,
            disposition: Disposition::Replay,
        }),
        _ => Err(LedgerError::KeyConflict {
            command_id: stored.id,
            stored_digest: hex::encode(&stored.request_digest),
            incoming_digest: incoming.to_string(),
            differences: if stored.digest_version == compared.version {
                differences(&stored.canonical, &compared.form)
            } else {
                Vec::new()
            },
        }),
    }
}

async fn admitted_new(ctx: &Ctx<'_>, row: CommandRow) -> Admitted {
    tracing::info!(command.id = %row.id, kind = %row.kind, authority = %row.authority_id, "command recorded");
    crate::crash::point(crate::crash::CrashPoint::AfterInsert);
    ctx.wake.pending(&row.authority_id).await;
    Admitted::Command {
        row,
        disposition: Disposition::New,
    }
}

/// One item of a batch: its key (if any), the validated submission and its
/// kind's policy.
#[derive(Debug)]
pub struct BatchItem {
    pub key: Option<IdempotencyKey>,
    pub sub: Submission,
    pub policy: KindPolicy,
}

/// Admits a batch (a device flushing its offline queue): every keyed item
/// of a kind without the intent guard is recorded by one insert statement,
/// so one commit makes the whole batch durable; a key already used answers
/// replay or conflict as a single submission would, so the same batch sent
/// again gets the same commands. Items under the intent guard (keyless, or
/// of kinds that guard keyed requests) are admitted one by one afterwards,
/// exactly as single submissions. One answer per item, in order; an item's
/// refusal never affects another item.
pub async fn admit_batch(
    pool: &PgPool,
    wake: &PendingWake,
    group: &GroupCommit,
    principal: &Principal,
    items: Vec<BatchItem>,
) -> Vec<Result<Admitted, LedgerError>> {
    let actor = principal.actor();
    let mut answers: Vec<Option<Result<Admitted, LedgerError>>> =
        items.iter().map(|_| None).collect();
    let mut canonicals: Vec<Option<CanonicalRequest>> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match read(&item.sub, &item.policy) {
            Ok(c) => canonicals.push(Some(c)),
            Err(e) => {
                answers[i] = Some(Err(e));
                canonicals.push(None);
            }
        }
    }
    // Keyed items of kinds without the intent guard: one statement.
    let plain: Vec<(usize, NewCommand)> = items
        .iter()
        .zip(&canonicals)
        .enumerate()
        .filter_map(|(i, (item, canonical))| {
            let canonical = canonical.as_ref()?;
            let key = item.key.as_ref().filter(|_| !item.policy.guard_keyed)?;
            let ctx = Ctx {
                pool,
                wake,
                group,
                scope: item
                    .policy
                    .dedup_scope
                    .scope(principal.id, principal.fleet_id),
                // `read` accepted it, so it resolves.
                priority: priority(&item.sub, &item.policy).ok()?,
            };
            let request = request(&ctx, &item.sub, canonical);
            Some((i, NewCommand::new(&request, key.as_str(), None, &actor)))
        })
        .collect();
    if !plain.is_empty() {
        let rows: Vec<&NewCommand> = plain.iter().map(|(_, n)| n).collect();
        let backend = group.backend();
        match db::submissions::insert_pending_many(pool, backend, &rows).await {
            Ok(inserted) => {
                crate::crash::point(crate::crash::CrashPoint::AfterInsert);
                let mut by_id: HashMap<Uuid, CommandRow> =
                    inserted.into_iter().map(|r| (r.id, r)).collect();
                let authorities: BTreeSet<&str> =
                    by_id.values().map(|r| r.authority_id.as_str()).collect();
                for authority in authorities {
                    wake.pending(authority).await;
                }
                // Keys already taken, per dedup scope (kinds may differ).
                let mut taken: HashMap<Uuid, Vec<String>> = HashMap::new();
                for (_, n) in plain.iter().filter(|(_, n)| !by_id.contains_key(&n.id)) {
                    taken
                        .entry(n.scope)
                        .or_default()
                        .push(n.idempotency_key.clone());
                }
                let mut stored: HashMap<(Uuid, String), CommandRow> = HashMap::new();
                for (scope, keys) in &taken {
                    let found = match pool.acquire().await {
                        Ok(mut conn) => {
                            db::submissions::find_by_keys(&mut conn, backend, *scope, keys).await
                        }
                        Err(e) => Err(e),
                    };
                    if let Ok(rows) = found {
                        stored.extend(
                            rows.into_iter()
                                .map(|r| ((r.scope, r.idempotency_key.clone()), r)),
                        );
                    }
                }
                for (i, new) in &plain {
                    let canonical = canonicals[*i].as_ref().expect("plain items are canonical");
                    answers[*i] = if let Some(row) = by_id.remove(&new.id) {
                        tracing::info!(command.id = %row.id, kind = %row.kind, authority = %row.authority_id, "command recorded");
                        Some(Ok(Admitted::Command {
                            row,
                            disposition: Disposition::New,
                        }))
                    } else {
                        // Another item of this batch, or an earlier request,
                        // holds the key; a row gone meanwhile is admitted alone.
                        stored
                            .get(&(new.scope, new.idempotency_key.clone()))
                            .cloned()
                            .map(|row| judge(row, &items[*i].sub, canonical, &items[*i].policy))
                    };
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, items = plain.len(), "batch insert failed; each item alone");
            }
        }
    }
    // Everything still unanswered: one by one, as a single submission.
    let mut out = Vec::with_capacity(items.len());
    for (item, answer) in items.into_iter().zip(answers) {
        out.push(match answer {
            Some(a) => a,
            None => admit(
                pool,
                wake,
                group,
                principal,
                item.key,
                &item.sub,
                &item.policy,
            )
            .await
            .map(|(admitted, _)| admitted),
        });
    }
    out
}

/// Under the intent guard: keyless submissions (recorded under a key
/// derived from the intent), and keyed ones of kinds that opt in. Copies
/// within the window are one command; each new command of an intent takes
/// the next epoch, and the unique index on (scope, intent, epoch) makes
/// racing copies collide whatever their keys; a near-duplicate after the
/// window is held, allowed or refused as the kind says.
async fn guarded(
    ctx: &Ctx<'_>,
    principal: &Principal,
    key: Option<&IdempotencyKey>,
    sub: &Submission,
    canonical: &CanonicalRequest,
    policy: &KindPolicy,
) -> Result<Admitted, LedgerError> {
    let actor = principal.actor();
    for _ in 0..4 {
        let latest = db::submissions::latest_by_intent(
            ctx.pool,
            ctx.scope,
            sub.authority.id.as_str(),
            canonical.intent_digest.as_bytes(),
            canonical.digest.as_bytes(),
        )
        .await?;
        let facts = latest.as_ref().map(|l| Latest {
            same_request: l.same_request,
            age: Duration::from_secs_f64(l.age_seconds.max(0.0)),
            epoch: u32::try_from(l.max_epoch).unwrap_or(0),
            nothing_done: l
                .state
                .parse::<CommandState>()
                .is_ok_and(|s| s.nothing_done_as_resolved(l.resolved_not_applied)),
            run_named: sub.run_id.is_some(),
        });
        let verdict = intent_verdict(facts, policy);
        let retry_of = match (verdict, &latest) {
            (IntentVerdict::Retry { .. }, Some(l)) => Some(l.id),
            _ => None,
        };
        match (verdict, latest) {
            (IntentVerdict::New { epoch } | IntentVerdict::Retry { epoch }, _) => {
                let derived = derived_key(&canonical.intent_digest, epoch);
                let key_str = key.map_or(derived.as_str(), IdempotencyKey::as_str);
                let epoch = i32::try_from(epoch)
                    .map_err(|_| LedgerError::Internal(anyhow::anyhow!("intent epoch overflow")))?;
                let mut new =
                    NewCommand::new(&request(ctx, sub, canonical), key_str, Some(epoch), &actor);
                if let Some(failed) = retry_of {
                    new = new.retrying(failed);
                }
                match ctx.group.insert(&new).await {
                    Ok(Some(row)) => return Ok(admitted_new(ctx, row).await),
                    // The client's key was taken meanwhile: the key decides. (A
                    // derived key taken means another copy won this epoch.)
                    Ok(None) => {
                        if let Some(key) = key
                            && let Some(admitted) =
                                under_key(ctx, key, sub, canonical, policy).await?
                        {
                            return Ok(admitted);
                        }
                    }
                    Err(e) if db::submissions::is_epoch_conflict(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            (IntentVerdict::Same, Some(l)) => {
                let row = db::commands::get(ctx.pool, l.id, Some(&[ctx.scope]))
                    .await?
                    .ok_or(LedgerError::NotFound)?;
                // Another run's command answers this request: remember it
                // before answering, so that this request retried after the
                // window is a replay of the same command, not a new run.
                if !l.same_request {
                    db::submissions::remember_coalesced(
                        ctx.pool,
                        &row,
                        canonical.digest.as_bytes(),
                        sub.run_id.as_deref(),
                    )
                    .await?;
                }
                let disposition = if row.state().is_terminal() {
                    Disposition::Replay
                } else {
                    Disposition::Coalesced
                };
                return Ok(Admitted::Command { row, disposition });
            }
            (IntentVerdict::Held, Some(l)) => {
                let mut conn = ctx.pool.acquire().await?;
                let hold = db::holds::hold(
                    &mut conn,
                    &NewHold::new(&request(ctx, sub, canonical), l.id),
                )
                .await?;
                tracing::info!(hold.id = %hold.id, resembles = %l.id, "near-duplicate held");
                return Ok(Admitted::Held(hold));
            }
            (IntentVerdict::Refused, Some(l)) => {
                return Err(LedgerError::NearDuplicate { command_id: l.id });
            }
            (_, None) => {}
        }
    }
    Err(LedgerError::Internal(anyhow::anyhow!(
        "admission under the intent guard did not settle after four attempts"
    )))
}

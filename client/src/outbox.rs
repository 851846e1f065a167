//! A device's durable outbox: record before dispatch, extended to the edge.
//!
//! [`Outbox::record`] writes a command, with its idempotency key, into a
//! local SQLite file and makes it durable (`synchronous = FULL`) before
//! anything is sent. [`Outbox::flush`] sends what is still unanswered, in the
//! order it was recorded, each with its own key, in batches of up to
//! [`BATCH`] (`POST /v1/commands/batch`: one request and one commit on the
//! server per batch), and records each answer. A
//! device that loses power or network at any point (before the send, after
//! the server committed but before the answer arrived, before the answer
//! was written down) resends on its next flush, under the same key, so each
//! command ends in the ledger exactly once.
//!
//! Definite refusals (`4xx` problems such as a key conflict) are answers
//! too: they are recorded and not resent. A flush stops at the first
//! batch it could not get an answer for (the network is down), leaving it
//! and everything after it for the next flush.

use rusqlite::{Connection, OptionalExtension as _, params};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Mutex;

use crate::{Client, ItemAnswer, Submission, Submitted};

/// Most commands one flush request carries (the server's batch limit).
pub const BATCH: usize = 500;

/// Steps of a flush, for callers that want to observe them (and for tests
/// that kill the process at each one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushStep {
    /// About to send this command.
    BeforeSend,
    /// The server answered; the answer is not yet written down.
    AfterAnswer,
    /// The answer is written down.
    AfterRecord,
}

/// Why the outbox could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    #[error("outbox storage: {0}")]
    Storage(#[from] rusqlite::Error),
    #[error("outbox entry {key} is unreadable: {why}")]
    Corrupt { key: String, why: String },
}

/// One command in the outbox.
#[derive(Debug, Clone)]
pub struct Entry {
    pub key: String,
    pub kind: String,
    pub authority: String,
    pub args: Value,
    /// Not to be claimed before this instant (RFC 3339, as recorded).
    pub not_before: Option<String>,
    /// The priority asked for, if any.
    pub priority: Option<i16>,
    /// The server's answer (the command, a hold, or a refusal), once known.
    pub answer: Option<Value>,
}

/// What a flush did.
#[derive(Debug, Default)]
pub struct FlushReport {
    /// Commands answered during this flush (recorded, replayed or held).
    pub answered: usize,
    /// Commands refused with a problem (recorded as their answer, not resent).
    pub refused: usize,
    /// Commands still waiting for an answer (the flush stopped at the first).
    pub pending: usize,
    /// Why the flush stopped early, if it did.
    pub stopped_by: Option<String>,
}

/// A durable outbox in one SQLite file.
#[derive(Debug)]
pub struct Outbox {
    conn: Mutex<Connection>,
}

impl Outbox {
    /// Opens (or creates) the outbox at `path`.
    pub fn open(path: &Path) -> Result<Outbox, OutboxError> {
        let conn = Connection::open(path)?;
        conn.execute_batch(
            "pragma journal_mode = wal;
             pragma synchronous = full;
             create table if not exists outbox (
                 seq integer primary key autoincrement,
                 key text not null unique,
                 kind text not null,
                 authority text not null,
                 args text not null,
                 recorded_at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
                 answer text,
                 answered_at text
             );",
        )?;
        // Outboxes made before commands had a schedule and a priority get
        // the two columns (empty for what they hold).
        let columns: Vec<String> = conn
            .prepare("select name from pragma_table_info('outbox')")?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        for (column, ty) in [("not_before", "text"), ("priority", "integer")] {
            if !columns.iter().any(|c| c == column) {
                conn.execute_batch(&format!("alter table outbox add column {column} {ty}"))?;
            }
        }
        Ok(Outbox {
            conn: Mutex::new(conn),
        })
    }

    /// Writes the command down, durably, and returns its key (the one given,
    /// or a new UUIDv7). Nothing is sent.
    pub fn record(&self, s: &Submission) -> Result<String, OutboxError> {
        let key = s
            .key
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        self.lock().execute(
            "insert into outbox (key, kind, authority, args, not_before, priority)
             values (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                key,
                s.kind,
                s.authority,
                s.args.to_string(),
                s.not_before.map(|t| t.to_rfc3339()),
                s.priority,
            ],
        )?;
        Ok(key)
    }

    /// Every entry, in the order recorded.
    pub fn entries(&self) -> Result<Vec<Entry>, OutboxError> {
        let conn = self.lock();
        let mut stmt =
            conn.prepare("select key, kind, authority, args, answer, not_before, priority from outbox order by seq")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                (
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, Option<String>>(4)?,
                ),
                (r.get::<_, Option<String>>(5)?, r.get::<_, Option<i16>>(6)?),
            ))
        })?;
        let mut entries = Vec::new();
        for row in rows {
            let ((key, kind, authority, args, answer), (not_before, priority)) = row?;
            let parse = |text: &str| {
                serde_json::from_str(text).map_err(|e| OutboxError::Corrupt {
                    key: key.clone(),
                    why: e.to_string(),
                })
            };
            entries.push(Entry {
                args: parse(&args)?,
                answer: answer.as_deref().map(parse).transpose()?,
                key,
                kind,
                authority,
                not_before,
                priority,
            });
        }
        Ok(entries)
    }

    /// Sends every unanswered command (see the module's documentation).
    pub async fn flush(&self, client: &Client) -> Result<FlushReport, OutboxError> {
        self.flush_observed(client, BATCH, |_, _| {}).await
    }

    /// [`Outbox::flush`] with at most `batch` commands per request (1 to
    /// [`BATCH`]), calling `observe` at each step of each command.
    pub async fn flush_observed(
        &self,
        client: &Client,
        batch: usize,
        mut observe: impl FnMut(FlushStep, &str),
    ) -> Result<FlushReport, OutboxError> {
        let mut report = FlushReport::default();
        let unanswered: Vec<Entry> = self
            .entries()?
            .into_iter()
            .filter(|e| e.answer.is_none())
            .collect();
        let mut sent = 0;
        for chunk in unanswered.chunks(batch.clamp(1, BATCH)) {
            for entry in chunk {
                observe(FlushStep::BeforeSend, &entry.key);
            }
            let batch: Vec<Submission> = chunk
                .iter()
                .map(|entry| {
                    let mut s = Submission::new(&entry.kind, &entry.authority)
                        .args(entry.args.clone())
                        .key(&entry.key);
                    s.not_before = entry
                        .not_before
                        .as_deref()
                        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                        .map(|t| t.with_timezone(&chrono::Utc));
                    s.priority = entry.priority;
                    s
                })
                .collect();
            let answers = match client.submit_batch(&batch).await {
                Ok(answers) => answers,
                Err(e) => {
                    report.pending = unanswered.len() - sent;
                    report.stopped_by = Some(e.to_string());
                    return Ok(report);
                }
            };
            for answer in &answers {
                observe(FlushStep::AfterAnswer, answer.key());
            }
            // Every answer of the batch written down in one transaction.
            let mut conn = self.lock();
            let tx = conn.transaction()?;
            for answer in &answers {
                let recorded = match answer {
                    ItemAnswer::Submitted(submitted) => match submitted.as_ref() {
                        Submitted::Command { command, .. } => {
                            report.answered += 1;
                            serde_json::to_value(command).unwrap_or(Value::Null)
                        }
                        Submitted::Held { hold, .. } => {
                            report.answered += 1;
                            json!({"disposition": "held", "hold": hold})
                        }
                    },
                    ItemAnswer::Refused { problem, .. } => {
                        report.refused += 1;
                        json!({"refused": problem})
                    }
                };
                tx.execute(
                    "update outbox set answer = ?1,
                         answered_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
                     where key = ?2 and answer is null",
                    params![recorded.to_string(), answer.key()],
                )?;
            }
            tx.commit()?;
            drop(conn);
            for answer in &answers {
                observe(FlushStep::AfterRecord, answer.key());
            }
            sent += chunk.len();
        }
        Ok(report)
    }

    /// The answer recorded for `key`, if any.
    pub fn answer(&self, key: &str) -> Result<Option<Value>, OutboxError> {
        let text: Option<Option<String>> = self
            .lock()
            .query_row("select answer from outbox where key = ?1", [key], |r| {
                r.get(0)
            })
            .optional()?;
        text.flatten()
            .map(|t| {
                serde_json::from_str(&t).map_err(|e| OutboxError::Corrupt {
                    key: key.to_owned(),
                    why: e.to_string(),
                })
            })
            .transpose()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite consistent (every
        // statement is its own transaction), so a poisoned lock is usable.
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

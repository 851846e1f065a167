//! Group commit for submissions: concurrent `POST /v1/commands` requests
//! share one transaction and one insert statement.
//!
//! No timer: a request goes out at once when a flusher is free. While every
//! flusher is busy with its statement, new requests queue, and the next free
//! flusher takes all of them (up to a bound) in one statement. Under light
//! load each request is its own statement; under heavy load one commit
//! carries many. Each caller is answered only after the statement that holds
//! its row committed. A statement that fails (a deadlock, a row the database
//! refuses) is retried row by row, so one bad row never fails its
//! neighbours: each gets the answer it would have had alone.

use sqlx::PgPool;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{Semaphore, mpsc, oneshot};
use uuid::Uuid;

use super::Backend;
use super::commands::CommandRow;
use super::new_command::NewCommand;
use super::submissions;

/// Most rows one statement carries.
pub const MAX_ROWS: usize = 256;
/// Statements in flight at once (each on its own connection).
pub const FLUSHERS: usize = 4;

type Answer = Result<Option<CommandRow>, sqlx::Error>;

struct Job {
    row: NewCommand,
    reply: oneshot::Sender<Answer>,
}

/// Records pending rows, one statement per caller or many callers per
/// statement. Cheap to clone.
#[derive(Debug, Clone)]
pub struct GroupCommit {
    how: How,
    shared: Arc<Shared>,
}

/// What the callers and the flushers share (the flushers hold no sender,
/// so the queue closes when the last [`GroupCommit`] is dropped).
#[derive(Debug)]
struct Shared {
    pool: PgPool,
    /// What the database can do (it decides where keys are kept).
    backend: Backend,
}

#[derive(Debug, Clone)]
enum How {
    /// The API: queued for the flushers.
    Grouped(mpsc::Sender<Job>),
    /// One statement per call (the command line, tests that want it).
    Direct,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").field("id", &self.row.id).finish()
    }
}

impl GroupCommit {
    /// Group commit over `pool` (whose database is `backend`), with
    /// `flushers` statements in flight at most, each of at most `max_rows`
    /// rows.
    pub fn spawn(pool: PgPool, backend: Backend, flushers: usize, max_rows: usize) -> Self {
        let (tx, mut rx) = mpsc::channel::<Job>(4 * max_rows.max(1));
        let permits = Arc::new(Semaphore::new(flushers.max(1)));
        let shared = Shared::new(pool, backend);
        let flushing = Arc::clone(&shared);
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                // Wait for a free flusher; whatever arrives meanwhile joins.
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    return;
                };
                let mut jobs = vec![first];
                while jobs.len() < max_rows {
                    match rx.try_recv() {
                        Ok(job) => jobs.push(job),
                        Err(_) => break,
                    }
                }
                let flushing = Arc::clone(&flushing);
                tokio::spawn(async move {
                    flushing.flush(jobs).await;
                    drop(permit);
                });
            }
        });
        GroupCommit {
            how: How::Grouped(tx),
            shared,
        }
    }

    /// One statement per call, on `pool`.
    pub fn direct(pool: PgPool, backend: Backend) -> Self {
        GroupCommit {
            how: How::Direct,
            shared: Shared::new(pool, backend),
        }
    }

    /// What the database can do.
    pub fn backend(&self) -> Backend {
        self.shared.backend
    }

    /// Inserts the pending row; `None` when its scope already holds the key
    /// (or, under the intent guard, the intent epoch), as
    /// [`submissions::insert_pending`] answers. Returns once the row is durable.
    pub async fn insert(&self, row: &NewCommand) -> Answer {
        match &self.how {
            How::Direct => self.shared.insert_alone(row).await,
            How::Grouped(tx) => {
                let (reply, answer) = oneshot::channel();
                let job = Job {
                    row: row.clone(),
                    reply,
                };
                if tx.send(job).await.is_err() {
                    return Err(sqlx::Error::PoolClosed);
                }
                answer.await.unwrap_or(Err(sqlx::Error::PoolClosed))
            }
        }
    }
}

impl Shared {
    fn new(pool: PgPool, backend: Backend) -> Arc<Self> {
        Arc::new(Shared { pool, backend })
    }

    /// One row in a statement and a commit of its own.
    async fn insert_alone(&self, row: &NewCommand) -> Answer {
        submissions::insert_pending_alone(&self.pool, self.backend, row).await
    }

    async fn flush(&self, jobs: Vec<Job>) {
        if jobs.len() <= 1 {
            // One row: alone, with its own answer (and its own error).
            for job in jobs {
                let _ = job.reply.send(self.insert_alone(&job.row).await);
            }
            return;
        }
        let rows: Vec<&NewCommand> = jobs.iter().map(|j| &j.row).collect();
        match submissions::insert_pending_many(&self.pool, self.backend, &rows).await {
            Ok(inserted) => {
                let mut by_id: HashMap<Uuid, CommandRow> =
                    inserted.into_iter().map(|r| (r.id, r)).collect();
                for job in jobs {
                    let _ = job.reply.send(Ok(by_id.remove(&job.row.id)));
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, rows = jobs.len(), "group insert failed; each row alone");
                for job in jobs {
                    let _ = job.reply.send(self.insert_alone(&job.row).await);
                }
            }
        }
    }
}

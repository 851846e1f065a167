//! The use cases both front ends call (the HTTP API and the command line):
//! no axum, no clap. Each takes the pool (and the wake-up, when it records
//! a pending command) and answers with a [`LedgerError`] that the API maps
//! to problem+json and the command line to a message.
//!
//! - [`submit`]: admission (key, intent guard, holds), recording, wake-up.
//! - [`holds`]: release (record + wake) and reject.
//! - [`cancel`]: cancel while no effect was attempted (SERIALIZABLE, retried).
//! - [`resolutions`]: what became of an ambiguous command, said by an
//!   operator or asked of the reconcile probe now.
//! - [`probe`]: the seam through which a front end asks a reconcile probe.
//! - [`wake`]: waking custodians, and (on a distributed backend) waiters, after a commit.
//! - [`webhooks`]: an operator's redelivery of a webhook event.

pub mod cancel;
pub mod holds;
pub mod probe;
pub mod resolutions;
pub mod submit;
pub mod wake;
pub mod webhooks;

pub use wake::{OutcomeWake, PendingWake};

use crate::db::txn::TxError;
use crate::domain::args_schema::SchemaMismatch;
use crate::domain::schedule::ScheduleError;
use crate::domain::{CanonError, CommandState, KeyError};

/// Why a use case refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// No such command or hold (or not visible to this principal).
    #[error("not found")]
    NotFound,
    /// The idempotency key is missing (or malformed).
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The arguments cannot be put in canonical form unambiguously.
    #[error(transparent)]
    InvalidArgs(#[from] CanonError),
    /// The arguments do not match the kind's declared `args_schema`.
    #[error(transparent)]
    ArgsMismatch(#[from] SchemaMismatch),
    /// The command's `not_before`, deadline or priority cannot be had.
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    /// The key already names a different request.
    #[error("idempotency key reused for a different request (command {command_id})")]
    KeyConflict {
        command_id: uuid::Uuid,
        stored_digest: String,
        incoming_digest: String,
        /// JSON pointers into the canonical forms where the two requests differ.
        differences: Vec<String>,
    },
    /// A near-duplicate the kind's policy refuses.
    #[error("near-duplicate of command {command_id}")]
    NearDuplicate { command_id: uuid::Uuid },
    /// The hold was decided already.
    #[error("hold {hold_id} is {state} already")]
    HoldDecided { hold_id: uuid::Uuid, state: String },
    /// The hold's intent was applied after the hold opened, and the release
    /// did not confirm that applied command.
    #[error(
        "command {applied_command_id} applied this intent after hold {hold_id} was opened: releasing would apply it again; confirm with confirm_applied = {applied_command_id}"
    )]
    HoldIntentApplied {
        hold_id: uuid::Uuid,
        applied_command_id: uuid::Uuid,
    },
    /// The command is past `prepared`: an effect may have been attempted.
    #[error("command {command_id} is {state} and can no longer be cancelled")]
    CancelTooLate {
        command_id: uuid::Uuid,
        state: CommandState,
    },
    /// Only an ambiguous command is probed again or resolved.
    #[error(
        "command {command_id} is {state}, not ambiguous: only an ambiguous command is probed again or resolved"
    )]
    NotAmbiguous {
        command_id: uuid::Uuid,
        state: CommandState,
    },
    /// A resolution is recorded once and never changed.
    #[error(
        "command {command_id} has a recorded resolution already; resolutions are never changed"
    )]
    AlreadyResolved { command_id: uuid::Uuid },
    /// A finding about an effect that cannot be recorded as it is.
    #[error("{0}")]
    InvalidResolution(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    /// A transaction that did not commit, or whose commit is unknown.
    #[error(transparent)]
    Tx(#[from] TxError),
    #[error(transparent)]
    Internal(anyhow::Error),
}

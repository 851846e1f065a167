//! The pure core: what a command is, which state changes are allowed, how a
//! request is digested, and what a repeated request means. No IO lives here:
//! no database, no runtime, no HTTP; time and randomness come in as arguments.

pub mod admission;
pub mod args_schema;
pub mod canon_error;
pub mod canonical;
pub mod digest;
pub mod hold;
pub mod idempotency_key;
pub mod identity;
pub mod json_keys;
pub mod limits;
pub mod money;
pub mod names;
pub mod outcome;
pub mod recovery;
pub mod retry;
pub mod schedule;
pub mod state;
pub mod token;
pub mod trace_context;
pub mod webhook;

pub use admission::{Disposition, disposition};
pub use canonical::{CanonError, Policy};
pub use digest::{
    CanonicalRequest, DIGEST_VERSION, RequestDigest, canonical_request, canonical_request_at,
    differences, request_digest_v1,
};
pub use idempotency_key::{IdempotencyKey, KeyError};
pub use names::{AuthorityId, AuthorityRef, Kind, NameError};
pub use outcome::{EffectOutcome, HttpAttempt, classify_http, classify_http_under};
pub use state::{CommandState, TRANSITIONS, can_transition};

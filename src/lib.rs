//! command-ledger: a durable command ledger on PostgreSQL.
//!
//! Every effect-bearing command is recorded as a `pending` row before anything
//! is dispatched, bound to an idempotency key and to the authority that may run
//! it; repeating a request is always safe because the record, not the
//! response, decides.
//!
//! - [`domain`]: the pure core (state machine, request digest, dispositions).
//! - [`db`]: all SQL, as small functions over an executor.
//! - [`http`]: the axum API: parse, consult the domain, call the database, answer.
//! - [`embedded_pg`]: the private PostgreSQL cluster used when no `DATABASE_URL` is set.
//! - [`cli`]: the command line (`serve`, `migrate`, `token ...`).
//! - [`telemetry`]: logging setup.

pub mod catalog;
pub mod cli;
pub mod crash;
pub mod custodian;
pub mod db;
pub mod demo_sink;
pub mod domain;
pub mod embedded_pg;
pub mod http;
pub mod ledger;
pub mod metrics;
pub mod telemetry;

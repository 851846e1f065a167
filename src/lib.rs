//! command-ledger: a durable command ledger on PostgreSQL.
//!
//! Every effect-bearing command is recorded as a `pending` row before anything
//! is dispatched, bound to an idempotency key and to the authority that may run
//! it; repeating a request is always safe because the record, not the
//! response, decides.
//!
//! - [`domain`]: the pure core (state machine, canonical intent, digests,
//!   admission policies, recovery decisions); no I/O.
//! - [`ledger`]: the use cases both front ends call (admission, hold
//!   decisions, cancel, resolutions of ambiguous commands, waking
//!   custodians); no axum, no clap.
//! - [`db`]: all SQL, as small functions over an executor, plus the
//!   notification channels and the retrying transaction, and what the
//!   database can do (`db::Backend`, detected once as the pool opens), and
//!   on a distributed backend the node holding an authority's shards
//!   (`db::placement`); its
//!   module doc indexes every statement that changes a command's state.
//! - [`http`]: the axum API: parse, call `ledger` or read `db`, answer
//!   (problem+json errors, waiting for outcomes, OpenAPI, the console); each
//!   route is routed at the path its OpenAPI attribute names.
//! - [`custodian`]: leases, the fenced steps (claim, start, record), the one
//!   pipeline that drives them, effects and executors, recovery.
//! - [`webhooks`]: the deliverer of outcome webhooks (signed, retried with
//!   backoff, sent only to addresses the URL rule allows).
//! - [`catalog`]: reads `ledger.toml` (the kinds) into the admission
//!   policies (`domain::admission::Policies`) and the executors' settings.
//! - [`mcp`]: the MCP server for agents: the API's kinds as tools, each call
//!   a `/v1/invoke` through the client crate.
//! - [`metrics`]: the Prometheus text format, and the custodian's counters.
//! - [`crash`]: the crash points the crash campaign arms.
//! - [`demo_sink`]: the demo payments provider, an effect target with a durable log.
//! - [`embedded_pg`]: the private PostgreSQL cluster used when no `DATABASE_URL` is set.
//! - [`cli`]: the command line, one file per subcommand group.
//! - [`bench`]: the benchmark's one door into the service (`ledger-bench`
//!   uses nothing else).
//! - [`telemetry`]: logging setup.

pub mod bench;
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
pub mod mcp;
pub mod metrics;
pub mod telemetry;
pub mod webhooks;

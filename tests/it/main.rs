//! Integration tests against a real PostgreSQL: `TEST_DATABASE_URL` when set,
//! else a private cluster started once for this test process (one fresh
//! database per test, cloned from a migrated template).

// Tests fail loudly: an unwrap is the assertion.
#![allow(clippy::unwrap_used)]

mod adapter;
mod admission;
mod auth;
mod baseline;
mod batch;
mod boundaries;
mod cancel;
mod citus;
mod client;
mod compose;
mod counters;
mod crash;
mod custodian;
mod docs;
mod fleets;
mod functions;
mod harness;
mod holds;
mod identity;
mod inspect;
mod isolation;
mod limits;
mod matrix;
mod mcp;
mod metrics;
mod monitoring;
mod outbox;
mod plans;
mod reads;
mod recovery;
mod release;
mod resolutions;
mod retention;
mod retries;
mod roles;
mod schedule;
mod schema;
mod schema_file;
mod search;
mod serve_binary;
mod step_copies;
mod storage;
mod submit;
mod telemetry;
mod tls;
mod traces;
mod verify;
mod waiting;
mod webhooks;

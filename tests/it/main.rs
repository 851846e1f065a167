//! Integration tests against a real PostgreSQL: `TEST_DATABASE_URL` when set,
//! else a private cluster started once for this test process (one fresh
//! database per test, cloned from a migrated template).

// Tests fail loudly: an unwrap is the assertion.
#![allow(clippy::unwrap_used)]

mod adapter;
mod admission;
mod auth;
mod batch;
mod cancel;
mod citus;
mod client;
mod crash;
mod custodian;
mod fleets;
mod harness;
mod inspect;
mod matrix;
mod mcp;
mod metrics;
mod outbox;
mod reads;
mod recovery;
mod release;
mod retention;
mod schema;
mod schema_file;
mod serve_binary;
mod storage;
mod submit;
mod tls;
mod verify;

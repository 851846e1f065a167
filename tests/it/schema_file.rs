//! `docs/schema.sql` is the schema as `pg_dump --schema-only` prints it after
//! every migration, normalised so it is stable: regenerated here and
//! compared, so the schema can be read in one place and cannot drift.
//! `COMMAND_LEDGER_WRITE_SCHEMA=1 cargo test --test it schema_file` rewrites it.

use std::path::{Path, PathBuf};

use crate::harness::fresh_database;

const HEADER: &str = "\
-- The ledger's schema after the migrations in migrations/, as
-- `pg_dump --schema-only --no-owner` prints it, normalised: the version
-- lines, session SETs and \\restrict lines are left out.
--
-- Generated; do not edit. `cargo test` (tests/it/schema_file.rs) fails when
-- this file differs from what the migrations make; rewrite it with
--   COMMAND_LEDGER_WRITE_SCHEMA=1 cargo test --test it schema_file
";

/// The pg_dump major version the file was written with: other versions
/// print the same schema differently, so they are not compared.
const PG_DUMP_MAJOR_LINE: &str = "-- pg_dump major version: ";

/// Leaves out what changes from run to run or says nothing about the schema.
pub(crate) fn normalise(dump: &str) -> String {
    let mut out = String::new();
    let mut blank = true;
    for line in dump.lines() {
        let drop = line.starts_with("\\restrict")
            || line.starts_with("\\unrestrict")
            || line.starts_with("-- Dumped from database version")
            || line.starts_with("-- Dumped by pg_dump version")
            || line.starts_with("SET ")
            || line.starts_with("SELECT pg_catalog.set_config(");
        if drop {
            continue;
        }
        let line = line.trim_end();
        if line.is_empty() {
            if !blank {
                out.push('\n');
            }
            blank = true;
            continue;
        }
        out.push_str(&policy_roles_sorted(line));
        out.push('\n');
        blank = false;
    }
    out
}

/// A `CREATE POLICY` line with its roles in name order. pg_dump lists them
/// in the order it reads `pg_authid`, and that order moves whenever a role
/// is altered (the harness sets the service roles' passwords each run).
fn policy_roles_sorted(line: &str) -> String {
    let Some(rest) = line.strip_prefix("CREATE POLICY ") else {
        return line.to_owned();
    };
    let Some(to) = rest.find(" TO ") else {
        return line.to_owned();
    };
    let roles_start = to + " TO ".len();
    let roles_end = [" USING (", " WITH CHECK (", ";"]
        .iter()
        .filter_map(|end| rest[roles_start..].find(end))
        .min()
        .map_or(rest.len(), |i| roles_start + i);
    let mut roles: Vec<&str> = rest[roles_start..roles_end].split(", ").collect();
    roles.sort_unstable();
    format!(
        "CREATE POLICY {}{}{}",
        &rest[..roles_start],
        roles.join(", "),
        &rest[roles_end..]
    )
}

/// The pg_dump beside the PostgreSQL binaries the tests run (`None`, saying
/// why, when there is none).
pub(crate) fn pg_dump() -> Option<PathBuf> {
    let Ok(bin) = command_ledger::embedded_pg::find_bin_dir() else {
        eprintln!("skipped: no PostgreSQL binaries here, so no pg_dump");
        return None;
    };
    // Beside the real initdb (the one on PATH may be a lone symlink).
    let initdb = std::fs::canonicalize(bin.join("initdb")).unwrap_or_else(|_| bin.join("initdb"));
    let pg_dump = initdb.with_file_name("pg_dump");
    if !pg_dump.is_file() {
        eprintln!("skipped: no pg_dump beside {}", initdb.display());
        return None;
    }
    Some(pg_dump)
}

#[tokio::test]
async fn docs_schema_sql_is_what_the_migrations_make() {
    if crate::harness::lacks!(
        local_tables,
        "docs/schema.sql is the schema of local tables; distributed ones are rekeyed"
    ) {
        return;
    }
    let Some(pg_dump) = pg_dump() else {
        return;
    };
    let version = std::process::Command::new(&pg_dump)
        .arg("--version")
        .output()
        .expect("pg_dump runs");
    let version = String::from_utf8_lossy(&version.stdout);
    // "pg_dump (PostgreSQL) 15.18 (Debian ...)"
    let major = version
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.split('.').next())
        .expect("pg_dump prints its version")
        .to_owned();

    let (url, pool) = fresh_database().await;
    let dump = std::process::Command::new(&pg_dump)
        .args(["--schema-only", "--no-owner", &url])
        .output()
        .expect("pg_dump runs");
    assert!(
        dump.status.success(),
        "pg_dump failed: {}",
        String::from_utf8_lossy(&dump.stderr)
    );
    pool.close().await;
    let current = format!(
        "{HEADER}{PG_DUMP_MAJOR_LINE}{major}\n\n{}",
        normalise(&String::from_utf8(dump.stdout).expect("pg_dump prints UTF-8"))
    );

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/schema.sql");
    if std::env::var_os("COMMAND_LEDGER_WRITE_SCHEMA").is_some() {
        std::fs::write(&path, &current).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let committed_major = committed
        .lines()
        .find_map(|l| l.strip_prefix(PG_DUMP_MAJOR_LINE))
        .unwrap_or_default();
    if !committed.is_empty() && committed_major != major {
        eprintln!(
            "skipped: docs/schema.sql was written by pg_dump {committed_major}, this is pg_dump {major}"
        );
        return;
    }
    assert!(
        committed == current,
        "docs/schema.sql differs from the schema the migrations make; \
         rewrite it with COMMAND_LEDGER_WRITE_SCHEMA=1 cargo test --test it schema_file \
         and review the diff"
    );
}

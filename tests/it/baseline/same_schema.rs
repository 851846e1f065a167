//! Whether two databases have one schema: the coordinator's (or the one
//! node's) pg_dump, owners and rights included, and on Citus each worker's
//! shard triggers, functions and policies. Citus's own views are left out
//! ([`without_citus_own_objects`]), and shards distributed before 0033 lack
//! two triggers ([`SHARDS_DISTRIBUTED_BEFORE_0033_LACK`]).

use std::collections::BTreeMap;
use std::path::Path;

use sqlx::PgPool;

use crate::harness::citus;
use crate::schema_file::normalise;

/// The schema as pg_dump prints it, owners and rights included, and the
/// reference tables' rows.
pub(super) fn schema_of(pg_dump: &Path, url: &str) -> String {
    let out = std::process::Command::new(pg_dump)
        .args(["--schema-only", url])
        .output()
        .expect("pg_dump runs");
    assert!(
        out.status.success(),
        "pg_dump failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let data = std::process::Command::new(pg_dump)
        .args(["--data-only", "--inserts", "-t", "command_states"])
        .args([
            "-t",
            "command_transitions",
            "-t",
            "ledger_distribution",
            url,
        ])
        .output()
        .expect("pg_dump runs");
    assert!(data.status.success());
    // The rows sorted: pg_dump prints a table's rows in the order they lie
    // on disk, which an earlier update or a freed slot decides.
    let data = String::from_utf8(data.stdout).unwrap();
    let mut rows: Vec<&str> = data
        .lines()
        .filter(|l| l.starts_with("INSERT INTO"))
        .collect();
    rows.sort_unstable();
    let rest: Vec<&str> = data
        .lines()
        .filter(|l| !l.starts_with("INSERT INTO"))
        .collect();
    let dump = normalise(&format!(
        "{}\n{}\n{}",
        String::from_utf8(out.stdout).unwrap(),
        rest.join("\n"),
        rows.join("\n")
    ));
    if citus() {
        without_citus_own_objects(&dump)
    } else {
        dump
    }
}

/// A Citus database's dump without the entries of Citus's own objects in
/// the schema (its views `citus_tables`, `citus_schemas`): 0016 gave every
/// table and view of the schema to the owner, Citus's among them where the
/// extension was there already (a database made on Citus from 0001), and a
/// baseline does not touch them. Everything of the ledger's is compared.
fn without_citus_own_objects(dump: &str) -> String {
    let lines: Vec<&str> = dump.lines().collect();
    let mut out = Vec::with_capacity(lines.len());
    let mut skipping = false;
    for (i, line) in lines.iter().enumerate() {
        // An entry opens with "--", its "-- Name: ..." line, and "--".
        if *line == "--"
            && let Some(name) = lines.get(i + 1).and_then(|l| entry_name(l))
        {
            skipping = name.starts_with("citus_");
        }
        if !skipping {
            out.push(*line);
        }
    }
    out.join("\n") + "\n"
}

/// The object an entry's `-- Name: ...` line names (after its kind, as in
/// `TABLE citus_tables`).
fn entry_name(line: &str) -> Option<&str> {
    let name = line.strip_prefix("-- Name: ")?;
    Some(match name.split_once(' ') {
        Some((kind, rest)) if kind.chars().all(|c| c.is_ascii_uppercase()) => rest,
        _ => name,
    })
}

/// Fails, showing where, unless the databases at `baseline` and `other`
/// have one schema; returns it.
pub(super) fn assert_same_schema(pg_dump: &Path, baseline: &str, other: &str) -> String {
    let want = schema_of(pg_dump, baseline);
    let got = schema_of(pg_dump, other);
    assert!(want.contains("CREATE TABLE public.commands"));
    if want != got {
        let first = want
            .lines()
            .zip(got.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        let around = |s: &str| {
            s.lines()
                .skip(first.saturating_sub(8))
                .take(20)
                .collect::<Vec<_>>()
                .join("\n")
        };
        panic!(
            "the schemas differ at line {first}:\n--- the baseline\n{}\n--- the other\n{}",
            around(&want),
            around(&got)
        );
    }
    got
}

/// On Citus, what pg_dump of the coordinator does not show: on each worker,
/// the triggers of the shards (with their state), the functions (the steps'
/// copies by shard among them) with their owners, and the policies, with
/// every shard's number left out (two databases' shards have different
/// ones). Empty off Citus.
async fn workers_of(pool: &PgPool) -> Vec<String> {
    if !citus() {
        return Vec::new();
    }
    sqlx::query_as(
        r"select success, result from run_command_on_workers($cmd$
              select string_agg(x, E'\n' order by x) from (
                  select regexp_replace(pg_get_triggerdef(t.oid), '_[0-9]+\M', '_N', 'g')
                         || ' ' || t.tgenabled::text as x
                  from pg_trigger t join pg_class c on c.oid = t.tgrelid
                  where c.relnamespace = 'public'::regnamespace and not t.tgisinternal
                  union all
                  select regexp_replace(p.oid::regprocedure::text, '_s[0-9]+\(', '_sN(')
                         || ' ' || pg_get_userbyid(p.proowner) || ' ' || coalesce(p.proacl::text, '')
                  from pg_proc p
                  where p.pronamespace = 'public'::regnamespace
                    and not exists (select 1 from pg_depend d where d.objid = p.oid and d.deptype = 'e')
                  union all
                  select regexp_replace(format('%s on %s', pl.policyname, pl.tablename), '_[0-9]+\M', '_N', 'g')
                  from pg_policies pl where pl.schemaname = 'public') s
          $cmd$) order by nodeport",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .map(|(answered, result): (bool, String)| {
        assert!(answered, "a worker: {result}");
        result
    })
    .collect()
}

/// What the shards of a database distributed before 0033 lack: 0033 made
/// the TRUNCATE refusals of `command_queue` and `command_in_flight`
/// statement triggers of their own (`*_kept`) on the coordinator's tables,
/// and Citus copies a statement trigger to the shards only when it
/// distributes a table. A TRUNCATE through the coordinator is refused in
/// either database (by the coordinator's trigger); one run on a worker's
/// shard directly, only where the tables were distributed after 0033, as a
/// fresh database's are.
pub(super) const SHARDS_DISTRIBUTED_BEFORE_0033_LACK: [&str; 2] = [
    "CREATE TRIGGER command_queue_kept_N BEFORE TRUNCATE ON public.command_queue_N ",
    "CREATE TRIGGER command_in_flight_kept_N BEFORE TRUNCATE ON public.command_in_flight_N ",
];

/// Fails, showing what differs, unless the workers of the databases at
/// `baseline` and `other` hold the same ([`workers_of`]), but for the
/// baseline's lines that begin with one of `lacking`.
pub(super) async fn assert_same_workers(baseline: &PgPool, other: &PgPool, lacking: &[&str]) {
    let want: Vec<String> = workers_of(baseline)
        .await
        .iter()
        .map(|worker| {
            worker
                .lines()
                .filter(|line| !lacking.iter().any(|l| line.starts_with(l)))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    let got = workers_of(other).await;
    assert_eq!(want.len(), got.len(), "the workers");
    for (worker, (want, got)) in want.iter().zip(&got).enumerate() {
        let count = |text: &str| {
            let mut lines = BTreeMap::<String, i32>::new();
            for line in text.lines() {
                *lines.entry(line.to_owned()).or_default() += 1;
            }
            lines
        };
        let (want, got) = (count(want), count(got));
        let only = |a: &BTreeMap<String, i32>, b: &BTreeMap<String, i32>| {
            a.iter()
                .filter(|(line, n)| b.get(*line) != Some(n))
                .map(|(line, n)| format!("{n} x {line}"))
                .collect::<Vec<_>>()
        };
        assert!(
            want == got,
            "worker {worker}: the baseline's database has {:#?}\nthe other {:#?}",
            only(&want, &got),
            only(&got, &want)
        );
    }
}

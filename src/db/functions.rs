//! The current text of every function, trigger function and view of the
//! schema, one file each: `migrations/functions/<name>.sql`, and beside it
//! `<name>.citus.sql` where a Citus database holds another text (a file
//! without a statement: none there). Embedded when the crate compiles
//! (`build.rs`).
//!
//! [`apply`] runs after the versioned migrations, in the manner of
//! repeatable migrations: a file whose text is not the one the database
//! recorded (`ledger_function_sources`, migration 0041) is applied again,
//! and every file is applied again after a run that applied a versioned
//! migration (which may have replaced a function its file holds). So a
//! change to a function is a change to its file, and a migration only
//! changes tables (or drops a function whose signature changes). A test
//! (`tests/it/functions.rs`) compares the database's definitions, owners,
//! rights and comments with what the files make.

use sha2::{Digest as _, Sha256};
use sqlx::PgConnection;

/// Every file of `migrations/functions`, by file name, in name order.
static FILES: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/functions.rs"));

/// A database's layout, as the files are chosen for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    OneNode,
    Citus,
}

impl Layout {
    /// The part of a file's name (`<name>.<marker>.sql`) that marks this
    /// layout's own text.
    fn marker(self) -> Option<&'static str> {
        match self {
            Layout::OneNode => None,
            Layout::Citus => Some("citus"),
        }
    }
}

/// One function's or view's text for a layout.
#[derive(Clone, Copy, Debug)]
pub struct Source {
    /// The object's name (the file's name without layout and extension).
    pub name: &'static str,
    /// The file, under `migrations/functions/`.
    pub file: &'static str,
    pub text: &'static str,
}

impl Source {
    /// SHA-256 of the text: what the database records as applied.
    pub fn checksum(&self) -> Vec<u8> {
        Sha256::digest(self.text.as_bytes()).to_vec()
    }

    /// Whether the file holds a statement (one without: the object does not
    /// exist in this layout).
    pub fn defines(&self) -> bool {
        self.text.lines().any(|line| {
            let line = line.trim();
            !line.is_empty() && !line.starts_with("--")
        })
    }
}

/// The files for `layout`: each object's own file for the layout where it
/// has one, else its common file, in name order.
pub fn sources(layout: Layout) -> Vec<Source> {
    let mut out: Vec<Source> = Vec::new();
    for (file, text) in FILES {
        let Some(stem) = file.strip_suffix(".sql") else {
            continue;
        };
        let (name, marker) = match stem.rsplit_once('.') {
            Some((name, marker)) => (name, Some(marker)),
            None => (stem, None),
        };
        if marker.is_some() && marker != layout.marker() {
            continue;
        }
        let source = Source { name, file, text };
        match out.iter_mut().find(|s| s.name == name) {
            // The layout's own file wins over the common one.
            Some(existing) if marker.is_some() => *existing = source,
            Some(_) => {}
            None => out.push(source),
        }
    }
    out.sort_by_key(|s| s.name);
    out
}

/// Every layout's files in one fingerprint: a test's template database is
/// built again when it changes.
pub fn fingerprint() -> Vec<u8> {
    let mut hash = Sha256::new();
    for (file, text) in FILES {
        hash.update(file.as_bytes());
        hash.update([0]);
        hash.update(text.as_bytes());
        hash.update([0]);
    }
    hash.finalize().to_vec()
}

/// The layout of the database `conn` is connected to.
pub async fn layout(conn: &mut PgConnection) -> Result<Layout, sqlx::Error> {
    Ok(if super::Backend::detect(&mut *conn).await?.local_tables {
        Layout::OneNode
    } else {
        Layout::Citus
    })
}

/// The files whose text the database does not hold (none recorded, or
/// another checksum), or all of them when `all`.
async fn stale(
    conn: &mut PgConnection,
    layout: Layout,
    all: bool,
) -> Result<Vec<Source>, sqlx::Error> {
    let recorded: Vec<(String, String, Vec<u8>)> =
        sqlx::query_as("select name, file, checksum from ledger_function_sources")
            .fetch_all(&mut *conn)
            .await?;
    Ok(sources(layout)
        .into_iter()
        .filter(|s| {
            all || !recorded
                .iter()
                .any(|(name, file, sum)| name == s.name && file == s.file && *sum == s.checksum())
        })
        .collect())
}

/// Whether the database holds every file's text as recorded (false before
/// migration 0041).
pub async fn current(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    let table: bool =
        sqlx::query_scalar("select to_regclass('ledger_function_sources') is not null")
            .fetch_one(&mut *conn)
            .await?;
    if !table {
        return Ok(false);
    }
    let layout = layout(&mut *conn).await?;
    Ok(stale(&mut *conn, layout, false).await?.is_empty())
}

/// Applies the files the database does not hold (every file when `all`), in
/// one transaction, in name order, and records them; returns how many it
/// applied. Run by [`super::migrate`] as the schema's owner, with the
/// engine's role granted, after the versioned migrations and before Citus
/// distributes (the engine steps' files give them to the engine's role).
/// Serialised with other processes migrating by a lock of its own; the
/// files are chosen again under it.
pub async fn apply(conn: &mut PgConnection, all: bool) -> Result<usize, sqlx::Error> {
    let layout = layout(&mut *conn).await?;
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    sqlx::query("select pg_advisory_xact_lock(hashtext('ledger_function_sources'))")
        .execute(&mut *tx)
        .await?;
    let stale = stale(&mut tx, layout, all).await?;
    for source in &stale {
        sqlx::raw_sql(sqlx::AssertSqlSafe(source.text))
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "insert into ledger_function_sources (name, file, checksum, applied_at)
             values ($1, $2, $3, now())
             on conflict (name) do update
             set file = excluded.file, checksum = excluded.checksum, applied_at = excluded.applied_at",
        )
        .bind(source.name)
        .bind(source.file)
        .bind(source.checksum())
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(stale.len())
}

#[cfg(test)]
mod tests {
    use super::{Layout, sources};

    #[test]
    fn each_object_has_one_file_per_layout_the_layouts_own_first() {
        let one = sources(Layout::OneNode);
        let citus = sources(Layout::Citus);
        assert!(one.iter().all(|s| !s.file.contains(".citus.")));
        // The same objects in both layouts (a file without a statement
        // says the object is absent from its layout).
        let names = |s: &[super::Source]| s.iter().map(|s| s.name).collect::<Vec<_>>();
        assert_eq!(names(&one), names(&citus));
        let record = citus
            .iter()
            .find(|s| s.name == "ledger_record_outcomes")
            .unwrap();
        assert_eq!(record.file, "ledger_record_outcomes.citus.sql");
        let guard = citus.iter().find(|s| s.name == "commands_guard").unwrap();
        assert_eq!(guard.file, "commands_guard.sql");
        let claim = citus
            .iter()
            .find(|s| s.name == "ledger_claim_start")
            .unwrap();
        assert!(!claim.defines());
        // Every object exists in a layout at least: one of one node alone has
        // a Citus file without a statement, one of Citus alone (the limits'
        // places, 0049) a common file without one.
        assert!(
            one.iter()
                .zip(&citus)
                .all(|(o, c)| o.defines() || c.defines())
        );
        let places = one
            .iter()
            .find(|s| s.name == "ledger_provider_hold")
            .unwrap();
        assert!(!places.defines());
    }

    #[test]
    fn every_file_names_its_object() {
        for s in sources(Layout::OneNode)
            .into_iter()
            .chain(sources(Layout::Citus))
            .filter(|s| s.defines())
        {
            let text = s.text.to_lowercase();
            let defines = [
                format!("function public.{}(", s.name),
                format!("view {} as", s.name),
            ];
            assert!(
                defines.iter().any(|d| text.contains(d)),
                "{} does not create {}",
                s.file,
                s.name
            );
        }
    }
}

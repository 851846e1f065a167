//! `command-ledger verify [--authority A] [--since T] [--json] [--digest FILE]
//! [--against FILE]`: recomputes every history chain (live and archived) and
//! the link between each command's row and its last entry, names every
//! break, and fails when there is one. `--digest` writes the chain heads and
//! prints one hash over them, to publish; `--against` checks later that
//! every head it lists is still in its chain with the same hash, so that
//! nothing before it changed (pruning keeps the chains, so it survives).

use anyhow::{Context as _, bail};
use chrono::{DateTime, Utc};
use clap::Args;
use serde_json::json;
use sha2::{Digest as _, Sha256};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;
use uuid::Uuid;

use super::Database;
use crate::db::verify::{self, Break, ChainReport};

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Only the commands of this authority.
    #[arg(long)]
    authority: Option<String>,
    /// Only commands recorded since: a duration back from now (30m, 2h, 7d)
    /// or an RFC 3339 instant.
    #[arg(long, value_parser = since)]
    since: Option<DateTime<Utc>>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
    /// Also write the chain heads to FILE (one line per command) and print
    /// the digest over them: publish that hash somewhere the database's
    /// administrators cannot rewrite.
    #[arg(long, value_name = "FILE")]
    digest: Option<PathBuf>,
    /// Check the chain heads of a digest written earlier by --digest: each
    /// must still be in its chain with the same hash.
    #[arg(long, value_name = "FILE")]
    against: Option<PathBuf>,
}

fn since(s: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(d) = super::duration(s) {
        let d = chrono::Duration::from_std(d).map_err(|e| e.to_string())?;
        return Ok(Utc::now() - d);
    }
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| format!("{s:?} is neither a duration (30m, 2h, 7d) nor an RFC 3339 instant"))
}

/// A chain head a digest lists: command, entry, hash.
type Head = (Uuid, i64, Vec<u8>);

const DIGEST_HEADER: &str = "command-ledger chain heads v1";

/// The digest document: a header, the time, one `command entry hash` line
/// per chain head (by command id), then `digest <sha256 of all the lines
/// above>`.
pub(crate) fn digest_document(reports: &[ChainReport], taken: DateTime<Utc>) -> (String, String) {
    let mut body = format!(
        "{DIGEST_HEADER}\ntaken {}\n",
        taken.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
    );
    for r in reports {
        if let Some((id, hash)) = &r.head {
            let _ = writeln!(body, "{} {id} {}", r.command_id, hex::encode(hash));
        }
    }
    let digest = hex::encode(Sha256::digest(body.as_bytes()));
    let _ = writeln!(body, "digest {digest}");
    (body, digest)
}

/// The heads a digest document lists, after checking that its last line is
/// the hash of the others (returned).
pub(crate) fn parse_digest(text: &str) -> anyhow::Result<(String, Vec<Head>)> {
    let body_end = text
        .trim_end_matches('\n')
        .rfind('\n')
        .map(|i| i + 1)
        .context("not a digest document: too short")?;
    let (body, last) = text.split_at(body_end);
    let stated = last
        .trim_end()
        .strip_prefix("digest ")
        .context("not a digest document: no closing digest line")?;
    let actual = hex::encode(Sha256::digest(body.as_bytes()));
    if stated != actual {
        bail!(
            "the digest file was altered: its lines hash to {actual}, it says {stated} \
             (compare both with the digest that was published)"
        );
    }
    let mut lines = body.lines();
    if lines.next() != Some(DIGEST_HEADER) {
        bail!("not a digest document: the first line is not {DIGEST_HEADER:?}");
    }
    let mut heads = Vec::new();
    for line in lines.filter(|l| !l.starts_with("taken ")) {
        let mut parts = line.split(' ');
        let (Some(c), Some(e), Some(h), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            bail!("not a digest document: line {line:?}");
        };
        heads.push((
            c.parse()
                .with_context(|| format!("command id in {line:?}"))?,
            e.parse().with_context(|| format!("entry id in {line:?}"))?,
            hex::decode(h).with_context(|| format!("hash in {line:?}"))?,
        ));
    }
    Ok((stated.to_owned(), heads))
}

/// What a digest's heads say now.
async fn check_against(
    db: &Database,
    heads: &[Head],
    reports: &[ChainReport],
    filtered: bool,
) -> anyhow::Result<Vec<Break>> {
    // With a filter, only the heads of the commands in view are checked.
    let in_view: std::collections::HashSet<Uuid> = reports.iter().map(|r| r.command_id).collect();
    let wanted: Vec<&Head> = heads
        .iter()
        .filter(|(c, _, _)| !filtered || in_view.contains(c))
        .collect();
    let keys: Vec<(Uuid, i64)> = wanted.iter().map(|(c, e, _)| (*c, *e)).collect();
    let now = verify::entry_hashes(&db.pool, &keys)
        .await
        .context("reading the digest's entries")?;
    Ok(wanted
        .iter()
        .zip(now)
        .filter_map(|((command, entry, hash), now)| match now {
            None => Some(Break {
                command_id: *command,
                entry_id: Some(*entry),
                kind: "digest_head_missing",
                detail: "the digest's head entry of this command is gone (deleted, or the command removed without its archive)".to_owned(),
            }),
            Some(h) if h != *hash => Some(Break {
                command_id: *command,
                entry_id: Some(*entry),
                kind: "digest_head_changed",
                detail: format!(
                    "the entry's hash is {} now, the digest says {}: it or an entry before it was rewritten",
                    hex::encode(h),
                    hex::encode(hash)
                ),
            }),
            Some(_) => None,
        })
        .collect())
}

pub(super) async fn run(
    url: Option<String>,
    state_dir: &Path,
    args: VerifyArgs,
) -> anyhow::Result<()> {
    // Read the digest to check against first: a bad file fails before the work.
    let against = match &args.against {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Some(parse_digest(&text).with_context(|| format!("{}", path.display()))?)
        }
        None => None,
    };
    Database::with(url, state_dir, async |db| {
        verify_with(db, &args, against).await
    })
    .await
}

async fn verify_with(
    db: &Database,
    args: &VerifyArgs,
    against: Option<(String, Vec<Head>)>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let taken = Utc::now();
    let reports = verify::chains(&db.pool, args.authority.as_deref(), args.since)
        .await
        .context("recomputing the history chains")?;
    let mut breaks: Vec<Break> = reports.iter().flat_map(|r| r.breaks.clone()).collect();
    breaks.extend(
        verify::resolutions(&db.pool, args.authority.as_deref(), args.since)
            .await
            .context("checking the resolutions of ambiguous commands")?,
    );
    let filtered = args.authority.is_some() || args.since.is_some();
    if let Some((_, heads)) = &against {
        breaks.extend(check_against(db, heads, &reports, filtered).await?);
    }
    let seconds = started.elapsed().as_secs_f64();
    let digest = match &args.digest {
        Some(path) => {
            let (document, digest) = digest_document(&reports, taken);
            std::fs::write(path, document)
                .with_context(|| format!("writing {}", path.display()))?;
            Some(digest)
        }
        None => None,
    };

    let live = reports.iter().filter(|r| r.live).count();
    let archived = reports.iter().filter(|r| r.has_row && !r.live).count();
    let entries: i64 = reports.iter().map(|r| r.entries).sum();
    #[allow(clippy::print_stdout)]
    if args.json {
        let doc = json!({
            "ok": breaks.is_empty(),
            "commands": live,
            "archived": archived,
            "entries": entries,
            "seconds": seconds,
            "digest": digest,
            "against": against.as_ref().map(|(d, heads)| json!({"digest": d, "heads": heads.len()})),
            "breaks": breaks.iter().map(|b| json!({
                "command_id": b.command_id,
                "entry_id": b.entry_id,
                "kind": b.kind,
                "detail": b.detail,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        for b in &breaks {
            let entry = b
                .entry_id
                .map(|e| format!(" entry {e}"))
                .unwrap_or_default();
            println!(
                "BREAK {} command {}{entry}: {}",
                b.kind, b.command_id, b.detail
            );
        }
        if let Some((d, heads)) = &against {
            println!("checked {} chain head(s) of digest {d}", heads.len());
        }
        println!(
            "{} live and {archived} archived command(s), {entries} history entries: {} in {seconds:.1} s",
            live,
            if breaks.is_empty() {
                "every chain verifies".to_owned()
            } else {
                format!("{} break(s)", breaks.len())
            },
        );
        if let (Some(d), Some(path)) = (&digest, &args.digest) {
            println!(
                "digest {d} over {} chain head(s), written to {}",
                reports.iter().filter(|r| r.head.is_some()).count(),
                path.display()
            );
        }
    }
    if !breaks.is_empty() {
        bail!("the history does not verify: {} break(s)", breaks.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(id: u128, head: Option<(i64, Vec<u8>)>) -> ChainReport {
        ChainReport {
            command_id: Uuid::from_u128(id),
            live: true,
            has_row: true,
            entries: 1,
            head,
            breaks: Vec::new(),
        }
    }

    #[test]
    fn a_digest_document_reads_back_as_the_heads_it_lists() {
        let reports = [report(1, Some((7, vec![0xab; 32]))), report(2, None)];
        let (doc, digest) = digest_document(&reports, Utc::now());
        let (stated, heads) = parse_digest(&doc).unwrap();
        assert_eq!(stated, digest);
        assert_eq!(heads, vec![(Uuid::from_u128(1), 7, vec![0xab; 32])]);
    }

    #[test]
    fn an_altered_digest_document_is_refused() {
        let reports = [report(1, Some((7, vec![0xab; 32])))];
        let (doc, _) = digest_document(&reports, Utc::now());
        let altered = doc.replace(" 7 ", " 8 ");
        let err = parse_digest(&altered).unwrap_err().to_string();
        assert!(err.contains("altered"), "{err}");
    }
}

//! The docs quote figures from raw output committed under `docs/runs/`:
//! every such file that README.md or docs/*.md cites exists (a fresh clone
//! has exactly what is committed), and the fuzzing figures of
//! docs/SECURITY.md are the ones its raw output holds.

use std::path::{Component, Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// README.md and every docs/*.md, as paths from the repository's root.
fn documents() -> Vec<String> {
    let mut docs = vec!["README.md".to_owned()];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".md") {
            docs.push(format!("docs/{name}"));
        }
    }
    docs.sort();
    docs
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '_' | '-')
}

/// Every `runs/...` file or folder cited in `text`, the text of the
/// document at `document` (a path from the root), as a path from the root:
/// `docs/runs/...` is read from the root (as commands in the docs run),
/// anything else from the document's folder.
fn cited_runs(document: &str, text: &str) -> Vec<String> {
    let folder = Path::new(document).parent().unwrap_or(Path::new(""));
    let mut cited = Vec::new();
    for (at, _) in text.match_indices("runs/") {
        let before = &text[..at];
        if before
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            continue; // "reruns/", not a citation
        }
        let start = before
            .char_indices()
            .rev()
            .take_while(|(_, c)| is_path_char(*c))
            .last()
            .map_or(at, |(i, _)| i);
        let rest = &text[at..];
        let end = at + rest.find(|c: char| !is_path_char(c)).unwrap_or(rest.len());
        let token = text[start..end].trim_end_matches('.');
        if token.len() <= start.abs_diff(at) + "runs/".len() || token.contains("//") {
            continue; // "runs/" alone (a glob, prose) or part of a URL
        }
        let relative = if token.starts_with("docs/") {
            PathBuf::from(token)
        } else {
            folder.join(token)
        };
        let mut normal = PathBuf::new();
        for part in relative.components() {
            match part {
                Component::ParentDir => {
                    normal.pop();
                }
                Component::CurDir => {}
                other => normal.push(other),
            }
        }
        cited.push(normal.to_string_lossy().into_owned());
    }
    cited
}

#[test]
fn citations_of_raw_output_are_found_wherever_they_are_written() {
    let text = "See [runs/a.txt](runs/a.txt). Run it: `x > docs/runs/b.txt`; \
                the folder runs/c/results.json, ../docs/runs/d.txt, \
                reruns/e.txt, every runs/*.txt, https://example.com/actions/runs/7.";
    assert_eq!(
        cited_runs("docs/PERFORMANCE.md", text),
        [
            "docs/runs/a.txt",
            "docs/runs/a.txt",
            "docs/runs/b.txt",
            "docs/runs/c/results.json",
            "docs/runs/d.txt"
        ]
    );
    assert_eq!(
        cited_runs("README.md", "[the run](docs/runs/f.txt)"),
        ["docs/runs/f.txt"]
    );
}

#[test]
fn every_raw_output_the_docs_cite_is_committed() {
    let mut cited = 0;
    let mut missing = Vec::new();
    for document in documents() {
        for path in cited_runs(&document, &read(&document)) {
            cited += 1;
            if !root().join(&path).exists() {
                missing.push(format!(
                    "{document} cites {path}, which is not in the repository"
                ));
            }
        }
    }
    // The docs cite a few dozen today: finding none means the search broke.
    assert!(cited >= 20, "only {cited} citations of docs/runs/ found");
    assert!(missing.is_empty(), "{missing:#?}");
}

/// The numbers written in `text` (`2209`, `5,105`), commas between
/// thousands removed; digits inside a word or a version (`30s`, `4.32.5`,
/// `6f2e7a4`) are not numbers.
fn numbers(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == ',' || c == '.'))
        .map(|token| token.trim_end_matches([',', '.']))
        .filter(|token| {
            let mut groups = token.split(',');
            let first = groups.next().unwrap_or("");
            !first.is_empty()
                && first.bytes().all(|b| b.is_ascii_digit())
                && (first.len() <= 3 || !token.contains(','))
                && groups.all(|g| g.len() == 3 && g.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|token| token.replace(',', ""))
        .collect()
}

#[test]
fn numbers_are_read_as_written() {
    assert_eq!(
        numbers(
            "as operator, 5,105 requests (406 stateful); 2-core, v4.32.5, `6f2e7a4`, 30s, 0 failures."
        ),
        ["5105", "406", "2", "0"]
    );
    assert_eq!(
        numbers("Test cases:\n  2209 generated, 2209 passed"),
        ["2209", "2209"]
    );
}

/// `3 seeded holds` is written `3`, `2209` as `2,209`.
fn written(digits: &str) -> String {
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[test]
fn the_fuzzing_figures_of_security_md_are_those_of_its_raw_output() {
    let security = read("docs/SECURITY.md");
    let paragraph = security
        .split("\n\n")
        .find(|p| p.contains("(runs/fuzz-api.txt)"))
        .expect("SECURITY.md cites runs/fuzz-api.txt");
    let raw = read("docs/runs/fuzz-api.txt");
    let in_raw = numbers(&raw);

    // What the raw output says, each figure of it quoted.
    let mut quoted = Vec::new();
    for line in raw.lines().map(str::trim) {
        if line.contains(" generated, ") {
            // "2209 generated, 2209 passed, 34 skipped": every case passed.
            let n = numbers(line);
            assert_eq!(n[0], n[1], "{line}");
            quoted.push(n[0].clone());
        } else if let Some(n) = line.strip_prefix("Scenarios:") {
            quoted.extend(numbers(n));
        } else if let Some(n) = ["commands ", "history ", "holds "]
            .iter()
            .find_map(|row| line.strip_prefix(row))
        {
            quoted.extend(numbers(n));
        }
    }
    assert!(quoted.len() >= 7, "the raw output's figures: {quoted:?}");
    let in_paragraph = numbers(paragraph);
    for n in &quoted {
        assert!(
            in_paragraph.contains(n),
            "SECURITY.md does not quote {} from runs/fuzz-api.txt:\n{paragraph}",
            written(n)
        );
    }
    // And every count of a thousand or more it quotes is one of the file's.
    for n in in_paragraph.iter().filter(|n| n.len() >= 4) {
        assert!(
            in_raw.contains(n),
            "SECURITY.md quotes {}, which runs/fuzz-api.txt does not hold:\n{paragraph}",
            written(n)
        );
    }
}

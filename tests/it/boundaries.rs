//! Boundaries a reader checks with grep, kept by the tests: only `src/db/`
//! knows which database product answers (everything else asks
//! `db::Backend`'s capabilities), and the benchmark reaches the service only
//! through `command_ledger::bench`.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `folder` (a path from the root), as paths from the root.
fn rust_files(folder: &str) -> Vec<String> {
    fn walk(root: &Path, folder: &str, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(root.join(folder)).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            let path = format!("{folder}/{name}");
            if entry.file_type().unwrap().is_dir() {
                walk(root, &path, out);
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), folder, &mut out);
    out.sort();
    out
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn only_the_database_layer_names_the_distributed_backend() {
    let naming: Vec<String> = rust_files("src")
        .into_iter()
        .filter(|path| !path.starts_with("src/db/"))
        .filter(|path| read(path).to_lowercase().contains("citus"))
        .collect();
    assert!(
        naming.is_empty(),
        "outside src/db/ code asks a capability of db::Backend, and comments say \
         \"distributed backend\"; these name the product: {naming:?}"
    );
}

#[test]
fn the_benchmark_reaches_the_service_only_through_its_bench_module() {
    let mut reaching: Vec<String> = Vec::new();
    for path in rust_files("bench/src") {
        let text = read(&path);
        for (at, _) in text.match_indices("command_ledger::") {
            let rest = &text[at + "command_ledger::".len()..];
            if !rest.starts_with("bench::") && !rest.starts_with("bench;") {
                let line = text[..at].lines().count();
                let shown: String = rest.chars().take_while(|c| *c != '\n').collect();
                reaching.push(format!("{path}:{line}: command_ledger::{shown}"));
            }
        }
    }
    assert!(
        reaching.is_empty(),
        "the benchmark uses command_ledger::bench only:\n{}",
        reaching.join("\n")
    );
}

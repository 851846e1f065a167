//! The docs quote figures from raw output committed under `docs/runs/`:
//! every such file that README.md or a page of the book (docs/**/*.md)
//! cites exists (a fresh clone has exactly what is committed), and the
//! fuzzing figures of docs/SECURITY.md are the ones its raw output holds.
//! The book's reference pages are the code's own word: the API and command
//! line pages are generated (from docs/openapi.json and `--help`; run
//! `UPDATE_DOCS=1 cargo test --test it docs::` to rewrite them), and the
//! state machine's diagram, the problem types and the CLxxx codes are
//! checked against the code.

use std::path::{Component, Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// README.md and every Markdown file under docs/, as paths from the
/// repository's root.
fn documents() -> Vec<String> {
    fn walk(folder: &str, docs: &mut Vec<String>) {
        for entry in std::fs::read_dir(root().join(folder)).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            let path = format!("{folder}/{name}");
            if entry.file_type().unwrap().is_dir() {
                walk(&path, docs);
            } else if name.ends_with(".md") {
                docs.push(path);
            }
        }
    }
    let mut docs = vec!["README.md".to_owned()];
    walk("docs", &mut docs);
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

/// Writes `generated` to `path` under `UPDATE_DOCS=1`, else asserts that
/// the committed file is exactly it.
fn generated_page(path: &str, generated: &str) {
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(root().join(path), generated).unwrap_or_else(|e| panic!("{path}: {e}"));
        return;
    }
    let committed = read(path);
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()))
            + 1;
        panic!(
            "{path} is not what the code generates (first difference at line {line}): \
             run UPDATE_DOCS=1 cargo test --test it docs:: and commit it"
        );
    }
}

#[test]
fn the_state_machine_diagram_draws_exactly_the_transitions_of_the_code() {
    use command_ledger::domain::state::TRANSITIONS;
    let dot = read("docs/diagrams/state-machine.dot");
    let mut drawn: Vec<(String, String)> = dot
        .lines()
        .map(|line| line.split("//").next().unwrap_or("").trim())
        .filter_map(|line| {
            let (from, rest) = line.split_once("->")?;
            let to = rest.split(['[', ';']).next()?;
            Some((from.trim().to_owned(), to.trim().to_owned()))
        })
        .collect();
    drawn.sort();
    let mut code: Vec<(String, String)> = TRANSITIONS
        .iter()
        .map(|(from, to)| (from.as_str().to_owned(), to.as_str().to_owned()))
        .collect();
    code.sort();
    assert_eq!(
        drawn, code,
        "docs/diagrams/state-machine.dot against domain::TRANSITIONS"
    );
}

/// The `| `x` | ...` rows of the tables in `text` whose first cell is a
/// code span starting with `prefix`, as (that cell, the row's other cells).
fn table_rows(text: &str, prefix: &str) -> Vec<(String, Vec<String>)> {
    let mut rows: Vec<(String, Vec<String>)> = text
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line
                .strip_prefix('|')?
                .strip_suffix('|')?
                .split(" | ")
                .collect();
            let first = cells.first()?.trim().strip_prefix('`')?.strip_suffix('`')?;
            first.starts_with(prefix).then(|| {
                (
                    first.to_owned(),
                    cells[1..].iter().map(|c| c.trim().to_owned()).collect(),
                )
            })
        })
        .collect();
    rows.sort();
    rows
}

/// Every `"<prefix>..."` string literal in `text`, once each, sorted.
fn quoted(text: &str, prefix: &str) -> Vec<String> {
    let mut found: Vec<String> = text
        .match_indices(&format!("\"{prefix}"))
        .filter_map(|(at, _)| {
            let rest = &text[at + 1..];
            rest.find('"').map(|end| rest[..end].to_owned())
        })
        .collect();
    found.sort();
    found.dedup();
    found
}

#[test]
fn the_problem_types_of_the_reference_are_those_the_code_answers() {
    let code = quoted(&read("src/http/error.rs"), "/problems/");
    assert!(
        code.len() >= 20,
        "the problem types of src/http/error.rs: {code:?}"
    );
    let page: Vec<String> = table_rows(&read("docs/reference/errors.md"), "/problems/")
        .into_iter()
        .map(|(kind, _)| kind)
        .collect();
    assert_eq!(
        page, code,
        "docs/reference/errors.md against src/http/error.rs"
    );
}

#[test]
fn the_sqlstate_codes_of_the_reference_are_those_the_migrations_raise() {
    let mut raised = Vec::new();
    // The versioned migrations, the legacy chain and the functions' files.
    let dirs = ["migrations", "migrations/legacy", "migrations/functions"];
    let files = dirs.iter().flat_map(|dir| {
        std::fs::read_dir(root().join(dir))
            .unwrap()
            .map(|entry| entry.unwrap().path())
    });
    for path in files {
        if path.extension().is_some_and(|e| e == "sql") {
            let sql = std::fs::read_to_string(&path).unwrap();
            for (at, _) in sql.match_indices("errcode = 'CL") {
                raised.push(sql[at + "errcode = '".len()..][..5].to_owned());
            }
        }
    }
    raised.sort();
    raised.dedup();
    assert!(
        raised.len() >= 13,
        "the codes the migrations raise: {raised:?}"
    );
    let page = table_rows(&read("docs/reference/errors.md"), "CL");
    let migrations = table_rows(&read("migrations/README.md"), "CL");
    let codes: Vec<String> = page.iter().map(|(code, _)| code.clone()).collect();
    assert_eq!(
        codes, raised,
        "docs/reference/errors.md against the migrations"
    );
    assert_eq!(
        page, migrations,
        "docs/reference/errors.md against migrations/README.md"
    );
}

/// A table cell: one line, `|` escaped.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// A schema in a few words: `X` for a reference to a named schema (a link
/// to its section), `array of ...`, `a | b` written `a or b` (a table cell
/// must not hold a `|`).
fn schema_name(schema: &serde_json::Value) -> String {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap_or(r);
        return format!("[`{name}`](#{})", name.to_lowercase());
    }
    for combinator in ["oneOf", "anyOf", "allOf"] {
        if let Some(parts) = schema[combinator].as_array() {
            let names: Vec<String> = parts.iter().map(schema_name).collect();
            let joint = if combinator == "allOf" {
                " and "
            } else {
                " or "
            };
            return names.join(joint);
        }
    }
    if let Some(items) = schema.get("items") {
        return format!("array of {}", schema_name(items));
    }
    let format = schema["format"]
        .as_str()
        .map(|f| format!(" ({f})"))
        .unwrap_or_default();
    match &schema["type"] {
        serde_json::Value::String(t) => format!("`{t}`{format}"),
        serde_json::Value::Array(types) => {
            let names: Vec<String> = types
                .iter()
                .filter_map(|t| t.as_str())
                .map(|t| format!("`{t}`"))
                .collect();
            format!("{}{format}", names.join(" or "))
        }
        _ => "any JSON".to_owned(),
    }
}

/// The properties of an object schema (and of the objects an `allOf`
/// joins), as rows of a table.
fn property_rows(schema: &serde_json::Value, md: &mut String) {
    use std::fmt::Write;
    if let Some(parts) = schema["allOf"].as_array() {
        for part in parts {
            property_rows(part, md);
        }
    }
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    if let Some(properties) = schema["properties"].as_object() {
        for (name, property) in properties {
            let _ = writeln!(
                md,
                "| `{name}` | {} | {} | {} |",
                schema_name(property),
                if required.contains(&name.as_str()) {
                    "yes"
                } else {
                    "no"
                },
                cell(property["description"].as_str().unwrap_or("")),
            );
        }
    }
}

/// The API reference page, from the OpenAPI document.
fn api_page(doc: &serde_json::Value) -> String {
    use std::fmt::Write;
    let mut md = String::from(
        "# HTTP API\n\n\
         <!-- Generated from docs/openapi.json by tests/it/docs.rs: do not edit; \
         UPDATE_DOCS=1 cargo test --test it docs:: rewrites it. -->\n\n",
    );
    let _ = writeln!(
        md,
        "{}\n",
        doc["info"]["description"].as_str().unwrap_or("")
    );
    md.push_str(
        "This page is generated from the OpenAPI 3.1 document the server serves at \
         `GET /openapi.json` (no token), committed as [`docs/openapi.json`](../openapi.json) \
         and checked against the code by the tests. Every operation but the health checks, \
         `/console` and `/openapi.json` takes `Authorization: Bearer <token>`. The schemas \
         named below are defined in that document.\n",
    );
    let mut by_tag: Vec<(String, Vec<String>)> = Vec::new();
    let paths = doc["paths"].as_object().expect("paths");
    for (path, operations) in paths {
        for (method, op) in operations.as_object().expect("operations") {
            let tag = op["tags"][0].as_str().unwrap_or("other").to_owned();
            let mut text = format!("### `{} {path}`\n\n", method.to_uppercase());
            let summary = op["summary"].as_str().unwrap_or("");
            let description = op["description"].as_str().unwrap_or("");
            for part in [summary, description] {
                if !part.is_empty() {
                    let _ = writeln!(text, "{}\n", part.trim());
                }
            }
            if let Some(params) = op["parameters"].as_array().filter(|p| !p.is_empty()) {
                text.push_str(
                    "| parameter | in | required | type | meaning |\n|---|---|---|---|---|\n",
                );
                for p in params {
                    let _ = writeln!(
                        text,
                        "| `{}` | {} | {} | {} | {} |",
                        p["name"].as_str().unwrap_or(""),
                        p["in"].as_str().unwrap_or(""),
                        if p["required"].as_bool() == Some(true) {
                            "yes"
                        } else {
                            "no"
                        },
                        schema_name(&p["schema"]),
                        cell(p["description"].as_str().unwrap_or("")),
                    );
                }
                text.push('\n');
            }
            if let Some(content) = op["requestBody"]["content"].as_object() {
                for (media, body) in content {
                    let _ = writeln!(
                        text,
                        "Body: {} (`{media}`).\n",
                        schema_name(&body["schema"])
                    );
                }
            }
            text.push_str("| status | meaning | body |\n|---|---|---|\n");
            for (status, response) in op["responses"].as_object().expect("responses") {
                let bodies: Vec<String> = response["content"]
                    .as_object()
                    .map(|c| c.values().map(|b| schema_name(&b["schema"])).collect())
                    .unwrap_or_default();
                let meaning = match response["description"].as_str().unwrap_or("") {
                    "" if status.starts_with(['4', '5']) => "a [problem](errors.md#problem-types)",
                    other => other,
                };
                let _ = writeln!(
                    text,
                    "| {status} | {} | {} |",
                    cell(meaning),
                    bodies.join(", ")
                );
            }
            text.push('\n');
            match by_tag.iter_mut().find(|(t, _)| *t == tag) {
                Some((_, ops)) => ops.push(text),
                None => by_tag.push((tag, vec![text])),
            }
        }
    }
    // Devices' operations first, the operators' and the admission layer's after.
    let order = [
        "commands",
        "holds",
        "authorities",
        "operations",
        "admission layer",
    ];
    by_tag.sort_by_key(|(tag, _)| order.iter().position(|t| t == tag).unwrap_or(order.len()));
    for (tag, ops) in by_tag {
        let _ = writeln!(md, "\n## {}{}\n", tag[..1].to_uppercase(), &tag[1..]);
        for op in ops {
            md.push_str(&op);
        }
    }
    md.push_str("\n## Schemas\n");
    for (name, schema) in doc["components"]["schemas"].as_object().expect("schemas") {
        let _ = writeln!(md, "\n### {name}\n");
        if let Some(description) = schema["description"].as_str() {
            let _ = writeln!(
                md,
                "{}\n",
                description.split_whitespace().collect::<Vec<_>>().join(" ")
            );
        }
        let mut rows = String::new();
        property_rows(schema, &mut rows);
        if rows.is_empty() {
            let _ = writeln!(md, "{}.", schema_name(schema));
        } else {
            md.push_str("| field | type | required | meaning |\n|---|---|---|---|\n");
            md.push_str(&rows);
        }
    }
    md.trim_end().to_owned() + "\n"
}

#[test]
fn the_api_reference_is_generated_from_the_openapi_document() {
    let doc: serde_json::Value = serde_json::from_str(&read("docs/openapi.json")).unwrap();
    generated_page("docs/reference/api.md", &api_page(&doc));
}

/// `command-ledger ARGS --help`, with no environment (a variable that is
/// set would show its value in the help).
fn help(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_command-ledger"))
        .args(args)
        .arg("--help")
        .env_clear()
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?} --help: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommands a help text lists under `Commands:` (but `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| line.trim() != "Commands:")
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_command_line_reference_is_the_binarys_help() {
    use std::fmt::Write;
    let mut md = String::from(
        "# Command line\n\n\
         <!-- Generated from `command-ledger --help` by tests/it/docs.rs: do not edit; \
         UPDATE_DOCS=1 cargo test --test it docs:: rewrites it. -->\n\n\
         Every subcommand's `--help`, as the binary prints it. Flags that read an \
         environment variable say which (`[env: NAME=]`); [Configuration](../operate/configuration.md) \
         has them in one table.\n",
    );
    for (args, text) in every_help() {
        let name = format!("command-ledger {args}");
        let _ = write!(
            md,
            "\n## `{}`\n\n```text\n{}\n```\n",
            name.trim_end(),
            text.trim_end()
        );
    }
    assert!(md.matches("\n## `").count() >= 20, "{md}");
    generated_page("docs/reference/cli.md", &md);
}

/// Every subcommand's `--help`, as (the words after `command-ledger`, the
/// text), depth first in the order the helps list them.
fn every_help() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut queue: Vec<Vec<String>> = vec![vec![]];
    while let Some(args) = queue.pop() {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let text = help(&refs);
        for sub in subcommands(&text).into_iter().rev() {
            let mut next = args.clone();
            next.push(sub);
            queue.push(next);
        }
        out.push((args.join(" "), text));
    }
    out
}

/// The code spans of a table cell: "`serve --tls-cert`, `--tls-key`".
fn spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// What a help text says about `flag` (`--listen`): its line and the
/// description under it (clap's long help puts the defaults there), if the
/// text has the flag.
fn flag_help(text: &str, flag: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().position(|line| {
        line.match_indices(flag).any(|(at, _)| {
            let after = line[at + flag.len()..].chars().next();
            !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
        })
    })?;
    let description = lines[at + 1..]
        .iter()
        .take_while(|line| !line.trim().is_empty() && !line.trim_start().starts_with('-'));
    Some(
        std::iter::once(&lines[at])
            .chain(description)
            .copied()
            .collect::<Vec<_>>()
            .join(" "),
    )
}

#[test]
fn the_configuration_table_names_the_flags_variables_and_defaults_of_the_binary() {
    let helps = every_help();
    let page = read("docs/operate/configuration.md");
    let mut checked = 0;
    let mut wrong = Vec::new();
    for line in page
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| flag"))
    {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let [flags, envs, default, ..] = cells[..] else {
            continue;
        };
        let mut sub: Option<&str> = None;
        let mut helps_of_row: Vec<&str> = Vec::new();
        for span in spans(flags) {
            let flag = match span.split_once(' ') {
                Some((s, f)) => {
                    sub = Some(s);
                    f
                }
                None => span,
            };
            let candidates: Vec<&str> = helps
                .iter()
                .filter(|(name, _)| sub.is_none_or(|s| name == s))
                .map(|(_, text)| text.as_str())
                .collect();
            let found: Vec<String> = candidates
                .iter()
                .filter_map(|text| flag_help(text, flag))
                .collect();
            checked += 1;
            if found.is_empty() {
                wrong.push(format!(
                    "{span}: no such flag in `{}` --help",
                    sub.unwrap_or("any")
                ));
                continue;
            }
            // A default the binary shows must be the table's.
            if let Some(shown) = found[0]
                .split("[default: ")
                .nth(1)
                .and_then(|d| d.split(']').next())
                && !spans(default).contains(&shown)
            {
                wrong.push(format!(
                    "{span}: the binary's default is `{shown}`, the table says {default}"
                ));
            }
            helps_of_row.extend(candidates);
        }
        for env in spans(envs).into_iter().filter(|e| *e != "RUST_LOG") {
            checked += 1;
            let pool: Vec<&str> = if helps_of_row.is_empty() {
                helps.iter().map(|(_, t)| t.as_str()).collect()
            } else {
                helps_of_row.clone()
            };
            if !pool
                .iter()
                .any(|text| text.contains(&format!("[env: {env}")))
            {
                wrong.push(format!("{env}: no flag of that row reads it"));
            }
        }
    }
    assert!(
        checked >= 40,
        "only {checked} flags and variables found in the table"
    );
    assert!(
        wrong.is_empty(),
        "docs/operate/configuration.md: {wrong:#?}"
    );
}

/// Whether the Citus backend has a capability `lacks!` names.
fn citus_has(capability: &str) -> bool {
    let citus = command_ledger::db::Backend::CITUS;
    match capability {
        "local_tables" => citus.local_tables,
        "outcome_notify_in_transaction" => citus.outcome_notify_in_transaction,
        "generic_plans" => citus.generic_plans,
        other => panic!("a capability this test does not know: {other}"),
    }
}

/// SCALING.md's list of the tests that say `not run` on Citus names exactly
/// the tests that return at once when the backend lacks a capability Citus
/// lacks (a `lacks!` at the top of their body), and its count is theirs.
#[test]
fn scaling_md_lists_exactly_the_tests_that_do_not_run_on_citus() {
    let mut skipping = std::collections::BTreeSet::new();
    let dir = root().join("tests/it");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(module) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().is_none_or(|e| e != "rs") || module == "harness" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(name) = line
                .trim_start()
                .strip_prefix("async fn ")
                .and_then(|rest| rest.split('(').next())
            else {
                continue;
            };
            // The capability named on the line after `lacks!(`, if the
            // test's body opens with one; only those Citus lacks count.
            let top = &lines[i + 1..(i + 5).min(lines.len())];
            let Some(at) = top.iter().position(|l| l.contains("lacks!(")) else {
                continue;
            };
            let capability = top
                .get(at + 1)
                .map(|l| l.trim().trim_end_matches(','))
                .unwrap_or_default();
            if !citus_has(capability) {
                skipping.insert(format!("{module}::{name}"));
            }
        }
    }
    let scaling = read("docs/SCALING.md");
    let start = scaling
        .find("tests say `not run: the backend lacks")
        .expect("SCALING.md lists the tests that do not run on Citus");
    let end = scaling[start..]
        .find("\n- ")
        .map_or(scaling.len(), |e| start + e);
    let section = &scaling[start..end];
    let listed: std::collections::BTreeSet<String> = section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| {
            t.split_once("::").is_some_and(|(m, n)| {
                !m.is_empty()
                    && m.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                    && !n.is_empty()
                    && n.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            })
        })
        .map(str::to_owned)
        .collect();
    assert_eq!(
        listed, skipping,
        "SCALING.md's list against the tests' own lacks!"
    );
    let words = [
        "", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine", "Ten",
        "Eleven", "Twelve", "Thirteen", "Fourteen", "Fifteen",
    ];
    let said = scaling[..start]
        .rsplit(|c: char| c.is_whitespace())
        .find(|w| !w.is_empty());
    assert_eq!(
        said,
        words.get(skipping.len()).copied(),
        "the count SCALING.md gives"
    );
}

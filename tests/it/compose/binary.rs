//! What the built binary accepts, from its own `-h` (subcommands, flags,
//! their variables, defaults and accepted values), and what it reads and
//! serves otherwise: variables read by name in src/, the API's routes.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

const BIN: &str = env!("CARGO_BIN_EXE_command-ledger");

/// One flag as `-h` shows it.
#[derive(Debug, Default)]
pub(super) struct Flag {
    pub(super) takes_value: bool,
    pub(super) env: Option<String>,
    pub(super) default: Option<String>,
    pub(super) possible_values: Option<Vec<String>>,
}

/// What one (sub)command's `-h` says it accepts.
#[derive(Debug, Default)]
pub(super) struct Help {
    pub(super) flags: BTreeMap<String, Flag>,
    pub(super) subcommands: BTreeSet<String>,
    /// Flags the usage line requires.
    pub(super) required: Vec<String>,
    /// Whether it takes positional arguments.
    pub(super) arguments: bool,
}

/// `[key: VALUE]` in a help entry: the value, up to its closing bracket.
fn bracketed<'a>(entry: &'a str, key: &str) -> Option<&'a str> {
    let start = entry.find(&format!("[{key}: "))? + key.len() + 3;
    let end = start + entry[start..].find(']')?;
    Some(&entry[start..end])
}

fn parse_help(text: &str) -> Help {
    let mut help = Help::default();
    let mut section = "";
    let mut entries: Vec<String> = Vec::new();
    for line in text.lines() {
        if let Some(usage) = line.strip_prefix("Usage: ") {
            // `[OPTIONS]` and other bracketed parts are optional.
            let mut depth = 0;
            let required: String = usage
                .chars()
                .filter(|c| {
                    match c {
                        '[' => depth += 1,
                        ']' => depth -= 1,
                        _ => return depth == 0,
                    }
                    false
                })
                .collect();
            help.required = required
                .split_whitespace()
                .filter(|t| t.starts_with("--"))
                .map(str::to_owned)
                .collect();
        } else if !line.starts_with(' ') && line.ends_with(':') {
            section = line;
        } else if section == "Commands:" {
            if let Some(name) = line.split_whitespace().next()
                && line.starts_with("  ")
                && !line.starts_with("   ")
                && name != "help"
            {
                help.subcommands.insert(name.to_owned());
            }
        } else if section == "Arguments:" {
            help.arguments |= line.trim_start().starts_with('<');
        } else if section == "Options:" {
            if line.trim_start().starts_with('-') {
                entries.push(line.to_owned());
            } else if let Some(last) = entries.last_mut() {
                last.push(' ');
                last.push_str(line.trim());
            }
        }
    }
    for entry in entries {
        let Some(long) = entry.split_whitespace().find(|t| t.starts_with("--")) else {
            continue;
        };
        let long = long.trim_end_matches(',').to_owned();
        let after = &entry[entry.find(&long).unwrap_or(0) + long.len()..];
        // `[env: NAME=]`, `[env: NAME=value]` (set), `[env: NAME]` (hidden value).
        let env = bracketed(&entry, "env").map(|e| e.split('=').next().unwrap_or(e).to_owned());
        let flag = Flag {
            takes_value: after.starts_with(" <"),
            env,
            default: bracketed(&entry, "default").map(str::to_owned),
            possible_values: bracketed(&entry, "possible values")
                .map(|v| v.split(", ").map(str::to_owned).collect()),
        };
        help.flags.insert(long, flag);
    }
    help
}

/// What the built binary reads and serves, for the checks.
#[derive(Debug)]
pub(super) struct Binary {
    helps: Mutex<HashMap<Vec<String>, Arc<Help>>>,
    /// Variables read by name in src/ (`std::env::var("NAME")`), and RUST_LOG.
    pub(super) env_in_source: BTreeSet<String>,
    /// The API's routes: every OpenAPI path, and the two undocumented ones.
    pub(super) api_routes: Vec<String>,
}

impl Binary {
    pub(super) fn get() -> &'static Binary {
        static BINARY: OnceLock<Binary> = OnceLock::new();
        BINARY.get_or_init(|| {
            let document: Value =
                serde_json::from_str(&command_ledger::http::openapi::document()).unwrap();
            let mut api_routes: Vec<String> = document["paths"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            api_routes.extend(["/openapi.json".to_owned(), "/console".to_owned()]);
            Binary {
                helps: Mutex::default(),
                env_in_source: env_read_in_source(),
                api_routes,
            }
        })
    }

    /// The `-h` of `command-ledger PATH...`.
    pub(super) fn help(&self, path: &[String]) -> Arc<Help> {
        if let Some(help) = self.helps.lock().unwrap().get(path) {
            return Arc::clone(help);
        }
        let out = std::process::Command::new(BIN)
            .args(path)
            .arg("-h")
            .env_clear()
            .output()
            .unwrap();
        assert!(out.status.success(), "command-ledger {path:?} -h failed");
        let help = Arc::new(parse_help(&String::from_utf8(out.stdout).unwrap()));
        self.helps
            .lock()
            .unwrap()
            .insert(path.to_vec(), Arc::clone(&help));
        help
    }
}

fn env_read_in_source() -> BTreeSet<String> {
    fn walk(dir: &std::path::Path, names: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, names);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for call in ["env::var(\"", "env::var_os(\""] {
                    for (at, _) in text.match_indices(call) {
                        let rest = &text[at + call.len()..];
                        names.insert(rest[..rest.find('"').unwrap()].to_owned());
                    }
                }
                if text.contains("EnvFilter::try_from_default_env") {
                    names.insert(tracing_subscriber::EnvFilter::DEFAULT_ENV.to_owned());
                }
            }
        }
    }
    let mut names = BTreeSet::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut names,
    );
    names
}

//! docker-compose.yml, read with a YAML parser (saphyr) and held against the
//! binary its image runs (no container engine is needed): every service
//! built from this repository runs subcommands and flags that the built
//! binary's `-h` lists, with values it accepts and the flags it requires;
//! sets only environment variables the binary reads; health-checks a route
//! the process serves, on the port it listens on; and no service publishes
//! a database that trusts every connection.

mod binary;

use binary::Binary;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// YAML as JSON, with `<<` merge keys applied (as Compose applies them).
pub(crate) fn to_json(yaml: &saphyr::Yaml<'_>) -> Result<Value, String> {
    use saphyr::{Scalar, Yaml};
    Ok(match yaml {
        Yaml::Value(Scalar::Null) => Value::Null,
        Yaml::Value(Scalar::Boolean(b)) => Value::Bool(*b),
        Yaml::Value(Scalar::Integer(i)) => Value::from(*i),
        Yaml::Value(Scalar::FloatingPoint(f)) => Value::from(f.0),
        Yaml::Value(Scalar::String(s)) | Yaml::Representation(s, _, _) => {
            Value::String(s.to_string())
        }
        Yaml::Sequence(items) => Value::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        Yaml::Mapping(entries) => {
            let mut object = Map::new();
            let mut merged = Map::new();
            for (key, value) in entries {
                let key = match to_json(key)? {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                let value = to_json(value)?;
                if key == "<<" {
                    let sources = match value {
                        Value::Array(sources) => sources,
                        one => vec![one],
                    };
                    for source in sources {
                        let Value::Object(source) = source else {
                            return Err("a `<<` merge of something not a mapping".to_owned());
                        };
                        for (k, v) in source {
                            merged.entry(k).or_insert(v);
                        }
                    }
                } else {
                    object.insert(key, value);
                }
            }
            for (k, v) in merged {
                object.entry(k).or_insert(v);
            }
            Value::Object(object)
        }
        Yaml::Tagged(_, inner) => to_json(inner)?,
        Yaml::Alias(_) | Yaml::BadValue => return Err(format!("unreadable node {yaml:?}")),
    })
}

/// A string or a list of strings, as Compose writes commands.
fn words(value: &Value) -> Option<Vec<String>> {
    match value {
        Value::String(s) => Some(s.split_whitespace().map(str::to_owned).collect()),
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().map(str::to_owned))
            .collect(),
        _ => None,
    }
}

/// A service's environment (a mapping, or a list of `NAME=value`).
fn environment(service: &Value) -> BTreeMap<String, String> {
    match &service["environment"] {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| {
                let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                (k.clone(), v)
            })
            .collect(),
        Value::Array(items) => items
            .iter()
            .filter_map(Value::as_str)
            .map(|i| {
                let (k, v) = i.split_once('=').unwrap_or((i, ""));
                (k.to_owned(), v.to_owned())
            })
            .collect(),
        _ => BTreeMap::new(),
    }
}

/// A JSON array in a Dockerfile instruction (`CMD ["serve"]`): the last one.
fn dockerfile_array(dockerfile: &str, instruction: &str) -> Option<Vec<String>> {
    let line = dockerfile
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(instruction))?;
    serde_json::from_str(line.trim()).ok()
}

/// One run of the binary in a service: the subcommand and the flags given.
#[derive(Debug)]
struct Invocation {
    path: Vec<String>,
    given: BTreeMap<String, Option<String>>,
}

/// Checks `command-ledger ARGS` against the binary's help; adds what is
/// wrong to `problems`.
fn check_invocation(
    service: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    problems: &mut Vec<String>,
) -> Invocation {
    let binary = Binary::get();
    let mut path: Vec<String> = Vec::new();
    let mut help = binary.help(&path);
    let mut given = BTreeMap::new();
    let mut tokens = args.iter();
    let shown = |path: &[String]| format!("command-ledger {}", path.join(" "));
    while let Some(token) = tokens.next() {
        if token.starts_with("--") {
            let (name, inline) = match token.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (token.as_str(), None),
            };
            let Some(flag) = help.flags.get(name) else {
                problems.push(format!(
                    "{service}: `{}` has no flag {name} (its -h lists {:?})",
                    shown(&path),
                    help.flags.keys().collect::<Vec<_>>()
                ));
                continue;
            };
            let value = if flag.takes_value {
                let value = inline.or_else(|| tokens.next().cloned());
                match (&value, &flag.possible_values) {
                    (None, _) => {
                        problems.push(format!("{service}: {name} needs a value"));
                    }
                    (Some(v), Some(allowed)) if !allowed.contains(v) => problems.push(format!(
                        "{service}: {name} {v}: `{}` accepts only {allowed:?}",
                        shown(&path)
                    )),
                    _ => {}
                }
                value
            } else {
                if inline.is_some() {
                    problems.push(format!("{service}: {name} takes no value"));
                }
                None
            };
            given.insert(name.to_owned(), value);
        } else if token.starts_with('-') {
            problems.push(format!(
                "{service}: short flag {token} (write the long one)"
            ));
        } else if !help.subcommands.is_empty() {
            if help.subcommands.contains(token) {
                path.push(token.clone());
                help = binary.help(&path);
            } else {
                problems.push(format!(
                    "{service}: `{}` has no subcommand {token} (its -h lists {:?})",
                    shown(&path),
                    help.subcommands
                ));
                return Invocation { path, given };
            }
        } else if !help.arguments {
            problems.push(format!(
                "{service}: `{}` takes no argument {token}",
                shown(&path)
            ));
        }
    }
    if path.is_empty() || !help.subcommands.is_empty() {
        problems.push(format!("{service}: `{}` needs a subcommand", shown(&path)));
    }
    for required in &help.required {
        let from_env = help
            .flags
            .get(required)
            .and_then(|f| f.env.as_ref())
            .is_some_and(|e| env.contains_key(e));
        if !given.contains_key(required) && !from_env {
            problems.push(format!(
                "{service}: `{}` requires {required}, given neither as a flag nor by its variable",
                shown(&path)
            ));
        }
    }
    // `--password-env NAME` and the like read the variable NAME.
    for (flag, value) in &given {
        if flag.ends_with("-env")
            && let Some(var) = value
            && !env.contains_key(var)
        {
            problems.push(format!(
                "{service}: {flag} {var}, but the service does not set {var}"
            ));
        }
    }
    Invocation { path, given }
}

/// The runs of the binary in a service built from this repository's
/// Dockerfile (entrypoint `command-ledger`, or `sh -c` with a script of
/// `command-ledger ...` steps joined by `&&`).
fn invocations(
    name: &str,
    service: &Value,
    dockerfile: &str,
    problems: &mut Vec<String>,
) -> Vec<Vec<String>> {
    let image_entrypoint = dockerfile_array(dockerfile, "ENTRYPOINT ");
    let entrypoint = match &service["entrypoint"] {
        Value::Null => image_entrypoint,
        other => words(other),
    };
    let command = match &service["command"] {
        Value::Null => dockerfile_array(dockerfile, "CMD "),
        other => words(other),
    };
    let Some(command) = command else {
        problems.push(format!("{name}: a command that is not a string or a list"));
        return Vec::new();
    };
    match entrypoint
        .as_deref()
        .map(|e| e.iter().map(String::as_str).collect::<Vec<_>>())
    {
        Some(e) if e == ["command-ledger"] => vec![command],
        Some(e) if e == ["sh", "-c"] || e == ["/bin/sh", "-c"] => {
            let script = command.join(" ");
            let mut runs = Vec::new();
            for step in script.split("&&").flat_map(|s| s.split(';')) {
                let mut step = step.split_whitespace().map(str::to_owned);
                match step.next().as_deref() {
                    Some("command-ledger") => runs.push(step.collect()),
                    Some(other) => problems.push(format!(
                        "{name}: the script runs {other}, not command-ledger: cannot check it"
                    )),
                    None => {}
                }
            }
            runs
        }
        other => {
            problems.push(format!(
                "{name}: entrypoint {other:?} (the image's is command-ledger): cannot check it"
            ));
            Vec::new()
        }
    }
}

/// `http://HOST:PORT/PATH` → (port, path).
fn port_and_path(url: &str) -> Option<(u16, String)> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let port = authority.rsplit_once(':')?.1.parse().ok()?;
    let path = path.split(['?', '#']).next().unwrap_or("/");
    Some((port, path.to_owned()))
}

fn route_matches(route: &str, path: &str) -> bool {
    let (route, path): (Vec<&str>, Vec<&str>) =
        (route.split('/').collect(), path.split('/').collect());
    route.len() == path.len()
        && route
            .iter()
            .zip(&path)
            .all(|(r, p)| r == p || (r.starts_with('{') && !p.is_empty()))
}

/// The port in an address flag's value (`0.0.0.0:8080`).
fn port_of(address: &str) -> Option<u16> {
    address.rsplit_once(':')?.1.parse().ok()
}

/// A health check against what the service's processes serve.
fn check_health(
    name: &str,
    service: &Value,
    runs: &[Invocation],
    env: &BTreeMap<String, String>,
    dockerfile: &str,
    problems: &mut Vec<String>,
) {
    let test = match &service["healthcheck"]["test"] {
        Value::Null => return,
        Value::String(s) => vec![s.clone()],
        other => words(other).unwrap_or_default(),
    };
    let program = match test.first().map(String::as_str) {
        Some("CMD") => test.get(1).cloned(),
        Some("CMD-SHELL") => test
            .get(1)
            .and_then(|s| s.split_whitespace().next().map(str::to_owned)),
        _ => test
            .first()
            .and_then(|s| s.split_whitespace().next().map(str::to_owned)),
    };
    let final_stage = dockerfile.rsplit("\nFROM ").next().unwrap_or(dockerfile);
    if let Some(program) = &program
        && !final_stage.contains(program.as_str())
    {
        problems.push(format!(
            "{name}: the health check runs {program}, which the image does not install"
        ));
    }
    let urls: Vec<String> = test
        .iter()
        .flat_map(|t| t.split_whitespace())
        .filter(|t| t.starts_with("http://") || t.starts_with("https://"))
        .map(str::to_owned)
        .collect();
    if urls.is_empty() {
        problems.push(format!("{name}: the health check names no endpoint"));
    }
    let binary = Binary::get();
    for url in urls {
        let Some((port, path)) = port_and_path(&url) else {
            problems.push(format!("{name}: health check URL {url} without a port"));
            continue;
        };
        // What each process serves, and on which port.
        let mut served = false;
        for run in runs {
            let help = binary.help(&run.path);
            let (flag, routes): (&str, Vec<String>) = match run.path.as_slice() {
                [s] if s == "serve" => ("--listen", binary.api_routes.clone()),
                [s] if s == "custodian" => ("--metrics-listen", vec!["/metrics".to_owned()]),
                [s] if s == "demo-sink" => ("--listen", vec!["/stats".to_owned()]),
                _ => continue,
            };
            let listen = run
                .given
                .get(flag)
                .cloned()
                .flatten()
                .or_else(|| {
                    let var = help.flags.get(flag)?.env.as_ref()?;
                    env.get(var).cloned()
                })
                .or_else(|| help.flags.get(flag)?.default.clone());
            if listen.as_deref().and_then(port_of) != Some(port) {
                continue;
            }
            served = true;
            if !routes.iter().any(|r| route_matches(r, &path)) {
                problems.push(format!(
                    "{name}: the health check asks for {path}, which `command-ledger {}` does not serve",
                    run.path.join(" ")
                ));
            }
        }
        if !served {
            problems.push(format!(
                "{name}: the health check calls port {port}, where no process of the service listens"
            ));
        }
    }
}

/// Everything wrong with the compose file `yaml`, for an image built from
/// `dockerfile`; empty when nothing is.
fn problems(yaml: &str, dockerfile: &str) -> Vec<String> {
    use saphyr::LoadableYamlNode as _;
    let documents = match saphyr::Yaml::load_from_str(yaml) {
        Ok(documents) => documents,
        Err(e) => return vec![format!("not YAML: {e}")],
    };
    let [document] = documents.as_slice() else {
        return vec![format!("{} YAML documents, not one", documents.len())];
    };
    let compose = match to_json(document) {
        Ok(compose) => compose,
        Err(e) => return vec![e],
    };
    let Some(services) = compose["services"].as_object() else {
        return vec!["no services".to_owned()];
    };
    let binary = Binary::get();
    let mut problems = Vec::new();
    for (name, service) in services {
        let env = environment(service);
        let published = service["ports"].as_array().is_some_and(|p| !p.is_empty());
        if published && env.get("POSTGRES_HOST_AUTH_METHOD").map(String::as_str) == Some("trust") {
            problems.push(format!(
                "{name}: publishes a port of a PostgreSQL that trusts every connection"
            ));
        }
        let depends_on: Vec<(String, Value)> = match &service["depends_on"] {
            Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            Value::Array(list) => list
                .iter()
                .filter_map(Value::as_str)
                .map(|k| (k.to_owned(), Value::Null))
                .collect(),
            _ => Vec::new(),
        };
        for (dependency, condition) in depends_on {
            let Some(target) = services.get(&dependency) else {
                problems.push(format!(
                    "{name}: depends on {dependency}, which is no service"
                ));
                continue;
            };
            if condition["condition"] == "service_healthy" && target["healthcheck"].is_null() {
                problems.push(format!(
                    "{name}: waits for {dependency} to be healthy, which has no health check"
                ));
            }
        }
        if service["build"].is_null() {
            continue; // another image: not this binary
        }
        let runs: Vec<Invocation> = invocations(name, service, dockerfile, &mut problems)
            .iter()
            .map(|args| check_invocation(name, args, &env, &mut problems))
            .collect();
        let mut read: BTreeSet<String> = binary.env_in_source.clone();
        let mut values: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for run in &runs {
            let help = binary.help(&run.path);
            read.extend(help.flags.values().filter_map(|f| f.env.clone()));
            for flag in help.flags.values() {
                if let (Some(var), Some(allowed)) = (&flag.env, &flag.possible_values) {
                    values.insert(var.clone(), allowed.clone());
                }
            }
            read.extend(
                run.given
                    .iter()
                    .filter(|(flag, _)| flag.ends_with("-env"))
                    .filter_map(|(_, value)| value.clone()),
            );
        }
        for (var, value) in &env {
            if let Some(allowed) = values.get(var)
                && !allowed.contains(value)
            {
                problems.push(format!(
                    "{name}: {var}={value}, but only {allowed:?} are accepted"
                ));
            }
        }
        for var in env.keys().filter(|v| !read.contains(*v)) {
            problems.push(format!(
                "{name}: sets {var}, which command-ledger {} does not read",
                runs.iter()
                    .map(|r| r.path.join(" "))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        check_health(name, service, &runs, &env, dockerfile, &mut problems);
    }
    problems
}

fn repository_file(path: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

#[test]
fn the_compose_file_runs_only_what_the_binary_accepts() {
    let problems = problems(
        &repository_file("docker-compose.yml"),
        &repository_file("Dockerfile"),
    );
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn a_broken_compose_file_is_caught() {
    let yaml = repository_file("docker-compose.yml");
    let dockerfile = repository_file("Dockerfile");
    // (what to change, into what, what the problem must name)
    let breakages = [
        (
            r#""--listen", "0.0.0.0:8080""#,
            r#""--listen-on", "0.0.0.0:8080""#,
            "--listen-on",
        ),
        (
            r#"command: ["custodian"]"#,
            r#"command: ["custodain"]"#,
            "custodain",
        ),
        ("LOG_FORMAT: json", "LOG_FORMATS: json", "LOG_FORMATS"),
        ("LOG_FORMAT: json", "LOG_FORMAT: yaml", "yaml"),
        (
            "--role api --password-env",
            "--role apl --password-env",
            "apl",
        ),
        (
            "        && command-ledger role-password --role owner",
            "        && comand-ledger role-password --role owner",
            "comand-ledger",
        ),
        (
            "  LEDGER_RETENTION_PASSWORD: ${LEDGER_RETENTION_PASSWORD:-retention-password}\n",
            "",
            "LEDGER_RETENTION_PASSWORD",
        ),
        ("      AUTHORITIES: payments\n", "", "--authority"),
        ("8080/readyz", "8080/ready", "/ready"),
        ("127.0.0.1:8080/readyz", "127.0.0.1:8081/readyz", "8081"),
        (r#"["CMD", "curl""#, r#"["CMD", "wget""#, "wget"),
        (
            "command-ledger migrate\n",
            "command-ledger migrate --citus=yes\n",
            "takes no value",
        ),
        (
            "      POSTGRES_HOST_AUTH_METHOD: trust\n",
            "      POSTGRES_HOST_AUTH_METHOD: trust\n    ports: [\"127.0.0.1:5433:5432\"]\n",
            "trusts every connection",
        ),
        ("services:\n", "services:\n  x: [\n", "not YAML"),
    ];
    for (from, to, named) in breakages {
        assert!(
            yaml.contains(from),
            "the compose file no longer has {from:?}"
        );
        let broken = yaml.replacen(from, to, 1);
        let found = problems(&broken, &dockerfile);
        assert!(
            found.iter().any(|p| p.contains(named)),
            "{from:?} -> {to:?} went unnoticed: {found:#?}"
        );
    }
}

/// The compose stack's catalog (deploy/ledger.toml, which its API and
/// custodian read) loads, runs `refund` with a probe, and admits it as
/// `serve` does on its private cluster: the README's session works there.
#[test]
fn the_compose_catalog_is_the_quickstarts_refund() {
    let catalog = command_ledger::catalog::Catalog::load(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/ledger.toml"),
    )
    .unwrap();
    let effects = catalog.effects().unwrap();
    assert_eq!(
        effects.get("refund").unwrap().retry,
        Some(command_ledger::catalog::quickstart_refund_retry())
    );
    let policies = catalog.policies().unwrap();
    let mut quickstart = command_ledger::domain::admission::Policies::default();
    command_ledger::catalog::quickstart_refund(&mut quickstart);
    assert_eq!(policies.get("refund"), quickstart.get("refund"));
}

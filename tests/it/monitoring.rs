//! The dashboard and the alert rules under `deploy/monitoring/` name only
//! what a running service exports: every metric, every label a matcher,
//! a `by (...)`, a legend or an annotation names, read from the `/metrics`
//! of an API process with an in-process custodian that has run commands
//! (so that the custodian's families and the histogram have samples).

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Metric family -> the label names its samples carry (a histogram's
/// `_bucket`, `_sum` and `_count` samples are its family's too).
type Exported = BTreeMap<String, BTreeSet<String>>;

fn exported(text: &str) -> Exported {
    let mut families = Exported::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, _) = line.rsplit_once(' ').expect("a sample");
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let mut names: BTreeSet<String> = labels
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .map(|(label, _)| label.to_owned())
            .collect();
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(family) = name.strip_suffix(suffix) {
                let mut without_le = names.clone();
                without_le.remove("le");
                families
                    .entry(family.to_owned())
                    .or_default()
                    .extend(without_le);
            }
        }
        families
            .entry(name.to_owned())
            .or_default()
            .append(&mut names);
    }
    families
}

/// The `ledger_*` metric names an expression reads, each with the label
/// names its `{...}` matcher uses.
fn selectors(expr: &str) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("ledger_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = tail[..end].to_owned();
        let mut labels = Vec::new();
        let after = &tail[end..];
        if let Some(matcher) = after.strip_prefix('{') {
            let close = matcher.find('}').expect("a closed matcher");
            for pair in matcher[..close].split(',') {
                let label = pair.split(['=', '!', '~']).next().unwrap_or("").trim();
                if !label.is_empty() {
                    labels.push(label.to_owned());
                }
            }
        }
        found.push((name, labels));
        rest = &tail[end..];
    }
    found
}

/// The label names of `by (...)` and `without (...)` clauses.
fn grouped_by(expr: &str) -> Vec<String> {
    let mut labels = Vec::new();
    for keyword in ["by (", "without ("] {
        let mut rest = expr;
        while let Some(at) = rest.find(keyword) {
            let inside = &rest[at + keyword.len()..];
            let close = inside.find(')').expect("a closed clause");
            labels.extend(
                inside[..close]
                    .split(',')
                    .map(|l| l.trim().to_owned())
                    .filter(|l| !l.is_empty()),
            );
            rest = &inside[close..];
        }
    }
    labels
}

/// `{{name}}` and `{{ $labels.name }}` references in a template.
fn templated(text: &str) -> Vec<String> {
    let mut labels = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("{{") {
        let inside = &rest[at + 2..];
        let close = inside.find("}}").expect("a closed template");
        let name = inside[..close].trim();
        if let Some(label) = name.strip_prefix("$labels.") {
            labels.push(label.to_owned());
        } else if !name.starts_with('$') {
            labels.push(name.to_owned());
        }
        rest = &inside[close..];
    }
    labels
}

/// What is wrong with one expression (and the templates that show its
/// result) against what is exported.
fn check(where_: &str, expr: &str, shown: &[&str], exported: &Exported, wrong: &mut Vec<String>) {
    let read = selectors(expr);
    if read.is_empty() {
        wrong.push(format!("{where_}: reads no ledger metric: {expr}"));
    }
    let mut available = BTreeSet::new();
    for (name, labels) in &read {
        match exported.get(name) {
            None => wrong.push(format!("{where_}: {name} is not exported")),
            Some(has) => {
                for label in labels {
                    if !has.contains(label) {
                        wrong.push(format!("{where_}: {name} has no label {label}"));
                    }
                }
                available.extend(has.iter().cloned());
            }
        }
    }
    let mut named = grouped_by(expr);
    for template in shown {
        named.extend(templated(template));
    }
    for label in named {
        if label != "le" && !available.contains(&label) {
            wrong.push(format!(
                "{where_}: label {label} is on none of the metrics it reads"
            ));
        }
    }
}

fn read(path: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[tokio::test]
async fn the_dashboard_and_the_alerts_name_only_what_the_service_exports() {
    let (addr, operator, runner) = crate::metrics::serve_with_custodian("agent-7").await;
    let resp = reqwest::Client::new()
        .post(format!("http://{addr}/v1/commands"))
        .bearer_auth(&operator)
        .header("Idempotency-Key", "m1")
        .json(&serde_json::json!({"kind": "noop", "authority": "agent-7"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    runner.run_once().await.unwrap();
    let text = crate::metrics::scrape(addr, &operator).await;
    let exported = exported(&text);
    assert!(
        exported["ledger_authority_oldest_ready_seconds"].contains("authority"),
        "{text}"
    );
    let mut wrong = Vec::new();

    let dashboard: Value =
        serde_json::from_str(&read("deploy/monitoring/grafana-dashboard.json")).unwrap();
    assert_eq!(dashboard["uid"], "command-ledger");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10, "{} panels", panels.len());
    for panel in panels {
        let title = panel["title"].as_str().expect("a title");
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            let expr = target["expr"].as_str().expect("expr");
            let legend = target["legendFormat"].as_str().unwrap_or("");
            check(
                &format!("dashboard, {title}"),
                expr,
                &[legend],
                &exported,
                &mut wrong,
            );
        }
    }

    use saphyr::LoadableYamlNode as _;
    let yaml = read("deploy/monitoring/prometheus-alerts.yml");
    let documents = saphyr::Yaml::load_from_str(&yaml).expect("YAML");
    let rules = crate::compose::to_json(&documents[0]).expect("plain YAML");
    let rules = rules["groups"][0]["rules"].as_array().expect("rules");
    let mut alerts = BTreeSet::new();
    for rule in rules {
        let alert = rule["alert"].as_str().expect("alert");
        alerts.insert(alert.to_owned());
        let expr = rule["expr"].as_str().expect("expr");
        let summary = rule["annotations"]["summary"].as_str().expect("summary");
        let description = rule["annotations"]["description"].as_str().unwrap_or("");
        check(
            &format!("alert {alert}"),
            expr,
            &[summary, description],
            &exported,
            &mut wrong,
        );
    }
    for wanted in [
        "LedgerBacklogOld",
        "LedgerAmbiguousOutcome",
        "LedgerLeaseLost",
        "LedgerWebhookEventsExpiring",
        "LedgerDatabaseDown",
        "LedgerExecutionsFarBelowRequests",
    ] {
        assert!(alerts.contains(wanted), "no alert {wanted}: {alerts:?}");
    }
    // The book's page says what to do for each alert.
    let page = read("docs/operate/monitoring.md");
    for alert in &alerts {
        if !page.contains(&format!("`{alert}`")) {
            wrong.push(format!("docs/operate/monitoring.md does not name {alert}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_checks_find_a_metric_or_a_label_that_is_not_exported() {
    let exported = exported(
        "# TYPE a gauge\nledger_x{authority=\"p\"} 1\nledger_h_bucket{kind=\"n\",le=\"+Inf\"} 2\nledger_h_count{kind=\"n\"} 2\n",
    );
    let wrong = |expr: &str, legend: &str| {
        let mut wrong = Vec::new();
        check("t", expr, &[legend], &exported, &mut wrong);
        wrong
    };
    assert!(wrong("max by (authority) (ledger_x)", "{{authority}}").is_empty());
    assert!(wrong("sum by (le, kind) (rate(ledger_h_bucket[5m]))", "{{kind}}").is_empty());
    assert_eq!(wrong("ledger_y > 0", "").len(), 1);
    assert_eq!(wrong("ledger_x{state=\"a\"}", "").len(), 1);
    assert_eq!(wrong("sum by (state) (ledger_x)", "").len(), 1);
    assert_eq!(wrong("ledger_x", "{{ $labels.state }}").len(), 1);
    assert_eq!(wrong("up == 0", "").len(), 1);
}

/// The dashboard's layout as the book shows it: each panel where the JSON
/// puts it on Grafana's 24-column grid, with its title and what each query
/// plots. `UPDATE_DOCS=1` writes it; otherwise the committed file must be
/// what the JSON renders.
fn render(dashboard: &Value) -> String {
    const UNIT_W: u64 = 40;
    const UNIT_H: u64 = 26;
    let escape = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let panels = dashboard["panels"].as_array().expect("panels");
    let bottom = panels
        .iter()
        .map(|p| p["gridPos"]["y"].as_u64().unwrap() + p["gridPos"]["h"].as_u64().unwrap())
        .max()
        .unwrap_or(0);
    let (width, height) = (24 * UNIT_W, bottom * UNIT_H + 40);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\">\n\
         <rect width=\"{width}\" height=\"{height}\" fill=\"#181b1f\"/>\n\
         <text x=\"12\" y=\"26\" font-size=\"18\" fill=\"#d8d9da\">{}</text>\n",
        escape(dashboard["title"].as_str().unwrap_or(""))
    );
    for panel in panels {
        let g = &panel["gridPos"];
        let (x, y) = (
            g["x"].as_u64().unwrap() * UNIT_W + 4,
            g["y"].as_u64().unwrap() * UNIT_H + 40,
        );
        let (w, h) = (
            g["w"].as_u64().unwrap() * UNIT_W - 8,
            g["h"].as_u64().unwrap() * UNIT_H - 8,
        );
        svg.push_str(&format!(
            "<rect x=\"{x}\" y=\"{y}\" width=\"{w}\" height=\"{h}\" rx=\"4\" fill=\"#22252b\" stroke=\"#34373d\"/>\n\
             <text x=\"{}\" y=\"{}\" font-size=\"14\" fill=\"#d8d9da\">{}</text>\n",
            x + 10,
            y + 22,
            escape(panel["title"].as_str().unwrap_or(""))
        ));
        for (i, target) in panel["targets"]
            .as_array()
            .expect("targets")
            .iter()
            .enumerate()
        {
            let line = format!(
                "{}: {}",
                target["legendFormat"].as_str().unwrap_or(""),
                target["expr"].as_str().unwrap_or("")
            );
            let shown: String = line
                .chars()
                .take(usize::try_from(w / 6).unwrap_or(80))
                .collect();
            svg.push_str(&format!(
                "<text x=\"{}\" y=\"{}\" font-size=\"10\" font-family=\"monospace\" fill=\"#8e8e8e\">{}</text>\n",
                x + 10,
                y + 44 + 16 * u64::try_from(i).unwrap_or(0),
                escape(&shown)
            ));
        }
    }
    svg.push_str("</svg>\n");
    svg
}

#[test]
fn the_book_shows_the_dashboard_as_its_json_lays_it_out() {
    let dashboard: Value =
        serde_json::from_str(&read("deploy/monitoring/grafana-dashboard.json")).unwrap();
    let svg = render(&dashboard);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operate/dashboard.svg");
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &svg).unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(&path).unwrap_or_default(),
        svg,
        "docs/operate/dashboard.svg is not what the dashboard's JSON renders: UPDATE_DOCS=1 cargo test --test it monitoring::"
    );
}

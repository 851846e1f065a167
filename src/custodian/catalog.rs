//! The catalog (`ledger.toml`): which kinds exist and how each is executed.
//!
//! ```toml
//! [kinds.refund]
//! url = "http://127.0.0.1:9000/refund"   # HTTP executor
//! timeout = "10s"                        # the effect's deadline (default 30s)
//! headers = { "x-api-key" = "secret" }   # sent with every call
//! reconcile_url = "http://127.0.0.1:9000/applied/{key}"   # optional probe
//!
//! [kinds.ping]
//! executor = "noop"                      # built in
//! ```

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::effects::{DEFAULT_TIMEOUT, Effects, Noop};
use super::http_executor::HttpExecutor;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    #[serde(default)]
    pub kinds: BTreeMap<String, KindConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindConfig {
    /// `http` (the default when `url` is set) or `noop`.
    pub executor: Option<String>,
    pub url: Option<String>,
    pub timeout: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The reconcile probe for the HTTP executor (`{key}` is replaced by the
    /// downstream key): 200 applied, 404 not applied, else unknown.
    pub reconcile_url: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a valid catalog: {source}")]
    Parse {
        path: String,
        source: Box<toml::de::Error>,
    },
    #[error("kind {kind}: {problem}")]
    Invalid { kind: String, problem: String },
}

impl Catalog {
    pub fn load(path: &Path) -> Result<Catalog, CatalogError> {
        let text = std::fs::read_to_string(path).map_err(|source| CatalogError::Read {
            path: path.display().to_string(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| CatalogError::Parse {
            path: path.display().to_string(),
            source: Box::new(source),
        })
    }

    /// The executors this catalog describes, on top of the built-in `noop`.
    pub fn effects(&self) -> Result<Effects, CatalogError> {
        let mut effects = Effects::default();
        for (kind, cfg) in &self.kinds {
            let invalid = |problem: String| CatalogError::Invalid {
                kind: kind.clone(),
                problem,
            };
            crate::domain::Kind::parse(kind).map_err(|e| invalid(e.to_string()))?;
            let timeout = match &cfg.timeout {
                Some(t) => parse_duration(t).ok_or_else(|| {
                    invalid(format!("timeout {t:?} is not like 10s, 500ms or 2m"))
                })?,
                None => DEFAULT_TIMEOUT,
            };
            match (cfg.executor.as_deref(), &cfg.url) {
                (Some("noop"), None) => effects.register(kind, Noop, timeout),
                (None | Some("http"), Some(url)) => {
                    let executor = HttpExecutor::new(url.clone(), cfg.headers.clone(), timeout)
                        .map_err(|e| invalid(e.to_string()))?
                        .with_reconcile_url(cfg.reconcile_url.clone());
                    effects.register(kind, executor, timeout);
                }
                (None | Some("http"), None) => {
                    return Err(invalid("an http executor needs a url".into()));
                }
                (Some(other), _) => {
                    return Err(invalid(format!(
                        "unknown executor {other:?} (http or noop)"
                    )));
                }
            }
        }
        Ok(effects)
    }
}

/// `500ms`, `10s`, `2m`.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (number, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map(|i| s.split_at(i))?;
    let n: u64 = number.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => n.checked_mul(60).map(Duration::from_secs),
        _ => None,
    }
    .filter(|d| !d.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_catalog_declares_http_and_noop_kinds() {
        let catalog: Catalog = toml::from_str(
            r#"
            [kinds.refund]
            url = "http://127.0.0.1:9/refund"
            timeout = "250ms"
            headers = { "x-api-key" = "k" }

            [kinds.ping]
            executor = "noop"
            "#,
        )
        .unwrap();
        let effects = catalog.effects().unwrap();
        assert_eq!(
            effects.get("refund").unwrap().timeout,
            Duration::from_millis(250)
        );
        assert!(effects.get("ping").is_some());
        assert!(effects.get("noop").is_some(), "noop is always there");
        assert!(effects.get("charge").is_none());
    }

    #[test]
    fn mistakes_in_the_catalog_are_reported() {
        for bad in [
            "[kinds.refund]\ntimeout = \"1s\"",
            "[kinds.refund]\nurl = \"http://x\"\ntimeout = \"soon\"",
            "[kinds.refund]\nexecutor = \"carrier-pigeon\"",
            "[kinds.Refund]\nexecutor = \"noop\"",
        ] {
            let catalog: Catalog = toml::from_str(bad).unwrap();
            assert!(catalog.effects().is_err(), "{bad}");
        }
        assert!(toml::from_str::<Catalog>("[kinds.refund]\nurll = \"x\"").is_err());
    }

    #[test]
    fn durations_parse_in_milliseconds_seconds_and_minutes() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        for bad in ["", "10", "s", "0s", "1h", "-1s", "1.5s"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }
}

//! The executors a catalog (`ledger.toml`) describes: the custodian's
//! [`Effects`], built from the kinds' `executor`, `url`, `timeout`, `headers`
//! and `reconcile_url`. Kept here so the API, which reads only the
//! catalog's admission policies, does not depend on the executors.

use crate::catalog::{Catalog, CatalogError, parse_duration};

use super::effects::{DEFAULT_PROBE_MARGIN, DEFAULT_TIMEOUT, Effects, Noop};
use super::http_executor::HttpExecutor;

impl Catalog {
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
            let margin = match &cfg.probe_margin {
                Some(m) => parse_duration(m).ok_or_else(|| {
                    invalid(format!("probe_margin {m:?} is not like 10s, 500ms or 2m"))
                })?,
                None => DEFAULT_PROBE_MARGIN,
            };
            let retry = cfg
                .retry
                .as_ref()
                .map(|r| r.policy())
                .transpose()
                .map_err(invalid)?;
            let contract = retry
                .as_ref()
                .map(|r| r.contract.clone())
                .unwrap_or_default();
            match (cfg.executor.as_deref(), &cfg.url) {
                // A kind may declare only its admission policy.
                (None, None) => {}
                (Some("noop"), None) => effects.register_with_margin(kind, Noop, timeout, margin),
                (None | Some("http"), Some(url)) => {
                    let executor = HttpExecutor::new(url.clone(), cfg.headers.clone(), timeout)
                        .map_err(|e| invalid(e.to_string()))?
                        .with_reconcile_url(cfg.reconcile_url.clone())
                        .with_contract(contract);
                    effects.register_with_margin(kind, executor, timeout, margin);
                }
                (Some("http"), None) => {
                    return Err(invalid("an http executor needs a url".into()));
                }
                (Some(other), _) => {
                    return Err(invalid(format!(
                        "unknown executor {other:?} (http or noop)"
                    )));
                }
            }
            if let Some(policy) = retry {
                if effects.get(kind).is_none() {
                    return Err(invalid(
                        "a retry policy needs an executor (url or executor)".into(),
                    ));
                }
                effects.retry(kind, policy);
            }
        }
        effects.limit_providers(self.providers()?);
        Ok(effects)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_catalog_declares_http_and_noop_kinds() {
        let catalog: Catalog = toml::from_str(
            r#"
            [kinds.refund]
            url = "http://127.0.0.1:9/refund"
            timeout = "250ms"
            probe_margin = "2s"
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
        assert_eq!(
            effects.get("refund").unwrap().window(),
            Duration::from_millis(2250),
            "the deadline plus the probe margin"
        );
        assert_eq!(
            effects.get("ping").unwrap().probe_margin,
            DEFAULT_PROBE_MARGIN
        );
        assert!(effects.get("noop").is_some(), "noop is always there");
        assert!(effects.get("charge").is_none());
    }

    #[test]
    fn a_kind_may_retry_what_its_provider_did_not_apply() {
        let catalog: Catalog = toml::from_str(
            r#"
            [kinds.refund]
            url = "http://127.0.0.1:9/refund"
            [kinds.refund.retry]
            max_attempts = 4
            initial_interval = "500ms"
            deadline = "10m"
            statuses = [429, 503]
            "#,
        )
        .unwrap();
        let effects = catalog.effects().unwrap();
        let policy = effects.get("refund").unwrap().retry.clone().unwrap();
        assert_eq!(policy.max_attempts, 4);
        assert_eq!(policy.initial_interval, Duration::from_millis(500));
        assert_eq!(policy.deadline, Some(Duration::from_secs(600)));
        assert_eq!(policy.contract.statuses, [429, 503]);
        assert!(effects.get("noop").unwrap().retry.is_none());
    }

    #[test]
    fn mistakes_in_the_catalog_are_reported() {
        for bad in [
            "[kinds.refund]\nexecutor = \"http\"\ntimeout = \"1s\"",
            "[kinds.refund]\nurl = \"http://x\"\ntimeout = \"soon\"",
            "[kinds.refund]\nexecutor = \"carrier-pigeon\"",
            "[kinds.refund]\nurl = \"http://x\"\nprobe_margin = \"later\"",
            "[kinds.Refund]\nexecutor = \"noop\"",
            "[kinds.refund]\nexecutor = \"noop\"\n[kinds.refund.retry]\nmax_attempts = 0",
            "[kinds.refund]\n[kinds.refund.retry]\nmax_attempts = 3",
            "[kinds.refund]\nurl = \"http://x\"\n[kinds.refund.retry]\nmax_attempts = 3\njitter = 2.0",
            "[kinds.refund]\nurl = \"http://x\"\n[kinds.refund.retry]\nmax_attempts = 3\nmax_interval = \"soon\"",
        ] {
            let catalog: Catalog = toml::from_str(bad).unwrap();
            assert!(catalog.effects().is_err(), "{bad}");
        }
        assert!(toml::from_str::<Catalog>("[kinds.refund]\nurll = \"x\"").is_err());
    }
}

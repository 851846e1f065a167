//! `[providers.<name>]`: the limits per provider a catalog names, and the
//! kinds that belong to each (`domain::limits`).

use serde::Deserialize;

use super::{Catalog, CatalogError};
use crate::domain::limits::ProviderLimit;

/// `[providers.<name>]`: see `domain::limits::ProviderLimit`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub max_in_flight: Option<u32>,
    pub rate: Option<f64>,
    pub burst: Option<u32>,
}

impl Catalog {
    /// The limits per provider, each with its kinds; a kind naming a
    /// provider the catalog does not declare refuses the catalog, as does a
    /// provider whose limits cannot work.
    pub fn providers(&self) -> Result<Vec<ProviderLimit>, CatalogError> {
        let mut limits = Vec::new();
        for (name, cfg) in &self.providers {
            crate::domain::Kind::parse(name).map_err(|e| CatalogError::Invalid {
                kind: format!("providers.{name}"),
                problem: e.to_string(),
            })?;
            let mut limit = ProviderLimit::new(name, cfg.max_in_flight, cfg.rate, cfg.burst)
                .map_err(|problem| CatalogError::Invalid {
                    kind: format!("providers.{name}"),
                    problem,
                })?;
            limit.kinds = self
                .kinds
                .iter()
                .filter(|(_, k)| k.provider.as_deref() == Some(name.as_str()))
                .map(|(kind, _)| kind.clone())
                .collect();
            limits.push(limit);
        }
        for (kind, cfg) in &self.kinds {
            if let Some(p) = &cfg.provider
                && !self.providers.contains_key(p)
            {
                return Err(CatalogError::Invalid {
                    kind: kind.clone(),
                    problem: format!("provider {p:?} is not declared: add [providers.{p}]"),
                });
            }
        }
        Ok(limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(text: &str) -> Catalog {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn a_provider_gathers_the_kinds_that_name_it() {
        let c = catalog(
            r#"
            [kinds.refund]
            url = "http://127.0.0.1:9/refund"
            provider = "stripe"
            [kinds.charge]
            url = "http://127.0.0.1:9/charge"
            provider = "stripe"
            [kinds.ping]
            executor = "noop"
            [providers.stripe]
            max_in_flight = 5
            rate = 50
            burst = 10
            "#,
        );
        let limits = c.providers().unwrap();
        assert_eq!(limits.len(), 1);
        assert_eq!(limits[0].kinds, ["charge", "refund"]);
        assert_eq!(
            (limits[0].max_in_flight, limits[0].rate, limits[0].burst),
            (Some(5), Some(50.0), 10)
        );
        // The custodian's executors carry them.
        assert_eq!(c.effects().unwrap().providers(), &limits[..]);
    }

    #[test]
    fn limits_that_cannot_work_refuse_the_catalog_for_the_api_and_the_custodian_alike() {
        for (text, says) in [
            (
                "[kinds.refund]\nexecutor = \"noop\"\nprovider = \"stripe\"",
                "provider \"stripe\" is not declared",
            ),
            ("[providers.stripe]\n", "needs max_in_flight, rate or both"),
            ("[providers.stripe]\nmax_in_flight = 0", "max_in_flight 0"),
            ("[providers.stripe]\nrate = 0.0", "rate 0"),
            (
                "[providers.stripe]\nmax_in_flight = 2\nburst = 3",
                "it needs a rate",
            ),
            ("[providers.Stripe]\nrate = 1.0", "providers.Stripe"),
        ] {
            let c = catalog(text);
            let policies = c.policies().unwrap_err().to_string();
            assert!(policies.contains(says), "{text}: {policies}");
            let effects = c.effects().unwrap_err().to_string();
            assert!(effects.contains(says), "{text}: {effects}");
        }
        assert!(toml::from_str::<Catalog>("[providers.stripe]\nconcurrency = 2").is_err());
    }
}

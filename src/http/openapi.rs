//! The OpenAPI 3.1 description, generated from the handlers and types
//! themselves and served at `/openapi.json`. `docs/openapi.json` is the
//! committed copy; a test fails when the two drift apart.

use axum::Json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(Debug, OpenApi)]
#[openapi(
    info(title = "command-ledger", description = "A durable command ledger: record before dispatch, at most once, honest outcomes."),
    paths(
        super::submit::submit,
        super::submit::invoke,
        super::commands::get_one,
        super::commands::list,
        super::commands::history,
        super::commands::cancel,
        super::authorities::get_one,
        super::holds::list,
        super::holds::get_one,
        super::holds::release,
        super::holds::reject,
        super::state::get,
        super::health::healthz,
        super::health::readyz,
    ),
    modifiers(&Bearer)
)]
pub struct ApiDoc;

#[derive(Debug)]
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("clt_ token")
                    .build(),
            ),
        );
    }
}

/// The document as served and committed: pretty JSON, a trailing newline.
pub fn document() -> String {
    let mut text = ApiDoc::openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serializes");
    text.push('\n');
    text
}

pub(super) async fn serve() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed `docs/openapi.json` is the document the code generates.
    /// After an API change: `UPDATE_OPENAPI=1 cargo test --lib openapi`.
    #[test]
    fn the_committed_openapi_document_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json");
        let generated = document();
        if std::env::var_os("UPDATE_OPENAPI").is_some() {
            std::fs::write(path, &generated).expect("writing docs/openapi.json");
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == generated,
            "docs/openapi.json is out of date: run UPDATE_OPENAPI=1 cargo test --lib openapi and commit it"
        );
    }

    #[test]
    fn every_reference_in_the_document_resolves() {
        let doc: serde_json::Value = serde_json::from_str(&document()).unwrap();
        let schemas = doc["components"]["schemas"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let text = document();
        for reference in text.split("\"$ref\": \"#/components/schemas/").skip(1) {
            let name = reference.split('"').next().unwrap();
            assert!(schemas.contains_key(name), "dangling reference to {name}");
        }
        assert_eq!(doc["openapi"], "3.1.0");
        assert!(doc["paths"]["/v1/commands"]["post"].is_object());
    }
}

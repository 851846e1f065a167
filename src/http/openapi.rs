//! The OpenAPI 3.1 description, generated from the handlers and types
//! themselves and served at `/openapi.json`. `docs/openapi.json` is the
//! committed copy; a test fails when the two drift apart.

use axum::Json;
use utoipa::openapi::header::Header;
use utoipa::openapi::link::Link;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Content, Object, Ref, RefOr, Response, Type};
use utoipa::{Modify, OpenApi};

#[derive(Debug, OpenApi)]
#[openapi(
    info(title = "command-ledger", description = "A durable command ledger: record before dispatch, at most once, honest outcomes. \
Every error is `application/problem+json` (the `Problem` schema), including those no operation lists: \
404 for a path that does not exist, 405 (with `Allow`) for a method a path does not have, \
and 400, 414 or 431 for a request the HTTP layer cannot parse (a header value with control bytes, say)."),
    paths(
        super::submit::submit,
        super::batch::submit_batch,
        super::submit::invoke,
        super::kinds::list,
        super::explain::explain,
        super::commands::get_one,
        super::commands::list,
        super::commands::history,
        super::commands::cancel,
        super::resolutions::resolve,
        super::resolutions::probe,
        super::resolutions::probe_authority,
        super::authorities::get_one,
        super::holds::list,
        super::holds::get_one,
        super::holds::release,
        super::holds::reject,
        super::webhooks::register,
        super::webhooks::list,
        super::webhooks::disable,
        super::webhooks::events,
        super::webhooks::redeliver,
        super::ledger_counts::get,
        super::events::stream,
        super::metrics::get,
        super::health::healthz,
        super::health::readyz,
        super::submit::api_invoke,
        super::adapter::get_state,
        super::adapter::release,
        super::adapter::reset,
    ),
    // Referenced by name from the batch endpoint's description, which does
    // not hold its items to it (an item that is not one is answered invalid).
    components(schemas(super::batch::BatchItemBody)),
    modifiers(&Bearer, &Uniform)
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

/// What every operation shares, said once here because it comes from the
/// shared extractors and error type rather than from any one handler:
/// - every error is `application/problem+json` (the `Problem` schema; the
///   document's description names the errors no operation lists: 404, 405
///   with `Allow`, and the HTTP layer's 400/414/431);
/// - an operation behind a bearer token can answer 401 (no live token), 429
///   (rate limit) and 503 (database unreachable);
/// - one with a path id, query parameters or a body answers 400 to a bad
///   one, and one with a body also 408 (too slow), 413 (too large) and 415
///   (not JSON);
///
/// plus links from a submitted command to reading it, its history and
/// cancelling it, for clients (and stateful fuzzers) that follow links.
#[derive(Debug)]
struct Uniform;

const PROBLEM: &str = "application/problem+json";

impl Modify for Uniform {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for (path, item) in &mut openapi.paths.paths {
            for op in [&mut item.get, &mut item.post, &mut item.delete]
                .into_iter()
                .flatten()
            {
                for status in shared_statuses(path, op) {
                    op.responses
                        .responses
                        .entry(status.to_owned())
                        .or_insert_with(|| problem_response(status).into());
                }
                for (status, response) in &mut op.responses.responses {
                    if let RefOr::T(response) = response
                        && !status.starts_with('2')
                        && let Some(content) = response.content.shift_remove("application/json")
                    {
                        response.content.insert(PROBLEM.to_owned(), content);
                    }
                }
                if op.operation_id.as_deref() == Some("submitCommand") {
                    link_submitted(op);
                }
                if let Some(statuses) = match op.operation_id.as_deref() {
                    Some("submitCommand") => Some(&["200", "202"][..]),
                    Some("getCommand") => Some(&["200"][..]),
                    _ => None,
                } {
                    key_expires(op, statuses);
                }
            }
        }
    }
}

fn shared_statuses(path: &str, op: &Operation) -> Vec<&'static str> {
    let mut statuses = Vec::new();
    if op.security.is_some() {
        statuses.extend(["401", "429", "503"]);
    }
    let has_query = op.parameters.iter().flatten().any(|p| match p {
        RefOr::T(p) => p.parameter_in == ParameterIn::Query,
        RefOr::Ref(_) => false,
    });
    if path.contains('{') || has_query {
        statuses.push("400");
    }
    if op.request_body.is_some() {
        statuses.extend(["400", "408", "413", "415"]);
    }
    statuses
}

fn problem_response(status: &str) -> Response {
    let description = match status {
        "400" => "the request is malformed",
        "401" => "no live bearer token",
        "408" => "the body did not arrive in time",
        "413" => "the body is too large",
        "415" => "the body is not JSON",
        "429" => "too many requests from this principal; see Retry-After",
        _ => "the database cannot be reached; nothing was recorded; see Retry-After",
    };
    Response::builder()
        .description(description)
        .content(
            PROBLEM,
            Content::new(Some(Ref::from_schema_name("Problem"))),
        )
        .build()
}

/// `Idempotency-Key-Expires` on the responses that carry it (the header
/// `views::key_expiry` sets), described once.
fn key_expires(op: &mut Operation, statuses: &[&str]) {
    for status in statuses {
        if let Some(RefOr::T(response)) = op.responses.responses.get_mut(*status) {
            let header = Header::builder()
                .schema(Some(Object::with_type(Type::String)))
                .description(Some(super::views::KEY_EXPIRES_DESCRIPTION))
                .build();
            response
                .headers
                .insert(super::views::KEY_EXPIRES.to_owned(), header.into());
        }
    }
}

fn link_submitted(op: &mut Operation) {
    for status in ["200", "202"] {
        if let Some(RefOr::T(response)) = op.responses.responses.get_mut(status) {
            for (name, operation) in [
                ("GetCommand", "getCommand"),
                ("GetCommandHistory", "getCommandHistory"),
                ("CancelCommand", "cancelCommand"),
            ] {
                let link = Link::builder()
                    .operation_id(operation)
                    .parameter("id", "$response.body#/id")
                    .build();
                response.links.insert(name.to_owned(), link.into());
            }
        }
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

    /// Wherever the document shows a kind (a body's `kind` or `tool`, the
    /// listing's `kind` parameter) or an authority id, it shows the one
    /// pattern; and each pattern accepts exactly what the ledger accepts.
    #[test]
    fn kinds_and_authority_ids_are_shown_with_the_one_pattern_the_ledger_applies() {
        use crate::domain::names::{AUTHORITY_ID_PATTERN, KIND_PATTERN};
        use crate::domain::{AuthorityId, Kind};
        use serde_json::{Value, json};

        let doc: Value = serde_json::from_str(&document()).unwrap();
        let schemas = &doc["components"]["schemas"];
        let mut kinds = vec![
            &schemas["SubmitBody"]["properties"]["kind"],
            &schemas["BatchItemBody"]["properties"]["kind"],
            &schemas["ExplainBody"]["properties"]["kind"],
            &schemas["InvokeBody"]["properties"]["tool"],
        ];
        let mut authorities = vec![
            &schemas["AuthorityName"],
            &schemas["PinnedAuthority"]["properties"]["id"],
        ];
        for (path, item) in doc["paths"].as_object().unwrap() {
            for op in item.as_object().unwrap().values() {
                for param in op["parameters"].as_array().into_iter().flatten() {
                    match (param["name"].as_str(), param["in"].as_str()) {
                        (Some("kind"), _) => kinds.push(&param["schema"]),
                        (Some("authority"), _) => authorities.push(&param["schema"]),
                        (Some("id"), Some("path")) if path.starts_with("/v1/authorities/") => {
                            authorities.push(&param["schema"]);
                        }
                        _ => {}
                    }
                }
            }
        }
        assert_eq!(kinds.len(), 5, "{kinds:?}");
        assert_eq!(authorities.len(), 5, "{authorities:?}");
        for kind in kinds {
            assert_eq!(kind["pattern"], KIND_PATTERN, "{kind}");
        }
        for authority in authorities {
            assert_eq!(authority["pattern"], AUTHORITY_ID_PATTERN, "{authority}");
        }

        let matches =
            |pattern: &str, s: &str| jsonschema::is_valid(&json!({"pattern": pattern}), &json!(s));
        let mut samples: Vec<String> = [
            "",
            "a",
            "refund",
            "refund.v2",
            "send_email-v2",
            "Refund",
            "1refund",
            "re fund",
            "réfund",
            "a:b",
            "eu-west:payments.1",
            "7",
            "-x",
            "x/y",
            "x\n",
            "x\u{0}",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        for n in [63, 64, 65, 127, 128, 129] {
            samples.push("a".repeat(n));
        }
        for s in &samples {
            assert_eq!(
                matches(KIND_PATTERN, s),
                Kind::parse(s).is_ok(),
                "kind {s:?}"
            );
            assert_eq!(
                matches(AUTHORITY_ID_PATTERN, s),
                AuthorityId::parse(s).is_ok(),
                "authority {s:?}"
            );
        }
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

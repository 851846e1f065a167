//! `command-ledger mcp`: the ledger as a Model Context Protocol server, for
//! agents. Each kind the API lists (`GET /v1/kinds`) with an authority is a
//! tool whose input schema is the kind's args schema, and every tool call is
//! a `POST /v1/invoke`: admitted as an intent, so an agent that retries,
//! re-plans or runs as two workers gets one execution and its stored result.
//!
//! It is a client of the HTTP API (the client crate, as `submit` is): no
//! database, no effects, and the API's own authentication decides who calls.

use command_ledger_client::{Client, Error, Kind};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};
use std::sync::Arc;

/// The `_meta` field of a tool call that names its run explicitly.
pub const RUN_ID_META: &str = "runId";

/// What every tool's description ends with: how calls are admitted.
const ADMISSION: &str = "Calls are admitted by intent, not by bytes: repeats of one call (retried, \
spelled differently, or sent by another worker) make one execution, and the result says which \
this was: outcome `executed` (this call ran it), `coalesced` (another call's execution, in \
flight), `replay` (already finished), `held` (a near-duplicate from another run, waiting for a \
person) or `pending` (no outcome yet: calling again with the same arguments reads it, never \
runs it twice). `state` is the command's (`applied`, `failed`, `ambiguous`: nobody can tell, \
do not retry blindly).";

/// Who a session's calls are made as.
#[derive(Debug, Clone)]
enum Principal {
    /// The token given at start (stdio: the agent host launched us for one principal).
    Fixed(Client),
    /// Each HTTP request's own `Authorization: Bearer` token, passed to the API.
    PerRequest(Client),
}

/// One MCP session's view of the ledger.
#[derive(Debug, Clone)]
pub struct LedgerTools {
    principal: Principal,
    /// The run this session's calls belong to (`runId` of `/v1/invoke`),
    /// unless a call names its own in `_meta.runId`.
    run_id: Arc<str>,
}

impl LedgerTools {
    /// A session whose calls are made with `client`'s token.
    pub fn new(client: Client, run_id: Option<String>) -> Self {
        LedgerTools {
            principal: Principal::Fixed(client),
            run_id: run_id.unwrap_or_else(session_run_id).into(),
        }
    }

    /// A session over HTTP: each request's bearer token is its principal.
    pub fn per_request(client: Client, run_id: Option<String>) -> Self {
        LedgerTools {
            principal: Principal::PerRequest(client),
            run_id: run_id.unwrap_or_else(session_run_id).into(),
        }
    }

    fn client(&self, context: &RequestContext<RoleServer>) -> Result<Client, McpError> {
        match &self.principal {
            Principal::Fixed(client) => Ok(client.clone()),
            Principal::PerRequest(client) => context
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|parts| bearer(&parts.headers))
                .map(|token| client.with_token(token))
                .ok_or_else(|| {
                    McpError::invalid_request("an Authorization: Bearer token is required", None)
                }),
        }
    }
}

/// A run id for a new session: one per MCP session, so that a retry within
/// the session is the same request, and another session is another run.
fn session_run_id() -> String {
    format!("mcp:{}", uuid::Uuid::now_v7())
}

/// The bearer token of a request, if it has one.
pub fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The tool for a kind, or `None` when the catalog names no authority for
/// it (a call could not say which executor may run it).
pub fn tool(kind: &Kind) -> Option<Tool> {
    let authority = kind.authority.as_deref()?;
    let mut schema = match &kind.args_schema {
        Value::Object(map) => map.clone(),
        _ => JsonObject::new(),
    };
    schema
        .entry("type")
        .or_insert_with(|| Value::String("object".to_owned()));
    let about = kind.description.clone().unwrap_or_else(|| {
        format!(
            "Records a `{}` command, run by the authority `{authority}`.",
            kind.kind
        )
    });
    Some(
        Tool::new(kind.kind.clone(), format!("{about}\n\n{ADMISSION}"), schema)
            .with_annotations(ToolAnnotations::new().idempotent(true).open_world(true)),
    )
}

/// A tool call's run: `_meta.runId` when the call names one, else the session's.
fn run_id<'a>(request: &'a CallToolRequestParams, session: &'a str) -> &'a str {
    request
        .meta
        .as_ref()
        .and_then(|meta| meta.get(RUN_ID_META))
        .and_then(Value::as_str)
        .unwrap_or(session)
}

/// What a call answers: the invoke answer (and the run it was made under)
/// as structured content, or a tool error carrying the API's problem.
async fn call(client: &Client, name: &str, run_id: &str, args: JsonObject) -> CallToolResult {
    match client.invoke(name, run_id, &Value::Object(args)).await {
        Ok(invoked) => {
            let mut value = serde_json::to_value(&invoked).unwrap_or_else(|_| json!({}));
            if let Value::Object(map) = &mut value {
                map.insert("tool".to_owned(), json!(name));
                map.insert("run_id".to_owned(), json!(run_id));
            }
            CallToolResult::structured(value)
        }
        Err(Error::Problem {
            status,
            problem_type,
            detail,
            body,
        }) => {
            let mut result = CallToolResult::structured_error(body);
            result.content = vec![ContentBlock::text(format!(
                "refused ({status} {problem_type}): {detail}"
            ))];
            result
        }
        Err(e) => CallToolResult::error(vec![ContentBlock::text(format!(
            "the ledger did not answer ({e}); the call may or may not have been recorded: \
             calling again with the same arguments is safe and tells"
        ))]),
    }
}

impl ServerHandler for LedgerTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("command-ledger", env!("CARGO_PKG_VERSION"))
                    .with_title("command ledger"),
            )
            .with_instructions(
                "Each tool records a command in a durable ledger, which runs it at most once. \
                 Repeating a call is always safe.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let kinds = self.client(&context)?.kinds().await.map_err(|e| {
            McpError::internal_error(format!("cannot list the ledger's kinds: {e}"), None)
        })?;
        Ok(ListToolsResult::with_all_items(
            kinds.iter().filter_map(tool).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let client = self.client(&context)?;
        let run_id = run_id(&request, &self.run_id).to_owned();
        let args = request.arguments.clone().unwrap_or_default();
        tracing::info!(tool = %request.name, run_id, "tool call");
        Ok(call(&client, &request.name, &run_id, args).await.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(authority: Option<&str>, schema: Value) -> Kind {
        Kind {
            kind: "refund".to_owned(),
            authority: authority.map(str::to_owned),
            key: "fingerprint".to_owned(),
            description: None,
            args_schema: schema,
        }
    }

    #[test]
    fn a_kind_with_an_authority_is_a_tool_with_its_args_schema() {
        let schema = json!({"type": "object", "required": ["to"],
                            "properties": {"to": {"type": "string"}}});
        let tool = tool(&kind(Some("payments"), schema.clone())).unwrap();
        assert_eq!(tool.name, "refund");
        assert_eq!(Value::Object((*tool.input_schema).clone()), schema);
        let description = tool.description.unwrap();
        assert!(description.contains("`payments`"), "{description}");
        assert!(description.contains("coalesced"), "{description}");
        // A schema without a type is still an object schema, as MCP requires.
        let untyped = super::tool(&kind(Some("payments"), json!({}))).unwrap();
        assert_eq!(untyped.input_schema.get("type"), Some(&json!("object")));
        assert!(super::tool(&kind(None, schema)).is_none());
    }

    #[test]
    fn a_bearer_token_is_read_from_the_authorization_header() {
        let mut headers = axum::http::HeaderMap::new();
        assert_eq!(bearer(&headers), None);
        headers.insert("authorization", "Bearer clt_abc".parse().unwrap());
        assert_eq!(bearer(&headers), Some("clt_abc"));
        headers.insert("authorization", "Basic abc".parse().unwrap());
        assert_eq!(bearer(&headers), None);
        headers.insert("authorization", "bearer  ".parse().unwrap());
        assert_eq!(bearer(&headers), None);
    }

    #[test]
    fn a_call_names_its_run_in_meta_or_takes_the_sessions() {
        let plain = CallToolRequestParams::new("refund");
        assert_eq!(run_id(&plain, "mcp:s"), "mcp:s");
        let mut named = CallToolRequestParams::new("refund");
        let mut meta = rmcp::model::RequestMetaObject::default();
        meta.insert(RUN_ID_META.to_owned(), json!("worker-a"));
        named.meta = Some(meta);
        assert_eq!(run_id(&named, "mcp:s"), "worker-a");
        assert!(session_run_id().starts_with("mcp:"));
        assert_ne!(session_run_id(), session_run_id());
    }
}

//! `command-ledger mcp`: the ledger as a Model Context Protocol server, for
//! agents. Each kind the API lists (`GET /v1/kinds`) with an authority is a
//! tool whose input schema is the kind's args schema, and every tool call is
//! a `POST /v1/invoke`: admitted as an intent, so an agent that retries,
//! re-plans or runs as two workers gets one execution and its stored result.
//!
//! It is a client of the HTTP API (the client crate, as `submit` is): no
//! database, no effects, and the API's own authentication decides who calls.

use command_ledger_client::{Client, Error, Invoked, Kind, State};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, RequestMetaObject, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};
use std::sync::Arc;

/// The `_meta` field of a tool call that names its run explicitly.
pub const RUN_ID_META: &str = "runId";

/// The `_meta` field the stdio reader sets on a tool call whose JSON named a
/// key twice (`marked_duplicate`): the call is refused, nothing is called.
pub const DUPLICATE_KEY_META: &str = "command-ledger/duplicateKey";

/// A line of stdio as the MCP library is given it: unchanged, unless it is
/// a tool call whose JSON names a key twice in one object (the library
/// would keep the last value, and so call the tool with arguments another
/// reader of the line would not see): then it carries the duplicate in its
/// `_meta`, and `call_tool` refuses it, as the API refuses such a body.
pub fn marked_duplicate(line: &str) -> std::borrow::Cow<'_, str> {
    let Some(duplicate) = crate::domain::json_keys::first_duplicate(line.as_bytes()) else {
        return line.into();
    };
    let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(line) else {
        return line.into();
    };
    if message.get("method").and_then(Value::as_str) != Some("tools/call") {
        return line.into();
    }
    let params = message.entry("params").or_insert_with(|| json!({}));
    if let Value::Object(params) = params {
        let meta = params.entry("_meta").or_insert_with(|| json!({}));
        if let Value::Object(meta) = meta {
            meta.insert(
                DUPLICATE_KEY_META.to_owned(),
                json!(format!("{duplicate} (at {})", duplicate.pointer())),
            );
        }
    }
    Value::Object(message).to_string().into()
}

/// What every tool's description ends with: how calls are admitted.
const ADMISSION: &str = "Calls are admitted by intent, not by bytes: repeats of one call (retried, \
spelled differently, or sent by another worker) make one execution, and the result says which \
this was: outcome `executed` (this call ran it), `coalesced` (another call's execution, in \
flight), `replay` (already finished), `held` (a near-duplicate from another run, waiting for a \
person) or `pending` (no outcome yet: calling again with the same arguments reads it, never \
runs it twice). `state` is the command's: only `applied` means it took effect; `failed`, \
`expired` and `cancelled` (nothing was done) and `ambiguous` (nobody can tell whether it \
ran: do not retry it) come back as tool errors.";

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

/// A tool call's run: `_meta.runId` when the call names one (a non-empty
/// string), else the session's. The SDK hands a request's `_meta` to the
/// handler in its context, not in the params.
fn run_id<'a>(meta: &'a RequestMetaObject, session: &'a str) -> &'a str {
    meta.get(RUN_ID_META)
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
        .unwrap_or(session)
}

/// The protocol error for a tool the ledger does not have: its name, and
/// the tools there are.
fn unknown_tool(name: &str, kinds: &[Kind]) -> McpError {
    let tools: Vec<&str> = kinds
        .iter()
        .filter(|k| k.authority.is_some())
        .map(|k| k.kind.as_str())
        .collect();
    McpError::invalid_params(
        format!(
            "unknown tool {name}; the tools are: {}",
            if tools.is_empty() {
                "none".to_owned()
            } else {
                tools.join(", ")
            }
        ),
        Some(json!({"tools": tools})),
    )
}

/// What a call answers: the invoke answer (and the run it was made under)
/// as structured content, or a tool error carrying the API's problem. An
/// outcome that is not a success (the effect failed, or nobody can tell
/// whether it ran) is a tool error too, its first text saying what
/// happened and what to do, so that no agent reads it as done.
fn answer(name: &str, run_id: &str, invoked: Result<Invoked, Error>) -> CallToolResult {
    match invoked {
        Ok(invoked) => {
            let warning = unsuccessful(name, &invoked);
            let mut value = serde_json::to_value(&invoked).unwrap_or_else(|_| json!({}));
            if let Value::Object(map) = &mut value {
                map.insert("tool".to_owned(), json!(name));
                map.insert("run_id".to_owned(), json!(run_id));
            }
            match warning {
                None => CallToolResult::structured(value),
                Some(text) => {
                    let mut result = CallToolResult::structured_error(value);
                    result.content.insert(0, ContentBlock::text(text));
                    result
                }
            }
        }
        Err(e) => refused(e),
    }
}

/// A call the ledger refused (a problem document) or did not answer.
fn refused(e: Error) -> CallToolResult {
    match e {
        Error::Problem {
            status,
            problem_type,
            detail,
            body,
        } => {
            let mut result = CallToolResult::structured_error(body);
            result.content = vec![ContentBlock::text(format!(
                "refused ({status} {problem_type}): {detail}; nothing was recorded"
            ))];
            result
        }
        e => CallToolResult::error(vec![ContentBlock::text(format!(
            "the ledger did not answer ({e}); the call may or may not have been recorded: \
             calling again with the same arguments is safe and tells"
        ))]),
    }
}

/// What an agent must be told about an outcome that is not a success, in
/// words: `None` for an applied command, a hold, or a command still running.
fn unsuccessful(name: &str, invoked: &Invoked) -> Option<String> {
    let state = invoked.state?;
    let id = invoked
        .command_id
        .map_or_else(|| "?".to_owned(), |id| id.to_string());
    let reason = invoked
        .error
        .as_ref()
        .and_then(|e| e.get("reason"))
        .and_then(Value::as_str)
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    match state {
        State::Ambiguous => Some(format!(
            "NOT CONFIRMED: {name} (command {id}) is ambiguous{reason}: it may or may not have \
             taken effect, and nobody can tell yet. Do not retry it: calling again only \
             replays this answer, and a new call that gets past the ledger could do it twice. \
             A person (or the kind's reconcile probe) settles it."
        )),
        State::Failed => Some(format!(
            "FAILED: {name} (command {id}) did not take effect{reason}{tries}; nothing was done.",
            tries = match invoked.attempts {
                Some(n) if n > 1 => format!(", after {n} attempts the ledger made"),
                _ => String::new(),
            }
        )),
        State::Expired => Some(format!(
            "NOT DONE: {name} (command {id}) expired before it could start{reason}; \
             nothing was done."
        )),
        State::Cancelled => Some(format!(
            "NOT DONE: {name} (command {id}) was cancelled before it started; nothing was done."
        )),
        _ => None,
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
        if let Some(duplicate) = context.meta.get(DUPLICATE_KEY_META).and_then(Value::as_str) {
            let mut result = CallToolResult::error(vec![ContentBlock::text(format!(
                "refused (400 /problems/invalid-body): {duplicate}; nothing was recorded"
            ))]);
            result.structured_content = Some(json!({
                "type": "/problems/invalid-body",
                "status": 400,
                "detail": duplicate,
            }));
            return Ok(result.into());
        }
        let mut client = self.client(&context)?;
        // A caller's trace context in `_meta` (as MCP's tracing convention
        // carries W3C Trace Context) goes on to the ledger with the call.
        if let Some(parent) = context.meta.get("traceparent").and_then(Value::as_str) {
            let state = context
                .meta
                .get("tracestate")
                .and_then(Value::as_str)
                .map(str::to_owned);
            client = client.with_trace_context(parent, state);
        }
        let run_id = run_id(&context.meta, &self.run_id).to_owned();
        let name = request.name.as_ref();
        tracing::info!(tool = %name, run_id, "tool call");
        // Only a tool the ledger lists is called (the API would refuse any
        // other as a kind without an authority, which says nothing useful).
        let kinds = match client.kinds().await {
            Ok(kinds) => kinds,
            Err(e) => return Ok(refused(e).into()),
        };
        if !kinds
            .iter()
            .any(|k| k.kind == name && k.authority.is_some())
        {
            return Err(unknown_tool(name, &kinds));
        }
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let invoked = client.invoke(name, &run_id, &args).await;
        Ok(answer(name, &run_id, invoked).into())
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
        let plain = RequestMetaObject::default();
        assert_eq!(run_id(&plain, "mcp:s"), "mcp:s");
        let mut named = RequestMetaObject::default();
        named.insert(RUN_ID_META.to_owned(), json!("worker-a"));
        assert_eq!(run_id(&named, "mcp:s"), "worker-a");
        let mut empty = RequestMetaObject::default();
        empty.insert(RUN_ID_META.to_owned(), json!(""));
        assert_eq!(run_id(&empty, "mcp:s"), "mcp:s");
        assert!(session_run_id().starts_with("mcp:"));
        assert_ne!(session_run_id(), session_run_id());
    }

    fn invoked(state: Option<State>, error: Option<Value>) -> Invoked {
        Invoked {
            outcome: if state.is_some() { "executed" } else { "held" }.to_owned(),
            fingerprint: "f".to_owned(),
            command_id: state.map(|_| uuid::Uuid::from_u128(7)),
            state,
            result: None,
            error,
            hold_id: None,
            attempts: None,
        }
    }

    fn text(result: &CallToolResult) -> String {
        result
            .content
            .first()
            .and_then(|c| c.as_text())
            .map(|t| t.text.clone())
            .unwrap_or_default()
    }

    #[test]
    fn only_an_applied_held_or_running_command_is_not_a_tool_error() {
        for state in [
            Some(State::Applied),
            Some(State::Pending),
            Some(State::EffectStarted),
            None,
        ] {
            let r = answer("refund", "run", Ok(invoked(state, None)));
            assert_ne!(r.is_error, Some(true), "{state:?}");
            let structured = r.structured_content.unwrap();
            assert_eq!(structured["run_id"], "run");
        }
        for (state, says) in [
            (State::Failed, "FAILED: refund (command "),
            (State::Expired, "NOT DONE: refund"),
            (State::Cancelled, "NOT DONE: refund"),
            (State::Ambiguous, "NOT CONFIRMED: refund"),
        ] {
            let r = answer(
                "refund",
                "run",
                Ok(invoked(Some(state), Some(json!({"reason": "timeout"})))),
            );
            assert_eq!(r.is_error, Some(true), "{state:?}");
            let first = text(&r);
            assert!(first.starts_with(says), "{first}");
            // The structured answer is kept, whole.
            let structured = r.structured_content.unwrap();
            assert_eq!(structured["command_id"], json!(uuid::Uuid::from_u128(7)));
            assert_eq!(structured["tool"], "refund");
        }
        let mut tired = invoked(Some(State::Failed), Some(json!({"reason": "not_applied"})));
        tired.attempts = Some(3);
        let first = text(&answer("refund", "run", Ok(tired)));
        assert!(
            first.contains("(not_applied), after 3 attempts the ledger made"),
            "{first}"
        );
        let ambiguous = answer(
            "refund",
            "run",
            Ok(invoked(
                Some(State::Ambiguous),
                Some(json!({"reason": "timeout"})),
            )),
        );
        let first = text(&ambiguous);
        assert!(
            first.contains("(timeout)") && first.contains("Do not retry it"),
            "{first}"
        );
    }

    #[test]
    fn an_unknown_tool_is_named_with_the_tools_there_are() {
        let kinds = [
            kind(Some("payments"), json!({})),
            Kind {
                kind: "audit".to_owned(),
                ..kind(None, json!({}))
            },
        ];
        let e = unknown_tool("refnud", &kinds);
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert_eq!(e.message, "unknown tool refnud; the tools are: refund");
        assert_eq!(e.data, Some(json!({"tools": ["refund"]})));
        assert!(
            unknown_tool("x", &[])
                .message
                .ends_with("the tools are: none")
        );
    }
}

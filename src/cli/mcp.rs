//! `command-ledger mcp`: the catalog's kinds as MCP tools (`crate::mcp`),
//! over stdio (an agent host launches it, one principal: `--token`) or
//! streamable HTTP (`--http ADDR`, path `/mcp`; every request carries its
//! own bearer token, which the API checks: when a session opens, and at
//! every call).

use anyhow::Context as _;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use clap::Args;
use command_ledger_client::Client;
use rmcp::ServiceExt as _;
use rmcp::transport::common::http_header::HEADER_SESSION_ID;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use std::net::SocketAddr;
use std::sync::Arc;

use crate::mcp::{LedgerTools, bearer};

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Serve streamable HTTP at this address (`http://ADDR/mcp`) instead of
    /// stdio. Every request must carry `Authorization: Bearer TOKEN` (a ledger
    /// token; the API checks it), and only loopback host names are answered
    /// unless `--allowed-host` adds others.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// A host name the HTTP server answers besides localhost, 127.0.0.1 and
    /// ::1 (a guard against DNS rebinding). Repeat for more.
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
    /// The run every call belongs to (default: one per MCP session, so a
    /// retry within a session replays and another session is another run).
    #[arg(long)]
    pub run_id: Option<String>,
    /// The API's base URL.
    #[arg(
        long,
        env = "COMMAND_LEDGER_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub url: String,
    /// A bearer token (`token create` prints one); stdio only: over HTTP
    /// each request brings its own.
    #[arg(long, env = "COMMAND_LEDGER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

pub(super) async fn run(args: McpArgs) -> anyhow::Result<()> {
    match args.http {
        None => {
            let token = args.token.context(
                "mcp over stdio needs a token: --token or COMMAND_LEDGER_TOKEN \
                 (command-ledger token create --principal NAME --role device)",
            )?;
            let tools = LedgerTools::new(Client::new(&args.url, token), args.run_id);
            let running = tools
                .serve((checked_stdin(), tokio::io::stdout()))
                .await
                .context("starting the MCP session on stdio")?;
            running.waiting().await.context("the MCP session")?;
            Ok(())
        }
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding {addr}"))?;
            let addr = listener.local_addr()?;
            // Announced on stdout (stdio is not the protocol here), so a
            // script that asked for port 0 learns the port.
            println!("MCP (streamable HTTP): http://{addr}/mcp");
            let client = Client::new(&args.url, "");
            let run_id = args.run_id;
            let mut hosts = StreamableHttpServerConfig::default().allowed_hosts;
            hosts.extend(args.allowed_hosts);
            let config = StreamableHttpServerConfig::default().with_allowed_hosts(hosts);
            let stop = config.cancellation_token.clone();
            let service = StreamableHttpService::new(
                move || Ok(LedgerTools::per_request(client.clone(), run_id.clone())),
                Arc::new(LocalSessionManager::default()),
                config,
            );
            let app = axum::Router::new()
                .nest_service("/mcp", service)
                .layer(axum::middleware::from_fn(refuse_duplicate_keys))
                .layer(axum::middleware::from_fn_with_state(
                    Client::new(&args.url, ""),
                    require_token,
                ));
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    super::shutdown_signal().await;
                    stop.cancel();
                })
                .await
                .context("serving MCP over HTTP")
        }
    }
}

/// Refuses a request without a bearer token before it reaches a session,
/// and a request that would open a session (no `Mcp-Session-Id`: the
/// `initialize`) with a token the API does not accept, so that a wrong
/// token gets no session, as a missing one gets none. Within a session the
/// API checks the token at every call.
async fn require_token(
    axum::extract::State(client): axum::extract::State<Client>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = bearer(request.headers()) else {
        return problem(
            StatusCode::UNAUTHORIZED,
            "/problems/unauthorized",
            "send a ledger token as Authorization: Bearer TOKEN",
        );
    };
    if !request.headers().contains_key(HEADER_SESSION_ID) {
        match client.with_token(token).kinds().await {
            Ok(_) => {}
            // The API's refusal (401 for a token it does not know), as it gave it.
            Err(command_ledger_client::Error::Problem {
                status,
                problem_type,
                detail,
                ..
            }) => {
                let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
                return problem(status, &problem_type, &detail);
            }
            Err(e) => {
                tracing::warn!(error = %e, "the ledger API did not answer a token check");
                return problem(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "/problems/unavailable",
                    &format!("the ledger API did not answer ({e}); try again"),
                );
            }
        }
    }
    next.run(request).await
}

/// Standard input as the MCP library reads it: line by line, each tool
/// call that names a key twice marked so that it is refused
/// (`crate::mcp::marked_duplicate`).
fn checked_stdin() -> tokio::io::DuplexStream {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    let (reader, mut writer) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let line = crate::mcp::marked_duplicate(&line);
            if writer.write_all(line.as_bytes()).await.is_err()
                || writer.write_all(b"\n").await.is_err()
            {
                break;
            }
        }
        let _ = writer.shutdown().await;
    });
    reader
}

/// Most a JSON-RPC message read here may be (a tool call's arguments are
/// held to the API's own limits after this).
const MESSAGE_LIMIT: usize = 1024 * 1024;

/// Refuses a message whose JSON names a key twice in one object (the
/// tool's arguments included), as the API refuses such a body: parsers
/// differ on which value counts, so the call is never made.
async fn refuse_duplicate_keys(request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MESSAGE_LIMIT).await else {
        return problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            "/problems/body-too-large",
            &format!("an MCP message is at most {MESSAGE_LIMIT} bytes"),
        );
    };
    if let Some(duplicate) = crate::domain::json_keys::first_duplicate(&bytes) {
        return problem(
            StatusCode::BAD_REQUEST,
            "/problems/invalid-body",
            &format!(
                "{duplicate} (at {}); nothing was called",
                duplicate.pointer()
            ),
        );
    }
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}

fn problem(status: StatusCode, problem_type: &str, detail: &str) -> Response {
    let title = status.canonical_reason().unwrap_or("Error");
    let body = serde_json::json!({
        "type": problem_type,
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut response = (status, body.to_string()).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    if status == StatusCode::UNAUTHORIZED {
        h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

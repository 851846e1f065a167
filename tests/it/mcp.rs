//! `command-ledger mcp` over stdio, spoken to as raw JSON-RPC lines (the
//! Python SDK's run is scripts/mcp-test): the tools are the API's kinds with
//! their args schemas, and every call is admitted as an intent.

use command_ledger::db::Role;
use command_ledger::demo_sink::Mode;
use command_ledger::domain::admission::KindDescription;
use command_ledger::domain::admission::NearDuplicate;
use command_ledger::domain::args_schema::ArgsSchema;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

use crate::harness::{
    TestApp, TestSink, assert_names_fields, custodian, malformed_refunds, quickstart_refund,
    refund_effects, refund_policy,
};

/// One stdio session with a `command-ledger mcp` child.
struct Session {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Session {
    async fn start(base: &str, token: &str) -> Session {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_command-ledger"))
            .arg("mcp")
            .env("COMMAND_LEDGER_URL", base)
            .env("COMMAND_LEDGER_TOKEN", token)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut session = Session {
            child,
            stdin,
            lines,
        };
        session
            .send(
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "it", "version": "0"}}}),
            )
            .await;
        let init = session.answers(1).await.remove(&0).unwrap();
        assert_eq!(
            init["result"]["serverInfo"]["name"], "command-ledger",
            "{init}"
        );
        assert!(
            init["result"]["capabilities"]["tools"].is_object(),
            "{init}"
        );
        session
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        session
    }

    async fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await.unwrap();
    }

    /// The next `n` answers, by request id.
    async fn answers(&mut self, n: usize) -> HashMap<i64, Value> {
        let mut answers = HashMap::new();
        while answers.len() < n {
            let line = tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
                .await
                .expect("an answer within 60 s")
                .unwrap()
                .expect("the server closed stdout");
            let message: Value = serde_json::from_str(&line).unwrap();
            if let Some(id) = message["id"].as_i64() {
                answers.insert(id, message);
            }
        }
        answers
    }
}

fn call(id: i64, args: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "refund", "arguments": args}})
}

/// A call of `refund` naming its run in `_meta.runId`.
fn call_as(id: i64, run_id: &str, args: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "refund", "arguments": args, "_meta": {"runId": run_id}}})
}

/// The quickstart's refund, a sink, and a custodian of `payments` whose
/// effects time out after `effect_timeout`.
async fn quickstart(effect_timeout: Duration) -> (TestApp, TestSink, String) {
    let sink = TestSink::start(Mode::Ok).await;
    let app = TestApp::spawn_with(quickstart_refund(
        Duration::from_secs(5),
        NearDuplicate::Hold,
    ))
    .await;
    let token = app.token("agent-1", Role::Device).await;
    let runner = Arc::new(custodian(
        &app.pool,
        &["payments"],
        refund_effects(&sink.url, effect_timeout),
        Duration::from_secs(5),
    ));
    tokio::spawn(runner.run(std::future::pending()));
    (app, sink, token)
}

#[tokio::test]
async fn mcp_tools_are_the_catalogs_kinds_and_copies_of_a_call_make_one_execution() {
    let sink = TestSink::start(Mode::Ok).await;
    let schema = json!({"type": "object", "required": ["to", "amount"],
                        "properties": {"to": {"type": "string"}, "amount": {"type": "string"}}});
    let mut policies = refund_policy(Duration::from_secs(5), NearDuplicate::Hold);
    let mut declared = policies.get("refund").clone();
    declared.args_schema = Some(ArgsSchema::compile(&schema).unwrap());
    policies.set("refund", declared);
    policies.describe(
        "refund",
        KindDescription {
            description: Some("Refund a customer.".to_owned()),
        },
    );
    let app = TestApp::spawn_with(policies).await;
    let token = app.token("agent-1", Role::Device).await;
    let runner = Arc::new(custodian(
        &app.pool,
        &["payments"],
        refund_effects(&sink.url, Duration::from_secs(5)),
        Duration::from_secs(5),
    ));
    tokio::spawn(runner.run(std::future::pending()));

    let mut session = Session::start(&app.base, &token).await;
    session
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    let list = session.answers(1).await.remove(&1).unwrap();
    let tools = list["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{list}");
    assert_eq!(tools[0]["name"], "refund");
    assert_eq!(tools[0]["inputSchema"], schema);
    assert!(
        tools[0]["description"]
            .as_str()
            .unwrap()
            .starts_with("Refund a customer.")
    );

    // Two spellings of one refund, sent at once in one session.
    session
        .send(call(
            2,
            &json!({"to": "Ada@Example.com", "amount": "$12.00"}),
        ))
        .await;
    session
        .send(call(
            3,
            &json!({"amount": "12.00 USD", "to": "ada@example.com"}),
        ))
        .await;
    let answers = session.answers(2).await;
    let results: Vec<&Value> = [2, 3]
        .iter()
        .map(|id| &answers[id]["result"]["structuredContent"])
        .collect();
    assert_eq!(
        results[0]["command_id"], results[1]["command_id"],
        "{answers:?}"
    );
    let outcomes: Vec<&str> = results
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert!(
        outcomes.iter().filter(|o| **o == "executed").count() == 1
            && outcomes
                .iter()
                .all(|o| ["executed", "coalesced", "replay"].contains(o)),
        "{outcomes:?}"
    );
    assert!(
        results.iter().all(|r| r["state"] == "applied"),
        "{results:?}"
    );
    assert_eq!(sink.count("applied"), 1);

    // Refused by admission: a tool error carrying the problem, nothing recorded.
    let before = app.command_count().await;
    session
        .send(call(
            4,
            &json!({"to": "ada@example.com", "amount": "12.00"}),
        ))
        .await;
    let refused = session.answers(1).await.remove(&4).unwrap();
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert_eq!(
        refused["result"]["structuredContent"]["type"],
        "/problems/invalid-args"
    );
    assert_eq!(app.command_count().await, before);
    drop(session.stdin);
    let _ = session.child.wait().await;
}

#[tokio::test]
async fn mcp_over_stdio_needs_a_token() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_command-ledger"))
        .arg("mcp")
        .env_remove("COMMAND_LEDGER_TOKEN")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs a token"), "{err}");
}

#[tokio::test]
async fn an_mcp_call_with_args_the_tool_does_not_declare_is_a_tool_error_naming_each_field() {
    let (app, sink, token) = quickstart(Duration::from_secs(5)).await;
    let mut session = Session::start(&app.base, &token).await;
    let malformed = malformed_refunds();
    for (i, (args, _)) in malformed.iter().enumerate() {
        session.send(call(10 + i as i64, args)).await;
    }
    let answers = session.answers(malformed.len()).await;
    for (i, (args, fields)) in malformed.iter().enumerate() {
        let result = &answers[&(10 + i as i64)]["result"];
        assert_eq!(result["isError"], true, "{args}: {result}");
        assert_names_fields(&result["structuredContent"], fields);
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(
            text.starts_with("refused (400 /problems/invalid-args)")
                && text.ends_with("nothing was recorded"),
            "{text}"
        );
    }
    assert_eq!(app.command_count().await, 0);
    assert_eq!(crate::harness::hold_count(&app.pool).await, 0);

    // An unknown tool is named, with the tools there are.
    session
        .send(json!({"jsonrpc": "2.0", "id": 20, "method": "tools/call",
                     "params": {"name": "refnud", "arguments": {}}}))
        .await;
    let unknown = session.answers(1).await.remove(&20).unwrap();
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    assert_eq!(
        unknown["error"]["message"],
        "unknown tool refnud; the tools are: refund"
    );

    // `_meta.runId` names the run: the answer and the recorded command say so.
    session
        .send(call_as(
            21,
            "worker-a",
            &json!({"to": "x@y.z", "amount": "1.00 USD"}),
        ))
        .await;
    let named = session.answers(1).await.remove(&21).unwrap();
    let result = &named["result"]["structuredContent"];
    assert_eq!(
        (&result["run_id"], &result["state"]),
        (&json!("worker-a"), &json!("applied")),
        "{named}"
    );
    let recorded: Option<String> =
        sqlx::query_scalar("select run_id from commands where id = $1::uuid")
            .bind(result["command_id"].as_str().unwrap())
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(recorded.as_deref(), Some("worker-a"));
    assert_eq!((sink.requests(), sink.count("applied")), (1, 1));

    // A W3C trace context in `_meta` goes on to the ledger: the command
    // keeps it.
    let traced = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    session
        .send(json!({"jsonrpc": "2.0", "id": 22, "method": "tools/call",
                     "params": {"name": "refund",
                                "arguments": {"to": "t@y.z", "amount": "2.00 USD"},
                                "_meta": {"traceparent": traced, "tracestate": "congo=1"}}}))
        .await;
    let answer = session.answers(1).await.remove(&22).unwrap();
    let id = answer["result"]["structuredContent"]["command_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_owned();
    let kept: (Option<String>, Option<String>) =
        sqlx::query_as("select trace_parent, trace_state from commands where id = $1::uuid")
            .bind(&id)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(kept, (Some(traced.to_owned()), Some("congo=1".to_owned())));
    drop(session.stdin);
    let _ = session.child.wait().await;
}

#[tokio::test]
async fn an_mcp_call_that_failed_or_is_ambiguous_is_a_tool_error_that_says_so() {
    let (app, sink, token) = quickstart(Duration::from_secs(1)).await;
    let mut session = Session::start(&app.base, &token).await;
    // The demo sink refuses the first (failed) and applies the second
    // without answering (ambiguous: the effect timed out after sending).
    session
        .send(call(
            1,
            &json!({"to": "x@y.z", "amount": "1.00 USD", "mode": "reject"}),
        ))
        .await;
    session
        .send(call(
            2,
            &json!({"to": "y@y.z", "amount": "2.00 USD", "mode": "hang"}),
        ))
        .await;
    let answers = session.answers(2).await;
    for (id, state, says) in [
        (1, "failed", "FAILED: refund (command "),
        (2, "ambiguous", "NOT CONFIRMED: refund (command "),
    ] {
        let result = &answers[&id]["result"];
        assert_eq!(result["isError"], true, "{result}");
        // The structured answer is kept.
        assert_eq!(result["structuredContent"]["state"], state, "{result}");
        assert_eq!(result["structuredContent"]["outcome"], "executed");
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with(says), "{text}");
        if state == "ambiguous" {
            assert!(text.contains("Do not retry it"), "{text}");
        }
    }
    assert_eq!((sink.count("rejected"), sink.count("applied")), (1, 1));
    drop(session.stdin);
    let _ = session.child.wait().await;
}

/// `command-ledger mcp --http` on a free port; its URL.
async fn mcp_over_http(base: &str) -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_command-ledger"))
        .args(["mcp", "--http", "127.0.0.1:0"])
        .env("COMMAND_LEDGER_URL", base)
        .env_remove("COMMAND_LEDGER_TOKEN")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the MCP server announces its URL")
        .unwrap()
        .unwrap();
    let url = line
        .strip_prefix("MCP (streamable HTTP): ")
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    (child, url)
}

#[tokio::test]
async fn over_http_a_wrong_token_is_refused_at_initialize_like_a_missing_one() {
    let app = TestApp::spawn_with(quickstart_refund(
        Duration::from_secs(5),
        NearDuplicate::Hold,
    ))
    .await;
    let token = app.token("agent-1", Role::Device).await;
    let (_server, url) = mcp_over_http(&app.base).await;
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "it", "version": "0"}}});
    let send = |bearer: Option<&str>| {
        let mut request = app
            .client
            .post(&url)
            .header("Accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(bearer) = bearer {
            request = request.bearer_auth(bearer);
        }
        request.send()
    };
    for bearer in [None, Some("clt_not_a_token"), Some("nonsense")] {
        let resp = send(bearer).await.unwrap();
        assert_eq!(resp.status(), 401, "{bearer:?}");
        assert_eq!(resp.headers()["www-authenticate"], "Bearer");
        assert_eq!(
            resp.headers()["content-type"],
            "application/problem+json",
            "{bearer:?}"
        );
        assert!(
            resp.headers().get("mcp-session-id").is_none(),
            "no session for {bearer:?}"
        );
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["type"], "/problems/unauthorized", "{body}");
    }
    let resp = send(Some(&token)).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("mcp-session-id").is_some());
}

/// Over HTTP, a message whose JSON names a key twice (a tool call's
/// argument given two values) is refused before anything is called, as the
/// API refuses such a body.
#[tokio::test]
async fn over_http_a_message_naming_a_key_twice_is_refused_and_calls_nothing() {
    let app = TestApp::spawn_with(quickstart_refund(
        Duration::from_secs(5),
        NearDuplicate::Hold,
    ))
    .await;
    let token = app.token("agent-1", Role::Device).await;
    let (_server, url) = mcp_over_http(&app.base).await;
    let body = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"refund",
        "arguments":{"to":"ada@example.com","amount":"1.00 USD","amount":"900.00 USD"}}}"#;
    let resp = app
        .client
        .post(&url)
        .bearer_auth(&token)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let problem: Value = resp.json().await.unwrap();
    assert_eq!(problem["type"], "/problems/invalid-body", "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("\"amount\"") && detail.contains("/params/arguments/amount"),
        "{detail}"
    );
    assert_eq!(app.command_count().await, 0);
}

/// Over stdio, a tool call whose JSON names a key twice (an argument given
/// two values: the MCP library would keep the last) is refused as a tool
/// error naming the key, and nothing is called; the session goes on.
#[tokio::test]
async fn over_stdio_a_tool_call_naming_a_key_twice_is_refused_and_calls_nothing() {
    let (app, sink, token) = quickstart(Duration::from_secs(5)).await;
    let mut session = Session::start(&app.base, &token).await;
    let line = r#"{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"name":"refund","arguments":{"to":"ada@example.com","amount":"1.00 USD","amount":"900.00 USD"}}}"#;
    session
        .stdin
        .write_all(format!("{line}\n").as_bytes())
        .await
        .unwrap();
    let answer = session.answers(1).await.remove(&31).unwrap();
    let result = &answer["result"];
    assert_eq!(result["isError"], true, "{answer}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("refused (400 /problems/invalid-body)")
            && text.contains("\"amount\"")
            && text.contains("/params/arguments/amount"),
        "{text}"
    );
    assert_eq!(app.command_count().await, 0);
    assert_eq!(sink.requests(), 0);
    // The same call spelled once runs.
    session
        .send(call(
            32,
            &json!({"to": "ada@example.com", "amount": "1.00 USD"}),
        ))
        .await;
    let ran = session.answers(1).await.remove(&32).unwrap();
    assert_eq!(
        ran["result"]["structuredContent"]["state"], "applied",
        "{ran}"
    );
    drop(session.stdin);
    let _ = session.child.wait().await;
}

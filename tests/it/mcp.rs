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

use crate::harness::{TestApp, TestSink, custodian, refund_effects, refund_policy};

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

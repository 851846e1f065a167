//! Finding a command: `GET /v1/commands` by kind, key, principal and time
//! range, newest first, a page at a time with a keyset cursor.

use command_ledger::db::Role;
use serde_json::{Value, json};

use crate::harness::TestApp;

async fn ids(app: &TestApp, token: &str, query: &str) -> (Vec<String>, Option<String>) {
    let resp = app.get(token, &format!("/v1/commands?{query}")).await;
    assert_eq!(resp.status(), 200, "{query}");
    let page: Value = resp.json().await.unwrap();
    let ids = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect();
    (ids, page["next_after"].as_str().map(str::to_owned))
}

#[tokio::test]
async fn an_operator_finds_commands_by_kind_key_principal_and_time_a_page_at_a_time() {
    let app = TestApp::spawn().await;
    let kiosk = app.token("kiosk-7", Role::Device).await;
    let till = app.token("till-2", Role::Device).await;
    let operator = app.token("ops", Role::Operator).await;
    let mut made = Vec::new();
    for (token, kind, key) in [
        (&kiosk, "noop", "a1"),
        (&kiosk, "ping", "a2"),
        (&till, "noop", "a1"),
        (&till, "noop", "b3"),
        (&kiosk, "noop", "b4"),
    ] {
        let body = json!({"kind": kind, "authority": "agent-7"});
        made.push(app.create(token, key, &body).await);
    }
    let newest_first = |picked: &[usize]| {
        picked
            .iter()
            .rev()
            .map(|i| made[*i].clone())
            .collect::<Vec<_>>()
    };

    assert_eq!(
        ids(&app, &operator, "kind=ping").await.0,
        newest_first(&[1])
    );
    assert_eq!(
        ids(&app, &operator, "key=a1").await.0,
        newest_first(&[0, 2])
    );
    assert_eq!(
        ids(&app, &operator, "principal=till-2").await.0,
        newest_first(&[2, 3])
    );
    assert_eq!(
        ids(&app, &operator, "principal=kiosk-7&kind=noop").await.0,
        newest_first(&[0, 4])
    );
    // A device searches only its own commands, whatever it names.
    assert_eq!(ids(&app, &kiosk, "key=a1").await.0, newest_first(&[0]));
    assert!(ids(&app, &kiosk, "principal=till-2").await.0.is_empty());

    // Time range: everything is within the last minute, nothing before it.
    let now = chrono::Utc::now();
    let ago =
        (now - chrono::Duration::minutes(1)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let later =
        (now + chrono::Duration::minutes(1)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    assert_eq!(
        ids(&app, &operator, &format!("since={ago}&until={later}"))
            .await
            .0
            .len(),
        5
    );
    assert!(
        ids(&app, &operator, &format!("until={ago}"))
            .await
            .0
            .is_empty()
    );
    assert!(
        ids(&app, &operator, &format!("since={later}"))
            .await
            .0
            .is_empty()
    );

    // Pages of two, by cursor, cover the search exactly once.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let query = match &after {
            Some(a) => format!("kind=noop&limit=2&after={a}"),
            None => "kind=noop&limit=2".to_owned(),
        };
        let (page, next) = ids(&app, &operator, &query).await;
        assert!(page.len() <= 2);
        seen.extend(page);
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(seen, newest_first(&[0, 2, 3, 4]));

    // Bad input is a problem, not an empty page.
    for bad in [
        "since=yesterday",
        "kind=Ping",
        "principal=a%20b",
        "since=2026-12-02T00:00:00Z&until=2026-12-01T00:00:00Z",
    ] {
        let resp = app.get(&operator, &format!("/v1/commands?{bad}")).await;
        assert_eq!(resp.status(), 400, "{bad}");
    }
}

//! `POST /v1/commands/{id}/cancel` (and `commands cancel` on the command
//! line): wins only while no effect was attempted.

use crate::harness::{TestApp, cli, problem, refund};
use command_ledger::db::Role;
use serde_json::{Value, json};

async fn set_state(app: &TestApp, id: &str, state: &str) {
    sqlx::query(
        "update commands set state = $2, authority_generation = coalesce(authority_generation, 1) where id = $1::uuid",
    )
    .bind(id)
    .bind(state)
    .execute(&app.pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn cancelling_a_pending_command_succeeds_and_repeating_it_is_harmless() {
    let app = TestApp::spawn().await;
    let a = app.token("dev-a", Role::Device).await;
    let id = app.create(&a, "k", &refund(1)).await;

    let resp = app.post(&a, &format!("/v1/commands/{id}/cancel")).await;
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["state"], "cancelled");
    assert!(body["finished_at"].is_string());
    assert_eq!(body["error"]["reason"], "cancelled");

    let again = app.post(&a, &format!("/v1/commands/{id}/cancel")).await;
    assert_eq!(again.status(), 200);
    let transitions: i64 =
        sqlx::query_scalar("select count(*) from command_history where to_state = 'cancelled'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(transitions, 1);

    // A replay of the submission now shows the cancelled command.
    let replay: Value = app
        .submit(&a, Some("k"), &refund(1))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(replay["state"], "cancelled");
}

#[tokio::test]
async fn a_prepared_command_can_still_be_cancelled() {
    let app = TestApp::spawn().await;
    let a = app.token("dev-a", Role::Device).await;
    let id = app.create(&a, "k", &refund(1)).await;
    set_state(&app, &id, "prepared").await;
    assert_eq!(
        app.post(&a, &format!("/v1/commands/{id}/cancel"))
            .await
            .status(),
        200
    );
}

#[tokio::test]
async fn once_the_effect_started_cancel_is_409_with_the_current_state() {
    let app = TestApp::spawn().await;
    let a = app.token("dev-a", Role::Device).await;
    let id = app.create(&a, "k", &refund(1)).await;
    set_state(&app, &id, "prepared").await;
    set_state(&app, &id, "effect_started").await;
    let body = problem(
        app.post(&a, &format!("/v1/commands/{id}/cancel")).await,
        409,
        "/problems/cancel-too-late",
    )
    .await;
    assert_eq!(body["state"], "effect_started");
    assert_eq!(body["command_id"], id.as_str());

    set_state(&app, &id, "applied").await;
    let body = problem(
        app.post(&a, &format!("/v1/commands/{id}/cancel")).await,
        409,
        "/problems/cancel-too-late",
    )
    .await;
    assert_eq!(body["state"], "applied");
}

#[tokio::test]
async fn an_operator_may_cancel_any_command() {
    let app = TestApp::spawn().await;
    let a = app.token("dev-a", Role::Device).await;
    let op = app.token("ops", Role::Operator).await;
    let id = app.create(&a, "k", &refund(1)).await;
    assert_eq!(
        app.post(&op, &format!("/v1/commands/{id}/cancel"))
            .await
            .status(),
        200
    );
    let actor: String =
        sqlx::query_scalar("select actor from command_history where to_state = 'cancelled'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(actor, "operator:ops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_cancels_record_one_cancellation() {
    let app = TestApp::spawn().await;
    let a = app.token("dev-a", Role::Device).await;
    let id = app.create(&a, "k", &refund(1)).await;
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (client, url, token) = (
            app.client.clone(),
            app.url(&format!("/v1/commands/{id}/cancel")),
            a.clone(),
        );
        tasks.push(tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    let transitions: i64 =
        sqlx::query_scalar("select count(*) from command_history where to_state = 'cancelled'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(transitions, 1);
}

/// A cancel racing an executor that moves the row on: exactly one of them wins
/// each command, and the loser learns it (409 for the cancel, no row for the
/// executor's compare-and-set).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_racing_the_start_of_the_effect_never_both_win() {
    let app = TestApp::spawn().await;
    let a = app.token("dev-a", Role::Device).await;
    let mut ids = Vec::new();
    for i in 0..30 {
        let id = app.create(&a, &format!("k{i}"), &refund(1)).await;
        set_state(&app, &id, "prepared").await;
        ids.push(id);
    }
    let mut tasks = Vec::new();
    for id in &ids {
        let (client, url, token) = (
            app.client.clone(),
            app.url(&format!("/v1/commands/{id}/cancel")),
            a.clone(),
        );
        let cancel = tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        });
        let pool = app.pool.clone();
        let id = id.clone();
        let start = tokio::spawn(async move {
            sqlx::query("update commands set state = 'effect_started' where id = $1::uuid and state = 'prepared'")
                .bind(&id)
                .execute(&pool)
                .await
                .unwrap()
                .rows_affected()
        });
        tasks.push((cancel, start));
    }
    let (mut cancelled, mut started) = (0, 0);
    for (cancel, start) in tasks {
        let (status, rows) = (cancel.await.unwrap(), start.await.unwrap());
        match (status, rows) {
            (200, 0) => cancelled += 1,
            (409, 1) => started += 1,
            other => panic!("both or neither won: {other:?}"),
        }
    }
    assert_eq!(cancelled + started, ids.len());
    let final_states: Vec<String> = sqlx::query_scalar("select state from commands")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(
        final_states.iter().filter(|s| *s == "cancelled").count(),
        cancelled
    );
    assert_eq!(
        final_states
            .iter()
            .filter(|s| *s == "effect_started")
            .count(),
        started
    );
}

/// The command line's `commands cancel` goes through the same use case as
/// `POST /v1/commands/{id}/cancel`: the row and its history entry change in
/// the same way (the actor being `cli:<user>`), it prints the API's view of
/// the command, a repeat changes nothing, and a command whose effect
/// started is refused and left alone.
#[tokio::test]
async fn the_command_line_cancels_a_command_as_the_api_does() {
    let app = TestApp::spawn().await;
    let a = app.token("dev-a", Role::Device).await;
    let by_api = app.create(&a, "api", &refund(1)).await;
    let by_cli = app.create(&a, "cli", &refund(2)).await;
    let started = app.create(&a, "started", &refund(3)).await;

    let resp = app.post(&a, &format!("/v1/commands/{by_api}/cancel")).await;
    assert_eq!(resp.status(), 200);
    let (ok, out, err) = cli(&app.db_url, &["commands", "cancel", &by_cli, "--json"]).await;
    assert!(ok, "{err}");
    let mut printed: Value = serde_json::from_str(&out).unwrap();
    assert!(printed["scope"].is_string(), "{printed}");
    printed.as_object_mut().unwrap().remove("scope");
    let shown: Value = app
        .get(&a, &format!("/v1/commands/{by_cli}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(printed, shown, "the API's view of the cancelled command");

    // The row, and its history after the recording entry.
    let row = |id: String| {
        let pool = app.pool.clone();
        async move {
            let (state, error, finished): (String, Option<Value>, bool) = sqlx::query_as(
                "select state, error, finished_at is not null from commands where id = $1::uuid",
            )
            .bind(&id)
            .fetch_one(&pool)
            .await
            .unwrap();
            let changes: Vec<(Option<String>, String, String, Option<String>)> = sqlx::query_as(
                "select from_state, to_state, actor, reason from command_history
                 where command_id = $1::uuid and from_state is not null order by id",
            )
            .bind(&id)
            .fetch_all(&pool)
            .await
            .unwrap();
            (state, error, finished, changes)
        }
    };
    let cancelled_by = |actor: &str| {
        (
            "cancelled".to_owned(),
            Some(json!({"reason": "cancelled", "by": actor})),
            true,
            vec![(
                Some("pending".to_owned()),
                "cancelled".to_owned(),
                actor.to_owned(),
                Some("cancel requested".to_owned()),
            )],
        )
    };
    assert_eq!(row(by_api.clone()).await, cancelled_by("device:dev-a"));
    let cli_row = row(by_cli.clone()).await;
    assert_eq!(cli_row, cancelled_by("cli:ops-alice"));

    // Again: nothing changes, and it still succeeds.
    let (ok, out, err) = cli(&app.db_url, &["commands", "cancel", &by_cli]).await;
    assert!(ok, "{err}");
    assert!(out.contains("already cancelled"), "{out}");
    assert_eq!(row(by_cli.clone()).await, cli_row);

    // Too late once the effect started; no such command.
    set_state(&app, &started, "prepared").await;
    set_state(&app, &started, "effect_started").await;
    let (ok, _, err) = cli(&app.db_url, &["commands", "cancel", &started]).await;
    assert!(!ok);
    assert!(
        err.contains("effect_started") && err.contains("can no longer be cancelled"),
        "{err}"
    );
    assert_eq!(row(started.clone()).await.0, "effect_started");
    let missing = uuid::Uuid::now_v7().to_string();
    let (ok, _, err) = cli(&app.db_url, &["commands", "cancel", &missing]).await;
    assert!(!ok);
    assert!(err.contains(&format!("no command {missing}")), "{err}");
}

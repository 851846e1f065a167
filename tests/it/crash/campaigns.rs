//! The crash campaigns: SIGKILL at every crash point, zombie custodians,
//! connections cut mid-commit, PostgreSQL crashes. Each drives the
//! framework's processes and ends with its invariant check.

use super::framework::*;

use command_ledger::embedded_pg::{Cluster, ClusterOptions};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

/// SIGKILL at each crash point, `kills_per_point` times, under load; then
/// faults stop, and everything must be terminal within lease + 2 recovery
/// intervals (plus slack for restarts).
pub(super) async fn kill_campaign(
    points: &[&str],
    kills_per_point: usize,
    budget: Duration,
) -> (Vec<PointResult>, Check) {
    kill_campaign_in_mode(points, kills_per_point, budget, None).await
}

/// [`kill_campaign`], each refund asking the demo sink for `mode` (`busy`:
/// every refund fails twice with nothing done and is retried by the
/// ledger, so the kills fall between failures and their next attempts).
pub(super) async fn kill_campaign_in_mode(
    points: &[&str],
    kills_per_point: usize,
    budget: Duration,
    mode: Option<&'static str>,
) -> (Vec<PointResult>, Check) {
    let seed = seed();
    eprintln!("crash campaign seed {seed} (CRASH_SEED={seed} replays it)");
    let (db_url, pool) = crate::harness::fresh_database().await;
    let mut world = World::new(db_url, pool, seed).await;
    let api = world.api();
    let custodian = world.custodian();
    world.wait_ready().await;
    let acked: Acked = Arc::default();
    let counter = Arc::new(AtomicU64::new(0));
    let mut results = Vec::new();

    for point in points {
        let target = if *point == "CP0" { &api } else { &custodian };
        let before = count_commands(&world.pool).await;
        let kills_before = target.kills();
        target.arm(Some(crash_vars(point, 0.25, "kill")), true);
        let clients = Clients::start_in_mode(&world, 6, point, &acked, &counter, mode);
        // CP1 follows a commit that leaves rows prepared and unstarted: an
        // adoption's. The custodian's own claim starts what it claims at
        // once, so prepared rows of a lapsed generation are made here.
        let leaving = (*point == "CP1").then(|| leave_prepared(world.pool.clone()));
        let started = Instant::now();
        while target.kills() - kills_before < kills_per_point && started.elapsed() < budget {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if let Some((stop, task)) = leaving {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            task.await.unwrap();
        }
        target.arm(None, true);
        clients.stop().await;
        let after = count_commands(&world.pool).await;
        results.push(PointResult {
            point: (*point).to_owned(),
            kills: target.kills() - kills_before,
            commands: after - before,
        });
    }
    // Faults stopped: lease 0.5 s + 2 × recovery 0.3 s, with slack for restarts.
    let live = world.wait_all_terminal(Duration::from_secs(15)).await;
    let acked = acked.lock().unwrap().clone();
    let mut report = check(&world, &acked).await;
    if live > 0 {
        report.violations.push(format!(
            "{live} commands not terminal 15 s after faults stopped"
        ));
    }
    api.shutdown();
    custodian.shutdown();
    world.cleanup();
    (results, report)
}

/// Until stopped: up to two pending commands left `prepared` under the
/// current generation, and that generation's lease lapsed, in one
/// transaction: what a custodian of an earlier release that died between its
/// claim and its start left. The custodian's next heartbeat takes the next
/// generation and adopts them (crossing CP1), and starts them once. Asked
/// every 20 ms until a pending command is found (the custodian claims each
/// within milliseconds), then left 300 ms for the adoption.
fn leave_prepared(
    pool: sqlx::PgPool,
) -> (
    Arc<std::sync::atomic::AtomicBool>,
    tokio::task::JoinHandle<()>,
) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopping = Arc::clone(&stop);
    let task = tokio::spawn(async move {
        while !stopping.load(std::sync::atomic::Ordering::Relaxed) {
            let pause = match leave_two_prepared(&pool).await {
                Ok(true) => 300,
                _ => 20,
            };
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    });
    (stop, task)
}

/// One round of [`leave_prepared`]: whether it left any.
async fn leave_two_prepared(pool: &sqlx::PgPool) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let left = sqlx::query(
        "update commands c set state = 'prepared', authority_generation = a.generation
         from authorities a
         where a.id = 'payments' and c.authority_id = 'payments' and c.id in (
             select id from commands where authority_id = 'payments' and state = 'pending'
             order by id limit 2 for update skip locked)",
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if left > 0 {
        sqlx::query("update authorities set lease_expires_at = now() where id = 'payments'")
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(left > 0)
}

pub(super) fn print_table(results: &[PointResult], check: &Check) {
    eprintln!("\n| crash point | kills | commands |");
    eprintln!("|---|---|---|");
    for r in results {
        eprintln!("| {} | {} | {} |", r.point, r.kills, r.commands);
    }
    eprintln!(
        "\noutcomes: {:?} over {} commands ({} of them attempts after a first); violations: {}",
        check.by_state,
        check.commands,
        check.retries,
        check.violations.len()
    );
    for v in check.violations.iter().take(20) {
        eprintln!("  violation: {v}");
    }
}

/// A custodian pauses (SIGSTOP) at `point`, past its lease; another takes
/// over and works; the first resumes (SIGCONT).
///
/// - At CP2, right after committing `effect_started`: the zombie dispatches
///   with its stale generation. The sink refuses it, its outcome write is
///   refused, recovery resolves the row: no double effect, no stale write.
/// - At CP5, inside its claim-and-start transaction with the authority row
///   held `for share`: the successor's lease take must not wait for the
///   zombie (the server ends a custodian's transaction idle past the lease
///   TTL); the zombie's commit then fails, it dispatches nothing, and the
///   successor runs its victim.
pub(super) async fn zombie_campaign(point: &str, trials: usize) -> Check {
    let seed = seed();
    let (db_url, pool) = crate::harness::fresh_database().await;
    let mut world = World::new(db_url, pool, seed).await;
    let api = world.api();
    world.wait_ready().await;
    let acked: Acked = Arc::default();
    let client = reqwest::Client::new();
    let submit = |key: String| {
        let (client, api, token, acked) = (
            client.clone(),
            world.api_url.clone(),
            world.token.clone(),
            acked.clone(),
        );
        async move {
            let body = json!({"kind": "refund", "authority": "payments", "args": {"key": key}});
            let r = client
                .post(format!("{api}/v1/commands"))
                .bearer_auth(&token)
                .header("Idempotency-Key", &key)
                .json(&body)
                .send()
                .await
                .unwrap();
            let v: Value = r.json().await.unwrap();
            let id = v["id"].as_str().unwrap().to_owned();
            acked.lock().unwrap().insert(key, id.clone());
            id
        }
    };
    let state_of = |id: String| {
        let pool = world.pool.clone();
        async move {
            sqlx::query_scalar::<_, String>("select state from commands where id = $1::uuid")
                .bind(id)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let (mut paused, mut attempts) = (0, 0);
    while paused < trials {
        attempts += 1;
        assert!(
            attempts <= trials * 2,
            "only {paused} of {attempts} attempts paused a zombie"
        );
        let t = attempts;
        let zombie = world.custodian();
        zombie.arm(Some(crash_vars(point, 1.0, "stop")), true);
        let victim = submit(format!("z{t}-victim")).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !zombie.pid().is_some_and(is_stopped) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if !zombie.pid().is_some_and(is_stopped) {
            // Not a zombie trial after all (say the victim was started by a
            // process the arming replaced): say what happened, try again.
            let history: Vec<(Option<String>, String, String)> = sqlx::query_as(
                "select from_state, to_state, actor from command_history where command_id = $1::uuid order by seq",
            )
            .bind(&victim)
            .fetch_all(&world.pool)
            .await
            .unwrap();
            eprintln!(
                "zombie attempt {t}: no pause within 10 s; victim {victim} history {history:?}"
            );
            zombie.shutdown();
            continue;
        }
        paused += 1;
        // Another custodian takes over once the lease lapses, and works.
        let successor = world.custodian();
        let fresh = submit(format!("z{t}-fresh")).await;
        let deadline = Instant::now() + Duration::from_secs(20);
        while state_of(fresh.clone()).await != "applied" {
            assert!(
                Instant::now() < deadline,
                "the successor never ran the fresh command"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The zombie resumes and dispatches with its stale generation.
        signal(zombie.pid().unwrap(), "-CONT");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = state_of(victim.clone()).await;
            let dispatched = world
                .sink_log()
                .iter()
                .any(|l| l.key == format!("cl-{victim}"));
            if dispatched && s != "effect_started" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the zombie's command was never settled ({s})"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        zombie.shutdown();
        successor.shutdown();
        // How the zombie's dispatch ended at the sink, and in the ledger.
        let events: Vec<String> = world
            .sink_log()
            .iter()
            .filter(|l| l.key == format!("cl-{victim}"))
            .map(|l| format!("{} at generation {}", l.event, l.generation))
            .collect();
        let (state, error, generation): (String, Option<Value>, Option<i64>) = sqlx::query_as(
            "select state, error, authority_generation from commands where id = $1::uuid",
        )
        .bind(&victim)
        .fetch_one(&world.pool)
        .await
        .unwrap();
        let expected = if point == "CP5" { "applied" } else { "fenced" };
        if events.len() != 1 || !events[0].starts_with(expected) {
            let history: Vec<(Option<String>, String, String, Option<i64>)> = sqlx::query_as(
                "select from_state, to_state, actor, authority_generation from command_history \
                 where command_id in ($1::uuid, $2::uuid) order by id",
            )
            .bind(&victim)
            .bind(&fresh)
            .fetch_all(&world.pool)
            .await
            .unwrap();
            let fresh_events: Vec<String> = world
                .sink_log()
                .iter()
                .filter(|l| l.key == format!("cl-{fresh}"))
                .map(|l| format!("{} at generation {}", l.event, l.generation))
                .collect();
            eprintln!(
                "zombie trial {t}: victim {victim} {state} {error:?} (generation {generation:?}), sink: {events:?}; \
                 fresh {fresh} sink: {fresh_events:?}; history (victim, fresh): {history:?}"
            );
        }
    }
    // A victim the probe found not applied was retried (the catalog's
    // policy): a custodian runs until its next attempt, like every other
    // command, is terminal.
    let finisher = world.custodian();
    let live = world.wait_all_terminal(Duration::from_secs(15)).await;
    finisher.shutdown();
    let acked = acked.lock().unwrap().clone();
    let mut report = check(&world, &acked).await;
    if live > 0 {
        report.violations.push(format!(
            "{live} commands not terminal 15 s after the trials"
        ));
    }
    let fenced = world
        .sink_log()
        .iter()
        .filter(|l| l.event == "fenced")
        .count();
    eprintln!(
        "zombie trials at {point}: {paused} paused of {attempts} attempts; stale dispatches refused by the sink: {fenced}; outcomes {:?}; violations {}",
        report.by_state,
        report.violations.len()
    );
    api.shutdown();
    world.cleanup();
    report
}

/// The custodian's database connections are cut (`pg_terminate_backend`)
/// again and again under load, so some commits, `effect_started` ones
/// included, die with an unknown outcome. The custodian must re-read and
/// never dispatch on uncertainty: any dispatch of a row whose start did not
/// commit would show up as a second dispatch after it is claimed again.
pub(super) async fn connection_cut_campaign(cuts: usize) -> (usize, Check) {
    let seed = seed();
    let (db_url, pool) = crate::harness::fresh_database().await;
    let mut world = World::new(db_url, pool, seed).await;
    let api = world.api();
    let custodian = world.custodian();
    world.wait_ready().await;
    let acked: Acked = Arc::default();
    let counter = Arc::new(AtomicU64::new(0));
    let clients = Clients::start(&world, 3, "cut", &acked, &counter);
    let mut terminated = 0;
    for i in 0..cuts {
        tokio::time::sleep(Duration::from_millis(
            60 + (seed.wrapping_add(i as u64) % 90),
        ))
        .await;
        let n: i64 = sqlx::query_scalar(
            "select count(*) from (select pg_terminate_backend(pid) from pg_stat_activity \
             where application_name = 'command-ledger-custodian' and datname = current_database()) t",
        )
        .fetch_one(&world.pool)
        .await
        .unwrap();
        terminated += usize::try_from(n).unwrap();
    }
    clients.stop().await;
    let live = world.wait_all_terminal(Duration::from_secs(20)).await;
    let acked = acked.lock().unwrap().clone();
    let mut report = check(&world, &acked).await;
    if live > 0 {
        report.violations.push(format!(
            "{live} commands not terminal 20 s after faults stopped"
        ));
    }
    eprintln!(
        "connection cuts: {cuts} rounds, {terminated} custodian connections terminated; outcomes {:?}; violations {}",
        report.by_state,
        report.violations.len()
    );
    api.shutdown();
    custodian.shutdown();
    world.cleanup();
    (terminated, report)
}

/// PostgreSQL itself crashes (`pg_ctl stop -m immediate`) under load, on a
/// durable cluster of its own, and restarts; nothing acknowledged may be
/// missing. With `synchronous_commit = off` (the negative control) the same
/// checker must find acknowledged commands missing.
pub(super) async fn pg_crash_campaign(crashes: usize, synchronous_commit: bool) -> Check {
    let seed = seed();
    let root = std::env::temp_dir().join(format!(
        "command-ledger-pgcrash-{}",
        uuid::Uuid::now_v7().simple()
    ));
    let options = ClusterOptions {
        data_dir: root.join("pg"),
        password: None,
        durable: true,
        port: Some(free_port()),
    };
    let cluster = tokio::task::spawn_blocking({
        let o = options.clone();
        move || Cluster::start(&o)
    })
    .await
    .unwrap()
    .unwrap();
    cluster.stop_when_process_exits(Some(&root)).unwrap();
    let admin = cluster.url("postgres");
    command_ledger::db::ensure_database(&admin, "ledger")
        .await
        .unwrap();
    let db_url = cluster.url("ledger");
    let pool = command_ledger::db::connect(&db_url, 8).await.unwrap();
    command_ledger::db::migrate(&pool).await.unwrap();
    if !synchronous_commit {
        sqlx::query("alter system set synchronous_commit = off")
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query("select pg_reload_conf()")
            .execute(&pool)
            .await
            .unwrap();
    }
    let mut world = World::new(db_url, pool.clone(), seed).await;
    let api = world.api();
    let custodian = world.custodian();
    world.wait_ready().await;

    let acked: Acked = Arc::default();
    let counter = Arc::new(AtomicU64::new(0));
    let clients = Clients::start(&world, 4, "pg", &acked, &counter);
    let mut cluster = cluster;
    for _ in 0..crashes {
        tokio::time::sleep(Duration::from_millis(700)).await;
        cluster = tokio::task::spawn_blocking({
            let o = options.clone();
            move || {
                cluster.crash().unwrap();
                Cluster::start(&o).unwrap()
            }
        })
        .await
        .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    clients.stop().await;
    let live = world.wait_all_terminal(Duration::from_secs(20)).await;
    let acked = acked.lock().unwrap().clone();
    let mut report = check(&world, &acked).await;
    if live > 0 {
        report.violations.push(format!(
            "{live} commands not terminal 20 s after faults stopped"
        ));
    }
    eprintln!(
        "PostgreSQL crashes: {crashes} (synchronous_commit {}); acknowledged {}; outcomes {:?}; violations {}",
        if synchronous_commit { "on" } else { "off" },
        acked.len(),
        report.by_state,
        report.violations.len()
    );
    api.shutdown();
    custodian.shutdown();
    pool.close().await;
    world.cleanup();
    let _ = tokio::task::spawn_blocking(move || cluster.stop()).await;
    report
}

//! The shared test harness: a database backend, a fresh database per test,
//! the API served on an ephemeral port, and the command line run against it.

use command_ledger::db::roles::ServiceRole;
use command_ledger::db::{self, Role};
use command_ledger::embedded_pg::{Cluster, ClusterOptions};
use command_ledger::http::{self, AppState};
use serde_json::Value;
use sqlx::{Connection as _, PgPool};
use std::sync::OnceLock;
use tokio::sync::OnceCell;

/// Where test databases are created: the server behind an admin URL.
struct Backend {
    admin_url: String,
    /// Keeps the private cluster's handle alive for the process.
    _cluster: Option<Cluster>,
}

static BACKEND: OnceLock<Backend> = OnceLock::new();
static TEMPLATE: OnceCell<String> = OnceCell::const_new();

fn backend() -> &'static Backend {
    BACKEND.get_or_init(|| {
        // `TEST_LOG=<filter>` shows the service's own log (as RUST_LOG would).
        if let Ok(filter) = std::env::var("TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_test_writer()
                .try_init();
        }
        if let Ok(url) = std::env::var("TEST_DATABASE_URL") {
            return Backend {
                admin_url: url,
                _cluster: None,
            };
        }
        match private_cluster() {
            Ok(cluster) => Backend {
                admin_url: cluster.url("postgres"),
                _cluster: Some(cluster),
            },
            Err(e) => containers_or_fail(&e),
        }
    })
}

fn private_cluster() -> Result<Cluster, command_ledger::embedded_pg::EmbeddedError> {
    let root = std::env::temp_dir().join(format!(
        "command-ledger-test-{}-{}",
        std::process::id(),
        uuid::Uuid::now_v7().simple()
    ));
    let options = ClusterOptions {
        data_dir: root.join("pg"),
        password: None,
        durable: false,
        port: None,
    };
    let cluster = Cluster::start(&options)?;
    cluster.stop_when_process_exits(Some(&root))?;
    Ok(cluster)
}

#[cfg(feature = "testcontainers")]
fn containers_or_fail(e: &command_ledger::embedded_pg::EmbeddedError) -> Backend {
    use testcontainers_modules::postgres::Postgres;
    use testcontainers_modules::testcontainers::ImageExt as _;
    use testcontainers_modules::testcontainers::runners::SyncRunner as _;
    eprintln!("no private cluster ({e}); trying a PostgreSQL container");
    // The blocking runner makes a runtime of its own: run it off the test's.
    let port = std::thread::spawn(|| {
        let container = Postgres::default()
            .with_tag("15-alpine")
            .start()
            .expect("starting a PostgreSQL container (is a Docker engine running?)");
        let port = container.get_host_port_ipv4(5432).expect("container port");
        // The container lives as long as the test process.
        std::mem::forget(container);
        port
    })
    .join()
    .expect("the container thread");
    Backend {
        admin_url: format!("postgres://postgres:postgres@127.0.0.1:{port}/postgres"),
        _cluster: None,
    }
}

#[cfg(not(feature = "testcontainers"))]
fn containers_or_fail(e: &command_ledger::embedded_pg::EmbeddedError) -> Backend {
    panic!(
        "no test database: {e}\nSet TEST_DATABASE_URL, install the PostgreSQL server, \
         or run with --features testcontainers where a Docker engine answers."
    )
}

/// Whether the backend is a Citus coordinator (`TEST_CITUS=1` beside
/// `TEST_DATABASE_URL` at the coordinator, e.g. `scripts/citus-cluster up`):
/// each database is then created on every node (a Citus cluster is per
/// database) and the template is distributed by `migrate`.
pub(crate) fn citus() -> bool {
    std::env::var("TEST_CITUS").is_ok_and(|v| v == "1")
}

/// What the tests' databases can do: the backend the harness builds
/// (distributed with `TEST_CITUS=1`). The template checks it against what
/// the service detects ([`db::Backend::detect`]).
pub(crate) fn ledger_backend() -> db::Backend {
    if citus() {
        db::Backend::CITUS
    } else {
        db::Backend::ONE_NODE
    }
}

/// For a test that needs a capability of [`db::Backend`]: `lacks!(field,
/// why)` is `true` (the caller returns) when the backend lacks it, after
/// saying which capability and why the test needs it. The backends that
/// lack one are listed in docs/SCALING.md.
macro_rules! lacks {
    ($capability:ident, $why:expr) => {
        $crate::harness::skipped(
            stringify!($capability),
            $crate::harness::ledger_backend().$capability,
            $why,
        )
    };
}
pub(crate) use lacks;

/// [`lacks!`]'s message and answer.
pub(crate) fn skipped(capability: &str, has: bool, why: &str) -> bool {
    if !has {
        eprintln!("not run: the backend lacks {capability}: {why}");
    }
    !has
}

/// The admin URL with another host and port (a Citus worker's).
fn with_node(url: &str, host: &str, port: i32) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let user = authority
        .rsplit_once('@')
        .map(|(user, _)| format!("{user}@"));
    format!(
        "{scheme}://{}{host}:{port}/{path}",
        user.unwrap_or_default()
    )
}

/// The admin URLs of the coordinator and, on Citus, of every worker it knows.
async fn node_admin_urls() -> Vec<String> {
    let admin_url = &backend().admin_url;
    let mut urls = vec![admin_url.clone()];
    if citus() {
        let mut admin = sqlx::PgConnection::connect(admin_url).await.unwrap();
        let workers: Vec<(String, i32)> = sqlx::query_as(
            "select nodename, nodeport from pg_dist_node where groupid <> 0 and noderole = 'primary' order by nodeid",
        )
        .fetch_all(&mut admin)
        .await
        .expect("the coordinator's workers (pg_dist_node)");
        admin.close().await.unwrap();
        assert!(
            !workers.is_empty(),
            "TEST_CITUS=1 but the coordinator has no workers"
        );
        urls.extend(workers.iter().map(|(h, p)| with_node(admin_url, h, *p)));
    }
    urls
}

/// Runs `sql` on every node's admin database (the coordinator only, off Citus).
async fn on_every_node(sql: &str) {
    for url in node_admin_urls().await {
        let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
        execute(&mut admin, sql).await;
        admin.close().await.unwrap();
    }
}

/// Makes `building` a Citus database: the extension on every node, the
/// workers added on the coordinator.
async fn make_citus_database(building: &str) {
    let urls = node_admin_urls().await;
    for url in &urls {
        let mut conn = sqlx::PgConnection::connect(&url_for_at(url, building))
            .await
            .unwrap();
        execute(&mut conn, "create extension if not exists citus").await;
        conn.close().await.unwrap();
    }
    let mut coordinator = sqlx::PgConnection::connect(&url_for(building))
        .await
        .unwrap();
    let nodes: Vec<(String, i32)> = {
        let mut admin = sqlx::PgConnection::connect(&backend().admin_url)
            .await
            .unwrap();
        let nodes = sqlx::query_as("select nodename, nodeport from pg_dist_node order by nodeid")
            .fetch_all(&mut admin)
            .await
            .unwrap();
        admin.close().await.unwrap();
        nodes
    };
    let coordinator_node: (String, i32) = {
        let mut admin = sqlx::PgConnection::connect(&backend().admin_url)
            .await
            .unwrap();
        let node = sqlx::query_as("select nodename, nodeport from pg_dist_node where groupid = 0")
            .fetch_one(&mut admin)
            .await
            .expect("the coordinator's own entry (citus_set_coordinator_host)");
        admin.close().await.unwrap();
        node
    };
    sqlx::query("select citus_set_coordinator_host($1, $2)")
        .bind(&coordinator_node.0)
        .bind(coordinator_node.1)
        .execute(&mut coordinator)
        .await
        .unwrap();
    for (host, port) in nodes.iter().filter(|n| **n != coordinator_node) {
        sqlx::query("select citus_add_node($1, $2)")
            .bind(host)
            .bind(port)
            .execute(&mut coordinator)
            .await
            .unwrap();
    }
    coordinator.close().await.unwrap();
}

fn url_for(database: &str) -> String {
    url_for_at(&backend().admin_url, database)
}

fn url_for_at(admin: &str, database: &str) -> String {
    let (base, query) = admin
        .split_once('?')
        .map_or((admin, None), |(b, q)| (b, Some(q)));
    let server = base.rsplit_once('/').map_or(base, |(server, _)| server);
    match query {
        Some(q) => format!("{server}/{database}?{q}"),
        None => format!("{server}/{database}"),
    }
}

/// A migrated template database, built once per server and migration set.
async fn template() -> &'static str {
    TEMPLATE
        .get_or_init(|| async {
            let checksum: Vec<u8> = db::MIGRATOR
                .iter()
                .flat_map(|m| m.checksum.iter().copied())
                .chain(db::functions::fingerprint())
                .collect();
            let name = format!(
                "cl_template_{}{}",
                &hex_digest(&checksum)[..12],
                if citus() { "_citus" } else { "" }
            );
            let mut admin = sqlx::PgConnection::connect(&backend().admin_url)
                .await
                .expect("admin connection");
            // Serialise template creation across test processes sharing a server.
            sqlx::query("select pg_advisory_lock(7242031)")
                .execute(&mut admin)
                .await
                .unwrap();
            let exists: bool =
                sqlx::query_scalar("select exists (select 1 from pg_database where datname = $1)")
                    .bind(&name)
                    .fetch_one(&mut admin)
                    .await
                    .unwrap();
            if !exists {
                let building = format!("{name}_building");
                on_every_node(&format!("drop database if exists {building} with (force)")).await;
                on_every_node(&format!("create database {building}")).await;
                if citus() {
                    make_citus_database(&building).await;
                }
                let pool = db::connect(&url_for(&building), 2)
                    .await
                    .expect("template connection");
                db::migrate(&pool).await.expect("migrating the template");
                assert_eq!(
                    db::Backend::detect(&pool).await.unwrap(),
                    ledger_backend(),
                    "the backend the service detects is not the one the tests expect"
                );
                pool.close().await;
                // Citus's maintenance daemon stays connected to a database:
                // a template takes no connections (copying needs none).
                on_every_node(&format!(
                    "alter database {building} allow_connections false; \
                     select pg_terminate_backend(pid) from pg_stat_activity where datname = '{building}'"
                ))
                .await;
                for url in node_admin_urls().await {
                    rename_when_idle(&url, &building, &name).await;
                }
            }
            // The service roles (global to a server) log in, with passwords
            // of the tests' own for a server that asks for one. On Citus the
            // coordinator reaches the workers as the same role, so it must
            // log in on every node (an ALTER ROLE in the admin database, which
            // has no citus extension, is not propagated).
            for url in node_admin_urls().await {
                let mut node = sqlx::PgConnection::connect(&url).await.unwrap();
                for role in ServiceRole::ALL {
                    db::roles::set_login(&mut node, role, &role_password(role))
                        .await
                        .expect("letting a service role log in");
                }
                node.close().await.unwrap();
            }
            sqlx::query("select pg_advisory_unlock(7242031)")
                .execute(&mut admin)
                .await
                .unwrap();
            admin.close().await.unwrap();
            name
        })
        .await
}

/// The password the tests give `role` on their server: derived from the
/// admin URL, so every test process sharing a server agrees on it.
pub(crate) fn role_password(role: ServiceRole) -> String {
    hex_digest(format!("{}\n{}", backend().admin_url, role.name()).as_bytes())[..32].to_owned()
}

/// A pool on the same database as `pool`, logged in as `role`: the API and
/// the custodians of the tests run as their roles, so the suite proves their
/// grants are enough.
pub(crate) fn as_role(pool: &PgPool, role: ServiceRole) -> PgPool {
    let options = (*pool.connect_options())
        .clone()
        .username(role.name())
        .password(&role_password(role));
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(20)
        .connect_lazy_with(options)
}

/// `url` with `role`'s login in place of its user, for child processes.
pub(crate) fn role_url(url: &str, role: ServiceRole) -> String {
    let mut url = reqwest::Url::parse(url).expect("a database URL");
    url.set_username(role.name()).unwrap();
    url.set_password(Some(&role_password(role))).unwrap();
    url.to_string()
}

/// Renames a database once the sessions just terminated are gone.
async fn rename_when_idle(admin_url: &str, from: &str, to: &str) {
    let mut admin = sqlx::PgConnection::connect(admin_url).await.unwrap();
    let sql = format!("alter database {from} rename to {to}");
    for attempt in 0.. {
        match sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
            .execute(&mut admin)
            .await
        {
            Ok(_) => break,
            Err(e) if attempt < 50 => {
                eprintln!("renaming {from} on {admin_url}: {e}; retrying");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => panic!("renaming {from} on {admin_url}: {e}"),
        }
    }
    admin.close().await.unwrap();
}

async fn execute(conn: &mut sqlx::PgConnection, sql: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(conn)
        .await
        .unwrap();
}

fn hex_digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Moves pending commands to `prepared` under their authority's current
/// generation, as a writer other than the custodian could (an operator's
/// SQL, or an older release's claim that died before its start): the
/// triggers write the history and the in-flight rows. Returns how many
/// moved. The custodian's own claim never leaves a row prepared.
pub(crate) async fn prepare(pool: &PgPool, ids: &[&str]) -> u64 {
    let ids: Vec<uuid::Uuid> = ids.iter().map(|id| id.parse().expect("a uuid")).collect();
    sqlx::query(
        "update commands c set state = 'prepared', authority_generation = a.generation \
         from authorities a \
         where a.id = c.authority_id and c.id = any($1) and c.state = 'pending'",
    )
    .bind(&ids)
    .execute(pool)
    .await
    .expect("preparing commands")
    .rows_affected()
}

/// A fresh, migrated database of its own.
pub(crate) async fn fresh_pool() -> PgPool {
    fresh_database().await.1
}

/// The databases made for the test running on this thread. When the thread
/// ends (libtest runs each test on a thread of its own, and the test's
/// runtime, with its pools, is gone by then), they go to [`reaper`], which
/// drops them: a Citus database takes about 22 MB on each node, and a whole
/// suite's worth, kept, came to 24 GB on a 3-node cluster.
struct ThisTestsDatabases(Vec<String>);

impl Drop for ThisTestsDatabases {
    fn drop(&mut self) {
        for name in self.0.drain(..) {
            UNDROPPED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // The reaper only ends with the process.
            let _ = reaper().send(name);
        }
    }
}

thread_local! {
    static THIS_TESTS_DATABASES: std::cell::RefCell<ThisTestsDatabases> =
        const { std::cell::RefCell::new(ThisTestsDatabases(Vec::new())) };
}

/// Finished tests' databases not dropped yet.
static UNDROPPED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many finished tests' databases may wait for the reaper before a new
/// one waits for it instead: the suite's disk stays bounded.
const MAX_UNDROPPED: usize = 24;

/// How many databases a node drops at once. Each drop waits for a
/// checkpoint, and concurrent drops share one: three dropped one after
/// another took 3.7 s on a Citus worker, three at once 1.2 s.
const DROPS_AT_ONCE: usize = 6;

/// A thread of its own that drops, on every node, the databases of the
/// tests that have ended, beside the tests still running.
fn reaper() -> &'static std::sync::mpsc::Sender<String> {
    static REAPER: OnceLock<std::sync::mpsc::Sender<String>> = OnceLock::new();
    REAPER.get_or_init(|| {
        let (send, receive) = std::sync::mpsc::channel::<String>();
        std::thread::Builder::new()
            .name("test-database-reaper".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the reaper's runtime");
                while let Ok(first) = receive.recv() {
                    let mut finished = vec![first];
                    finished.extend(receive.try_iter().take(DROPS_AT_ONCE - 1));
                    runtime.block_on(drop_everywhere(&finished));
                    UNDROPPED.fetch_sub(finished.len(), std::sync::atomic::Ordering::SeqCst);
                }
            })
            .expect("starting the test-database reaper");
        send
    })
}

/// Drops `databases` on every node, all at once, saying so where it cannot
/// (a database left over costs disk, not a test).
async fn drop_everywhere(databases: &[String]) {
    let mut drops = tokio::task::JoinSet::new();
    for url in node_admin_urls().await {
        for database in databases {
            let (url, database) = (url.clone(), database.clone());
            drops.spawn(async move {
                let dropped = async {
                    let mut admin = sqlx::PgConnection::connect(&url).await?;
                    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                        "drop database if exists {database} with (force)"
                    )))
                    .execute(&mut admin)
                    .await?;
                    admin.close().await
                };
                if let Err(e) = dropped.await {
                    eprintln!("dropping the finished test database {database} on {url}: {e}");
                }
            });
        }
    }
    drops.join_all().await;
}

/// Waits while too many finished tests' databases are still to be dropped,
/// for two minutes at most (a drop that hangs costs disk, not the suite).
async fn wait_for_the_reaper() {
    let started = std::time::Instant::now();
    while UNDROPPED.load(std::sync::atomic::Ordering::SeqCst) > MAX_UNDROPPED {
        if started.elapsed() > std::time::Duration::from_secs(120) {
            eprintln!("the test-database reaper is two minutes behind; going on without it");
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Records a database the running test made, to be dropped once the test
/// has ended.
pub(crate) fn dropped_after_this_test(name: &str) {
    THIS_TESTS_DATABASES.with(|mine| mine.borrow_mut().0.push(name.to_owned()));
}

/// A fresh, migrated database: its URL and a pool.
pub(crate) async fn fresh_database() -> (String, PgPool) {
    let template = template().await;
    let name = format!("cl_test_{}", uuid::Uuid::now_v7().simple());
    wait_for_the_reaper().await;
    dropped_after_this_test(&name);
    on_every_node(&format!("create database {name} template {template}")).await;
    let url = url_for(&name);
    if citus() {
        // A database's settings are not copied with it.
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        db::citus_session_defaults(&mut conn).await.unwrap();
        conn.close().await.unwrap();
    }
    let pool = db::connect(&url, 20).await.unwrap();
    (url, pool)
}

/// A fresh, empty database (no migration applied): its URL and a pool.
pub(crate) async fn empty_database() -> (String, PgPool) {
    let name = format!("cl_empty_{}", uuid::Uuid::now_v7().simple());
    wait_for_the_reaper().await;
    dropped_after_this_test(&name);
    let mut admin = sqlx::PgConnection::connect(&backend().admin_url)
        .await
        .unwrap();
    execute(&mut admin, &format!("create database {name}")).await;
    admin.close().await.unwrap();
    let url = url_for(&name);
    let pool = db::connect(&url, 5).await.unwrap();
    (url, pool)
}

/// A fresh, empty database of the tests' backend, as an operator prepares
/// one for its first `migrate`: on Citus (`TEST_CITUS=1`) made on every
/// node with the extension and the workers added, else
/// [`empty_database`]. Its URL and a pool.
pub(crate) async fn empty_ledger_database() -> (String, PgPool) {
    if !citus() {
        return empty_database().await;
    }
    let name = format!("cl_empty_{}", uuid::Uuid::now_v7().simple());
    wait_for_the_reaper().await;
    dropped_after_this_test(&name);
    on_every_node(&format!("create database {name}")).await;
    make_citus_database(&name).await;
    let url = url_for(&name);
    let pool = db::connect(&url, 5).await.unwrap();
    (url, pool)
}

/// Serves `state` on an ephemeral loopback port until the test ends.
pub(crate) async fn serve_state(state: AppState) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        http::serve(listener, state, std::future::pending())
            .await
            .unwrap();
    });
    addr
}

/// The API on an ephemeral port over a fresh database.
#[derive(Debug)]
pub(crate) struct TestApp {
    pub(crate) base: String,
    /// The database URL, for child processes.
    pub(crate) db_url: String,
    /// A superuser's pool, for the tests' own setup and checks (the API
    /// runs as `ledger_api`).
    pub(crate) pool: PgPool,
    pub(crate) client: reqwest::Client,
}

impl TestApp {
    pub(crate) async fn spawn() -> TestApp {
        Self::spawn_with(command_ledger::domain::admission::Policies::default()).await
    }

    /// The API with these admission policies.
    pub(crate) async fn spawn_with(
        policies: command_ledger::domain::admission::Policies,
    ) -> TestApp {
        Self::spawn_configured(policies, |_| {}).await
    }

    /// The API with these admission policies and `configure`'s changes to
    /// its state (webhook settings, limits, ...).
    pub(crate) async fn spawn_configured(
        policies: command_ledger::domain::admission::Policies,
        configure: impl FnOnce(&mut AppState),
    ) -> TestApp {
        let (db_url, pool) = fresh_database().await;
        let mut state = AppState::new(as_role(&pool, ServiceRole::Api), ledger_backend(), policies);
        configure(&mut state);
        let addr = serve_state(state).await;
        TestApp {
            base: format!("http://{addr}"),
            db_url,
            pool,
            client: reqwest::Client::new(),
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A new token for a new principal of `role`.
    pub(crate) async fn token(&self, name: &str, role: Role) -> String {
        command_ledger::cli::issue_token(&self.pool, name, role, None)
            .await
            .unwrap()
    }

    /// `POST /v1/commands` with a JSON body.
    pub(crate) async fn submit(
        &self,
        token: &str,
        key: Option<&str>,
        body: &Value,
    ) -> reqwest::Response {
        let mut req = self
            .client
            .post(self.url("/v1/commands"))
            .bearer_auth(token)
            .json(body);
        if let Some(key) = key {
            req = req.header("Idempotency-Key", key);
        }
        req.send().await.unwrap()
    }

    /// Submits a new command (asserting `202`) and returns its id.
    pub(crate) async fn create(&self, token: &str, key: &str, body: &Value) -> String {
        let resp = self.submit(token, Some(key), body).await;
        assert_eq!(resp.status(), 202, "submitting {key}");
        let body: Value = resp.json().await.unwrap();
        body["id"].as_str().unwrap().to_owned()
    }

    pub(crate) async fn get(&self, token: &str, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    pub(crate) async fn post(&self, token: &str, path: &str) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    pub(crate) async fn command_count(&self) -> i64 {
        sqlx::query_scalar("select count(*) from commands")
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }
}

/// A refund submission body.
pub(crate) fn refund(amount: i64) -> Value {
    serde_json::json!({
        "kind": "refund",
        "authority": "payments",
        "args": {"to": "ada@example.com", "amount_minor": amount, "currency": "USD"}
    })
}

/// Asserts a problem+json response and returns its body.
pub(crate) async fn problem(resp: reqwest::Response, status: u16, problem_type: &str) -> Value {
    assert_eq!(resp.status().as_u16(), status, "status");
    let ct = resp
        .headers()
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(ct, "application/problem+json");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["type"], problem_type, "{body}");
    assert_eq!(body["status"], status);
    assert!(
        body["title"].is_string() && body["detail"].is_string(),
        "{body}"
    );
    body
}

/// Runs the command line against the database at `db_url`, as the OS user
/// `ops-alice` (so it acts as `cli:ops-alice`): (exit success, stdout, stderr).
pub(crate) async fn cli(db_url: &str, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_command-ledger"))
        .arg("--database-url")
        .arg(db_url)
        .args(args)
        .env("RUST_LOG", "error")
        .env("USER", "ops-alice")
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// A demo sink on an ephemeral port, with its log in a temporary directory
/// that goes when the sink does.
#[derive(Debug)]
pub(crate) struct TestSink {
    pub(crate) url: String,
    pub(crate) log: std::path::PathBuf,
    dir: std::path::PathBuf,
}

impl Drop for TestSink {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl TestSink {
    pub(crate) async fn start(mode: command_ledger::demo_sink::Mode) -> TestSink {
        TestSink::start_slow(mode, std::time::Duration::ZERO).await
    }

    /// A sink that takes `latency` to answer each effect, so that copies
    /// sent meanwhile find the command in flight.
    pub(crate) async fn start_slow(
        mode: command_ledger::demo_sink::Mode,
        latency: std::time::Duration,
    ) -> TestSink {
        let dir = std::env::temp_dir().join(format!(
            "command-ledger-sink-{}",
            uuid::Uuid::now_v7().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("sink.log");
        let router = command_ledger::demo_sink::router(&log, mode, latency).unwrap();
        let url = serve_router(router).await;
        TestSink { url, log, dir }
    }

    /// How many log lines have this event (`applied`, `replayed`, `fenced`, `rejected`).
    pub(crate) fn count(&self, event: &str) -> usize {
        command_ledger::demo_sink::read_log(&self.log)
            .unwrap()
            .iter()
            .filter(|l| l.event == event)
            .count()
    }

    /// Every request the sink received.
    pub(crate) fn requests(&self) -> usize {
        command_ledger::demo_sink::read_log(&self.log)
            .unwrap()
            .len()
    }
}

/// Serves `router` on an ephemeral loopback port until the test ends;
/// returns its base URL (`http://127.0.0.1:port`).
pub(crate) async fn serve_router(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

/// A custodian of `authorities` running its own loop (polling every
/// 100 ms, a 100 ms grace at shutdown) until the sender is used or dropped.
pub(crate) fn running_custodian(
    pool: &PgPool,
    authorities: &[&str],
    effects: command_ledger::custodian::Effects,
) -> (
    std::sync::Arc<command_ledger::custodian::Custodian>,
    tokio::sync::oneshot::Sender<()>,
) {
    let mut config = command_ledger::custodian::CustodianConfig::new(
        authorities.iter().map(|a| (*a).to_owned()).collect(),
    );
    config.poll_interval = std::time::Duration::from_millis(100);
    config.shutdown_grace = std::time::Duration::from_millis(100);
    let c = std::sync::Arc::new(command_ledger::custodian::Custodian::new(
        as_role(pool, ServiceRole::Custodian),
        ledger_backend(),
        config,
        effects,
    ));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = std::sync::Arc::clone(&c);
    tokio::spawn(async move {
        running
            .run(async move {
                let _ = stopped.await;
            })
            .await
            .expect("the custodian runs");
    });
    (c, stop)
}

/// A copy of command `like` (same scope, args and canonical form) recorded
/// with SQL 101 s ago under `key`, at priority 0: the only way to have been
/// recorded in the past. Returns its id.
pub(crate) async fn recorded_101_s_ago(pool: &PgPool, like: &str, key: &str) -> String {
    sqlx::query_scalar(
        "insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind,
                               authority_id, args, canonical, intent_digest, created_at)
         select gen_random_uuid(), c.scope, $2, sha256($2::bytea), 2, 'refund', 'payments',
                c.args, c.canonical, sha256($2::bytea), now() - interval '101 seconds'
         from commands c where c.id = $1::uuid
         returning id::text",
    )
    .bind(like)
    .bind(key)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Effects with `refund` going to `url` under `timeout`.
pub(crate) fn refund_effects(
    url: &str,
    timeout: std::time::Duration,
) -> command_ledger::custodian::Effects {
    let mut effects = command_ledger::custodian::Effects::default();
    let executor = command_ledger::custodian::http_executor::HttpExecutor::new(
        format!("{url}/refunds"),
        Default::default(),
        timeout,
    )
    .unwrap();
    effects.register("refund", executor, timeout);
    effects
}

/// One turn of custodian `c` by hand: claims and starts (asking up to
/// `tries` times until something starts), executes what started, and
/// records the outcomes.
pub(crate) async fn claim_execute_record(c: &command_ledger::custodian::Custodian, tries: usize) {
    let mut report = command_ledger::custodian::StepReport::default();
    let mut started = Vec::new();
    for _ in 0..tries {
        started.extend(c.claim_and_start(10, &mut report).await.unwrap());
        if !started.is_empty() {
            break;
        }
    }
    let done = c.execute(started).await;
    c.record_outcomes(done, &mut report).await;
}

/// A custodian for `authorities` with a short lease, for stepping by hand.
pub(crate) fn custodian(
    pool: &PgPool,
    authorities: &[&str],
    effects: command_ledger::custodian::Effects,
    lease_ttl: std::time::Duration,
) -> command_ledger::custodian::Custodian {
    custodian_on(ledger_backend(), pool, authorities, effects, lease_ttl)
}

/// [`custodian`] taking the database for `backend`: one node claiming an
/// authority per statement, as on Citus.
pub(crate) fn custodian_on(
    backend: db::Backend,
    pool: &PgPool,
    authorities: &[&str],
    effects: command_ledger::custodian::Effects,
    lease_ttl: std::time::Duration,
) -> command_ledger::custodian::Custodian {
    let mut config = command_ledger::custodian::CustodianConfig::new(
        authorities.iter().map(|a| (*a).to_owned()).collect(),
    );
    config.lease_ttl = lease_ttl;
    config.heartbeat = lease_ttl / 3;
    command_ledger::custodian::Custodian::new(
        as_role(pool, ServiceRole::Custodian),
        backend,
        config,
        effects,
    )
}

/// `refund` as the quickstart has it (keyless: the intent stands in for a
/// key; authority `payments`), with this coalescing window and this answer
/// to a near-duplicate after it.
pub(crate) fn refund_policy(
    window: std::time::Duration,
    near_duplicate: command_ledger::domain::admission::NearDuplicate,
) -> command_ledger::domain::admission::Policies {
    use command_ledger::domain::admission::{KeyMode, KindPolicy};
    let mut policies = command_ledger::domain::admission::Policies::default();
    policies.set(
        "refund",
        KindPolicy {
            key: KeyMode::Fingerprint,
            authority: Some("payments".into()),
            window,
            near_duplicate,
            ..KindPolicy::default()
        },
    );
    policies
}

/// `refund` as the quickstart declares it (`catalog::quickstart_refund`:
/// `to` and `amount` required, enforced at admission), with this coalescing
/// window and this answer to a near-duplicate after it.
pub(crate) fn quickstart_refund(
    window: std::time::Duration,
    near_duplicate: command_ledger::domain::admission::NearDuplicate,
) -> command_ledger::domain::admission::Policies {
    let mut policies = command_ledger::domain::admission::Policies::default();
    command_ledger::catalog::quickstart_refund(&mut policies);
    let mut policy = policies.get("refund").clone();
    policy.window = window;
    policy.near_duplicate = near_duplicate;
    policies.set("refund", policy);
    policies
}

/// The malformed refunds of issue 32 (item 9), which were each recorded and
/// applied while the quickstart's schema said `to` and `amount` are
/// required, and the amounts of nothing or less it took until its money
/// rule (`positive_money`): their args, and the fields (JSON pointers into
/// the args) a refusal must name.
pub(crate) fn malformed_refunds() -> Vec<(Value, Vec<&'static str>)> {
    vec![
        (serde_json::json!({"amount": "1.00 USD"}), vec!["/to"]),
        (serde_json::json!({}), vec!["/amount", "/to"]),
        (
            serde_json::json!({"customer": "x@y.z", "amount": "1.00 USD"}),
            vec!["/to"],
        ),
        (
            serde_json::json!({"to": "x@y.z", "amount": "twelve bucks"}),
            vec!["/amount"],
        ),
        // A refund of a negative amount is a charge; of nothing, no refund.
        (
            serde_json::json!({"to": "x@y.z", "amount": "-5.00 USD"}),
            vec!["/amount"],
        ),
        (
            serde_json::json!({"to": "x@y.z", "amount": "0.00 USD"}),
            vec!["/amount"],
        ),
    ]
}

/// Asserts that a problem document refuses the args as invalid and names
/// exactly these fields in `errors` (each with a message).
pub(crate) fn assert_names_fields(problem: &Value, fields: &[&str]) {
    assert_eq!(problem["type"], "/problems/invalid-args", "{problem}");
    assert_eq!(problem["status"], 400, "{problem}");
    let errors = problem["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("{problem}"));
    let mut named: Vec<&str> = errors
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect();
    named.sort_unstable();
    assert_eq!(named, fields, "{problem}");
    assert!(
        errors
            .iter()
            .all(|e| e["detail"].as_str().is_some_and(|d| !d.is_empty())),
        "{problem}"
    );
}

/// How many holds the ledger has.
pub(crate) async fn hold_count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from holds")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// A device principal in a fleet of its own, made as `token create` makes
/// one (its fleet first: on Citus both are reference tables, and a trigger
/// of one may not write the other); the one of that name if it exists.
pub(crate) async fn device_principal(pool: &PgPool, name: &str) -> uuid::Uuid {
    let mut conn = pool.acquire().await.unwrap();
    db::principals::ensure_principal(&mut conn, name, Role::Device, None)
        .await
        .unwrap()
}

/// Runs `sql` as the superuser with the ledger's triggers off, as an
/// attacker with the superuser's password (or a restored, edited backup)
/// would: on one node through `session_replication_role`; on Citus, which
/// does not carry that setting to the shards' sessions, by disabling the
/// triggers of the ledger's tables in the same transaction.
pub(crate) async fn tamper(pool: &PgPool, sql: &str) {
    const TABLES: &[&str] = &[
        "commands",
        "command_history",
        "pruned_commands",
        "command_resolutions",
        "command_queue",
        "command_in_flight",
        "coalesced_requests",
    ];
    let mut tx = pool.begin().await.unwrap();
    // One statement per message: Citus sends a DDL statement's whole
    // message on to the workers.
    let statements: Vec<String> = if citus() {
        let toggle = |how: &str| {
            TABLES
                .iter()
                .map(move |t| format!("alter table {t} {how} trigger all"))
                .collect::<Vec<_>>()
        };
        std::iter::once("set local citus.enable_unsafe_triggers = on".to_owned())
            .chain(toggle("disable"))
            .chain(std::iter::once(sql.to_owned()))
            .chain(toggle("enable"))
            .collect()
    } else {
        vec![
            "set local session_replication_role = replica".to_owned(),
            sql.to_owned(),
        ]
    };
    for statement in statements {
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
}

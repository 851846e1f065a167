//! Opening the ledger database: `DATABASE_URL`, or the private cluster.

use anyhow::Context as _;
use sqlx::PgPool;
use std::fs;
use std::path::{Path, PathBuf};

use crate::db;
use crate::db::roles::ServiceRole;
use crate::embedded_pg::{self, Cluster, ClusterOptions};

/// Name of the database the private cluster holds the ledger in.
pub(crate) const EMBEDDED_DATABASE: &str = "command_ledger";

/// A migrated ledger database, and the private cluster behind it, if any.
#[derive(Debug)]
pub struct Database {
    pub pool: PgPool,
    /// What the database can do, detected once as the pool opened; every
    /// pool of the process is on the same database.
    pub backend: db::Backend,
    /// The URL to give `psql`.
    pub url: String,
    pub cluster: Option<Cluster>,
    /// The private cluster's URL for each service role (a login of its own,
    /// with a random password kept in the state directory); empty with
    /// `DATABASE_URL`, where the roles are taken with `SET ROLE`.
    role_urls: Vec<(ServiceRole, String)>,
    /// Held while this process owns the private cluster (see
    /// [`Database::own_private_cluster`]); the OS releases it however the
    /// process ends, `kill -9` included.
    owner_lock: Option<fs::File>,
}

impl Database {
    pub async fn open(url: Option<String>, state_dir: &Path) -> anyhow::Result<Database> {
        Self::open_with(url, state_dir, 10, "command-ledger").await
    }

    pub async fn open_with(
        url: Option<String>,
        state_dir: &Path,
        max_connections: u32,
        application_name: &str,
    ) -> anyhow::Result<Database> {
        Self::open_with_timeout(
            url,
            state_dir,
            max_connections,
            application_name,
            db::ACQUIRE_TIMEOUT,
        )
        .await
    }

    /// [`Database::open_with`], its pool giving up on a connection after
    /// `acquire_timeout` (the API's is [`db::API_ACQUIRE_TIMEOUT`]).
    pub async fn open_with_timeout(
        url: Option<String>,
        state_dir: &Path,
        max_connections: u32,
        application_name: &str,
        acquire_timeout: std::time::Duration,
    ) -> anyhow::Result<Database> {
        let (url, cluster) = match url {
            Some(url) => (url, None),
            None => {
                let cluster = start_private_cluster(state_dir).await?;
                let admin = cluster.url("postgres");
                if let Err(e) = db::ensure_database(&admin, EMBEDDED_DATABASE).await {
                    // A failed start stops what it started.
                    let data_dir = cluster.data_dir().to_path_buf();
                    let _ = tokio::task::spawn_blocking(move || cluster.stop()).await;
                    if refused_password(&e) {
                        anyhow::bail!(
                            "the private cluster in {} was made for an earlier {} and its password is gone: `command-ledger database reset --yes` removes that cluster (and the ledger in it), or remove the directory by hand",
                            data_dir.display(),
                            state_dir.display()
                        );
                    }
                    return Err(e).context("creating the ledger database in the private cluster");
                }
                keep_password(state_dir, cluster.data_dir())?;
                (cluster.url(EMBEDDED_DATABASE), Some(cluster))
            }
        };
        let pool =
            db::connect_with_timeout(&url, max_connections, application_name, acquire_timeout)
                .await
                .context("connecting to the ledger database")?;
        let backend = db::Backend::detect(&pool)
            .await
            .context("asking what the database can do")?;
        db::migrate(&pool).await.context("applying migrations")?;
        let role_urls = match &cluster {
            Some(cluster) => private_role_logins(&pool, cluster, state_dir).await?,
            None => Vec::new(),
        };
        Ok(Database {
            pool,
            backend,
            url,
            cluster,
            role_urls,
            owner_lock: None,
        })
    }

    /// For a process given only its role's URL (`API_DATABASE_URL` and the
    /// like, no `DATABASE_URL`): connects as that role, migrates nothing,
    /// and refuses to start on a database not migrated to this version.
    pub async fn attach(url: String, application_name: &str) -> anyhow::Result<Database> {
        let pool = db::connect_as(&url, 1, application_name)
            .await
            .context("connecting to the ledger database")?;
        let current = match db::migrations_current(&pool).await {
            Ok(current) => current,
            // Never migrated (no sqlx table yet).
            Err(e) if e.as_database_error().and_then(|d| d.code()).as_deref() == Some("42P01") => {
                false
            }
            Err(e) => return Err(e).context("reading which migrations the database has"),
        };
        if !current {
            pool.close().await;
            anyhow::bail!(
                "the database is not migrated to this version: run `command-ledger migrate` with the owner's DATABASE_URL first"
            );
        }
        let backend = db::Backend::detect(&pool)
            .await
            .context("asking what the database can do")?;
        Ok(Database {
            pool,
            backend,
            url,
            cluster: None,
            role_urls: Vec::new(),
            owner_lock: None,
        })
    }

    /// [`Database::open_with_timeout`] when `database_url` is given (or
    /// neither is: the private cluster), else [`Database::attach`] to
    /// `role_url`.
    pub async fn open_for_role(
        database_url: Option<String>,
        role_url: Option<&str>,
        state_dir: &Path,
        application_name: &str,
    ) -> anyhow::Result<Database> {
        match (database_url, role_url) {
            (None, Some(role_url)) => Self::attach(role_url.to_owned(), application_name).await,
            (url, _) => Self::open_with(url, state_dir, 2, application_name).await,
        }
    }

    /// The URL `role` logs in with on the private cluster (none with
    /// `DATABASE_URL`).
    pub fn role_url(&self, role: ServiceRole) -> Option<&str> {
        self.role_urls
            .iter()
            .find(|(r, _)| *r == role)
            .map(|(_, url)| url.as_str())
    }

    /// A pool acting as `role`: through `url` when given, else the private
    /// cluster's login of the role, else `DATABASE_URL` with `SET ROLE`.
    pub async fn role_pool(
        &self,
        role: ServiceRole,
        url: Option<&str>,
        max_connections: u32,
        application_name: &str,
        acquire_timeout: std::time::Duration,
    ) -> anyhow::Result<PgPool> {
        let url = url.or_else(|| self.role_url(role));
        db::roles::connect(
            role,
            url,
            &self.url,
            max_connections,
            application_name,
            acquire_timeout,
        )
        .await
        .with_context(|| format!("connecting to the ledger database as {}", role.name()))
    }

    /// For long-running processes (`serve`): becomes the private cluster's
    /// owner, which stops it on exit, unless another live process already
    /// owns it. A cluster left running by a process that died (`kill -9`)
    /// has no owner, so the next `serve` adopts it instead of leaving it
    /// running forever after its own Ctrl-C.
    pub fn own_private_cluster(&mut self, state_dir: &Path) -> anyhow::Result<()> {
        let Some(cluster) = self.cluster.as_mut() else {
            return Ok(());
        };
        let path = state_dir.join("cluster.lock");
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {
                if !cluster.started_here() {
                    tracing::info!(
                        data_dir = %cluster.data_dir().display(),
                        "no live process owns the running private cluster; this one adopts it and stops it on exit"
                    );
                    cluster.adopt();
                }
                self.owner_lock = Some(file);
            }
            Err(fs::TryLockError::WouldBlock) => {
                tracing::info!(
                    "another process owns the private cluster; it stops it, not this one"
                );
            }
            Err(fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()));
            }
        }
        Ok(())
    }

    /// Opens the database, runs `work` on it and closes it whatever `work`
    /// returned (its private cluster stopped if this process started it).
    pub async fn with<T>(
        url: Option<String>,
        state_dir: &Path,
        work: impl AsyncFnOnce(&Database) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let db = Database::open(url, state_dir).await?;
        let result = work(&db).await;
        db.close().await?;
        result
    }

    /// Closes the pool, then stops the private cluster if this process started it.
    pub async fn close(self) -> anyhow::Result<()> {
        self.pool.close().await;
        if let Some(cluster) = self.cluster {
            tokio::task::spawn_blocking(move || cluster.stop())
                .await
                .context("stopping the private cluster")?
                .context("stopping the private cluster")?;
        }
        // Ownership ends only once the cluster is down.
        drop(self.owner_lock);
        Ok(())
    }
}

/// Where the private cluster keeps the password of `role`.
pub(super) fn role_password_file(state_dir: &Path, role: ServiceRole) -> PathBuf {
    state_dir.join(format!("pg-password-{}", role.name()))
}

/// Gives each service role of the private cluster a login with a random
/// password (created once, kept in a 0600 file of the state directory) and
/// returns their URLs.
async fn private_role_logins(
    pool: &PgPool,
    cluster: &Cluster,
    state_dir: &Path,
) -> anyhow::Result<Vec<(ServiceRole, String)>> {
    let mut logins = Vec::new();
    let mut urls = Vec::new();
    for role in ServiceRole::ALL {
        let password = read_or_create_secret(&role_password_file(state_dir, role))?;
        urls.push((
            role,
            format!(
                "postgres://{}:{password}@127.0.0.1:{}/{EMBEDDED_DATABASE}",
                role.name(),
                cluster.port()
            ),
        ));
        logins.push((role, password));
    }
    db::roles::set_logins(pool, &logins)
        .await
        .context("letting the service roles log in")?;
    Ok(urls)
}

/// Whether the server refused the password (SQLSTATE 28P01).
fn refused_password(e: &db::DbError) -> bool {
    let (db::DbError::Connect(source) | db::DbError::Sqlx(source)) = e else {
        return false;
    };
    source
        .as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c == "28P01")
}

/// The superuser password of the private cluster in `data_dir`. When the
/// data lives outside the state directory (a checkout the postgres user
/// cannot reach, as root), a copy is kept beside it, so that a state
/// directory made anew at the same path (a fresh clone) adopts the cluster
/// made for that path instead of failing to log in to it.
fn cluster_password(state_dir: &Path, data_dir: &Path) -> anyhow::Result<String> {
    let local = state_dir.join("pg-password");
    let keeper = (data_dir != state_dir.join("pg"))
        .then(|| data_dir.parent().map(|p| p.join("pg-password")))
        .flatten();
    let kept = keeper
        .as_deref()
        .and_then(|k| fs::read_to_string(k).ok())
        .map(|k| k.trim().to_owned())
        .filter(|k| !k.is_empty());
    let has_local = fs::read_to_string(&local).is_ok_and(|l| !l.trim().is_empty());
    if !has_local
        && let Some(kept) = &kept
        && data_dir.join("PG_VERSION").exists()
    {
        tracing::info!(
            data_dir = %data_dir.display(),
            "adopting the private cluster made for this path before; its password is copied into {}",
            state_dir.display()
        );
        write_secret(&local, kept)?;
    }
    read_or_create_secret(&local)
}

/// Once the cluster took the state directory's password: keeps its copy
/// beside a cluster that lives outside the state directory.
fn keep_password(state_dir: &Path, data_dir: &Path) -> anyhow::Result<()> {
    if data_dir == state_dir.join("pg") {
        return Ok(());
    }
    let Some(parent) = data_dir.parent() else {
        return Ok(());
    };
    let password = fs::read_to_string(state_dir.join("pg-password"))
        .with_context(|| format!("reading {}/pg-password", state_dir.display()))?;
    let keeper = parent.join("pg-password");
    if fs::read_to_string(&keeper).is_ok_and(|k| k.trim() == password.trim()) {
        return Ok(());
    }
    write_secret(&keeper, password.trim())
}

async fn start_private_cluster(state_dir: &Path) -> anyhow::Result<Cluster> {
    fs::create_dir_all(state_dir)
        .with_context(|| format!("creating the state directory {}", state_dir.display()))?;
    let data_dir = embedded_pg::data_dir_for(state_dir);
    if data_dir != state_dir.join("pg") {
        tracing::debug!(
            data_dir = %data_dir.display(),
            "the postgres user cannot reach {}; the private cluster's data lives here instead",
            state_dir.display()
        );
    }
    let password = cluster_password(state_dir, &data_dir)?;
    // The port of the last start while it is free, so that the psql URL
    // printed then still works.
    let port_file = state_dir.join("pg-port");
    let port = fs::read_to_string(&port_file)
        .ok()
        .and_then(|p| p.trim().parse::<u16>().ok())
        .filter(|p| embedded_pg::port_is_free(*p));
    let options = ClusterOptions {
        data_dir,
        password: Some(password),
        durable: true,
        port,
    };
    let cluster = tokio::task::spawn_blocking(move || Cluster::start(&options))
        .await
        .context("starting the private PostgreSQL cluster")?
        .context("starting the private PostgreSQL cluster")?;
    let _ = fs::write(&port_file, format!("{}\n", cluster.port()));
    Ok(cluster)
}

/// Where the private cluster of `state_dir` keeps its data, and whether it
/// and its state files were there to remove: `command-ledger database
/// reset`. Stops the server first if one runs there.
pub(super) fn reset_private_cluster(state_dir: &Path) -> anyhow::Result<(PathBuf, bool)> {
    let data_dir = embedded_pg::data_dir_for(state_dir);
    let removed = Cluster::remove(&data_dir)
        .with_context(|| format!("removing the private cluster in {}", data_dir.display()))?;
    if data_dir != state_dir.join("pg")
        && let Some(parent) = data_dir.parent()
    {
        let _ = fs::remove_file(parent.join("pg-password"));
        let _ = fs::remove_dir(parent);
    }
    // What belonged to that cluster: its passwords, its port, the operator
    // token it issued. The state directory itself stays.
    if let Ok(entries) = fs::read_dir(state_dir) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("pg-password") || name == "pg-port" || name == "operator-token" {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
    Ok((data_dir, removed))
}

/// Writes `secret` to a 0600 file of this process's user.
fn write_secret(path: &Path, secret: &str) -> anyhow::Result<()> {
    embedded_pg::write_private(path, format!("{secret}\n").as_bytes(), None)
        .with_context(|| format!("writing {}", path.display()))
}

/// A random secret kept in a 0600 file, created on first use.
fn read_or_create_secret(path: &Path) -> anyhow::Result<String> {
    if let Ok(existing) = fs::read_to_string(path) {
        let existing = existing.trim();
        if !existing.is_empty() {
            return Ok(existing.to_owned());
        }
    }
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness available: {e}"))?;
    let secret = hex::encode(bytes);
    write_secret(path, &secret)?;
    Ok(secret)
}

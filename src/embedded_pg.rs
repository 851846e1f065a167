//! The private PostgreSQL cluster behind the embedded default: with no
//! `DATABASE_URL`, `serve` (and the test harness) initialise and start a cluster
//! of their own from the server binaries on the machine, on a free loopback
//! port, without a unix socket. As root, the server runs as the `postgres` user.
//!
//! Everything here is blocking (`std::process`); async callers use
//! `spawn_blocking`.

use std::fs;
use std::io::{self, Write as _};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use sha2::{Digest as _, Sha256};

/// The oldest PostgreSQL major version the ledger supports.
pub const MIN_MAJOR_VERSION: u32 = 15;

const INSTALL_HINT: &str = "install the PostgreSQL server (Debian/Ubuntu: `apt-get install -y postgresql`; \
     macOS: `brew install postgresql@15`) or set DATABASE_URL to an existing PostgreSQL 15+ database";

#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error(
        "no PostgreSQL server binaries (initdb, pg_ctl) were found on PATH, via pg_config, or under /usr/lib/postgresql/*/bin: {INSTALL_HINT}"
    )]
    NoBinaries,
    #[error(
        "PostgreSQL {found} found in {dir} is too old; {MIN_MAJOR_VERSION} or newer is needed: {INSTALL_HINT}"
    )]
    TooOld { found: String, dir: PathBuf },
    #[error(
        "running as root, but there is no `postgres` user to run the server as (PostgreSQL refuses to run as root); create one or set DATABASE_URL"
    )]
    NoPostgresUser,
    #[error("{action} failed: {source}")]
    Io {
        action: String,
        #[source]
        source: io::Error,
    },
    #[error("{command} failed ({status}); see {log}:\n{output}")]
    CommandFailed {
        command: String,
        status: String,
        output: String,
        log: String,
    },
}

fn io_err(action: impl Into<String>) -> impl FnOnce(io::Error) -> EmbeddedError {
    let action = action.into();
    move |source| EmbeddedError::Io { action, source }
}

/// How to run the private cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// The cluster's data directory (PGDATA). Reused when it already holds a cluster.
    pub data_dir: PathBuf,
    /// Superuser password; `None` trusts every loopback connection (tests only).
    pub password: Option<String>,
    /// `false` turns fsync and synchronous commit off: for throwaway test clusters only.
    pub durable: bool,
    /// Listen on this port instead of a free one (a restart on the same URL).
    pub port: Option<u16>,
}

/// A running private cluster.
#[derive(Debug)]
pub struct Cluster {
    bin_dir: PathBuf,
    data_dir: PathBuf,
    port: u16,
    password: Option<String>,
    run_as: Option<(u32, u32)>,
    /// Whether this process started the server (and so should stop it).
    started_here: bool,
}

impl Cluster {
    /// Initialises the data directory if needed and starts the server, or
    /// attaches to a server already running on it.
    pub fn start(opts: &ClusterOptions) -> Result<Cluster, EmbeddedError> {
        let bin_dir = find_bin_dir()?;
        let run_as = if running_as_root() {
            Some(postgres_user()?)
        } else {
            None
        };
        let mut cluster = Cluster {
            bin_dir,
            data_dir: opts.data_dir.clone(),
            port: 0,
            password: opts.password.clone(),
            run_as,
            started_here: false,
        };
        if !opts.data_dir.join("PG_VERSION").exists() {
            cluster.init(opts)?;
        }
        if let Some(port) = cluster.running_port() {
            cluster.port = port;
            tracing::info!(data_dir = %opts.data_dir.display(), port, "attached to the running private PostgreSQL");
            return Ok(cluster);
        }
        cluster.port = match opts.port {
            Some(p) => p,
            None => free_port()?,
        };
        cluster.pg_ctl_start()?;
        cluster.started_here = true;
        Ok(cluster)
    }

    /// Connection URL for a database in this cluster.
    pub fn url(&self, database: &str) -> String {
        match &self.password {
            Some(pw) => format!(
                "postgres://postgres:{pw}@127.0.0.1:{}/{database}",
                self.port
            ),
            None => format!("postgres://postgres@127.0.0.1:{}/{database}", self.port),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn started_here(&self) -> bool {
        self.started_here
    }

    /// Takes over a server this process attached to, as if it had started
    /// it: [`Cluster::stop`] then stops it. For a server whose starter died.
    pub fn adopt(&mut self) {
        self.started_here = true;
    }

    /// Stops the server with a fast shutdown (clients disconnected, work
    /// committed so far kept), if this process started it.
    pub fn stop(&self) -> Result<(), EmbeddedError> {
        if !self.started_here {
            return Ok(());
        }
        let mut cmd = self.pg_command("pg_ctl");
        cmd.arg("stop")
            .arg("-D")
            .arg(&self.data_dir)
            .args(["-m", "fast", "-w", "-t", "60"]);
        run(cmd, "pg_ctl stop", &self.log_path())
    }

    /// Stops the server (if one runs on `data_dir`, whoever started it) and
    /// deletes the data directory: every database in it is gone. For
    /// `command-ledger database reset`. `Ok(false)`: there was none.
    pub fn remove(data_dir: &Path) -> Result<bool, EmbeddedError> {
        if !data_dir.exists() {
            return Ok(false);
        }
        let run_as = if running_as_root() {
            Some(postgres_user()?)
        } else {
            None
        };
        let cluster = Cluster {
            bin_dir: find_bin_dir()?,
            data_dir: data_dir.to_path_buf(),
            port: 0,
            password: None,
            run_as,
            started_here: true,
        };
        if cluster.running_port().is_some() || data_dir.join("postmaster.pid").exists() {
            cluster.stop()?;
        }
        fs::remove_dir_all(data_dir).map_err(io_err(format!("removing {}", data_dir.display())))?;
        Ok(true)
    }

    /// Stops the server the way a crash would: `pg_ctl stop -m immediate`
    /// (no checkpoint; the next start replays the WAL). For crash tests.
    pub fn crash(&self) -> Result<(), EmbeddedError> {
        let mut cmd = self.pg_command("pg_ctl");
        cmd.arg("stop")
            .arg("-D")
            .arg(&self.data_dir)
            .args(["-m", "immediate", "-w", "-t", "60"]);
        run(cmd, "pg_ctl stop -m immediate", &self.log_path())
    }

    /// Makes sure the server stops (and `remove` is deleted) when this process
    /// exits, however it exits: a small watchdog process waits for our pid to
    /// disappear. Used by the test harness, whose process has no shutdown hook.
    pub fn stop_when_process_exits(&self, remove: Option<&Path>) -> Result<(), EmbeddedError> {
        let pg_ctl = self.bin_dir.join("pg_ctl");
        let mut script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; {stop} '{pg_ctl}' stop -D '{data}' -m immediate -w >/dev/null 2>&1",
            pid = std::process::id(),
            stop = if self.run_as.is_some() {
                "runuser -u postgres --"
            } else {
                ""
            },
            pg_ctl = pg_ctl.display(),
            data = self.data_dir.display(),
        );
        if let Some(dir) = remove {
            script.push_str(&format!("; rm -rf '{}'", dir.display()));
        }
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(io_err("starting the cluster watchdog"))?;
        Ok(())
    }

    fn log_path(&self) -> PathBuf {
        self.data_dir.join("server.log")
    }

    fn pg_command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin_dir.join(program));
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
            cmd.env("HOME", &self.data_dir);
        }
        cmd.env("LC_ALL", "C")
            .env_remove("PGDATA")
            .env_remove("PGPORT");
        cmd
    }

    fn init(&self, opts: &ClusterOptions) -> Result<(), EmbeddedError> {
        let data = &opts.data_dir;
        let parent = data.parent().unwrap_or(Path::new("/"));
        fs::create_dir_all(parent).map_err(io_err(format!("creating {}", parent.display())))?;
        fs::create_dir_all(data).map_err(io_err(format!("creating {}", data.display())))?;
        fs::set_permissions(data, fs::Permissions::from_mode(0o700))
            .map_err(io_err(format!("restricting {}", data.display())))?;
        if let Some((uid, gid)) = self.run_as {
            check_traversable(data, uid, gid)?;
            std::os::unix::fs::chown(data, Some(uid), Some(gid)).map_err(io_err(format!(
                "giving {} to the postgres user",
                data.display()
            )))?;
        }

        let mut cmd = self.pg_command("initdb");
        cmd.arg("-D")
            .arg(data)
            .args(["-U", "postgres", "--encoding=UTF8", "--no-locale"]);
        if !opts.durable {
            cmd.arg("--no-sync");
        }
        // initdb reads the password from a file, readable only by the server's
        // user, next to the (still empty) data directory; removed right after.
        let pwfile = parent.join(format!(".initdb-password-{}", std::process::id()));
        match &opts.password {
            Some(pw) => {
                write_private(&pwfile, pw.as_bytes(), self.run_as)?;
                cmd.arg(format!("--pwfile={}", pwfile.display()));
                cmd.args(["--auth-local=scram-sha-256", "--auth-host=scram-sha-256"]);
            }
            None => {
                cmd.args(["--auth-local=trust", "--auth-host=trust"]);
            }
        }
        let result = run(cmd, "initdb", &self.log_path());
        let _ = fs::remove_file(&pwfile);
        result?;

        // Our settings go to postgresql.conf once, so that `pg_ctl start` by
        // hand runs the cluster the same way.
        let mut conf = String::from(
            "\n# command-ledger private cluster\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\nmax_connections = 200\n",
        );
        if !opts.durable {
            conf.push_str("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n");
        }
        let conf_path = data.join("postgresql.conf");
        fs::OpenOptions::new()
            .append(true)
            .open(&conf_path)
            .and_then(|mut f| f.write_all(conf.as_bytes()))
            .map_err(io_err(format!("writing {}", conf_path.display())))?;
        Ok(())
    }

    /// The port of a server already running on this data directory, if any.
    /// A `postmaster.pid` whose server does not answer is stale (a crash, or a
    /// reused pid) and is removed so that the next start succeeds.
    fn running_port(&self) -> Option<u16> {
        let pid_file = self.data_dir.join("postmaster.pid");
        let contents = fs::read_to_string(&pid_file).ok()?;
        let port = contents
            .lines()
            .nth(3)
            .and_then(|l| l.trim().parse::<u16>().ok());
        let answers = port.is_some_and(|p| {
            TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, p).into(), Duration::from_secs(1))
                .is_ok()
        });
        let mut status = self.pg_command("pg_ctl");
        status.arg("status").arg("-D").arg(&self.data_dir);
        let alive = status
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if alive && answers {
            return port;
        }
        if !alive {
            tracing::warn!(file = %pid_file.display(), "removing a stale postmaster.pid");
            let _ = fs::remove_file(&pid_file);
        }
        None
    }

    fn pg_ctl_start(&self) -> Result<(), EmbeddedError> {
        let mut cmd = self.pg_command("pg_ctl");
        cmd.arg("start")
            .arg("-D")
            .arg(&self.data_dir)
            .arg("-l")
            .arg(self.log_path())
            .args(["-w", "-t", "120", "-o"])
            .arg(format!("-p {}", self.port))
            // Its own process group: a Ctrl-C in the terminal reaches us, and
            // we stop the server in order, after the API has drained.
            .process_group(0);
        run(cmd, "pg_ctl start", &self.log_path())
    }
}

/// Whether `port` on loopback is free to listen on now.
pub fn port_is_free(port: u16) -> bool {
    port != 0 && TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

/// Where the embedded cluster keeps its data for a state directory (such as
/// `.command-ledger` under the working directory). As root, the server's user
/// must be able to traverse every directory down to the data directory; when
/// it cannot (a checkout under a 0700 home), the data goes to a directory under
/// `/var/tmp` named after the state directory, and the caller says so.
pub fn data_dir_for(state_dir: &Path) -> PathBuf {
    let preferred = state_dir.join("pg");
    if !running_as_root() {
        return preferred;
    }
    let Ok((uid, gid)) = postgres_user() else {
        return preferred;
    };
    if check_traversable(&preferred, uid, gid).is_ok() {
        return preferred;
    }
    let absolute = std::path::absolute(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
    let tag = hex::encode(&Sha256::digest(absolute.as_os_str().as_encoded_bytes())[..6]);
    PathBuf::from(format!("/var/tmp/command-ledger-{tag}/pg"))
}

/// Finds `initdb` and `pg_ctl` of PostgreSQL 15 or newer.
pub fn find_bin_dir() -> Result<PathBuf, EmbeddedError> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path));
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        candidates.push(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    }
    // Debian and Ubuntu keep server binaries out of PATH, one directory per major version.
    let mut versioned: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .collect();
    versioned.sort_by_key(|(major, _)| std::cmp::Reverse(*major));
    candidates.extend(versioned.into_iter().map(|(_, p)| p));
    candidates.push(PathBuf::from("/usr/local/pgsql/bin"));

    let mut too_old = None;
    for dir in candidates {
        if !(dir.join("initdb").is_file() && dir.join("pg_ctl").is_file()) {
            continue;
        }
        match major_version(&dir) {
            Some(v) if v >= MIN_MAJOR_VERSION => return Ok(dir),
            Some(v) => too_old = Some((v.to_string(), dir)),
            None => {}
        }
    }
    Err(match too_old {
        Some((found, dir)) => EmbeddedError::TooOld { found, dir },
        None => EmbeddedError::NoBinaries,
    })
}

fn major_version(bin_dir: &Path) -> Option<u32> {
    let out = Command::new(bin_dir.join("pg_ctl"))
        .arg("--version")
        .output()
        .ok()?;
    // "pg_ctl (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().nth(2)?;
    version.split(['.', 'b', 'r']).next()?.parse().ok()
}

fn running_as_root() -> bool {
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn postgres_user() -> Result<(u32, u32), EmbeddedError> {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, "postgres"]).output().ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    match (id("-u"), id("-g")) {
        (Some(uid), Some(gid)) => Ok((uid, gid)),
        _ => Err(EmbeddedError::NoPostgresUser),
    }
}

/// Every existing directory above `dir` must let the server's user through.
fn check_traversable(dir: &Path, uid: u32, gid: u32) -> Result<(), EmbeddedError> {
    let absolute = std::path::absolute(dir).map_err(io_err("resolving the data directory"))?;
    for ancestor in absolute.ancestors().skip(1) {
        let Ok(meta) = fs::metadata(ancestor) else {
            continue;
        };
        let mode = meta.mode();
        let ok = if meta.uid() == uid {
            mode & 0o100 != 0
        } else if meta.gid() == gid {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        };
        if !ok {
            return Err(EmbeddedError::Io {
                action: format!(
                    "checking that the postgres user can reach {}",
                    absolute.display()
                ),
                source: io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "{} is not traversable by the postgres user",
                        ancestor.display()
                    ),
                ),
            });
        }
    }
    Ok(())
}

/// Writes `contents` to a new 0600 file at `path` (replacing one there),
/// owned by `owner` when given: passwords and tokens.
pub(crate) fn write_private(
    path: &Path,
    contents: &[u8],
    owner: Option<(u32, u32)>,
) -> Result<(), EmbeddedError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err(format!("writing {}", path.display())))?;
    f.write_all(contents)
        .map_err(io_err(format!("writing {}", path.display())))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .map_err(io_err(format!("chown {}", path.display())))?;
    }
    Ok(())
}

fn free_port() -> Result<u16, EmbeddedError> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io_err("finding a free port"))?;
    let port = listener
        .local_addr()
        .map_err(io_err("finding a free port"))?
        .port();
    Ok(port)
}

fn run(mut cmd: Command, what: &str, log: &Path) -> Result<(), EmbeddedError> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(io_err(format!("running {what}")))?;
    if out.status.success() {
        return Ok(());
    }
    let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
    output.push_str(&String::from_utf8_lossy(&out.stderr));
    Err(EmbeddedError::CommandFailed {
        command: what.to_owned(),
        status: out.status.to_string(),
        output: output.trim().to_owned(),
        log: log.display().to_string(),
    })
}

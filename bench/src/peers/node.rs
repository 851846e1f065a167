//! What the npm-installed peers share: installing a package from its
//! committed lock file with `npm ci` (only when the lock file changed), and
//! running a harness script under node, one step per process, each printing
//! one JSON line; a `serve` step keeps running in the background until its
//! stdin closes.

use super::{STEP_LIMIT, setup_command, sources_dir, tail};
use anyhow::{Context as _, bail};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

/// A peer installed with npm under `target/peers/<source>`.
#[derive(Debug)]
pub(super) struct NpmPeer {
    /// The peer's name in messages.
    pub(super) peer: &'static str,
    pub(super) dir: PathBuf,
    /// `node --version`.
    pub(super) node: String,
}

impl NpmPeer {
    /// `npm ci` of `bench/peers/<source>` into `cache/<source>`, unless the
    /// same lock file is installed there already; then checks that
    /// `package` is at `version`, and copies `files` (the harness) over.
    pub(super) async fn install(
        peer: &'static str,
        source: &str,
        cache: &Path,
        package: &str,
        version: &str,
        files: &[&str],
    ) -> anyhow::Result<NpmPeer> {
        let node = setup_command(
            peer,
            "node --version",
            Command::new("node").arg("--version"),
        )
        .await?
        .trim()
        .to_owned();
        let src = sources_dir().join(source);
        let dir = cache.join(source);
        std::fs::create_dir_all(&dir)?;
        let lock = std::fs::read(src.join("package-lock.json"))
            .with_context(|| format!("peers: {peer}: reading {}", src.display()))?;
        let stamp = dir.join(".installed-lock");
        let installed = std::fs::read(&stamp).is_ok_and(|s| s == lock)
            && installed_version(&dir, package).as_deref() == Some(version);
        if !installed {
            for file in ["package.json", "package-lock.json"] {
                std::fs::copy(src.join(file), dir.join(file))?;
            }
            tracing::info!(dir = %dir.display(), "installing {package} {version} with npm ci");
            setup_command(
                peer,
                &format!("npm ci (installing {package} from the npm registry)"),
                Command::new("npm")
                    .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                    .current_dir(&dir),
            )
            .await?;
            std::fs::write(&stamp, &lock)?;
        }
        let got = installed_version(&dir, package);
        if got.as_deref() != Some(version) {
            bail!("peers: {peer}: npm installed {package} {got:?}, expected {version}");
        }
        for file in files {
            let to = dir.join(file);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::copy(src.join(file), &to)
                .with_context(|| format!("peers: {peer}: copying {file}"))?;
        }
        Ok(NpmPeer { peer, dir, node })
    }

    /// The version of an installed package, from its package.json.
    pub(super) fn version_of(&self, package: &str) -> Option<String> {
        installed_version(&self.dir, package)
    }

    fn harness(&self, script: &str, url: &str, args: &[String]) -> Command {
        let mut cmd = Command::new("node");
        cmd.arg(self.dir.join(script))
            .args(args)
            .env("DATABASE_URL", url)
            .current_dir(&self.dir)
            .kill_on_drop(true);
        cmd
    }

    /// One step of the harness `script`: the JSON line it printed last.
    pub(super) async fn step(
        &self,
        script: &str,
        url: &str,
        args: &[String],
    ) -> anyhow::Result<Value> {
        let peer = self.peer;
        let shown = args.join(" ");
        let output = tokio::time::timeout(STEP_LIMIT, self.harness(script, url, args).output())
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "peers: {peer}: step `{shown}` still running after {STEP_LIMIT:?}; stopped"
                )
            })?
            .with_context(|| format!("peers: {peer}: starting node {script}"))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            bail!(
                "peers: {peer}: step `{shown}` failed ({}):\n{}",
                output.status,
                tail(&String::from_utf8_lossy(&output.stderr), 40)
            );
        }
        last_json_line(&stdout)
            .with_context(|| format!("peers: {peer}: step `{shown}` printed no result: {stdout}"))
    }

    /// A `serve` step of `script` started in the background, returned once
    /// it printed its ready line (JSON).
    pub(super) async fn serve(
        &self,
        script: &str,
        url: &str,
        args: &[String],
    ) -> anyhow::Result<Server> {
        let cmd = self.harness(script, url, args);
        Server::start(self.peer, &args.join(" "), cmd, |l| {
            serde_json::from_str::<Value>(l).is_ok()
        })
        .await
    }
}

/// The last line of `stdout` that parses as JSON.
pub(super) fn last_json_line(stdout: &str) -> Option<Value> {
    stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
}

fn installed_version(dir: &Path, package: &str) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("node_modules").join(package).join("package.json"))
        .ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v["version"].as_str().map(str::to_owned)
}

/// A peer's worker running in the background for an end-to-end step: it
/// says when it is ready, and stops when its stdin closes or on SIGTERM.
#[derive(Debug)]
pub(super) struct Server {
    peer: &'static str,
    what: String,
    child: Child,
    /// Its stderr, read as it comes so that the pipe never fills.
    stderr: tokio::task::JoinHandle<String>,
    /// The line that said it was ready (JSON if it was JSON).
    pub(super) ready: Value,
}

/// How long a worker may take to start.
const READY_LIMIT: Duration = Duration::from_secs(120);

/// How much of a worker's stderr is kept for an error message.
const STDERR_KEPT: usize = 64 * 1024;

impl Server {
    /// Spawns `cmd` (its stdio piped here) and waits for the first line on
    /// stdout that `is_ready` accepts.
    pub(super) async fn start(
        peer: &'static str,
        what: &str,
        mut cmd: Command,
        is_ready: fn(&str) -> bool,
    ) -> anyhow::Result<Server> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("peers: {peer}: starting `{what}`"))?;
        let stderr = child.stderr.take().context("a piped stderr")?;
        let stderr = tokio::spawn(async move {
            let mut kept = String::new();
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                kept.push_str(&line);
                kept.push('\n');
                if kept.len() > 2 * STDERR_KEPT {
                    kept = kept.split_off(kept.len() - STDERR_KEPT);
                }
            }
            kept
        });
        let stdout = child.stdout.take().context("a piped stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(READY_LIMIT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if is_ready(&line) {
                    return Some(line);
                }
            }
            None
        })
        .await
        .ok()
        .flatten();
        let Some(line) = ready else {
            let _ = child.start_kill();
            let status = child.wait().await?;
            let said = stderr.await.unwrap_or_default();
            bail!(
                "peers: {peer}: `{what}` did not say it was ready ({status}):\n{}",
                tail(&said, 40)
            );
        };
        // The rest of its stdout is read and dropped.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Server {
            peer,
            what: what.to_owned(),
            child,
            stderr,
            ready: serde_json::from_str(&line).unwrap_or(Value::String(line)),
        })
    }

    /// Closes its stdin and, with `terminate`, sends it SIGTERM (for a
    /// program that does not read stdin); waits for it to exit and returns
    /// what it said on stderr.
    pub(super) async fn stop(mut self, terminate: bool) -> anyhow::Result<String> {
        drop(self.child.stdin.take());
        if terminate && let Some(pid) = self.child.id() {
            // The pid of the worker this process started, and only that.
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status()
                .await;
        }
        let (peer, what) = (self.peer, self.what.clone());
        let status = tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "peers: {peer}: `{what}` still running a minute after it was asked to stop"
                )
            })?
            .with_context(|| format!("peers: {peer}: waiting for `{what}`"))?;
        let said = self.stderr.await.unwrap_or_default();
        if !status.success() && !terminate {
            bail!(
                "peers: {peer}: `{what}` failed ({status}):\n{}",
                tail(&said, 40)
            );
        }
        Ok(said)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        cmd
    }

    fn json_line(l: &str) -> bool {
        serde_json::from_str::<Value>(l).is_ok()
    }

    #[tokio::test]
    async fn a_worker_is_ready_at_its_first_json_line_and_stops_when_its_stdin_closes() {
        let worker = Server::start(
            "peer",
            "serve",
            sh(r#"echo starting; echo '{"ready": true}'; echo busy >&2; cat >/dev/null; echo done >&2"#),
            json_line,
        )
        .await
        .expect("it says it is ready");
        assert_eq!(worker.ready, serde_json::json!({"ready": true}));
        let said = worker
            .stop(false)
            .await
            .expect("it exits when stdin closes");
        assert_eq!(said, "busy\ndone\n");
    }

    #[tokio::test]
    async fn a_worker_that_exits_before_it_is_ready_fails_with_what_it_said() {
        let err = Server::start(
            "pg-boss",
            "serve batch",
            sh("echo 'no database' >&2; exit 3"),
            json_line,
        )
        .await
        .expect_err("it never said it was ready");
        let text = err.to_string();
        assert!(
            text.starts_with("peers: pg-boss: `serve batch` did not say it was ready"),
            "{text}"
        );
        assert!(
            text.ends_with("\nno database\n") || text.ends_with("\nno database"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_worker_that_fails_after_it_was_ready_is_reported() {
        let worker = Server::start(
            "awa",
            "awa-peer serve",
            sh(r#"echo '{"ready": true}'; cat >/dev/null; echo 'lost the pool' >&2; exit 1"#),
            json_line,
        )
        .await
        .expect("ready");
        let err = worker.stop(false).await.expect_err("it exited 1");
        assert!(err.to_string().contains("lost the pool"), "{err}");
    }

    #[tokio::test]
    async fn a_worker_that_talks_a_lot_on_stderr_before_it_is_ready_does_not_block() {
        // More than a pipe holds: unread, it would stop the worker mid-write.
        let started = tokio::time::timeout(
            Duration::from_secs(20),
            Server::start(
                "DBOS Transact",
                "serve tuned",
                sh(r#"head -c 300000 /dev/zero | tr '\0' x >&2; echo '{"ready": true}'; cat >/dev/null"#),
                json_line,
            ),
        )
        .await
        .expect("ready before the pipe's reader is needed")
        .expect("ready");
        let said = started.stop(false).await.expect("stopped");
        assert_eq!(said.len(), STDERR_KEPT, "its tail is kept");
        assert!(said.ends_with("x\n"));
    }

    #[test]
    fn a_steps_result_is_its_last_json_line() {
        assert_eq!(
            last_json_line("warning: deprecated\n{\"a\": 1}\n{\"step\": \"work\"}\n(node) note\n"),
            Some(serde_json::json!({"step": "work"}))
        );
        assert_eq!(last_json_line("nothing\n"), None);
    }
}

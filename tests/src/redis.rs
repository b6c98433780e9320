//! A `redis-server` of the test's own on a free loopback port: killed, stopped (SIGSTOP, a
//! hung Redis: connections are accepted and nothing is answered), continued and restarted on
//! the same port; and what it counted (`INFO commandstats`, through `redis-cli`).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` process of the test's own.
pub struct Redis {
    child: Option<Child>,
    /// Its loopback port.
    pub port: u16,
    dir: tempfile::TempDir,
}

/// Whether `redis-server` is installed. Under CI (`CI` set) a missing one fails the test;
/// elsewhere the test says it is skipped and returns.
pub fn redis_installed() -> bool {
    let ok = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let why = "redis-server is not installed: apt-get install -y redis-server (.ci/run does)";
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("skipped: {why}");
    }
    ok
}

impl Redis {
    /// Starts one on a free port and waits until it accepts connections.
    pub fn start() -> Redis {
        let mut redis = Redis {
            child: None,
            port: crate::free_addr().port(),
            dir: tempfile::tempdir().expect("temp dir"),
        };
        redis.restart();
        redis
    }

    /// Starts it again (empty: no keys, no scripts) on the same port.
    pub fn restart(&mut self) {
        let dir: PathBuf = self.dir.path().into();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (.ci/run installs it)");
        self.child = Some(child);
        let start = Instant::now();
        loop {
            // A server that exited could not bind the port: a connection that succeeds
            // would then reach someone else's server, which may go away mid-test.
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "redis-server on port {} exited at start: {status}",
                    self.port
                );
            }
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis did not start"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL: connections are refused from now on.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let ok = Command::new("kill")
            .args([signal, &pid])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {signal} {pid}");
    }

    /// SIGSTOP: the process hangs; the kernel still accepts connections and their bytes.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Empties every database (`FLUSHALL`).
    pub fn flush(&self) {
        let ok = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "FLUSHALL"])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "redis-cli FLUSHALL");
    }

    /// How many times Redis ran `command` (`INFO commandstats`, `cmdstat_<command>:calls=N`).
    pub fn calls(&self, command: &str) -> u64 {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "INFO", "commandstats"])
            .output()
            .expect("redis-cli is installed with redis-server");
        let text = String::from_utf8_lossy(&out.stdout);
        let prefix = format!("cmdstat_{command}:calls=");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if self.child.is_some() {
            // A stopped process must be continued to die cleanly under some kernels' job
            // control; SIGKILL works either way.
            self.kill();
        }
    }
}

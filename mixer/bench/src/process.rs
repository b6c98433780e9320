//! The processes a benchmark starts: a mixer on free loopback ports, and mixer-bench's own
//! servers (the no-op baseline, the out-of-process adapter). Each stops when dropped.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::observe;

/// A child process, sent SIGTERM (then SIGKILL after 10 s) when dropped.
pub struct Killed(pub Child);

impl Killed {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A folder under the system's temporary directory, removed when dropped, however the run
/// ends.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// Creates `<tmp>/<prefix>-<pid>`.
    pub fn new(prefix: &str) -> anyhow::Result<TempDir> {
        let dir = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loopback address nothing listens on (yet), for a server this process starts.
///
/// Taken from 10000-15000, below the kernel's ephemeral range and apart from the ports the
/// tests' servers take: a port from `bind(:0)`, released for a child to bind, can meanwhile
/// become the local port of some outgoing connection (the tests' CI run saw exactly that).
pub fn free_addr() -> anyhow::Result<SocketAddr> {
    // Calls in one process continue the walk, so that addresses taken before any is bound
    // differ.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let salt = std::process::id().wrapping_mul(7919);
    for _ in 0..5000u32 {
        let i = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // 211 and 5000 share no factor, so the walk visits every port once.
        let port = 10_000 + (salt.wrapping_add(i.wrapping_mul(211)) % 5000);
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port as u16)) {
            return Ok(listener.local_addr()?);
        }
    }
    anyhow::bail!("no free loopback port between 10000 and 15000")
}

/// Waits until something accepts connections at `addr`.
pub fn wait_port(addr: SocketAddr) -> anyhow::Result<()> {
    let start = Instant::now();
    while TcpStream::connect(addr).is_err() {
        if start.elapsed() > Duration::from_secs(20) {
            bail!("{addr} did not start listening");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// A running mixer and its addresses.
pub struct Mixer {
    /// Every gRPC service.
    pub grpc: SocketAddr,
    /// Forward-auth.
    pub http: SocketAddr,
    /// Metrics and readiness.
    pub admin: SocketAddr,
    process: Killed,
}

impl Mixer {
    /// Starts `bin serve` with `config` (or its embedded one) and `extra` flags, and waits
    /// until it is ready.
    pub fn start(bin: &Path, config: Option<&Path>, extra: &[String]) -> anyhow::Result<Mixer> {
        let (grpc, http, admin) = (free_addr()?, free_addr()?, free_addr()?);
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .args(["--grpc-addr", &grpc.to_string()])
            .args(["--http-addr", &http.to_string()])
            .args(["--admin-addr", &admin.to_string()])
            .arg("--no-watch")
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        let process = Killed(
            crate::pin::spawn(&mut cmd).with_context(|| format!("starting {}", bin.display()))?,
        );
        observe::wait_ready(admin).context("the mixer did not become ready with its config")?;
        wait_port(grpc)?;
        wait_port(http)?;
        Ok(Mixer {
            grpc,
            http,
            admin,
            process,
        })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}

/// Starts `mixer-bench ARGS... --addr ADDR` (a server subcommand) on a free port and waits
/// until it listens.
pub fn bench_server(args: &[&str], extra: &[String]) -> anyhow::Result<(Killed, SocketAddr)> {
    let addr = free_addr()?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(args)
        .args(["--addr", &addr.to_string()])
        .args(extra)
        .stdout(Stdio::null());
    let child = crate::pin::spawn(&mut cmd)
        .with_context(|| format!("starting mixer-bench {}", args.join(" ")))?;
    let server = Killed(child);
    wait_port(addr)?;
    Ok((server, addr))
}

/// Plain TCP round trips between this process and a child `echo-server` for `duration`,
/// with a 200-byte message (about an adapter check request).
pub fn raw_round_trips(duration: Duration) -> anyhow::Result<hdrhistogram::Histogram<u64>> {
    let (_echo, addr) = bench_server(&["echo-server"], &[])?;
    crate::platform::round_trips(addr, 200, duration)
}

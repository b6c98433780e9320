//! Helpers for the integration and end-to-end tests in `tests/tests/`: start the real mixer
//! binary on free loopback ports, talk HTTP to it, stop it with SIGTERM.

pub mod adapters;
pub mod caddy;
pub mod nginx;
pub mod poll;
pub mod readme;
pub mod redis;
pub mod redis_cluster;
pub mod upstream;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A free loopback port for a server a test starts.
///
/// The port is bound to check it is free, then released for the server to take. It comes
/// from below the kernel's ephemeral range (32768 and up by default), where the outgoing
/// connections of tests running in parallel take their local ports: a port from `bind(:0)`,
/// released, could be taken by one of those before the server bound it. Tests in parallel
/// processes start their search at different places.
pub fn free_addr() -> SocketAddr {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 15_000;
    const SPAN: u32 = 17_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // One starting point per process: with a new one per call, two tests running in parallel
    // could both be handed a port that neither server had bound yet. From one start, the
    // steps of 211 (prime to SPAN) visit every port of the span once before any repeats.
    static START: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let start = *START.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        std::process::id().wrapping_mul(7919) ^ nanos
    });
    for _ in 0..SPAN {
        let offset = start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(211));
        let port = u16::try_from(FIRST + offset % SPAN).expect("below 65536");
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            return listener.local_addr().expect("local addr");
        }
    }
    panic!("no free loopback port between {FIRST} and {}", FIRST + SPAN);
}

/// A running `mixer serve` process.
pub struct Mixer {
    child: Option<Child>,
    /// gRPC address.
    pub grpc: SocketAddr,
    /// Forward-auth address.
    pub http: SocketAddr,
    /// Admin address.
    pub admin: SocketAddr,
}

impl Mixer {
    /// Starts `mixer serve` with extra arguments (e.g. `--config PATH`).
    pub fn start(binary: &Path, extra: &[&str]) -> Mixer {
        Mixer::spawn(Command::new(binary), extra, Stdio::null())
    }

    /// Starts `mixer serve` in a shell that first sets the open-file limit (soft and hard) to
    /// `fd_limit`, as `ulimit -n` does.
    pub fn start_with_fd_limit(binary: &Path, fd_limit: u64, extra: &[&str]) -> Mixer {
        let mut shell = Command::new("bash");
        shell
            .args(["-c", &format!("ulimit -n {fd_limit} && exec \"$0\" \"$@\"")])
            .arg(binary);
        Mixer::spawn(shell, extra, Stdio::null())
    }

    /// [`Mixer::start`], with the mixer's standard output (where the stdio adapter writes by
    /// default) readable line by line.
    pub fn start_capturing_stdout(
        binary: &Path,
        extra: &[&str],
    ) -> (Mixer, std::sync::mpsc::Receiver<String>) {
        let mut mixer = Mixer::spawn(Command::new(binary), extra, Stdio::piped());
        let stdout = mixer
            .child
            .as_mut()
            .and_then(|c| c.stdout.take())
            .expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        (mixer, rx)
    }

    /// [`Mixer::start`] with environment variables set and the log (standard error) written
    /// to `log`.
    pub fn start_with_env_and_log(
        binary: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
        log: &Path,
    ) -> Mixer {
        let mut command = Command::new(binary);
        command.envs(env.iter().copied());
        let file = std::fs::File::create(log).expect("create the log file");
        Mixer::spawn_with_stderr(command, extra, Stdio::null(), file.into())
    }

    fn spawn(command: Command, extra: &[&str], stdout: Stdio) -> Mixer {
        Mixer::spawn_with_stderr(command, extra, stdout, Stdio::inherit())
    }

    fn spawn_with_stderr(
        mut command: Command,
        extra: &[&str],
        stdout: Stdio,
        stderr: Stdio,
    ) -> Mixer {
        let (grpc, http, admin) = (free_addr(), free_addr(), free_addr());
        let child = command
            .arg("serve")
            .args(["--grpc-addr", &grpc.to_string()])
            .args(["--http-addr", &http.to_string()])
            .args(["--admin-addr", &admin.to_string()])
            .args(extra)
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("start the mixer");
        Mixer {
            child: Some(child),
            grpc,
            http,
            admin,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// CPU time the process has used so far (user + system, from `/proc/PID/stat`).
    pub fn cpu_time(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))
            .expect("read /proc/PID/stat");
        // Fields after the command name, which is in parentheses and may hold spaces:
        // utime and stime are the 12th and 13th of them, in clock ticks (100 per second).
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Duration::from_millis((ticks(11) + ticks(12)) * 10)
    }

    /// The value of a sample on `/metrics`, by its full name and labels as the text format
    /// writes them (`mixer_connections_open{listener="grpc"}`); `None` if it is absent.
    pub fn metric(&self, series: &str) -> Option<f64> {
        let (_, _, body) = http_request(self.admin, "GET", "/metrics", &[]).expect("metrics");
        body.lines().find_map(|line| {
            line.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
                .and_then(|value| value.trim().parse().ok())
        })
    }

    /// Polls `/readyz` until it answers 200; returns how long that took.
    pub fn wait_ready(&self, limit: Duration) -> Duration {
        // The last answer goes into the failure, so a start that never gets ready says why.
        poll::until(limit, Duration::from_millis(20), || {
            match http_request(self.admin, "GET", "/readyz", &[]) {
                Ok((200, _, _)) => Ok(()),
                Ok((status, _, body)) => Err(format!("mixer not ready; /readyz {status}: {body}")),
                Err(e) => Err(format!("mixer not ready; /readyz: {e}")),
            }
        })
        .1
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "mixer did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Mixer {
    /// Waits for the process to exit by itself (after a signal the test sent) within
    /// `limit`; returns its status and how long the wait took.
    pub fn wait_exit(mut self, limit: Duration) -> (ExitStatus, Duration) {
        let mut child = self.child.take().expect("running");
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return (status, start.elapsed());
            }
            assert!(
                start.elapsed() < limit,
                "mixer did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Mixer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// An HTTP answer: status, lower-case headers, body.
pub type HttpAnswer = (u16, Vec<(String, String)>, String);

/// A minimal HTTP/1.1 request; returns (status, lower-case headers, body).
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<HttpAnswer> {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    exchange(stream, addr, method, path, headers)
}

/// [`http_request`] from the loopback address `source` (any of 127.0.0.0/8 on Linux), so a
/// test can stand for clients at different addresses.
pub fn http_request_from(
    source: std::net::Ipv4Addr,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<HttpAnswer> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    socket.bind(&SocketAddr::from((source, 0)).into())?;
    socket.connect_timeout(&addr.into(), Duration::from_secs(2))?;
    exchange(socket.into(), addr, method, path, headers)
}

fn exchange(
    mut stream: TcpStream,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<HttpAnswer> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    // A Host header given replaces the default one (a second Host is a 400 to nginx).
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad response: {text:?}")))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok((status, headers, dechunk(body)))
}

fn dechunk(body: &str) -> String {
    // Bodies here are small; a chunked one is "size\r\ndata\r\n0\r\n\r\n".
    let mut out = String::new();
    let mut rest = body;
    loop {
        let Some((size, after)) = rest.split_once("\r\n") else {
            return if out.is_empty() {
                body.to_string()
            } else {
                out
            };
        };
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            return body.to_string();
        };
        if n == 0 || after.len() < n {
            return out;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
}

/// The value of a header in a response from [`http_request`].
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The example Wasm guest `name` (`adapters/examples/wasm/build.sh` builds them into
/// `target/wasm-guests`, or `$MIXER_WASM_GUESTS`). Missing, it fails the test under CI=1 and
/// is `None` (the test skipped, saying so) otherwise.
pub fn wasm_guest(name: &str) -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("MIXER_WASM_GUESTS").map_or_else(
        || std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/wasm-guests"),
        std::path::PathBuf::from,
    );
    let path = dir.join(format!("{name}.wasm"));
    if path.exists() {
        return Some(path);
    }
    let how = "build them with adapters/examples/wasm/build.sh";
    assert!(
        std::env::var_os("CI").is_none(),
        "{} is missing under CI=1: {how}",
        path.display()
    );
    eprintln!("skipped: {} is missing ({how})", path.display());
    None
}

/// The first of `candidates` (a tool's usual paths) that exists. When none does: under CI
/// (`CI` set) the test fails, saying how to `install` it; otherwise `None` after saying so
/// (the test skips).
pub fn installed_tool(candidates: &[&str], install: &str) -> Option<std::path::PathBuf> {
    let found = candidates
        .iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.exists());
    if found.is_none() {
        let why = format!(
            "{} is not installed: {install} (.ci/run does)",
            candidates.first().copied().unwrap_or("a tool")
        );
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("skipped: {why}");
    }
    found
}

//! Helpers for the integration and end-to-end tests in `tests/tests/`: start the real mixer
//! binary on free loopback ports, talk HTTP to it, stop it with SIGTERM.

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
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let start = std::process::id().wrapping_mul(7919) ^ nanos;
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
        let (grpc, http, admin) = (free_addr(), free_addr(), free_addr());
        let child = Command::new(binary)
            .arg("serve")
            .args(["--grpc-addr", &grpc.to_string()])
            .args(["--http-addr", &http.to_string()])
            .args(["--admin-addr", &admin.to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the mixer");
        Mixer {
            child: Some(child),
            grpc,
            http,
            admin,
        }
    }

    /// Polls `/readyz` until it answers 200; returns how long that took.
    pub fn wait_ready(&self, limit: Duration) -> Duration {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok((200, _, _)) = http_request(self.admin, "GET", "/readyz", &[]) {
                return start.elapsed();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("mixer not ready within {limit:?}");
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
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
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

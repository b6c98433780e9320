//! Reading a running mixer from outside: its CPU time, its admin `/metrics` page and
//! `/readyz`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// CPU seconds (user + system) a process has used, from /proc.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks())
}

fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// A counter's value from a Prometheus text page.
pub fn scrape(admin: SocketAddr, series: &str) -> f64 {
    sum(&metrics_page(admin), series, "")
}

/// The admin `/metrics` page, empty when the mixer does not answer.
pub fn metrics_page(admin: SocketAddr) -> String {
    let Ok(mut stream) = std::net::TcpStream::connect(admin) else {
        return String::new();
    };
    use std::io::{Read, Write};
    let _ = write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"
    );
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body);
    body
}

/// The sum of every sample of `series` on `page` whose line contains `filter` (a label such
/// as `handler="x"`; empty for all of them).
pub fn sum(page: &str, series: &str, filter: &str) -> f64 {
    // Sample lines are `name{labels} value`; a longer name sharing the prefix is another family.
    page.lines()
        .filter(|l| {
            l.strip_prefix(series)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| l.contains(filter))
        .filter_map(|l| l.rsplit(' ').next())
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
}

/// Waits until `admin`'s /readyz answers 200.
pub fn wait_ready(admin: SocketAddr) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let start = Instant::now();
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(admin) {
            let _ = write!(
                s,
                "GET /readyz HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"
            );
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.1 200") {
                return Ok(());
            }
        }
        if start.elapsed() > Duration::from_secs(20) {
            anyhow::bail!("mixer at {admin} not ready");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

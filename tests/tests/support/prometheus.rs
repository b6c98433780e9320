//! A real `prometheus` of the test's own, scraping one target every second, and PromQL
//! through its HTTP API.

// Each test file uses the part it needs.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use mixer_tests::http_request;

/// The installed Prometheus; a test that needs it fails when it is missing.
pub fn prometheus_binary() -> &'static str {
    for candidate in ["/usr/bin/prometheus", "/usr/local/bin/prometheus"] {
        if Path::new(candidate).exists() {
            return candidate;
        }
    }
    panic!("prometheus is not installed: `apt-get install -y prometheus` (.ci/run does)");
}

/// A running Prometheus, killed when dropped.
pub struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts Prometheus on `listen`, its data under `dir`, scraping `target` as job `mixer`.
pub fn start_prometheus(dir: &Path, listen: SocketAddr, target: SocketAddr) -> Prometheus {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n- job_name: mixer\n  static_configs:\n  - targets: ['{target}']\n"
        ),
    )
    .expect("write prometheus.yml");
    let child = Command::new(prometheus_binary())
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={listen}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus");
    Prometheus(child)
}

fn encode_query(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The sample values of a PromQL query, in Prometheus' order (empty when it cannot answer
/// yet).
pub fn samples(prometheus: SocketAddr, q: &str) -> Vec<f64> {
    let Ok((200, _, body)) = http_request(
        prometheus,
        "GET",
        &format!("/api/v1/query?query={}", encode_query(q)),
        &[],
    ) else {
        return Vec::new();
    };
    let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    json["data"]["result"]
        .as_array()
        .map(|samples| {
            samples
                .iter()
                .filter_map(|s| s["value"][1].as_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

//! A three-node Redis Cluster of the test's own on loopback: three `redis-server
//! --cluster-enabled yes` processes (no replicas), joined by `redis-cli --cluster create`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Three cluster nodes, stopped when dropped.
pub struct RedisCluster {
    nodes: Vec<Child>,
    /// The nodes' ports.
    pub ports: Vec<u16>,
    _dirs: Vec<tempfile::TempDir>,
}

/// A port whose cluster bus port (port + 10000) is free too.
fn cluster_port() -> u16 {
    loop {
        let port = crate::free_addr().port();
        if std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

impl RedisCluster {
    /// Starts three nodes on free ports and joins them into one cluster.
    pub fn start() -> RedisCluster {
        let mut cluster = RedisCluster {
            nodes: Vec::new(),
            ports: Vec::new(),
            _dirs: Vec::new(),
        };
        for _ in 0..3 {
            let port = cluster_port();
            let dir = tempfile::tempdir().expect("temp dir");
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string()])
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                ])
                .args(["--cluster-node-timeout", "2000"])
                .arg("--dir")
                .arg(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server is installed (.ci/run installs it)");
            cluster.nodes.push(child);
            cluster.ports.push(port);
            cluster._dirs.push(dir);
        }
        for &port in &cluster.ports {
            let start = Instant::now();
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "redis did not start"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(cluster.ports.iter().map(|p| format!("127.0.0.1:{p}")))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli is installed with redis-server");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let start = Instant::now();
        while !cluster
            .ports
            .iter()
            .all(|&p| cluster.info(p).contains("cluster_state:ok"))
        {
            assert!(start.elapsed() < Duration::from_secs(20), "cluster not ok");
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster
    }

    fn info(&self, port: u16) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &port.to_string(), "CLUSTER", "INFO"])
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `redis+cluster://` with every node as a seed.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// Keys held by each node (`DBSIZE`), to see that they spread over the slots.
    pub fn keys_per_node(&self) -> Vec<u64> {
        self.ports
            .iter()
            .map(|p| {
                let out = Command::new("redis-cli")
                    .args(["-p", &p.to_string(), "DBSIZE"])
                    .output()
                    .expect("redis-cli");
                String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .parse()
                    .unwrap_or(0)
            })
            .collect()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for c in &mut self.nodes {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

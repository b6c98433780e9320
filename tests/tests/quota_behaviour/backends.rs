//! The adapters under test: memquota in process, redisquota against a `redis-server` of the
//! test's own.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::Handler;
use mixer_adapter_api::host::AnyAdapter;
use mixer_adapter_memquota::MemQuota;
use mixer_adapter_redisquota::RedisQuota;
use mixer_model::{Code, Status};
use serde_json::{Value as Json, json};

use crate::support::ctx;

/// Builds handlers of one adapter from the `quotas`-level params of a test.
pub trait Backend {
    /// The handler for `params` (the backend adds what it needs, e.g. `redisServerUrl`).
    fn build(&self, params: Json) -> Arc<dyn Handler>;
    /// Metric name prefix.
    fn prefix(&self) -> &'static str;
    /// The status of a refusal, as Istio 1.4's adapter of the same name answers it.
    fn refusal(&self) -> Status;
}

pub struct Mem;

impl Backend for Mem {
    fn build(&self, params: Json) -> Arc<dyn Handler> {
        MemQuota.compile(&params).expect("valid memquota params");
        MemQuota
            .compile_and_build(&params, &ctx())
            .expect("memquota handler")
    }
    fn prefix(&self) -> &'static str {
        "mixer_memquota"
    }
    /// istio/istio release-1.4 `mixer/adapter/memquota/memquota.go`, `alloc`: a refusal is
    /// `status.OK` with amount 0 (and no expiration).
    fn refusal(&self) -> Status {
        Status::OK
    }
}

/// A `redis-server` of our own, killed when dropped.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

pub fn free_port() -> u16 {
    mixer_tests::free_addr().port()
}

impl RedisServer {
    pub fn start() -> RedisServer {
        let mut server = RedisServer {
            child: None,
            port: free_port(),
            dir: tempfile::tempdir().expect("temp dir"),
        };
        server.spawn();
        server
    }

    pub fn spawn(&mut self) {
        let dir: PathBuf = self.dir.path().into();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", dir.to_str().expect("utf-8 temp dir")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (apt-get install redis-server)");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn url(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Backend for RedisServer {
    fn build(&self, mut params: Json) -> Arc<dyn Handler> {
        params["redisServerUrl"] = json!(self.url());
        // These tests are about what is counted, on a machine busy with other tests: a call
        // budget far above the 5 ms default keeps a slow moment from failing an allocation.
        if params.get("callTimeout").is_none() {
            params["callTimeout"] = json!("2s");
        }
        RedisQuota
            .compile(&params)
            .expect("valid redisquota params");
        RedisQuota
            .compile_and_build(&params, &ctx())
            .expect("redisquota handler")
    }
    fn prefix(&self) -> &'static str {
        "mixer_redisquota"
    }
    /// istio/istio release-1.4 `mixer/adapter/redisquota/redisquota.go`, `HandleQuota`:
    /// `status.WithResourceExhausted("redisquota: Resource exhausted")` when nothing is
    /// allocated (and the scripts answer a refusal's expiration as 0).
    fn refusal(&self) -> Status {
        Status::new(Code::ResourceExhausted, "redisquota: Resource exhausted")
    }
}

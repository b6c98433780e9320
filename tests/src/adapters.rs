//! Out-of-process adapters the tests run: a child process killed when dropped (the example
//! adapters' binaries, a Python adapter), and a gRPC adapter served in the test's own process
//! on a runtime of its own, which dropping kills as a process dies (listener and every
//! connection closed at once), so that a test can restart it on the same address.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long an adapter may take to listen before the test fails.
const LISTEN_LIMIT: Duration = Duration::from_secs(20);

/// A child process, killed and reaped when dropped.
pub struct Process(pub Child);

impl Process {
    /// Spawns `command`; a command that cannot start fails the test, naming `what`.
    pub fn spawn(mut command: Command, what: &str) -> Process {
        Process(
            command
                .spawn()
                .unwrap_or_else(|e| panic!("start {what}: {e}")),
        )
    }

    /// Waits until something accepts connections on `addr`; the process exiting first, or
    /// nothing listening within 20 s, fails the test.
    pub fn wait_listening(&mut self, addr: SocketAddr) {
        let start = Instant::now();
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if let Ok(Some(status)) = self.0.try_wait() {
                panic!("the adapter exited before listening on {addr}: {status}");
            }
            assert!(
                start.elapsed() < LISTEN_LIMIT,
                "the adapter is not listening on {addr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An adapter binary (`env!("CARGO_BIN_EXE_allowlist-under-test")`: the allowlist example
/// served by the SDK) started with its address as its argument, listening once this returns;
/// its standard error goes to the test's.
pub fn start_adapter_binary(binary: &Path, addr: SocketAddr) -> Process {
    let mut command = Command::new(binary);
    command
        .arg(addr.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let mut process = Process::spawn(command, &binary.display().to_string());
    process.wait_listening(addr);
    process
}

/// A gRPC adapter served in the test's process on a runtime of its own. Dropping it (or
/// [`InProcessAdapter::kill`]) shuts the runtime down: the listener and every connection
/// close as when a process is killed.
pub struct InProcessAdapter {
    runtime: Option<tokio::runtime::Runtime>,
}

impl InProcessAdapter {
    /// Serves `routes` (the adapter's services: `tonic::service::Routes::new(a).add_service(b)`)
    /// on `addr`, retrying the bind for up to 5 s so that a restart on the address a killed
    /// one held succeeds.
    pub fn start(addr: SocketAddr, routes: tonic::service::Routes) -> InProcessAdapter {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let listener = runtime.block_on(async {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                match tokio::net::TcpListener::bind(addr).await {
                    Ok(l) => return l,
                    Err(e) if Instant::now() > deadline => panic!("bind {addr}: {e}"),
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        });
        runtime.spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_routes(routes)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await;
        });
        InProcessAdapter {
            runtime: Some(runtime),
        }
    }

    /// Kills it now.
    pub fn kill(mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for InProcessAdapter {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

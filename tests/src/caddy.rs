//! A real Caddy for the end-to-end tests, configured by a Caddyfile and stopped when dropped.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The caddy binary, or `None` (the test skips) when it is not installed outside CI; under
/// CI (`CI` set) a missing caddy fails the test.
pub fn binary() -> Option<PathBuf> {
    crate::installed_tool(
        &["/usr/bin/caddy", "/usr/local/bin/caddy"],
        "`apt-get install -y caddy`",
    )
}

/// A running Caddy; dropping it stops it.
pub struct Caddy(Child);

impl Caddy {
    /// Writes `caddyfile` (the whole file: a test turns `admin` and `auto_https` off in its
    /// global block) into `dir`, runs it with its data and config under `dir`, and waits
    /// until `listen` accepts connections.
    pub fn start(binary: &Path, dir: &Path, caddyfile: &str, listen: SocketAddr) -> Caddy {
        let path = dir.join("Caddyfile");
        std::fs::write(&path, caddyfile).expect("write Caddyfile");
        let child = Command::new(binary)
            .args(["run", "--adapter", "caddyfile", "--config"])
            .arg(&path)
            .env("HOME", dir)
            .env("XDG_DATA_HOME", dir)
            .env("XDG_CONFIG_HOME", dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start caddy");
        let caddy = Caddy(child);
        let start = Instant::now();
        while TcpStream::connect(listen).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "caddy did not start listening on {listen}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        caddy
    }
}

impl Drop for Caddy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

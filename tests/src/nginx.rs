//! A real nginx for the end-to-end tests, stopped with all its processes.
//!
//! nginx runs a master and worker processes. A worker outlives a master killed with SIGKILL
//! and keeps the test's standard output open, so a `cargo test | tee` never sees the end of
//! its input. Each nginx here runs in its own process group, writes nothing to the test's
//! output (its error log is a file in its prefix) and is stopped as a group: SIGTERM (fast
//! shutdown, workers first), then SIGKILL for whatever is left.

use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The nginx binary, or `None` (the test skips) when it is not installed outside CI; under
/// CI (`CI` set) a missing nginx fails the test.
pub fn binary() -> Option<PathBuf> {
    crate::installed_tool(
        &["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"],
        "`apt-get install -y nginx`",
    )
}

/// The whole `nginx.conf` for `http` (the `server` and `upstream` blocks of a test) with its
/// pid file, error log and temporary files under `prefix`.
pub fn conf(prefix: &Path, http: &str) -> String {
    let prefix = prefix.display();
    format!(
        "worker_processes 1;\npid {prefix}/nginx.pid;\nerror_log {prefix}/error.log info;\n\
         events {{}}\nhttp {{\n    access_log off;\n    client_body_temp_path {prefix}/body;\n    \
         proxy_temp_path {prefix}/proxy;\n    fastcgi_temp_path {prefix}/fastcgi;\n    \
         uwsgi_temp_path {prefix}/uwsgi;\n    scgi_temp_path {prefix}/scgi;\n{http}\n}}\n"
    )
}

/// The `auth_request` location (`/_mixer_check`) that asks `mixer`'s forward-auth endpoint
/// with the original method, URI and host; `extra` adds directives (forwarding headers, a
/// cache).
pub fn check_location(mixer: SocketAddr, extra: &str) -> String {
    format!(
        r#"
        location = /_mixer_check {{
            internal;
            proxy_pass http://{mixer}/check;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header X-Original-URI $request_uri;
            proxy_set_header X-Original-Method $request_method;
            proxy_set_header X-Forwarded-Host $host;
            {extra}
        }}"#
    )
}

/// A running nginx; dropping it stops every process it started.
pub struct Nginx {
    child: Child,
    prefix: PathBuf,
}

impl Nginx {
    /// Writes [`conf`] for `http` into `prefix`, checks it with `nginx -t`, starts nginx and
    /// waits until every address in `listens` accepts connections.
    pub fn start(binary: &Path, prefix: &Path, http: &str, listens: &[SocketAddr]) -> Nginx {
        let path = prefix.join("nginx.conf");
        std::fs::write(&path, conf(prefix, http)).expect("write nginx.conf");
        let test = Command::new(binary)
            .arg("-t")
            .arg("-c")
            .arg(&path)
            .arg("-p")
            .arg(prefix)
            .output()
            .expect("nginx -t");
        assert!(
            test.status.success(),
            "nginx -t refuses the configuration: {}",
            String::from_utf8_lossy(&test.stderr)
        );
        let child = Command::new(binary)
            .arg("-c")
            .arg(&path)
            .arg("-p")
            .arg(prefix)
            .args(["-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start nginx");
        let nginx = Nginx {
            child,
            prefix: prefix.into(),
        };
        for listen in listens {
            let start = Instant::now();
            while TcpStream::connect(listen).is_err() {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "nginx did not start listening on {listen}: {}",
                    nginx.error_log()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        nginx
    }

    /// What nginx wrote to its error log so far.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.prefix.join("error.log")).unwrap_or_default()
    }

    fn signal_group(&self, signal: &str) {
        // The group's id is the master's pid (`process_group(0)`).
        let _ = Command::new("kill")
            .args([signal, "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.signal_group("-TERM");
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // Workers that outlived the master, or a master that did not stop in time.
        self.signal_group("-KILL");
        let _ = self.child.wait();
    }
}

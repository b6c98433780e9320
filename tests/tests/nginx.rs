//! End to end with a real nginx: `auth_request` asks the mixer's forward-auth endpoint before
//! proxying to a small upstream. The mixer is the only decider.
//!
//! nginx passes 401 and 403 from the auth endpoint on to the client and turns any other
//! status into 500, so denials here use PERMISSION_DENIED and UNAUTHENTICATED.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mixer_tests::{Mixer, free_addr, http_request};

const CONFIG: &str = r#"
kind: handler
metadata: {name: forbid, namespace: istio-system}
spec:
  compiledAdapter: denier
  params: {status: {code: 7, message: "admins only"}}
---
kind: handler
metadata: {name: who-are-you, namespace: istio-system}
spec:
  compiledAdapter: denier
  params: {status: {code: 16, message: "log in first"}}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: rule
metadata: {name: admin-area, namespace: istio-system}
spec:
  match: request.url_path.startsWith("/admin") && (request.headers["x-role"] | "") != "admin"
  actions: [{handler: forbid, instances: [nothing]}]
---
kind: rule
metadata: {name: private-area, namespace: istio-system}
spec:
  match: request.url_path.startsWith("/private") && !("authorization" in request.headers)
  actions: [{handler: who-are-you, instances: [nothing]}]
---
kind: rule
metadata: {name: tag-user, namespace: istio-system}
spec:
  requestHeaderOperations:
  - name: x-mixer-user
    values: ['request.headers["x-user"] | "anonymous"']
"#;

/// An upstream that answers 200 with the request line and headers it received as its body.
fn upstream(hits: Arc<AtomicUsize>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            hits.fetch_add(1, Ordering::SeqCst);
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut head = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
            let body = head.to_ascii_lowercase();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn nginx_binary() -> &'static str {
    for candidate in ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"] {
        if Path::new(candidate).exists() {
            return candidate;
        }
    }
    panic!("nginx is not installed: `apt-get install -y nginx` (.ci/run does)");
}

fn start_nginx(dir: &Path, listen: SocketAddr, mixer: SocketAddr, upstream: SocketAddr) -> Nginx {
    let prefix = dir.display();
    let conf = format!(
        r#"
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log info;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    server {{
        listen {listen};
        location / {{
            auth_request /_mixer_check;
            auth_request_set $mixer_user $upstream_http_x_mixer_user;
            proxy_set_header X-Mixer-User $mixer_user;
            proxy_pass http://{upstream};
        }}
        location = /_mixer_check {{
            internal;
            proxy_pass http://{mixer}/check;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header X-Original-URI $request_uri;
            proxy_set_header X-Original-Method $request_method;
        }}
    }}
}}
"#
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).expect("write nginx.conf");
    let child = Command::new(nginx_binary())
        .arg("-c")
        .arg(&path)
        .arg("-p")
        .arg(dir)
        .args(["-g", "daemon off;"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start nginx");
    let nginx = Nginx(child);
    let start = Instant::now();
    while std::net::TcpStream::connect(listen).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "nginx did not start listening"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    nginx
}

#[test]
fn nginx_auth_request_lets_the_mixer_decide() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("mixer.yaml");
    std::fs::write(&config, CONFIG).expect("write config");
    let mixer = Mixer::start(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &["--config", config.to_str().expect("utf-8")],
    );
    mixer.wait_ready(Duration::from_secs(10));
    let hits = Arc::new(AtomicUsize::new(0));
    let upstream = upstream(hits.clone());
    let listen = free_addr();
    let _nginx = start_nginx(dir.path(), listen, mixer.http, upstream);

    // Allowed: reaches the upstream with the header the rule added.
    let (status, _, body) =
        http_request(listen, "GET", "/shop", &[("x-user", "carol")]).expect("request");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("get /shop http/1.0") || body.contains("get /shop http/1.1"),
        "{body}"
    );
    assert!(body.contains("x-mixer-user: carol"), "{body}");
    let (status, _, body) = http_request(listen, "GET", "/shop", &[]).expect("request");
    assert_eq!(status, 200);
    assert!(body.contains("x-mixer-user: anonymous"), "{body}");
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    // Denied: stopped at nginx with the rule's status; the upstream never sees it.
    let (status, _, _) =
        http_request(listen, "GET", "/admin/users", &[("x-role", "viewer")]).expect("request");
    assert_eq!(status, 403);
    let (status, _, _) = http_request(listen, "POST", "/private/notes", &[]).expect("request");
    assert_eq!(status, 401);
    assert_eq!(
        hits.load(Ordering::SeqCst),
        2,
        "a denied request reached the upstream"
    );

    // The same paths with what the rules ask for go through.
    let (status, _, _) =
        http_request(listen, "GET", "/admin/users", &[("x-role", "admin")]).expect("request");
    assert_eq!(status, 200);
    let (status, _, _) = http_request(
        listen,
        "GET",
        "/private/notes",
        &[("authorization", "Bearer t")],
    )
    .expect("request");
    assert_eq!(status, 200);
    assert_eq!(hits.load(Ordering::SeqCst), 4);
    assert!(mixer.terminate().success());
}

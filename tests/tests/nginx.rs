//! End to end with a real nginx: `auth_request` asks the mixer's forward-auth endpoint before
//! proxying to a small upstream. The mixer is the only decider.
//!
//! nginx passes 401 and 403 from the auth endpoint on to the client and turns any other
//! status into 500, so denials here use PERMISSION_DENIED and UNAUTHENTICATED.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use mixer_tests::nginx::{self, Nginx};
use mixer_tests::upstream;
use mixer_tests::{Mixer, free_addr, http_request, http_request_from};

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

/// A server block on `listen` whose every request asks `mixer` first, then goes to `upstream`.
fn server(listen: SocketAddr, mixer: SocketAddr, upstream: SocketAddr, extra: &str) -> String {
    let check = nginx::check_location(mixer, extra);
    format!(
        r#"
    server {{
        listen {listen};
        location / {{
            auth_request /_mixer_check;
            auth_request_set $mixer_user $upstream_http_x_mixer_user;
            proxy_set_header X-Mixer-User $mixer_user;
            proxy_pass http://{upstream};
        }}
        {check}
    }}"#
    )
}

fn start_nginx(dir: &Path, servers: &[(SocketAddr, String)]) -> Nginx {
    let binary = nginx::binary().expect("nginx is installed (.ci/run installs it)");
    let blocks: String = servers.iter().map(|(_, block)| block.as_str()).collect();
    let listens: Vec<SocketAddr> = servers.iter().map(|(listen, _)| *listen).collect();
    Nginx::start(&binary, dir, &blocks, &listens)
}

fn start_mixer(dir: &Path, name: &str, config: &str, flags: &[&str]) -> Mixer {
    let path = dir.join(name);
    std::fs::write(&path, config).expect("write config");
    let mut args = vec!["--config", path.to_str().expect("utf-8")];
    args.extend_from_slice(flags);
    let mixer = Mixer::start(Path::new(env!("CARGO_BIN_EXE_mixer-under-test")), &args);
    mixer.wait_ready(Duration::from_secs(10));
    mixer
}

#[test]
fn nginx_auth_request_lets_the_mixer_decide() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mixer = start_mixer(dir.path(), "mixer.yaml", CONFIG, &[]);
    let hits = Arc::new(AtomicUsize::new(0));
    let upstream = upstream::echo_head_counted(hits.clone());
    let listen = free_addr();
    let _nginx = start_nginx(
        dir.path(),
        &[(listen, server(listen, mixer.http, upstream, ""))],
    );

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

/// Istio 1.4's "denials by IP" task, for forward-auth: only clients from 10.57.0.0/16 (and,
/// here on loopback, the test client 127.0.0.5) may pass.
const IP_ALLOW_LIST: &str = include_str!("../configs/ip_allow_list.yaml");

/// A client cannot choose its own `source.ip` with a forwarding header: by default the mixer
/// takes the peer (nginx) and ignores the headers; told to trust nginx (`--trusted-proxies`),
/// it takes the address nginx saw, from `X-Real-IP` (`proxy_set_header X-Real-IP
/// $remote_addr`) or from the right of `X-Forwarded-For` (`$proxy_add_x_forwarded_for`),
/// never the address the client wrote.
#[test]
fn a_spoofed_forwarding_header_does_not_pass_an_ip_allow_list() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = start_mixer(dir.path(), "plain.yaml", IP_ALLOW_LIST, &[]);
    let real_ip = start_mixer(
        dir.path(),
        "real-ip.yaml",
        IP_ALLOW_LIST,
        &[
            "--trusted-proxies",
            "127.0.0.1",
            "--real-ip-header",
            "x-real-ip",
        ],
    );
    let forwarded = start_mixer(
        dir.path(),
        "forwarded.yaml",
        IP_ALLOW_LIST,
        &["--trusted-proxies", "127.0.0.1/32"],
    );
    let hits = Arc::new(AtomicUsize::new(0));
    let upstream = upstream::echo_head_counted(hits.clone());
    let (a, b, c) = (free_addr(), free_addr(), free_addr());
    let set_real_ip = "proxy_set_header X-Real-IP $remote_addr;";
    let append_xff = "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;";
    let _nginx = start_nginx(
        dir.path(),
        &[
            (a, server(a, plain.http, upstream, set_real_ip)),
            (b, server(b, real_ip.http, upstream, set_real_ip)),
            (c, server(c, forwarded.http, upstream, append_xff)),
        ],
    );
    let allowed = std::net::Ipv4Addr::new(127, 0, 0, 5);
    let outsider = std::net::Ipv4Addr::new(127, 0, 0, 9);
    let spoof = [("x-forwarded-for", "10.57.1.1"), ("x-real-ip", "10.57.1.1")];
    let status = |from, listen, headers: &[(&str, &str)]| {
        http_request_from(from, listen, "GET", "/", headers)
            .expect("request")
            .0
    };
    for listen in [a, b, c] {
        assert_eq!(
            status(outsider, listen, &spoof),
            403,
            "spoofed through {listen}"
        );
        assert_eq!(status(outsider, listen, &[]), 403);
    }
    // Trusting nginx, the client nginx saw is the one checked.
    assert_eq!(status(allowed, b, &[]), 200);
    assert_eq!(status(allowed, c, &[]), 200);
    assert_eq!(status(allowed, c, &[("x-forwarded-for", "192.0.2.1")]), 200);
    // Without trust, every call is nginx's own (127.0.0.1), which the list does not hold.
    assert_eq!(status(allowed, a, &[]), 403);
    assert_eq!(
        hits.load(Ordering::SeqCst),
        3,
        "only the allowed client got through"
    );
}

/// Quota through forward-auth alone (no nginx `limit_req`): a memquota limit of 3 per minute
/// for one host stops the 4th request with 429 and the rate limit headers, which nginx passes
/// on with the `error_page` recipe the README gives.
const QUOTA: &str = include_str!("../configs/forward_auth_quota.yaml");

#[test]
fn nginx_forward_auth_stops_the_fourth_request_with_429() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mixer = start_mixer(dir.path(), "quota.yaml", QUOTA, &[]);
    let hits = Arc::new(AtomicUsize::new(0));
    let upstream = upstream::echo_head_counted(hits.clone());
    let listen = free_addr();
    let check = nginx::check_location(mixer.http, "");
    let block = format!(
        r#"
    server {{
        listen {listen};
        location / {{
            auth_request /_mixer_check;
            auth_request_set $mixer_status $upstream_status;
            auth_request_set $mixer_retry_after $upstream_http_retry_after;
            auth_request_set $mixer_limit $upstream_http_x_ratelimit_limit;
            auth_request_set $mixer_remaining $upstream_http_x_ratelimit_remaining;
            auth_request_set $mixer_reset $upstream_http_x_ratelimit_reset;
            error_page 500 = @mixer_error;
            proxy_pass http://{upstream};
        }}
        location @mixer_error {{
            if ($mixer_status = 429) {{
                add_header Retry-After $mixer_retry_after always;
                add_header X-RateLimit-Limit $mixer_limit always;
                add_header X-RateLimit-Remaining $mixer_remaining always;
                add_header X-RateLimit-Reset $mixer_reset always;
                return 429;
            }}
            return 500;
        }}
        {check}
    }}"#
    );
    let _nginx = start_nginx(dir.path(), &[(listen, block)]);
    let host = [("host", "quota.example.com")];
    for i in 1..=3 {
        let (status, _, body) = http_request(listen, "GET", "/", &host).expect("request");
        assert_eq!(status, 200, "request {i}: {body}");
    }
    let (status, headers, _) = http_request(listen, "GET", "/", &host).expect("request");
    assert_eq!(status, 429);
    let header = |name| mixer_tests::header(&headers, name).map(str::to_string);
    assert_eq!(header("x-ratelimit-limit").as_deref(), Some("3"));
    assert_eq!(header("x-ratelimit-remaining").as_deref(), Some("0"));
    let retry: u64 = header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After in seconds");
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    assert_eq!(header("x-ratelimit-reset"), Some(retry.to_string()));
    assert_eq!(
        hits.load(Ordering::SeqCst),
        3,
        "the 4th never reached the upstream"
    );
    // Another host is not charged.
    let (status, _, _) =
        http_request(listen, "GET", "/", &[("host", "other.example.com")]).expect("request");
    assert_eq!(status, 200);
    assert!(mixer.terminate().success());
}

/// The README's nginx block is safe by construction: whichever header the mixer is told to
/// read (`--real-ip-header`), nginx wrote it, so a client that writes `X-Forwarded-For` and
/// `X-Real-IP` itself does not pass an allow-list. The mismatch the block prevents, nginx
/// setting `X-Real-IP` alone while the mixer reads `X-Forwarded-For` (the default), is run
/// beside it: there the client's own header is believed.
#[test]
fn the_readme_nginx_block_is_safe_with_either_real_ip_header() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trusting = |name: &str, header: &str| {
        start_mixer(
            dir.path(),
            name,
            IP_ALLOW_LIST,
            &["--trusted-proxies", "127.0.0.1", "--real-ip-header", header],
        )
    };
    let forwarded = trusting("forwarded.yaml", "x-forwarded-for");
    let real_ip = trusting("real-ip.yaml", "x-real-ip");
    let hits = Arc::new(AtomicUsize::new(0));
    let upstream = upstream::echo_head_counted(hits.clone());
    let (a, b, c) = (free_addr(), free_addr(), free_addr());
    let block =
        mixer_tests::readme::block("# mixer forward-auth: the client's address as nginx saw it");
    let only_real_ip = "proxy_set_header X-Real-IP $remote_addr;";
    let _nginx = start_nginx(
        dir.path(),
        &[
            (a, server(a, forwarded.http, upstream, &block)),
            (b, server(b, real_ip.http, upstream, &block)),
            (c, server(c, forwarded.http, upstream, only_real_ip)),
        ],
    );
    let allowed = std::net::Ipv4Addr::new(127, 0, 0, 5);
    let outsider = std::net::Ipv4Addr::new(127, 0, 0, 9);
    let spoof = [("x-forwarded-for", "10.57.1.1"), ("x-real-ip", "10.57.1.1")];
    let status = |from, listen, headers: &[(&str, &str)]| {
        http_request_from(from, listen, "GET", "/", headers)
            .expect("request")
            .0
    };
    for listen in [a, b] {
        assert_eq!(
            status(outsider, listen, &spoof),
            403,
            "spoofed through {listen}"
        );
        assert_eq!(status(allowed, listen, &[]), 200);
        assert_eq!(status(allowed, listen, &spoof), 200);
    }
    assert_eq!(
        status(outsider, c, &spoof),
        200,
        "the mismatched setup lets the client's own X-Forwarded-For through: the hazard the README's block prevents"
    );
}

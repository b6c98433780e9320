//! End to end: the `policies/jwt` bundle served by the real mixer, with its keys from a local
//! OIDC provider (a discovery document and a JWKS served with `Cache-Control: max-age=300`,
//! the keys being the test keys of `adapters/jwt/testdata`), through the mixer's own
//! forward-auth endpoint, a real nginx (`auth_request`) and a real Caddy (`forward_auth`):
//! the contract's cases (no token, expired, other audience, another key under a known kid,
//! valid with `x-mixer-sub`, a key published after start accepted within 5 s), and Envoy's
//! ext_authz on the same mixer (UNAUTHENTICATED with the `WWW-Authenticate` header).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mixer_tests::caddy::{self, Caddy};
use mixer_tests::nginx::{self, Nginx};
use mixer_tests::{HttpAnswer, Mixer, free_addr, header, http_request};

#[path = "support/authz.rs"]
mod authz;

const RSA_A: &str = include_str!("../../adapters/jwt/testdata/rsa-a.pem");
const RSA_B: &str = include_str!("../../adapters/jwt/testdata/rsa-b.pem");
const EC_A: &str = include_str!("../../adapters/jwt/testdata/ec-a.pem");
const EC_B: &str = include_str!("../../adapters/jwt/testdata/ec-b.pem");

fn key(pem: &str, alg: Algorithm) -> EncodingKey {
    match alg {
        Algorithm::ES256 => EncodingKey::from_ec_pem(pem.as_bytes()),
        _ => EncodingKey::from_rsa_pem(pem.as_bytes()),
    }
    .expect("test key")
}

fn jwks(keys: &[(&str, Algorithm, &str)]) -> String {
    let keys = keys
        .iter()
        .map(|(pem, alg, kid)| {
            let mut jwk = Jwk::from_encoding_key(&key(pem, *alg), *alg).expect("jwk");
            jwk.common.key_id = Some((*kid).into());
            jwk
        })
        .collect();
    serde_json::to_string(&JwkSet { keys }).expect("json")
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

/// A token by `pem` under `kid`, with the claims of a reader of `issuer`'s API, changed by
/// `changes`.
fn token(pem: &str, alg: Algorithm, kid: &str, issuer: &str, changes: serde_json::Value) -> String {
    let mut claims = serde_json::json!({
        "iss": issuer, "sub": "alice", "aud": "mixer", "scope": "read", "exp": now() + 3600,
    });
    if let (Some(c), Some(changes)) = (claims.as_object_mut(), changes.as_object()) {
        c.extend(changes.clone());
    }
    let mut h = Header::new(alg);
    h.kid = Some(kid.into());
    jsonwebtoken::encode(&h, &claims, &key(pem, alg)).expect("signed")
}

/// A local OIDC provider on a thread of its own; its JWKS can change while it runs.
fn provider(jwks: Arc<Mutex<String>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind provider");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut request_line = String::new();
            let _ = reader.read_line(&mut request_line);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
            }
            let body = if request_line.starts_with("GET /.well-known/openid-configuration ") {
                format!(r#"{{"issuer": "http://{addr}", "jwks_uri": "http://{addr}/jwks"}}"#)
            } else {
                jwks.lock().expect("jwks").clone()
            };
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                 Cache-Control: public, max-age=300\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

/// An upstream that answers 200 with the `x-mixer-sub` it was sent.
fn upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut sub = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((k, v)) = line.split_once(':')
                    && k.eq_ignore_ascii_case("x-mixer-sub")
                {
                    sub = v.trim().to_owned();
                }
            }
            let body = format!("reached the app as {sub}");
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

#[test]
fn policies_jwt_through_forward_auth_nginx_and_caddy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = Arc::new(Mutex::new(jwks(&[
        (RSA_A, Algorithm::RS256, "rs"),
        (EC_A, Algorithm::ES256, "es"),
    ])));
    let provider = provider(keys.clone());
    let issuer = format!("http://{provider}");
    let mixer = Mixer::start_with_env_and_log(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &[
            "--config",
            repo().join("policies/jwt/config").to_str().expect("utf-8"),
        ],
        &[
            ("JWKS_URL", &format!("{issuer}/jwks")),
            ("JWT_ISSUER", &issuer),
        ],
        &dir.path().join("mixer.log"),
    );
    mixer.wait_ready(Duration::from_secs(10));
    let app = upstream();

    let nginx_listen = free_addr();
    let nginx_dir = dir.path().join("nginx");
    std::fs::create_dir(&nginx_dir).expect("mkdir");
    let server = format!(
        r#"
    server {{
        listen {nginx_listen};
        location / {{
            auth_request /_mixer_check;
            auth_request_set $mixer_sub $upstream_http_x_mixer_sub;
            proxy_set_header X-Mixer-Sub $mixer_sub;
            proxy_pass http://{app};
        }}
        location = /_mixer_check {{
            internal;
            proxy_pass http://{mixer}/check;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header X-Original-URI $request_uri;
            proxy_set_header X-Original-Method $request_method;
        }}
    }}"#,
        mixer = mixer.http
    );
    let binary = nginx::binary().expect("nginx is installed (.ci/run installs it)");
    let _nginx = Nginx::start(&binary, &nginx_dir, &server, &[nginx_listen]);

    let caddy_listen = free_addr();
    let caddyfile = format!(
        "{{\n\tadmin off\n\tauto_https off\n}}\nhttp://{caddy_listen} {{\n\tforward_auth {mixer} {{\n\t\turi /check\n\t\tcopy_headers X-Mixer-Sub\n\t}}\n\treverse_proxy {app}\n}}\n",
        mixer = mixer.http
    );
    let caddy = caddy::binary().expect("caddy is installed (.ci/run installs it)");
    let _caddy = Caddy::start(&caddy, dir.path(), &caddyfile, caddy_listen);

    // Each front: the address and path a client asks.
    let fronts = [
        ("forward-auth", mixer.http, "/check"),
        ("nginx", nginx_listen, "/api/items"),
        ("caddy", caddy_listen, "/api/items"),
    ];
    let ask = |addr, path: &str, token: Option<&str>| -> HttpAnswer {
        let bearer = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![
            ("X-Forwarded-Uri", "/api/items"),
            ("X-Forwarded-Method", "GET"),
        ];
        if let Some(b) = &bearer {
            headers.push(("Authorization", b.as_str()));
        }
        http_request(addr, "GET", path, &headers).expect("request")
    };
    let refused = [
        ("no token", None),
        (
            "expired 120 s ago",
            Some(token(
                RSA_A,
                Algorithm::RS256,
                "rs",
                &issuer,
                serde_json::json!({"exp": now() - 120}),
            )),
        ),
        (
            "another audience",
            Some(token(
                EC_A,
                Algorithm::ES256,
                "es",
                &issuer,
                serde_json::json!({"aud": "billing"}),
            )),
        ),
        (
            "another key under a known kid",
            Some(token(
                RSA_B,
                Algorithm::RS256,
                "rs",
                &issuer,
                serde_json::json!({}),
            )),
        ),
    ];
    for (front, addr, path) in fronts {
        for (case, token) in &refused {
            let (status, headers, body) = ask(addr, path, token.as_deref());
            assert_eq!(status, 401, "{front}, {case}: {body}");
            let challenge = header(&headers, "www-authenticate").unwrap_or_default();
            assert!(
                challenge.starts_with("Bearer"),
                "{front}, {case}: {headers:?}"
            );
            if token.is_some() {
                assert!(
                    challenge.contains(r#"error="invalid_token""#),
                    "{front}, {case}: {challenge}"
                );
            }
        }
        for alg in [
            (RSA_A, Algorithm::RS256, "rs"),
            (EC_A, Algorithm::ES256, "es"),
        ] {
            let valid = token(alg.0, alg.1, alg.2, &issuer, serde_json::json!({}));
            let (status, headers, body) = ask(addr, path, Some(&valid));
            assert_eq!(status, 200, "{front}, {:?}: {body}", alg.1);
            if front == "forward-auth" {
                assert_eq!(
                    header(&headers, "x-mixer-sub"),
                    Some("alice"),
                    "{headers:?}"
                );
            } else {
                assert_eq!(body, "reached the app as alice", "{front}");
            }
        }
    }

    // Envoy's ext_authz: the verifier's denial with its header, and an allowed token.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut authz = AuthorizationClient::connect(format!("http://{}", mixer.grpc))
            .await
            .expect("connect");
        let expired = token(
            RSA_A,
            Algorithm::RS256,
            "rs",
            &issuer,
            serde_json::json!({"exp": now() - 120}),
        );
        let bearer = format!("Bearer {expired}");
        let denied = authz
            .check(authz::authz_request(&[("authorization", &bearer)]))
            .await
            .expect("check")
            .into_inner();
        assert_eq!(
            denied.status.as_ref().map(|s| s.code),
            Some(16),
            "{denied:?}"
        );
        let Some(HttpResponse::DeniedResponse(no)) = denied.http_response else {
            panic!("expected a denied response: {denied:?}");
        };
        assert_eq!(no.status.map(|s| s.code), Some(401));
        let challenge: Vec<&str> = no
            .headers
            .iter()
            .filter_map(|h| h.header.as_ref())
            .filter(|h| h.key.eq_ignore_ascii_case("www-authenticate"))
            .map(|h| h.value.as_str())
            .collect();
        assert!(
            challenge
                .iter()
                .any(|v| v.starts_with(r#"Bearer error="invalid_token""#)),
            "{no:?}"
        );
        let valid = token(EC_A, Algorithm::ES256, "es", &issuer, serde_json::json!({}));
        let bearer = format!("Bearer {valid}");
        let allowed = authz
            .check(authz::authz_request(&[("authorization", &bearer)]))
            .await
            .expect("check")
            .into_inner();
        assert_eq!(
            allowed.status.as_ref().map(|s| s.code),
            Some(0),
            "{allowed:?}"
        );
    });
    // Its connection closes with it, so the mixer's graceful stop does not wait for it.
    drop(runtime);

    // A key published after start, under a new kid, is accepted within 5 s without a reload,
    // although the JWKS said max-age=300.
    *keys.lock().expect("jwks") = jwks(&[
        (RSA_A, Algorithm::RS256, "rs"),
        (EC_A, Algorithm::ES256, "es"),
        (EC_B, Algorithm::ES256, "rotated"),
    ]);
    let rotated = token(
        EC_B,
        Algorithm::ES256,
        "rotated",
        &issuer,
        serde_json::json!({"sub": "carol"}),
    );
    let published = Instant::now();
    loop {
        let (status, headers, body) = ask(mixer.http, "/check", Some(&rotated));
        if status == 200 {
            assert_eq!(header(&headers, "x-mixer-sub"), Some("carol"));
            break;
        }
        assert!(
            published.elapsed() < Duration::from_secs(5),
            "the new key was not accepted within 5 s: {status} {headers:?} {body}\n{}",
            std::fs::read_to_string(dir.path().join("mixer.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for (front, addr, path) in &fronts[1..] {
        let (status, _, body) = ask(*addr, path, Some(&rotated));
        assert_eq!(
            (status, body.as_str()),
            (200, "reached the app as carol"),
            "{front}"
        );
    }
    let log = std::fs::read_to_string(dir.path().join("mixer.log")).unwrap_or_default();
    assert!(!log.contains(&rotated[..40]), "a token reached the log");
    assert!(mixer.terminate().success());
}

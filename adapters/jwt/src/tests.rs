//! The handler through its `AttributeHandler`, with tokens signed by fixed test keys
//! (`testdata/`, generated with openssl for these tests only) and, for fetched keys, a real
//! local HTTP server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mixer_adapter_api::host::AnyAdapter;
use mixer_adapter_api::{AttributeHandler, BuildContext, Generated, Handler};
use mixer_model::{Code, FieldValue, Instance, Template, Value};
use serde_json::json;

use crate::JwtAdapter;

const ISSUER: &str = "https://issuer.example";
const RSA_A: &str = include_str!("../testdata/rsa-a.pem");
const RSA_B: &str = include_str!("../testdata/rsa-b.pem");
const EC_A: &str = include_str!("../testdata/ec-a.pem");
const EC_B: &str = include_str!("../testdata/ec-b.pem");
const ED: &str = include_str!("../testdata/ed.pem");

fn encoding_key(pem: &str, alg: Algorithm) -> EncodingKey {
    match alg {
        Algorithm::ES256 | Algorithm::ES384 => EncodingKey::from_ec_pem(pem.as_bytes()),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(pem.as_bytes()),
        _ => EncodingKey::from_rsa_pem(pem.as_bytes()),
    }
    .expect("test key")
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

/// Claims of a valid token: issuer, audience `mixer`, an hour to live.
fn claims() -> serde_json::Value {
    json!({
        "iss": ISSUER, "sub": "alice", "aud": ["mixer", "other"], "azp": "web",
        "exp": now() + 3600, "iat": now(), "scope": "read write", "admin": false,
        "groups": ["dev", "ops"], "tenant": {"id": 7},
    })
}

fn sign(pem: &str, alg: Algorithm, kid: &str, claims: &serde_json::Value) -> String {
    let mut header = Header::new(alg);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, claims, &encoding_key(pem, alg)).expect("signed")
}

/// A JWKS document of the public halves of `keys` (pem, alg, kid).
fn jwks(keys: &[(&str, Algorithm, &str)]) -> String {
    let keys = keys
        .iter()
        .map(|(pem, alg, kid)| {
            let mut jwk = Jwk::from_encoding_key(&encoding_key(pem, *alg), *alg).expect("jwk");
            jwk.common.key_id = Some((*kid).into());
            // A kid starting with `any` names a key that pins no algorithm.
            if kid.starts_with("any") {
                jwk.common.key_algorithm = None;
            }
            jwk
        })
        .collect();
    serde_json::to_string(&JwkSet { keys }).expect("json")
}

fn build(params: serde_json::Value) -> Arc<dyn Handler> {
    let config = JwtAdapter.compile(&params).expect("valid params");
    let ctx = BuildContext {
        handler_name: "jwt.test".into(),
    };
    JwtAdapter.build_compiled(&config, &ctx).expect("built")
}

/// A handler with inline keys: RSA `a`, EC `e`, Ed25519 `ed`.
fn inline(extra: serde_json::Value) -> Arc<dyn Handler> {
    let mut params = json!({
        "issuer": ISSUER,
        "audiences": ["mixer"],
        "jwks": jwks(&[(RSA_A, Algorithm::RS256, "a"), (RSA_A, Algorithm::PS256, "ps"),
                       (RSA_A, Algorithm::RS512, "any-rsa"), (EC_A, Algorithm::ES256, "e"),
                       (ED, Algorithm::EdDSA, "ed")]),
    });
    if let (Some(p), Some(extra)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(extra.clone());
    }
    build(params)
}

fn instance(token: &str) -> Instance {
    Instance {
        name: "credential.test".into(),
        template: Template::Jwt,
        fields: vec![("token", FieldValue::Value(Value::from(token)))],
    }
}

async fn generate(handler: &Arc<dyn Handler>, instance: &Instance) -> Generated {
    handler
        .as_attributes()
        .expect("an attribute generator")
        .generate(instance)
        .await
        .expect("decided")
}

fn output<'a>(g: &'a Generated, name: &str) -> Option<&'a Value> {
    g.outputs.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
}

fn text(g: &Generated, name: &str) -> String {
    match output(g, name) {
        Some(Value::String(s)) => s.to_string(),
        other => panic!("{name}: {other:?}"),
    }
}

/// The denial's reason; fails when `g` is not a denial with the RFC 6750 header.
fn denied(g: &Generated) -> String {
    let denial = g
        .denial
        .as_ref()
        .unwrap_or_else(|| panic!("not denied: {g:?}"));
    assert_eq!(denial.status.code, Code::Unauthenticated);
    let header = &denial.response_headers[0];
    assert_eq!(header.name, "WWW-Authenticate");
    assert!(
        header
            .value
            .starts_with("Bearer error=\"invalid_token\", error_description=\""),
        "{}",
        header.value
    );
    assert!(g.outputs.is_empty());
    denial.status.message.clone()
}

#[tokio::test]
async fn a_valid_rs256_token_gives_its_claims() {
    let h = inline(json!({}));
    let token = sign(RSA_A, Algorithm::RS256, "a", &claims());
    let g = generate(&h, &instance(&format!("Bearer {token}"))).await;
    assert!(g.denial.is_none(), "{g:?}");
    assert_eq!(text(&g, "principal"), format!("{ISSUER}/alice"));
    assert_eq!(text(&g, "issuer"), ISSUER);
    assert_eq!(text(&g, "subject"), "alice");
    assert_eq!(text(&g, "audiences"), "mixer,other");
    assert_eq!(text(&g, "presenter"), "web");
    let Some(Value::StringMap(claims)) = output(&g, "claims") else {
        panic!("claims: {g:?}")
    };
    assert_eq!(claims.get("scope"), Some("read write"));
    assert_eq!(claims.get("admin"), Some("false"));
    assert_eq!(claims.get("groups"), Some("dev,ops"));
    assert_eq!(claims.get("tenant"), Some(r#"{"id":7}"#));
    let raw: serde_json::Value = serde_json::from_str(&text(&g, "raw_claims")).expect("JSON");
    assert_eq!(raw["sub"], "alice");
    let exp = raw["exp"].as_i64().expect("exp");
    assert_eq!(
        output(&g, "expires_at"),
        Some(&Value::Timestamp(mixer_model::Timestamp(
            exp * 1_000_000_000
        )))
    );
    let valid = g.valid_duration.expect("bounded by exp");
    assert!(valid <= Duration::from_secs(3600) && valid > Duration::from_secs(3500));
    // The same token again: from the verified tokens, the same answer.
    let again = generate(&h, &instance(&format!("Bearer {token}"))).await;
    assert_eq!(again.outputs, g.outputs);
}

#[tokio::test]
async fn es256_ps256_and_eddsa_tokens_verify() {
    let h = inline(json!({}));
    for token in [
        sign(EC_A, Algorithm::ES256, "e", &claims()),
        sign(RSA_A, Algorithm::PS256, "ps", &claims()),
        sign(RSA_A, Algorithm::RS512, "any-rsa", &claims()),
        sign(ED, Algorithm::EdDSA, "ed", &claims()),
    ] {
        let g = generate(&h, &instance(&token)).await;
        assert!(g.denial.is_none(), "{g:?}");
        assert_eq!(text(&g, "subject"), "alice");
    }
}

#[tokio::test]
async fn a_missing_token_gives_no_outputs_unless_one_is_required() {
    let h = inline(json!({}));
    assert_eq!(generate(&h, &instance("")).await, Generated::default());
    assert_eq!(
        generate(&h, &instance("Bearer ")).await,
        Generated::default()
    );
    let h = inline(json!({"requireToken": true}));
    assert!(denied(&generate(&h, &instance("")).await).contains("no bearer token"));
}

#[tokio::test]
async fn the_token_may_come_from_a_cookie() {
    let h = inline(json!({"cookie": "session"}));
    let token = sign(EC_A, Algorithm::ES256, "e", &claims());
    let i = Instance {
        name: "credential.test".into(),
        template: Template::Jwt,
        fields: vec![
            ("token", FieldValue::Value(Value::from(""))),
            (
                "cookie",
                FieldValue::Value(Value::from(format!("theme=dark; session={token}; x=1"))),
            ),
        ],
    };
    assert_eq!(text(&generate(&h, &i).await, "subject"), "alice");
}

#[tokio::test]
async fn malformed_and_oversized_tokens_are_denied() {
    let h = inline(json!({}));
    for bad in ["abc", "a.b.c", "Bearer ..", "eyJhbGciOiJSUzI1NiJ9.e30"] {
        let reason = denied(&generate(&h, &instance(bad)).await);
        assert!(reason.contains("malformed"), "{bad}: {reason}");
    }
    let huge = "a".repeat(crate::MAX_TOKEN + 1);
    assert!(denied(&generate(&h, &instance(&huge)).await).contains("longer than 16384"));
}

#[tokio::test]
async fn alg_none_is_denied() {
    let h = inline(json!({}));
    use base64::Engine;
    let b64 = |v: serde_json::Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let token = format!(
        "{}.{}.",
        b64(json!({"alg": "none", "typ": "JWT"})),
        b64(claims())
    );
    assert!(denied(&generate(&h, &instance(&token)).await).contains("alg none"));
}

#[tokio::test]
async fn an_rsa_public_key_used_as_an_hmac_secret_is_denied() {
    // The classic confusion: HS256 "signed" with the RSA public key's PEM as the secret.
    let public_pem = {
        let jwks: serde_json::Value =
            serde_json::from_str(&jwks(&[(RSA_A, Algorithm::RS256, "a")])).expect("json");
        jwks["keys"][0]["n"].as_str().expect("n").to_owned()
    };
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("a".into());
    let forged = jsonwebtoken::encode(
        &header,
        &claims(),
        &EncodingKey::from_secret(public_pem.as_bytes()).expect("key"),
    )
    .expect("signed");
    let h = inline(json!({}));
    assert!(denied(&generate(&h, &instance(&forged)).await).contains("HS256 is not allowed"));
    // With a secret of its own, HS256 is checked against that secret only.
    let h = inline(json!({"secret": "the real secret"}));
    assert!(denied(&generate(&h, &instance(&forged)).await).contains("does not verify"));
    let honest = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims(),
        &EncodingKey::from_secret(b"the real secret").expect("key"),
    )
    .expect("signed");
    assert!(generate(&h, &instance(&honest)).await.denial.is_none());
}

#[tokio::test]
async fn time_claims_are_checked_with_the_leeway() {
    let h = inline(json!({}));
    let with = |changes: serde_json::Value| {
        let mut c = claims();
        c.as_object_mut()
            .expect("object")
            .extend(changes.as_object().expect("object").clone());
        sign(RSA_A, Algorithm::RS256, "a", &c)
    };
    let expired = with(json!({"exp": now() - 120}));
    assert!(denied(&generate(&h, &instance(&expired)).await).contains("expired"));
    let within_leeway = with(json!({"exp": now() - 30}));
    let g = generate(&h, &instance(&within_leeway)).await;
    assert!(g.denial.is_none(), "{g:?}");
    assert_eq!(g.valid_duration, Some(Duration::ZERO));
    let future = with(json!({"nbf": now() + 600}));
    assert!(denied(&generate(&h, &instance(&future)).await).contains("not valid yet"));
    let mut no_exp = claims();
    no_exp.as_object_mut().expect("object").remove("exp");
    let no_exp = sign(RSA_A, Algorithm::RS256, "a", &no_exp);
    assert!(denied(&generate(&h, &instance(&no_exp)).await).contains("no exp claim"));
}

#[tokio::test]
async fn audience_issuer_kid_and_signature_are_checked() {
    let h = inline(json!({}));
    let with = |changes: serde_json::Value| {
        let mut c = claims();
        c.as_object_mut()
            .expect("object")
            .extend(changes.as_object().expect("object").clone());
        sign(RSA_A, Algorithm::RS256, "a", &c)
    };
    let other_audience = with(json!({"aud": "billing"}));
    let g = generate(&h, &instance(&other_audience)).await;
    assert!(denied(&g).contains("audience"));
    // Refused for good: the verdict may be reused.
    assert_eq!(g.valid_duration, None);
    let other_issuer = with(json!({"iss": "https://evil.example"}));
    assert!(denied(&generate(&h, &instance(&other_issuer)).await).contains("another issuer"));
    let unknown_kid = sign(RSA_A, Algorithm::RS256, "nope", &claims());
    let g = generate(&h, &instance(&unknown_kid)).await;
    assert!(denied(&g).contains("no key has kid"));
    // Not reused: the key may be published before the next request.
    assert_eq!(g.valid_duration, Some(Duration::ZERO));
    // Another key under a known kid.
    let forged = sign(RSA_B, Algorithm::RS256, "a", &claims());
    let g = generate(&h, &instance(&forged)).await;
    assert!(denied(&g).contains("does not verify"));
    assert_eq!(g.valid_duration, Some(Duration::ZERO));
    let forged = sign(EC_B, Algorithm::ES256, "e", &claims());
    assert!(denied(&generate(&h, &instance(&forged)).await).contains("does not verify"));
    // An algorithm the handler does not allow.
    let h = inline(json!({"algorithms": ["ES256"]}));
    let rs = sign(RSA_A, Algorithm::RS256, "a", &claims());
    assert!(denied(&generate(&h, &instance(&rs)).await).contains("RS256 is not allowed"));
}

#[test]
fn params_errors_are_named() {
    let errors = |params: serde_json::Value| -> Vec<String> {
        JwtAdapter
            .compile(&params)
            .map(|_| ())
            .expect_err("invalid")
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    assert!(errors(json!({}))[0].starts_with("issuer: is required"));
    let e = errors(json!({"issuer": ISSUER, "algorithms": ["HS256", "none"]}));
    assert!(
        e[0].starts_with("algorithms[0]: HS256 needs a secret"),
        "{e:?}"
    );
    assert!(
        e[1].starts_with("algorithms[1]: unknown algorithm"),
        "{e:?}"
    );
    let e = errors(json!({"issuer": ISSUER, "jwks": "{}", "leeway": "soon"}));
    assert!(e[0].starts_with("jwks: not a JWKS document"), "{e:?}");
    assert!(e[1].starts_with("leeway:"), "{e:?}");
    let e = errors(json!({"issuer": ISSUER, "jwksUri": "ftp://x"}));
    assert!(
        e[0].starts_with("jwksUri: \"ftp://x\" is not an http"),
        "{e:?}"
    );
    assert!(JwtAdapter.compile(&json!({"issuer": ISSUER})).is_ok());
}

#[test]
fn a_malicious_jwks_is_bounded() {
    let many: Vec<serde_json::Value> = (0..crate::MAX_KEYS + 1)
        .map(|i| json!({"kty": "EC", "crv": "P-256", "kid": i.to_string(), "x": "x", "y": "y"}))
        .collect();
    let body = serde_json::to_vec(&json!({ "keys": many })).expect("json");
    let e = crate::KeySet::parse(&body).expect_err("too many keys");
    assert!(e.contains("more than the 100 accepted"), "{e}");
    let huge = json!({"keys": [
        {"kty": "RSA", "kid": "big", "n": "w".repeat(16384 / 6 + 1), "e": "AQAB"},
        {"kty": "oct", "kid": "sym", "k": "c2VjcmV0"},
        {"kty": "RSA", "use": "enc", "kid": "enc", "n": "w", "e": "AQAB"},
    ]});
    let set = crate::KeySet::parse(huge.to_string().as_bytes()).expect("parsed");
    assert!(set.is_empty());
    assert!(
        set.skipped[0].contains("larger than 8192 bits"),
        "{:?}",
        set.skipped
    );
    assert!(set.skipped[1].contains("symmetric"), "{:?}", set.skipped);
    assert!(
        set.skipped[2].contains("not a signing key"),
        "{:?}",
        set.skipped
    );
    let oversized = vec![b' '; crate::MAX_DOCUMENT + 1];
    assert!(
        crate::KeySet::parse(&oversized)
            .expect_err("big")
            .contains("larger than")
    );
}

/// A local OIDC provider: discovery at `/.well-known/openid-configuration`, keys at `/jwks`
/// with `Cache-Control: max-age=300`; its keys and health can change while it runs.
struct Provider {
    url: String,
    jwks: Arc<Mutex<String>>,
    /// 0: serve; any other status: answer it.
    status: Arc<AtomicUsize>,
    /// Milliseconds the JWKS answer waits before it is sent.
    delay_ms: Arc<AtomicUsize>,
    fetches: Arc<AtomicUsize>,
}

async fn provider(initial: String) -> Provider {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let jwks = Arc::new(Mutex::new(initial));
    let status = Arc::new(AtomicUsize::new(0));
    let fetches = Arc::new(AtomicUsize::new(0));
    let delay_ms = Arc::new(AtomicUsize::new(0));
    let (j, s, f, u) = (jwks.clone(), status.clone(), fetches.clone(), url.clone());
    let d = delay_ms.clone();
    let app = axum::Router::new()
        .route(
            "/.well-known/openid-configuration",
            axum::routing::get(move || {
                let u = u.clone();
                async move { axum::Json(json!({"issuer": u, "jwks_uri": format!("{u}/jwks")})) }
            }),
        )
        .route(
            "/jwks",
            axum::routing::get(move || {
                let (j, s, f, d) = (j.clone(), s.clone(), f.clone(), d.clone());
                async move {
                    f.fetch_add(1, Ordering::SeqCst);
                    let delay = d.load(Ordering::SeqCst) as u64;
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                    match s.load(Ordering::SeqCst) {
                        0 => (
                            [(header::CACHE_CONTROL, "public, max-age=300")],
                            j.lock().expect("jwks").clone(),
                        )
                            .into_response(),
                        code => StatusCode::from_u16(code as u16)
                            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
                            .into_response(),
                    }
                }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Provider {
        url,
        jwks,
        status,
        delay_ms,
        fetches,
    }
}

fn discovered(p: &Provider) -> Arc<dyn Handler> {
    build(json!({"issuer": p.url, "audiences": ["mixer"], "fetchTimeout": "2s"}))
}

fn claims_of(issuer: &str) -> serde_json::Value {
    let mut c = claims();
    c["iss"] = json!(issuer);
    c
}

#[tokio::test]
async fn keys_from_discovery_rotate_on_an_unknown_kid_at_most_once_a_second() {
    let p = provider(jwks(&[(RSA_A, Algorithm::RS256, "a")])).await;
    let h = discovered(&p);
    let a = sign(RSA_A, Algorithm::RS256, "a", &claims_of(&p.url));
    assert!(generate(&h, &instance(&a)).await.denial.is_none());
    // A new key published after start, under a new kid: accepted without a reload, although
    // the keys fetched before said max-age=300.
    *p.jwks.lock().expect("jwks") = jwks(&[
        (RSA_A, Algorithm::RS256, "a"),
        (EC_A, Algorithm::ES256, "new"),
    ]);
    tokio::time::sleep(crate::UNKNOWN_KID_INTERVAL).await;
    let new = sign(EC_A, Algorithm::ES256, "new", &claims_of(&p.url));
    let g = generate(&h, &instance(&new)).await;
    assert!(g.denial.is_none(), "{g:?}");
    // A flood of made-up kids costs the provider at most a fetch a second.
    let bogus: Vec<String> = (0..50)
        .map(|i| {
            sign(
                EC_B,
                Algorithm::ES256,
                &format!("bogus-{i}"),
                &claims_of(&p.url),
            )
        })
        .collect();
    let before = p.fetches.load(Ordering::SeqCst);
    let started = std::time::Instant::now();
    for token in &bogus {
        assert!(denied(&generate(&h, &instance(token)).await).contains("no key has kid"));
    }
    let seconds = started.elapsed().as_secs() as usize;
    let fetched = p.fetches.load(Ordering::SeqCst) - before;
    assert!(fetched <= seconds + 1, "{fetched} fetches in {seconds}s");
}

#[tokio::test]
async fn a_provider_that_is_down_leaves_the_fetched_keys_in_use() {
    let p = provider(jwks(&[(RSA_A, Algorithm::RS256, "a")])).await;
    let h = discovered(&p);
    let a = sign(RSA_A, Algorithm::RS256, "a", &claims_of(&p.url));
    assert!(generate(&h, &instance(&a)).await.denial.is_none());
    p.status.store(503, Ordering::SeqCst);
    tokio::time::sleep(crate::UNKNOWN_KID_INTERVAL).await;
    // An unknown kid makes it ask, and fail; a fresh token under the known kid still verifies.
    let unknown = sign(EC_A, Algorithm::ES256, "new", &claims_of(&p.url));
    assert!(denied(&generate(&h, &instance(&unknown)).await).contains("no key has kid"));
    let mut c = claims_of(&p.url);
    c["sub"] = json!("bob");
    let fresh = sign(RSA_A, Algorithm::RS256, "a", &c);
    assert_eq!(
        text(&generate(&h, &instance(&fresh)).await, "subject"),
        "bob"
    );
}

#[tokio::test]
async fn no_keys_at_all_is_an_error_for_the_fail_policy() {
    let p = provider(String::new()).await;
    p.status.store(500, Ordering::SeqCst);
    let h = build(json!({"issuer": ISSUER, "jwksUri": format!("{}/jwks", p.url)}));
    let token = sign(RSA_A, Algorithm::RS256, "a", &claims());
    let e = h
        .as_attributes()
        .expect("generator")
        .generate(&instance(&token))
        .await
        .expect_err("no keys");
    assert_eq!(e.kind, mixer_adapter_api::ErrorKind::Unavailable);
    assert!(e.message.contains("no verification keys"), "{e}");
    assert!(!e.message.contains(&token));
}

#[tokio::test]
async fn a_huge_jwks_response_is_refused() {
    let padding = " ".repeat(crate::MAX_DOCUMENT);
    let p = provider(format!(
        "{}{padding}",
        jwks(&[(RSA_A, Algorithm::RS256, "a")])
    ))
    .await;
    let h = build(json!({"issuer": ISSUER, "jwksUri": format!("{}/jwks", p.url)}));
    let token = sign(RSA_A, Algorithm::RS256, "a", &claims());
    let e = h
        .as_attributes()
        .expect("generator")
        .generate(&instance(&token))
        .await
        .expect_err("no keys");
    assert!(e.message.contains("larger than"), "{e}");
}

#[tokio::test]
async fn the_adapter_conforms() {
    let params = json!({"issuer": ISSUER, "jwks": jwks(&[(EC_A, Algorithm::ES256, "e")])});
    let report = mixer_adapter_api::testkit::assert_adapter_conforms(JwtAdapter, params).await;
    assert!(report.holds());
}

#[tokio::test]
async fn a_slow_provider_is_cut_off_at_the_fetch_timeout_and_the_keys_stay() {
    let p = provider(jwks(&[(RSA_A, Algorithm::RS256, "a")])).await;
    let h = build(json!({"issuer": p.url, "audiences": ["mixer"], "fetchTimeout": "300ms"}));
    let a = sign(RSA_A, Algorithm::RS256, "a", &claims_of(&p.url));
    assert!(generate(&h, &instance(&a)).await.denial.is_none());
    p.delay_ms.store(3_000, Ordering::SeqCst);
    tokio::time::sleep(crate::UNKNOWN_KID_INTERVAL).await;
    let unknown = sign(EC_A, Algorithm::ES256, "new", &claims_of(&p.url));
    let asked = std::time::Instant::now();
    assert!(denied(&generate(&h, &instance(&unknown)).await).contains("no key has kid"));
    // Bounded by the fetch timeout, not by the provider.
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    let mut c = claims_of(&p.url);
    c["sub"] = json!("bob");
    let fresh = sign(RSA_A, Algorithm::RS256, "a", &c);
    assert_eq!(
        text(&generate(&h, &instance(&fresh)).await, "subject"),
        "bob"
    );
}

#[tokio::test]
async fn verified_tokens_are_remembered_by_the_size_of_their_claims() {
    let handler = |verified_tokens: u64| {
        let params: crate::JwtParams = serde_json::from_value(json!({
            "issuer": ISSUER,
            "jwks": jwks(&[(EC_A, Algorithm::ES256, "e")]),
            "verifiedTokens": verified_tokens,
        }))
        .expect("params");
        let config = params.compile().expect("valid");
        let ctx = BuildContext {
            handler_name: "jwt.test".into(),
        };
        JwtAdapter.build_handler(&config, &ctx).expect("built")
    };
    let small = sign(EC_A, Algorithm::ES256, "e", &claims());
    let mut big = claims();
    big["padding"] = json!("x".repeat(6 * 1024));
    let big = sign(EC_A, Algorithm::ES256, "e", &big);
    let h = handler(32);
    assert!(
        h.generate(&instance(&small))
            .await
            .expect("decided")
            .denial
            .is_none()
    );
    assert_eq!(h.remembered_kib(), 1);
    // About 6 KiB of claims, held twice (claims and raw claims): 13 KiB.
    assert!(
        h.generate(&instance(&big))
            .await
            .expect("decided")
            .denial
            .is_none()
    );
    assert_eq!(h.remembered_kib(), 14);
    // More than the whole bound: checked every time rather than held.
    let h = handler(8);
    assert!(
        h.generate(&instance(&big))
            .await
            .expect("decided")
            .denial
            .is_none()
    );
    assert_eq!(h.remembered_kib(), 0);
}

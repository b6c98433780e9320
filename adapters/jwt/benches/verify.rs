//! `generate` of the jwt handler with its keys in memory, for an ES256 and an RS256 token:
//! a token seen for the first time (the signature checked: the verified-token memory is off)
//! and a repeated token (answered from that memory), beside a baseline in the same run:
//! decoding the token's header only, the least any check of a token does (split, base64,
//! JSON), with no signature and no claims.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mixer_adapter_api::host::AnyAdapter;
use mixer_adapter_api::{BuildContext, Handler};
use mixer_adapter_jwt::JwtAdapter;
use mixer_model::{FieldValue, Instance, Template, Value};

const ISSUER: &str = "https://issuer.example";

fn key(alg: Algorithm) -> EncodingKey {
    match alg {
        Algorithm::ES256 => {
            EncodingKey::from_ec_pem(include_bytes!("../testdata/ec-a.pem")).expect("key")
        }
        _ => EncodingKey::from_rsa_pem(include_bytes!("../testdata/rsa-a.pem")).expect("key"),
    }
}

fn handler(verified_tokens: u64) -> Arc<dyn Handler> {
    let jwk = |alg, kid: &str| {
        let mut jwk = Jwk::from_encoding_key(&key(alg), alg).expect("jwk");
        jwk.common.key_id = Some(kid.into());
        jwk
    };
    let jwks = JwkSet {
        keys: vec![jwk(Algorithm::RS256, "rs"), jwk(Algorithm::ES256, "es")],
    };
    let params = serde_json::json!({
        "issuer": ISSUER,
        "audiences": ["mixer"],
        "jwks": serde_json::to_string(&jwks).expect("json"),
        "verifiedTokens": verified_tokens,
    });
    let config = JwtAdapter.compile(&params).expect("params");
    let ctx = BuildContext {
        handler_name: "jwt.bench".into(),
    };
    JwtAdapter.build_compiled(&config, &ctx).expect("handler")
}

fn token(alg: Algorithm, kid: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let claims = serde_json::json!({
        "iss": ISSUER, "sub": "alice", "aud": "mixer", "exp": now + 86_400, "iat": now,
        "scope": "read write", "groups": ["dev", "ops"],
    });
    let mut header = Header::new(alg);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, &claims, &key(alg)).expect("token")
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let fresh = handler(0);
    let remembered = handler(10_000);
    for (name, alg, kid) in [
        ("es256", Algorithm::ES256, "es"),
        ("rs256", Algorithm::RS256, "rs"),
    ] {
        let token = token(alg, kid);
        let instance = Instance {
            name: "credential.bench".into(),
            template: Template::Jwt,
            fields: vec![(
                "token",
                FieldValue::Value(Value::from(format!("Bearer {token}"))),
            )],
        };
        c.bench_function(&format!("baseline_decode_header/{name}"), |b| {
            b.iter(|| jsonwebtoken::decode_header(black_box(&token)).expect("header"))
        });
        for (kind, h) in [("verify", &fresh), ("repeat", &remembered)] {
            let generator = h.as_attributes().expect("generator");
            let answer = rt
                .block_on(generator.generate(&instance))
                .expect("generated");
            assert!(answer.denial.is_none(), "{answer:?}");
            c.bench_function(&format!("generate_{kind}/{name}"), |b| {
                b.iter(|| rt.block_on(generator.generate(black_box(&instance))))
            });
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);

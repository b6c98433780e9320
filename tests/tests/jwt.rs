//! The built-in `jwt` adapter as a user meets it through the real binary: `mixer validate`
//! reports its params' problems at their paths, and takes a handler whose keys come from the
//! environment (`${JWKS_URL}`) without fetching them.

use std::process::Command;

fn validate(config: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("jwt.yaml"), config).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_mixer-under-test"))
        .arg("validate")
        .arg(dir.path())
        // Only what the case gives (.ci/run exports both for the policy bundles).
        .env_remove("JWKS_URL")
        .env_remove("JWT_ISSUER")
        .envs(env.iter().copied())
        .output()
        .expect("run");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), said)
}

#[test]
fn validate_names_each_bad_jwt_param_at_its_path() {
    let (code, said) = validate(
        r#"
kind: handler
metadata: {name: tokens, namespace: istio-system}
spec:
  compiledAdapter: jwt
  params:
    audiences: [mixer]
    algorithms: [HS256, none]
    leeway: soon
"#,
        &[],
    );
    assert_eq!(code, Some(1), "{said}");
    for error in [
        "jwt.yaml: handler tokens: spec.params.issuer: is required",
        "jwt.yaml: handler tokens: spec.params.algorithms[0]: HS256 needs a secret",
        "jwt.yaml: handler tokens: spec.params.algorithms[1]: unknown algorithm \"none\"",
        "jwt.yaml: handler tokens: spec.params.leeway: \"soon\" is not a duration",
    ] {
        assert!(said.contains(error), "{error}\n{said}");
    }
}

#[test]
fn validate_takes_a_jwks_url_from_the_environment_without_fetching_it() {
    let config = r#"
kind: handler
metadata: {name: tokens, namespace: istio-system}
spec:
  compiledAdapter: jwt
  params:
    issuer: ${JWT_ISSUER}
    jwksUri: ${JWKS_URL}
    audiences: [mixer]
    algorithms: [RS256, ES256]
"#;
    // Port 9 (discard) on loopback: nothing answers there, and nothing needs to.
    let env = [
        ("JWKS_URL", "http://127.0.0.1:9/jwks"),
        ("JWT_ISSUER", "http://127.0.0.1:9"),
    ];
    let (code, said) = validate(config, &env);
    assert_eq!(code, Some(0), "{said}");
    let (code, said) = validate(config, &[("JWT_ISSUER", "http://127.0.0.1:9")]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("JWKS_URL is not set"), "{said}");
}

//! Secrets in handler params stay out of `/config_dump`, `/readyz`, `mixer validate` and the
//! log, for every adapter whose params can hold one (redisquota, otlp, listchecker, an
//! out-of-process adapter's params and its OAuth settings); and secrets can come from the
//! environment (`${NAME}`) and from files (`passwordFile`), re-read at every reload (a real
//! Redis with `requirepass` whose password is rotated).
//!
//! Adapters without a secret-bearing param (denier, noop, memquota, prometheus, stdio) are
//! shown as written; `mixer_adapter_api::secrets` still hides a param named like a secret.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use mixer_tests::{Mixer, free_addr, http_request};

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

/// `text` shows none of `secrets`.
fn assert_hidden(what: &str, text: &str, secrets: &[&str]) {
    for s in secrets {
        assert!(!text.contains(s), "{what} shows the secret {s:?}:\n{text}");
    }
}

const QUOTA_RULE: &str = r#"
---
kind: instance
metadata: {name: rq}
spec:
  compiledTemplate: quota
  params:
    dimensions: {path: request.path | "/"}
---
kind: rule
metadata: {name: quota}
spec:
  actions: [{handler: redis, instances: [rq]}]
"#;

fn redis_handler(name: &str, params: &str) -> String {
    format!(
        r#"
kind: handler
metadata: {{name: {name}}}
spec:
  compiledAdapter: redisquota
  params:
{params}
    callTimeout: 2s
    quotas:
    - {{name: rq.instance.istio-system, maxAmount: 2, validDuration: 60s}}
"#
    )
}

fn wait_for(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn config_dump_and_log_hide_every_adapters_secrets() {
    let dir = tempfile::tempdir().expect("temp dir");
    let secret_file = dir.path().join("redis-password");
    std::fs::write(&secret_file, "file-secret-2\n").expect("write");
    let client_secret = dir.path().join("client-secret");
    std::fs::write(&client_secret, "oauth-client-secret-9\n").expect("write");
    let unused = free_addr();
    let mut config = redis_handler(
        "redis",
        &format!("    redisServerUrl: 'redis://:url-secret-1@{unused}'"),
    );
    config += "---";
    config += &redis_handler(
        "redisfromfile",
        &format!(
            "    redisServerUrl: '{unused}'\n    passwordFile: '{}'",
            secret_file.display()
        ),
    );
    config += QUOTA_RULE;
    config += &format!(
        r#"---
kind: handler
metadata: {{name: telemetry}}
spec:
  compiledAdapter: otlp
  params:
    endpoint: 'http://{unused}'
    headers:
      authorization: 'Bearer ${{MIXER_TEST_OTLP_TOKEN}}'
      x-api-key: inline-secret-4
      x-tenant: blue
      x-honeycomb-team: vendor-secret-11
      ocp-apim-subscription-key: vendor-secret-12
      x-functions-key: vendor-secret-13
      x-auth-key: vendor-secret-14
---
kind: handler
metadata: {{name: remote}}
spec:
  adapter: myadapter
  params:
    password: oop-secret-5
    nested: {{apiKey: oop-secret-6, region: eu}}
    backend: 'redis://:oop-secret-7@cache:6379'
  connection:
    address: '{unused}'
    authentication:
      tls:
        oauth:
          clientId: mixer
          clientSecret: '{}'
          tokenUrl: 'https://127.0.0.1:{}/token'
          endpointParams: {{client_assertion: oauth-secret-8}}
"#,
        client_secret.display(),
        unused.port()
    );
    let config_file = dir.path().join("config.yaml");
    std::fs::write(&config_file, &config).expect("write config");
    let secrets = [
        "url-secret-1",
        "file-secret-2",
        "env-secret-3",
        "inline-secret-4",
        "oop-secret-5",
        "oop-secret-6",
        "oop-secret-7",
        "oauth-secret-8",
        "oauth-client-secret-9",
        "vendor-secret-11",
        "vendor-secret-12",
        "vendor-secret-13",
        "vendor-secret-14",
    ];
    let env = [("MIXER_TEST_OTLP_TOKEN", "env-secret-3")];

    let out = Command::new(binary())
        .arg("validate")
        .arg(&config_file)
        .envs(env)
        .output()
        .expect("run mixer validate");
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{shown}");
    assert_hidden("mixer validate", &shown, &secrets);

    let log = dir.path().join("mixer.log");
    let config_arg = config_file.display().to_string();
    let mixer = Mixer::start_with_env_and_log(binary(), &["--config", &config_arg], &env, &log);
    mixer.wait_ready(Duration::from_secs(20));
    let (status, _, dump) = http_request(mixer.admin, "GET", "/config_dump", &[]).expect("dump");
    assert_eq!(status, 200, "{dump}");
    assert_hidden("/config_dump", &dump, &secrets);
    let dump: serde_json::Value = serde_json::from_str(&dump).expect("json");
    let handler = |name: &str| {
        dump["config"]["handlers"]
            .as_array()
            .expect("handlers")
            .iter()
            .find(|h| h["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no handler {name} in {dump}"))
    };
    let redis = handler("redis.handler.istio-system");
    assert_eq!(
        redis["params"]["redisServerUrl"],
        format!("redis://:***@{unused}")
    );
    let from_file = handler("redisfromfile.handler.istio-system");
    assert_eq!(from_file["params"]["password"], "***");
    let otlp = handler("telemetry.handler.istio-system");
    // Every header value hidden, whatever its name; one from the environment shown as
    // written.
    assert_eq!(
        otlp["params"]["headers"],
        serde_json::json!({
            "authorization": "Bearer ${MIXER_TEST_OTLP_TOKEN}",
            "x-api-key": "***",
            "x-tenant": "***",
            "x-honeycomb-team": "***",
            "ocp-apim-subscription-key": "***",
            "x-functions-key": "***",
            "x-auth-key": "***",
        })
    );
    let remote = handler("remote.handler.istio-system");
    assert_eq!(
        remote["params"],
        serde_json::json!({
            "password": "***",
            "nested": {"apiKey": "***", "region": "eu"},
            "backend": "redis://:***@cache:6379",
        })
    );
    let oauth = &remote["connection"]["authentication"]["tls"]["oauth"];
    assert_eq!(oauth["endpointParams"]["client_assertion"], "(set)");
    assert_eq!(oauth["clientSecret"], client_secret.display().to_string());
    let (_, _, ready) = http_request(mixer.admin, "GET", "/readyz", &[]).expect("readyz");
    assert_hidden("/readyz", &ready, &secrets);
    drop(mixer);
    let log = std::fs::read_to_string(&log).expect("read log");
    assert_hidden("the log", &log, &secrets);
}

/// One invalid config per adapter whose params hold a secret: `mixer validate` names the
/// file and field and shows no secret.
#[test]
fn errors_name_the_field_without_the_secret() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("missing-password-file");
    let cases: Vec<(&str, String, &str, &str)> = vec![
        (
            "redisquota-url",
            redis_handler("redis", "    redisServerUrl: 'redis://:hunter2-a@127.0.0.1:notaport'")
                + QUOTA_RULE,
            "spec.params.redisServerUrl: invalid redis address \"redis://:***@127.0.0.1:notaport\"",
            "hunter2-a",
        ),
        (
            "redisquota-passwordfile",
            redis_handler(
                "redis",
                &format!(
                    "    redisServerUrl: '127.0.0.1:1'\n    passwordFile: '{}'",
                    missing.display()
                ),
            ) + QUOTA_RULE,
            "spec.params.passwordFile: cannot read",
            "never-shown",
        ),
        (
            "redisquota-both",
            redis_handler(
                "redis",
                "    redisServerUrl: '127.0.0.1:1'\n    password: inline-b\n    passwordFile: /x",
            ) + QUOTA_RULE,
            "spec.params.passwordFile: give password or passwordFile, not both",
            "inline-b",
        ),
        (
            "redisquota-env",
            redis_handler("redis", "    redisServerUrl: 'redis://:${MIXER_TEST_UNSET_VARIABLE}@h:1'")
                + QUOTA_RULE,
            "spec.params.redisServerUrl: environment variable MIXER_TEST_UNSET_VARIABLE is not set",
            "never-shown",
        ),
        (
            "otlp-endpoint",
            "kind: handler\nmetadata: {name: t}\nspec:\n  compiledAdapter: otlp\n  params:\n    endpoint: 'ftp://user:otlp-c@127.0.0.1:1'\n    headers: {authorization: Bearer otlp-header-c}\n".to_string(),
            "spec.params.endpoint: \"ftp://user:***@127.0.0.1:1\" must start with http://",
            "otlp-c",
        ),
        (
            "otlp-endpoint-query",
            "kind: handler\nmetadata: {name: t}\nspec:\n  compiledAdapter: otlp\n  params:\n    endpoint: 'ftp://127.0.0.1:1/v1?api_key=otlp-query-f'\n".to_string(),
            "spec.params.endpoint: \"ftp://127.0.0.1:1/v1?api_key=***\" must start with http://",
            "otlp-query-f",
        ),
        (
            "listchecker-provider",
            "kind: handler\nmetadata: {name: l}\nspec:\n  compiledAdapter: listchecker\n  params:\n    providerUrl: 'http://user:list-d@127.0.0.1:1/list'\n".to_string(),
            "spec.params.providerUrl",
            "list-d",
        ),
        (
            "oauth-token-url",
            format!(
                "kind: handler\nmetadata: {{name: r}}\nspec:\n  adapter: a\n  connection:\n    address: '127.0.0.1:1'\n    authentication:\n      tls:\n        oauth: {{clientId: m, clientSecret: '{}', tokenUrl: 'https://id:oauth-e@127.0.0.1:1/t'}}\n",
                missing.display()
            ),
            "tokenUrl: \"https://id:***@127.0.0.1:1/t\" carries user information",
            "oauth-e",
        ),
    ];
    for (name, yaml, expected, secret) in cases {
        let file = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, yaml).expect("write");
        let out = Command::new(binary())
            .arg("validate")
            .arg(&file)
            .output()
            .expect("run mixer validate");
        let shown = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{name}: {shown}");
        assert!(
            shown.contains(&format!("{name}.yaml: handler ")) && shown.contains(expected),
            "{name}: expected {expected:?} in\n{shown}"
        );
        assert_hidden(name, &shown, &[secret, "otlp-header-c"]);
    }
}

/// A reload to a Redis URL the client cannot parse: `/readyz`, `/config_dump`'s `last_error`
/// and the log say why, without the password.
#[test]
fn a_refused_reload_does_not_show_the_password() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.yaml");
    let good = redis_handler("redis", "    redisServerUrl: '127.0.0.1:1'") + QUOTA_RULE;
    std::fs::write(&config, &good).expect("write");
    let log = dir.path().join("mixer.log");
    let config_arg = config.display().to_string();
    let mixer = Mixer::start_with_env_and_log(binary(), &["--config", &config_arg], &[], &log);
    mixer.wait_ready(Duration::from_secs(20));
    let bad = redis_handler(
        "redis",
        "    redisServerUrl: 'redis://:hunter2-f@127.0.0.1:notaport'",
    ) + QUOTA_RULE;
    std::fs::write(&config, bad).expect("write");
    let mut ready = String::new();
    wait_for(Duration::from_secs(10), "the reload to fail", || {
        ready = http_request(mixer.admin, "GET", "/readyz", &[])
            .map(|(_, _, b)| b)
            .unwrap_or_default();
        ready.contains("last reload failed")
    });
    assert!(ready.contains("redis://:***@127.0.0.1:notaport"), "{ready}");
    assert_hidden("/readyz", &ready, &["hunter2-f"]);
    let (_, _, dump) = http_request(mixer.admin, "GET", "/config_dump", &[]).expect("dump");
    assert!(dump.contains("redis://:***@127.0.0.1:notaport"), "{dump}");
    assert_hidden("/config_dump", &dump, &["hunter2-f"]);
    drop(mixer);
    let log = std::fs::read_to_string(&log).expect("read log");
    assert!(log.contains("redis://:***@127.0.0.1:notaport"), "{log}");
    assert_hidden("the log", &log, &["hunter2-f"]);
}

/// A reload to an otlp endpoint the adapter refuses, with a key in its query (and one in a
/// header, from the environment): `/readyz`, `/config_dump` and the log say why without the key, and the dump
/// shows the variable's name.
#[test]
fn a_refused_endpoint_does_not_show_its_query_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.yaml");
    let otlp = |endpoint: &str| {
        format!(
            "kind: handler\nmetadata: {{name: t}}\nspec:\n  compiledAdapter: otlp\n  params:\n    endpoint: '{endpoint}'\n    headers: {{x-honeycomb-team: '${{MIXER_TEST_TEAM_KEY}}'}}\n"
        )
    };
    std::fs::write(&config, otlp("http://127.0.0.1:1")).expect("write");
    let log = dir.path().join("mixer.log");
    let config_arg = config.display().to_string();
    let env = [("MIXER_TEST_TEAM_KEY", "team-key-h")];
    let mixer = Mixer::start_with_env_and_log(binary(), &["--config", &config_arg], &env, &log);
    mixer.wait_ready(Duration::from_secs(20));
    let (_, _, dump) = http_request(mixer.admin, "GET", "/config_dump", &[]).expect("dump");
    assert!(dump.contains("${MIXER_TEST_TEAM_KEY}"), "{dump}");
    // A gRPC endpoint takes no query: refused, quoted.
    std::fs::write(&config, otlp("http://127.0.0.1:1?api_key=query-key-g")).expect("write");
    let mut ready = String::new();
    wait_for(Duration::from_secs(10), "the reload to fail", || {
        ready = http_request(mixer.admin, "GET", "/readyz", &[])
            .map(|(_, _, b)| b)
            .unwrap_or_default();
        ready.contains("last reload failed")
    });
    assert!(ready.contains("http://127.0.0.1:1?api_key=***"), "{ready}");
    let (_, _, dump) = http_request(mixer.admin, "GET", "/config_dump", &[]).expect("dump");
    let secrets = ["query-key-g", "team-key-h"];
    assert_hidden("/readyz", &ready, &secrets);
    assert_hidden("/config_dump", &dump, &secrets);
    drop(mixer);
    let log = std::fs::read_to_string(&log).expect("read log");
    assert!(log.contains("api_key=***"), "{log}");
    assert_hidden("the log", &log, &secrets);
}

fn redis_cli(port: u16, password: Option<&str>, args: &[&str]) {
    let mut command = Command::new("redis-cli");
    command.args(["-p", &port.to_string()]);
    if let Some(pw) = password {
        command.env("REDISCLI_AUTH", pw);
    }
    let out = command
        .args(args)
        .output()
        .expect("redis-cli is installed with redis-server");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && !said.contains("ERR") && !said.contains("NOAUTH"),
        "redis-cli {args:?}: {out:?}"
    );
}

/// Status of a forward-auth check; the quota (2 a minute, in Redis) answers 429 from the
/// third one, while a Redis the mixer cannot log in to lets every check through (fail open).
fn check(mixer: &Mixer) -> u16 {
    http_request(mixer.http, "GET", "/check", &[("x-original-uri", "/app")])
        .expect("check")
        .0
}

#[test]
fn passwords_from_the_environment_and_from_files_reach_redis_and_reload() {
    let redis = mixer_tests::redis::Redis::start();
    redis_cli(
        redis.port,
        None,
        &["CONFIG", "SET", "requirepass", "first-pw"],
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.yaml");
    let port = redis.port;
    std::fs::write(
        &config,
        redis_handler(
            "redis",
            &format!("    redisServerUrl: 'redis://:${{MIXER_TEST_REDIS_PW}}@127.0.0.1:{port}'"),
        ) + QUOTA_RULE,
    )
    .expect("write");
    let log = dir.path().join("mixer.log");
    let config_arg = config.display().to_string();
    let mixer = Mixer::start_with_env_and_log(
        binary(),
        &["--config", &config_arg],
        &[("MIXER_TEST_REDIS_PW", "first-pw")],
        &log,
    );
    mixer.wait_ready(Duration::from_secs(20));
    let answers: Vec<u16> = (0..3).map(|_| check(&mixer)).collect();
    assert_eq!(
        answers,
        [200, 200, 429],
        "the environment's password logs in"
    );

    // The password moves to a file; then it is rotated: the file is re-read at the reload.
    let password_file = dir.path().join("redis-password");
    std::fs::write(&password_file, "second-pw\n").expect("write");
    redis_cli(
        port,
        Some("first-pw"),
        &["CONFIG", "SET", "requirepass", "second-pw"],
    );
    let with_file = redis_handler(
        "redis",
        &format!(
            "    redisServerUrl: '127.0.0.1:{port}'\n    passwordFile: '{}'",
            password_file.display()
        ),
    ) + QUOTA_RULE;
    std::fs::write(&config, &with_file).expect("write");
    wait_for(
        Duration::from_secs(10),
        "the file's password to log in",
        || check(&mixer) == 429,
    );
    redis_cli(
        port,
        Some("second-pw"),
        &["CONFIG", "SET", "requirepass", "third-pw"],
    );
    std::fs::write(&password_file, "third-pw\n").expect("write");
    // Connections logged in before stay logged in: close them, so the old password has to
    // log in again, and fails (checks fail open) until the reload reads the file again.
    redis_cli(
        port,
        Some("third-pw"),
        &["CLIENT", "KILL", "TYPE", "normal"],
    );
    // The file is part of the config: its change alone reloads it (no touch of the config).
    wait_for(
        Duration::from_secs(10),
        "the rotated password to log in",
        || check(&mixer) == 429,
    );
    let (_, _, dump) = http_request(mixer.admin, "GET", "/config_dump", &[]).expect("dump");
    let dump_json: serde_json::Value = serde_json::from_str(&dump).expect("json");
    let inputs = dump_json["input_files"].as_array().expect("input files");
    assert!(
        inputs
            .iter()
            .any(|i| i["secret"] == true && i["sha256"].is_null()),
        "the password file is listed without its digest: {inputs:?}"
    );
    assert_hidden(
        "/config_dump",
        &dump,
        &["first-pw", "second-pw", "third-pw"],
    );
    drop(mixer);
    let log = std::fs::read_to_string(&log).expect("read log");
    assert_hidden("the log", &log, &["first-pw", "second-pw", "third-pw"]);
}

/// A real out-of-process adapter (the allowlist example) refuses its params at config load
/// with a message that quotes one of them, which holds a secret (a URL's password): the
/// refusal reaches `/readyz` and the log without the secret.
#[test]
fn an_adapters_refusal_does_not_show_the_secret_it_quotes() {
    let addr = free_addr();
    let mut adapter = Command::new(env!("CARGO_BIN_EXE_allowlist-under-test"))
        .arg(addr.to_string())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start the allowlist adapter");
    wait_for(Duration::from_secs(20), "the adapter to listen", || {
        std::net::TcpStream::connect(addr).is_ok()
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.yaml");
    // The adapter says "file: PATH: No such file": PATH is a URL whose password is the
    // secret (the allowlist's params are strict, so no secret-named key can ride along).
    std::fs::write(
        &config,
        format!(
            r#"
kind: handler
metadata: {{name: allowlist}}
spec:
  adapter: allowlist
  connection: {{address: '{addr}', timeout: 2s}}
  params:
    file: https://reader:oop-token-g@lists.example/allowed.txt
---
kind: instance
metadata: {{name: user}}
spec:
  compiledTemplate: listentry
  params: {{value: 'request.headers["x-user"] | ""'}}
---
kind: rule
metadata: {{name: allowed-users-only}}
spec:
  actions: [{{handler: allowlist, instances: [user]}}]
"#
        ),
    )
    .expect("write");
    let log = dir.path().join("mixer.log");
    let config_arg = config.display().to_string();
    let mixer = Mixer::start_with_env_and_log(binary(), &["--config", &config_arg], &[], &log);
    let mut ready = String::new();
    wait_for(Duration::from_secs(20), "the adapter's refusal", || {
        ready = http_request(mixer.admin, "GET", "/readyz", &[])
            .map(|(_, _, b)| b)
            .unwrap_or_default();
        ready.contains("rejected its params")
    });
    assert!(
        ready.contains("file: https://reader:***@lists.example/allowed.txt"),
        "{ready}"
    );
    assert_hidden("/readyz", &ready, &["oop-token-g"]);
    drop(mixer);
    let _ = adapter.kill();
    let _ = adapter.wait();
    let log = std::fs::read_to_string(&log).expect("read log");
    assert_hidden("the log", &log, &["oop-token-g"]);
}

/// A denial built from params that hold a value from the environment: the client's answer
/// (forward-auth body) carries no secret, and the dump shows the variable's name.
#[test]
fn a_denial_sent_to_a_client_carries_no_secret() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        r#"
kind: handler
metadata: {name: deny}
spec:
  compiledAdapter: denier
  params: {status: {code: 7, message: "denied for tenant ${MIXER_TEST_DENY_KEY}"}}
---
kind: instance
metadata: {name: nothing}
spec: {compiledTemplate: checknothing}
---
kind: rule
metadata: {name: deny-all}
spec:
  actions: [{handler: deny, instances: [nothing]}]
"#,
    )
    .expect("write");
    let log = dir.path().join("mixer.log");
    let config_arg = config.display().to_string();
    let env = [("MIXER_TEST_DENY_KEY", "deny-key-i")];
    let mixer = Mixer::start_with_env_and_log(binary(), &["--config", &config_arg], &env, &log);
    mixer.wait_ready(Duration::from_secs(20));
    let (status, _, body) = http_request(mixer.http, "GET", "/check", &[]).expect("check");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("denied for tenant ***"), "{body}");
    assert_hidden("the denial", &body, &["deny-key-i"]);
    let (_, _, dump) = http_request(mixer.admin, "GET", "/config_dump", &[]).expect("dump");
    assert!(
        dump.contains("denied for tenant ${MIXER_TEST_DENY_KEY}"),
        "{dump}"
    );
    assert_hidden("/config_dump", &dump, &["deny-key-i"]);
}

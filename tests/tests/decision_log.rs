//! The decision log through the real binary: forward-auth answers carry the decision's id in
//! `x-mixer-decision-id`, served with `policies/decision-log` beside other rules the mixer
//! writes each decision to its stdout as a JSON line with that id and the deciding rule, a
//! bearer token the request carried is never written, and the mixer's own JSON log lines
//! about the request carry the id in their span.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use mixer_tests::{free_addr, header, http_request};

/// The token the requests carry; it must appear nowhere in what the mixer writes.
const TOKEN: &str = "s3cr3t-t0ken-f0r-the-log";

/// Beside the bundles: a rule that reads the authorization header, so that the decisions
/// depend on it and the log has it to mask.
const TOKEN_RULE: &str = r#"apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: deny-revoked-token, namespace: istio-system}
spec:
  match: (request.headers["authorization"] | "") == "Bearer revoked"
  actions:
  - handler: deny-by-header
    instances: [denyrequest]
"#;

fn bundle_file(bundle: &str, file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../policies")
        .join(bundle)
        .join("config")
        .join(file)
}

/// A `mixer serve` whose stdout is read line by line and whose log goes to a file.
struct Served {
    child: Child,
    stdout: Receiver<String>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn forward_auth_decisions_carry_their_id_and_are_logged_as_json_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).expect("config dir");
    for (bundle, file) in [
        ("default", "default.yaml"),
        ("decision-log", "decision-log.yaml"),
    ] {
        std::fs::copy(bundle_file(bundle, file), config.join(file)).expect("copy the bundle");
    }
    std::fs::write(config.join("token.yaml"), TOKEN_RULE).expect("write the token rule");
    let log = dir.path().join("mixer.log");
    let (http, admin) = (free_addr(), free_addr());
    let mut child = Command::new(env!("CARGO_BIN_EXE_mixer-under-test"))
        .arg("serve")
        .args(["--grpc-addr", &free_addr().to_string()])
        .args(["--http-addr", &http.to_string()])
        .args(["--admin-addr", &admin.to_string()])
        .args(["--config", config.to_str().expect("utf-8")])
        .args(["--log-format", "json"])
        .args(["--log-level", "mixer_frontends=debug,info"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("start the mixer");
    let out = child.stdout.take().expect("piped stdout");
    let (tx, stdout) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let served = Served { child, stdout };
    let start = Instant::now();
    while !matches!(http_request(admin, "GET", "/readyz", &[]), Ok((200, _, _))) {
        assert!(start.elapsed() < Duration::from_secs(20), "mixer not ready");
        std::thread::sleep(Duration::from_millis(20));
    }

    let bearer = format!("Bearer {TOKEN}");
    let (status, headers, _) = http_request(
        http,
        "GET",
        "/check",
        &[("x-user", "bob"), ("authorization", &bearer)],
    )
    .expect("allowed request");
    assert_eq!(status, 200);
    let allowed = header(&headers, "x-mixer-decision-id")
        .expect("the 200 carries its decision id")
        .to_string();
    let (status, headers, _) = http_request(
        http,
        "GET",
        "/check",
        &[("x-mixer-deny", "true"), ("authorization", &bearer)],
    )
    .expect("denied request");
    assert_eq!(status, 403);
    let denied = header(&headers, "x-mixer-decision-id")
        .expect("the 403 carries its decision id")
        .to_string();
    assert_ne!(allowed, denied);
    for id in [&allowed, &denied] {
        assert_eq!(id.len(), 32, "{id}");
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    }

    // The stdio handler writes its batch within its batch timeout (200 ms).
    let mut records = std::collections::HashMap::new();
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while records.len() < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = served
            .stdout
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no decision records for both ids in {lines:#?}"));
        let record: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?} is not JSON: {e}"));
        let id = record["decision_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if id == allowed || id == denied {
            records.insert(id, record);
        }
        lines.push(line);
    }
    let allow = &records[&allowed];
    assert_eq!(allow["verdict"], "allow", "{allow}");
    assert_eq!(allow["front_end"], "forward-auth", "{allow}");
    assert!(
        allow["rule"]
            .as_str()
            .is_some_and(|r| r.starts_with("tag-user.")),
        "{allow}"
    );
    assert_eq!(
        allow["attributes"]["request.headers[x-user]"], "bob",
        "{allow}"
    );
    assert_eq!(
        allow["attributes"]["request.headers[authorization]"], "***",
        "{allow}"
    );
    let deny = &records[&denied];
    assert_eq!(deny["verdict"], "deny", "{deny}");
    assert_eq!(deny["code"], "PERMISSION_DENIED", "{deny}");
    assert!(
        deny["rule"]
            .as_str()
            .is_some_and(|r| r.starts_with("deny-on-header.")),
        "{deny}"
    );
    assert!(
        deny["handler"]
            .as_str()
            .is_some_and(|h| h.starts_with("deny-by-header.")),
        "{deny}"
    );
    assert!(
        deny["config_hash"].as_str().is_some_and(|h| !h.is_empty()),
        "{deny}"
    );
    for line in &lines {
        assert!(!line.contains(TOKEN), "the token was logged: {line}");
    }
    drop(served);

    // The mixer's own log: the line about each request carries its decision id.
    let text = std::fs::read_to_string(&log).expect("read the log");
    for id in [&allowed, &denied] {
        let line = text
            .lines()
            .filter(|l| l.contains("forward-auth answered"))
            .find(|l| l.contains(id.as_str()))
            .unwrap_or_else(|| panic!("no log line carries {id}:\n{text}"));
        let event: serde_json::Value = serde_json::from_str(line).expect("a JSON log line");
        assert_eq!(event["decision_id"], id.as_str(), "{line}");
    }
    assert!(!text.contains(TOKEN), "the token was logged:\n{text}");
}

/// Beside the bundles: a rule whose handler is an out-of-process adapter nobody listens on,
/// failing open, for the requests that ask for it.
fn unreachable_rule(adapter: std::net::SocketAddr) -> String {
    format!(
        r#"apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {{name: gone, namespace: istio-system}}
spec:
  adapter: gone
  failPolicy: OPEN
  connection: {{address: '{adapter}', timeout: 300ms}}
---
apiVersion: config.istio.io/v1alpha2
kind: instance
metadata: {{name: gone-nothing, namespace: istio-system}}
spec: {{compiledTemplate: checknothing}}
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {{name: ask-gone, namespace: istio-system}}
spec:
  match: (request.headers["x-policy"] | "") == "gone"
  actions:
  - handler: gone
    instances: [gone-nothing]
"#
    )
}

/// The forward-auth answer's status and decision id for `headers` on `mixer`.
fn decide(mixer: &mixer_tests::Mixer, headers: &[(&str, &str)]) -> (u16, String) {
    let (status, answer, _) =
        http_request(mixer.http, "GET", "/check", headers).expect("forward-auth answers");
    let id = header(&answer, "x-mixer-decision-id").expect("a decision id");
    (status, id.to_string())
}

/// The records of `ids`, read from the replicas' stdout within 10 s.
fn records_of(
    stdouts: &[&Receiver<String>],
    ids: &[&str],
) -> std::collections::HashMap<String, serde_json::Value> {
    let mut records = std::collections::HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while records.len() < ids.len() {
        assert!(
            Instant::now() < deadline,
            "no records for all of {ids:?}: {records:#?}"
        );
        let mut idle = true;
        for stdout in stdouts {
            while let Ok(line) = stdout.try_recv() {
                idle = false;
                let Ok(record) = serde_json::from_str::<serde_json::Value>(&line) else {
                    continue;
                };
                let id = record["decision_id"].as_str().unwrap_or_default();
                if ids.contains(&id) {
                    records.insert(id.to_string(), record);
                }
            }
        }
        if idle {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    records
}

#[test]
fn records_say_which_cache_tier_answered_and_which_handler_failed_open() {
    if !mixer_tests::redis::redis_installed() {
        return;
    }
    let redis = mixer_tests::redis::Redis::start();
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let dir = tempfile::tempdir().expect("tempdir");
    for (bundle, file) in [
        ("default", "default.yaml"),
        ("decision-log", "decision-log.yaml"),
    ] {
        std::fs::copy(bundle_file(bundle, file), dir.path().join(file)).expect("copy the bundle");
    }
    std::fs::write(dir.path().join("gone.yaml"), unreachable_rule(free_addr()))
        .expect("write the rule");
    let config = dir.path().to_str().expect("utf-8");
    let args = [
        "--config",
        config,
        "--worker-threads",
        "1",
        "--shared-cache",
        &url,
        "--shared-cache-timeout",
        "1s",
    ];
    let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let (first, first_out) = mixer_tests::Mixer::start_capturing_stdout(binary, &args);
    let (second, second_out) = mixer_tests::Mixer::start_capturing_stdout(binary, &args);
    // Each replica asks the shared tier once it is connected (in the background) and learns
    // the requests' shape from a decision of its own.
    for (i, replica) in [&first, &second].into_iter().enumerate() {
        replica.wait_ready(Duration::from_secs(20));
        let start = Instant::now();
        let asked = || {
            replica
                .metric("mixer_check_cache_shared_misses_total")
                .unwrap_or(0.0)
                + replica
                    .metric("mixer_check_cache_shared_hits_total")
                    .unwrap_or(0.0)
        };
        for n in 0.. {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "replica {i} never reached Redis"
            );
            decide(replica, &[("x-user", &format!("warm-up-{i}-{n}"))]);
            if asked() >= 1.0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    let alice = [("x-user", "alice")];
    let (status, computed) = decide(&first, &alice);
    assert_eq!(status, 200);
    let (status, shared) = decide(&second, &alice);
    assert_eq!(status, 200);
    let (status, in_process) = decide(&second, &alice);
    assert_eq!(status, 200);
    // The adapter is down and its handler fails open: allowed, and said so in the record.
    let (status, failed_open) = decide(&first, &[("x-policy", "gone")]);
    assert_eq!(status, 200);

    let ids = [&*computed, &*shared, &*in_process, &*failed_open];
    let records = records_of(&[&first_out, &second_out], &ids);
    for (id, tier) in [
        (&computed, "none"),
        (&shared, "shared"),
        (&in_process, "in_process"),
    ] {
        assert_eq!(records[id]["cache"], tier, "{}", records[id]);
        assert_eq!(records[id]["verdict"], "allow", "{}", records[id]);
    }
    let open = &records[&failed_open];
    assert_eq!(open["verdict"], "allow", "{open}");
    assert_eq!(open["fail_policy"], "open", "{open}");
    assert!(
        open["handler_errors"]["gone.handler.istio-system"]
            .as_str()
            .is_some_and(|e| !e.is_empty()),
        "{open}"
    );
    assert_eq!(open["cache"], "none", "{open}");
}

/// One rate limit call on `grpc` with a descriptor per entry of `descriptors`: the decision
/// id Envoy would add to the client's response, and whether it is over the limit.
fn rate_limit(grpc: std::net::SocketAddr, descriptors: &[(&str, &str)]) -> (String, bool) {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

    let request = RateLimitRequest {
        domain: "edge".into(),
        descriptors: descriptors
            .iter()
            .map(|(k, v)| RateLimitDescriptor {
                entries: vec![Entry {
                    key: (*k).into(),
                    value: (*v).into(),
                }],
                ..Default::default()
            })
            .collect(),
        hits_addend: 1,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let response = runtime.block_on(async {
        let mut client = RateLimitServiceClient::connect(format!("http://{grpc}"))
            .await
            .expect("connect");
        client
            .should_rate_limit(request)
            .await
            .expect("answered")
            .into_inner()
    });
    let id = response
        .response_headers_to_add
        .iter()
        .find(|h| h.key == "x-mixer-decision-id")
        .expect("the decision id")
        .value
        .clone();
    (id, response.overall_code == Code::OverLimit as i32)
}

/// A ready mixer serving `config` (a directory of rules) with `policies/decision-log` added
/// to it, and its stdout, where the records go.
fn serve_with_the_decision_log(
    config: &Path,
) -> (mixer_tests::Mixer, std::sync::mpsc::Receiver<String>) {
    std::fs::copy(
        bundle_file("decision-log", "decision-log.yaml"),
        config.join("decision-log.yaml"),
    )
    .expect("copy the bundle");
    let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let config = config.to_str().expect("utf-8");
    let (mixer, stdout) = mixer_tests::Mixer::start_capturing_stdout(binary, &["--config", config]);
    mixer.wait_ready(Duration::from_secs(20));
    (mixer, stdout)
}

#[test]
fn a_rate_limit_record_has_every_descriptors_verdict_and_the_limit_that_decided() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/ratelimit/config/edge.yaml"),
        dir.path().join("edge.yaml"),
    )
    .expect("copy the rate limits");
    let (mixer, stdout) = serve_with_the_decision_log(dir.path());

    // policies/ratelimit: 50.0.0.5 may send nothing; a path under /api/ 100 a second.
    let (limited, over) = rate_limit(
        mixer.grpc,
        &[("path", "/api/pets"), ("remote_address", "50.0.0.5")],
    );
    assert!(over);
    let (allowed, over) = rate_limit(mixer.grpc, &[("path", "/api/pets")]);
    assert!(!over);

    let records = records_of(&[&stdout], &[&limited, &allowed]);
    let record = &records[&limited];
    assert_eq!(record["front_end"], "ratelimit", "{record}");
    assert_eq!(record["verdict"], "deny", "{record}");
    assert_eq!(record["code"], "RESOURCE_EXHAUSTED", "{record}");
    assert_eq!(
        record["descriptors"],
        serde_json::json!({"path=/api/pets": "OK", "remote_address=50.0.0.5": "OVER_LIMIT"}),
        "{record}"
    );
    assert_eq!(record["descriptor"], "remote_address=50.0.0.5", "{record}");
    assert!(
        record["limit"]
            .as_str()
            .is_some_and(|l| l.ends_with(" 0/SECOND")),
        "{record}"
    );
    let record = &records[&allowed];
    assert_eq!(record["verdict"], "allow", "{record}");
    assert_eq!(record["descriptor"], "path=/api/pets", "{record}");
    assert!(
        record["limit"]
            .as_str()
            .is_some_and(|l| l.ends_with(" 100/SECOND")),
        "{record}"
    );
}

/// Envoy's `edge` limits counted in a Redis nobody listens on, failing open.
fn unreachable_redis_limits(redis: std::net::SocketAddr) -> String {
    format!(
        r#"apiVersion: config.istio.io/v1alpha2
kind: ratelimitconfig
metadata: {{name: gone, namespace: istio-system}}
spec:
  domain: edge
  backend:
    adapter: redisquota
    params: {{redisServerUrl: '{redis}'}}
  failPolicy: OPEN
  descriptors:
  - key: path
    rate_limit: {{unit: second, requests_per_unit: 100}}
"#
    )
}

#[test]
fn a_rate_limit_record_names_the_quota_handler_that_failed_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("gone.yaml"),
        unreachable_redis_limits(free_addr()),
    )
    .expect("write the limits");
    let (mixer, stdout) = serve_with_the_decision_log(dir.path());

    // Redis is down and the handler fails open: not limited, and said so in the record.
    let (id, over) = rate_limit(mixer.grpc, &[("path", "/api/pets"), ("path", "/api/cats")]);
    assert!(!over);

    let records = records_of(&[&stdout], &[&id]);
    let record = &records[&id];
    assert_eq!(record["front_end"], "ratelimit", "{record}");
    assert_eq!(record["verdict"], "allow", "{record}");
    assert_eq!(record["fail_policy"], "open", "{record}");
    // Both descriptors were counted in the one failed call: the handler is named once.
    let errors = record["handler_errors"]
        .as_object()
        .expect("handler errors");
    assert_eq!(errors.len(), 1, "{record}");
    assert!(
        errors["gone.ratelimitconfig.istio-system"]
            .as_str()
            .is_some_and(|e| !e.is_empty()),
        "{record}"
    );
}

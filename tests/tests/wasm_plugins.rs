//! Wasm plugins through the real `mixer serve` and forward-auth: the example deny-header
//! plugin decides checks, count-by counts reports in the mixer's metrics, a config the
//! plugin rejects leaves the previous one serving, and a reload under load fails no check.
//!
//! The plugins are built by adapters/examples/wasm/build.sh into target/wasm-guests/ (or
//! `$MIXER_WASM_GUESTS`); without them these tests fail under CI=1.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mixer_tests::{Mixer, http_request};

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

fn guest(name: &str) -> Option<String> {
    mixer_tests::wasm_guest(name).map(|p| p.display().to_string())
}

fn config(deny: &str, count: &str, header: &str, message: &str) -> String {
    format!(
        r#"apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {{name: deny-header, namespace: istio-system}}
spec:
  compiledAdapter: wasm
  params:
    module: {deny}
    config: {{header: "{header}", message: "{message}"}}
    # The default 1 ms bounds the plugin's own run; a debug build on a loaded 2-core
    # machine can be descheduled for longer than that.
    limits: {{checkDeadline: 100ms}}
---
apiVersion: config.istio.io/v1alpha2
kind: instance
metadata: {{name: request-headers, namespace: istio-system}}
spec:
  compiledTemplate: authorization
  params:
    action:
      path: request.path | "/"
      properties:
        x-plugin-deny: request.headers["x-plugin-deny"] | ""
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {{name: plugin-check, namespace: istio-system}}
spec:
  actions: [{{handler: deny-header, instances: [request-headers]}}]
---
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {{name: count-by, namespace: istio-system}}
spec:
  compiledAdapter: wasm
  params:
    module: {count}
    config: {{dimension: path}}
---
apiVersion: config.istio.io/v1alpha2
kind: instance
metadata: {{name: requestcount, namespace: istio-system}}
spec:
  compiledTemplate: metric
  params:
    value: "1"
    dimensions:
      path: request.path | "/"
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {{name: plugin-count, namespace: istio-system}}
spec:
  actions: [{{handler: count-by, instances: [requestcount]}}]
"#
    )
}

fn check(mixer: &Mixer, deny: &str) -> (u16, String) {
    let (status, _, body) =
        http_request(mixer.http, "GET", "/check", &[("x-plugin-deny", deny)]).expect("check");
    (status, body)
}

/// One Mixer v1 Report per path, each a request with that `request.path`.
fn report(mixer: &Mixer, paths: &[&str]) {
    use mixer_proto::istio::mixer::v1 as pb;
    let records: Vec<pb::CompressedAttributes> = paths
        .iter()
        .map(|p| {
            let path = mixer_model::Value::from(*p);
            mixer_frontends::mixer_v1::encode(
                [("request.path", &path)],
                mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT,
            )
        })
        .collect();
    let grpc = mixer.grpc;
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(async move {
            let mut client = pb::mixer_client::MixerClient::connect(format!("http://{grpc}"))
                .await
                .expect("connect");
            client
                .report(pb::ReportRequest {
                    attributes: records,
                    repeated_attributes_semantics:
                        pb::report_request::RepeatedAttributesSemantics::IndependentEncoding as i32,
                    default_words: vec![],
                    global_word_count: mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT as u32,
                })
                .await
                .expect("report");
        });
}

fn start(config_text: &str) -> (Mixer, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("config.yaml"), config_text).expect("write");
    let mixer = Mixer::start(binary(), &["--config", dir.path().to_str().expect("utf-8")]);
    mixer.wait_ready(Duration::from_secs(30));
    (mixer, dir)
}

#[test]
fn plugins_decide_checks_and_count_reports() {
    let (Some(deny), Some(count)) = (guest("deny-header"), guest("count-by")) else {
        return;
    };
    let (mixer, _dir) = start(&config(&deny, &count, "x-plugin-deny", "denied by plugin"));
    let (status, body) = check(&mixer, "true");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("denied by plugin"), "{body}");
    for other in ["false", ""] {
        assert_eq!(check(&mixer, other).0, 200, "x-plugin-deny: {other:?}");
    }
    // Three Mixer v1 reports, through the batching queue to count-by: poll for its counter.
    report(&mixer, &["/orders", "/orders", "/cart"]);
    let series = r#"mixer_wasm_plugin_counter_total{handler="count-by.handler.istio-system",key="/orders",name="requests"}"#;
    let started = Instant::now();
    loop {
        if mixer.metric(series) == Some(2.0) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no {series}");
        std::thread::sleep(Duration::from_millis(50));
    }
    mixer.terminate();
}

#[test]
fn a_config_the_plugin_rejects_leaves_the_old_one_serving() {
    let (Some(deny), Some(count)) = (guest("deny-header"), guest("count-by")) else {
        return;
    };
    let (mixer, dir) = start(&config(&deny, &count, "x-plugin-deny", "denied by plugin"));
    // The plugin's validate rejects an empty header name.
    std::fs::write(
        dir.path().join("config.yaml"),
        config(&deny, &count, " ", "x"),
    )
    .unwrap();
    let started = Instant::now();
    while mixer
        .metric(r#"mixer_config_reloads_total{result="failure"}"#)
        .is_none_or(|v| v < 1.0)
    {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "reload not attempted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, body) = check(&mixer, "true");
    assert_eq!(status, 403, "old config still decides: {body}");
    assert_eq!(check(&mixer, "false").0, 200);
    mixer.terminate();

    // `mixer validate` says what the plugin said, at its field path.
    let out = std::process::Command::new(binary())
        .args(["validate", dir.path().to_str().unwrap()])
        .output()
        .expect("mixer validate");
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("spec.params.config.header: must not be empty"),
        "{text}"
    );
}

#[test]
fn a_reload_under_load_fails_no_check() {
    let (Some(deny), Some(count)) = (guest("deny-header"), guest("count-by")) else {
        return;
    };
    let (mixer, dir) = start(&config(&deny, &count, "x-plugin-deny", "denied by plugin"));
    let mixer = Arc::new(mixer);
    let stop = Arc::new(AtomicBool::new(false));
    let (done, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let load: Vec<_> = (0..2)
        .map(|_| {
            let (mixer, stop, done, failed) =
                (mixer.clone(), stop.clone(), done.clone(), failed.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let (allow, _) = check(&mixer, "false");
                    let (deny, body) = check(&mixer, "true");
                    if allow != 200 || deny != 403 || !body.contains("denied by plugin") {
                        failed.fetch_add(1, Ordering::SeqCst);
                    }
                    done.fetch_add(2, Ordering::SeqCst);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // A new plugin config (and so a new handler): the message changes, nothing else.
    std::fs::write(
        dir.path().join("config.yaml"),
        config(&deny, &count, "x-plugin-deny", "denied by plugin, v2"),
    )
    .unwrap();
    let started = Instant::now();
    while !check(&mixer, "true").1.contains("v2") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "new config never served"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    for t in load {
        t.join().unwrap();
    }
    assert!(done.load(Ordering::SeqCst) > 20);
    assert_eq!(
        failed.load(Ordering::SeqCst),
        0,
        "checks failed during the reload"
    );
    Arc::try_unwrap(mixer).ok().expect("sole owner").terminate();
}

/// The Wasm host's own fixtures (WAT text), written as binary components for the server,
/// which has no WAT parser.
#[path = "../../mixer/wasm/tests/fixtures/mod.rs"]
mod fixtures;

/// Writes `fixtures::plugin` with `check` as `dir/NAME.wasm`.
fn fixture(dir: &Path, name: &str, check: &str) {
    use fixtures::{AUTHORIZATION, CHECKNOTHING, REPORT_OK, VALIDATE_OK};
    let text = fixtures::plugin(
        &[AUTHORIZATION, CHECKNOTHING],
        VALIDATE_OK,
        check,
        REPORT_OK,
    );
    let bytes = wat::parse_str(&text).expect("fixture parses");
    std::fs::write(dir.join(format!("{name}.wasm")), bytes).expect("write fixture");
}

/// A handler running `module` (relative: to this config file's directory), its
/// checknothing instance, and a rule that sends it when `x-fault` is the handler's name.
fn fault_handler(name: &str, module: &str, fail_policy: &str, params: &str) -> String {
    format!(
        r#"apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {{name: {name}, namespace: istio-system}}
spec:
  compiledAdapter: wasm
  failPolicy: {fail_policy}
  params:
    module: {module}
    {params}
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {{name: {name}, namespace: istio-system}}
spec:
  match: request.headers["x-fault"] == "{name}"
  actions: [{{handler: {name}, instances: [nothing]}}]
---
"#
    )
}

const NOTHING: &str = r#"apiVersion: config.istio.io/v1alpha2
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec:
  compiledTemplate: checknothing
"#;

fn fault_check(mixer: &Mixer, fault: &str) -> (u16, String) {
    let (status, _, body) =
        http_request(mixer.http, "GET", "/check", &[("x-fault", fault)]).expect("check");
    (status, body)
}

/// Plugins that trap, loop for ever and grow their memory without end, each behind a
/// handler that fails open and one that fails closed, through a real `mixer serve`: the fail
/// policy decides the forward-auth and ext_authz answers, the mixer keeps serving, and each
/// fault is counted by kind on /metrics. The modules are named relative to the config file
/// (the test runs from another directory).
#[test]
fn plugin_faults_answer_by_fail_policy_and_are_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    fixture(dir.path(), "trap", fixtures::TRAP);
    fixture(dir.path(), "loop", fixtures::LOOP);
    fixture(dir.path(), "grow", fixtures::GROW);
    fixture(dir.path(), "allow", fixtures::ALLOW);
    let mut config = String::from(NOTHING);
    config.push_str("---\n");
    // Deadlines above a loaded debug build's scheduling noise, below the test's patience.
    let limits = "limits: {checkDeadline: 20ms, memoryMib: 4}";
    for (kind, module) in [
        ("trap", "trap.wasm"),
        ("loop", "loop.wasm"),
        ("grow", "grow.wasm"),
    ] {
        config.push_str(&fault_handler(
            &format!("{kind}-open"),
            module,
            "OPEN",
            limits,
        ));
        config.push_str(&fault_handler(
            &format!("{kind}-closed"),
            module,
            "CLOSED",
            limits,
        ));
    }
    config.push_str(&fault_handler("allow", "allow.wasm", "CLOSED", limits));
    std::fs::write(dir.path().join("config.yaml"), &config).expect("write");
    let mixer = Mixer::start(binary(), &["--config", dir.path().to_str().expect("utf-8")]);
    mixer.wait_ready(Duration::from_secs(60));

    for (kind, label) in [("trap", "trap"), ("loop", "deadline"), ("grow", "memory")] {
        for round in 0..2 {
            let (status, body) = fault_check(&mixer, &format!("{kind}-open"));
            assert_eq!(status, 200, "{kind} failing open, round {round}: {body}");
            let (status, body) = fault_check(&mixer, &format!("{kind}-closed"));
            assert_eq!(status, 503, "{kind} failing closed, round {round}: {body}");
            assert!(body.contains(label), "{kind}: {body}");
            // And the mixer still serves a plugin that works.
            assert_eq!(fault_check(&mixer, "allow").0, 200);
        }
        for policy in ["open", "closed"] {
            let series = format!(
                r#"mixer_wasm_plugin_faults_total{{handler="{kind}-{policy}.handler.istio-system",kind="{label}"}}"#
            );
            assert_eq!(mixer.metric(&series), Some(2.0), "{series}");
        }
    }

    // ext_authz: failing open allows; failing closed is UNAVAILABLE, so that Envoy's own
    // failure mode applies.
    let grpc = mixer.grpc;
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(async move {
            use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
            let mut client = AuthorizationClient::connect(format!("http://{grpc}"))
                .await
                .expect("connect");
            let open = client
                .check(authz::authz_request(&[("x-fault", "trap-open")]))
                .await
                .expect("failing open answers")
                .into_inner();
            assert_eq!(open.status.map(|s| s.code), Some(0));
            let closed = client
                .check(authz::authz_request(&[("x-fault", "loop-closed")]))
                .await
                .expect_err("failing closed is an error");
            assert_eq!(closed.code(), tonic::Code::Unavailable, "{closed:?}");
        });
    assert_eq!(fault_check(&mixer, "allow").0, 200);
    mixer.terminate();
}

#[path = "support/authz.rs"]
mod authz;

/// `--wasm-instances` and `--wasm-epoch-tick` reach the engine: /metrics shows them; with a
/// pool of one instance, a warm handler's idle instance holds the only slot, so another
/// handler's call finds none (an `instantiate` fault); with a 200 ms tick a 1 ms deadline
/// fires no sooner than the next tick.
#[test]
fn serve_flags_set_the_pool_and_the_epoch_tick() {
    let dir = tempfile::tempdir().expect("tempdir");
    fixture(dir.path(), "allow", fixtures::ALLOW);
    fixture(dir.path(), "loop", fixtures::LOOP);
    let mut config = String::from(NOTHING);
    config.push_str("---\n");
    config.push_str(&fault_handler(
        "warm",
        "allow.wasm",
        "CLOSED",
        "instances: warm\n    limits: {checkDeadline: 100ms}",
    ));
    config.push_str(&fault_handler(
        "fresh",
        "allow.wasm",
        "CLOSED",
        "limits: {checkDeadline: 100ms}",
    ));
    config.push_str(&fault_handler(
        "loop",
        "loop.wasm",
        "CLOSED",
        "limits: {checkDeadline: 1ms}",
    ));
    std::fs::write(dir.path().join("config.yaml"), &config).expect("write");
    let mixer = Mixer::start(
        binary(),
        &[
            "--config",
            dir.path().to_str().expect("utf-8"),
            "--wasm-instances",
            "1",
            "--wasm-epoch-tick",
            "200ms",
        ],
    );
    mixer.wait_ready(Duration::from_secs(60));
    assert_eq!(mixer.metric("mixer_wasm_host_pool_instances"), Some(1.0));
    assert_eq!(
        mixer.metric("mixer_wasm_host_epoch_tick_seconds"),
        Some(0.2)
    );

    let started = Instant::now();
    let (status, body) = fault_check(&mixer, "loop");
    let took = started.elapsed();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("deadline"), "{body}");
    assert!(took >= Duration::from_millis(190), "stopped after {took:?}");

    assert_eq!(fault_check(&mixer, "warm").0, 200);
    let (status, body) = fault_check(&mixer, "fresh");
    assert_eq!(status, 503, "the only slot is the warm instance's: {body}");
    assert_eq!(
        mixer.metric(
            r#"mixer_wasm_plugin_faults_total{handler="fresh.handler.istio-system",kind="instantiate"}"#
        ),
        Some(1.0)
    );
    mixer.terminate();
}

/// `module: NAME.wasm` is relative to the config file that names it: `mixer validate`
/// finds it from any working directory, by an absolute or a relative config path.
#[test]
fn module_paths_are_relative_to_their_config_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config_dir = dir.path().join("bundle").join("config");
    std::fs::create_dir_all(config_dir.join("plugins")).expect("mkdir");
    fixture(&config_dir.join("plugins"), "allow", fixtures::ALLOW);
    let mut config = String::from(NOTHING);
    config.push_str("---\n");
    config.push_str(&fault_handler("allow", "plugins/allow.wasm", "CLOSED", ""));
    std::fs::write(config_dir.join("rules.yaml"), &config).expect("write");
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let runs: [(&Path, String); 4] = [
        (elsewhere.path(), config_dir.display().to_string()),
        (
            elsewhere.path(),
            config_dir.join("rules.yaml").display().to_string(),
        ),
        (dir.path(), "bundle/config".to_string()),
        (dir.path(), "bundle/config/rules.yaml".to_string()),
    ];
    for (cwd, path) in runs {
        let out = std::process::Command::new(binary())
            .current_dir(cwd)
            .args(["validate", &path])
            .output()
            .expect("mixer validate");
        let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "validate {path} from {}: {text}",
            cwd.display()
        );
    }
    // And a path that is not there is reported as the file it resolved to.
    std::fs::write(
        config_dir.join("rules.yaml"),
        config.replace("plugins/allow.wasm", "plugins/missing.wasm"),
    )
    .expect("write");
    let out = std::process::Command::new(binary())
        .current_dir(elsewhere.path())
        .args(["validate", config_dir.to_str().expect("utf-8")])
        .output()
        .expect("mixer validate");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    let expected = config_dir.join("plugins").join("missing.wasm");
    assert!(text.contains(&expected.display().to_string()), "{text}");
}

/// What a plain `cargo build` makes (a core module for wasm32-unknown-unknown, a native
/// library for the host) is a config error at the handler's `module` that says what the file
/// is, what the mixer needs and the command that builds it, not wasmtime's "attempted to
/// parse a wasm module with a component parser".
#[test]
fn a_module_built_by_plain_cargo_build_is_answered_with_the_build_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (file, bytes, got) in [
        (
            "core.wasm",
            &b"\0asm\x01\0\0\0"[..],
            "is a core Wasm module",
        ),
        (
            "native.wasm",
            &b"\x7fELF\x02\x01\x01\0"[..],
            "is an ELF shared library",
        ),
    ] {
        std::fs::write(dir.path().join(file), bytes).expect("write module");
        let mut config = String::from(NOTHING);
        config.push_str("---\n");
        config.push_str(&fault_handler("plain", file, "CLOSED", ""));
        std::fs::write(dir.path().join("rules.yaml"), &config).expect("write");
        let out = std::process::Command::new(binary())
            .args(["validate", dir.path().to_str().expect("utf-8")])
            .output()
            .expect("mixer validate");
        let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}");
        for expected in [
            "rules.yaml",
            "spec.params.module",
            got,
            "a plugin must be a Wasm component of the mixer:adapter/plugin@0.2.0 world",
            "adapters/wasm-sdk/build-plugin.sh <crate-dir> <out.wasm>",
        ] {
            assert!(text.contains(expected), "{expected:?} not in: {text}");
        }
        assert!(!text.contains("component parser"), "{text}");
    }
}

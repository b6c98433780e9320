//! A Wasm module is part of the config it is named in: its digest is in the config hash, so
//! two folders that differ only in a module's bytes show different hashes (and share no
//! cached verdict), and a module changed under a running mixer reloads the config as a
//! changed config file does; `/readyz` never calls the files current while the module on
//! disk is not the one serving.
//!
//! Needs the example guests (`adapters/examples/wasm/build.sh` puts them in
//! `target/wasm-guests`, or `$MIXER_WASM_GUESTS`); without them this fails under CI=1.

use std::path::Path;
use std::time::{Duration, Instant};

use mixer_tests::{Mixer, http_request};

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

/// A check decided by the plugin at `plugin.wasm` beside the config.
const CONFIG: &str = r#"
kind: handler
metadata: {name: deny-header, namespace: istio-system}
spec:
  compiledAdapter: wasm
  params:
    module: plugin.wasm
    config: {header: "x-plugin-deny", message: "denied by the plugin"}
    limits: {checkDeadline: 100ms}
---
kind: instance
metadata: {name: request-headers, namespace: istio-system}
spec:
  compiledTemplate: authorization
  params:
    action:
      path: request.path | "/"
      properties:
        x-plugin-deny: request.headers["x-plugin-deny"] | ""
---
kind: rule
metadata: {name: plugin-check, namespace: istio-system}
spec:
  actions: [{handler: deny-header, instances: [request-headers]}]
"#;

/// `module` with a custom section appended (`mixer-test-note`, holding `note`): the same
/// plugin, other bytes.
fn with_note(module: &[u8], note: &str) -> Vec<u8> {
    let name = b"mixer-test-note";
    let mut content = vec![u8::try_from(name.len()).expect("short name")];
    content.extend_from_slice(name);
    content.extend_from_slice(note.as_bytes());
    let mut out = module.to_vec();
    out.push(0);
    out.push(u8::try_from(content.len()).expect("a section under 128 bytes"));
    out.extend_from_slice(&content);
    out
}

fn folder(module: &[u8]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("config.yaml"), CONFIG).expect("write config");
    std::fs::write(dir.path().join("plugin.wasm"), module).expect("write module");
    dir
}

fn start(dir: &Path) -> Mixer {
    let mixer = Mixer::start(
        binary(),
        &[
            "--config",
            dir.to_str().expect("utf-8 path"),
            "--config-check-interval",
            "1s",
        ],
    );
    mixer.wait_ready(Duration::from_secs(20));
    mixer
}

fn readyz(mixer: &Mixer) -> String {
    http_request(mixer.admin, "GET", "/readyz", &[])
        .expect("readyz")
        .2
}

fn config_hash(body: &str) -> String {
    body.lines()
        .find_map(|l| l.strip_prefix("config_hash: "))
        .unwrap_or_else(|| panic!("no config_hash in /readyz: {body}"))
        .to_string()
}

fn wait_for(mixer: &Mixer, what: &str, done: impl Fn(&str) -> bool) -> String {
    let since = Instant::now();
    loop {
        let body = readyz(mixer);
        if done(&body) {
            return body;
        }
        assert!(
            since.elapsed() < Duration::from_secs(10),
            "{what}; /readyz:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_module_is_part_of_the_config_hash_and_its_change_reloads() {
    let (Some(deny), Some(count)) = (
        mixer_tests::wasm_guest("deny-header"),
        mixer_tests::wasm_guest("count-by"),
    ) else {
        return;
    };
    let module = std::fs::read(&deny).expect("read the guest");
    let noted = with_note(&module, "one");
    let (plain, other) = (folder(&module), folder(&noted));
    let (a, b) = (start(plain.path()), start(other.path()));
    let hash_a = config_hash(&readyz(&a));
    assert_ne!(
        hash_a,
        config_hash(&readyz(&b)),
        "two folders whose modules differ show the same config hash"
    );
    let denied = |m: &Mixer| {
        http_request(m.http, "GET", "/check", &[("x-plugin-deny", "true")])
            .expect("check")
            .0
    };
    assert_eq!(denied(&a), 403);
    drop(b);

    // A module that does not serve the rule's template: rejected, and /readyz says so
    // instead of calling the files current.
    std::fs::copy(&count, plain.path().join("plugin.wasm")).expect("replace the module");
    let body = wait_for(&a, "a replaced module was not tried", |b| {
        b.contains("config: stale")
    });
    assert_eq!(config_hash(&body), hash_a, "the old module still serves");
    assert!(body.contains("last reload failed"), "{body}");
    assert_eq!(denied(&a), 403);

    // The plugin again, other bytes: loaded, current, a new config hash.
    std::fs::write(plain.path().join("plugin.wasm"), &noted).expect("replace the module");
    let body = wait_for(&a, "the fixed module was not loaded", |b| {
        b.contains("config: current") && !b.contains("last reload failed")
    });
    assert_ne!(config_hash(&body), hash_a);
    assert_eq!(denied(&a), 403);
}

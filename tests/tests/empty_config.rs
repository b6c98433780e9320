//! A config file caught empty (a writer truncated it and has not written it yet) must not
//! drop its rules: `mixer serve` refuses the reload, the running deny rule keeps denying and
//! `/readyz` says why, unless `--allow-empty-config` says empty is meant. Hidden files
//! (editors' lock files, writers' temporary files) are never loaded, and a Kubernetes
//! ConfigMap volume's files are loaded once, through their visible symlinks.

use std::path::Path;
use std::time::{Duration, Instant};

use mixer_tests::{Mixer, http_request};

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

const DENY: &str = r#"
kind: handler
metadata: {name: deny}
spec:
  compiledAdapter: denier
  params: {status: {code: 7, message: denied by rule}}
---
kind: instance
metadata: {name: nothing}
spec: {compiledTemplate: checknothing}
---
kind: rule
metadata: {name: deny-bad}
spec:
  match: request.headers["x-bad"] == "yes"
  actions: [{handler: deny, instances: [nothing]}]
"#;

/// The forward-auth status of a request carrying `x-bad: yes`.
fn bad_request(mixer: &Mixer) -> u16 {
    http_request(
        mixer.http,
        "GET",
        "/check",
        &[("x-original-uri", "/"), ("x-bad", "yes")],
    )
    .expect("check")
    .0
}

fn readyz(mixer: &Mixer) -> String {
    http_request(mixer.admin, "GET", "/readyz", &[])
        .map(|(_, _, body)| body)
        .unwrap_or_default()
}

fn wait_for(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn start(dir: &Path, extra: &[&str]) -> Mixer {
    let config = dir.display().to_string();
    let mut args = vec!["--config", config.as_str()];
    args.extend_from_slice(extra);
    let mixer = Mixer::start(binary(), &args);
    mixer.wait_ready(Duration::from_secs(20));
    mixer
}

#[test]
fn a_truncated_file_is_refused_and_its_deny_rule_still_denies() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("deny.yaml");
    std::fs::write(&file, DENY).expect("write");
    let mixer = start(dir.path(), &[]);
    assert_eq!(bad_request(&mixer), 403);

    // Hidden files appear beside it (an editor's lock file, a writer's temporary file, not
    // even YAML): nothing reloads from them, nothing fails.
    std::fs::write(dir.path().join(".tmp-deny.yaml"), "{{ not yaml").expect("write");
    std::fs::write(dir.path().join(".#deny.yaml"), "").expect("write");
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        !readyz(&mixer).contains("last reload failed"),
        "{}",
        readyz(&mixer)
    );

    std::fs::File::create(&file).expect("truncate");
    wait_for(Duration::from_secs(10), "the reload to be refused", || {
        readyz(&mixer).contains("last reload failed")
    });
    let ready = readyz(&mixer);
    assert!(
        ready.contains("deny.yaml: empty, but its documents are in the running config")
            && ready.contains("--allow-empty-config"),
        "{ready}"
    );
    assert_eq!(
        bad_request(&mixer),
        403,
        "the running deny rule still denies"
    );
    assert!(
        mixer
            .metric("mixer_config_reload_failures_total")
            .is_some_and(|n| n >= 1.0)
    );

    // The writer finishes: the file loads again and the failure is cleared.
    std::fs::write(&file, DENY).expect("write");
    wait_for(Duration::from_secs(10), "the reload to succeed", || {
        !readyz(&mixer).contains("last reload failed")
    });
    assert_eq!(bad_request(&mixer), 403);
}

#[test]
fn with_allow_empty_config_an_emptied_file_is_accepted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("deny.yaml");
    std::fs::write(&file, DENY).expect("write");
    let mixer = start(dir.path(), &["--allow-empty-config"]);
    assert_eq!(bad_request(&mixer), 403);
    std::fs::File::create(&file).expect("truncate");
    wait_for(Duration::from_secs(10), "the empty config to load", || {
        bad_request(&mixer) == 200
    });
    assert!(!readyz(&mixer).contains("last reload failed"));
}

/// The layout kubelet writes for a ConfigMap volume: `rules.yaml -> ..data/rules.yaml`,
/// `..data -> ..2026_12_02_...`. The rule is loaded once (twice would be a duplicate error).
#[test]
fn a_configmap_volume_loads_each_file_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    let stamped = root.join("..2026_12_02_03_04_05.000000001");
    std::fs::create_dir_all(&stamped).expect("mkdir");
    std::fs::write(stamped.join("deny.yaml"), DENY).expect("write");
    std::os::unix::fs::symlink("..2026_12_02_03_04_05.000000001", root.join("..data"))
        .expect("symlink");
    std::os::unix::fs::symlink("..data/deny.yaml", root.join("deny.yaml")).expect("symlink");
    let mixer = start(root, &[]);
    assert_eq!(bad_request(&mixer), 403);
    let (_, _, dump) = http_request(mixer.admin, "GET", "/config_dump", &[]).expect("dump");
    let dump: serde_json::Value = serde_json::from_str(&dump).expect("json");
    let rules = dump["config"]["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 1, "{dump}");
}

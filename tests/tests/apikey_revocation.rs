//! API keys through the real mixer and forward-auth: keys in a folder laid out as the kubelet
//! mounts a Secret (`keys.yaml -> ..data/keys.yaml`, `..data -> ..<timestamp>`); a key removed
//! by the kubelet's update (a new timestamped folder, `..data` renamed over the old link) is
//! refused within the handler's `reloadInterval`, with config watching off (`--no-watch`), so
//! no config reload plays a part, and with the check cache on, so a cached allow does not
//! outlive the revocation.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::{Duration, Instant};

use mixer_tests::{Mixer, http_request};

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

/// How often the handler reads its keys in this test.
const RELOAD_INTERVAL: Duration = Duration::from_secs(1);

fn config(keys: &Path) -> String {
    format!(
        r#"
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {{name: apikeys, namespace: istio-system}}
spec:
  compiledAdapter: apikey
  params:
    directory: {keys}
    reloadInterval: 1s
---
apiVersion: config.istio.io/v1alpha2
kind: instance
metadata: {{name: apikey, namespace: istio-system}}
spec:
  compiledTemplate: apikey
  params:
    key: request.headers["x-api-key"] | ""
  attributeBindings:
    request.auth.principal: $out.principal
    request.auth.claims: $out.claims
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {{name: identify-caller, namespace: istio-system}}
spec:
  actions: [{{handler: apikeys, instances: [apikey]}}]
---
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {{name: unauthenticated, namespace: istio-system}}
spec:
  compiledAdapter: denier
  params:
    status: {{code: UNAUTHENTICATED, message: an API key is required}}
---
apiVersion: config.istio.io/v1alpha2
kind: instance
metadata: {{name: request, namespace: istio-system}}
spec:
  compiledTemplate: checknothing
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {{name: require-api-key, namespace: istio-system}}
spec:
  match: (request.auth.principal | "") == ""
  actions: [{{handler: unauthenticated, instances: [request]}}]
"#,
        keys = keys.display()
    )
}

/// A Secret volume as the kubelet writes it, one update at a time.
struct SecretVolume {
    dir: std::path::PathBuf,
    updates: u32,
}

impl SecretVolume {
    fn new(dir: &Path, keys: &str) -> SecretVolume {
        let mut volume = SecretVolume {
            dir: dir.to_owned(),
            updates: 0,
        };
        volume.update(keys);
        symlink("..data/keys.yaml", dir.join("keys.yaml")).expect("visible link");
        volume
    }

    /// A new timestamped folder, `..data_tmp` pointing at it renamed over `..data`, the old
    /// folder removed: the kubelet's atomic update.
    fn update(&mut self, keys: &str) {
        self.updates += 1;
        let stamped = format!("..2026_12_05_04_00_{:02}.{}", self.updates, self.updates);
        std::fs::create_dir(self.dir.join(&stamped)).expect("timestamped folder");
        std::fs::write(self.dir.join(&stamped).join("keys.yaml"), keys).expect("write keys");
        symlink(&stamped, self.dir.join("..data_tmp")).expect("..data_tmp");
        std::fs::rename(self.dir.join("..data_tmp"), self.dir.join("..data")).expect("swap");
        if self.updates > 1 {
            let old = format!(
                "..2026_12_05_04_00_{:02}.{}",
                self.updates - 1,
                self.updates - 1
            );
            std::fs::remove_dir_all(self.dir.join(old)).expect("old folder removed");
        }
    }
}

fn check(mixer: &Mixer, key: &str) -> (u16, String) {
    let (status, _, body) =
        http_request(mixer.http, "GET", "/check", &[("x-api-key", key)]).expect("check");
    (status, body)
}

#[test]
fn a_key_removed_from_the_mounted_secret_is_refused_within_the_reload_interval() {
    let root = tempfile::tempdir().expect("temp dir");
    let config_dir = root.path().join("config");
    let keys_dir = root.path().join("keys");
    std::fs::create_dir(&config_dir).expect("mkdir");
    std::fs::create_dir(&keys_dir).expect("mkdir");
    let mut volume = SecretVolume::new(
        &keys_dir,
        "keys:\n\
         - {name: alice, key: fake-key-alice, labels: {tier: gold}}\n\
         - {name: bob, key: fake-key-bob, labels: {tier: free}}\n",
    );
    std::fs::write(config_dir.join("config.yaml"), config(&keys_dir)).expect("write config");
    let config_arg = config_dir.to_str().expect("utf-8 path");
    let mixer = Mixer::start(binary(), &["--config", config_arg, "--no-watch"]);
    mixer.wait_ready(Duration::from_secs(10));

    assert_eq!(check(&mixer, "fake-key-alice").0, 200);
    // Twice: the second answer may come from the check cache, which the revocation must not
    // outlive.
    assert_eq!(check(&mixer, "fake-key-bob").0, 200);
    assert_eq!(check(&mixer, "fake-key-bob").0, 200);
    let hits = mixer.metric("mixer_check_cache_hits_total").unwrap_or(0.0);
    assert!(
        hits >= 1.0,
        "the repeated check came from the cache ({hits} hits)"
    );
    let (status, body) = check(&mixer, "fake-key-mallory");
    assert_eq!(status, 401);
    assert!(body.contains("unknown API key"), "{body}");
    let (status, body) = check(&mixer, "");
    assert_eq!(status, 401);
    assert!(body.contains("an API key is required"), "{body}");

    volume.update("keys:\n- {name: alice, key: fake-key-alice, labels: {tier: gold}}\n");
    let revoked_at = Instant::now();
    // The reload interval, and slack for a loaded machine; polled, so it passes as soon as
    // the key is refused.
    let limit = RELOAD_INTERVAL + Duration::from_secs(4);
    let refused_after = loop {
        let (status, body) = check(&mixer, "fake-key-bob");
        if status == 401 {
            assert!(body.contains("unknown API key"), "{body}");
            break revoked_at.elapsed();
        }
        assert_eq!(status, 200, "{body}");
        assert!(
            revoked_at.elapsed() < limit,
            "the revoked key was still allowed {limit:?} after its removal"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!("revoked key refused {refused_after:?} after its removal");
    // The other key, untouched, still works; nothing else changed.
    assert_eq!(check(&mixer, "fake-key-alice").0, 200);
    assert!(mixer.terminate().success());
}

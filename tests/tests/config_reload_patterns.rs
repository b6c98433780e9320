//! Config updates as they happen in a cluster, through the real binary: each test lays the
//! files out exactly as the writer does, updates them the same way, and shows the new config
//! active within a second, by a verdict through a real request and by the content hash
//! `/readyz` reports.
//!
//! - Kubernetes ConfigMap volumes, as kubelet's AtomicWriter writes them
//!   (kubernetes/kubernetes `pkg/volume/util/atomic_writer.go`, `Write`): the data lives in a
//!   timestamped folder `..2006_01_02_15_04_05.<random>`, `..data` links to it, every key is
//!   a symlink `key -> ..data/key`; an update writes a new timestamped folder, creates the
//!   symlink `..data_tmp` to it, renames that over `..data` (rename(2)), then removes the old
//!   folder. `--config` names either the volume's folder or one file in it.
//! - git-sync v4 (kubernetes/git-sync `main.go`, `publishSymlink`): the link (`--link`)
//!   points at a worktree `.worktrees/<hash>` by a relative path; an update checks out a new
//!   worktree, creates the symlink `tmp-link` to it and renames it over the link, then
//!   removes the old worktree.
//! - A config folder deleted and created again.
//! - A change no file event reports (a write through mmap, see inotify(7)), caught by the
//!   periodic content check.
//!
//! The expected files hashes come from coreutils' `sha256sum`, not from the mixer's code:
//! for a config of one file, `sha256sum config.yaml | sha256sum`.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mixer_tests::{Mixer, header, http_request};

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

/// Allows, tagging answers with `x-version: <version>` (three letters, so two versions have
/// the same length: the mmap test rewrites one in place).
fn allow(version: &str) -> String {
    format!(
        r#"
kind: rule
metadata: {{name: tag, namespace: istio-system}}
spec:
  requestHeaderOperations:
  - name: x-version
    values: ['"{version}"']
"#
    )
}

/// Denies everything with the message "denied by <version>".
fn deny(version: &str) -> String {
    format!(
        r#"
kind: handler
metadata: {{name: deny, namespace: istio-system}}
spec:
  compiledAdapter: denier
  params: {{status: {{code: 16, message: "denied by {version}"}}}}
---
kind: instance
metadata: {{name: nothing, namespace: istio-system}}
spec: {{compiledTemplate: checknothing}}
---
kind: rule
metadata: {{name: deny-all, namespace: istio-system}}
spec:
  actions: [{{handler: deny, instances: [nothing]}}]
"#
    )
}

/// A rule that does not validate.
const BROKEN: &str = r#"
kind: rule
metadata: {name: broken, namespace: istio-system}
spec:
  match: request.hedaers["x"] == "y"
"#;

/// What a check through forward-auth answers: the status and the `x-version` header or the
/// denial message.
fn verdict(mixer: &Mixer) -> Option<(u16, String)> {
    let (status, headers, body) = http_request(mixer.http, "GET", "/check", &[]).ok()?;
    let what = match status {
        200 => header(&headers, "x-version")
            .unwrap_or_default()
            .to_string(),
        _ => body.trim().to_string(),
    };
    Some((status, what))
}

fn allowed(version: &str) -> (u16, String) {
    (200, version.to_string())
}

fn denied(version: &str) -> (u16, String) {
    (401, format!("UNAUTHENTICATED: denied by {version}"))
}

/// The config hash of a config made of `files` (name and text, in load order), from
/// `sha256sum`: the hash of the lines `sha256sum` writes for the files.
fn expected_hash(files: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        let path = dir.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(path, text).expect("write");
    }
    let names: Vec<&str> = files.iter().map(|(n, _)| *n).collect();
    let script = format!("sha256sum {} | sha256sum", names.join(" "));
    let out = Command::new("bash")
        .args(["-c", &script])
        .current_dir(dir.path())
        .output()
        .expect("run sha256sum (coreutils)");
    assert!(out.status.success(), "sha256sum failed: {out:?}");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    format!("sha256:{}", text.split_whitespace().next().expect("a hash"))
}

fn readyz(mixer: &Mixer) -> (u16, String) {
    let (status, _, body) = http_request(mixer.admin, "GET", "/readyz", &[]).expect("readyz");
    (status, body)
}

/// Polls until checks answer `want` and `/readyz` calls the content `hash` current; returns
/// how long that took from `since`. Fails past `limit`.
fn wait_active(
    mixer: &Mixer,
    want: &(u16, String),
    hash: &str,
    since: Instant,
    limit: Duration,
) -> Duration {
    let hash_line = format!("files_hash: {hash}\n");
    loop {
        let verdict = verdict(mixer);
        let (status, body) = readyz(mixer);
        if verdict.as_ref() == Some(want)
            && status == 200
            && body.contains(&hash_line)
            && body.contains("config: current")
        {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < limit,
            "not active within {limit:?}: checks answer {verdict:?}, want {want:?}; /readyz {status}:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The reload budget the issue sets: a new config decides within a second of the swap.
const WITHIN: Duration = Duration::from_secs(1);

fn start(config: &Path, extra: &[&str]) -> Mixer {
    let mut args = vec!["--config", config.to_str().expect("utf-8 path")];
    args.extend_from_slice(extra);
    let mixer = Mixer::start(binary(), &args);
    mixer.wait_ready(Duration::from_secs(10));
    mixer
}

fn metric(mixer: &Mixer, series: &str) -> f64 {
    mixer.metric(series).unwrap_or(0.0)
}

/// A ConfigMap volume as kubelet writes it.
struct ConfigMapVolume {
    dir: PathBuf,
    serial: u32,
}

impl ConfigMapVolume {
    /// The first projection of `files` (key, text) into `dir`.
    fn create(dir: &Path, files: &[(&str, &str)]) -> ConfigMapVolume {
        let mut volume = ConfigMapVolume {
            dir: dir.to_path_buf(),
            serial: 0,
        };
        volume.update(files);
        volume
    }

    /// One `AtomicWriter.Write`: new timestamped folder with the payload, user-visible
    /// symlinks for new keys, `..data_tmp` renamed over `..data`, old keys' symlinks and
    /// the old folder removed.
    fn update(&mut self, files: &[(&str, &str)]) {
        self.serial += 1;
        // The name's shape from `newTimestampDir`: the UTC time formatted as
        // "..2006_01_02_15_04_05." plus MkdirTemp's random digits.
        let ts = format!(
            "..2026_12_02_01_00_0{}.{}",
            self.serial % 10,
            123_456 + self.serial
        );
        let data = self.dir.join("..data");
        let old = std::fs::read_link(&data).ok();
        std::fs::create_dir(self.dir.join(&ts)).expect("mkdir timestamped");
        for (key, text) in files {
            std::fs::write(self.dir.join(&ts).join(key), text).expect("write payload");
        }
        for (key, _) in files {
            let visible = self.dir.join(key);
            if std::fs::symlink_metadata(&visible).is_err() {
                symlink(Path::new("..data").join(key), &visible).expect("visible symlink");
            }
        }
        let tmp = self.dir.join("..data_tmp");
        symlink(&ts, &tmp).expect("..data_tmp");
        std::fs::rename(&tmp, &data).expect("rename ..data_tmp over ..data");
        if let Some(old) = old {
            let old = self.dir.join(old);
            for entry in std::fs::read_dir(&old).expect("old folder") {
                let key = entry.expect("entry").file_name();
                if !files.iter().any(|(k, _)| *k == key.to_string_lossy()) {
                    std::fs::remove_file(self.dir.join(&key)).expect("remove old key");
                }
            }
            std::fs::remove_dir_all(&old).expect("remove old timestamped folder");
        }
    }
}

#[test]
fn configmap_volume_folder_follows_the_data_swap_and_skips_unchanged_swaps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let v1 = allow("one");
    let mut volume = ConfigMapVolume::create(dir.path(), &[("config.yaml", &v1)]);
    let mixer = start(dir.path(), &[]);
    let since = Instant::now();
    wait_active(
        &mixer,
        &allowed("one"),
        &expected_hash(&[("config.yaml", &v1)]),
        since,
        WITHIN,
    );

    let v2 = deny("two");
    volume.update(&[("config.yaml", &v2)]);
    let since = Instant::now();
    let hash2 = expected_hash(&[("config.yaml", &v2)]);
    let took = wait_active(&mixer, &denied("two"), &hash2, since, WITHIN);
    eprintln!("ConfigMap folder: new config active {took:?} after the swap");

    // The files of the volume, each once: `..data` and the timestamped folder are not
    // read beside the per-file symlink.
    let (_, _, body) = http_request(mixer.admin, "GET", "/config_dump", &[]).expect("dump");
    let dump: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(dump["files_hash"], hash2.as_str());
    assert_eq!(dump["disk"]["state"], "current");
    let names: Vec<&str> = dump["config_files"]
        .as_array()
        .expect("files")
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    assert_eq!(names, ["config.yaml"]);
    assert_eq!(
        metric(
            &mixer,
            &format!(
                r#"mixer_config_info{{files_hash="{hash2}",hash="{}"}}"#,
                dump["config_hash"].as_str().expect("config hash")
            )
        ),
        1.0
    );

    // An update of another key, not YAML: a whole swap, with config.yaml as it was. The
    // watcher sees the events, reads the same content, does not reload.
    let reloads = metric(&mixer, r#"mixer_config_reloads_total{result="success"}"#);
    let events = metric(&mixer, r#"mixer_config_checks_total{trigger="event"}"#);
    volume.update(&[("config.yaml", &v2), ("NOTES.txt", "on call: team-a\n")]);
    assert!(dir.path().join("NOTES.txt").exists());
    let start = Instant::now();
    while metric(&mixer, r#"mixer_config_checks_total{trigger="event"}"#) == events {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the unchanged swap was not seen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        metric(&mixer, r#"mixer_config_reloads_total{result="success"}"#),
        reloads,
        "a swap with the same content reloaded"
    );
    assert_eq!(verdict(&mixer), Some(denied("two")));
    assert!(mixer.terminate().success());
}

#[test]
fn configmap_file_follows_the_data_swap_and_readyz_calls_a_rejected_update_stale() {
    let dir = tempfile::tempdir().expect("tempdir");
    let v1 = allow("one");
    let mut volume = ConfigMapVolume::create(dir.path(), &[("config.yaml", &v1)]);
    // `--config` names one file of the volume: `config.yaml -> ..data/config.yaml`.
    let file = dir.path().join("config.yaml");
    let mixer = start(&file, &[]);
    let hash1 = expected_hash(&[("config.yaml", &v1)]);
    wait_active(&mixer, &allowed("one"), &hash1, Instant::now(), WITHIN);

    let v2 = deny("two");
    volume.update(&[("config.yaml", &v2)]);
    let since = Instant::now();
    let hash2 = expected_hash(&[("config.yaml", &v2)]);
    let took = wait_active(&mixer, &denied("two"), &hash2, since, WITHIN);
    eprintln!("ConfigMap file: new config active {took:?} after the swap");

    // A second update, to show the watch moved to the new timestamped folder.
    let v3 = allow("thr");
    volume.update(&[("config.yaml", &v3)]);
    let since = Instant::now();
    let hash3 = expected_hash(&[("config.yaml", &v3)]);
    wait_active(&mixer, &allowed("thr"), &hash3, since, WITHIN);

    // A rejected update: the older content still decides, and /readyz says so by hash.
    volume.update(&[("config.yaml", BROKEN)]);
    let broken = expected_hash(&[("config.yaml", BROKEN)]);
    let start = Instant::now();
    let body = loop {
        let (status, body) = readyz(&mixer);
        assert_eq!(status, 200, "{body}");
        if body.contains("config: stale") {
            break body;
        }
        assert!(
            start.elapsed() < WITHIN * 2,
            "not stale after a rejected update:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(body.contains(&format!("files_hash: {hash3}\n")), "{body}");
    assert!(body.contains(&broken), "{body}");
    assert!(!body.contains("config: current"), "{body}");
    assert!(body.contains("last reload failed"), "{body}");
    assert_eq!(metric(&mixer, "mixer_config_stale"), 1.0);
    assert_eq!(verdict(&mixer), Some(allowed("thr")));

    // Fixed: current again, the stale mark cleared.
    let v4 = deny("fou");
    volume.update(&[("config.yaml", &v4)]);
    let since = Instant::now();
    let hash4 = expected_hash(&[("config.yaml", &v4)]);
    wait_active(&mixer, &denied("fou"), &hash4, since, WITHIN);
    assert_eq!(metric(&mixer, "mixer_config_stale"), 0.0);
    assert!(mixer.terminate().success());
}

#[test]
fn config_folder_deleted_and_created_again_is_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let folder = dir.path().join("mixer");
    std::fs::create_dir(&folder).expect("mkdir");
    let v1 = allow("one");
    std::fs::write(folder.join("config.yaml"), &v1).expect("write");
    let mixer = start(&folder, &[]);
    wait_active(
        &mixer,
        &allowed("one"),
        &expected_hash(&[("config.yaml", &v1)]),
        Instant::now(),
        WITHIN,
    );

    // Gone for a while: the older content still decides, and /readyz says the files are
    // unreadable rather than current.
    std::fs::remove_dir_all(&folder).expect("rm -r");
    let start = Instant::now();
    loop {
        let (status, body) = readyz(&mixer);
        assert_eq!(status, 200, "{body}");
        if body.contains("config: unreadable") {
            assert!(!body.contains("config: current"), "{body}");
            break;
        }
        assert!(start.elapsed() < WITHIN * 2, "not unreadable:\n{body}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(verdict(&mixer), Some(allowed("one")));
    std::fs::create_dir(&folder).expect("mkdir");
    std::fs::write(folder.join("config.yaml"), &v1).expect("write");
    wait_active(
        &mixer,
        &allowed("one"),
        &expected_hash(&[("config.yaml", &v1)]),
        Instant::now(),
        WITHIN,
    );

    for (round, v) in [deny("two"), allow("thr")].iter().enumerate() {
        std::fs::remove_dir_all(&folder).expect("rm -r");
        std::fs::create_dir(&folder).expect("mkdir");
        std::fs::write(folder.join("config.yaml"), v).expect("write");
        let since = Instant::now();
        let want = if round == 0 {
            denied("two")
        } else {
            allowed("thr")
        };
        let took = wait_active(
            &mixer,
            &want,
            &expected_hash(&[("config.yaml", v)]),
            since,
            WITHIN,
        );
        eprintln!("re-created folder (round {round}): new config active {took:?} after");
    }
    assert!(mixer.terminate().success());
}

#[test]
fn git_sync_link_swapped_to_a_new_worktree_is_followed() {
    let root = tempfile::tempdir().expect("tempdir");
    let worktrees = root.path().join(".worktrees");
    std::fs::create_dir(&worktrees).expect("mkdir");
    // One commit checked out: `.worktrees/<hash>`, the link pointing there relatively.
    let checkout = |hash: &str, files: &[(&str, &str)]| {
        let tree = worktrees.join(hash);
        std::fs::create_dir_all(tree.join("policies")).expect("mkdir");
        for (name, text) in files {
            std::fs::write(tree.join("policies").join(name), text).expect("write");
        }
    };
    let link = root.path().join("current");
    let publish = |hash: &str| {
        let tmp = root.path().join("tmp-link");
        symlink(Path::new(".worktrees").join(hash), &tmp).expect("tmp-link");
        std::fs::rename(&tmp, &link).expect("rename tmp-link over the link");
    };
    let v1 = allow("one");
    checkout("abc123", &[("config.yaml", &v1)]);
    publish("abc123");
    // The config is a folder inside the synced repo, reached through the link.
    let config = link.join("policies");
    let mixer = start(&config, &[]);
    wait_active(
        &mixer,
        &allowed("one"),
        &expected_hash(&[("config.yaml", &v1)]),
        Instant::now(),
        WITHIN,
    );

    let v2 = deny("two");
    checkout("def456", &[("config.yaml", &v2)]);
    publish("def456");
    let since = Instant::now();
    std::fs::remove_dir_all(worktrees.join("abc123")).expect("remove old worktree");
    let took = wait_active(
        &mixer,
        &denied("two"),
        &expected_hash(&[("config.yaml", &v2)]),
        since,
        WITHIN,
    );
    eprintln!("git-sync link swap: new config active {took:?} after the rename");

    // And the link named as the config itself.
    drop(mixer);
    let v3 = allow("thr");
    checkout("0a0b0c", &[("config.yaml", &v3)]);
    let mixer = start(&link, &[]);
    publish("0a0b0c");
    let since = Instant::now();
    std::fs::remove_dir_all(worktrees.join("def456")).expect("remove old worktree");
    // Read from the link's folder, the file is `policies/config.yaml`.
    wait_active(
        &mixer,
        &allowed("thr"),
        &expected_hash(&[("policies/config.yaml", &v3)]),
        since,
        WITHIN,
    );
    assert!(mixer.terminate().success());
}

/// Rewrites `file` in place through a shared mapping, in a Python process that keeps the
/// mapping until it is killed: inotify reports nothing of writes through a mapping
/// (inotify(7), "Limitations and caveats"), and the file's close (an event) comes only when
/// the mapping goes, as the mapping holds the file open. Returns once the bytes are written.
fn rewrite_through_mmap(file: &Path, text: &str) -> Child {
    const SCRIPT: &str = r#"
import mmap, sys, time
path, text = sys.argv[1], sys.argv[2].encode()
with open(path, "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
assert len(m) == len(text), "an in-place rewrite keeps the length"
m[:] = text
m.flush()
print("written", flush=True)
time.sleep(60)
"#;
    let mut child = Command::new("python3")
        .args(["-c", SCRIPT])
        .arg(file)
        .arg(text)
        .stdout(Stdio::piped())
        .spawn()
        .expect("run python3");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read");
    assert_eq!(line.trim(), "written", "the mmap writer failed");
    child
}

/// Ends a process the test started.
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn periodic_check_catches_a_change_no_event_reports() {
    let (v1, v2) = (allow("one"), allow("two"));
    let hash2 = expected_hash(&[("config.yaml", &v2)]);

    // Events only: the mmap write is never applied, which shows it raised no event.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("config.yaml"), &v1).expect("write");
    let events_only = start(dir.path(), &["--config-check-interval", "0s"]);
    let _writer = Reap(rewrite_through_mmap(&dir.path().join("config.yaml"), &v2));
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(verdict(&events_only), Some(allowed("one")));
    let (status, body) = readyz(&events_only);
    // Not called current: the files hold content that was never loaded.
    assert_eq!(status, 200);
    assert!(body.contains("config: pending"), "{body}");
    assert!(body.contains(&hash2), "{body}");
    assert!(events_only.terminate().success());

    // With the periodic check, the same write is applied within one interval.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("config.yaml"), &v1).expect("write");
    let mixer = start(dir.path(), &["--config-check-interval", "1s"]);
    let _writer = Reap(rewrite_through_mmap(&dir.path().join("config.yaml"), &v2));
    let since = Instant::now();
    let took = wait_active(
        &mixer,
        &allowed("two"),
        &hash2,
        since,
        // One interval, and room for a loaded machine.
        Duration::from_millis(2500),
    );
    eprintln!("periodic check (1s): change through mmap active {took:?} after the write");
    assert!(metric(&mixer, r#"mixer_config_checks_total{trigger="interval"}"#) >= 1.0);
    assert!(mixer.terminate().success());

    // `--no-watch` turns the periodic check off too.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("config.yaml"), &v1).expect("write");
    let unwatched = start(
        dir.path(),
        &["--no-watch", "--config-check-interval", "200ms"],
    );
    std::fs::write(dir.path().join("config.yaml"), &v2).expect("write");
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(verdict(&unwatched), Some(allowed("one")));
    assert!(unwatched.terminate().success());
}

/// The `config_hash:` line of `/readyz`.
fn config_hash(mixer: &Mixer) -> String {
    let (_, body) = readyz(mixer);
    body.lines()
        .find_map(|l| l.strip_prefix("config_hash: "))
        .unwrap_or_else(|| panic!("no config_hash in /readyz: {body}"))
        .to_string()
}

/// A file a handler reads (here a listchecker's local list, as for a Wasm module or a
/// `<name>File` secret) is part of the config: changed under a running mixer, it reloads
/// the config as a changed config file does, the config hash changes with it and `/readyz`
/// never calls the old content current meanwhile. The list adapter alone would see the
/// change only at its next refresh, a minute later.
#[test]
fn a_file_a_handler_reads_reloads_like_a_config_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let list = dir.path().join("blocked.txt");
    std::fs::write(&list, "bob\n").expect("write list");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            r#"
kind: handler
metadata: {{name: blocked, namespace: istio-system}}
spec:
  compiledAdapter: listchecker
  params: {{providerUrl: "file://{}", blacklist: true, refreshInterval: 60s, ttl: 300s}}
---
kind: instance
metadata: {{name: user, namespace: istio-system}}
spec:
  compiledTemplate: listentry
  params: {{value: 'request.headers["x-user"] | "nobody"'}}
---
kind: rule
metadata: {{name: blocked, namespace: istio-system}}
spec:
  actions: [{{handler: blocked, instances: [user]}}]
"#,
            list.display()
        ),
    )
    .expect("write config");
    let mixer = start(&config, &[]);
    let status = |user: &str| {
        http_request(mixer.http, "GET", "/check", &[("x-user", user)])
            .expect("forward-auth answers")
            .0
    };
    let before = config_hash(&mixer);
    assert_eq!(status("bob"), 403);
    assert_eq!(status("carol"), 200);
    std::fs::write(&list, "carol\n").expect("rewrite list");
    let since = Instant::now();
    loop {
        if status("carol") == 403 && status("bob") == 200 {
            break;
        }
        assert!(
            since.elapsed() < Duration::from_secs(8),
            "the changed list was not loaded; /readyz: {:?}",
            readyz(&mixer)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status_code, body) = readyz(&mixer);
    assert_eq!(status_code, 200);
    assert!(body.contains("config: current"), "{body}");
    assert_ne!(config_hash(&mixer), before);
}

/// Denies requests whose `x-user` is bob, with `message`.
fn deny_bob(message: &str) -> String {
    format!(
        r#"
kind: handler
metadata: {{name: deny-bob, namespace: istio-system}}
spec:
  compiledAdapter: denier
  params: {{status: {{code: 7, message: "{message}"}}}}
---
kind: instance
metadata: {{name: nothing, namespace: istio-system}}
spec: {{compiledTemplate: checknothing}}
---
kind: rule
metadata: {{name: deny-bob, namespace: istio-system}}
spec:
  match: request.headers["x-user"] == "bob"
  actions: [{{handler: deny-bob, instances: [nothing]}}]
"#
    )
}

/// A file rewritten in place (`cat > file`, `kubectl cp`, an editor that writes over the
/// file) by a writer that pauses part way: the handler and the instance first, the rule
/// after the pause. Read in the pause, the file denies nobody; that half is never loaded,
/// bob is denied throughout, and the whole new content loads once the writer closes it.
#[test]
fn a_file_written_in_place_with_pauses_is_loaded_whole_or_not_at_all() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("deny-bob.yaml");
    std::fs::write(&file, deny_bob("no bob (one)")).expect("write");
    let mixer = start(dir.path(), &[]);
    let bob = || {
        http_request(mixer.http, "GET", "/check", &[("x-user", "bob")])
            .map(|(status, _, body)| (status, body.trim().to_string()))
            .expect("forward-auth answers")
    };
    assert_eq!(bob(), (403, "PERMISSION_DENIED: no bob (one)".to_string()));
    for (round, pause) in [(2, 400), (3, 1000)] {
        let text = deny_bob(&format!("no bob ({round})"));
        let cut = text.find("---\nkind: rule").expect("the rule");
        let writer = {
            let file = file.clone();
            std::thread::spawn(move || {
                let mut f = std::fs::File::create(&file).expect("open for writing");
                f.write_all(&text.as_bytes()[..cut]).expect("first part");
                f.flush().expect("flush");
                std::thread::sleep(Duration::from_millis(pause));
                f.write_all(&text.as_bytes()[cut..]).expect("second part");
            })
        };
        let want = (403, format!("PERMISSION_DENIED: no bob ({round})"));
        let since = Instant::now();
        let mut checks = 0;
        loop {
            let answer = bob();
            checks += 1;
            assert_eq!(
                answer.0,
                403,
                "bob was let through {:?} into a write pausing {pause} ms (check {checks}): the half-written file was loaded",
                since.elapsed()
            );
            if answer == want {
                break;
            }
            assert!(
                since.elapsed() < Duration::from_millis(pause) + Duration::from_secs(3),
                "the finished file was not loaded: {answer:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        writer.join().expect("writer");
        eprintln!(
            "write pausing {pause} ms: loaded {:?} after it began, {checks} checks all denied",
            since.elapsed()
        );
    }
}

//! Snapshot swaps under concurrent evaluation, and reload from watched files.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use mixer_config::ConfigOptions;
use mixer_model::AttributeBag;
use mixer_runtime::{ConfigOrigin, Runtime, RuntimeMetrics, RuntimeOptions};

fn version(v: u32) -> String {
    format!(
        r#"
kind: handler
metadata: {{name: deny, namespace: istio-system}}
spec: {{compiledAdapter: denier, params: {{status: {{code: 7, message: "v{v}"}}}}}}
---
kind: instance
metadata: {{name: nothing, namespace: istio-system}}
spec: {{compiledTemplate: checknothing}}
---
kind: rule
metadata: {{name: deny-all, namespace: istio-system}}
spec:
  actions: [{{handler: deny, instances: [nothing]}}]
  requestHeaderOperations:
  - name: x-version
    values: ['"v{v}"']
"#
    )
}

fn runtime(dir: &std::path::Path) -> Arc<Runtime> {
    Arc::new(Runtime::new(
        ConfigOrigin::Path(dir.to_path_buf()),
        registry(),
        ConfigOptions::default(),
        RuntimeOptions::default(),
        RuntimeMetrics::unregistered(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_checks_never_see_half_a_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("c.yaml");
    std::fs::write(&file, version(0)).expect("write");
    let rt = runtime(dir.path());
    rt.reload().expect("valid");
    let stop = Arc::new(AtomicBool::new(false));
    let checks = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (rt, stop, checks) = (rt.clone(), stop.clone(), checks.clone());
        workers.push(tokio::spawn(async move {
            let mut seen = std::collections::BTreeSet::new();
            while !stop.load(Ordering::Relaxed) {
                let snap = rt.snapshot();
                let bag = AttributeBag::new(snap.vocabulary().clone());
                let v = decide(&snap, &bag).await.expect("decided");
                let header = v
                    .request_header_ops
                    .first()
                    .map(|h| h.value.clone())
                    .unwrap_or_default();
                assert_eq!(v.status.message, header, "verdict mixes two configs");
                seen.insert(header);
                checks.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
            seen
        }));
    }
    for v in 1..=40 {
        std::fs::write(&file, version(v)).expect("write");
        let rt = rt.clone();
        tokio::task::spawn_blocking(move || rt.reload())
            .await
            .expect("join")
            .expect("valid");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut versions = std::collections::BTreeSet::new();
    for w in workers {
        versions.extend(w.await.expect("worker ok"));
    }
    assert!(checks.load(Ordering::Relaxed) > 40);
    assert!(versions.len() > 1, "workers saw only {versions:?}");
    assert_eq!(rt.snapshot().id, 41);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watched_files_reload_and_invalid_ones_keep_the_old_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("c.yaml");
    std::fs::write(&file, version(1)).expect("write");
    let rt = runtime(dir.path());
    rt.reload().expect("valid");
    let _watch =
        mixer_runtime::watch(rt.clone(), dir.path(), Duration::from_millis(100)).expect("watch");
    let first = rt.snapshot().id;

    std::fs::write(&file, version(2)).expect("write");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while rt.snapshot().id == first {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no reload after a file change"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let snap = rt.snapshot();
    let v = decide(&snap, &AttributeBag::new(snap.vocabulary().clone()))
        .await
        .expect("decided");
    assert_eq!(v.status.message, "v2");

    let good = rt.snapshot().id;
    std::fs::write(
        &file,
        "kind: rule\nmetadata: {name: x}\nspec: {match: nope.nope == 1}\n",
    )
    .expect("write");
    while rt.last_error().is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "invalid config not reported"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(rt.snapshot().id, good, "the good snapshot stays active");
    assert_eq!(rt.metrics().reload_failures.get(), 1);
    assert!(rt.is_ready());
}

/// What a watcher's look at the files does, content by content: the same content is never
/// reloaded, a rejected content is not retried (nor counted again) until it changes, and
/// going back to the active content after a rejected one clears the failure.
#[test]
fn reload_if_changed_compares_content_with_what_was_last_tried() {
    use mixer_runtime::{CheckOutcome, DiskState};
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("c.yaml");
    std::fs::write(&file, version(1)).expect("write");
    let rt = runtime(dir.path());
    let first = rt.reload().expect("valid");
    assert_eq!(rt.disk_state(), DiskState::Current);
    let active = rt.active_content().expect("content").hash;

    // Written again, byte for byte: nothing to do.
    std::fs::write(&file, version(1)).expect("write");
    assert_eq!(rt.reload_if_changed(), CheckOutcome::Unchanged);
    assert_eq!(rt.snapshot().id, first);

    std::fs::write(
        &file,
        "kind: rule\nmetadata: {name: x}\nspec: {match: nope.nope == 1}\n",
    )
    .expect("write");
    assert!(matches!(rt.disk_state(), DiskState::Pending { .. }));
    assert_eq!(rt.reload_if_changed(), CheckOutcome::Rejected);
    assert!(matches!(rt.disk_state(), DiskState::Stale { .. }));
    assert_eq!(rt.reload_if_changed(), CheckOutcome::Unchanged);
    assert_eq!(
        rt.metrics().reload_failures.get(),
        1,
        "retried the same content"
    );
    assert_eq!(rt.metrics().config_stale.get(), 1);
    assert_eq!(rt.active_content().expect("content").hash, active);

    // Back to what is active: not stale any more, no reload needed.
    std::fs::write(&file, version(1)).expect("write");
    assert_eq!(rt.reload_if_changed(), CheckOutcome::Unchanged);
    assert_eq!(rt.disk_state(), DiskState::Current);
    assert!(rt.last_error().is_none());
    assert_eq!(rt.metrics().config_stale.get(), 0);
    assert_eq!(rt.snapshot().id, first);

    std::fs::write(&file, version(2)).expect("write");
    assert!(matches!(rt.reload_if_changed(), CheckOutcome::Reloaded(id) if id > first));
    assert_ne!(rt.active_content().expect("content").hash, active);

    // Gone: unreadable, reported once.
    std::fs::remove_file(&file).expect("rm");
    std::fs::remove_dir(dir.path()).expect("rmdir");
    assert!(matches!(rt.disk_state(), DiskState::Unreadable { .. }));
    assert_eq!(rt.reload_if_changed(), CheckOutcome::Rejected);
    assert_eq!(rt.reload_if_changed(), CheckOutcome::Unchanged);
    assert_eq!(rt.metrics().reload_failures.get(), 2);
}

/// An adapter whose handlers need a file (as a handler reading a certificate or a secret
/// file does): building fails until the file named by `params.file` exists.
struct NeedsFile;

static NEEDS_FILE: mixer_adapter_api::AdapterInfo = mixer_adapter_api::AdapterInfo {
    name: "needsfile",
    description: "needs a file at build",
    templates: &[mixer_model::Template::CheckNothing],
    cacheable: false,
    stability: mixer_adapter_api::Stability::Alpha,
};

impl mixer_adapter_api::Adapter for NeedsFile {
    type Config = mixer_adapter_api::host::Params;
    type Compiled = mixer_adapter_api::host::Params;

    fn info(&self) -> &mixer_adapter_api::AdapterInfo {
        &NEEDS_FILE
    }
    fn compile(
        &self,
        params: mixer_adapter_api::host::Params,
    ) -> Result<mixer_adapter_api::host::Params, Vec<mixer_adapter_api::ParamError>> {
        Ok(params)
    }
    fn build(
        &self,
        params: &mixer_adapter_api::host::Params,
        _: &mixer_adapter_api::BuildContext,
    ) -> Result<Arc<dyn mixer_adapter_api::Handler>, mixer_adapter_api::AdapterError> {
        let file = params["file"].as_str().unwrap_or_default();
        if std::path::Path::new(file).exists() {
            Ok(Arc::new(mixer_adapter_noop::NoopHandler))
        } else {
            Err(mixer_adapter_api::AdapterError::permanent(
                mixer_adapter_api::ErrorKind::Internal,
                format!("{file}: not there"),
            ))
        }
    }
}

/// A content whose handlers failed to build is tried again at every look, unchanged: what
/// failed (a file a handler reads) is not in the config's text.
#[test]
fn a_build_failure_is_retried_with_the_same_content() {
    use mixer_runtime::CheckOutcome;
    let dir = tempfile::tempdir().expect("tempdir");
    let needed = dir.path().join("ca.pem.later");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).expect("mkdir");
    std::fs::write(
        config.join("c.yaml"),
        format!(
            r#"
kind: handler
metadata: {{name: h, namespace: istio-system}}
spec: {{compiledAdapter: needsfile, params: {{file: "{}"}}}}
---
kind: instance
metadata: {{name: nothing, namespace: istio-system}}
spec: {{compiledTemplate: checknothing}}
---
kind: rule
metadata: {{name: r, namespace: istio-system}}
spec:
  actions: [{{handler: h, instances: [nothing]}}]
"#,
            needed.display()
        ),
    )
    .expect("write");
    let mut registry = registry();
    registry.register(Arc::new(NeedsFile));
    let rt = Runtime::new(
        ConfigOrigin::Path(config.clone()),
        registry,
        ConfigOptions::default(),
        RuntimeOptions::default(),
        RuntimeMetrics::unregistered(),
    );
    assert!(rt.reload().is_err());
    assert_eq!(rt.reload_if_changed(), CheckOutcome::Rejected);
    assert!(!rt.is_ready());
    std::fs::write(&needed, "cert").expect("write");
    assert!(matches!(rt.reload_if_changed(), CheckOutcome::Reloaded(_)));
    assert!(rt.is_ready());
    assert_eq!(rt.reload_if_changed(), CheckOutcome::Unchanged);
}

/// A content that removes rules or handlers loads only once it has stayed as it is for
/// `Settle::before_removal`: one that changes again within it is `Unsettled` (nothing loaded
/// or recorded), one that holds is loaded, logged and kept for `/readyz`.
#[test]
fn a_removal_loads_only_once_it_has_settled() {
    use mixer_runtime::{CheckOutcome, Settle};
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("c.yaml");
    std::fs::write(&file, version(1)).expect("write");
    let rt = runtime(dir.path());
    let first = rt.reload().expect("valid");
    let settle = Settle {
        between_reads: Duration::from_millis(20),
        before_removal: Duration::from_millis(400),
    };
    // The rule and the handler gone: a writer that has not got to them yet looks the same.
    let removing = "kind: instance\nmetadata: {name: nothing, namespace: istio-system}\nspec: {compiledTemplate: checknothing}\n";
    std::fs::write(&file, removing).expect("write");
    let writer = {
        let file = file.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            std::fs::write(&file, version(2)).expect("write");
        })
    };
    assert_eq!(rt.reload_if_settled(settle), CheckOutcome::Unsettled);
    writer.join().expect("writer");
    assert_eq!(rt.snapshot().id, first);
    assert!(rt.last_error().is_none());
    assert_eq!(rt.last_removal(), None);
    assert_eq!(rt.metrics().reload_failures.get(), 0);

    // The same removal, left alone: loaded after the window, and noted.
    std::fs::write(&file, removing).expect("write");
    let since = std::time::Instant::now();
    assert!(matches!(
        rt.reload_if_settled(settle),
        CheckOutcome::Reloaded(_)
    ));
    assert!(since.elapsed() >= settle.before_removal);
    let note = rt.last_removal().expect("the removal is noted");
    assert!(
        note.contains("rules deny-all.rule.istio-system and handlers deny.handler.istio-system"),
        "{note}"
    );
}

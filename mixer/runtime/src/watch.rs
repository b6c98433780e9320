//! Reload on file change, with debounce.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};

use crate::store::Runtime;

/// Keeps a watch alive; dropping it stops watching.
pub struct WatchGuard {
    _watcher: notify::RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Watches `path` (a file or a directory) and reloads `runtime` after changes settle for
/// `debounce`. Editors write files in several steps; the debounce makes that one reload.
pub fn watch(runtime: Arc<Runtime>, path: &Path, debounce: Duration) -> notify::Result<WatchGuard> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    // A single file is watched through its folder; other files there (a log the mixer
    // writes, say) must not trigger reloads.
    let only: Option<std::ffi::OsString> = (!path.is_dir())
        .then(|| path.file_name().map(ToOwned::to_owned))
        .flatten();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event
            && !matches!(event.kind, EventKind::Access(_))
            && only.as_ref().is_none_or(|name| {
                event
                    .paths
                    .iter()
                    .any(|p| p.file_name() == Some(name.as_os_str()))
            })
        {
            let _ = tx.send(());
        }
    })?;
    // A single file is watched through its folder: editors replace files by renaming.
    let (target, mode): (PathBuf, RecursiveMode) = if path.is_dir() {
        (path.to_path_buf(), RecursiveMode::Recursive)
    } else {
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        (parent.to_path_buf(), RecursiveMode::NonRecursive)
    };
    watcher.watch(&target, mode)?;
    let task = tokio::spawn(async move {
        while rx.recv().await.is_some() {
            // Wait until no event has come for `debounce`.
            loop {
                match tokio::time::timeout(debounce, rx.recv()).await {
                    Ok(Some(())) => continue,
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            let rt = runtime.clone();
            // Validation and handler builds are CPU work; keep them off the async workers.
            let _ = tokio::task::spawn_blocking(move || rt.reload()).await;
        }
    });
    Ok(WatchGuard {
        _watcher: watcher,
        task,
    })
}

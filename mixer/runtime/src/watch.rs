//! Reload on file change: file events, debounced, and a periodic look at the content.
//!
//! The config path is rarely a plain file edited in place. Kubernetes mounts a ConfigMap as
//! a folder of symlinks (`config.yaml -> ..data/config.yaml`, `..data -> ..2026_12_02_…`)
//! and updates it by writing a new timestamped folder and renaming a new `..data` symlink
//! over the old one; git-sync swaps a `current -> rev-…` symlink the same way; operators
//! delete a folder and create it again. A watch on the file's or folder's own inode sees a
//! delete and then nothing more, as the kernel's inotify watches inodes, not names.
//!
//! So the watcher watches names: it resolves the config path one component at a time and
//! watches the folder holding each name that matters (the path's last component, every
//! symlink on the way and everything reached through one), plus the config folder itself,
//! recursively. After every burst of events it resolves the path again and moves its
//! watches to what the names point at now. Whatever prompted it, it then compares the
//! content with what was last tried ([`Runtime::reload_if_changed`]): a swap that leaves
//! the content as it was does not reload. A periodic look catches what events miss
//! (writes through `mmap`, which inotify does not report; an overflowed event queue;
//! network filesystems).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};

use crate::content::{CheckOutcome, Settle};
use crate::runtime::Runtime;

/// The longest a burst of events delays the check after its first event.
const MAX_DEBOUNCE: Duration = Duration::from_secs(2);

/// Symlinks followed before giving up, as Linux's `MAXSYMLINKS`.
const MAX_SYMLINKS: usize = 40;

/// How the watcher reacts.
#[derive(Clone, Copy, Debug)]
pub struct WatchOptions {
    /// Quiet time after the last event before the files are read: writers touch several
    /// files in several steps, and that should be one reload.
    pub debounce: Duration,
    /// How often the content is read and compared even without events; `None` for never.
    pub check_interval: Option<Duration>,
    /// How long a changed content must stay unchanged before it loads.
    pub settle: Settle,
}

/// Keeps a watch alive; dropping it stops watching.
pub struct WatchGuard {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Watches `path` (a file or a directory) and reloads `runtime` after changes settle for
/// `debounce`; no periodic check.
pub fn watch(runtime: Arc<Runtime>, path: &Path, debounce: Duration) -> notify::Result<WatchGuard> {
    watch_with(
        runtime,
        path,
        WatchOptions {
            debounce,
            check_interval: None,
            settle: Settle::DEFAULT,
        },
    )
}

/// What one file event tells the watcher.
#[derive(Debug)]
enum Seen {
    /// Events may have been lost: look at everything.
    Lost,
    /// These files were written to, and may still be open for writing.
    Written(Vec<PathBuf>),
    /// These files were closed by a writer.
    Closed(Vec<PathBuf>),
    /// Anything else on these paths (created, removed, renamed, attributes).
    Changed(Vec<PathBuf>),
}

impl Seen {
    fn of(event: notify::Result<notify::Event>) -> Option<Seen> {
        use notify::event::{AccessKind, AccessMode, ModifyKind};
        let event = match event {
            Ok(event) => event,
            Err(_) => return Some(Seen::Lost),
        };
        if event.need_rescan() {
            return Some(Seen::Lost);
        }
        Some(match event.kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => Seen::Closed(event.paths),
            // Opens and reads (the mixer's own, among others) change nothing.
            EventKind::Access(_) => return None,
            EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Any) => Seen::Written(event.paths),
            _ => Seen::Changed(event.paths),
        })
    }

    fn paths(&self) -> Option<&[PathBuf]> {
        match self {
            Seen::Lost => None,
            Seen::Written(p) | Seen::Closed(p) | Seen::Changed(p) => Some(p),
        }
    }
}

/// Files written in place and not closed yet, with when each was last written.
///
/// `cat > file`, `kubectl cp`, many editors and network filesystems write a file in place,
/// in pieces, with pauses; read in a pause, the file holds its first part only, and a rule
/// that is not written yet looks removed (a deny rule that fails open). A writer closes the
/// file when it is done: until then the content is not loaded, however long the pause
/// (up to [`WRITE_WAIT`] without a write, for a writer that never closes). An atomic
/// rename (a ConfigMap update, git-sync, `mv`) writes its files elsewhere and closes them
/// before the swap, so it is not held back.
#[derive(Debug, Default)]
struct Writers(BTreeMap<PathBuf, tokio::time::Instant>);

/// The longest a file written in place and left open holds a reload back after its last write.
const WRITE_WAIT: Duration = Duration::from_secs(10);

impl Writers {
    fn note(&mut self, seen: &Seen, plan: &Plan) {
        let now = tokio::time::Instant::now();
        match seen {
            Seen::Written(paths) => {
                for p in paths
                    .iter()
                    .filter(|p| plan.concerns(Some(std::slice::from_ref(p))))
                {
                    self.0.insert(p.clone(), now);
                }
            }
            Seen::Closed(paths) => {
                for p in paths {
                    self.0.remove(p);
                }
            }
            Seen::Changed(paths) => {
                // Removed or renamed away: whatever is still written there is not config.
                for p in paths {
                    if std::fs::symlink_metadata(p).is_err() {
                        self.0.remove(p);
                    }
                }
            }
            Seen::Lost => {}
        }
    }

    /// When the oldest pending write stops holding reloads back; `None` when none does.
    fn until(&mut self) -> Option<tokio::time::Instant> {
        let now = tokio::time::Instant::now();
        self.0.retain(|_, last| *last + WRITE_WAIT > now);
        self.0.values().map(|last| *last + WRITE_WAIT).max()
    }
}

/// Watches `path` (a file or a directory, each possibly reached through symlinks) and
/// reloads `runtime` when its content changes, as the module docs describe.
pub fn watch_with(
    runtime: Arc<Runtime>,
    path: &Path,
    options: WatchOptions,
) -> notify::Result<WatchGuard> {
    let path = absolute(path);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Seen>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Some(seen) = Seen::of(event) {
            let _ = tx.send(seen);
        }
    })?;
    let mut plan = Plan::default();
    // A folder that cannot be watched (no read permission on a parent, the inotify watch
    // limit) is not fatal: the periodic check still sees changes there.
    plan.arm(
        &mut watcher,
        Plan::of(&path).with_files(&runtime.input_paths()),
    );
    let task = tokio::spawn(async move {
        let metrics = runtime.metrics().clone();
        let mut interval = options.check_interval.map(|every| {
            let mut i = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            i
        });
        let mut writers = Writers::default();
        // A look that found the content still changing looks again this late.
        let mut again: Option<tokio::time::Instant> = None;
        loop {
            let trigger = tokio::select! {
                seen = rx.recv() => match seen {
                    None => return,
                    Some(seen) if !plan.concerns(seen.paths()) => continue,
                    Some(seen) => {
                        writers.note(&seen, &plan);
                        // Wait until no event that matters has come for `debounce`, and no
                        // longer than `MAX_DEBOUNCE` from the first (a file written without
                        // pause in the config folder). Events that do not matter (the
                        // config folder's parent is watched too, and may be as busy as
                        // /tmp) neither delay nor end the wait.
                        let started = tokio::time::Instant::now();
                        let mut quiet_at = started + options.debounce;
                        let last = started + options.debounce.max(MAX_DEBOUNCE);
                        loop {
                            match tokio::time::timeout_at(quiet_at.min(last), rx.recv()).await {
                                Ok(Some(seen)) if plan.concerns(seen.paths()) => {
                                    writers.note(&seen, &plan);
                                    quiet_at = tokio::time::Instant::now() + options.debounce;
                                }
                                Ok(Some(_)) => {}
                                Ok(None) => return,
                                Err(_) => break,
                            }
                        }
                        "event"
                    }
                },
                _ = tick(&mut interval) => "interval",
                _ = sleep_until(again) => "event",
            };
            again = None;
            // A file still open for writing holds the look back until its writer closes it.
            while let Some(until) = writers.until() {
                match tokio::time::timeout_at(until, rx.recv()).await {
                    Ok(Some(seen)) if plan.concerns(seen.paths()) => writers.note(&seen, &plan),
                    Ok(Some(_)) => {}
                    Ok(None) => return,
                    Err(_) => {
                        tracing::warn!(
                            "config: a file written in place was not closed within {WRITE_WAIT:?} of its last write; loading it as it is"
                        );
                    }
                }
            }
            // Move the watches to what the names point at now, before reading: what is
            // written after this is seen by the new watches.
            plan.arm(
                &mut watcher,
                Plan::of(&path).with_files(&runtime.input_paths()),
            );
            metrics.config_checks.with_label_values(&[trigger]).inc();
            let rt = runtime.clone();
            let settle = options.settle;
            // Validation and handler builds are CPU work; keep them off the async workers.
            let outcome = tokio::task::spawn_blocking(move || rt.reload_if_settled(settle)).await;
            if let Ok(CheckOutcome::Unsettled) = outcome {
                again = Some(tokio::time::Instant::now() + options.debounce);
            } else {
                // The active config may read other files now.
                plan.arm(
                    &mut watcher,
                    Plan::of(&path).with_files(&runtime.input_paths()),
                );
            }
        }
    });
    Ok(WatchGuard { task })
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn tick(interval: &mut Option<tokio::time::Interval>) {
    match interval {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// What is watched: folders, each with the names in it that matter (or all of it, and
/// below, for the config folder), and the inode each watch was placed on.
#[derive(Debug, Default, PartialEq, Eq)]
struct Plan {
    /// Folders watched alone, with the names in them that matter.
    names: BTreeMap<PathBuf, BTreeSet<OsString>>,
    /// The config folder, watched recursively, when the path leads to one.
    tree: Option<PathBuf>,
    /// The inode (device, number) each watched path is on, to tell a folder re-created
    /// under the same name.
    inodes: BTreeMap<PathBuf, Option<(u64, u64)>>,
}

impl Plan {
    /// The watches `path` needs as it resolves now.
    fn of(path: &Path) -> Plan {
        let mut plan = Plan::default();
        let (hops, resolved) = resolve(path);
        for hop in hops {
            if let (Some(parent), Some(name)) = (hop.parent(), hop.file_name()) {
                plan.names
                    .entry(parent.to_path_buf())
                    .or_default()
                    .insert(name.to_owned());
            }
        }
        if resolved.as_deref().is_some_and(Path::is_dir) {
            // Watched under the name given, so events inside come with paths below it
            // whichever folder the name points at.
            plan.tree = Some(path.to_path_buf());
        }
        let watched = plan.names.keys().chain(plan.tree.iter());
        plan.inodes = watched.map(|p| (p.clone(), inode(p))).collect();
        plan
    }

    /// The plan, with the names that lead to each of `files` (the files handlers read)
    /// watched too.
    fn with_files(mut self, files: &[PathBuf]) -> Plan {
        for file in files {
            for hop in resolve(&absolute(file)).0 {
                if let (Some(parent), Some(name)) = (hop.parent(), hop.file_name()) {
                    self.names
                        .entry(parent.to_path_buf())
                        .or_default()
                        .insert(name.to_owned());
                }
            }
        }
        let watched = self.names.keys().chain(self.tree.iter());
        self.inodes = watched.map(|p| (p.clone(), inode(p))).collect();
        self
    }

    /// Whether an event on `paths` (`None`: events were lost) may change the config.
    fn concerns(&self, paths: Option<&[PathBuf]>) -> bool {
        let Some(paths) = paths else { return true };
        paths.iter().any(|p| {
            self.tree.as_ref().is_some_and(|t| p.starts_with(t))
                || match (p.parent(), p.file_name()) {
                    (Some(parent), Some(name)) => self
                        .names
                        .get(parent)
                        .is_some_and(|names| names.contains(name)),
                    _ => false,
                }
        })
    }

    /// Replaces the watches of `self` with those of `next` where they differ (a path no
    /// longer needed, or now on another inode). A path that does not exist yet is skipped:
    /// its parent's watch sees it appear. A watch that fails is logged, and tried again at
    /// the next arming.
    fn arm(&mut self, watcher: &mut impl Watcher, mut next: Plan) {
        let mode = |plan: &Plan, p: &Path| {
            if plan.tree.as_deref() == Some(p) {
                RecursiveMode::Recursive
            } else {
                RecursiveMode::NonRecursive
            }
        };
        for (p, inode) in &self.inodes {
            if next.inodes.get(p) != Some(inode) || mode(self, p) != mode(&next, p) {
                // Gone already when its folder was deleted: nothing to undo.
                let _ = watcher.unwatch(p);
            }
        }
        let mut failed = Vec::new();
        for (p, inode) in &next.inodes {
            let same = self.inodes.get(p) == Some(inode) && mode(self, p) == mode(&next, p);
            if inode.is_some()
                && !same
                && let Err(e) = watcher.watch(p, mode(&next, p))
            {
                tracing::warn!(
                    "not watching {} (changes there are seen by the periodic check): {e}",
                    p.display()
                );
                failed.push(p.clone());
            }
        }
        for p in failed {
            // Recorded as not watched, so the next arming tries again.
            next.inodes.insert(p, None);
        }
        *self = next;
    }
}

fn inode(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Resolves `path` as the kernel does, one component at a time, and returns every name on
/// the way whose change would change what the path opens: its last component, each
/// symlink, and each component reached through a symlink; and where it leads (`None` if
/// some name does not exist, or the symlinks loop).
fn resolve(path: &Path) -> (Vec<PathBuf>, Option<PathBuf>) {
    /// One component still to walk, and whether its name matters.
    enum Part {
        Root,
        Up,
        Name(OsString, bool),
    }
    let parts = |p: &Path, last_matters: bool| -> Vec<Part> {
        let count = p.components().count();
        p.components()
            .enumerate()
            .filter_map(|(i, c)| match c {
                Component::RootDir => Some(Part::Root),
                Component::ParentDir => Some(Part::Up),
                Component::Normal(n) => {
                    Some(Part::Name(n.to_owned(), last_matters || i + 1 == count))
                }
                Component::CurDir | Component::Prefix(_) => None,
            })
            .collect()
    };
    let mut todo: VecDeque<Part> = parts(path, false).into();
    let mut hops = Vec::new();
    let mut at = PathBuf::from("/");
    let mut links = 0;
    while let Some(part) = todo.pop_front() {
        let (name, matters) = match part {
            Part::Root => {
                at = PathBuf::from("/");
                continue;
            }
            Part::Up => {
                at.pop();
                continue;
            }
            Part::Name(name, matters) => (name, matters),
        };
        let next = at.join(&name);
        let Ok(meta) = std::fs::symlink_metadata(&next) else {
            // Missing: its folder's watch sees it appear.
            hops.push(next);
            return (hops, None);
        };
        if !meta.file_type().is_symlink() {
            if matters {
                hops.push(next.clone());
            }
            at = next;
            continue;
        }
        hops.push(next.clone());
        links += 1;
        let Ok(target) = std::fs::read_link(&next) else {
            return (hops, None);
        };
        if links > MAX_SYMLINKS {
            return (hops, None);
        }
        // The target's components come next, relative to the link's folder (`at`); each
        // of them matters, as a change to any changes what the link leads to.
        for part in parts(&target, true).into_iter().rev() {
            todo.push_front(part);
        }
    }
    (hops, Some(at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_configmap_file_resolves_through_data_and_the_timestamped_folder() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let ts = root.join("..2026_12_02_01_00_00.123");
        std::fs::create_dir(&ts).expect("mkdir");
        std::fs::write(ts.join("config.yaml"), "x").expect("write");
        symlink("..2026_12_02_01_00_00.123", root.join("..data")).expect("link");
        symlink("..data/config.yaml", root.join("config.yaml")).expect("link");

        let (hops, resolved) = resolve(&root.join("config.yaml"));
        assert_eq!(
            hops,
            [
                root.join("config.yaml"),
                root.join("..data"),
                root.join("..2026_12_02_01_00_00.123"),
                ts.join("config.yaml"),
            ]
        );
        assert_eq!(resolved, Some(ts.join("config.yaml")));

        let plan = Plan::of(&root.join("config.yaml"));
        assert_eq!(plan.tree, None);
        assert!(plan.concerns(Some(&[root.join("..data_tmp"), root.join("..data")])));
        assert!(!plan.concerns(Some(&[root.join("mixer.log")])));
        assert!(plan.concerns(None));
    }

    #[test]
    fn a_symlinked_folder_is_watched_under_its_name_and_its_parent_for_the_swap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir(root.join("rev-abc")).expect("mkdir");
        symlink("rev-abc", root.join("current")).expect("link");
        let plan = Plan::of(&root.join("current"));
        assert_eq!(plan.tree, Some(root.join("current")));
        assert!(plan.concerns(Some(&[root.join("current/a.yaml")])));
        assert!(plan.concerns(Some(&[root.join("current")])));
        assert!(!plan.concerns(Some(&[root.join("rev-old")])));

        let (hops, resolved) = resolve(&root.join("missing/config.yaml"));
        assert_eq!(resolved, None);
        assert_eq!(hops, [root.join("missing")]);
        symlink("loop", root.join("loop")).expect("link");
        assert_eq!(resolve(&root.join("loop")).1, None);
    }
}

//! Keeps a [`PodCache`] current from the API server: a list and then a watch of pods,
//! ReplicaSets and ReplicationControllers in all namespaces (what Istio 1.4's informers
//! watched), with `kube`'s watcher (relist on a lost watch, backoff on errors).
//!
//! Requests never wait for the API server: they read the cache. When the API server is down
//! or slow the cache keeps what it had; the watcher retries, `mixer_kubernetesenv_*` metrics
//! count the failures and the handler's readiness note says since when.
//!
//! One watch serves every handler with the same cluster access and refresh (as Istio's
//! builder shared its controllers): a config reload that rebuilds the handler does not
//! relist the cluster, and a cluster is watched once however many handlers name it.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Config, Resource};
use serde::de::DeserializeOwned;

use crate::cache::{OwnerKind, PodCache};

/// Where the cluster is reached.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ClusterAccess {
    /// The pod's service account: token and CA under
    /// `/var/run/secrets/kubernetes.io/serviceaccount/`, the API server from
    /// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`.
    InCluster,
    /// A kubeconfig file (its current context).
    Kubeconfig(PathBuf),
}

impl std::fmt::Display for ClusterAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClusterAccess::InCluster => f.write_str("in-cluster config"),
            ClusterAccess::Kubeconfig(path) => write!(f, "kubeconfig {}", path.display()),
        }
    }
}

/// The watched kinds, for metrics and notes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchedKind {
    /// `v1` pods.
    Pods = 0,
    /// `apps/v1` replicasets.
    ReplicaSets = 1,
    /// `v1` replicationcontrollers.
    ReplicationControllers = 2,
}

impl WatchedKind {
    /// Every watched kind.
    pub const ALL: [WatchedKind; 3] = [
        WatchedKind::Pods,
        WatchedKind::ReplicaSets,
        WatchedKind::ReplicationControllers,
    ];

    /// The API resource name.
    pub fn name(self) -> &'static str {
        match self {
            WatchedKind::Pods => "pods",
            WatchedKind::ReplicaSets => "replicasets",
            WatchedKind::ReplicationControllers => "replicationcontrollers",
        }
    }
}

#[derive(Debug, Default)]
struct Health {
    /// Each kind has been listed completely at least once.
    synced: [bool; 3],
    /// The last call to the API server failed, with this, since then.
    failing: Option<(String, SystemTime)>,
}

/// The cache and what is known about its freshness, shared by the watch tasks and handlers.
#[derive(Debug)]
pub struct Shared {
    /// The pods, read on every request.
    pub cache: RwLock<PodCache>,
    access: ClusterAccess,
    health: Mutex<Health>,
    errors: [AtomicU64; 3],
}

impl Shared {
    fn new(access: ClusterAccess) -> Shared {
        Shared {
            cache: RwLock::new(PodCache::new()),
            access,
            health: Mutex::new(Health::default()),
            errors: Default::default(),
        }
    }

    /// A cache filled by the caller, never watched, counted as listed (benches, tests).
    pub fn fixed(cache: PodCache) -> Shared {
        let shared = Shared::new(ClusterAccess::InCluster);
        *shared.write() = cache;
        shared.health().synced = [true; 3];
        shared
    }

    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, PodCache> {
        self.cache.write().unwrap_or_else(|e| e.into_inner())
    }

    fn ok(&self) {
        let mut health = self.health();
        if health.failing.take().is_some() {
            tracing::info!(cluster = %self.access, "kubernetesenv: the API server answers again");
        }
    }

    fn failed(&self, kind: WatchedKind, error: &dyn std::fmt::Display) {
        self.errors[kind as usize].fetch_add(1, Ordering::Relaxed);
        let why = format!("{} {}: {error}", self.access, kind.name());
        let mut health = self.health();
        if health.failing.is_none() {
            tracing::warn!(error = %why, "kubernetesenv: the API server fails; the pod cache keeps what it had");
            health.failing = Some((why, SystemTime::now()));
        } else if let Some((last, _)) = &mut health.failing {
            *last = why;
        }
    }

    fn synced(&self, kind: WatchedKind) {
        let mut health = self.health();
        if !health.synced[kind as usize] {
            health.synced[kind as usize] = true;
            tracing::info!(cluster = %self.access, resource = kind.name(), "kubernetesenv: listed");
        }
    }

    /// Whether pods and their owners have each been listed completely once; before that a
    /// lookup cannot tell a missing pod from one not seen yet.
    pub fn is_synced(&self) -> bool {
        self.health().synced.iter().all(|s| *s)
    }

    /// Whether the last call to the API server failed.
    pub fn is_failing(&self) -> bool {
        self.health().failing.is_some()
    }

    /// Failed list or watch calls of `kind` so far.
    pub fn errors(&self, kind: WatchedKind) -> u64 {
        self.errors[kind as usize].load(Ordering::Relaxed)
    }

    /// What readiness should say about this cache, if anything is wrong.
    pub fn note(&self) -> Option<String> {
        let health = self.health();
        let pods = self.cache.read().unwrap_or_else(|e| e.into_inner()).len();
        let unsynced: Vec<&str> = WatchedKind::ALL
            .iter()
            .filter(|k| !health.synced[**k as usize])
            .map(|k| k.name())
            .collect();
        match (&health.failing, unsynced.is_empty()) {
            (None, true) => None,
            (None, false) => Some(format!(
                "{}: not listed yet: {}; lookups fail until then (fail policy applies)",
                self.access,
                unsynced.join(", ")
            )),
            (Some((why, since)), _) => {
                let secs = SystemTime::now()
                    .duration_since(*since)
                    .unwrap_or_default()
                    .as_secs();
                Some(format!(
                    "API server unreachable for {secs}s ({why}); the cache serves the {pods} pods it had"
                ))
            }
        }
    }
}

/// A running watch; dropping the last handle stops it.
#[derive(Debug)]
pub struct Watch {
    /// The cache it fills.
    pub shared: Arc<Shared>,
    task: tokio::task::AbortHandle,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Registry = Mutex<HashMap<(ClusterAccess, Duration), Weak<Watch>>>;

fn registry() -> &'static Registry {
    static WATCHES: OnceLock<Registry> = OnceLock::new();
    WATCHES.get_or_init(Registry::default)
}

impl Watch {
    /// The watch of `access`: the running one if a handler already has it, else a new one
    /// on `runtime`. `watch_timeout` bounds each watch call (the server ends it, the watcher
    /// resumes from the last version seen).
    pub fn start(
        access: ClusterAccess,
        watch_timeout: Duration,
        runtime: &tokio::runtime::Handle,
    ) -> Arc<Watch> {
        let mut watches = registry().lock().unwrap_or_else(|e| e.into_inner());
        watches.retain(|_, w| w.strong_count() > 0);
        let id = (access.clone(), watch_timeout);
        if let Some(running) = watches.get(&id).and_then(Weak::upgrade) {
            return running;
        }
        let shared = Arc::new(Shared::new(access));
        let task = runtime
            .spawn(run(shared.clone(), watch_timeout))
            .abort_handle();
        let watch = Arc::new(Watch { shared, task });
        watches.insert(id, Arc::downgrade(&watch));
        watch
    }
}

/// How long to wait before building the client again after its config failed.
const CONFIG_RETRY: Duration = Duration::from_secs(5);

async fn client(access: &ClusterAccess) -> Result<Client, String> {
    let config = match access {
        ClusterAccess::InCluster => Config::incluster().map_err(|e| e.to_string())?,
        ClusterAccess::Kubeconfig(path) => {
            let kubeconfig =
                kube::config::Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
            Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|e| e.to_string())?
        }
    };
    Client::try_from(config).map_err(|e| e.to_string())
}

async fn run(shared: Arc<Shared>, watch_timeout: Duration) {
    let client = loop {
        match client(&shared.access).await {
            Ok(client) => break client,
            Err(e) => {
                shared.failed(WatchedKind::Pods, &format!("client config: {e}"));
                tokio::time::sleep(CONFIG_RETRY).await;
            }
        }
    };
    // kube's client reads for at most 295 s; a watch must end before that.
    let secs = u32::try_from(watch_timeout.as_secs().clamp(1, 290)).unwrap_or(290);
    let config = watcher::Config::default().timeout(secs);
    tokio::join!(
        watch::<Pod>(Api::all(client.clone()), config.clone(), &shared),
        watch::<ReplicaSet>(Api::all(client.clone()), config.clone(), &shared),
        watch::<ReplicationController>(Api::all(client), config, &shared),
    );
}

/// How one watched kind is mirrored into the [`PodCache`]: pods as themselves, the owners
/// (ReplicaSets, ReplicationControllers) by their metadata under their [`OwnerKind`].
trait Mirrored: Resource + Clone + DeserializeOwned + Debug + Send + 'static {
    /// What the health and metrics call this kind.
    const WATCHED: WatchedKind;
    /// The cache's key for this object, to drop what a relist no longer holds.
    fn key(&self) -> Option<Box<str>>;
    /// Adds or replaces the object.
    fn apply(&self, cache: &mut PodCache);
    /// Removes the object.
    fn delete(&self, cache: &mut PodCache);
    /// Keeps only the objects of this kind whose keys a full list returned.
    fn retain(cache: &mut PodCache, listed: &HashSet<Box<str>>);
}

impl Mirrored for Pod {
    const WATCHED: WatchedKind = WatchedKind::Pods;
    fn key(&self) -> Option<Box<str>> {
        PodCache::pod_key(self)
    }
    fn apply(&self, cache: &mut PodCache) {
        cache.apply_pod(self);
    }
    fn delete(&self, cache: &mut PodCache) {
        cache.delete_pod(self);
    }
    fn retain(cache: &mut PodCache, listed: &HashSet<Box<str>>) {
        cache.retain_pods(listed);
    }
}

/// An owner of pods, mirrored by its metadata only.
trait Owner: Resource + Clone + DeserializeOwned + Debug + Send + 'static {
    const WATCHED: WatchedKind;
    const KIND: OwnerKind;
}

impl Owner for ReplicaSet {
    const WATCHED: WatchedKind = WatchedKind::ReplicaSets;
    const KIND: OwnerKind = OwnerKind::ReplicaSet;
}

impl Owner for ReplicationController {
    const WATCHED: WatchedKind = WatchedKind::ReplicationControllers;
    const KIND: OwnerKind = OwnerKind::ReplicationController;
}

impl<K: Owner> Mirrored for K {
    const WATCHED: WatchedKind = <K as Owner>::WATCHED;
    fn key(&self) -> Option<Box<str>> {
        PodCache::owner_key(self.meta())
    }
    fn apply(&self, cache: &mut PodCache) {
        cache.apply_owner(K::KIND, self.meta());
    }
    fn delete(&self, cache: &mut PodCache) {
        cache.delete_owner(K::KIND, self.meta());
    }
    fn retain(cache: &mut PodCache, listed: &HashSet<Box<str>>) {
        cache.retain_owners(K::KIND, listed);
    }
}

/// Lists and then watches one kind for as long as the cluster is watched, keeping the cache
/// in step: a relist (after a lost watch) drops what it no longer returns.
async fn watch<K>(api: Api<K>, config: watcher::Config, shared: &Shared)
where
    K: Mirrored,
    K::DynamicType: Default + Clone + Eq + std::hash::Hash,
{
    let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
    let mut listed: Option<HashSet<Box<str>>> = None;
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                // `Init` comes before the list is asked for: not proof the API server answers.
                if !matches!(event, Event::Init) {
                    shared.ok();
                }
                match event {
                    Event::Init => listed = Some(HashSet::new()),
                    Event::InitApply(object) => {
                        if let (Some(listed), Some(key)) = (&mut listed, object.key()) {
                            listed.insert(key);
                        }
                        object.apply(&mut shared.write());
                    }
                    Event::InitDone => {
                        if let Some(listed) = listed.take() {
                            K::retain(&mut shared.write(), &listed);
                        }
                        shared.synced(K::WATCHED);
                    }
                    Event::Apply(object) => object.apply(&mut shared.write()),
                    Event::Delete(object) => object.delete(&mut shared.write()),
                }
            }
            Err(e) => shared.failed(K::WATCHED, &e),
        }
    }
}

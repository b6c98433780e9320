//! The pod cache: per pod only what the `kubernetes` template's outputs need, indexed by the
//! pod's uid (`<pod>.<namespace>`) and by its IP; per ReplicaSet or ReplicationController only
//! the workload its controller names. Objects from the API server are reduced to these
//! records as they arrive, so memory is bounded by what is watched, not by object size.
//!
//! The workload rules are Istio 1.4's (`mixer/adapter/kubernetesenv/cache.go`): the pod's
//! controller owner, followed through a ReplicaSet or ReplicationController to that object's
//! own controller (a Deployment, a DeploymentConfig); any other controller kind (Job,
//! StatefulSet, DaemonSet) is the workload itself; a pod without a controller is its own
//! workload. Istio 1.4 watched no Jobs, so a CronJob's pods have their Job as workload, here
//! too.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use foldhash::fast::RandomState;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use mixer_model::{StringMap, Value};

/// `kubernetes://`, the scheme of a pod uid in Istio 1.4's attributes.
pub const UID_PREFIX: &str = "kubernetes://";

type Map<K, V> = HashMap<K, V, RandomState>;

/// A workload as the outputs name it.
#[derive(Debug)]
pub(crate) struct Workload {
    /// `istio://<namespace>/workloads/<name>`.
    uid: Value,
    name: Value,
    namespace: Value,
    /// `kubernetes://apis/<apiVersion>/namespaces/<ns>/<kind>s/<name>`, or the pod's selfLink.
    owner: Option<Value>,
}

impl Workload {
    fn new(name: &str, namespace: &Arc<str>, owner: Option<Value>) -> Workload {
        Workload {
            uid: Value::from(format!("istio://{namespace}/workloads/{name}").as_str()),
            name: Value::from(name),
            namespace: Value::String(namespace.clone()),
            owner,
        }
    }

    /// The workload an owner reference names (Istio's `selfLinkURL` form for the owner).
    fn of_owner(owner: &OwnerReference, namespace: &Arc<str>) -> Workload {
        Workload::of_parts(&owner.api_version, &owner.kind, &owner.name, namespace)
    }

    fn of_parts(api_version: &str, kind: &str, name: &str, namespace: &Arc<str>) -> Workload {
        let kind = kind.to_lowercase();
        let link = format!("kubernetes://apis/{api_version}/namespaces/{namespace}/{kind}s/{name}");
        Workload::new(name, namespace, Some(Value::from(link.as_str())))
    }
}

/// How a pod's workload is found.
#[derive(Debug)]
enum WorkloadLink {
    /// Known when the pod arrived: the pod itself, or a controller that is not followed.
    Direct(Arc<Workload>),
    /// Through a ReplicaSet (or ReplicationController) by its key `<name>.<namespace>`,
    /// looked up when asked, since the owner may arrive after the pod.
    /// When the owner is unknown or has no controller, the reference itself names the
    /// workload: built then (rare), not kept per pod.
    Via {
        kind: OwnerKind,
        key: Box<str>,
        api_version: Box<str>,
    },
}

/// The owner kinds whose own controller names the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OwnerKind {
    /// `apps/v1` ReplicaSet.
    ReplicaSet,
    /// `v1` ReplicationController.
    ReplicationController,
}

impl OwnerKind {
    fn of(kind: &str) -> Option<OwnerKind> {
        match kind {
            "ReplicaSet" => Some(OwnerKind::ReplicaSet),
            "ReplicationController" => Some(OwnerKind::ReplicationController),
            _ => None,
        }
    }
}

/// One pod, reduced to what the outputs need.
#[derive(Debug)]
pub(crate) struct PodRecord {
    /// `kubernetes://<pod>.<namespace>`.
    uid: Value,
    name: Value,
    namespace: Value,
    labels: Option<Value>,
    service_account: Option<Value>,
    pod_ip: Option<IpAddr>,
    host_ip: Option<IpAddr>,
    workload: WorkloadLink,
    /// Container names by the ports they declare.
    ports: Box<[(i32, Value)]>,
    /// Ranks pods that share an IP: a live pod over a finished or terminating one, then
    /// the later created, then the later seen.
    rank: (bool, i64, u64),
}

/// The cache of one cluster. Not synchronised: [`crate::watch`] wraps it in a lock.
#[derive(Debug, Default)]
pub struct PodCache {
    pods: Map<Box<str>, Arc<PodRecord>>,
    by_ip: Map<IpAddr, Vec<Arc<PodRecord>>>,
    owners: [Map<Box<str>, Arc<Workload>>; 2],
    /// Namespaces and label sets are shared by the pods that have the same.
    namespaces: Map<Box<str>, Arc<str>>,
    label_sets: Map<Vec<(String, String)>, Value>,
    seq: u64,
    changes_since_sweep: u32,
}

/// What one side of a request resolved to.
pub(crate) struct Found<'a> {
    pod: &'a PodRecord,
    workload: Arc<Workload>,
}

/// The names of one side's outputs.
pub(crate) struct Side {
    pod_uid: &'static str,
    pod_ip: &'static str,
    pod_name: &'static str,
    labels: &'static str,
    namespace: &'static str,
    service_account: &'static str,
    host_ip: &'static str,
    workload_uid: &'static str,
    workload_name: &'static str,
    workload_namespace: &'static str,
    owner: &'static str,
}

/// The source's output names (Istio 1.4's `OutputTemplate`).
pub(crate) const SOURCE: Side = Side {
    pod_uid: "source_pod_uid",
    pod_ip: "source_pod_ip",
    pod_name: "source_pod_name",
    labels: "source_labels",
    namespace: "source_namespace",
    service_account: "source_service_account_name",
    host_ip: "source_host_ip",
    workload_uid: "source_workload_uid",
    workload_name: "source_workload_name",
    workload_namespace: "source_workload_namespace",
    owner: "source_owner",
};

/// The destination's output names.
pub(crate) const DESTINATION: Side = Side {
    pod_uid: "destination_pod_uid",
    pod_ip: "destination_pod_ip",
    pod_name: "destination_pod_name",
    labels: "destination_labels",
    namespace: "destination_namespace",
    service_account: "destination_service_account_name",
    host_ip: "destination_host_ip",
    workload_uid: "destination_workload_uid",
    workload_name: "destination_workload_name",
    workload_namespace: "destination_workload_namespace",
    owner: "destination_owner",
};

impl Found<'_> {
    /// Appends this side's outputs, leaving out what the pod does not have (as Istio did).
    pub(crate) fn fill(&self, side: &Side, out: &mut Vec<(&'static str, Value)>) {
        let pod = self.pod;
        if let Some(labels) = &pod.labels {
            out.push((side.labels, labels.clone()));
        }
        out.push((side.pod_name, pod.name.clone()));
        out.push((side.namespace, pod.namespace.clone()));
        out.push((side.pod_uid, pod.uid.clone()));
        if let Some(sa) = &pod.service_account {
            out.push((side.service_account, sa.clone()));
        }
        if let Some(ip) = pod.pod_ip {
            out.push((side.pod_ip, Value::IpAddress(ip)));
        }
        if let Some(ip) = pod.host_ip {
            out.push((side.host_ip, Value::IpAddress(ip)));
        }
        let wl = &self.workload;
        out.push((side.workload_uid, wl.uid.clone()));
        out.push((side.workload_name, wl.name.clone()));
        out.push((side.workload_namespace, wl.namespace.clone()));
        if let Some(owner) = &wl.owner {
            out.push((side.owner, owner.clone()));
        }
    }

    /// The name of the container that declares `port`, for `destination_container_name`.
    pub(crate) fn container(&self, port: i64) -> Option<&Value> {
        if port <= 0 {
            return None;
        }
        self.pod
            .ports
            .iter()
            .find(|(p, _)| i64::from(*p) == port)
            .map(|(_, name)| name)
    }
}

fn parse_ip(text: Option<&String>) -> Option<IpAddr> {
    text.and_then(|t| t.parse().ok())
}

fn controller(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|r| r.controller == Some(true))
}

/// `<name>.<namespace>`: the key of pods and owners, and a pod uid without its scheme. A
/// namespace has no dot, so the last dot splits the two as Istio's `keyFromUID` did.
fn key(name: &str, namespace: &str) -> Box<str> {
    format!("{name}.{namespace}").into_boxed_str()
}

impl PodCache {
    /// An empty cache.
    pub fn new() -> PodCache {
        PodCache::default()
    }

    /// Pods held.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// Whether no pod is held.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// The pod a uid (`kubernetes://<pod>.<namespace>`, or an IP address as text) or an IP
    /// names, with its workload.
    pub(crate) fn find_uid(&self, uid: &str) -> Option<Found<'_>> {
        if let Ok(ip) = uid.parse::<IpAddr>() {
            return self.find_ip(ip);
        }
        let key = uid.strip_prefix(UID_PREFIX).unwrap_or(uid);
        self.pods.get(key).map(|pod| self.found(pod))
    }

    /// The pod that holds `ip` now: of several (a pod replaced at the same IP before the old
    /// one's deletion arrives), the live one created last.
    pub(crate) fn find_ip(&self, ip: IpAddr) -> Option<Found<'_>> {
        let pods = self.by_ip.get(&ip)?;
        pods.iter()
            .max_by_key(|p| p.rank)
            .map(|pod| self.found(pod))
    }

    fn found<'a>(&'a self, pod: &'a PodRecord) -> Found<'a> {
        let workload = match &pod.workload {
            WorkloadLink::Direct(w) => w.clone(),
            WorkloadLink::Via {
                kind,
                key,
                api_version,
            } => match self.owners[*kind as usize].get(key) {
                Some(workload) => workload.clone(),
                None => {
                    let (name, ns) = key.rsplit_once('.').unwrap_or((key, ""));
                    let kind = match kind {
                        OwnerKind::ReplicaSet => "ReplicaSet",
                        OwnerKind::ReplicationController => "ReplicationController",
                    };
                    Arc::new(Workload::of_parts(api_version, kind, name, &Arc::from(ns)))
                }
            },
        };
        Found { pod, workload }
    }

    /// A pod added or changed.
    pub fn apply_pod(&mut self, pod: &Pod) {
        let meta = &pod.metadata;
        let (Some(name), Some(ns)) = (meta.name.as_deref(), meta.namespace.as_deref()) else {
            return;
        };
        let key = key(name, ns);
        self.remove_pod_key(&key);
        let record = Arc::new(self.record(pod, name, ns));
        if let Some(ip) = record.pod_ip {
            self.by_ip.entry(ip).or_default().push(record.clone());
        }
        self.pods.insert(key, record);
        self.changed();
    }

    /// A pod deleted.
    pub fn delete_pod(&mut self, pod: &Pod) {
        let meta = &pod.metadata;
        if let (Some(name), Some(ns)) = (meta.name.as_deref(), meta.namespace.as_deref()) {
            self.remove_pod_key(&key(name, ns));
            self.changed();
        }
    }

    /// Drops every pod not in `keep` (after a relist: what was deleted while unwatched).
    pub fn retain_pods(&mut self, keep: &HashSet<Box<str>>) {
        let gone: Vec<Box<str>> = self
            .pods
            .keys()
            .filter(|k| !keep.contains(*k))
            .cloned()
            .collect();
        for key in gone {
            self.remove_pod_key(&key);
        }
        self.sweep();
    }

    /// The key a pod is held under.
    pub fn pod_key(pod: &Pod) -> Option<Box<str>> {
        let meta = &pod.metadata;
        Some(key(meta.name.as_deref()?, meta.namespace.as_deref()?))
    }

    fn remove_pod_key(&mut self, key: &str) {
        let Some(old) = self.pods.remove(key) else {
            return;
        };
        if let Some(ip) = old.pod_ip
            && let Some(list) = self.by_ip.get_mut(&ip)
        {
            list.retain(|p| !Arc::ptr_eq(p, &old));
            if list.is_empty() {
                self.by_ip.remove(&ip);
            }
        }
    }

    /// A ReplicaSet or ReplicationController added or changed: only its controller is kept.
    pub fn apply_owner(&mut self, kind: OwnerKind, meta: &ObjectMeta) {
        let (Some(name), Some(ns)) = (meta.name.as_deref(), meta.namespace.as_deref()) else {
            return;
        };
        let key = key(name, ns);
        match controller(meta) {
            Some(root) => {
                let ns = self.intern_namespace(ns);
                let workload = Arc::new(Workload::of_owner(root, &ns));
                self.owners[kind as usize].insert(key, workload);
            }
            // Without a controller, the pod's reference to it names the workload.
            None => {
                self.owners[kind as usize].remove(&key);
            }
        }
    }

    /// A ReplicaSet or ReplicationController deleted.
    pub fn delete_owner(&mut self, kind: OwnerKind, meta: &ObjectMeta) {
        if let (Some(name), Some(ns)) = (meta.name.as_deref(), meta.namespace.as_deref()) {
            self.owners[kind as usize].remove(&key(name, ns));
        }
    }

    /// Drops every owner of `kind` not in `keep`.
    pub fn retain_owners(&mut self, kind: OwnerKind, keep: &HashSet<Box<str>>) {
        self.owners[kind as usize].retain(|k, _| keep.contains(k));
    }

    /// The key an owner is held under.
    pub fn owner_key(meta: &ObjectMeta) -> Option<Box<str>> {
        Some(key(meta.name.as_deref()?, meta.namespace.as_deref()?))
    }

    fn record(&mut self, pod: &Pod, name: &str, ns: &str) -> PodRecord {
        let meta = &pod.metadata;
        let ns = self.intern_namespace(ns);
        let labels = meta
            .labels
            .as_ref()
            .filter(|l| !l.is_empty())
            .map(|l| self.intern_labels(l));
        let spec = pod.spec.as_ref();
        let status = pod.status.as_ref();
        let workload = match controller(meta) {
            Some(owner) => match OwnerKind::of(&owner.kind) {
                Some(kind) => WorkloadLink::Via {
                    kind,
                    key: key(&owner.name, &ns),
                    api_version: owner.api_version.as_str().into(),
                },
                None => WorkloadLink::Direct(Arc::new(Workload::of_owner(owner, &ns))),
            },
            None => {
                let link = meta.self_link.as_deref().filter(|l| !l.is_empty());
                WorkloadLink::Direct(Arc::new(Workload::new(name, &ns, link.map(Value::from))))
            }
        };
        let ports: Vec<(i32, Value)> = spec
            .map(|s| s.containers.as_slice())
            .unwrap_or_default()
            .iter()
            .flat_map(|c| {
                let cname = Value::from(c.name.as_str());
                c.ports
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .map(move |p| (p.container_port, cname.clone()))
            })
            .collect();
        let phase = status.and_then(|s| s.phase.as_deref());
        let live =
            !matches!(phase, Some("Succeeded" | "Failed")) && meta.deletion_timestamp.is_none();
        let created = meta
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second());
        self.seq += 1;
        PodRecord {
            uid: Value::from(format!("{UID_PREFIX}{name}.{ns}").as_str()),
            name: Value::from(name),
            namespace: Value::String(ns.clone()),
            labels,
            service_account: spec
                .and_then(|s| s.service_account_name.as_deref())
                .filter(|s| !s.is_empty())
                .map(Value::from),
            pod_ip: parse_ip(status.and_then(|s| s.pod_ip.as_ref())),
            host_ip: parse_ip(status.and_then(|s| s.host_ip.as_ref())),
            workload,
            ports: ports.into_boxed_slice(),
            rank: (live, created, self.seq),
        }
    }

    #[cfg(test)]
    pub(crate) fn label_sets_for_test(&self) -> usize {
        self.label_sets.len()
    }

    fn intern_namespace(&mut self, ns: &str) -> Arc<str> {
        if let Some(shared) = self.namespaces.get(ns) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(ns);
        self.namespaces.insert(ns.into(), shared.clone());
        shared
    }

    fn intern_labels(&mut self, labels: &BTreeMap<String, String>) -> Value {
        let pairs: Vec<(String, String)> =
            labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        if let Some(shared) = self.label_sets.get(&pairs) {
            return shared.clone();
        }
        let value = Value::StringMap(Arc::new(StringMap::from_pairs(
            labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        )));
        self.label_sets.insert(pairs, value.clone());
        value
    }

    fn changed(&mut self) {
        self.changes_since_sweep += 1;
        if self.changes_since_sweep >= 4096 {
            self.sweep();
        }
    }

    /// Forgets shared namespaces and label sets no pod uses any more, so that churn (each
    /// rollout's new pod-template-hash) does not grow them.
    fn sweep(&mut self) {
        self.changes_since_sweep = 0;
        self.label_sets.retain(|_, v| match v {
            Value::StringMap(m) => Arc::strong_count(m) > 1,
            _ => false,
        });
        self.namespaces.retain(|_, ns| Arc::strong_count(ns) > 1);
    }
}

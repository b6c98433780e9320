//! The kubernetesenv handler: answers `kubernetes` instances from the pod cache, serves the
//! cache's metrics and says on readiness when the API server is unreachable.

use std::fmt::Write as _;
use std::sync::Arc;

use async_trait::async_trait;
use mixer_adapter_api::{
    AdapterError, AttributeHandler, ErrorKind, Exposition, Generated, Handler,
};
use mixer_model::{Instance, KubernetesInstance, Value};

use crate::cache::{DESTINATION, Found, PodCache, SOURCE};
use crate::watch::{Shared, Watch, WatchedKind};

/// How long a verdict decided on a pod found by its IP may be cached: a deleted pod's IP goes
/// to the next pod scheduled, and a cached verdict must not outlive that by long.
pub const BY_IP_VALIDITY: std::time::Duration = std::time::Duration::from_secs(5);

/// Prefix of the handler's metrics.
pub const METRIC_PREFIX: &str = "mixer_kubernetesenv";

/// A kubernetesenv handler.
#[derive(Debug)]
pub struct KubernetesEnvHandler {
    name: Arc<str>,
    shared: Arc<Shared>,
    /// Keeps the watch running while the handler lives (shared with handlers of the same
    /// cluster); none for a handler over a fixed cache.
    _watch: Option<Arc<Watch>>,
}

impl KubernetesEnvHandler {
    /// A handler over a running watch.
    pub fn new(name: Arc<str>, watch: Arc<Watch>) -> KubernetesEnvHandler {
        KubernetesEnvHandler {
            name,
            shared: watch.shared.clone(),
            _watch: Some(watch),
        }
    }

    /// A handler over a cache filled by the caller, counted as listed (benches, tests).
    pub fn fixed(name: Arc<str>, cache: PodCache) -> KubernetesEnvHandler {
        KubernetesEnvHandler {
            name,
            shared: Arc::new(Shared::fixed(cache)),
            _watch: None,
        }
    }

    /// The cache and its health.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The outputs for one instance, as Istio 1.4's `GenerateKubernetesAttributes`: each
    /// side by its uid if set, else by its IP if set and specified; a pod not in the cache
    /// gives no outputs for its side.
    pub fn lookup(&self, instance: &KubernetesInstance<'_>) -> Vec<(&'static str, Value)> {
        self.answer(instance).outputs
    }

    /// [`lookup`](Self::lookup), with how long a verdict on it may be cached: an IP is
    /// reused by the next pod, so outputs found by IP hold for [`BY_IP_VALIDITY`] only;
    /// found by uid (one pod, ever), no bound of the handler's own.
    pub fn answer(&self, instance: &KubernetesInstance<'_>) -> Generated {
        let by_ip = |uid: Option<&str>, ip: Option<std::net::IpAddr>| {
            uid.is_none_or(str::is_empty) && ip.is_some_and(|ip| !ip.is_unspecified())
                || uid.is_some_and(|u| u.parse::<std::net::IpAddr>().is_ok())
        };
        let valid_duration = (by_ip(instance.source_uid, instance.source_ip)
            || by_ip(instance.destination_uid, instance.destination_ip))
        .then_some(BY_IP_VALIDITY);
        let cache = self.shared.cache.read().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::with_capacity(24);
        if let Some(found) = side(&cache, instance.destination_uid, instance.destination_ip) {
            found.fill(&DESTINATION, &mut out);
            if let Some(name) = found.container(instance.destination_port.unwrap_or(0)) {
                out.push(("destination_container_name", name.clone()));
            }
        }
        if let Some(found) = side(&cache, instance.source_uid, instance.source_ip) {
            found.fill(&SOURCE, &mut out);
        }
        Generated {
            outputs: out,
            valid_duration,
            denial: None,
        }
    }
}

fn side<'a>(
    cache: &'a PodCache,
    uid: Option<&str>,
    ip: Option<std::net::IpAddr>,
) -> Option<Found<'a>> {
    match (uid.filter(|u| !u.is_empty()), ip) {
        (Some(uid), _) => cache.find_uid(uid),
        (None, Some(ip)) if !ip.is_unspecified() => cache.find_ip(ip),
        _ => None,
    }
}

/// How long a request made before the first complete list waits for it.
const FIRST_LIST_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

#[async_trait]
impl AttributeHandler for KubernetesEnvHandler {
    async fn generate(&self, instance: &Instance) -> Result<Generated, AdapterError> {
        let Some(view) = KubernetesInstance::of(instance) else {
            return Err(AdapterError::permanent(
                ErrorKind::InvalidInstance,
                format!(
                    "{}: instance {} is of template {}, not kubernetes",
                    self.name, instance.name, instance.template
                ),
            ));
        };
        // Before the first complete list a pod not found may just not be seen yet. Istio
        // held every request until the list came; here a request waits a bounded time for
        // it (the handler's deadline may end the wait sooner), then is an error, so that the
        // fail policy decides, rather than defaults that look final.
        let started = std::time::Instant::now();
        while !self.shared.is_synced() && started.elapsed() < FIRST_LIST_WAIT {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        if !self.shared.is_synced() {
            return Err(AdapterError::transient(
                ErrorKind::Unavailable,
                format!(
                    "{}: {}",
                    self.name,
                    self.shared
                        .note()
                        .unwrap_or_else(|| "pod cache not listed yet".into())
                ),
            ));
        }
        Ok(self.answer(&view))
    }
}

#[async_trait]
impl Handler for KubernetesEnvHandler {
    fn as_attributes(&self) -> Option<&dyn AttributeHandler> {
        Some(self)
    }

    fn as_exposition(&self) -> Option<&dyn Exposition> {
        Some(self)
    }

    fn readiness_note(&self) -> Option<String> {
        self.shared
            .note()
            .map(|note| format!("handler {}: kubernetesenv: {note}", self.name))
    }
}

impl Exposition for KubernetesEnvHandler {
    fn render(&self, out: &mut String) {
        let handler = &self.name;
        let families: [(&str, &str, &str); 4] = [
            ("pods", "gauge", "Pods in the kubernetesenv cache."),
            (
                "synced",
                "gauge",
                "1 once pods, replicasets and replicationcontrollers have each been listed.",
            ),
            (
                "apiserver_up",
                "gauge",
                "0 while the last call to the API server failed (the cache serves what it had).",
            ),
            (
                "watch_errors_total",
                "counter",
                "Failed list or watch calls to the API server, by resource.",
            ),
        ];
        let pods = self.shared.cache.read().map_or(0, |c| c.len());
        for (name, kind, help) in families {
            let metric = format!("{METRIC_PREFIX}_{name}");
            // Several handlers render into one exposition: each family's header once.
            if !out.contains(&format!("# TYPE {metric} ")) {
                let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} {kind}");
            }
            match name {
                "pods" => {
                    let _ = writeln!(out, "{metric}{{handler=\"{handler}\"}} {pods}");
                }
                "synced" => {
                    let v = u8::from(self.shared.is_synced());
                    let _ = writeln!(out, "{metric}{{handler=\"{handler}\"}} {v}");
                }
                "apiserver_up" => {
                    let v = u8::from(!self.shared.is_failing());
                    let _ = writeln!(out, "{metric}{{handler=\"{handler}\"}} {v}");
                }
                _ => {
                    for kind in WatchedKind::ALL {
                        let _ = writeln!(
                            out,
                            "{metric}{{handler=\"{handler}\",resource=\"{}\"}} {}",
                            kind.name(),
                            self.shared.errors(kind)
                        );
                    }
                }
            }
        }
    }
}

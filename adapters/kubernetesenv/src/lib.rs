//! The `kubernetesenv` adapter (Istio 1.4's `kubernetesenv`, crate `adapters/kubernetesenv`):
//! an attribute generator that names the pods at both ends of a request. Given the
//! `kubernetes` template's inputs (`source_uid`, `destination_uid` as
//! `kubernetes://<pod>.<namespace>`, or the IPs), it answers the pod's labels, name,
//! namespace, service account, IPs, owner and workload (name, namespace,
//! `istio://<namespace>/workloads/<name>`), and the destination's container by port.
//!
//! - Lookups read a watch cache (pods, ReplicaSets, ReplicationControllers in all
//!   namespaces, kept by [`kube`]'s watcher); a request never calls the API server. A pod not
//!   in the cache gives no outputs for its side: the bindings' defaults apply.
//! - Until pods and owners have been listed once, `generate` fails (the handler's fail
//!   policy decides). After that, an API server that is down or slow leaves the cache
//!   serving what it had, `mixer_kubernetesenv_apiserver_up` is 0, and readiness says so.
//! - Params: empty for in-cluster config (the service account's token and CA,
//!   `KUBERNETES_SERVICE_HOST`/`PORT`), `kubeconfigPath` for a kubeconfig file (`KUBECONFIG`
//!   overrides both, as in Istio), `cacheRefreshDuration`, `clusterRegistriesNamespace`
//!   (accepted; remote clusters are not watched).

mod cache;
mod config;
mod handler;
mod watch;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, ErrorKind, Handler, ParamError, Stability,
};
use mixer_model::Template;

pub use cache::{OwnerKind, PodCache, UID_PREFIX};
pub use config::{DEFAULT_REFRESH, KubernetesEnvConfig, KubernetesEnvParams};
pub use handler::{BY_IP_VALIDITY, KubernetesEnvHandler, METRIC_PREFIX};
pub use watch::{ClusterAccess, Shared, Watch, WatchedKind};

static INFO: AdapterInfo = AdapterInfo {
    name: "kubernetesenv",
    description: "Pods, workloads and owners behind a request's source and destination, from a Kubernetes watch cache",
    templates: &[Template::Kubernetes],
    cacheable: true,
    stability: Stability::Beta,
};

/// The kubernetesenv adapter.
#[derive(Debug, Default, Clone, Copy)]
pub struct KubernetesEnv;

impl KubernetesEnv {
    /// Builds the concrete handler (what [`Adapter::build`] returns, unerased), watching the
    /// cluster `config` names on the current tokio runtime.
    pub fn build_handler(
        &self,
        config: &KubernetesEnvConfig,
        ctx: &BuildContext,
    ) -> Result<Arc<KubernetesEnvHandler>, AdapterError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            AdapterError::permanent(
                ErrorKind::Internal,
                "kubernetesenv needs a tokio runtime to watch the API server",
            )
        })?;
        let env = std::env::var("KUBECONFIG").ok();
        let access = config.access(env.as_deref());
        let watch = Watch::start(access, config.refresh, &runtime);
        Ok(Arc::new(KubernetesEnvHandler::new(
            ctx.handler_name.clone(),
            watch,
        )))
    }
}

impl Adapter for KubernetesEnv {
    type Config = KubernetesEnvParams;
    type Compiled = KubernetesEnvConfig;

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, params: KubernetesEnvParams) -> Result<KubernetesEnvConfig, Vec<ParamError>> {
        params.compile()
    }

    fn build(
        &self,
        config: &KubernetesEnvConfig,
        ctx: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(self.build_handler(config, ctx)?)
    }
}

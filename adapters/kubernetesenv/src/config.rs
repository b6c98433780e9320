//! kubernetesenv's params: Istio 1.4's `adapter.kubernetesenv.config.Params`
//! (`mixer/adapter/kubernetesenv/config/config.proto`), in camelCase or snake_case.

use std::path::PathBuf;
use std::time::Duration;

use mixer_adapter_api::{DurationParam, ParamError};
use serde::Deserialize;

use crate::watch::ClusterAccess;

/// Istio's default `cacheRefreshDuration`.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(5 * 60);

/// `params` of a kubernetesenv handler. Empty (as Istio 1.4's chart has them): the in-cluster
/// config of the mixer's service account.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubernetesEnvParams {
    /// A kubeconfig file (its current context) to reach the API server; empty: in-cluster.
    /// The `KUBECONFIG` environment variable, when set, takes precedence (as in Istio).
    #[serde(default, alias = "kubeconfig_path")]
    pub kubeconfig_path: String,
    /// Istio resynced its informers this often (default 5m); here each watch call ends after
    /// it (at most 290s) and resumes from the last version seen.
    #[serde(default, alias = "cache_refresh_duration")]
    pub cache_refresh_duration: Option<DurationParam>,
    /// Istio 1.4's namespace of multicluster secrets. Accepted so Istio's config loads; remote
    /// clusters are not watched (only the cluster the mixer's access names).
    #[serde(default, alias = "cluster_registries_namespace")]
    pub cluster_registries_namespace: String,
}

/// Validated params.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubernetesEnvConfig {
    /// `kubeconfigPath`, if set.
    pub kubeconfig_path: Option<PathBuf>,
    /// `cacheRefreshDuration`.
    pub refresh: Duration,
}

impl KubernetesEnvParams {
    /// Validates: the duration, and that a named kubeconfig file reads as a kubeconfig.
    pub fn compile(&self) -> Result<KubernetesEnvConfig, Vec<ParamError>> {
        let mut errors = Vec::new();
        let refresh = match &self.cache_refresh_duration {
            None => DEFAULT_REFRESH,
            Some(d) => d.positive("cacheRefreshDuration").unwrap_or_else(|e| {
                errors.push(e);
                DEFAULT_REFRESH
            }),
        };
        let kubeconfig_path = match self.kubeconfig_path.trim() {
            "" => None,
            path => {
                if let Err(e) = kube::config::Kubeconfig::read_from(path) {
                    errors.push(ParamError::new(
                        "kubeconfigPath",
                        format!("{path}: not a readable kubeconfig: {e}"),
                    ));
                }
                Some(PathBuf::from(path))
            }
        };
        if errors.is_empty() {
            Ok(KubernetesEnvConfig {
                kubeconfig_path,
                refresh,
            })
        } else {
            Err(errors)
        }
    }
}

impl KubernetesEnvConfig {
    /// Where the cluster is reached: `KUBECONFIG` if set (Istio's precedence), else
    /// `kubeconfigPath`, else in-cluster.
    pub fn access(&self, kubeconfig_env: Option<&str>) -> ClusterAccess {
        match (kubeconfig_env.map(str::trim), &self.kubeconfig_path) {
            (Some(env), _) if !env.is_empty() => ClusterAccess::Kubeconfig(env.into()),
            (_, Some(path)) => ClusterAccess::Kubeconfig(path.clone()),
            _ => ClusterAccess::InCluster,
        }
    }
}

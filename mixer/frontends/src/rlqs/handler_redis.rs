//! The Redis a limit's redisquota handler names, as the RLQS demand table when
//! `serve --shared-cache` gives none: replicas that share a redisquota counter then share
//! its RLQS shares too.
//!
//! Read from the handler's params in the active snapshot at every lookup, so a reload
//! that changes `redisServerUrl` moves the table with the next report. The frontends do
//! not depend on the adapter: only `redisServerUrl` (`host:port` or `redis://...`, as
//! Istio 1.4's `mixer/adapter/redisquota` takes it) and `password` are read here. A Redis
//! Cluster (`redis+cluster://`) keeps the demands in this process, as `--shared-cache`
//! with a cluster does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mixer_runtime::Snapshot;
use mixer_runtime::quota::QuotaPlan;
use prometheus::{IntCounter, Registry};
use redis::{ConnectionInfo, IntoConnectionInfo};

use super::shared_state::{SharedDemands, errors_counter};

/// The adapter whose handlers name a Redis.
pub const ADAPTER: &str = "redisquota";

/// Distinct Redis targets kept connected; past it the oldest set is dropped (a config
/// naming more is not expected, and reloads may leave unused ones behind).
const MAX_TARGETS: usize = 16;

/// Where a redisquota handler's params say its Redis is, with `password` applied; `None`
/// for a cluster, an empty or unparsable URL (the adapter's validation refuses those).
pub fn redis_of(params: &serde_json::Value) -> Option<ConnectionInfo> {
    let text = params.get("redisServerUrl")?.as_str()?.trim();
    if text.is_empty() || text.starts_with("redis+cluster://") {
        return None;
    }
    let url = if text.contains("://") {
        text.to_string()
    } else {
        format!("redis://{text}")
    };
    let info = url.as_str().into_connection_info().ok()?;
    Some(match params.get("password").and_then(|p| p.as_str()) {
        Some(pw) => {
            let settings = info.redis_settings().clone().set_password(pw);
            info.set_redis_settings(settings)
        }
        None => info,
    })
}

/// The demand tables in the Redis servers redisquota handlers name, one per target.
pub struct HandlerRedis {
    tables: Mutex<HashMap<String, Arc<SharedDemands>>>,
    errors: IntCounter,
}

impl std::fmt::Debug for HandlerRedis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerRedis").finish_non_exhaustive()
    }
}

impl HandlerRedis {
    /// No table yet; registers `mixer_rlqs_shared_state_errors_total` in `registry`.
    pub fn new(registry: &Registry) -> Result<HandlerRedis, String> {
        Ok(HandlerRedis {
            tables: Mutex::new(HashMap::new()),
            errors: errors_counter(registry)?,
        })
    }

    /// The table of the first redisquota handler `plan` asks, `None` when it asks none.
    pub fn for_plan(&self, snapshot: &Snapshot, plan: &QuotaPlan) -> Option<Arc<SharedDemands>> {
        let info = plan.handler_indices().find_map(|i| {
            let handler = snapshot.config.handlers.get(i)?;
            (handler.adapter == ADAPTER)
                .then(|| redis_of(&handler.params))
                .flatten()
        })?;
        // The password is part of the target: two handlers with different ones are two.
        let target = format!("{:?}", (info.addr(), info.redis_settings()));
        let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(table) = tables.get(&target) {
            return Some(table.clone());
        }
        if tables.len() >= MAX_TARGETS {
            tables.clear();
        }
        match SharedDemands::connect(info, self.errors.clone()) {
            Ok(table) => {
                let table = Arc::new(table);
                tables.insert(target, table.clone());
                Some(table)
            }
            Err(e) => {
                self.errors.inc();
                tracing::debug!("rlqs: the redisquota handler's Redis is unusable: {e}");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn istio_host_port_and_urls_name_one_redis_and_clusters_none() {
        let plain = redis_of(&json!({"redisServerUrl": "127.0.0.1:6380"})).expect("host:port");
        assert_eq!(plain.addr().to_string(), "127.0.0.1:6380");
        let url = redis_of(&json!({"redisServerUrl": "redis://h:7000/2", "password": "pw"}))
            .expect("url");
        assert_eq!(url.redis_settings().db(), 2);
        assert_eq!(url.redis_settings().password(), Some("pw"));
        assert!(redis_of(&json!({"redisServerUrl": "redis+cluster://a:1,b:2"})).is_none());
        assert!(redis_of(&json!({"redisServerUrl": ""})).is_none());
        assert!(redis_of(&json!({"quotas": []})).is_none());
        assert!(redis_of(&json!({"redisServerUrl": 5})).is_none());
    }
}

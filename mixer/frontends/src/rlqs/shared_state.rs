//! The RLQS demand table in Redis (`serve --shared-cache`), so that every replica computes
//! shares from the same demands and any replica can take over a proxy's stream.
//!
//! One Redis hash per limit (the limit's key under [`KEY_PREFIX`]): a field per proxy,
//! holding its demand, its last assignment, when that expires (Redis's clock, so replicas
//! need not agree on time) and the stream that wrote it. A report costs one round trip: one
//! script call that, for each limited bucket of the report, drops expired entries, writes
//! this proxy's demand, water-fills the limit over the live demands ([`super::fair_share`],
//! the same rules in Lua) and keeps the grant. Every key carries the hash tag `{rlqs}`, so
//! that a script naming several limits stays in one slot.
//!
//! Each hash expires a second after the last assignment written into it: a limit nobody
//! reports any more leaves nothing behind.

use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use prometheus::{IntCounter, Registry};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionInfo, Script};

use super::fair_share::FLOOR_FRACTION;

/// The prefix of every key this module writes.
pub const KEY_PREFIX: &str = "mixer:rlqs:{rlqs}:";

/// How long a call may take (connecting or answering) before the report goes unanswered:
/// well under any reporting interval, so a hung Redis delays nothing the proxy waits for.
pub const CALL_TIMEOUT: Duration = Duration::from_millis(500);

/// How long a limit's hash outlives the last assignment written into it.
const KEY_MARGIN_MS: u64 = 1000;

/// For each key: drop the other proxies' expired entries, record ARGV[1]'s demand, answer
/// its grant (see `Demands::share`: its water-fill share, no more than what the others'
/// assignments leave, never under the floor).
/// ARGV: proxy, stream, ttl_ms, floor_fraction, key_margin_ms, then demand and limit per key.
const SHARE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local proxy, stream = ARGV[1], ARGV[2]
local ttl, ff, margin = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local out = {}
for k = 1, #KEYS do
  local key = KEYS[k]
  local demand, limit = tonumber(ARGV[4 + 2 * k]), tonumber(ARGV[5 + 2 * k])
  local all = redis.call('HGETALL', key)
  local wants, others = {}, 0
  for i = 1, #all, 2 do
    if all[i] ~= proxy then
      local d, a, e = string.match(all[i + 1], '^(%S+) (%S+) (%S+)')
      e = tonumber(e)
      if not e or e <= now then
        redis.call('HDEL', key, all[i])
      else
        wants[#wants + 1] = tonumber(d) or 0
        others = others + (tonumber(a) or 0)
      end
    end
  end
  local n = #wants + 1
  local floor = limit * ff / n
  local mine = math.max(demand, floor)
  wants[n] = mine
  for i = 1, n do wants[i] = math.max(wants[i], floor) end
  table.sort(wants)
  local left, share = limit, nil
  for i = 1, n do
    local s = math.min(wants[i], left / (n - i + 1))
    if share == nil and wants[i] == mine then share = s end
    left = left - s
  end
  share = share + math.max(left, 0) / n
  local granted = math.max(math.min(share, limit - others), math.min(floor, share))
  redis.call('HSET', key, proxy,
    string.format('%.17g %.17g %d %s', demand, granted, now + ttl, stream))
  redis.call('PEXPIRE', key, ttl + margin)
  out[k] = string.format('%.17g', granted)
end
return out
";

/// Removes ARGV[1]'s entry from each key if stream ARGV[2] wrote it (a stream that ended;
/// the proxy may already report on another).
const FORGET: &str = r"
for k = 1, #KEYS do
  local v = redis.call('HGET', KEYS[k], ARGV[1])
  if v and string.match(v, '^%S+ %S+ %S+ (%S+)') == ARGV[2] then
    redis.call('HDEL', KEYS[k], ARGV[1])
  end
end
return 0
";

/// `mixer_rlqs_shared_state_errors_total`, registered in `registry`.
pub fn errors_counter(registry: &Registry) -> Result<IntCounter, String> {
    let errors = IntCounter::new(
        "mixer_rlqs_shared_state_errors_total",
        "RLQS reports left without new assignments because the demand table in Redis could not be read or written",
    )
    .map_err(|e| e.to_string())?;
    registry
        .register(Box::new(errors.clone()))
        .map_err(|e| e.to_string())?;
    Ok(errors)
}

/// One limited bucket of a report, as the script takes it.
#[derive(Clone, Debug)]
pub struct Asked {
    /// The limit's key (its name and the bucket it counts).
    pub limit_key: Arc<str>,
    /// The limit, in requests per second.
    pub limit: f64,
    /// What the proxy was asked for, requests per second (finite, non-negative).
    pub demand: f64,
}

/// The demand table in one Redis.
pub struct SharedDemands {
    manager: ConnectionManager,
    share: Script,
    forget: Script,
    /// This process, in the stream tags it writes: replicas' stream numbers collide.
    replica: String,
    errors: IntCounter,
}

impl std::fmt::Debug for SharedDemands {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedDemands")
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

impl SharedDemands {
    /// The table in the Redis at `url` (`redis://` or `rediss://`; `ca_pem`: the roots a
    /// `rediss://` certificate must chain to, else the system's). Connects lazily: a Redis
    /// that is down at start only leaves reports unanswered until it is up. Registers
    /// `mixer_rlqs_shared_state_errors_total` in `registry`.
    pub fn new(
        url: &str,
        ca_pem: Option<&[u8]>,
        registry: &Registry,
    ) -> Result<SharedDemands, String> {
        let client = match ca_pem {
            Some(pem) => redis::Client::build_with_tls(
                url,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.to_vec()),
                },
            ),
            None => redis::Client::open(url),
        }
        .map_err(|e| format!("RLQS shared state {url:?}: {e}"))?;
        SharedDemands::with_client(client, errors_counter(registry)?)
            .map_err(|e| format!("RLQS shared state {url:?}: {e}"))
    }

    /// The table in the Redis `info` names, its failures counted in `errors` (several
    /// tables share one counter). Connects lazily, as [`SharedDemands::new`].
    pub fn connect(info: ConnectionInfo, errors: IntCounter) -> Result<SharedDemands, String> {
        let client = redis::Client::open(info).map_err(|e| e.to_string())?;
        SharedDemands::with_client(client, errors)
    }

    fn with_client(client: redis::Client, errors: IntCounter) -> Result<SharedDemands, String> {
        // No retries inside a call: the report goes unanswered and the next one tries again.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CALL_TIMEOUT))
            .set_response_timeout(Some(CALL_TIMEOUT))
            .set_number_of_retries(0);
        let manager =
            ConnectionManager::new_lazy_with_config(client, config).map_err(|e| e.to_string())?;
        let replica = format!(
            "{:x}",
            std::collections::hash_map::RandomState::new().hash_one(std::process::id())
        );
        Ok(SharedDemands {
            manager,
            share: Script::new(SHARE),
            forget: Script::new(FORGET),
            replica,
            errors,
        })
    }

    /// The tag of this process's stream `serial`.
    pub fn stream_tag(&self, serial: u64) -> String {
        format!("{}-{serial}", self.replica)
    }

    /// Records `proxy`'s demands and answers its grants (requests per second), one per
    /// `asked`, in one round trip. An error is counted; the caller sends no assignment.
    pub async fn shares(
        &self,
        proxy: &str,
        stream: &str,
        ttl: Duration,
        asked: &[Asked],
    ) -> Result<Vec<f64>, String> {
        if asked.is_empty() {
            return Ok(Vec::new());
        }
        let mut call = self.share.prepare_invoke();
        call.arg(proxy)
            .arg(stream)
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
            .arg(FLOOR_FRACTION)
            .arg(KEY_MARGIN_MS);
        for a in asked {
            call.key(format!("{KEY_PREFIX}{}", a.limit_key))
                .arg(a.demand)
                .arg(a.limit);
        }
        let mut conn = self.manager.clone();
        let answer: Result<Vec<String>, String> =
            match tokio::time::timeout(CALL_TIMEOUT, call.invoke_async(&mut conn)).await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {CALL_TIMEOUT:?}")),
            };
        let grants = answer.and_then(|v| {
            let grants: Vec<f64> = v.iter().filter_map(|s| s.parse().ok()).collect();
            if grants.len() == asked.len() && grants.iter().all(|g| g.is_finite()) {
                Ok(grants)
            } else {
                Err(format!("unexpected answer {v:?}"))
            }
        });
        if let Err(e) = &grants {
            self.errors.inc();
            tracing::debug!(%proxy, "rlqs: no new assignment, the shared demand table failed: {e}");
        }
        grants
    }

    /// Removes what `stream` wrote for `proxy` under `limit_keys`, in the background (the
    /// stream has ended; nothing waits for it). Without a Redis, the entries expire anyway.
    pub fn forget(self: &Arc<Self>, proxy: &str, stream: &str, limit_keys: &[Arc<str>]) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if limit_keys.is_empty() {
            return;
        }
        let mut conn = self.manager.clone();
        // The invocation borrows the script, so it is built inside the task.
        let this = self.clone();
        let (proxy, stream) = (proxy.to_owned(), stream.to_owned());
        let keys: Vec<String> = limit_keys
            .iter()
            .map(|k| format!("{KEY_PREFIX}{k}"))
            .collect();
        rt.spawn(async move {
            let mut call = this.forget.prepare_invoke();
            call.arg(&proxy).arg(&stream);
            for key in &keys {
                call.key(key);
            }
            let sent = tokio::time::timeout(CALL_TIMEOUT, call.invoke_async::<i64>(&mut conn));
            if !matches!(sent.await, Ok(Ok(_))) {
                tracing::debug!(%proxy, "rlqs: a closed stream's demands are left to expire");
            }
        });
    }
}

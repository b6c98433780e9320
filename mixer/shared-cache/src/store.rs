//! The Redis side: one server or a Redis Cluster, and the scripts that keep an entry's use
//! count exact.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Script, Value};

/// Where the shared tier lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// One Redis: `redis://HOST:PORT[/DB]` or `rediss://...[#insecure]`.
    Single(String),
    /// A Redis Cluster, from its seed nodes (`redis+cluster://h1:p1,h2:p2`, or
    /// `rediss+cluster://` with TLS).
    Cluster(Vec<String>),
}

/// Parses `--shared-cache`.
pub fn parse_target(text: &str) -> Result<Target, String> {
    let text = text.trim();
    let (cluster, scheme, rest) = if let Some(rest) = text.strip_prefix("redis+cluster://") {
        (true, "redis", rest)
    } else if let Some(rest) = text.strip_prefix("rediss+cluster://") {
        (true, "rediss", rest)
    } else if text.starts_with("redis://") || text.starts_with("rediss://") {
        (false, "", text)
    } else {
        return Err(format!(
            "{text:?} is not a Redis address: use redis://HOST:PORT[/DB], rediss://HOST:PORT[/DB][#insecure] or redis+cluster://HOST:PORT,HOST:PORT"
        ));
    };
    let check = |url: &str| {
        redis::parse_redis_url(url)
            .filter(|u| u.host_str().is_some_and(|h| !h.is_empty()))
            .map(|_| ())
            .ok_or_else(|| format!("{url:?} is not a valid Redis address (HOST:PORT)"))
    };
    if !cluster {
        check(rest)?;
        return Ok(Target::Single(rest.to_string()));
    }
    // Seeds share the scheme, and anything after the last seed (`/db` has no meaning in a
    // cluster; `#insecure` does).
    let (seeds, fragment) = match rest.split_once('#') {
        Some((s, f)) => (s, format!("#{f}")),
        None => (rest, String::new()),
    };
    let nodes: Vec<String> = seeds
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| format!("{scheme}://{}{fragment}", s.trim_end_matches('/')))
        .collect();
    if nodes.is_empty() {
        return Err(format!("{text:?} names no cluster node (HOST:PORT,...)"));
    }
    for n in &nodes {
        check(n)?;
    }
    Ok(Target::Cluster(nodes))
}

/// A CA file makes sense only for a `rediss://` target whose certificate is checked.
fn check_ca(target: &Target, pem: &[u8]) -> Result<(), String> {
    let urls = match target {
        Target::Single(url) => std::slice::from_ref(url),
        Target::Cluster(nodes) => nodes.as_slice(),
    };
    for url in urls {
        if !url.starts_with("rediss://") {
            return Err(format!(
                "a CA file is for TLS, and {url:?} is not a TLS address: use rediss://"
            ));
        }
        if url.ends_with("#insecure") {
            return Err(format!(
                "{url:?} skips the certificate check (#insecure), so a CA file would not be used: drop one of them"
            ));
        }
    }
    if !String::from_utf8_lossy(pem).contains("-----BEGIN CERTIFICATE-----") {
        return Err("the CA file holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into());
    }
    Ok(())
}

/// A connection to either kind of target.
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// What a take found: the verdict bytes, its remaining life, the uses granted (-1: the
/// verdict has no use limit).
pub struct Taken {
    pub value: Vec<u8>,
    pub ttl_ms: i64,
    pub uses: i64,
}

/// Takes uses from an entry: at most ARGV[1], at most a 32nd of what is left, at least one
/// while any is left. Nothing when absent, expired or used up. An entry whose last use is
/// taken is deleted, so the next evaluation of its request can store a fresh one.
const TAKE: &str = r"
local v = redis.call('HGET', KEYS[1], 'v')
if not v then return false end
local ttl = redis.call('PTTL', KEYS[1])
if ttl <= 0 then return false end
local u = redis.call('HGET', KEYS[1], 'u')
if not u then return {v, ttl, -1} end
u = tonumber(u)
if u <= 0 then
  redis.call('DEL', KEYS[1])
  return false
end
local grant = math.floor(u / 32)
local want = tonumber(ARGV[1])
if grant > want then grant = want end
if grant < 1 then grant = 1 end
if grant >= u then
  redis.call('DEL', KEYS[1])
else
  redis.call('HINCRBY', KEYS[1], 'u', -grant)
end
return {v, ttl, grant}
";

/// Writes an entry unless one is there: of two replicas filling the same entry at once, the
/// first one's count stands, so the uses are never counted twice.
const PUT: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if tonumber(ARGV[3]) >= 0 then
  redis.call('HSET', KEYS[1], 'v', ARGV[1], 'u', ARGV[3])
else
  redis.call('HSET', KEYS[1], 'v', ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
";

/// Adds unserved uses back to an entry that still exists.
const GIVE_BACK: &str = r"
if redis.call('HEXISTS', KEYS[1], 'u') == 1 then
  redis.call('HINCRBY', KEYS[1], 'u', ARGV[1])
  return 1
end
return 0
";

/// How long a connection attempt may take; it runs in the background, calls waiting on it
/// are bounded by their own budget.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

struct Scripts {
    take: Script,
    put: Script,
    give_back: Script,
}

/// The Redis client side, cheap to clone.
#[derive(Clone)]
pub(crate) struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    single: Option<ConnectionManager>,
    cluster: Option<ClusterClient>,
    /// The cluster connection, once made (it follows slot moves and node failures itself).
    cluster_conn: Mutex<Option<ClusterConnection>>,
    connecting: std::sync::atomic::AtomicBool,
    scripts: Scripts,
}

impl Store {
    /// A store for `target`; `ca_pem`: the certificates (PEM) a `rediss://` server's
    /// certificate must chain to, instead of the system's roots.
    pub(crate) fn new(target: &Target, ca_pem: Option<&[u8]>) -> Result<Store, String> {
        if let Some(pem) = ca_pem {
            check_ca(target, pem)?;
        }
        let certs = |pem: &[u8]| redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem.to_vec()),
        };
        let (single, cluster) = match target {
            Target::Single(url) => {
                let client = match ca_pem {
                    Some(pem) => redis::Client::build_with_tls(url.as_str(), certs(pem)),
                    None => redis::Client::open(url.as_str()),
                }
                .map_err(|e| format!("--shared-cache {url:?}: {e}"))?;
                // No retries inside a call: a refused connection fails the call at once and the
                // breaker spaces out further attempts.
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(Duration::from_secs(1)))
                    .set_number_of_retries(0);
                let manager = ConnectionManager::new_lazy_with_config(client, config)
                    .map_err(|e| format!("--shared-cache {url:?}: {e}"))?;
                (Some(manager), None)
            }
            Target::Cluster(nodes) => {
                let mut builder = ClusterClient::builder(nodes.iter().map(String::as_str))
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(Duration::from_secs(1))
                    .retries(1);
                if let Some(pem) = ca_pem {
                    builder = builder.certs(certs(pem));
                }
                let client = builder
                    .build()
                    .map_err(|e| format!("--shared-cache cluster {nodes:?}: {e}"))?;
                (None, Some(client))
            }
        };
        Ok(Store {
            inner: Arc::new(Inner {
                single,
                cluster,
                cluster_conn: Mutex::new(None),
                connecting: std::sync::atomic::AtomicBool::new(false),
                scripts: Scripts {
                    take: Script::new(TAKE),
                    put: Script::new(PUT),
                    give_back: Script::new(GIVE_BACK),
                },
            }),
        })
    }

    /// Starts connecting (a cluster connection) in the background.
    pub(crate) fn warm_up(&self) {
        let _ = self.connection();
    }

    fn connection(&self) -> Result<Conn, redis::RedisError> {
        if let Some(m) = &self.inner.single {
            return Ok(Conn::Single(m.clone()));
        }
        let slot = self
            .inner
            .cluster_conn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(c) = slot {
            return Ok(Conn::Cluster(c));
        }
        use std::sync::atomic::Ordering;
        if let (Some(client), Ok(rt)) = (&self.inner.cluster, tokio::runtime::Handle::try_current())
            && !self.inner.connecting.swap(true, Ordering::AcqRel)
        {
            let client = client.clone();
            let inner = self.inner.clone();
            rt.spawn(async move {
                match client.get_async_connection().await {
                    Ok(conn) => {
                        *inner.cluster_conn.lock().unwrap_or_else(|e| e.into_inner()) = Some(conn);
                    }
                    Err(e) => tracing::debug!("shared cache: connecting to the cluster: {e}"),
                }
                inner.connecting.store(false, Ordering::Release);
            });
        }
        Err(redis::RedisError::from((
            redis::ErrorKind::Io,
            "connecting to the Redis Cluster",
        )))
    }

    pub(crate) async fn take(
        &self,
        key: &str,
        want: u32,
    ) -> Result<Option<Taken>, redis::RedisError> {
        let mut conn = self.connection()?;
        let answer: Option<(Vec<u8>, i64, i64)> = self
            .inner
            .scripts
            .take
            .key(key)
            .arg(want)
            .invoke_async(&mut conn)
            .await?;
        Ok(answer.map(|(value, ttl_ms, uses)| Taken {
            value,
            ttl_ms,
            uses,
        }))
    }

    pub(crate) async fn put(
        &self,
        key: &str,
        value: &[u8],
        ttl_ms: u64,
        uses: i64,
    ) -> Result<bool, redis::RedisError> {
        let mut conn = self.connection()?;
        let written: i64 = self
            .inner
            .scripts
            .put
            .key(key)
            .arg(value)
            .arg(ttl_ms)
            .arg(uses)
            .invoke_async(&mut conn)
            .await?;
        Ok(written == 1)
    }

    pub(crate) async fn give_back(&self, key: &str, uses: i64) -> Result<bool, redis::RedisError> {
        let mut conn = self.connection()?;
        let given: i64 = self
            .inner
            .scripts
            .give_back
            .key(key)
            .arg(uses)
            .invoke_async(&mut conn)
            .await?;
        Ok(given == 1)
    }

    pub(crate) async fn members(&self, key: &str) -> Result<Vec<Vec<u8>>, redis::RedisError> {
        let mut conn = self.connection()?;
        redis::cmd("SMEMBERS").arg(key).query_async(&mut conn).await
    }

    pub(crate) async fn add_member(
        &self,
        key: &str,
        member: &[u8],
        life: Duration,
    ) -> Result<(), redis::RedisError> {
        let mut conn = self.connection()?;
        let ms = u64::try_from(life.as_millis()).unwrap_or(u64::MAX);
        // One key: a pipeline stays on its slot in a cluster.
        redis::pipe()
            .cmd("SADD")
            .arg(key)
            .arg(member)
            .ignore()
            .cmd("PEXPIRE")
            .arg(key)
            .arg(ms)
            .ignore()
            .query_async::<()>(&mut conn)
            .await
    }
}

//! `serve --shared-cache`: the check cache tier shared by the replicas, in Redis.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};

/// The shared check cache's flags.
#[derive(clap::Args, Debug, Clone)]
pub struct SharedCacheArgs {
    /// A check cache shared by every replica, under the in-process one:
    /// `redis://HOST:PORT[/DB]`, `rediss://HOST:PORT[/DB][#insecure]` (TLS; `#insecure` skips
    /// the certificate check) or `redis+cluster://HOST:PORT,HOST:PORT` (Redis Cluster, from
    /// seed nodes). Replicas running the same config share verdicts.
    #[arg(long, value_name = "URL", value_parser = mixer_shared_cache::parse_target)]
    pub shared_cache: Option<mixer_shared_cache::Target>,
    /// Longest one shared cache lookup or store may take; past it the check is decided
    /// without it.
    #[arg(long, default_value = "5ms", value_parser = crate::parse_duration)]
    pub shared_cache_timeout: Duration,
    /// Longest the in-process cache keeps a verdict found in the shared cache (never longer
    /// than its remaining life there), so a lost invalidation cannot keep it long.
    #[arg(long, default_value = "2s", value_parser = crate::parse_duration)]
    pub shared_cache_local_life: Duration,
    /// Most uses of a use-limited verdict a replica takes from the shared cache at a time
    /// (at most a 32nd of those left, one at a time below 32).
    #[arg(long, default_value_t = mixer_shared_cache::DEFAULT_LEASE, value_parser = clap::value_parser!(u32).range(1..))]
    pub shared_cache_lease: u32,
    /// Longest a replica goes without reading the shapes (which attributes decisions read)
    /// other replicas learned: a shape is shared this late at most, and misses in between do
    /// not read the set.
    #[arg(long, default_value = "1s", value_parser = crate::parse_duration)]
    pub shared_cache_shapes_refresh: Duration,
    /// For `rediss://`: a PEM file of the CA certificates the server's certificate must chain
    /// to, instead of the system's roots.
    #[arg(long, value_name = "FILE")]
    pub shared_cache_ca: Option<PathBuf>,
    /// A file of keys the replicas share, one a line (the first seals entries, every one
    /// opens them): entries are then sealed with an HMAC over their key, expiry and value,
    /// and one written by anyone without a key is never served. Also taken from the
    /// environment variable MIXER_SHARED_CACHE_KEY (keys one a line) when no file is given.
    #[arg(long, value_name = "FILE")]
    pub shared_cache_key_file: Option<PathBuf>,
}

/// The environment variable holding the shared cache's keys when no file names them.
pub const KEY_ENV: &str = "MIXER_SHARED_CACHE_KEY";

/// The sealing keys, from `--shared-cache-key-file` or `MIXER_SHARED_CACHE_KEY`.
fn keys(args: &SharedCacheArgs) -> anyhow::Result<Option<Arc<mixer_shared_cache::seal::Keys>>> {
    let (text, from) = match &args.shared_cache_key_file {
        Some(path) => (
            std::fs::read_to_string(path)
                .with_context(|| format!("--shared-cache-key-file {}", path.display()))?,
            format!("--shared-cache-key-file {}", path.display()),
        ),
        None => match std::env::var(KEY_ENV) {
            Ok(text) => (text, KEY_ENV.to_string()),
            Err(_) => {
                tracing::warn!(
                    "--shared-cache without a key (--shared-cache-key-file or {KEY_ENV}): entries are not sealed, so whoever can write to that Redis can have any verdict served; keep it inside the trust boundary (README: Shared check cache)"
                );
                return Ok(None);
            }
        },
    };
    let keys = mixer_shared_cache::seal::Keys::parse(&text)
        .map_err(anyhow::Error::msg)
        .context(from)?;
    Ok(Some(Arc::new(keys)))
}

/// The tier, when `--shared-cache` asks for one.
pub fn tier(
    args: &SharedCacheArgs,
    check_cache_size: u64,
    registry: &prometheus::Registry,
) -> anyhow::Result<Option<mixer_runtime::SharedTierRef>> {
    let Some(target) = &args.shared_cache else {
        return Ok(None);
    };
    if check_cache_size == 0 {
        bail!(
            "--shared-cache needs the in-process check cache in front of it, which --check-cache-size 0 turns off: give a size above 0, or drop --shared-cache"
        );
    }
    if args.shared_cache_timeout.is_zero() {
        bail!("--shared-cache-timeout must be above 0");
    }
    let ca_pem = match &args.shared_cache_ca {
        Some(path) => Some(
            std::fs::read(path).with_context(|| format!("--shared-cache-ca {}", path.display()))?,
        ),
        None => None,
    };
    let cache = mixer_shared_cache::SharedCache::new(
        mixer_shared_cache::SharedCacheOptions {
            target: target.clone(),
            ca_pem,
            timeout: args.shared_cache_timeout,
            local_life: args.shared_cache_local_life,
            lease: args.shared_cache_lease,
            shapes_refresh: args.shared_cache_shapes_refresh,
            breaker: mixer_adapter_api::breaker::BreakerOptions::default(),
            keys: keys(args)?,
        },
        registry,
    )
    .map_err(anyhow::Error::msg)
    .context("--shared-cache")?;
    Ok(Some(mixer_runtime::SharedTierRef(cache as Arc<_>)))
}

/// The RLQS service: its demand table in the `--shared-cache` Redis when there is one, so
/// that the replicas' shares agree and any replica can take over a proxy's stream; else,
/// for each limit whose quota handler is a redisquota one, in that handler's Redis (read
/// from the active config at every report, so a reload moves it); else in this process
/// (one replica's view). A Redis Cluster target of `--shared-cache` is not used for RLQS,
/// said at start.
pub fn rlqs(
    args: &SharedCacheArgs,
    runtime: Arc<mixer_runtime::Runtime>,
    registry: &prometheus::Registry,
) -> anyhow::Result<mixer_frontends::rlqs::Rlqs> {
    let handler_redis = |runtime| -> anyhow::Result<mixer_frontends::rlqs::Rlqs> {
        let tables = mixer_frontends::rlqs::handler_redis::HandlerRedis::new(registry)
            .map_err(anyhow::Error::msg)
            .context("RLQS demands in redisquota handlers' Redis")?;
        Ok(mixer_frontends::rlqs::Rlqs::with_handler_redis(
            runtime, tables,
        ))
    };
    match &args.shared_cache {
        Some(mixer_shared_cache::Target::Single(url)) => {
            let ca_pem = match &args.shared_cache_ca {
                Some(path) => Some(
                    std::fs::read(path)
                        .with_context(|| format!("--shared-cache-ca {}", path.display()))?,
                ),
                None => None,
            };
            let shared = mixer_frontends::rlqs::shared_state::SharedDemands::new(
                url,
                ca_pem.as_deref(),
                registry,
            )
            .map_err(anyhow::Error::msg)
            .context("--shared-cache")?;
            Ok(mixer_frontends::rlqs::Rlqs::shared(runtime, shared))
        }
        Some(mixer_shared_cache::Target::Cluster(_)) => {
            tracing::warn!(
                "--shared-cache names a Redis Cluster: RLQS demands stay in each replica, or in the Redis of a limit's redisquota handler (README: Rate limit quota service)"
            );
            handler_redis(runtime)
        }
        None => handler_redis(runtime),
    }
}

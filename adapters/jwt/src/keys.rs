//! Verification keys: a JWKS document parsed within bounds, and the store that fetches it
//! (directly or through OIDC discovery), keeps it, and refreshes it on its cache headers and
//! on an unknown `kid`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use mixer_adapter_api::log_gate::LogGate;
use sha2::{Digest, Sha256};

/// Largest JWKS or discovery document read (real ones are a few KiB).
pub const MAX_DOCUMENT: usize = 1 << 20;
/// Most keys a JWKS may hold; a document with more is refused whole and the previous keys
/// stay (providers publish two or three: the current key and the next or the last).
pub const MAX_KEYS: usize = 100;
/// Largest RSA modulus accepted; bigger keys would make each check cost milliseconds.
pub const MAX_RSA_BITS: usize = 8192;
/// An unknown `kid` triggers at most one fetch per this interval per handler, so a flood of
/// made-up kids costs the provider one request a second, and a rotated key is still picked up
/// within a second or two.
pub const UNKNOWN_KID_INTERVAL: Duration = Duration::from_secs(1);

/// One verification key.
#[derive(Clone)]
pub struct Key {
    /// `kid`, if the JWK has one.
    pub kid: Option<String>,
    /// `alg`, if the JWK pins one.
    pub alg: Option<Algorithm>,
    /// The key.
    pub key: DecodingKey,
}

/// A parsed JWKS: the usable signing keys, and what was left out and why.
#[derive(Clone, Default)]
pub struct KeySet {
    keys: Vec<Key>,
    /// Why each left-out key was (for logs).
    pub skipped: Vec<String>,
    digest: [u8; 32],
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kids: Vec<&str> = self.keys.iter().filter_map(|k| k.kid.as_deref()).collect();
        f.debug_struct("KeySet")
            .field("kids", &kids)
            .field("skipped", &self.skipped)
            .finish()
    }
}

fn rsa_bits(n: &str) -> usize {
    // base64url without padding: 4 characters carry 3 bytes.
    let trimmed = n.trim_start_matches('A');
    trimmed.len() * 6
}

impl KeySet {
    /// Parses a JWKS document. Keys that are not signing keys, of an unsupported type, or
    /// too big are left out (and named in [`KeySet::skipped`]); symmetric (`oct`) keys are
    /// too, since HS* tokens are checked only against the handler's own secret.
    pub fn parse(body: &[u8]) -> Result<KeySet, String> {
        if body.len() > MAX_DOCUMENT {
            return Err(format!("JWKS is larger than {MAX_DOCUMENT} bytes"));
        }
        #[derive(serde::Deserialize)]
        struct Document {
            keys: Vec<serde_json::Value>,
        }
        let doc: Document = serde_json::from_slice(body)
            .map_err(|e| format!("not a JWKS document (a JSON object with `keys`): {e}"))?;
        if doc.keys.len() > MAX_KEYS {
            return Err(format!(
                "JWKS holds {} keys, more than the {MAX_KEYS} accepted",
                doc.keys.len()
            ));
        }
        let mut set = KeySet {
            digest: Sha256::digest(body).into(),
            ..KeySet::default()
        };
        for (i, value) in doc.keys.into_iter().enumerate() {
            match Self::key(value) {
                Ok(key) => set.keys.push(key),
                Err(why) => set.skipped.push(format!("keys[{i}]: {why}")),
            }
        }
        Ok(set)
    }

    fn key(value: serde_json::Value) -> Result<Key, String> {
        let jwk: Jwk = serde_json::from_value(value).map_err(|e| format!("not a JWK: {e}"))?;
        let kid = jwk.common.key_id.clone();
        if matches!(
            jwk.common.public_key_use,
            Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
        ) {
            return Err("not a signing key (`use` is not `sig`)".into());
        }
        let alg = match jwk.common.key_algorithm {
            None => None,
            Some(a) => Some(
                // JWE algorithms (RSA-OAEP, ...) have no signing counterpart.
                a.to_string()
                    .parse::<Algorithm>()
                    .map_err(|_| format!("unsupported alg {a}"))?,
            ),
        };
        match &jwk.algorithm {
            AlgorithmParameters::OctetKey(_) => {
                return Err("symmetric keys are not taken from a JWKS".into());
            }
            AlgorithmParameters::RSA(rsa) if rsa_bits(&rsa.n) > MAX_RSA_BITS + 8 => {
                return Err(format!("RSA key larger than {MAX_RSA_BITS} bits"));
            }
            _ => {}
        }
        let key = DecodingKey::from_jwk(&jwk).map_err(|e| format!("unusable key: {e}"))?;
        if let Some(alg) = alg
            && alg.family() != key.family()
        {
            return Err(format!("alg {alg:?} does not fit the key type"));
        }
        Ok(Key { kid, alg, key })
    }

    /// Whether no key is usable.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// How many keys are usable.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether a key has this `kid`.
    pub fn has_kid(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.kid.as_deref() == Some(kid))
    }

    /// The keys that may have signed a token with this `alg` and `kid`: of the algorithm's
    /// family, pinned to it or to none, and with that kid when the token names one.
    pub fn candidates<'a>(
        &'a self,
        kid: Option<&'a str>,
        alg: Algorithm,
    ) -> impl Iterator<Item = &'a Key> + 'a {
        self.keys.iter().filter(move |k| {
            k.key.family() == alg.family()
                && k.alg.is_none_or(|a| a == alg)
                && kid.is_none_or(|kid| k.kid.as_deref() == Some(kid))
        })
    }
}

/// Bounds of the fetching.
#[derive(Clone, Debug)]
pub struct FetchBounds {
    /// Least time between scheduled fetches.
    pub min_refresh: Duration,
    /// Most time between scheduled fetches.
    pub max_refresh: Duration,
    /// One fetch's time limit.
    pub timeout: Duration,
}

/// Where fetched keys come from.
#[derive(Clone, Debug)]
pub enum Remote {
    /// A JWKS URL.
    Jwks(String),
    /// An OIDC discovery document's URL.
    Discovery(String),
}

/// Fetched keys: the last good set, refreshed in the background and on an unknown `kid`.
pub struct KeyStore {
    remote: Remote,
    bounds: FetchBounds,
    client: reqwest::Client,
    name: Arc<str>,
    current: ArcSwapOption<KeySet>,
    /// Bumped when the installed keys change (a verified token is re-checked then).
    generation: AtomicU64,
    /// When the last fetch started.
    last_attempt: Mutex<Option<Instant>>,
    last_error: Mutex<Option<String>>,
    /// One fetch at a time; a request that found an unknown kid waits for one in flight.
    fetching: tokio::sync::Mutex<()>,
    failing: LogGate,
}

impl KeyStore {
    /// A store with no keys yet.
    pub fn new(
        remote: Remote,
        bounds: FetchBounds,
        name: Arc<str>,
    ) -> Result<KeyStore, reqwest::Error> {
        let client = reqwest::Client::builder()
            .timeout(bounds.timeout)
            .connect_timeout(bounds.timeout)
            .redirect(reqwest::redirect::Policy::limited(3))
            .user_agent("mixer-jwt")
            .build()?;
        Ok(KeyStore {
            remote,
            bounds,
            client,
            name,
            current: ArcSwapOption::empty(),
            generation: AtomicU64::new(0),
            last_attempt: Mutex::new(None),
            last_error: Mutex::new(None),
            fetching: tokio::sync::Mutex::new(()),
            failing: LogGate::new(Duration::from_secs(30)),
        })
    }

    /// The keys, if a fetch has succeeded.
    pub fn keys(&self) -> Option<Arc<KeySet>> {
        self.current.load_full()
    }

    /// Bumped each time the installed keys change.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Why the last fetch failed, if it did.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Installs keys given directly (tests, benches).
    pub fn install(&self, set: KeySet) {
        let changed = self
            .current
            .load()
            .as_ref()
            .is_none_or(|old| old.digest != set.digest);
        self.current.store(Some(Arc::new(set)));
        if changed {
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Fetches now (waiting for a fetch in flight first); the time the keys may be kept.
    pub async fn refresh(&self) -> Result<Duration, String> {
        let _one = self.fetching.lock().await;
        self.fetch_locked().await
    }

    /// After a token named a `kid` no key has: fetches again unless a fetch started less
    /// than [`UNKNOWN_KID_INTERVAL`] ago, and answers the keys then current.
    pub async fn refresh_for_unknown_kid(&self) -> Option<Arc<KeySet>> {
        let seen = self.generation();
        let _one = self.fetching.lock().await;
        // A fetch that finished while this one waited may have brought the kid.
        if self.generation() != seen {
            return self.keys();
        }
        let recent = self
            .last_attempt
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|at| at.elapsed() < UNKNOWN_KID_INTERVAL);
        if !recent {
            // A failure keeps the keys there were; it is logged by `fetch_locked`.
            let _ = self.fetch_locked().await;
        }
        self.keys()
    }

    async fn fetch_locked(&self) -> Result<Duration, String> {
        *self.last_attempt.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        let result = self.fetch().await;
        let mut last_error = self.last_error.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Ok((set, max_age)) => {
                if !set.skipped.is_empty() {
                    tracing::debug!(handler = %self.name, skipped = ?set.skipped, "jwt: JWKS keys left out");
                }
                self.install(set);
                *last_error = None;
                Ok(max_age)
            }
            Err(e) => {
                if let Some(held_back) = self.failing.due() {
                    tracing::warn!(
                        handler = %self.name, error = %e, held_back,
                        "jwt: could not fetch keys; the keys fetched before stay in use"
                    );
                }
                *last_error = Some(e.clone());
                Err(e)
            }
        }
    }

    async fn fetch(&self) -> Result<(KeySet, Duration), String> {
        let jwks_uri = match &self.remote {
            Remote::Jwks(uri) => uri.clone(),
            Remote::Discovery(url) => {
                #[derive(serde::Deserialize)]
                struct Discovery {
                    jwks_uri: String,
                }
                let (body, _) = self.get(url).await?;
                let doc: Discovery = serde_json::from_slice(&body).map_err(|e| {
                    format!("{url}: not an OpenID configuration with jwks_uri: {e}")
                })?;
                doc.jwks_uri
            }
        };
        let (body, max_age) = self.get(&jwks_uri).await?;
        let set = KeySet::parse(&body).map_err(|e| format!("{jwks_uri}: {e}"))?;
        if set.is_empty() {
            return Err(format!(
                "{jwks_uri}: no usable signing key ({:?})",
                set.skipped
            ));
        }
        let keep = max_age
            .unwrap_or(self.bounds.max_refresh)
            .clamp(self.bounds.min_refresh, self.bounds.max_refresh);
        Ok((set, keep))
    }

    /// GET within the size bound; the body and the response's `max-age`.
    async fn get(&self, url: &str) -> Result<(Vec<u8>, Option<Duration>), String> {
        let mut response = self
            .client
            .get(url)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("{url}: HTTP {}", response.status()));
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_DOCUMENT as u64)
        {
            return Err(format!("{url}: larger than {MAX_DOCUMENT} bytes"));
        }
        let max_age = response
            .headers()
            .get_all("cache-control")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(max_age);
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| format!("{url}: {e}"))? {
            if body.len() + chunk.len() > MAX_DOCUMENT {
                return Err(format!("{url}: larger than {MAX_DOCUMENT} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok((body, max_age))
    }

    /// Fetches on the keys' cache life until the store is dropped; after a failure, again
    /// within a few seconds (the keys there were stay in use meanwhile).
    pub async fn refresh_loop(store: std::sync::Weak<KeyStore>) {
        loop {
            let Some(this) = store.upgrade() else { return };
            let wait = match this.refresh().await {
                Ok(keep) => keep,
                Err(_) => this
                    .bounds
                    .min_refresh
                    .clamp(Duration::from_secs(1), Duration::from_secs(5)),
            };
            drop(this);
            tokio::time::sleep(wait).await;
        }
    }
}

/// `max-age` of one `Cache-Control` value (`no-store`/`no-cache` count as 0).
fn max_age(value: &str) -> Option<Duration> {
    value.split(',').find_map(|directive| {
        let directive = directive.trim();
        if directive.eq_ignore_ascii_case("no-store") || directive.eq_ignore_ascii_case("no-cache")
        {
            return Some(Duration::ZERO);
        }
        let (name, seconds) = directive.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("max-age") {
            return None;
        }
        seconds
            .trim()
            .trim_matches('"')
            .parse::<u64>()
            .ok()
            .map(Duration::from_secs)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_age_is_read_from_cache_control() {
        assert_eq!(
            max_age("public, max-age=300"),
            Some(Duration::from_secs(300))
        );
        assert_eq!(max_age("no-store"), Some(Duration::ZERO));
        assert_eq!(max_age("public"), None);
        assert_eq!(max_age("max-age=soon"), None);
    }
}

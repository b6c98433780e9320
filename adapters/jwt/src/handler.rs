//! The jwt handler: finds the token, verifies it, and answers its claims as outputs or a
//! denial.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::ErrorKind as JwtErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use mixer_adapter_api::log_gate::LogGate;
use mixer_adapter_api::{AdapterError, AttributeHandler, Denial, ErrorKind, Generated, Handler};
use mixer_model::{
    Code, HeaderOp, HeaderOperation, Instance, InstanceView, Status, StringMap, Timestamp, Value,
};
use sha2::{Digest, Sha256};

use crate::keys::{KeySet, KeyStore};
use crate::params::{JwtConfig, KeySource};

/// Largest token read; a longer one is a denial before any parsing (real tokens are a few
/// hundred bytes to a few KiB).
pub const MAX_TOKEN: usize = 16 << 10;

/// Where a handler's keys are.
enum Keys {
    Inline(Arc<KeySet>),
    Fetched(Arc<KeyStore>),
    None,
}

/// A token that verified: its outputs, until when they hold, and under which keys.
struct Verified {
    outputs: Vec<(&'static str, Value)>,
    /// `exp`, seconds since the epoch.
    exp: i64,
    /// The payload's size, which the outputs hold about twice (claims and raw claims).
    bytes: usize,
    generation: u64,
}

/// Verifies `jwt` instances.
pub struct JwtHandler {
    config: JwtConfig,
    name: Arc<str>,
    keys: Keys,
    secret: Option<DecodingKey>,
    /// Tokens that verified, by SHA-256; `None` when `verifiedTokens` is 0.
    verified: Option<moka::sync::Cache<[u8; 32], Arc<Verified>>>,
    refresher: Option<tokio::task::AbortHandle>,
    denials: LogGate,
}

impl std::fmt::Debug for JwtHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtHandler")
            .field("name", &self.name)
            .field("issuer", &self.config.issuer)
            .finish_non_exhaustive()
    }
}

impl Drop for JwtHandler {
    fn drop(&mut self) {
        if let Some(task) = &self.refresher {
            task.abort();
        }
    }
}

/// Why a token is refused, and whether the same token is refused for good.
struct Refused {
    reason: String,
    /// False when the verdict may change with the keys or the clock (an unknown kid, a
    /// signature that does not verify, a token not valid yet): such a denial is not reused,
    /// so a key published later or the token's `nbf` passing takes effect at the next request.
    lasting: bool,
}

impl Refused {
    fn lasting(reason: impl Into<String>) -> Refused {
        Refused {
            reason: reason.into(),
            lasting: true,
        }
    }

    fn for_now(reason: impl Into<String>) -> Refused {
        Refused {
            reason: reason.into(),
            lasting: false,
        }
    }
}

/// Why a token is refused; the message says which check failed, never the token.
fn denial(reason: &str) -> Generated {
    let description = reason.replace(['"', '\\'], "'");
    Generated::denied(Denial {
        status: Status::new(
            Code::Unauthenticated,
            format!("invalid bearer token: {reason}"),
        ),
        response_headers: vec![HeaderOperation {
            name: "WWW-Authenticate".into(),
            value: format!("Bearer error=\"invalid_token\", error_description=\"{description}\""),
            op: HeaderOp::Replace,
        }],
    })
}

fn now_seconds() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The value of cookie `name` in a `Cookie` header.
fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then(|| v.trim_matches('"'))
    })
}

/// A claim as text: strings as they are, numbers and booleans as JSON prints them, arrays of
/// strings joined with `,` (as `audiences`), anything else (objects, mixed arrays) as JSON.
fn claim_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(items) if items.iter().all(|i| i.is_string()) => items
            .iter()
            .filter_map(|i| i.as_str())
            .collect::<Vec<_>>()
            .join(","),
        other => other.to_string(),
    }
}

fn reason_of(error: &jsonwebtoken::errors::Error) -> Refused {
    match error.kind() {
        JwtErrorKind::ExpiredSignature => Refused::lasting("the token has expired"),
        JwtErrorKind::ImmatureSignature => Refused::for_now("the token is not valid yet (nbf)"),
        JwtErrorKind::InvalidAudience => Refused::lasting("the token is for another audience"),
        JwtErrorKind::InvalidIssuer => Refused::lasting("the token is from another issuer"),
        JwtErrorKind::MissingRequiredClaim(claim) => {
            Refused::lasting(format!("the token has no {claim} claim"))
        }
        JwtErrorKind::InvalidClaimFormat(claim) => {
            Refused::lasting(format!("the {claim} claim is malformed"))
        }
        JwtErrorKind::InvalidAlgorithm => Refused::for_now("the algorithm does not fit the key"),
        JwtErrorKind::InvalidSignature
        | JwtErrorKind::InvalidRsaKey(_)
        | JwtErrorKind::InvalidEcdsaKey
        | JwtErrorKind::InvalidEddsaKey
        | JwtErrorKind::InvalidKeyFormat => Refused::for_now("the signature does not verify"),
        _ => Refused::lasting("the token is malformed"),
    }
}

/// The `alg` of a header `decode_header` refused, for a clear reason (`none`).
fn raw_alg(token: &str) -> Option<String> {
    let header = URL_SAFE_NO_PAD.decode(token.split('.').next()?).ok()?;
    let header: serde_json::Value = serde_json::from_slice(&header).ok()?;
    header.get("alg")?.as_str().map(str::to_owned)
}

impl JwtHandler {
    /// Builds the handler; with fetched keys, starts fetching them on the current tokio
    /// runtime (an error when there is none).
    pub fn start(config: JwtConfig, name: Arc<str>) -> Result<JwtHandler, AdapterError> {
        let internal = |m: String| AdapterError::permanent(ErrorKind::Internal, m);
        let secret = match &config.secret {
            Some(s) => {
                Some(DecodingKey::from_secret(s).map_err(|e| internal(format!("secret: {e}")))?)
            }
            None => None,
        };
        let mut refresher = None;
        let keys = match &config.keys {
            KeySource::Inline(set) => Keys::Inline(set.clone()),
            KeySource::None => Keys::None,
            KeySource::Uri(uri) => Keys::Fetched(Arc::new(Self::store(
                crate::keys::Remote::Jwks(uri.clone()),
                &config,
                &name,
            )?)),
            KeySource::Discovery(url) => Keys::Fetched(Arc::new(Self::store(
                crate::keys::Remote::Discovery(url.clone()),
                &config,
                &name,
            )?)),
        };
        if let Keys::Fetched(store) = &keys {
            let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
                internal("the jwt adapter needs a tokio runtime to fetch its keys".into())
            })?;
            let task = runtime.spawn(KeyStore::refresh_loop(Arc::downgrade(store)));
            refresher = Some(task.abort_handle());
        }
        let verified = (config.verified_tokens > 0).then(|| {
            // Weighed in KiB of claims, so that large tokens cannot hold more memory than
            // `verifiedTokens` typical (sub-KiB) ones: about that many KiB at most.
            moka::sync::Cache::builder()
                .max_capacity(config.verified_tokens)
                .weigher(|_, v: &Arc<Verified>| {
                    u32::try_from(v.bytes.div_ceil(1024)).unwrap_or(u32::MAX)
                })
                .build()
        });
        Ok(JwtHandler {
            config,
            name,
            keys,
            secret,
            verified,
            refresher,
            denials: LogGate::new(Duration::from_secs(10)),
        })
    }

    fn store(
        remote: crate::keys::Remote,
        config: &JwtConfig,
        name: &Arc<str>,
    ) -> Result<KeyStore, AdapterError> {
        let bounds = crate::keys::FetchBounds {
            min_refresh: config.min_refresh,
            max_refresh: config.max_refresh,
            timeout: config.fetch_timeout,
        };
        KeyStore::new(remote, bounds, name.clone())
            .map_err(|e| AdapterError::permanent(ErrorKind::Internal, format!("HTTP client: {e}")))
    }

    /// The fetched keys' store, if the keys are fetched.
    pub fn key_store(&self) -> Option<&Arc<KeyStore>> {
        match &self.keys {
            Keys::Fetched(store) => Some(store),
            _ => None,
        }
    }

    /// What the verified tokens remembered weigh: KiB of their claims, at least 1 each.
    pub fn remembered_kib(&self) -> u64 {
        self.verified.as_ref().map_or(0, |cache| {
            cache.run_pending_tasks();
            cache.weighted_size()
        })
    }

    fn generation(&self) -> u64 {
        self.key_store().map_or(0, |s| s.generation())
    }

    /// The token the instance carries, if any.
    fn token<'a>(&self, instance: &'a Instance) -> Result<Option<&'a str>, AdapterError> {
        let InstanceView::Jwt(view) = instance.view() else {
            return Err(AdapterError::permanent(
                ErrorKind::InvalidInstance,
                format!(
                    "the jwt adapter takes jwt instances, not {}",
                    instance.template.name()
                ),
            ));
        };
        let header = view.token.map(str::trim).unwrap_or_default();
        let token = match header.get(..7) {
            Some(scheme) if scheme.eq_ignore_ascii_case("bearer ") => header[7..].trim_start(),
            // `Bearer ` with nothing after it, once trimmed.
            _ if header.eq_ignore_ascii_case("bearer") => "",
            _ => header,
        };
        if !token.is_empty() {
            return Ok(Some(token));
        }
        Ok(match (&self.config.cookie, view.cookie) {
            (Some(name), Some(header)) => cookie(header, name).filter(|t| !t.is_empty()),
            _ => None,
        })
    }

    fn deny(&self, reason: &str) -> Generated {
        tracing::debug!(handler = %self.name, reason, "jwt: token refused");
        if let Some(held_back) = self.denials.due() {
            tracing::info!(handler = %self.name, reason, held_back, "jwt: token refused");
        }
        denial(reason)
    }

    /// The keys a token with this header may be checked against.
    async fn keys_for(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Result<Vec<DecodingKey>, Refused>, AdapterError> {
        if alg.family() == jsonwebtoken::AlgorithmFamily::Hmac {
            return Ok(match &self.secret {
                Some(secret) => Ok(vec![secret.clone()]),
                None => Err(Refused::lasting(format!(
                    "algorithm {alg:?} is not allowed"
                ))),
            });
        }
        let pick = |set: &KeySet| -> Vec<DecodingKey> {
            set.candidates(kid, alg).map(|k| k.key.clone()).collect()
        };
        let set = match &self.keys {
            Keys::Inline(set) => set.clone(),
            Keys::None => {
                return Ok(Err(Refused::lasting(
                    "no key is configured for this algorithm",
                )));
            }
            Keys::Fetched(store) => {
                let mut set = store.keys();
                let known = |set: &Option<Arc<KeySet>>| match (set, kid) {
                    (Some(s), Some(kid)) => s.has_kid(kid),
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                if !known(&set) {
                    set = store.refresh_for_unknown_kid().await;
                }
                match set {
                    Some(set) => set,
                    None => {
                        return Err(AdapterError::transient(
                            ErrorKind::Unavailable,
                            format!(
                                "no verification keys: {}",
                                store
                                    .last_error()
                                    .unwrap_or_else(|| "not fetched yet".into())
                            ),
                        ));
                    }
                }
            }
        };
        if let Some(kid) = kid
            && !set.has_kid(kid)
        {
            return Ok(Err(Refused::for_now(format!("no key has kid {kid:?}"))));
        }
        let keys = pick(&set);
        if keys.is_empty() {
            return Ok(Err(Refused::for_now(format!(
                "no key fits algorithm {alg:?}"
            ))));
        }
        Ok(Ok(keys))
    }

    /// Verifies `token`: its outputs and `exp`, or why it is refused.
    async fn verify(&self, token: &str) -> Result<Result<Verified, Refused>, AdapterError> {
        let generation = self.generation();
        let header = match jsonwebtoken::decode_header(token) {
            Ok(h) => h,
            Err(_) => {
                return Ok(Err(Refused::lasting(match raw_alg(token) {
                    Some(alg) if alg.eq_ignore_ascii_case("none") => {
                        "unsigned tokens (alg none) are not accepted".into()
                    }
                    Some(alg) if alg.parse::<Algorithm>().is_err() => {
                        format!("algorithm {alg:?} is not supported")
                    }
                    _ => "the token is malformed".to_owned(),
                })));
            }
        };
        if !self.config.algorithms.contains(&header.alg) {
            return Ok(Err(Refused::lasting(format!(
                "algorithm {:?} is not allowed",
                header.alg
            ))));
        }
        let keys = match self.keys_for(header.kid.as_deref(), header.alg).await? {
            Ok(keys) => keys,
            Err(reason) => return Ok(Err(reason)),
        };
        let mut validation = Validation::new(header.alg);
        validation.leeway = self.config.leeway.as_secs();
        validation.set_issuer(&[&self.config.issuer]);
        if self.config.audiences.is_empty() {
            validation.validate_aud = false;
        } else {
            validation.set_audience(&self.config.audiences);
        }
        validation.validate_nbf = true;
        let mut last = None;
        for key in &keys {
            match jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
                token,
                key,
                &validation,
            ) {
                Ok(data) => return Ok(Ok(self.outputs(token, data.claims, generation))),
                Err(e) => {
                    // Another key may have signed it; any other failure is the token's own.
                    let bad_signature = matches!(e.kind(), JwtErrorKind::InvalidSignature);
                    last = Some(e);
                    if !bad_signature {
                        break;
                    }
                }
            }
        }
        Ok(Err(last.map_or_else(
            || Refused::lasting("the token is malformed"),
            |e| reason_of(&e),
        )))
    }

    fn outputs(
        &self,
        token: &str,
        claims: serde_json::Map<String, serde_json::Value>,
        generation: u64,
    ) -> Verified {
        let text = |name: &str| claims.get(name).map(claim_text).unwrap_or_default();
        let issuer = text("iss");
        let subject = text("sub");
        // `exp` is a required claim, checked as a number by the validation above.
        let exp = claims
            .get("exp")
            .and_then(serde_json::Value::as_f64)
            .map_or(0, |e| e as i64);
        let raw = token
            .split('.')
            .nth(1)
            .and_then(|p| URL_SAFE_NO_PAD.decode(p).ok())
            .and_then(|p| String::from_utf8(p).ok())
            .unwrap_or_default();
        let mut outputs: Vec<(&'static str, Value)> = vec![
            (
                "principal",
                Value::from(format!("{issuer}/{subject}").as_str()),
            ),
            ("issuer", Value::from(issuer.as_str())),
            ("subject", Value::from(subject.as_str())),
            ("audiences", Value::from(text("aud").as_str())),
        ];
        if claims.contains_key("azp") {
            outputs.push(("presenter", Value::from(text("azp").as_str())));
        }
        let map = StringMap::from_pairs(claims.iter().map(|(k, v)| (k.as_str(), claim_text(v))));
        outputs.push(("claims", Value::StringMap(Arc::new(map))));
        outputs.push(("raw_claims", Value::from(raw.as_str())));
        outputs.push((
            "expires_at",
            Value::Timestamp(Timestamp(exp.saturating_mul(1_000_000_000))),
        ));
        Verified {
            outputs,
            exp,
            bytes: 2 * raw.len(),
            generation,
        }
    }

    fn answer(&self, verified: &Verified, now: i64) -> Generated {
        let left = u64::try_from(verified.exp.saturating_sub(now)).unwrap_or(0);
        Generated {
            outputs: verified.outputs.clone(),
            valid_duration: Some(Duration::from_secs(left)),
            denial: None,
        }
    }
}

impl Handler for JwtHandler {
    fn as_attributes(&self) -> Option<&dyn AttributeHandler> {
        Some(self)
    }
}

#[async_trait]
impl AttributeHandler for JwtHandler {
    async fn generate(&self, instance: &Instance) -> Result<Generated, AdapterError> {
        let Some(token) = self.token(instance)? else {
            return Ok(if self.config.require_token {
                self.deny("no bearer token")
            } else {
                Generated::default()
            });
        };
        if token.len() > MAX_TOKEN {
            return Ok(self.deny(&format!("the token is longer than {MAX_TOKEN} bytes")));
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = now_seconds();
        if let Some(hit) = self.verified.as_ref().and_then(|v| v.get(&digest))
            && now < hit.exp
            && hit.generation == self.generation()
        {
            return Ok(self.answer(&hit, now));
        }
        match self.verify(token).await? {
            Ok(verified) => {
                let answer = self.answer(&verified, now);
                // Kept only while it has not expired: past `exp` it is checked again, and
                // refused then beyond the leeway.
                if let Some(cache) = &self.verified
                    && verified.exp > now
                {
                    cache.insert(digest, Arc::new(verified));
                }
                Ok(answer)
            }
            Err(refused) => {
                let mut denied = self.deny(&refused.reason);
                if !refused.lasting {
                    denied.valid_duration = Some(Duration::ZERO);
                }
                Ok(denied)
            }
        }
    }
}

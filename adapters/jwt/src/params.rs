//! The jwt handler's params and their validation into a [`JwtConfig`].

use std::time::Duration;

use jsonwebtoken::Algorithm;
use mixer_adapter_api::{DurationParam, ParamError};
use serde::Deserialize;

use crate::keys::KeySet;

/// Clock skew allowed on `exp` and `nbf` when `leeway` is not given (Istio's and most
/// identity providers' 60 seconds).
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(60);
/// Shortest time fetched keys are kept before they are fetched again, whatever their
/// `Cache-Control: max-age` says (a provider answering `max-age=0` is not asked on every call).
pub const DEFAULT_MIN_REFRESH: Duration = Duration::from_secs(30);
/// Longest time fetched keys are kept without asking again (a removed key stops working
/// within this, even when the provider says `max-age` of a day).
pub const DEFAULT_MAX_REFRESH: Duration = Duration::from_secs(600);
/// How long one fetch of the discovery document or the key set may take.
pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Verified tokens remembered when `verifiedTokens` is not given.
pub const DEFAULT_VERIFIED_TOKENS: u64 = 10_000;

/// The asymmetric algorithms accepted when `algorithms` is not given. HS* never are by
/// default: they need a configured `secret`.
pub const ASYMMETRIC: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// `params` of a jwt handler.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JwtParams {
    /// The `iss` every token must carry; also the base of OIDC discovery.
    #[serde(default)]
    pub issuer: String,
    /// Accepted `aud` values (a token must name one); empty: the audience is not checked, as
    /// in Istio's RequestAuthentication.
    #[serde(default)]
    pub audiences: Vec<String>,
    /// The keys, inline, as a JWKS document (JSON text).
    #[serde(default)]
    pub jwks: Option<String>,
    /// Where to fetch the JWKS document. Without it and without `jwks`, the issuer's
    /// `/.well-known/openid-configuration` names it (`jwks_uri`).
    #[serde(default)]
    pub jwks_uri: Option<String>,
    /// Clock skew allowed on `exp` and `nbf` (default `60s`).
    #[serde(default)]
    pub leeway: Option<DurationParam>,
    /// Accepted `alg` values (default: every asymmetric one; HS* only with `secret`).
    #[serde(default)]
    pub algorithms: Vec<String>,
    /// The shared secret of HS256/384/512 tokens (give it as `${NAME}` or `secretFile`).
    #[serde(default)]
    pub secret: Option<String>,
    /// The cookie to read the token from when the instance's `token` is empty.
    #[serde(default)]
    pub cookie: Option<String>,
    /// Whether a request without a token is denied (default false: it gets no outputs, and a
    /// rule on `request.auth.principal` decides, as with Istio's RequestAuthentication).
    #[serde(default)]
    pub require_token: bool,
    /// Fetched keys are kept at least this long (default `30s`).
    #[serde(default)]
    pub min_refresh_interval: Option<DurationParam>,
    /// Fetched keys are kept at most this long (default `10m`).
    #[serde(default)]
    pub max_refresh_interval: Option<DurationParam>,
    /// How long one fetch may take (default `5s`).
    #[serde(default)]
    pub fetch_timeout: Option<DurationParam>,
    /// How many verified tokens are remembered, so that a repeated token skips the signature
    /// check until its `exp` (default 10,000; 0: none). Each counts its claims' size in KiB
    /// (at least 1), so the memory held stays near this many KiB whatever the tokens' size.
    #[serde(default)]
    pub verified_tokens: Option<u64>,
}

/// Where the keys come from.
#[derive(Clone, Debug)]
pub enum KeySource {
    /// Given in the params.
    Inline(std::sync::Arc<KeySet>),
    /// Fetched from this URL.
    Uri(String),
    /// Fetched from the `jwks_uri` of the issuer's discovery document at this URL.
    Discovery(String),
    /// None: only HS* with the secret.
    None,
}

/// A handler's checked params.
#[derive(Clone, Debug)]
pub struct JwtConfig {
    /// The required `iss`.
    pub issuer: String,
    /// Accepted audiences (empty: not checked).
    pub audiences: Vec<String>,
    /// Where keys come from.
    pub keys: KeySource,
    /// Clock skew allowed.
    pub leeway: Duration,
    /// Accepted algorithms.
    pub algorithms: Vec<Algorithm>,
    /// The HS* secret.
    pub secret: Option<Vec<u8>>,
    /// The cookie to read a token from.
    pub cookie: Option<String>,
    /// A missing token is a denial.
    pub require_token: bool,
    /// Bounds on how long fetched keys are kept.
    pub min_refresh: Duration,
    /// See [`JwtConfig::min_refresh`].
    pub max_refresh: Duration,
    /// How long one fetch may take.
    pub fetch_timeout: Duration,
    /// How many verified tokens are remembered.
    pub verified_tokens: u64,
}

fn http_url(path: &str, url: &str, errors: &mut Vec<ParamError>) {
    let lower = url.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) || url.len() < 9 {
        errors.push(ParamError::new(
            path,
            format!("{url:?} is not an http:// or https:// URL"),
        ));
    }
}

fn duration(
    param: &Option<DurationParam>,
    path: &str,
    default: Duration,
    errors: &mut Vec<ParamError>,
) -> Duration {
    match param {
        None => default,
        Some(p) => ParamError::collect(p.non_negative(path), errors).unwrap_or(default),
    }
}

impl JwtParams {
    /// Checks the params; every problem at its path.
    pub fn compile(self) -> Result<JwtConfig, Vec<ParamError>> {
        let mut errors = Vec::new();
        if self.issuer.trim().is_empty() {
            errors.push(ParamError::new(
                "issuer",
                "is required: a token of any issuer would otherwise be accepted",
            ));
        }
        let secret = match self.secret {
            Some(s) if s.is_empty() => {
                errors.push(ParamError::new("secret", "must not be empty"));
                None
            }
            Some(s) => Some(s.into_bytes()),
            None => None,
        };
        let keys = match (&self.jwks, &self.jwks_uri) {
            (Some(_), Some(_)) => {
                errors.push(ParamError::new("jwksUri", "give either jwks or jwksUri"));
                KeySource::None
            }
            (Some(inline), None) => match KeySet::parse(inline.as_bytes()) {
                Ok(set) if set.is_empty() => {
                    errors.push(ParamError::new("jwks", "holds no usable signing key"));
                    KeySource::None
                }
                Ok(set) => KeySource::Inline(std::sync::Arc::new(set)),
                Err(e) => {
                    errors.push(ParamError::new("jwks", e));
                    KeySource::None
                }
            },
            (None, Some(uri)) => {
                http_url("jwksUri", uri, &mut errors);
                KeySource::Uri(uri.clone())
            }
            // A secret alone serves HS* tokens; otherwise the issuer says where its keys are.
            (None, None) if secret.is_some() => KeySource::None,
            (None, None) => {
                let base = self.issuer.trim_end_matches('/');
                if !self.issuer.trim().is_empty() {
                    http_url("issuer", base, &mut errors);
                }
                KeySource::Discovery(format!("{base}/.well-known/openid-configuration"))
            }
        };
        let mut algorithms = Vec::new();
        for (i, name) in self.algorithms.iter().enumerate() {
            let path = format!("algorithms[{i}]");
            match name.parse::<Algorithm>() {
                Ok(alg) if !ASYMMETRIC.contains(&alg) && secret.is_none() => {
                    errors.push(ParamError::new(
                        path,
                        format!("{name} needs a secret (HS* tokens are checked only against one)"),
                    ));
                }
                Ok(alg) => algorithms.push(alg),
                Err(_) => errors.push(ParamError::new(
                    path,
                    format!("unknown algorithm {name:?} (RS256, ES256, EdDSA, ...; never none)"),
                )),
            }
        }
        if self.algorithms.is_empty() {
            algorithms.extend_from_slice(ASYMMETRIC);
            if secret.is_some() {
                algorithms.extend([Algorithm::HS256, Algorithm::HS384, Algorithm::HS512]);
            }
        }
        if let Some(cookie) = &self.cookie
            && (cookie.is_empty() || cookie.contains([';', '=', ' ']))
        {
            errors.push(ParamError::new(
                "cookie",
                format!("{cookie:?} is not a cookie name"),
            ));
        }
        let leeway = duration(&self.leeway, "leeway", DEFAULT_LEEWAY, &mut errors);
        let min_refresh = duration(
            &self.min_refresh_interval,
            "minRefreshInterval",
            DEFAULT_MIN_REFRESH,
            &mut errors,
        );
        let max_refresh = duration(
            &self.max_refresh_interval,
            "maxRefreshInterval",
            DEFAULT_MAX_REFRESH,
            &mut errors,
        );
        if max_refresh < min_refresh {
            errors.push(ParamError::new(
                "maxRefreshInterval",
                "must not be below minRefreshInterval",
            ));
        }
        let fetch_timeout = match &self.fetch_timeout {
            None => DEFAULT_FETCH_TIMEOUT,
            Some(p) => ParamError::collect(p.positive("fetchTimeout"), &mut errors)
                .unwrap_or(DEFAULT_FETCH_TIMEOUT),
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(JwtConfig {
            issuer: self.issuer,
            audiences: self.audiences,
            keys,
            leeway,
            algorithms,
            secret,
            cookie: self.cookie,
            require_token: self.require_token,
            min_refresh,
            max_refresh: max_refresh.max(Duration::from_secs(1)),
            fetch_timeout,
            verified_tokens: self.verified_tokens.unwrap_or(DEFAULT_VERIFIED_TOKENS),
        })
    }
}

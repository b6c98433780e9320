//! The listchecker's params, in Istio 1.4's shape (`adapter.list.config.Params`), and their
//! validation into a [`ListConfig`].

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use mixer_adapter_api::{DurationParam, ParamError};
use serde::Deserialize;

use crate::entry_type::EntryType;
use crate::list::{List, parse_cidr};

/// Istio's defaults (mixer/adapter/metadata/inventory.go).
const DEFAULT_REFRESH: Duration = Duration::from_secs(60);
const DEFAULT_TTL: Duration = Duration::from_secs(300);
const DEFAULT_CACHING_INTERVAL: Duration = Duration::from_secs(300);
const DEFAULT_CACHING_USE_COUNT: i32 = 10_000;

/// `params` of a listchecker handler.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListParams {
    /// Where to fetch the list (`http://...` or `file:///...`); empty for a list made of the
    /// overrides only.
    #[serde(default)]
    pub provider_url: String,
    /// How often the provider is polled (default `60s`, at least `1s`).
    #[serde(default)]
    pub refresh_interval: Option<DurationParam>,
    /// How long a fetched list is used when the provider keeps failing (default `300s`).
    #[serde(default)]
    pub ttl: Option<DurationParam>,
    /// How long callers may cache an answer (default `300s`).
    #[serde(default)]
    pub caching_interval: Option<DurationParam>,
    /// How many times callers may use a cached answer (default `10000`).
    #[serde(default)]
    pub caching_use_count: Option<i64>,
    /// Entries always in the list, besides the provider's.
    #[serde(default)]
    pub overrides: Vec<String>,
    /// How entries are compared (default `STRINGS`).
    #[serde(default)]
    pub entry_type: EntryType,
    /// A blacklist denies what it finds; a whitelist (the default) denies what it does not.
    #[serde(default)]
    pub blacklist: bool,
}

/// Where the list comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Provider {
    /// `http://host[:port]/path`.
    Http(HttpUrl),
    /// `file:///path` (or `file://localhost/path`): read from the local file system.
    File(PathBuf),
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Provider::Http(u) => write!(f, "{u}"),
            Provider::File(p) => write!(f, "file://{}", p.display()),
        }
    }
}

/// A parsed `http://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpUrl {
    /// Host name or address, without brackets.
    pub host: String,
    /// Port (80 when not given).
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl HttpUrl {
    /// The `Host:` header value.
    pub fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == 80 {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

impl fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.host_header(), self.path)
    }
}

/// Parses a provider URL; the error is the message for `providerUrl`.
pub fn parse_provider_url(url: &str) -> Result<Provider, String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err("URL scheme and host cannot be empty".into());
    };
    match scheme.to_ascii_lowercase().as_str() {
        "http" => parse_http(rest).map(Provider::Http),
        "https" => Err("https providers are not supported yet".into()),
        "file" => {
            let path = rest.strip_prefix("localhost").unwrap_or(rest);
            if !path.starts_with('/') {
                return Err(format!(
                    "file URLs must name an absolute path (file:///path/to/list), got {url:?}"
                ));
            }
            Ok(Provider::File(PathBuf::from(percent_decode(path)?)))
        }
        "" => Err("URL scheme and host cannot be empty".into()),
        other => Err(format!(
            "unsupported URL scheme {other:?}: use http:// or file://"
        )),
    }
}

fn parse_http(rest: &str) -> Result<HttpUrl, String> {
    let rest = rest.split('#').next().unwrap_or(rest);
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    let path = match path {
        "" => "/".to_string(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_string(),
    };
    if authority.contains('@') {
        return Err("user information in providerUrl is not supported".into());
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("invalid host {authority:?}"))?;
        match after {
            "" => (host, None),
            p => (
                host,
                Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| format!("invalid host {authority:?}"))?,
                ),
            ),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("URL scheme and host cannot be empty".into());
    }
    let port = match port {
        None | Some("") => 80,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("invalid port {p:?}"))?,
    };
    if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("the URL path must not contain spaces or control characters".into());
    }
    Ok(HttpUrl {
        host: host.to_string(),
        port,
        path,
    })
}

fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent escape in {text:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{text:?} is not UTF-8 once decoded"))
}

/// Validated params, ready to build a handler.
#[derive(Clone, Debug)]
pub struct ListConfig {
    /// Where the list comes from; `None` for overrides only.
    pub provider: Option<Provider>,
    /// Poll period.
    pub refresh_interval: Duration,
    /// How long a list lives after its last successful fetch.
    pub ttl: Duration,
    /// Valid duration of every answer.
    pub caching_interval: Duration,
    /// Valid use count of every answer.
    pub caching_use_count: i32,
    /// Entries always present.
    pub overrides: Vec<String>,
    /// Comparison.
    pub entry_type: EntryType,
    /// Blacklist or whitelist.
    pub blacklist: bool,
}

/// A duration param, or its default; signed, so that validation can name negative values.
/// `None` (with the error recorded) when it is not a duration.
fn signed(
    path: &str,
    param: &Option<DurationParam>,
    default: Duration,
    errors: &mut Vec<ParamError>,
) -> Option<mixer_model::Duration> {
    match param {
        None => Some(mixer_model::Duration::from_std(default)),
        Some(d) => ParamError::collect(d.value(path), errors),
    }
}

impl ListParams {
    /// Checks everything Istio checked, and more (entry syntax, URL schemes), collecting every
    /// problem with its path.
    pub fn compile(&self) -> Result<ListConfig, Vec<ParamError>> {
        let mut errors = Vec::new();
        let provider = if self.provider_url.trim().is_empty() {
            None
        } else {
            match parse_provider_url(self.provider_url.trim()) {
                Ok(p) => Some(p),
                Err(e) => {
                    errors.push(ParamError::new("providerUrl", e));
                    None
                }
            }
        };
        let has_provider = !self.provider_url.trim().is_empty();

        let refresh = signed(
            "refreshInterval",
            &self.refresh_interval,
            DEFAULT_REFRESH,
            &mut errors,
        );
        let ttl = signed("ttl", &self.ttl, DEFAULT_TTL, &mut errors);
        let caching = signed(
            "cachingInterval",
            &self.caching_interval,
            DEFAULT_CACHING_INTERVAL,
            &mut errors,
        );

        // Istio checked the refresh/ttl relationship only when there is a provider.
        if has_provider {
            if let Some(refresh) = refresh
                && refresh.0 < 1_000_000_000
            {
                errors.push(ParamError::new(
                    "refreshInterval",
                    format!("refresh interval must be at least 1 second, it is {refresh}"),
                ));
            }
            if let (Some(ttl), Some(refresh)) = (ttl, refresh)
                && ttl.0 < refresh.0
            {
                errors.push(ParamError::new(
                    "ttl",
                    format!(
                        "ttl must be > refreshInterval, ttl is {ttl} and refreshInterval is {refresh}"
                    ),
                ));
            }
        }
        if let Some(caching) = caching
            && caching.0 < 0
        {
            errors.push(ParamError::new(
                "cachingInterval",
                format!("caching interval must be >= 0, it is {caching}"),
            ));
        }
        let use_count = match self.caching_use_count {
            None => DEFAULT_CACHING_USE_COUNT,
            Some(n) if n < 0 => {
                errors.push(ParamError::new(
                    "cachingUseCount",
                    format!("caching use count must be >= 0, it is {n}"),
                ));
                0
            }
            Some(n) => i32::try_from(n).unwrap_or_else(|_| {
                errors.push(ParamError::new(
                    "cachingUseCount",
                    format!("caching use count must be at most {}, it is {n}", i32::MAX),
                ));
                0
            }),
        };

        match self.entry_type {
            EntryType::IpAddresses => {
                for (i, entry) in self.overrides.iter().enumerate() {
                    if let Err(e) = parse_cidr(entry) {
                        errors.push(ParamError::new(
                            format!("overrides[{i}]"),
                            format!("could not parse ip address override {entry}: {e}"),
                        ));
                    }
                }
            }
            EntryType::Regex => {
                for (i, entry) in self.overrides.iter().enumerate() {
                    if let Err(e) = regex::Regex::new(entry) {
                        errors.push(ParamError::new(
                            format!("overrides[{i}]"),
                            format!("could not parse regex override {entry}: {e}"),
                        ));
                    }
                }
            }
            EntryType::Strings | EntryType::CaseInsensitiveStrings => {}
        }
        // Overrides that each compile may still exceed the regex set's size limit together.
        if errors.is_empty()
            && let Err(e) = List::build(self.entry_type, "", &self.overrides)
        {
            errors.push(ParamError::new("overrides", e));
        }

        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(ListConfig {
            provider,
            refresh_interval: refresh.unwrap_or_default().to_std(),
            ttl: ttl.unwrap_or_default().to_std(),
            caching_interval: caching.unwrap_or_default().to_std(),
            caching_use_count: use_count,
            overrides: self.overrides.clone(),
            entry_type: self.entry_type,
            blacklist: self.blacklist,
        })
    }
}

#[cfg(test)]
mod tests;

//! The handler's params, and what they compile to (the keys read once, at config load).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::{DurationParam, ParamError};
use serde::Deserialize;

use crate::key_set::KeySet;
use crate::key_source::KeySource;

/// How often the key files are read again by default: as often as `serve` looks at its
/// config files (`--config-check-interval`), so a revocation takes as long as a config edit.
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(5);

/// The shortest reload interval: reading and hashing the files more often than this costs
/// more than the latency it saves.
pub const MIN_RELOAD_INTERVAL: Duration = Duration::from_millis(100);

/// The longest: a revoked key must stop working within this.
pub const MAX_RELOAD_INTERVAL: Duration = Duration::from_secs(3600);

/// The `apikey` handler's params, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApiKeyParams {
    /// One key file (YAML or JSON, `keys: [...]`).
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// A directory whose visible files are key files (a mounted Secret).
    #[serde(default)]
    pub directory: Option<PathBuf>,
    /// How often the files are read again (default `5s`, between `100ms` and `1h`).
    #[serde(default)]
    pub reload_interval: Option<DurationParam>,
    /// Deny a request that carries no key (default `false`: no outputs, rules decide).
    #[serde(default)]
    pub require_key: bool,
    /// The `WWW-Authenticate` value sent with a denial (default: none).
    #[serde(default)]
    pub challenge: Option<String>,
}

/// Keys as read when the config loaded.
#[derive(Debug, Clone)]
pub struct InitialKeys {
    /// The keys.
    pub keys: Arc<KeySet>,
    /// A digest of the files they came from.
    pub fingerprint: [u8; 32],
}

/// The params, checked, with the keys as read at config load.
#[derive(Debug, Clone)]
pub struct ApiKeyConfig {
    /// Where the keys are.
    pub source: KeySource,
    /// How often they are read again.
    pub reload_interval: Duration,
    /// Whether a request without a key is denied.
    pub require_key: bool,
    /// `WWW-Authenticate` on denials.
    pub challenge: Option<String>,
    /// The keys at config load.
    pub initial: InitialKeys,
}

impl ApiKeyParams {
    /// Checks the params and reads the keys, so that a bad key file is a config error (by
    /// `mixer validate` too) naming the file and the field.
    pub fn compile(self) -> Result<ApiKeyConfig, Vec<ParamError>> {
        let mut errors = Vec::new();
        let source = match (self.file, self.directory) {
            (Some(file), None) => Some(KeySource::File(file)),
            (None, Some(dir)) => Some(KeySource::Directory(dir)),
            (Some(_), Some(_)) => {
                errors.push(ParamError::new(
                    "directory",
                    "give either `file` or `directory`, not both",
                ));
                None
            }
            (None, None) => {
                errors.push(ParamError::new(
                    "",
                    "needs `file` (a key file) or `directory` (a folder of key files)",
                ));
                None
            }
        };
        let reload_interval = match &self.reload_interval {
            None => Some(DEFAULT_RELOAD_INTERVAL),
            Some(p) => ParamError::collect(
                p.positive("reloadInterval").and_then(|d| {
                    if (MIN_RELOAD_INTERVAL..=MAX_RELOAD_INTERVAL).contains(&d) {
                        Ok(d)
                    } else {
                        Err(ParamError::new(
                            "reloadInterval",
                            format!("must be between 100ms and 1h, it is {}", p.text().trim()),
                        ))
                    }
                }),
                &mut errors,
            ),
        };
        if let Some(challenge) = &self.challenge
            && (challenge.trim().is_empty() || challenge.chars().any(char::is_control))
        {
            errors.push(ParamError::new(
                "challenge",
                "must be a non-empty header value without control characters",
            ));
        }
        let initial = source.as_ref().and_then(|source| {
            let field = match source {
                KeySource::File(_) => "file",
                KeySource::Directory(_) => "directory",
            };
            let loaded = source.read().and_then(|read| {
                Ok(InitialKeys {
                    keys: Arc::new(read.parse()?),
                    fingerprint: read.fingerprint,
                })
            });
            ParamError::collect(
                loaded.map_err(|e| ParamError::new(field, e.to_string())),
                &mut errors,
            )
        });
        match (source, reload_interval, initial) {
            (Some(source), Some(reload_interval), Some(initial)) if errors.is_empty() => {
                Ok(ApiKeyConfig {
                    source,
                    reload_interval,
                    require_key: self.require_key,
                    challenge: self.challenge,
                    initial,
                })
            }
            _ => Err(errors),
        }
    }
}

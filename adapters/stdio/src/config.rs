//! The stdio adapter's params, in Istio 1.4's shape (`adapter.stdio.config.Params`), and their
//! validation into a [`StdioConfig`].

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use mixer_adapter_api::ParamError;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// Istio's default rotation size: 100 megabytes.
pub const DEFAULT_MAX_MEGABYTES: f64 = 100.0;
/// Istio's default age limit: 30 days.
pub const DEFAULT_MAX_DAYS: i64 = 30;
/// Istio's default number of rotated files kept.
pub const DEFAULT_MAX_ROTATED_FILES: i64 = 1000;

const MEGABYTE: f64 = 1024.0 * 1024.0;

/// `params` of a stdio handler.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StdioParams {
    /// Where records go (default STDOUT).
    #[serde(default, alias = "log_stream")]
    pub log_stream: Stream,
    /// Severity strings of logentry instances to levels, merged over Istio's defaults.
    #[serde(default, alias = "severity_levels")]
    pub severity_levels: HashMap<String, Level>,
    /// The level of metric records (default INFO).
    #[serde(default, alias = "metric_level")]
    pub metric_level: Level,
    /// JSON lines (default `true`, as Istio) or console lines.
    #[serde(default, alias = "output_as_json")]
    pub output_as_json: Option<bool>,
    /// Records below this level are not written (default INFO: everything).
    #[serde(default, alias = "output_level")]
    pub output_level: Level,
    /// The file, for FILE and ROTATED_FILE.
    #[serde(default, alias = "output_path")]
    pub output_path: String,
    /// ROTATED_FILE: rotate once the file would grow past this size (default 100; fractions
    /// accepted; 0 means the default).
    #[serde(default, alias = "max_megabytes_before_rotation")]
    pub max_megabytes_before_rotation: Option<f64>,
    /// Our extension: the rotation size in bytes; wins over `maxMegabytesBeforeRotation`.
    #[serde(default, alias = "max_bytes_before_rotation")]
    pub max_bytes_before_rotation: Option<u64>,
    /// ROTATED_FILE: rotate a file this many days old, and delete rotated files older than
    /// this (default 30; 0: no limit).
    #[serde(default, alias = "max_days_before_rotation")]
    pub max_days_before_rotation: Option<i64>,
    /// ROTATED_FILE: rotated files kept (default 1000; 0: no limit).
    #[serde(default, alias = "max_rotated_files")]
    pub max_rotated_files: Option<i64>,
}

/// The output (`Params.Stream`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Stream {
    /// The mixer's standard output.
    #[default]
    Stdout,
    /// The mixer's standard error.
    Stderr,
    /// A file, appended to.
    File,
    /// A file rotated by size and age.
    RotatedFile,
}

/// Importance of a record (`Params.Level`), ordered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    /// Informational.
    #[default]
    Info,
    /// Warnings.
    Warning,
    /// Errors.
    Error,
}

impl Stream {
    /// Every stream, in Istio's enum order (0..=3).
    pub const ALL: [Stream; 4] = [
        Stream::Stdout,
        Stream::Stderr,
        Stream::File,
        Stream::RotatedFile,
    ];

    /// Istio's enum name.
    pub fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "STDOUT",
            Stream::Stderr => "STDERR",
            Stream::File => "FILE",
            Stream::RotatedFile => "ROTATED_FILE",
        }
    }
}

impl Level {
    /// Every level, in Istio's enum order (0..=2).
    pub const ALL: [Level; 3] = [Level::Info, Level::Warning, Level::Error];

    /// Istio's enum name.
    pub fn name(self) -> &'static str {
        match self {
            Level::Info => "INFO",
            Level::Warning => "WARNING",
            Level::Error => "ERROR",
        }
    }

    /// The `level` written in records, as zap wrote it (`info`, `warn`, `error`).
    pub fn label(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Warning => "warn",
            Level::Error => "error",
        }
    }
}

impl fmt::Display for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An enum accepted by name (as protobuf JSON) or by number.
trait NamedEnum: Copy + 'static {
    const VALUES: &'static [Self];
    const EXPECTED: &'static str;
    const WHAT: &'static str;
    fn enum_name(self) -> &'static str;
}

impl NamedEnum for Stream {
    const VALUES: &'static [Stream] = &Stream::ALL;
    const EXPECTED: &'static str = "STDOUT, STDERR, FILE or ROTATED_FILE (or 0-3)";
    const WHAT: &'static str = "logStream";
    fn enum_name(self) -> &'static str {
        self.name()
    }
}

impl NamedEnum for Level {
    const VALUES: &'static [Level] = &Level::ALL;
    const EXPECTED: &'static str = "INFO, WARNING or ERROR (or 0-2)";
    const WHAT: &'static str = "level";
    fn enum_name(self) -> &'static str {
        self.name()
    }
}

fn deserialize_enum<'de, D: Deserializer<'de>, T: NamedEnum>(d: D) -> Result<T, D::Error> {
    struct V<T>(std::marker::PhantomData<T>);
    impl<T: NamedEnum> Visitor<'_> for V<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(T::EXPECTED)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
            T::VALUES
                .iter()
                .copied()
                .find(|t| t.enum_name() == v)
                .ok_or_else(|| {
                    E::custom(format!(
                        "unknown {} {v:?}, expected {}",
                        T::WHAT,
                        T::EXPECTED
                    ))
                })
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
            usize::try_from(v)
                .ok()
                .and_then(|i| T::VALUES.get(i).copied())
                .ok_or_else(|| {
                    E::custom(format!("unknown {} {v}, expected {}", T::WHAT, T::EXPECTED))
                })
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
            match u64::try_from(v) {
                Ok(u) => self.visit_u64(u),
                Err(_) => Err(E::custom(format!(
                    "unknown {} {v}, expected {}",
                    T::WHAT,
                    T::EXPECTED
                ))),
            }
        }
    }
    d.deserialize_any(V(std::marker::PhantomData))
}

impl<'de> Deserialize<'de> for Stream {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Stream, D::Error> {
        deserialize_enum(d)
    }
}

impl<'de> Deserialize<'de> for Level {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Level, D::Error> {
        deserialize_enum(d)
    }
}

/// Istio's default severity map.
pub fn default_severity_levels() -> HashMap<String, Level> {
    [
        ("INFORMATIONAL", Level::Info),
        ("informational", Level::Info),
        ("INFO", Level::Info),
        ("info", Level::Info),
        ("WARNING", Level::Warning),
        ("warning", Level::Warning),
        ("WARN", Level::Warning),
        ("warn", Level::Warning),
        ("ERROR", Level::Error),
        ("error", Level::Error),
        ("ERR", Level::Error),
        ("err", Level::Error),
        ("FATAL", Level::Error),
        ("fatal", Level::Error),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Where records go, validated.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// A file, appended to.
    File(PathBuf),
    /// A rotated file.
    Rotated(Rotation),
}

/// Rotation settings of a ROTATED_FILE output.
#[derive(Clone, Debug, PartialEq)]
pub struct Rotation {
    /// The active file.
    pub path: PathBuf,
    /// Rotate before a line would make the file larger than this (a line longer than this
    /// goes alone into its own file).
    pub max_bytes: u64,
    /// Rotate the active file once it is this old, and delete rotated files older than this.
    pub max_age: Option<Duration>,
    /// Keep at most this many rotated files.
    pub max_files: Option<usize>,
}

/// Validated params, ready to build a handler.
#[derive(Clone, Debug, PartialEq)]
pub struct StdioConfig {
    /// Where records go.
    pub output: Output,
    /// Severity strings to levels (Istio's defaults plus the configured ones).
    pub severity_levels: HashMap<String, Level>,
    /// Level of metric records.
    pub metric_level: Level,
    /// Records below this are dropped.
    pub output_level: Level,
    /// JSON lines or console lines.
    pub json: bool,
}

impl StdioParams {
    /// Checks everything, collecting every problem with its path.
    pub fn compile(&self) -> Result<StdioConfig, Vec<ParamError>> {
        let mut errors = Vec::new();
        let path = self.output_path.trim();
        match self.log_stream {
            Stream::Stdout | Stream::Stderr => {
                if !path.is_empty() {
                    errors.push(ParamError::new(
                        "outputPath",
                        "cannot specify an output path when using a STDOUT or STDERR log stream",
                    ));
                }
            }
            Stream::File | Stream::RotatedFile => {
                if path.is_empty() {
                    errors.push(ParamError::new(
                        "outputPath",
                        "need a valid output path when using a FILE or ROTATED_FILE log stream",
                    ));
                } else if path.ends_with('/') || std::path::Path::new(path).is_dir() {
                    errors.push(ParamError::new(
                        "outputPath",
                        format!("{path:?} is a directory, not a file"),
                    ));
                } else if path.contains('\0') {
                    errors.push(ParamError::new(
                        "outputPath",
                        "the path must not contain NUL characters",
                    ));
                }
            }
        }

        let max_bytes = match (
            self.max_bytes_before_rotation,
            self.max_megabytes_before_rotation,
        ) {
            (Some(0), _) => {
                errors.push(ParamError::new(
                    "maxBytesBeforeRotation",
                    "maxBytesBeforeRotation must be greater than 0",
                ));
                0
            }
            (Some(b), _) => b,
            (None, Some(mb)) if !(mb >= 0.0 && mb.is_finite()) => {
                errors.push(ParamError::new(
                    "maxMegabytesBeforeRotation",
                    format!("maxMegabytesBeforeRotation must be >= 0, it is {mb}"),
                ));
                0
            }
            (None, Some(mb)) if mb > 0.0 => ((mb * MEGABYTE) as u64).max(1),
            (None, _) => (DEFAULT_MAX_MEGABYTES * MEGABYTE) as u64,
        };
        let max_days = self.max_days_before_rotation.unwrap_or(DEFAULT_MAX_DAYS);
        if max_days < 0 {
            errors.push(ParamError::new(
                "maxDaysBeforeRotation",
                format!("maxDaysBeforeRotation must be >= 0, it is {max_days}"),
            ));
        }
        let max_files = self.max_rotated_files.unwrap_or(DEFAULT_MAX_ROTATED_FILES);
        if max_files < 0 {
            errors.push(ParamError::new(
                "maxRotatedFiles",
                format!("maxRotatedFiles must be >= 0, it is {max_files}"),
            ));
        }
        if !errors.is_empty() {
            return Err(errors);
        }

        let output = match self.log_stream {
            Stream::Stdout => Output::Stdout,
            Stream::Stderr => Output::Stderr,
            Stream::File => Output::File(PathBuf::from(path)),
            Stream::RotatedFile => Output::Rotated(Rotation {
                path: PathBuf::from(path),
                max_bytes,
                max_age: (max_days > 0).then(|| {
                    Duration::from_secs(u64::try_from(max_days).unwrap_or(0).saturating_mul(86_400))
                }),
                max_files: (max_files > 0)
                    .then(|| usize::try_from(max_files).unwrap_or(usize::MAX)),
            }),
        };
        let mut severity_levels = default_severity_levels();
        severity_levels.extend(self.severity_levels.iter().map(|(k, v)| (k.clone(), *v)));
        Ok(StdioConfig {
            output,
            severity_levels,
            metric_level: self.metric_level,
            output_level: self.output_level,
            json: self.output_as_json.unwrap_or(true),
        })
    }
}

#[cfg(test)]
mod tests;

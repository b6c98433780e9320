//! The mixer's own log: where it goes (stderr), in which format (text for people, JSON lines
//! for `kubectl logs` readers and Loki), and at which level.

use std::io::IsTerminal;

/// `--log-format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One line per event, for people.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message` and the event's
    /// fields at the top level.
    Json,
}

/// How `serve` logs.
#[derive(clap::Args, Debug, Clone)]
pub struct LogArgs {
    /// The log's format on stderr. Colours are used only when stderr is a terminal, so a file
    /// or `kubectl logs` never holds escape codes.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// The level, or a filter (`info`, `mixer_oop=debug,info`). Default: `MIXER_LOG`, else
    /// `RUST_LOG`, else `info`.
    #[arg(long)]
    pub log_level: Option<String>,
}

/// Installs the global log subscriber for `args`. A filter that does not parse is an error
/// naming where it came from, rather than a log silently at another level.
pub fn init(args: &LogArgs) -> Result<(), String> {
    let (source, directives) = match &args.log_level {
        Some(level) => ("--log-level", level.clone()),
        None => match (std::env::var("MIXER_LOG"), std::env::var("RUST_LOG")) {
            (Ok(v), _) => ("MIXER_LOG", v),
            (Err(_), Ok(v)) => ("RUST_LOG", v),
            _ => ("the default", "info".to_owned()),
        },
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&directives)
        .map_err(|e| format!("{source}: {directives:?} is not a log level or filter: {e}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let installed = match args.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    installed.map_err(|e| format!("cannot install the log: {e}"))
}

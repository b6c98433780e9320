//! The mixer's own log: where it goes (stderr), in which format (text for people, JSON lines
//! for `kubectl logs` readers and Loki), and at which level.

use std::fmt;
use std::io::IsTerminal;

use mixer_runtime::DecisionId;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Writer};
use tracing_subscriber::registry::LookupSpan;

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
    let ansi = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let installed = match args.log_format {
        LogFormat::Text => builder
            .event_format(WithDecisionId {
                inner: format().with_ansi(ansi),
                json: false,
            })
            .try_init(),
        LogFormat::Json => builder
            .fmt_fields(format::JsonFields::new())
            .event_format(WithDecisionId {
                inner: format().json().flatten_event(true),
                json: true,
            })
            .try_init(),
    };
    installed.map_err(|e| format!("cannot install the log: {e}"))
}

fn format() -> format::Format {
    format::Format::default()
}

/// An event format that adds the current request's decision id ([`DecisionId::current`]) to
/// every line written while a request is being worked on: `decision_id=<id>` at the end of a
/// text line, a top-level `"decision_id"` in a JSON object.
///
/// Lines without a current decision are written as `inner` writes them, straight to the
/// output; only a line with one goes through a buffer to have the id put in.
struct WithDecisionId<F> {
    inner: F,
    json: bool,
}

impl<S, N, F> FormatEvent<S, N> for WithDecisionId<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let Some(id) = DecisionId::current() else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::with_capacity(256);
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        writer.write_str(&with_decision_id(&line, id, self.json))
    }
}

/// `line` (one formatted event, ending in a newline) with `id` put in.
fn with_decision_id(line: &str, id: DecisionId, json: bool) -> String {
    let body = line.strip_suffix('\n').unwrap_or(line);
    if json && let Some(fields) = body.strip_suffix('}') {
        let comma = if fields.ends_with('{') { "" } else { "," };
        return format!("{fields}{comma}\"decision_id\":\"{id}\"}}\n");
    }
    format!("{body} decision_id={id}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_goes_last_in_a_text_line_and_at_the_top_level_of_a_json_object() {
        let id = DecisionId::next();
        assert_eq!(
            with_decision_id(
                "2026-12-05T10:00:00Z  INFO t: answered status=200\n",
                id,
                false
            ),
            format!("2026-12-05T10:00:00Z  INFO t: answered status=200 decision_id={id}\n")
        );
        let json = with_decision_id("{\"level\":\"INFO\",\"message\":\"answered\"}\n", id, true);
        let event: serde_json::Value = serde_json::from_str(&json).expect("still JSON");
        assert_eq!(event["decision_id"], id.to_string());
        assert_eq!(event["message"], "answered");
        assert!(json.ends_with("}\n"), "{json:?}");
        let empty = with_decision_id("{}\n", id, true);
        assert_eq!(empty, format!("{{\"decision_id\":\"{id}\"}}\n"));
    }
}

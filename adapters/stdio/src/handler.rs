//! The stdio handler: formats a batch of records into one buffer, then writes it on tokio's
//! blocking pool so that a slow disk or a full pipe never stalls the async workers.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use mixer_adapter_api::{AdapterError, ErrorKind, Handler, ReportHandler};
use mixer_model::{Instance, InstanceView, Template, Timestamp, Value};

use crate::config::{Level, StdioConfig};
use crate::decision::{DecisionEntry, DecisionLines};
use crate::format::Record;
use crate::repeats::Repeats;
use crate::sink::{Clock, Sink, system_clock};

/// A built stdio handler.
pub struct StdioHandler {
    name: Arc<str>,
    severity_levels: HashMap<String, Level>,
    metric_level: Level,
    output_level: Level,
    json: bool,
    sink: Arc<Sink>,
    now: Arc<dyn Fn() -> Timestamp + Send + Sync>,
}

impl StdioHandler {
    /// Opens the output of a validated config (creating the file and its directory if needed).
    pub fn new(config: StdioConfig, name: Arc<str>) -> Result<StdioHandler, AdapterError> {
        StdioHandler::with_clock(config, name, system_clock())
    }

    /// As [`StdioHandler::new`], with the wall clock used for record times (when an instance
    /// has none) and for file rotation.
    pub fn with_clock(
        config: StdioConfig,
        name: Arc<str>,
        clock: Clock,
    ) -> Result<StdioHandler, AdapterError> {
        let sink = Sink::open(&config.output, clock.clone()).map_err(|e| {
            AdapterError::permanent(
                ErrorKind::Unavailable,
                format!("could not open the output of {name}: {e}"),
            )
        })?;
        let now = Arc::new(move || {
            let nanos = clock()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
                .unwrap_or(0);
            Timestamp(nanos)
        });
        Ok(StdioHandler {
            name,
            severity_levels: config.severity_levels,
            metric_level: config.metric_level,
            output_level: config.output_level,
            json: config.json,
            sink: Arc::new(sink),
            now,
        })
    }

    /// The level of a logentry severity string: the configured map, else INFO (as Istio).
    pub fn severity_level(&self, severity: &str) -> Level {
        self.severity_levels
            .get(severity)
            .copied()
            .unwrap_or(Level::Info)
    }

    /// The lines a batch produces, without writing them.
    pub fn format_batch<'i>(&self, instances: &'i [Instance]) -> String {
        // About a decision-log record's length a line: the batch is written without growing
        // (and copying) its buffer again and again.
        let mut out = String::with_capacity(instances.len() * 512);
        let mut now = None;
        let mut times = crate::format::TimeText::default();
        // Dropped with this call, before any of `instances` can be ([`Repeats`]).
        let mut repeats = Repeats::default();
        // Decision-log records, written from their typed fields.
        let mut decisions = DecisionLines::default();
        // The last severity's level: a batch's records mostly share one severity, and the
        // map's hash of it per record cost more than the comparison.
        let mut last_severity: Option<(&'i str, Level)> = None;
        let mut level_of = |severity: Option<&'i str>| {
            severity.map_or(Level::Info, |s| match last_severity {
                Some((last, level)) if last == s => level,
                _ => {
                    let level = self.severity_level(s);
                    last_severity = Some((s, level));
                    level
                }
            })
        };
        // One list of a line's fields for the whole batch, rather than one per line.
        let mut fields: Vec<(&str, &Value)> = Vec::new();
        for instance in instances {
            if self.json
                && instance.template == Template::LogEntry
                && let Some(entry) = DecisionEntry::of(instance)
            {
                let level = level_of(entry.severity);
                if level < self.output_level {
                    continue;
                }
                let time = entry
                    .time
                    .unwrap_or_else(|| *now.get_or_insert_with(|| (self.now)()));
                decisions.write(
                    &mut out,
                    (level, time, &instance.name),
                    entry.record,
                    &mut times,
                );
                continue;
            }
            fields.clear();
            let (level, time, value) = match instance.view() {
                InstanceView::LogEntry(log) => {
                    let level = level_of(log.severity);
                    fields.extend(log.variables.iter());
                    (level, log.timestamp, None)
                }
                InstanceView::Metric(metric) => {
                    fields.extend(metric.dimensions.iter());
                    (self.metric_level, None, metric.value)
                }
                _ => continue,
            };
            if level < self.output_level {
                continue;
            }
            // Sorted by name, as Istio did, for a stable layout. The very names the last line
            // wrote, in its order, are sorted already: a batch of decision-log records has
            // mostly one shape (#36).
            if !repeats.written_last(fields.iter().map(|(name, _)| *name)) {
                fields.sort_by(|a, b| name_order(a.0, b.0));
            }
            if let Some(v) = value {
                fields.insert(0, ("value", v));
            }
            let time = time.unwrap_or_else(|| *now.get_or_insert_with(|| (self.now)()));
            let record = Record {
                level,
                time,
                instance: &instance.name,
                fields: std::mem::take(&mut fields),
            };
            if self.json {
                repeats.write_json(&mut out, &record, &mut times);
            } else {
                record.write_console(&mut out);
            }
            fields = record.fields;
        }
        out
    }
}

/// Names in byte order, as `str`'s `cmp`, their first bytes compared first: a decision-log
/// record's names mostly differ there, and the sort of its (already sorted) fields then
/// calls no `memcmp` (#36).
fn name_order(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.as_bytes().first(), b.as_bytes().first()) {
        (Some(x), Some(y)) if x != y => x.cmp(y),
        _ => a.cmp(b),
    }
}

#[async_trait]
impl Handler for StdioHandler {
    fn as_report(&self) -> Option<&dyn ReportHandler> {
        Some(self)
    }

    async fn close(&self) {
        let sink = self.sink.clone();
        let _ = tokio::task::spawn_blocking(move || sink.flush()).await;
    }
}

#[async_trait]
impl ReportHandler for StdioHandler {
    async fn report(&self, instances: &[Instance]) -> Result<(), AdapterError> {
        let text = self.format_batch(instances);
        if text.is_empty() {
            return Ok(());
        }
        let sink = self.sink.clone();
        let written = tokio::task::spawn_blocking(move || sink.write(&text))
            .await
            .map_err(|e| {
                AdapterError::transient(ErrorKind::Internal, format!("the write task failed: {e}"))
            })?;
        written.map_err(|e| {
            AdapterError::transient(
                ErrorKind::Unavailable,
                format!("{} could not write its records: {e}", self.name),
            )
        })
    }
}

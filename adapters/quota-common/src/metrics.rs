//! Counters per quota, rendered in the Prometheus text format by the handlers' `Exposition`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one quota.
#[derive(Debug, Default)]
pub struct QuotaMetrics {
    allocations: AtomicU64,
    denials: AtomicU64,
    shadow_denials: AtomicU64,
    deduplicated: AtomicU64,
}

impl QuotaMetrics {
    pub(crate) fn count_allocation(&self, deduplicated: bool) {
        self.allocations.fetch_add(1, Ordering::Relaxed);
        if deduplicated {
            self.deduplicated.fetch_add(1, Ordering::Relaxed);
        }
    }
    pub(crate) fn count_denial(&self) {
        self.denials.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn count_shadow(&self) {
        self.shadow_denials.fetch_add(1, Ordering::Relaxed);
    }
    /// Allocations answered (granted or not; errors excluded).
    pub fn allocations(&self) -> u64 {
        self.allocations.load(Ordering::Relaxed)
    }
    /// Allocations answered RESOURCE_EXHAUSTED.
    pub fn denials(&self) -> u64 {
        self.denials.load(Ordering::Relaxed)
    }
    /// Allocations in shadow mode that would have been limited, and were granted.
    pub fn shadow_denials(&self) -> u64 {
        self.shadow_denials.load(Ordering::Relaxed)
    }
    /// Allocations answered from the deduplication record.
    pub fn deduplicated(&self) -> u64 {
        self.deduplicated.load(Ordering::Relaxed)
    }
}

/// A handler's counters: per quota, plus the adapter's own.
#[derive(Debug)]
pub struct Metrics {
    handler: String,
    quota_names: Vec<String>,
    quotas: Vec<QuotaMetrics>,
}

impl Metrics {
    /// Counters for a handler's quotas, in config order.
    pub fn new(handler: &str, quota_names: Vec<String>) -> Metrics {
        let quotas = quota_names
            .iter()
            .map(|_| QuotaMetrics::default())
            .collect();
        Metrics {
            handler: handler.to_string(),
            quota_names,
            quotas,
        }
    }

    /// The counters of the quota at `index`.
    pub fn quota(&self, index: usize) -> &QuotaMetrics {
        &self.quotas[index.min(self.quotas.len().saturating_sub(1))]
    }

    /// The counters of the quota called `name`.
    pub fn by_name(&self, name: &str) -> Option<&QuotaMetrics> {
        let i = self.quota_names.iter().position(|n| n == name)?;
        self.quotas.get(i)
    }

    /// The handler label, escaped.
    pub fn handler_label(&self) -> String {
        format!("handler=\"{}\"", escape(&self.handler))
    }

    /// Renders the per-quota counters as `{prefix}_allocations_total` and so on.
    pub fn render(&self, prefix: &str, out: &mut String) {
        type Get = fn(&QuotaMetrics) -> u64;
        let families: [(&str, &str, Get); 4] = [
            (
                "allocations_total",
                "Quota allocations answered (granted or not).",
                QuotaMetrics::allocations,
            ),
            (
                "denials_total",
                "Quota allocations answered RESOURCE_EXHAUSTED.",
                QuotaMetrics::denials,
            ),
            (
                "shadow_denials_total",
                "Allocations in shadow mode that would have been limited and were granted.",
                QuotaMetrics::shadow_denials,
            ),
            (
                "deduplicated_total",
                "Allocations answered again for a repeated deduplication id.",
                QuotaMetrics::deduplicated,
            ),
        ];
        let handler = self.handler_label();
        for (name, help, get) in families {
            let _ = writeln!(out, "# HELP {prefix}_{name} {help}");
            let _ = writeln!(out, "# TYPE {prefix}_{name} counter");
            for (q, m) in self.quota_names.iter().zip(&self.quotas) {
                let _ = writeln!(
                    out,
                    "{prefix}_{name}{{{handler},quota=\"{}\"}} {}",
                    escape(q),
                    get(m)
                );
            }
        }
    }
}

/// Escapes a label value (backslash, double quote, new line).
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Appends one metric family with a single sample.
pub fn render_one(out: &mut String, name: &str, kind: &str, help: &str, labels: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "{name}{{{labels}}} {value}");
}

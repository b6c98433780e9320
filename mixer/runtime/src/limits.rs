//! Bounds on the work one request can cause, whatever its protocol: the front ends refuse a
//! request over one of them before doing any of its work (INVALID_ARGUMENT, or the protocol's
//! equivalent, naming the limit and its `mixer serve` flag). A request message is capped at
//! 4 MiB by the gRPC stack already; these bound what fits in those bytes (200,000 rate limit
//! descriptors fit in 4 MiB, and each costs a rule evaluation and a handler call).

/// One limit: its value and the `mixer serve` flag that sets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// The most accepted.
    pub max: usize,
    /// The flag, as typed (`--max-ratelimit-descriptors`).
    pub flag: &'static str,
}

impl Limit {
    /// `Err` with a message naming what is over, the limit and its flag, when `count` is
    /// over the limit.
    pub fn check(&self, count: usize, what: &str) -> Result<(), String> {
        if count <= self.max {
            return Ok(());
        }
        Err(format!(
            "{what}: {count} is over the limit of {} (mixer serve {})",
            self.max, self.flag
        ))
    }
}

/// The per-request limits (see the README's "Operations: limits and timeouts").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestLimits {
    /// Descriptors in one Envoy `ShouldRateLimit` request.
    pub ratelimit_descriptors: Limit,
    /// Entries in one rate limit descriptor.
    pub descriptor_entries: Limit,
    /// Quotas asked for in one Mixer v1 Check.
    pub check_quotas: Limit,
    /// Records in one Mixer v1 Report.
    pub report_records: Limit,
    /// Attributes in one Mixer v1 attribute set (a Check's, or one Report record's), each
    /// entry of a string map counted as one.
    pub attributes: Limit,
    /// Log records or spans in one OTLP export.
    pub export_records: Limit,
    /// Entries in one message of an Envoy access log stream.
    pub access_log_entries: Limit,
}

/// `--max-ratelimit-descriptors`'s default: Envoy sends a handful per request.
pub const DEFAULT_RATELIMIT_DESCRIPTORS: usize = 64;
/// `--max-descriptor-entries`'s default.
pub const DEFAULT_DESCRIPTOR_ENTRIES: usize = 64;
/// `--max-check-quotas`'s default: an Istio proxy asks for one quota per matching QuotaSpec.
pub const DEFAULT_CHECK_QUOTAS: usize = 64;
/// `--max-report-records`'s default: Istio proxies batch reports by the hundred
/// (`report_batch_max_entries`); this leaves room for a larger setting.
pub const DEFAULT_REPORT_RECORDS: usize = 10_000;
/// `--max-attributes`'s default: a request's attributes and headers are a few dozen to a few
/// hundred.
pub const DEFAULT_ATTRIBUTES: usize = 1024;
/// `--max-export-records`'s default: OpenTelemetry SDKs export 512 at a time and the
/// Collector's batch processor 8,192.
pub const DEFAULT_EXPORT_RECORDS: usize = 10_000;
/// `--max-access-log-entries`'s default: Envoy flushes its access log buffer at 16 KiB.
pub const DEFAULT_ACCESS_LOG_ENTRIES: usize = 10_000;

impl Default for RequestLimits {
    fn default() -> RequestLimits {
        let limit = |max, flag| Limit { max, flag };
        RequestLimits {
            ratelimit_descriptors: limit(
                DEFAULT_RATELIMIT_DESCRIPTORS,
                "--max-ratelimit-descriptors",
            ),
            descriptor_entries: limit(DEFAULT_DESCRIPTOR_ENTRIES, "--max-descriptor-entries"),
            check_quotas: limit(DEFAULT_CHECK_QUOTAS, "--max-check-quotas"),
            report_records: limit(DEFAULT_REPORT_RECORDS, "--max-report-records"),
            attributes: limit(DEFAULT_ATTRIBUTES, "--max-attributes"),
            export_records: limit(DEFAULT_EXPORT_RECORDS, "--max-export-records"),
            access_log_entries: limit(DEFAULT_ACCESS_LOG_ENTRIES, "--max-access-log-entries"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_a_limit_names_it_and_its_flag() {
        let limits = RequestLimits::default();
        assert_eq!(
            limits.ratelimit_descriptors.check(64, "descriptors"),
            Ok(())
        );
        assert_eq!(
            limits.ratelimit_descriptors.check(65, "rate limit descriptors"),
            Err(
                "rate limit descriptors: 65 is over the limit of 64 (mixer serve --max-ratelimit-descriptors)"
                    .to_string()
            )
        );
    }
}

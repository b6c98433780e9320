//! Per-handler limits on each plugin call (`params.limits`).

use std::time::Duration;

use mixer_adapter_api::{DurationParam, ParamError};
use serde::Deserialize;

/// The largest memory cap a handler may ask for; also the pool's slot size.
pub const MAX_MEMORY_MIB: u64 = 256;

/// What a single call of a plugin may spend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock bound of a check or quota call.
    pub check_deadline: Duration,
    /// Wall-clock bound of a report batch.
    pub report_deadline: Duration,
    /// The most linear memory an instance may grow to, in bytes.
    pub memory_bytes: u64,
    /// Instructions' worth of fuel per call (deterministic, unlike the deadline); `None`: no
    /// fuel accounting.
    pub fuel: Option<u64>,
    /// Check and quota calls of the handler that may run at once; one more waits up to
    /// 10 ms for one of them to end, then is not run but answered by the handler's fail
    /// policy (an overloaded error), so that a plugin that spins to its deadline holds at
    /// most this many threads, whatever the load.
    pub concurrency: usize,
}

/// The default of [`Limits::concurrency`]: the machine's cores, so that a plugin that
/// always runs to its deadline can at most keep every core busy once, never queue the
/// serving threads behind it.
pub fn default_concurrency() -> usize {
    std::thread::available_parallelism().map_or(2, std::num::NonZero::get)
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            // A check sits on the request path: a plugin that needs more than a millisecond
            // is better out of process.
            check_deadline: Duration::from_millis(1),
            // Reports are off the request path and come in batches (500 instances and more).
            report_deadline: Duration::from_millis(100),
            memory_bytes: 16 << 20,
            fuel: None,
            concurrency: default_concurrency(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawLimits {
    check_deadline: Option<DurationParam>,
    report_deadline: Option<DurationParam>,
    memory_mib: Option<u64>,
    fuel: Option<u64>,
    concurrency: Option<usize>,
}

/// The most calls at once a handler may ask for: more would give a spinning plugin more
/// threads than any machine has cores.
pub const MAX_CONCURRENCY: usize = 1024;

impl Limits {
    /// Parses `params.limits` (`null`: the defaults). Errors carry paths inside `limits`.
    pub fn parse(value: Option<&serde_json::Value>) -> Result<Limits, ParamError> {
        let mut limits = Limits::default();
        let Some(value) = value.filter(|v| !v.is_null()) else {
            return Ok(limits);
        };
        let raw: RawLimits = mixer_adapter_api::host::decode_params(value)
            .map_err(|e| ParamError::new(join("limits", &e.path), e.message))?;
        if let Some(deadline) = &raw.check_deadline {
            limits.check_deadline = deadline.positive("limits.checkDeadline")?;
        }
        if let Some(deadline) = &raw.report_deadline {
            limits.report_deadline = deadline.positive("limits.reportDeadline")?;
        }
        if let Some(mib) = raw.memory_mib {
            if mib == 0 || mib > MAX_MEMORY_MIB {
                return Err(ParamError::new(
                    "limits.memoryMib",
                    format!("{mib} is not between 1 and {MAX_MEMORY_MIB}"),
                ));
            }
            limits.memory_bytes = mib << 20;
        }
        if let Some(fuel) = raw.fuel {
            if fuel == 0 {
                return Err(ParamError::new("limits.fuel", "must be more than 0"));
            }
            limits.fuel = Some(fuel);
        }
        if let Some(n) = raw.concurrency {
            if n == 0 || n > MAX_CONCURRENCY {
                return Err(ParamError::new(
                    "limits.concurrency",
                    format!("{n} is not between 1 and {MAX_CONCURRENCY}"),
                ));
            }
            limits.concurrency = n;
        }
        Ok(limits)
    }
}

fn join(prefix: &str, path: &str) -> String {
    if path.is_empty() {
        prefix.to_string()
    } else {
        format!("{prefix}.{path}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(Limits::parse(None).unwrap(), Limits::default());
        let l = Limits::parse(Some(
            &json!({"checkDeadline": "5ms", "memoryMib": 4, "fuel": 10, "concurrency": 3}),
        ))
        .unwrap();
        assert_eq!(l.concurrency, 3);
        assert_eq!(l.check_deadline, Duration::from_millis(5));
        assert_eq!(l.memory_bytes, 4 << 20);
        assert_eq!(l.fuel, Some(10));
        assert_eq!(l.report_deadline, Limits::default().report_deadline);
    }

    #[test]
    fn bad_values_name_their_field() {
        let e = Limits::parse(Some(&json!({"checkDeadline": "soon"}))).unwrap_err();
        assert_eq!(e.path, "limits.checkDeadline");
        let e = Limits::parse(Some(&json!({"memoryMib": 4096}))).unwrap_err();
        assert_eq!(e.path, "limits.memoryMib");
        let e = Limits::parse(Some(&json!({"concurrency": 0}))).unwrap_err();
        assert_eq!(e.path, "limits.concurrency");
        let e = Limits::parse(Some(&json!({"memory": 1}))).unwrap_err();
        assert!(e.path.starts_with("limits"), "{e:?}");
    }
}

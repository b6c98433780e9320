//! Quota outcomes -> `RateLimitResponse`, and "could not decide" -> gRPC error.

use std::collections::HashMap;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as PbRateLimit,
};
use mixer_runtime::{CheckError, QuotaOutcome, Snapshot};

/// The limit header (the requests per unit of the most constraining descriptor). The names are
/// the draft IETF ones envoyproxy/ratelimit emitted (its later versions default to the same
/// names without `X-`).
pub const LIMIT_HEADER: &str = "X-RateLimit-Limit";
/// The remaining header: sent only when known (0 for a descriptor over its limit).
pub const REMAINING_HEADER: &str = "X-RateLimit-Remaining";
/// The reset header: whole seconds until the grant (or refusal) expires.
pub const RESET_HEADER: &str = "X-RateLimit-Reset";

/// A limit as the rate limit protocol can say it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KnownLimit {
    /// The quota's name as configured.
    pub name: String,
    /// Requests per unit.
    pub requests_per_unit: u32,
    /// The unit.
    pub unit: Unit,
}

/// The limits of a snapshot's quota instances, as far as the handler params say them.
///
/// Quota handlers do not (yet) report the limit that applied, so it is read from the config:
/// handlers whose params have memquota/redisquota's `quotas: [{name, maxAmount,
/// validDuration}]` shape. A quota with `overrides` (its limit depends on the dimensions) or a
/// window that is not a second, minute, hour, day or week is not known. Built once per snapshot.
#[derive(Clone, Debug, Default)]
pub struct Limits {
    by_name: HashMap<String, KnownLimit>,
}

impl Limits {
    /// The limits of `snapshot`'s handlers.
    pub fn of(snapshot: &Snapshot) -> Limits {
        let mut by_name = HashMap::new();
        for handler in &snapshot.config.handlers {
            let Some(quotas) = handler.params.get("quotas").and_then(|q| q.as_array()) else {
                continue;
            };
            for quota in quotas {
                let name = quota.get("name").and_then(|n| n.as_str()).unwrap_or("");
                let has_overrides = quota
                    .get("overrides")
                    .and_then(|o| o.as_array())
                    .is_some_and(|o| !o.is_empty());
                if name.is_empty() || has_overrides {
                    continue;
                }
                let max = quota.get("maxAmount").and_then(|m| m.as_i64());
                let window = quota
                    .get("validDuration")
                    .and_then(|d| d.as_str())
                    .and_then(mixer_model::Duration::parse)
                    .filter(|d| d.0 > 0)
                    .map(|d| d.to_std());
                let (Some(max), Some(unit)) = (max, window.and_then(unit_of)) else {
                    continue;
                };
                by_name.entry(name.to_string()).or_insert(KnownLimit {
                    name: name.split('.').next().unwrap_or(name).to_string(),
                    requests_per_unit: u32::try_from(max.max(0)).unwrap_or(u32::MAX),
                    unit,
                });
            }
        }
        Limits { by_name }
    }

    /// The limit of the quota instance called `instance` (`name.namespace`): a quota named
    /// exactly so, or by Istio's `name.quota.namespace`, or by the short name.
    pub fn find(&self, instance: &str) -> Option<&KnownLimit> {
        if let Some(l) = self.by_name.get(instance) {
            return Some(l);
        }
        let (short, namespace) = instance.split_once('.').unwrap_or((instance, ""));
        self.by_name
            .get(&format!("{short}.quota.{namespace}"))
            .or_else(|| self.by_name.get(short))
    }

    /// Number of known limits.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// True when no limit is known.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

fn unit_of(window: Duration) -> Option<Unit> {
    if window.subsec_nanos() != 0 {
        return None;
    }
    Some(match window.as_secs() {
        1 => Unit::Second,
        60 => Unit::Minute,
        3600 => Unit::Hour,
        86_400 => Unit::Day,
        604_800 => Unit::Week,
        _ => return None,
    })
}

/// One descriptor's status from its quota outcome: OVER_LIMIT when any handler refused (any
/// non-OK status), OK otherwise.
pub fn descriptor_status(outcome: &QuotaOutcome, limits: &Limits) -> DescriptorStatus {
    let over = !outcome.result.status.is_ok();
    let limit = outcome.instances.iter().find_map(|i| limits.find(i));
    DescriptorStatus {
        code: if over { Code::OverLimit } else { Code::Ok } as i32,
        current_limit: limit.map(|l| PbRateLimit {
            name: l.name.clone(),
            requests_per_unit: l.requests_per_unit,
            unit: l.unit as i32,
        }),
        // Not known: quota results do not carry what is left of the limit.
        limit_remaining: 0,
        duration_until_reset: (!outcome.instances.is_empty())
            .then(|| pb_duration(outcome.result.valid_duration)),
        quota: None,
    }
}

/// The status of a descriptor that no handler was asked about.
pub fn granted_without_rule() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        ..DescriptorStatus::default()
    }
}

/// The response for decided descriptors (in request order).
///
/// `overall_code` is always set explicitly: Envoy treats `UNKNOWN` (0, the protobuf default)
/// as "not limited" whatever its `failure_mode_deny` says, so a response must never leave it
/// unset by accident.
pub fn response(statuses: Vec<DescriptorStatus>) -> RateLimitResponse {
    let over = statuses.iter().any(|s| s.code == Code::OverLimit as i32);
    let overall_code = if over { Code::OverLimit } else { Code::Ok } as i32;
    let response_headers_to_add = headers(&statuses);
    RateLimitResponse {
        overall_code,
        statuses,
        response_headers_to_add,
        ..RateLimitResponse::default()
    }
}

/// The `X-RateLimit-*` headers of the most constraining descriptor with a known limit: one over
/// its limit first, then the smallest limit. None when no limit is known.
fn headers(statuses: &[DescriptorStatus]) -> Vec<HeaderValue> {
    let Some((status, limit)) = statuses
        .iter()
        .filter_map(|s| s.current_limit.as_ref().map(|l| (s, l)))
        .min_by_key(|(s, l)| (s.code != Code::OverLimit as i32, l.requests_per_unit))
    else {
        return Vec::new();
    };
    let header = |key: &str, value: String| HeaderValue {
        key: key.to_string(),
        value,
        raw_value: Vec::new(),
    };
    let mut out = vec![header(LIMIT_HEADER, limit.requests_per_unit.to_string())];
    if status.code == Code::OverLimit as i32 {
        out.push(header(REMAINING_HEADER, "0".to_string()));
    }
    if let Some(d) = &status.duration_until_reset {
        let seconds = d.seconds + i64::from(d.nanos > 0);
        out.push(header(RESET_HEADER, seconds.max(0).to_string()));
    }
    out
}

fn pb_duration(d: Duration) -> envoy_types::pb::google::protobuf::Duration {
    envoy_types::pb::google::protobuf::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// The gRPC error for a descriptor the mixer could not decide (a quota handler failed closed:
/// its storage is down, it timed out...).
///
/// UNAVAILABLE, as Limitador answers storage errors: Envoy counts an error as a failed call and
/// applies its `failure_mode_deny` (allow by default, or 500 when set), the operator's choice.
/// Never UNKNOWN and never an OK response.
pub fn could_not_decide(error: &CheckError) -> tonic::Status {
    tonic::Status::unavailable(error.to_string())
}

/// The gRPC error before any valid config is active; UNAVAILABLE for the same reason as
/// [`could_not_decide`].
pub fn not_ready() -> tonic::Status {
    tonic::Status::unavailable("mixer: no valid config is active")
}

//! Building instances, allocating, and asserting on what the adapters answer.

use std::sync::Arc;

use mixer_adapter_api::{AdapterError, BuildContext, Handler, QuotaArgs};
use mixer_model::{Code, FieldValue, Instance, QuotaLimit, QuotaResult, Template, Value};
use serde_json::{Value as Json, json};

use crate::backends::Backend;

pub fn ctx() -> BuildContext {
    BuildContext {
        handler_name: "quotahandler.istio-system".into(),
    }
}

pub fn inst(name: &str, dims: &[(&str, &str)]) -> Instance {
    Instance {
        name: name.into(),
        template: Template::Quota,
        fields: vec![(
            "dimensions",
            FieldValue::Map(
                dims.iter()
                    .map(|(k, v)| (Arc::from(*k), Value::from(*v)))
                    .collect(),
            ),
        )],
    }
}

pub fn user(u: &str) -> Instance {
    inst("rq.istio-system", &[("user", u)])
}

/// A check's quota arguments: `amount` units, best effort or not, deduplication id `id`.
pub fn quota_args(amount: i64, best_effort: bool, id: &str) -> QuotaArgs {
    QuotaArgs {
        amount,
        best_effort,
        deduplication_id: id.into(),
        limit_override: None,
    }
}

/// One allocation as the dispatcher asks it: answered at once when the handler can
/// (`allocate_now`: memquota always, redisquota from a lease's block), else awaited.
pub async fn try_alloc(
    h: &Arc<dyn Handler>,
    i: &Instance,
    amount: i64,
    best_effort: bool,
    id: &str,
) -> Result<QuotaResult, AdapterError> {
    let args = quota_args(amount, best_effort, id);
    let quota = h.as_quota().expect("quota handler");
    if let Some(mut now) = quota.allocate_now(&[(i, &args)]) {
        assert_eq!(now.len(), 1, "one answer for one allocation");
        return now.pop().expect("one answer");
    }
    quota.allocate(i, &args).await
}

/// One allocation awaited, never answered at once ([`try_alloc`]'s other path).
pub async fn try_alloc_awaited(
    h: &Arc<dyn Handler>,
    i: &Instance,
    amount: i64,
    best_effort: bool,
    id: &str,
) -> Result<QuotaResult, AdapterError> {
    let args = quota_args(amount, best_effort, id);
    h.as_quota()
        .expect("quota handler")
        .allocate(i, &args)
        .await
}

pub async fn alloc(h: &Arc<dyn Handler>, i: &Instance, amount: i64) -> QuotaResult {
    try_alloc(h, i, amount, false, "").await.expect("decided")
}

pub async fn best(h: &Arc<dyn Handler>, i: &Instance, amount: i64) -> QuotaResult {
    try_alloc(h, i, amount, true, "").await.expect("decided")
}

#[track_caller]
pub fn granted(r: &QuotaResult, amount: i64) {
    assert_eq!(r.status.code, Code::Ok, "{r:?}");
    assert_eq!(r.granted_amount, amount, "{r:?}");
}

/// A refusal as `b`'s Istio 1.4 namesake answers it: nothing granted, `b`'s status, valid for
/// 0 (neither Istio adapter lets a proxy cache a refusal); the wait is in the limit's
/// `retry_after` instead.
#[track_caller]
pub fn denied(b: &dyn Backend, r: &QuotaResult) {
    assert_eq!(r.status, b.refusal(), "{r:?}");
    assert_eq!(r.granted_amount, 0, "{r:?}");
    assert_eq!(r.valid_duration, std::time::Duration::ZERO, "{r:?}");
}

pub fn exposition(h: &Arc<dyn Handler>) -> String {
    let mut out = String::new();
    h.as_exposition().expect("exposition").render(&mut out);
    out
}

pub fn quota(name: &str, max: i64, valid: &str, algorithm: &str) -> Json {
    json!({"name": name, "maxAmount": max, "validDuration": valid, "rateLimitAlgorithm": algorithm})
}

#[track_caller]
pub fn left(r: &QuotaResult, remaining: i64) -> QuotaLimit {
    let limit = r.limit.clone().expect("the limit is reported");
    assert_eq!(limit.remaining, remaining, "{r:?}");
    limit
}

/// `i` with a `min_remaining`: checks are refused while fewer units are left.
pub fn with_minimum(mut i: Instance, min: i64) -> Instance {
    i.fields
        .push(("min_remaining", FieldValue::Value(Value::Int64(min))));
    i
}

/// Charges `amount` (a report's usage) with deduplication id `id`.
pub async fn charge(h: &Arc<dyn Handler>, i: &Instance, amount: i64, id: &str) -> QuotaResult {
    let args = QuotaArgs {
        amount,
        deduplication_id: id.into(),
        ..QuotaArgs::default()
    };
    h.as_quota()
        .expect("quota handler")
        .charge_many(&[(i, &args)])
        .await
        .pop()
        .expect("one answer")
        .expect("charged")
}

/// A handler's counter `name` (labelled with the tests' handler only), from its exposition.
pub fn metric(h: &Arc<dyn Handler>, name: &str) -> u64 {
    let text = exposition(h);
    let prefix = format!("{name}{{handler=\"quotahandler.istio-system\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} in {text}"))
}

/// A small deterministic generator (64-bit LCG, Knuth's MMIX constants), so that a failure
/// of a randomised test can be replayed from its seed.
pub struct Lcg(pub u64);

impl Lcg {
    /// The next number below `below`.
    pub fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

//! A rule's `spec.sampling` (Istio 1.4's `Sampling`, `policy/v1beta1/cfg.proto` on istio/api
//! `release-1.4`): `random` (`percentSampled`, `attributeExpression`,
//! `useIndependentRandomness`) and `rateLimit` (`samplingDuration`, `maxUnsampledEntries`,
//! `samplingRate`).
//!
//! `percentSampled` is a `FractionalPercent` (`{numerator, denominator: HUNDRED |
//! TEN_THOUSAND}`), and also a plain number of percent (`percentSampled: 10`, `12.5`), the
//! way Istio 1.4 configs write it.

use mixer_model::{ValueType, Vocabulary};
use serde_json::{Map, Value};

use super::{Doc, compile_leaf, parse_enum};
use crate::document::{as_map, check_keys, type_name};
use crate::error::{Diagnostics, join};
use crate::model::{RandomSamplingConfig, RateLimitSamplingConfig, SamplingConfig};

/// Parts per million in one percent.
const PPM_PER_PERCENT: u32 = 10_000;

/// Validates `spec.sampling`; `None` (with errors reported at their field path) when invalid.
pub(super) fn sampling(
    doc: &Doc<'_>,
    value: &Value,
    vocabulary: &Vocabulary,
    diags: &mut Diagnostics,
) -> Option<SamplingConfig> {
    let raw = doc.raw;
    let path = "spec.sampling";
    let map = as_map(value, path, &raw.doc, diags)?;
    check_keys(&map, &["random", "rateLimit"], path, &raw.doc, diags);
    let before = diags.errors.len();
    let random = match map.get("random") {
        None | Some(Value::Null) => None,
        Some(v) => random(doc, v, &join(path, "random"), vocabulary, diags),
    };
    let rate_limit = match map.get("rateLimit") {
        None | Some(Value::Null) => None,
        Some(v) => rate_limit(doc, v, &join(path, "rateLimit"), diags),
    };
    (diags.errors.len() == before).then_some(SamplingConfig { random, rate_limit })
}

fn random(
    doc: &Doc<'_>,
    value: &Value,
    path: &str,
    vocabulary: &Vocabulary,
    diags: &mut Diagnostics,
) -> Option<RandomSamplingConfig> {
    let raw = doc.raw;
    let map = as_map(value, path, &raw.doc, diags)?;
    check_keys(
        &map,
        &[
            "attributeExpression",
            "percentSampled",
            "useIndependentRandomness",
        ],
        path,
        &raw.doc,
        diags,
    );
    // Istio's default: 0%, so a `random` without a percentage sends nothing.
    let (parts_per_million, denominator) = match map.get("percentSampled") {
        None | Some(Value::Null) => (Some(0), 100),
        Some(v) => {
            let denominator = match v.get("denominator").and_then(Value::as_str) {
                Some("TEN_THOUSAND") => 10_000,
                _ => 100,
            };
            (
                percent(doc, v, &join(path, "percentSampled"), diags),
                denominator,
            )
        }
    };
    let attribute_expression = match map.get("attributeExpression") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.trim().is_empty() => None,
        Some(v) => {
            let here = join(path, "attributeExpression");
            let expr = compile_leaf(doc, v, &here, None, vocabulary, diags)?;
            match expr.result_type() {
                Some(ValueType::Int64 | ValueType::Double) | None => Some(expr),
                Some(other) => {
                    diags.error(
                        &raw.doc,
                        here,
                        format!("must be a number of percent (INT64 or DOUBLE), not {other:?}"),
                    );
                    return None;
                }
            }
        }
    };
    let use_independent_randomness = match map.get("useIndependentRandomness") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            diags.error(
                &raw.doc,
                join(path, "useIndependentRandomness"),
                format!("expected true or false, found {}", type_name(other)),
            );
            return None;
        }
    };
    Some(RandomSamplingConfig {
        parts_per_million: parts_per_million?,
        attribute_expression,
        denominator,
        use_independent_randomness,
    })
}

/// `percentSampled` as parts per million: a number of percent (0 to 100, at most four
/// decimals), or a `FractionalPercent`, whose numerator over its denominator is capped at 100%.
fn percent(doc: &Doc<'_>, value: &Value, path: &str, diags: &mut Diagnostics) -> Option<u32> {
    let raw = doc.raw;
    match value {
        Value::Number(n) => {
            let pct = n.as_f64().filter(|p| (0.0..=100.0).contains(p));
            match pct.map(|p| p * f64::from(PPM_PER_PERCENT)) {
                Some(ppm) if (ppm - ppm.round()).abs() < 1e-6 => Some(ppm.round() as u32),
                Some(_) => {
                    diags.error(&raw.doc, path, "at most four decimals of a percent");
                    None
                }
                None => {
                    diags.error(
                        &raw.doc,
                        path,
                        format!("{n} is not a percentage from 0 to 100"),
                    );
                    None
                }
            }
        }
        Value::Object(map) => fractional(doc, map, path, diags),
        other => {
            diags.error(
                &raw.doc,
                path,
                format!(
                    "expected a percentage or {{numerator, denominator}}, found {}",
                    type_name(other)
                ),
            );
            None
        }
    }
}

fn fractional(
    doc: &Doc<'_>,
    map: &Map<String, Value>,
    path: &str,
    diags: &mut Diagnostics,
) -> Option<u32> {
    let raw = doc.raw;
    check_keys(map, &["numerator", "denominator"], path, &raw.doc, diags);
    let numerator = match map.get("numerator") {
        None | Some(Value::Null) => Some(0),
        Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) => Some(n),
            None => {
                diags.error(
                    &raw.doc,
                    join(path, "numerator"),
                    format!("expected a whole number from 0 to {}, found {v}", u32::MAX),
                );
                None
            }
        },
    };
    // Istio's DenominatorType: HUNDRED is its zero value, so the default.
    let denominator = match map.get("denominator") {
        None | Some(Value::Null) => Some(100),
        v => parse_enum(
            doc,
            v,
            &join(path, "denominator"),
            &[("HUNDRED", 100u32), ("TEN_THOUSAND", 10_000)],
            diags,
        ),
    };
    let (numerator, denominator) = (numerator?, denominator?);
    let ppm = u64::from(numerator) * 1_000_000 / u64::from(denominator);
    Some(ppm.min(1_000_000) as u32)
}

fn rate_limit(
    doc: &Doc<'_>,
    value: &Value,
    path: &str,
    diags: &mut Diagnostics,
) -> Option<RateLimitSamplingConfig> {
    let raw = doc.raw;
    let map = as_map(value, path, &raw.doc, diags)?;
    check_keys(
        &map,
        &["samplingDuration", "maxUnsampledEntries", "samplingRate"],
        path,
        &raw.doc,
        diags,
    );
    let here = join(path, "samplingDuration");
    let sampling_duration = match map.get("samplingDuration") {
        Some(Value::String(text)) => match mixer_model::Duration::parse(text.trim()) {
            Some(d) if d.0 > 0 => Some(d.to_std()),
            _ => {
                diags.error(
                    &raw.doc,
                    here,
                    format!("{text:?} is not a positive duration such as \"1s\""),
                );
                None
            }
        },
        None | Some(Value::Null) => {
            diags.error(&raw.doc, here, "missing: the window to count entries in");
            None
        }
        Some(other) => {
            diags.error(
                &raw.doc,
                here,
                format!(
                    "expected a duration such as \"1s\", found {}",
                    type_name(other)
                ),
            );
            None
        }
    };
    let count = |key: &str, min: u64, default: u64, diags: &mut Diagnostics| match map.get(key) {
        None | Some(Value::Null) => Some(default),
        // proto3 JSON writes an int64 as a string.
        Some(v) => {
            let n = v
                .as_u64()
                .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()));
            match n.filter(|n| *n >= min && i64::try_from(*n).is_ok()) {
                Some(n) => Some(n),
                None => {
                    diags.error(
                        &raw.doc,
                        join(path, key),
                        format!("expected a whole number of at least {min}, found {v}"),
                    );
                    None
                }
            }
        }
    };
    let max_unsampled_entries = count("maxUnsampledEntries", 0, 0, diags);
    // One in 0 means nothing; Istio's field has no zero meaning, so it must be said.
    let sampling_rate = match map.get("samplingRate") {
        None | Some(Value::Null) => {
            diags.error(
                &raw.doc,
                join(path, "samplingRate"),
                "missing: past maxUnsampledEntries, one entry in samplingRate is sent",
            );
            None
        }
        Some(_) => count("samplingRate", 1, 1, diags),
    };
    Some(RateLimitSamplingConfig {
        sampling_duration: sampling_duration?,
        max_unsampled_entries: max_unsampled_entries?,
        sampling_rate: sampling_rate?,
    })
}

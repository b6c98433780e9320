//! Istio 1.4's `rule.sampling` on report rules: which records reach the rule's actions, and
//! the count of those that do not. The semantics are those istio/api `release-1.4`
//! documents in `policy/v1beta1/cfg.proto` (`Sampling`, `RandomSampling`,
//! `RateLimitSampling`).

mod common;

use common::*;
use mixer_model::{Value, Variety};
use mixer_runtime::{RuntimeMetrics, evaluate};

const RECORDS: usize = 100_000;

/// Report rules at 10% and 20% drawn on the request id, one at 10% drawn independently,
/// one whose percentage is the record's `request.size`, and a rate limited one.
const CONFIG: &str = r#"
kind: handler
metadata: {name: sink, namespace: istio-system}
spec: {compiledAdapter: noop}
---
kind: instance
metadata: {name: ten, namespace: istio-system}
spec: {compiledTemplate: reportnothing}
---
kind: instance
metadata: {name: twenty, namespace: istio-system}
spec: {compiledTemplate: reportnothing}
---
kind: instance
metadata: {name: independent, namespace: istio-system}
spec: {compiledTemplate: reportnothing}
---
kind: instance
metadata: {name: by-size, namespace: istio-system}
spec: {compiledTemplate: reportnothing}
---
kind: instance
metadata: {name: limited, namespace: istio-system}
spec: {compiledTemplate: reportnothing}
---
kind: rule
metadata: {name: ten, namespace: istio-system}
spec:
  actions: [{handler: sink, instances: [ten]}]
  sampling: {random: {percentSampled: 10}}
---
kind: rule
metadata: {name: twenty, namespace: istio-system}
spec:
  actions: [{handler: sink, instances: [twenty]}]
  sampling: {random: {percentSampled: {numerator: 2000, denominator: TEN_THOUSAND}}}
---
kind: rule
metadata: {name: independent, namespace: istio-system}
spec:
  actions: [{handler: sink, instances: [independent]}]
  sampling: {random: {percentSampled: 10, useIndependentRandomness: true}}
---
kind: rule
metadata: {name: by-size, namespace: istio-system}
spec:
  actions: [{handler: sink, instances: [by-size]}]
  sampling: {random: {percentSampled: 50, attributeExpression: request.size}}
---
kind: rule
metadata: {name: limited, namespace: istio-system}
spec:
  actions: [{handler: sink, instances: [limited]}]
  sampling: {rateLimit: {samplingDuration: 1h, maxUnsampledEntries: 5, samplingRate: 10}}
"#;

/// A version 4 UUID's text, its random bits from `rng`.
fn request_id(rng: &mut fastrand::Rng) -> String {
    let a = rng.u32(..);
    let b = rng.u16(..);
    let c = rng.u16(..) & 0x0fff | 0x4000;
    let d = rng.u16(..) & 0x3fff | 0x8000;
    let e = rng.u64(..) & 0xffff_ffff_ffff;
    format!("{a:08x}-{b:04x}-{c:04x}-{d:04x}-{e:012x}")
}

fn sent(eval: &mixer_runtime::Evaluation, instance: &str) -> bool {
    eval.dispatches
        .iter()
        .any(|d| d.instance.name.as_ref() == format!("{instance}.instance.istio-system"))
}

#[test]
fn a_hundred_thousand_records_at_ten_percent_keep_ten_percent() {
    let metrics = RuntimeMetrics::unregistered();
    let snap = snapshot_metered(CONFIG, &metrics);
    let mut rng = fastrand::Rng::with_seed(36);
    let (mut ten, mut twenty, mut independent) = (0usize, 0usize, 0usize);
    for _ in 0..RECORDS {
        let b = bag(&snap, &[("request.id", Value::from(request_id(&mut rng)))]);
        let eval = evaluate(&snap, &b, Variety::Report);
        let kept_ten = sent(&eval, "ten");
        let kept_twenty = sent(&eval, "twenty");
        // Drawn on the request id: what the 10% rule keeps, the 20% rule keeps too.
        assert!(!kept_ten || kept_twenty, "request sampled apart");
        ten += usize::from(kept_ten);
        twenty += usize::from(kept_twenty);
        independent += usize::from(sent(&eval, "independent"));
    }
    for (rule, kept, percent) in [
        ("ten", ten, 10),
        ("twenty", twenty, 20),
        ("independent", independent, 10),
    ] {
        let want = RECORDS * percent / 100;
        let tolerance = RECORDS / 100;
        assert!(
            kept.abs_diff(want) <= tolerance,
            "{rule}: kept {kept} of {RECORDS}, want {want} +/- {tolerance}"
        );
        let out = metrics
            .report_sampled_out
            .with_label_values(&[&format!("{rule}.rule.istio-system")])
            .get();
        assert_eq!(out as usize, RECORDS - kept, "{rule}: sampled out counted");
    }
}

#[test]
fn the_attribute_expression_replaces_the_percentage() {
    let snap = snapshot(CONFIG, &mixer_runtime::RuntimeOptions::default());
    let kept = |size: Option<i64>| {
        let attrs: Vec<(&str, Value)> = size
            .map(|s| ("request.size", Value::Int64(s)))
            .into_iter()
            .collect();
        (0..200)
            .filter(|_| {
                sent(
                    &evaluate(&snap, &bag(&snap, &attrs), Variety::Report),
                    "by-size",
                )
            })
            .count()
    };
    assert_eq!(kept(Some(100)), 200, "100 of 100: every record");
    assert_eq!(kept(Some(0)), 0);
    // Istio: an expression with no value samples at 0%, not at percentSampled.
    assert_eq!(kept(None), 0);
}

#[test]
fn rate_limit_sampling_keeps_the_first_entries_then_one_in_n() {
    let metrics = RuntimeMetrics::unregistered();
    let snap = snapshot_metered(CONFIG, &metrics);
    let kept = (0..100)
        .filter(|_| {
            sent(
                &evaluate(&snap, &bag(&snap, &[]), Variety::Report),
                "limited",
            )
        })
        .count();
    // The first 5 of the window, then the 10th, 20th, ... of the 95 after them.
    assert_eq!(kept, 5 + 9);
    let out = metrics
        .report_sampled_out
        .with_label_values(&["limited.rule.istio-system"])
        .get();
    assert_eq!(out, 100 - 14);
}

use std::sync::Arc;

use super::*;
use mixer_model::Vocabulary;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope};
use opentelemetry_proto::tonic::metrics::v1::summary_data_point::ValueAtQuantile;
use opentelemetry_proto::tonic::metrics::v1::{
    ExponentialHistogram, Gauge, Histogram, Sum, Summary,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use proptest::prelude::*;
use prost::Message;

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(Any::StringValue(v.into())),
        }),
        key_strindex: 0,
    }
}

fn metric(name: &str, data: Data) -> Metric {
    Metric {
        name: name.into(),
        description: "what it counts".into(),
        unit: "ms".into(),
        metadata: vec![],
        data: Some(data),
    }
}

const CUMULATIVE: i32 = AggregationTemporality::Cumulative as i32;
const DELTA: i32 = AggregationTemporality::Delta as i32;

/// Maps every point of `metric` under a resource with `service.name` and a scope with one
/// attribute; one result per point.
fn map(metric: &Metric) -> Vec<Result<AttributeBag, String>> {
    let resource = Resource {
        attributes: vec![kv("service.name", "shop")],
        ..Resource::default()
    };
    let scope = InstrumentationScope {
        name: "shop.meter".into(),
        version: "1.2".into(),
        attributes: vec![kv("team", "payments")],
        dropped_attributes_count: 0,
    };
    let scope_metrics = ScopeMetrics {
        scope: Some(scope),
        metrics: vec![],
        schema_url: String::new(),
    };
    let resource_metrics = ResourceMetrics {
        resource: Some(resource),
        scope_metrics: vec![],
        schema_url: String::new(),
    };
    let source = Source::new(&resource_metrics, &scope_metrics);
    points(metric)
        .into_iter()
        .map(|p| {
            let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
            fill_point(&mut bag, &source, metric, p, Timestamp(7)).map(|()| bag)
        })
        .collect()
}

fn one(metric: &Metric) -> AttributeBag {
    let mut all = map(metric);
    assert_eq!(all.len(), 1);
    all.remove(0).expect("the point maps")
}

fn rejected(metric: &Metric) -> String {
    let mut all = map(metric);
    assert_eq!(all.len(), 1);
    all.remove(0).expect_err("the point is rejected")
}

fn get<'b>(bag: &'b AttributeBag, name: &str) -> Option<&'b Value> {
    bag.get_by_name(name)
}

fn text(bag: &AttributeBag, name: &str) -> Option<String> {
    get(bag, name).map(|v| v.to_string())
}

fn map_entries(bag: &AttributeBag, name: &str) -> Vec<(String, String)> {
    match get(bag, name) {
        Some(Value::StringMap(m)) => m.iter().map(|(k, v)| (k.into(), v.into())).collect(),
        other => panic!("{name} is {other:?}"),
    }
}

fn number_point(value: Number) -> NumberDataPoint {
    NumberDataPoint {
        attributes: vec![kv("route", "/cart")],
        start_time_unix_nano: 1_700_000_000_000_000_000,
        time_unix_nano: 1_700_000_010_000_000_000,
        exemplars: vec![],
        flags: 0,
        value: Some(value),
    }
}

#[test]
fn a_cumulative_sum_keeps_temporality_monotonicity_times_and_origin() {
    let m = metric(
        "shop.requests",
        Data::Sum(Sum {
            data_points: vec![number_point(Number::AsInt(3))],
            aggregation_temporality: CUMULATIVE,
            is_monotonic: true,
        }),
    );
    let bag = one(&m);
    assert_eq!(
        text(&bag, "otel.metric.name").as_deref(),
        Some("shop.requests")
    );
    assert_eq!(text(&bag, "otel.metric.kind").as_deref(), Some("sum"));
    assert_eq!(text(&bag, "otel.metric.unit").as_deref(), Some("ms"));
    assert_eq!(
        text(&bag, "otel.metric.description").as_deref(),
        Some("what it counts")
    );
    assert_eq!(
        text(&bag, "otel.metric.temporality").as_deref(),
        Some("cumulative")
    );
    assert_eq!(get(&bag, "otel.metric.monotonic"), Some(&Value::Bool(true)));
    assert_eq!(get(&bag, "otel.metric.value"), Some(&Value::Double(3.0)));
    assert_eq!(get(&bag, "otel.metric.int_value"), Some(&Value::Int64(3)));
    assert_eq!(
        get(&bag, "otel.metric.start_time"),
        Some(&Value::Timestamp(Timestamp(1_700_000_000_000_000_000)))
    );
    assert_eq!(
        get(&bag, "otel.metric.time"),
        Some(&Value::Timestamp(Timestamp(1_700_000_010_000_000_000)))
    );
    assert_eq!(
        get(&bag, "context.time"),
        Some(&Value::Timestamp(Timestamp(1_700_000_010_000_000_000)))
    );
    assert_eq!(
        map_entries(&bag, "otel.metric.attributes"),
        [("route".into(), "/cart".into())]
    );
    assert_eq!(
        map_entries(&bag, "otel.scope.attributes"),
        [("team".into(), "payments".into())]
    );
    assert_eq!(
        map_entries(&bag, "otel.resource"),
        [("service.name".into(), "shop".into())]
    );
    // The merged view the other OTLP signals have.
    assert_eq!(
        map_entries(&bag, "otel.attributes"),
        [
            ("route".to_string(), "/cart".to_string()),
            ("service.name".into(), "shop".into()),
            ("team".into(), "payments".into()),
        ]
    );
    assert_eq!(text(&bag, "otel.scope.name").as_deref(), Some("shop.meter"));
    assert!(get(&bag, "otel.metric.count").is_none());

    // The point alone, as sent, for an exporter to pass on.
    let Some(Value::Bytes(encoded)) = get(&bag, "otel.metric.point") else {
        panic!("no otel.metric.point");
    };
    let decoded = ResourceMetrics::decode(&encoded[..]).expect("decodes");
    assert_eq!(
        decoded.resource.expect("resource").attributes,
        [kv("service.name", "shop")]
    );
    let scope = &decoded.scope_metrics[0];
    assert_eq!(
        scope.scope.as_ref().map(|s| s.name.as_str()),
        Some("shop.meter")
    );
    assert_eq!(scope.metrics, std::slice::from_ref(&m));
}

#[test]
fn a_gauge_has_no_temporality_and_a_delta_sum_says_delta() {
    let gauge = metric(
        "shop.temperature",
        Data::Gauge(Gauge {
            data_points: vec![NumberDataPoint {
                time_unix_nano: 0,
                ..number_point(Number::AsDouble(21.5))
            }],
        }),
    );
    let bag = one(&gauge);
    assert_eq!(text(&bag, "otel.metric.kind").as_deref(), Some("gauge"));
    assert_eq!(get(&bag, "otel.metric.value"), Some(&Value::Double(21.5)));
    assert!(get(&bag, "otel.metric.int_value").is_none());
    assert!(get(&bag, "otel.metric.temporality").is_none());
    assert!(get(&bag, "otel.metric.monotonic").is_none());
    // No time on the point: the mixer's clock.
    assert!(get(&bag, "otel.metric.time").is_none());
    assert_eq!(
        get(&bag, "context.time"),
        Some(&Value::Timestamp(Timestamp(7)))
    );

    let delta = metric(
        "shop.queue.depth",
        Data::Sum(Sum {
            data_points: vec![number_point(Number::AsInt(-2))],
            aggregation_temporality: DELTA,
            is_monotonic: false,
        }),
    );
    let bag = one(&delta);
    assert_eq!(
        text(&bag, "otel.metric.temporality").as_deref(),
        Some("delta")
    );
    assert_eq!(
        get(&bag, "otel.metric.monotonic"),
        Some(&Value::Bool(false))
    );
    assert_eq!(get(&bag, "otel.metric.value"), Some(&Value::Double(-2.0)));
}

fn histogram_point(bounds: Vec<f64>, counts: Vec<u64>) -> HistogramDataPoint {
    HistogramDataPoint {
        attributes: vec![kv("route", "/cart")],
        start_time_unix_nano: 1,
        time_unix_nano: 2,
        count: counts.iter().sum(),
        sum: Some(555.0),
        bucket_counts: counts,
        explicit_bounds: bounds,
        exemplars: vec![],
        flags: 0,
        min: Some(5.0),
        max: Some(500.0),
    }
}

fn histogram(point: HistogramDataPoint) -> Metric {
    metric(
        "shop.latency",
        Data::Histogram(Histogram {
            data_points: vec![point],
            aggregation_temporality: CUMULATIVE,
        }),
    )
}

/// Buckets as Prometheus exposes an OTLP histogram (OpenTelemetry's "Prometheus and
/// OpenMetrics Compatibility" spec: each explicit bound becomes an `le` bucket holding the
/// count at or below it, and `+Inf` the total).
#[test]
fn histogram_buckets_are_cumulative_by_upper_bound() {
    let bag = one(&histogram(histogram_point(
        vec![0.0, 5.0, 10.0, 250.0, 500.0],
        vec![0, 1, 0, 1, 1, 0],
    )));
    assert_eq!(text(&bag, "otel.metric.kind").as_deref(), Some("histogram"));
    assert_eq!(get(&bag, "otel.metric.count"), Some(&Value::Int64(3)));
    assert_eq!(get(&bag, "otel.metric.sum"), Some(&Value::Double(555.0)));
    assert_eq!(get(&bag, "otel.metric.min"), Some(&Value::Double(5.0)));
    assert_eq!(get(&bag, "otel.metric.max"), Some(&Value::Double(500.0)));
    let buckets = map_entries(&bag, "otel.metric.buckets");
    let expected: Vec<(String, String)> = [
        ("+Inf", "3"),
        ("0", "0"),
        ("10", "1"),
        ("250", "2"),
        ("5", "1"),
        ("500", "3"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut buckets_sorted = buckets.clone();
    buckets_sorted.sort();
    assert_eq!(buckets_sorted, expected);
}

#[test]
fn a_histogram_without_buckets_has_count_and_sum_only() {
    let mut p = histogram_point(vec![], vec![]);
    p.count = 4;
    p.sum = None;
    let bag = one(&histogram(p));
    assert_eq!(get(&bag, "otel.metric.count"), Some(&Value::Int64(4)));
    assert!(get(&bag, "otel.metric.sum").is_none());
    assert!(get(&bag, "otel.metric.buckets").is_none());
}

fn exponential_metric(point: ExponentialHistogramDataPoint) -> Metric {
    metric(
        "shop.payload",
        Data::ExponentialHistogram(ExponentialHistogram {
            data_points: vec![point],
            aggregation_temporality: DELTA,
        }),
    )
}

/// The OpenTelemetry metrics data model ("Exponential Buckets"): at scale 0 the base is 2 and
/// positive bucket `index` holds (2^index, 2^(index+1)]; negative bucket `index` holds the
/// values whose absolute value falls there; the zero bucket holds [-threshold, threshold].
#[test]
fn exponential_buckets_get_their_upper_bounds_and_raw_counts() {
    let p = ExponentialHistogramDataPoint {
        attributes: vec![],
        start_time_unix_nano: 1,
        time_unix_nano: 2,
        count: 7,
        sum: Some(10.5),
        scale: 0,
        zero_count: 1,
        positive: Some(Buckets {
            offset: 0,
            bucket_counts: vec![2, 3],
        }),
        negative: Some(Buckets {
            offset: -1,
            bucket_counts: vec![1],
        }),
        flags: 0,
        exemplars: vec![],
        min: Some(-0.75),
        max: Some(4.0),
        zero_threshold: 0.0,
    };
    let bag = one(&exponential_metric(p));
    assert_eq!(
        text(&bag, "otel.metric.kind").as_deref(),
        Some("exponential_histogram")
    );
    assert_eq!(
        text(&bag, "otel.metric.temporality").as_deref(),
        Some("delta")
    );
    assert_eq!(get(&bag, "otel.metric.count"), Some(&Value::Int64(7)));
    assert_eq!(get(&bag, "otel.metric.scale"), Some(&Value::Int64(0)));
    assert_eq!(get(&bag, "otel.metric.zero_count"), Some(&Value::Int64(1)));
    assert_eq!(
        get(&bag, "otel.metric.positive_offset"),
        Some(&Value::Int64(0))
    );
    assert_eq!(
        text(&bag, "otel.metric.positive_counts").as_deref(),
        Some("2,3")
    );
    assert_eq!(
        get(&bag, "otel.metric.negative_offset"),
        Some(&Value::Int64(-1))
    );
    assert_eq!(
        text(&bag, "otel.metric.negative_counts").as_deref(),
        Some("1")
    );
    let mut buckets = map_entries(&bag, "otel.metric.buckets");
    buckets.sort();
    // Negative bucket -1 holds [-1, -0.5): its upper bound is -0.5. Positive buckets 0 and 1
    // end at 2 and 4.
    let expected: Vec<(String, String)> = [
        ("+Inf", "7"),
        ("-0.5", "1"),
        ("0", "2"),
        ("2", "4"),
        ("4", "7"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(buckets, expected);
}

#[test]
fn exponential_bounds_follow_the_scale() {
    // Scale 1: base sqrt(2). Scale -1: base 4.
    assert_eq!(exponential_bound(0, 3), 8.0);
    assert!((exponential_bound(1, 1) - std::f64::consts::SQRT_2).abs() < 1e-15);
    assert_eq!(exponential_bound(-1, 2), 16.0);
    assert_eq!(exponential_bound(20, 0), 1.0);
}

#[test]
fn a_summary_keeps_its_quantiles() {
    let m = metric(
        "rpc.duration",
        Data::Summary(Summary {
            data_points: vec![SummaryDataPoint {
                attributes: vec![],
                start_time_unix_nano: 1,
                time_unix_nano: 2,
                count: 10,
                sum: 12.5,
                quantile_values: vec![
                    ValueAtQuantile {
                        quantile: 0.5,
                        value: 1.0,
                    },
                    ValueAtQuantile {
                        quantile: 0.99,
                        value: 4.25,
                    },
                ],
                flags: 0,
            }],
        }),
    );
    let bag = one(&m);
    assert_eq!(text(&bag, "otel.metric.kind").as_deref(), Some("summary"));
    assert_eq!(get(&bag, "otel.metric.count"), Some(&Value::Int64(10)));
    assert_eq!(get(&bag, "otel.metric.sum"), Some(&Value::Double(12.5)));
    assert!(get(&bag, "otel.metric.temporality").is_none());
    assert_eq!(
        map_entries(&bag, "otel.metric.quantiles"),
        [
            ("0.5".to_string(), "1".to_string()),
            ("0.99".into(), "4.25".into())
        ]
    );
}

#[test]
fn points_that_cannot_be_mapped_are_rejected_with_a_reason() {
    let gauge = |v: f64| {
        metric(
            "g",
            Data::Gauge(Gauge {
                data_points: vec![number_point(Number::AsDouble(v))],
            }),
        )
    };
    assert_eq!(rejected(&gauge(f64::NAN)), "the value is NaN");
    assert_eq!(rejected(&gauge(f64::INFINITY)), "the value is +Inf");
    let mut no_value = gauge(1.0);
    if let Some(Data::Gauge(g)) = &mut no_value.data {
        g.data_points[0].value = None;
    }
    assert_eq!(rejected(&no_value), "the point has no value");
    let mut stale = gauge(1.0);
    if let Some(Data::Gauge(g)) = &mut stale.data {
        g.data_points[0].flags = DataPointFlags::NoRecordedValueMask as u32;
    }
    assert!(rejected(&stale).contains("NO_RECORDED_VALUE"));
    let mut nameless = gauge(1.0);
    nameless.name.clear();
    assert_eq!(rejected(&nameless), "the metric has no name");

    let unspecified = metric(
        "s",
        Data::Sum(Sum {
            data_points: vec![number_point(Number::AsInt(1))],
            aggregation_temporality: 0,
            is_monotonic: true,
        }),
    );
    assert_eq!(
        rejected(&unspecified),
        "the aggregation temporality is unspecified"
    );

    let mismatch = histogram(histogram_point(vec![1.0, 2.0], vec![1, 1]));
    assert_eq!(
        rejected(&mismatch),
        "2 bucket counts for 2 explicit bounds (must be one more)"
    );
    let unordered = histogram(histogram_point(vec![2.0, 1.0], vec![1, 1, 1]));
    assert_eq!(rejected(&unordered), "explicit bound 1 is not above 2");
    let mut wrong_count = histogram_point(vec![1.0], vec![1, 1]);
    wrong_count.count = 3;
    assert_eq!(
        rejected(&histogram(wrong_count)),
        "the bucket counts add up to 2, the count is 3"
    );
    let mut nan_sum = histogram_point(vec![1.0], vec![1, 1]);
    nan_sum.sum = Some(f64::NAN);
    assert_eq!(rejected(&histogram(nan_sum)), "the sum is NaN");
    let many = histogram(histogram_point(
        (0..MAX_BUCKETS).map(|i| i as f64).collect(),
        vec![0; MAX_BUCKETS + 1],
    ));
    assert!(rejected(&many).contains("more than the 1000"));

    let scale = exponential_metric(ExponentialHistogramDataPoint {
        scale: 21,
        ..ExponentialHistogramDataPoint::default()
    });
    assert_eq!(rejected(&scale), "scale 21 is outside -10..=20");
    // At scale -10 the base is 2^1024: every bound past index 0 is infinite.
    let overflow = exponential_metric(ExponentialHistogramDataPoint {
        count: 2,
        scale: -10,
        positive: Some(Buckets {
            offset: 1,
            bucket_counts: vec![1, 1],
        }),
        ..ExponentialHistogramDataPoint::default()
    });
    assert!(
        rejected(&overflow).contains("out of a float's range"),
        "{}",
        rejected(&overflow)
    );
    let mut huge = histogram_point(vec![], vec![]);
    huge.count = u64::MAX;
    assert!(rejected(&histogram(huge)).contains("over 2^63-1"));
}

#[test]
fn a_rejected_point_leaves_the_bag_empty() {
    let m = metric(
        "g",
        Data::Gauge(Gauge {
            data_points: vec![number_point(Number::AsDouble(f64::NAN))],
        }),
    );
    let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
    let (resource, scope) = (ResourceMetrics::default(), ScopeMetrics::default());
    let source = Source::new(&resource, &scope);
    let point = points(&m)[0];
    assert!(fill_point(&mut bag, &source, &m, point, Timestamp(1)).is_err());
    assert!(bag.is_empty());
}

#[test]
fn points_are_counted_per_kind() {
    let m = metric(
        "s",
        Data::Sum(Sum {
            data_points: vec![number_point(Number::AsInt(1)); 3],
            aggregation_temporality: CUMULATIVE,
            is_monotonic: true,
        }),
    );
    assert_eq!(count_points(&m), 3);
    assert_eq!(points(&m).len(), 3);
    let empty = Metric {
        data: None,
        ..m.clone()
    };
    assert_eq!(count_points(&empty), 0);
}

proptest! {
    /// The bucket map is Prometheus' cumulative form of the point: its keys read back to the
    /// exact bounds, its counts never decrease, `+Inf` is the count, and differences give the
    /// original bucket counts back.
    #[test]
    fn histogram_buckets_round_trip(
        mut bounds in prop::collection::btree_set(-1_000_000i64..1_000_000, 0..40),
        counts in prop::collection::vec(0u64..1_000_000, 41),
        divisor in prop::sample::select(vec![1.0, 3.0, 1000.0, 7.0e9]),
    ) {
        let bounds: Vec<f64> = std::mem::take(&mut bounds)
            .into_iter()
            .map(|b| b as f64 / divisor)
            .collect();
        let mut sorted = bounds.clone();
        sorted.dedup();
        prop_assume!(sorted.len() == bounds.len());
        let counts = counts[..=bounds.len()].to_vec();
        let bag = one(&histogram(histogram_point(bounds.clone(), counts.clone())));
        let mut entries: Vec<(f64, u64)> = map_entries(&bag, "otel.metric.buckets")
            .into_iter()
            .map(|(k, v)| {
                let bound = if k == "+Inf" { f64::INFINITY } else { k.parse().expect("a number") };
                (bound, v.parse().expect("a count"))
            })
            .collect();
        entries.sort_by(|a, b| a.0.total_cmp(&b.0));
        let keys: Vec<f64> = entries.iter().map(|e| e.0).collect();
        let mut expected_keys = bounds.clone();
        expected_keys.push(f64::INFINITY);
        prop_assert_eq!(keys, expected_keys);
        let mut previous = 0;
        let mut back = Vec::new();
        for (_, c) in &entries {
            prop_assert!(*c >= previous);
            back.push(c - previous);
            previous = *c;
        }
        prop_assert_eq!(back, counts.clone());
        prop_assert_eq!(previous, counts.iter().sum::<u64>());
    }

    /// Exponential bucket bounds rise with the index at every scale, and the map ends with
    /// the count.
    #[test]
    fn exponential_buckets_rise(
        scale in -10i32..=20,
        offset in -200i32..200,
        positive in prop::collection::vec(0u64..1000, 0..50),
        negative in prop::collection::vec(0u64..1000, 0..50),
        zero in 0u64..10,
    ) {
        // Bounds at extreme scales and offsets overflow to infinity or underflow to zero;
        // those are left to the data model's range.
        let reach = |n: usize| (i64::from(offset.abs()) + n as i64 + 1) as f64 * (-f64::from(scale)).exp2();
        prop_assume!(reach(positive.len().max(negative.len())) < 1000.0);
        let count = positive.iter().sum::<u64>() + negative.iter().sum::<u64>() + zero;
        let p = ExponentialHistogramDataPoint {
            count,
            scale,
            zero_count: zero,
            positive: Some(Buckets { offset, bucket_counts: positive.clone() }),
            negative: Some(Buckets { offset, bucket_counts: negative.clone() }),
            ..ExponentialHistogramDataPoint::default()
        };
        let bag = one(&exponential_metric(p));
        let entries: Vec<(f64, u64)> = map_entries(&bag, "otel.metric.buckets")
            .into_iter()
            .map(|(k, v)| {
                let bound = if k == "+Inf" { f64::INFINITY } else { k.parse().expect("a number") };
                (bound, v.parse().expect("a count"))
            })
            .collect();
        // One key per bucket plus zero and +Inf, all distinct.
        prop_assert_eq!(entries.len(), positive.len() + negative.len() + 2);
        let mut sorted = entries.clone();
        sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
        for pair in sorted.windows(2) {
            prop_assert!(pair[0].0 < pair[1].0);
            prop_assert!(pair[0].1 <= pair[1].1);
        }
        prop_assert_eq!(sorted.last().map(|e| e.1), Some(count));
    }
}

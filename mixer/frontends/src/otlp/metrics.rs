//! OTLP metric data points -> attribute bags, one bag per point. The table in the module doc
//! of [`crate::otlp`] is the contract.
//!
//! A point is checked whole before anything of it is set: one that cannot be mapped is
//! rejected with a reason (counted in the export's `partial_success`), never half reported.

use std::fmt::Write as _;

use mixer_model::{AttributeBag, StringMap, Timestamp, Value};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, DataPointFlags, ExponentialHistogramDataPoint, HistogramDataPoint,
    Metric, NumberDataPoint, SummaryDataPoint,
};
use opentelemetry_proto::tonic::metrics::v1::{
    ExponentialHistogram, Gauge, Histogram, ResourceMetrics, ScopeMetrics, Sum, Summary,
};
use prost::Message as _;

use super::attributes::{Origin, nanos, setter, text_map};

/// The most buckets one histogram point may have (explicit buckets, or the positive and
/// negative exponential buckets together). SDKs use 160 per side by default; a point with
/// more would make a bag (and a Prometheus series set) of unbounded size.
pub const MAX_BUCKETS: usize = 1_000;

/// The exponential histogram scales OTLP allows (the data model's -10 to 20).
pub const SCALES: std::ops::RangeInclusive<i32> = -10..=20;

/// Where a metric's points came from: the resource and scope they were exported under, as
/// sent (for `otel.metric.point`) and prepared for the attributes.
#[derive(Debug)]
pub struct Source<'a> {
    resource: &'a ResourceMetrics,
    scope: &'a ScopeMetrics,
    origin: Origin<'a>,
}

impl<'a> Source<'a> {
    /// The source of the metrics in `scope`, under `resource`.
    pub fn new(resource: &'a ResourceMetrics, scope: &'a ScopeMetrics) -> Source<'a> {
        Source {
            resource,
            scope,
            origin: Origin::new(resource.resource.as_ref(), scope.scope.as_ref()),
        }
    }

    /// `otel.metric.point`: the point alone under its metric, scope and resource, encoded as
    /// an OTLP `ResourceMetrics`, so that an exporter can send it on exactly as it came.
    fn encode(&self, metric: &Metric, point: Point<'_>) -> Vec<u8> {
        let data = match point {
            Point::Gauge(p) => Data::Gauge(Gauge {
                data_points: vec![p.clone()],
            }),
            Point::Sum(p, t, m) => Data::Sum(Sum {
                data_points: vec![p.clone()],
                aggregation_temporality: t,
                is_monotonic: m,
            }),
            Point::Histogram(p, t) => Data::Histogram(Histogram {
                data_points: vec![p.clone()],
                aggregation_temporality: t,
            }),
            Point::ExponentialHistogram(p, t) => Data::ExponentialHistogram(ExponentialHistogram {
                data_points: vec![p.clone()],
                aggregation_temporality: t,
            }),
            Point::Summary(p) => Data::Summary(Summary {
                data_points: vec![p.clone()],
            }),
        };
        ResourceMetrics {
            resource: self.resource.resource.clone(),
            scope_metrics: vec![ScopeMetrics {
                scope: self.scope.scope.clone(),
                metrics: vec![Metric {
                    name: metric.name.clone(),
                    description: metric.description.clone(),
                    unit: metric.unit.clone(),
                    metadata: metric.metadata.clone(),
                    data: Some(data),
                }],
                schema_url: self.scope.schema_url.clone(),
            }],
            schema_url: self.resource.schema_url.clone(),
        }
        .encode_to_vec()
    }
}

/// One data point of a metric, with what its metric says about it.
#[derive(Clone, Copy, Debug)]
pub enum Point<'a> {
    /// A gauge's point: the last value.
    Gauge(&'a NumberDataPoint),
    /// A sum's point, with the sum's temporality (the raw enum) and monotonicity.
    Sum(&'a NumberDataPoint, i32, bool),
    /// A histogram's point, with the histogram's temporality.
    Histogram(&'a HistogramDataPoint, i32),
    /// An exponential histogram's point, with its temporality.
    ExponentialHistogram(&'a ExponentialHistogramDataPoint, i32),
    /// A summary's point.
    Summary(&'a SummaryDataPoint),
}

/// The data points of `metric`, in order; none when it has no data.
pub fn points(metric: &Metric) -> Vec<Point<'_>> {
    match &metric.data {
        None => Vec::new(),
        Some(Data::Gauge(g)) => g.data_points.iter().map(Point::Gauge).collect(),
        Some(Data::Sum(s)) => s
            .data_points
            .iter()
            .map(|p| Point::Sum(p, s.aggregation_temporality, s.is_monotonic))
            .collect(),
        Some(Data::Histogram(h)) => h
            .data_points
            .iter()
            .map(|p| Point::Histogram(p, h.aggregation_temporality))
            .collect(),
        Some(Data::ExponentialHistogram(h)) => h
            .data_points
            .iter()
            .map(|p| Point::ExponentialHistogram(p, h.aggregation_temporality))
            .collect(),
        Some(Data::Summary(s)) => s.data_points.iter().map(Point::Summary).collect(),
    }
}

/// How many data points `metric` has, without building them.
pub fn count_points(metric: &Metric) -> usize {
    match &metric.data {
        None => 0,
        Some(Data::Gauge(g)) => g.data_points.len(),
        Some(Data::Sum(s)) => s.data_points.len(),
        Some(Data::Histogram(h)) => h.data_points.len(),
        Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
        Some(Data::Summary(s)) => s.data_points.len(),
    }
}

impl Point<'_> {
    /// `otel.metric.kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            Point::Gauge(_) => "gauge",
            Point::Sum(..) => "sum",
            Point::Histogram(..) => "histogram",
            Point::ExponentialHistogram(..) => "exponential_histogram",
            Point::Summary(_) => "summary",
        }
    }

    fn attributes(&self) -> &[KeyValue] {
        match self {
            Point::Gauge(p) | Point::Sum(p, ..) => &p.attributes,
            Point::Histogram(p, _) => &p.attributes,
            Point::ExponentialHistogram(p, _) => &p.attributes,
            Point::Summary(p) => &p.attributes,
        }
    }

    fn times(&self) -> (u64, u64) {
        match self {
            Point::Gauge(p) | Point::Sum(p, ..) => (p.start_time_unix_nano, p.time_unix_nano),
            Point::Histogram(p, _) => (p.start_time_unix_nano, p.time_unix_nano),
            Point::ExponentialHistogram(p, _) => (p.start_time_unix_nano, p.time_unix_nano),
            Point::Summary(p) => (p.start_time_unix_nano, p.time_unix_nano),
        }
    }

    fn flags(&self) -> u32 {
        match self {
            Point::Gauge(p) | Point::Sum(p, ..) => p.flags,
            Point::Histogram(p, _) => p.flags,
            Point::ExponentialHistogram(p, _) => p.flags,
            Point::Summary(p) => p.flags,
        }
    }
}

/// Everything a point sets besides the common attributes, checked.
enum Values {
    Number {
        value: f64,
        int: Option<i64>,
    },
    Distribution {
        count: i64,
        sum: Option<f64>,
        min: Option<f64>,
        max: Option<f64>,
        buckets: Option<StringMap>,
        exponential: Option<Exponential>,
    },
    Summary {
        count: i64,
        sum: f64,
        quantiles: StringMap,
    },
}

struct Exponential {
    scale: i64,
    zero_count: i64,
    zero_threshold: f64,
    positive: (i64, String),
    negative: (i64, String),
}

/// Fills `bag` from one data point of `metric`, or says why the point cannot be reported
/// (and leaves `bag` as it was). `now` is the mixer's clock, for `context.time` when the
/// point has no time.
pub fn fill_point(
    bag: &mut AttributeBag,
    source: &Source<'_>,
    metric: &Metric,
    point: Point<'_>,
    now: Timestamp,
) -> Result<(), String> {
    if metric.name.is_empty() {
        return Err("the metric has no name".into());
    }
    if point.flags() & DataPointFlags::NoRecordedValueMask as u32 != 0 {
        return Err("the point has no recorded value (flag NO_RECORDED_VALUE)".into());
    }
    let temporality = match point {
        Point::Sum(_, t, _) | Point::Histogram(_, t) | Point::ExponentialHistogram(_, t) => {
            Some(temporality_name(t)?)
        }
        Point::Gauge(_) | Point::Summary(_) => None,
    };
    let values = match point {
        Point::Gauge(p) | Point::Sum(p, ..) => number(p)?,
        Point::Histogram(p, _) => histogram(p)?,
        Point::ExponentialHistogram(p, _) => exponential(p)?,
        Point::Summary(p) => summary(p)?,
    };
    let (start, time) = point.times();
    let (start, time) = (nanos(start), nanos(time));

    let origin = &source.origin;
    let encoded = source.encode(metric, point);
    let mut set = setter(bag);
    origin.common(&mut set, point.attributes());
    set("otel.metric.point", Value::Bytes(encoded.into()));
    set("otel.metric.name", Value::from(metric.name.as_str()));
    if !metric.description.is_empty() {
        set(
            "otel.metric.description",
            Value::from(metric.description.as_str()),
        );
    }
    if !metric.unit.is_empty() {
        set("otel.metric.unit", Value::from(metric.unit.as_str()));
    }
    set("otel.metric.kind", Value::from(point.kind()));
    if let Some(temporality) = temporality {
        set("otel.metric.temporality", Value::from(temporality));
    }
    if let Point::Sum(_, _, monotonic) = point {
        set("otel.metric.monotonic", Value::Bool(monotonic));
    }
    let own: std::collections::BTreeMap<&str, _> = point
        .attributes()
        .iter()
        .filter_map(|kv| kv.value.as_ref().map(|v| (kv.key.as_str(), v)))
        .filter(|(_, v)| v.value.is_some())
        .collect();
    if !own.is_empty() {
        set("otel.metric.attributes", text_map(&own).into());
    }
    if let Some(scope) = origin.scope() {
        let attributes: std::collections::BTreeMap<&str, _> = scope
            .attributes
            .iter()
            .filter_map(|kv| kv.value.as_ref().map(|v| (kv.key.as_str(), v)))
            .filter(|(_, v)| v.value.is_some())
            .collect();
        if !attributes.is_empty() {
            set("otel.scope.attributes", text_map(&attributes).into());
        }
    }
    if let Some(start) = start {
        set("otel.metric.start_time", Value::Timestamp(start));
    }
    if let Some(time) = time {
        set("otel.metric.time", Value::Timestamp(time));
    }
    set("context.time", Value::Timestamp(time.unwrap_or(now)));
    match values {
        Values::Number { value, int } => {
            set("otel.metric.value", Value::Double(value));
            if let Some(int) = int {
                set("otel.metric.int_value", Value::Int64(int));
            }
        }
        Values::Distribution {
            count,
            sum,
            min,
            max,
            buckets,
            exponential,
        } => {
            set("otel.metric.count", Value::Int64(count));
            for (name, v) in [
                ("otel.metric.sum", sum),
                ("otel.metric.min", min),
                ("otel.metric.max", max),
            ] {
                if let Some(v) = v {
                    set(name, Value::Double(v));
                }
            }
            if let Some(buckets) = buckets {
                set("otel.metric.buckets", buckets.into());
            }
            if let Some(e) = exponential {
                set("otel.metric.scale", Value::Int64(e.scale));
                set("otel.metric.zero_count", Value::Int64(e.zero_count));
                set(
                    "otel.metric.zero_threshold",
                    Value::Double(e.zero_threshold),
                );
                set("otel.metric.positive_offset", Value::Int64(e.positive.0));
                set("otel.metric.positive_counts", Value::from(e.positive.1));
                set("otel.metric.negative_offset", Value::Int64(e.negative.0));
                set("otel.metric.negative_counts", Value::from(e.negative.1));
            }
        }
        Values::Summary {
            count,
            sum,
            quantiles,
        } => {
            set("otel.metric.count", Value::Int64(count));
            set("otel.metric.sum", Value::Double(sum));
            set("otel.metric.quantiles", quantiles.into());
        }
    }
    Ok(())
}

fn temporality_name(raw: i32) -> Result<&'static str, String> {
    match AggregationTemporality::try_from(raw) {
        Ok(AggregationTemporality::Delta) => Ok("delta"),
        Ok(AggregationTemporality::Cumulative) => Ok("cumulative"),
        Ok(AggregationTemporality::Unspecified) => {
            Err("the aggregation temporality is unspecified".into())
        }
        Err(_) => Err(format!("unknown aggregation temporality {raw}")),
    }
}

fn finite(what: &str, v: f64) -> Result<f64, String> {
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("the {what} is {}", float_text(v)))
    }
}

fn count(what: &str, n: u64) -> Result<i64, String> {
    i64::try_from(n).map_err(|_| format!("the {what} {n} is over 2^63-1"))
}

fn number(p: &NumberDataPoint) -> Result<Values, String> {
    match p.value {
        None => Err("the point has no value".into()),
        Some(Number::AsDouble(d)) => Ok(Values::Number {
            value: finite("value", d)?,
            int: None,
        }),
        Some(Number::AsInt(i)) => Ok(Values::Number {
            value: i as f64,
            int: Some(i),
        }),
    }
}

fn optional(what: &str, v: Option<f64>) -> Result<Option<f64>, String> {
    v.map(|v| finite(what, v)).transpose()
}

fn histogram(p: &HistogramDataPoint) -> Result<Values, String> {
    let total = count("count", p.count)?;
    let buckets = if p.bucket_counts.is_empty() {
        // Count and sum only: allowed ("no buckets" in the data model).
        None
    } else {
        if p.bucket_counts.len() > MAX_BUCKETS {
            return Err(format!(
                "{} buckets, more than the {MAX_BUCKETS} a point may have",
                p.bucket_counts.len()
            ));
        }
        if p.bucket_counts.len() != p.explicit_bounds.len() + 1 {
            return Err(format!(
                "{} bucket counts for {} explicit bounds (must be one more)",
                p.bucket_counts.len(),
                p.explicit_bounds.len()
            ));
        }
        for (i, b) in p.explicit_bounds.iter().enumerate() {
            finite("explicit bound", *b)?;
            if i > 0 && *b <= p.explicit_bounds[i - 1] {
                return Err(format!(
                    "explicit bound {} is not above {}",
                    float_text(*b),
                    float_text(p.explicit_bounds[i - 1])
                ));
            }
        }
        let mut cumulative = Cumulative::new(total);
        let uppers = p
            .explicit_bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY));
        for (upper, n) in uppers.zip(&p.bucket_counts) {
            cumulative.add(upper, *n)?;
        }
        Some(cumulative.finish()?)
    };
    Ok(Values::Distribution {
        count: total,
        sum: optional("sum", p.sum)?,
        min: optional("min", p.min)?,
        max: optional("max", p.max)?,
        buckets,
        exponential: None,
    })
}

/// Bucket counts added up into Prometheus' form: upper bound -> observations at or below it.
struct Cumulative {
    total: i64,
    sum: u64,
    /// The last upper bound: each must rise above it (exponential bounds at extreme scales
    /// and offsets overflow to infinity or round to the same number).
    last: f64,
    pairs: Vec<(String, String)>,
}

impl Cumulative {
    fn new(total: i64) -> Cumulative {
        Cumulative {
            total,
            sum: 0,
            last: f64::NEG_INFINITY,
            pairs: Vec::new(),
        }
    }

    fn add(&mut self, upper: f64, n: u64) -> Result<(), String> {
        if upper.partial_cmp(&self.last) != Some(std::cmp::Ordering::Greater) {
            return Err(format!(
                "bucket bound {} is not above the one before it ({}): out of a float's range",
                float_text(upper),
                float_text(self.last)
            ));
        }
        self.last = upper;
        self.sum = self
            .sum
            .checked_add(n)
            .ok_or("the bucket counts add up to more than 2^64-1")?;
        self.pairs.push((bound_text(upper), self.sum.to_string()));
        Ok(())
    }

    fn finish(mut self) -> Result<StringMap, String> {
        if u64::try_from(self.total).ok() != Some(self.sum) {
            return Err(format!(
                "the bucket counts add up to {}, the count is {}",
                self.sum, self.total
            ));
        }
        if self.pairs.last().is_none_or(|(k, _)| k != "+Inf") {
            self.pairs.push(("+Inf".into(), self.sum.to_string()));
        }
        Ok(StringMap::from_pairs(self.pairs))
    }
}

fn exponential(p: &ExponentialHistogramDataPoint) -> Result<Values, String> {
    let total = count("count", p.count)?;
    if !SCALES.contains(&p.scale) {
        return Err(format!(
            "scale {} is outside {}..={}",
            p.scale,
            SCALES.start(),
            SCALES.end()
        ));
    }
    let zero_threshold = finite("zero threshold", p.zero_threshold)?;
    if zero_threshold < 0.0 {
        return Err(format!(
            "the zero threshold {} is negative",
            float_text(zero_threshold)
        ));
    }
    let empty = Buckets::default();
    let positive = p.positive.as_ref().unwrap_or(&empty);
    let negative = p.negative.as_ref().unwrap_or(&empty);
    let n = positive.bucket_counts.len() + negative.bucket_counts.len();
    if n > MAX_BUCKETS {
        return Err(format!(
            "{n} buckets, more than the {MAX_BUCKETS} a point may have"
        ));
    }
    // Upper bounds from the most negative bucket up: negative bucket i holds
    // [-base^(i+1), -base^i), the zero bucket [-threshold, threshold], positive bucket i
    // (base^i, base^(i+1)].
    let mut cumulative = Cumulative::new(total);
    let offset = |b: &Buckets, i: usize| i64::from(b.offset) + i64::try_from(i).unwrap_or(0);
    for (i, n) in negative.bucket_counts.iter().enumerate().rev() {
        cumulative.add(-exponential_bound(p.scale, offset(negative, i)), *n)?;
    }
    cumulative.add(zero_threshold, p.zero_count)?;
    for (i, n) in positive.bucket_counts.iter().enumerate() {
        cumulative.add(exponential_bound(p.scale, offset(positive, i) + 1), *n)?;
    }
    let buckets = cumulative.finish()?;
    let counts = |b: &Buckets| {
        let mut text = String::new();
        for (i, n) in b.bucket_counts.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            let _ = write!(text, "{n}");
        }
        (i64::from(b.offset), text)
    };
    Ok(Values::Distribution {
        count: total,
        sum: optional("sum", p.sum)?,
        min: optional("min", p.min)?,
        max: optional("max", p.max)?,
        buckets: Some(buckets),
        exponential: Some(Exponential {
            scale: i64::from(p.scale),
            zero_count: count("zero count", p.zero_count)?,
            zero_threshold,
            positive: counts(positive),
            negative: counts(negative),
        }),
    })
}

/// `base^index` for the exponential histogram's `scale`: base = 2^(2^-scale).
pub fn exponential_bound(scale: i32, index: i64) -> f64 {
    // 2^(index / 2^scale), computed with an exact power of two for the scale.
    (index as f64 * (-f64::from(scale)).exp2()).exp2()
}

fn summary(p: &SummaryDataPoint) -> Result<Values, String> {
    let total = count("count", p.count)?;
    let sum = finite("sum", p.sum)?;
    let mut quantiles = Vec::with_capacity(p.quantile_values.len());
    for q in &p.quantile_values {
        if !(0.0..=1.0).contains(&q.quantile) {
            return Err(format!(
                "quantile {} is outside 0..=1",
                float_text(q.quantile)
            ));
        }
        let value = finite("quantile value", q.value)?;
        quantiles.push((float_text(q.quantile), float_text(value)));
    }
    Ok(Values::Summary {
        count: total,
        sum,
        quantiles: StringMap::from_pairs(quantiles),
    })
}

/// A bucket bound as a map key: as Prometheus writes `le` for the last one (`+Inf`), the
/// shortest text that reads back to the same number otherwise (`0.005`, `1`, `-2.5`).
pub fn bound_text(v: f64) -> String {
    if v == f64::INFINITY {
        "+Inf".into()
    } else {
        float_text(v)
    }
}

fn float_text(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        // Rust prints the shortest form that parses back to the same f64.
        format!("{v}")
    }
}

#[cfg(test)]
mod tests;

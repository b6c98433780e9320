//! Histograms counted elsewhere (OTLP histogram points): each series keeps the bucket counts
//! it was given, with bounds of its own, and is rendered as a Prometheus histogram. The
//! client library's `Histogram` only observes one value at a time over fixed bounds, so this
//! is a collector of its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mixer_model::Value;
use prometheus::core::{Collector, Desc};
use prometheus::proto::{Bucket, Histogram, LabelPair, Metric, MetricFamily, MetricType};

use crate::config::{MAX_BUCKETS, Precounted};
use crate::lock::lock;

/// One point: finite upper bounds (rising) with the observations at or below each, the
/// total (the `+Inf` bucket) and the sum.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Point {
    /// `(upper bound, cumulative count)`, bounds strictly rising, counts never falling.
    pub buckets: Vec<(f64, u64)>,
    /// Every observation: the `+Inf` bucket.
    pub count: u64,
    /// The observations' sum.
    pub sum: f64,
}

impl Point {
    /// Reads an instance value: a STRING_MAP of upper bound (`"0.5"`, `"+Inf"`) to the number
    /// of observations at or below it.
    pub fn parse(value: &Value, sum: f64) -> Result<Point, String> {
        let Value::StringMap(map) = value else {
            return Err(format!(
                "a precounted histogram's value is a STRING_MAP of upper bound to count, not a {}",
                value.value_type()
            ));
        };
        if map.len() > MAX_BUCKETS + 1 {
            return Err(format!(
                "{} buckets, more than the {} a histogram may have",
                map.len(),
                MAX_BUCKETS + 1
            ));
        }
        let mut count = None;
        let mut buckets = Vec::with_capacity(map.len());
        for (le, n) in map.iter() {
            let bound: f64 = le
                .trim()
                .parse()
                .map_err(|_| format!("bucket bound {le:?} is not a number"))?;
            let n: u64 = n
                .trim()
                .parse()
                .map_err(|_| format!("bucket {le:?} has count {n:?}, not a whole number"))?;
            if bound == f64::INFINITY {
                if count.replace(n).is_some() {
                    return Err(format!("bucket {le:?} appears twice"));
                }
            } else if bound.is_finite() {
                buckets.push((bound, n));
            } else {
                return Err(format!("bucket bound {le:?} is neither finite nor +Inf"));
            }
        }
        let count = count.ok_or("there is no +Inf bucket (the count of every observation)")?;
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in buckets.windows(2) {
            if w[0].0 == w[1].0 {
                return Err(format!("bucket bound {} appears twice", w[0].0));
            }
        }
        let mut last = (f64::NEG_INFINITY, 0);
        for &(bound, n) in buckets
            .iter()
            .chain(std::iter::once(&(f64::INFINITY, count)))
        {
            if n < last.1 {
                return Err(format!(
                    "{n} observations at or below {bound}, fewer than the {} at or below {}",
                    last.1, last.0
                ));
            }
            last = (bound, n);
        }
        if !sum.is_finite() {
            return Err(format!("the sum {sum} is not a finite number"));
        }
        Ok(Point {
            buckets,
            count,
            sum,
        })
    }

    /// Adds a delta point. Bounds both have are added up; a bound only one of them has is
    /// kept only when the other's count there is known anyway (no observations between its
    /// neighbouring bounds), since a cumulative count between two bounds is otherwise unknown.
    pub fn add(&mut self, other: &Point) {
        let mut bounds: Vec<f64> = self
            .buckets
            .iter()
            .chain(&other.buckets)
            .map(|b| b.0)
            .collect();
        bounds.sort_by(f64::total_cmp);
        bounds.dedup();
        let buckets = bounds
            .into_iter()
            .filter_map(|b| Some((b, self.count_at(b)?.checked_add(other.count_at(b)?)?)))
            .collect();
        self.buckets = buckets;
        self.count = self.count.saturating_add(other.count);
        self.sum += other.sum;
    }

    /// The observations at or below `bound`, if the point says.
    fn count_at(&self, bound: f64) -> Option<u64> {
        let i = self.buckets.partition_point(|b| b.0 < bound);
        match self.buckets.get(i) {
            Some(&(b, n)) if b == bound => Some(n),
            next => {
                let below = if i == 0 { 0 } else { self.buckets[i - 1].1 };
                let above = next.map_or(self.count, |b| b.1);
                (below == above).then_some(below)
            }
        }
    }
}

/// Each series' state by its label values.
type SeriesStates = HashMap<Vec<String>, Arc<Mutex<Point>>>;

/// A vector of pre-counted histograms, one per label value list; clones share the series.
#[derive(Clone)]
pub struct PrecountedVec {
    desc: Desc,
    label_names: Vec<String>,
    temporality: Precounted,
    series: Arc<Mutex<SeriesStates>>,
}

impl PrecountedVec {
    /// An empty vector named `name` with these labels.
    pub fn new(
        name: &str,
        help: &str,
        label_names: &[&str],
        temporality: Precounted,
    ) -> prometheus::Result<PrecountedVec> {
        let label_names: Vec<String> = label_names.iter().map(|l| l.to_string()).collect();
        let desc = Desc::new(
            name.to_string(),
            help.to_string(),
            label_names.clone(),
            HashMap::new(),
        )?;
        Ok(PrecountedVec {
            desc,
            label_names,
            temporality,
            series: Arc::default(),
        })
    }

    /// The series for `values`, created empty if new.
    pub fn series(&self, values: &[&str]) -> PrecountedSeries {
        let key: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        let state = lock(&self.series).entry(key).or_default().clone();
        PrecountedSeries {
            state,
            temporality: self.temporality,
        }
    }

    /// Forgets the series for `values`.
    pub fn remove(&self, values: &[&str]) {
        let key: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        lock(&self.series).remove(&key);
    }
}

/// One series' handle.
pub struct PrecountedSeries {
    state: Arc<Mutex<Point>>,
    temporality: Precounted,
}

impl PrecountedSeries {
    /// Takes one point: replacing the state if cumulative, added to it if delta. Returns the
    /// buckets the series holds then.
    pub fn record(&self, point: Point) -> usize {
        let mut state = lock(&self.state);
        match self.temporality {
            Precounted::Cumulative => *state = point,
            Precounted::Delta => state.add(&point),
        }
        state.buckets.len()
    }

    /// The most buckets the series may hold after taking `point`.
    pub fn buckets_after(&self, point: &Point) -> usize {
        match self.temporality {
            Precounted::Cumulative => point.buckets.len(),
            Precounted::Delta => lock(&self.state).buckets.len() + point.buckets.len(),
        }
    }
}

impl Collector for PrecountedVec {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let series = lock(&self.series);
        // Label pairs in name order, as the client library's own vectors give them.
        let mut order: Vec<usize> = (0..self.label_names.len()).collect();
        order.sort_by_key(|&i| &self.label_names[i]);
        let mut metrics: Vec<Metric> = series
            .iter()
            .map(|(values, state)| {
                let state = lock(state);
                let labels = order
                    .iter()
                    .map(|&i| {
                        let mut pair = LabelPair::default();
                        pair.set_name(self.label_names[i].clone());
                        pair.set_value(values[i].clone());
                        pair
                    })
                    .collect();
                let mut histogram = Histogram::default();
                histogram.set_sample_count(state.count);
                histogram.set_sample_sum(state.sum);
                histogram.set_bucket(
                    state
                        .buckets
                        .iter()
                        .map(|&(bound, n)| {
                            let mut bucket = Bucket::default();
                            bucket.set_upper_bound(bound);
                            bucket.set_cumulative_count(n);
                            bucket
                        })
                        .collect(),
                );
                let mut metric = Metric::from_label(labels);
                metric.set_histogram(histogram);
                metric
            })
            .collect();
        // A stable exposition order.
        metrics.sort_by(|a, b| {
            let key = |m: &Metric| {
                m.get_label()
                    .iter()
                    .map(|l| l.value().to_string())
                    .collect::<Vec<_>>()
            };
            key(a).cmp(&key(b))
        });
        let mut family = MetricFamily::default();
        family.set_name(self.desc.fq_name.clone());
        family.set_help(self.desc.help.clone());
        family.set_field_type(MetricType::HISTOGRAM);
        family.set_metric(metrics);
        vec![family]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mixer_model::StringMap;

    fn point(pairs: &[(&str, &str)], sum: f64) -> Result<Point, String> {
        let map = StringMap::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Point::parse(&Value::StringMap(Arc::new(map)), sum)
    }

    #[test]
    fn parses_the_le_form_in_bound_order() {
        let p = point(&[("50", "2"), ("+Inf", "3"), ("0", "0"), ("5", "1")], 55.0).unwrap();
        assert_eq!(p.buckets, vec![(0.0, 0), (5.0, 1), (50.0, 2)]);
        assert_eq!((p.count, p.sum), (3, 55.0));
    }

    #[test]
    fn bad_shapes_are_errors() {
        for (pairs, why) in [
            (&[("5", "1")][..], "no +Inf"),
            (&[("x", "1"), ("+Inf", "1")][..], "not a number"),
            (&[("5", "-1"), ("+Inf", "1")][..], "not a whole number"),
            (&[("5", "2"), ("+Inf", "1")][..], "fewer than"),
            (
                &[("5", "1"), ("5.0", "1"), ("+Inf", "1")][..],
                "appears twice",
            ),
            (&[("NaN", "1"), ("+Inf", "1")][..], "neither finite"),
        ] {
            let e = point(pairs, 0.0).unwrap_err();
            assert!(e.contains(why), "{pairs:?}: {e}");
        }
        assert!(
            point(&[("+Inf", "1")], f64::NAN)
                .unwrap_err()
                .contains("sum")
        );
        let e = Point::parse(&Value::Int64(3), 0.0).unwrap_err();
        assert!(e.contains("STRING_MAP"), "{e}");
    }

    #[test]
    fn delta_points_add_up_where_the_counts_are_known() {
        let mut a = point(&[("1", "1"), ("2", "3"), ("+Inf", "3")], 4.0).unwrap();
        let b = point(&[("1", "0"), ("2", "1"), ("+Inf", "2")], 10.0).unwrap();
        a.add(&b);
        assert_eq!(a.buckets, vec![(1.0, 1), (2.0, 4)]);
        assert_eq!((a.count, a.sum), (5, 14.0));
        // A bound only one point has is known in the other only where that one has no
        // observations around it: c says nothing about 1 and 2 (its one observation is at
        // or below 4), a has none above 2, so only 4 is known in both.
        let c = point(&[("4", "1"), ("+Inf", "1")], 3.0).unwrap();
        let mut a2 = point(&[("1", "1"), ("2", "3"), ("+Inf", "3")], 4.0).unwrap();
        a2.add(&c);
        assert_eq!(a2.buckets, vec![(4.0, 4)]);
        assert_eq!(a2.count, 4);
        // Buckets with no observations between them carry over.
        let e = point(&[("1", "0"), ("3", "0"), ("+Inf", "2")], 20.0).unwrap();
        let mut a3 = point(&[("1", "1"), ("2", "3"), ("+Inf", "3")], 4.0).unwrap();
        a3.add(&e);
        assert_eq!(a3.buckets, vec![(1.0, 1), (2.0, 3), (3.0, 3)]);
        let d = point(&[("1.5", "1"), ("+Inf", "1")], 1.2).unwrap();
        let mut b2 = b.clone();
        b2.add(&d);
        assert_eq!(b2.buckets, vec![(2.0, 2)]);
        assert_eq!(b2.count, 3);
    }
}

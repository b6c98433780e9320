//! The attribute bag of sample records and spans, compared with the golden files.

use std::path::PathBuf;
use std::sync::Arc;

use crate::common::render_bag as render;
use crate::samples::*;
use mixer_frontends::otlp::{self, Origin};
use mixer_model::{AttributeBag, Timestamp, Vocabulary};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::Span;

const NOW: Timestamp = Timestamp(1_700_000_100_000_000_000);

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/otlp")
}

fn assert_golden(name: &str, actual: &str) {
    crate::common::assert_golden(&golden_dir(), name, actual);
}

fn log_bag(record: &LogRecord, with_origin: bool) -> String {
    let (resource, scope) = if with_origin {
        (resource(), scope())
    } else {
        (None, None)
    };
    let origin = Origin::new(resource.as_ref(), scope.as_ref());
    let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
    otlp::fill_log(&mut bag, &origin, record, NOW);
    render(&bag)
}

fn span_bag(span: &Span) -> String {
    let (resource, scope) = (resource(), scope());
    let origin = Origin::new(resource.as_ref(), scope.as_ref());
    let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
    otlp::fill_span(&mut bag, &origin, span, NOW);
    render(&bag)
}

#[test]
fn golden_http_log() {
    assert_golden("http_log", &log_bag(&http_log(), true));
}

#[test]
fn golden_structured_log() {
    assert_golden("structured_log", &log_bag(&structured_log(), true));
}

#[test]
fn golden_empty_log() {
    assert_golden("empty_log", &log_bag(&LogRecord::default(), false));
}

#[test]
fn golden_server_span() {
    assert_golden("server_span", &span_bag(&server_span()));
}

#[test]
fn golden_grpc_client_span() {
    assert_golden("grpc_client_span", &span_bag(&grpc_client_span()));
}

mod metric_points {
    //! One data point of each kind, under the samples' resource and scope.

    use super::*;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
    use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets;
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
    use opentelemetry_proto::tonic::metrics::v1::summary_data_point::ValueAtQuantile;
    use opentelemetry_proto::tonic::metrics::v1::*;

    const START: u64 = 1_700_000_000_000_000_000;
    const TIME: u64 = 1_700_000_060_000_000_000;

    fn attributes() -> Vec<KeyValue> {
        let kv = |k: &str, v: Any| KeyValue {
            key: k.into(),
            value: Some(AnyValue { value: Some(v) }),
            key_strindex: 0,
        };
        vec![
            kv("http.route", Any::StringValue("/cart".into())),
            kv("http.request.method", Any::StringValue("GET".into())),
            kv("http.response.status_code", Any::IntValue(200)),
        ]
    }

    fn bag(metric: Metric) -> String {
        let resource_metrics = ResourceMetrics {
            resource: resource(),
            ..ResourceMetrics::default()
        };
        let scope_metrics = ScopeMetrics {
            scope: scope(),
            ..ScopeMetrics::default()
        };
        let source = otlp::metrics::Source::new(&resource_metrics, &scope_metrics);
        let point = otlp::metrics::points(&metric)[0];
        let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
        otlp::metrics::fill_point(&mut bag, &source, &metric, point, NOW).expect("maps");
        render(&bag)
    }

    fn metric(name: &str, unit: &str, data: Data) -> Metric {
        Metric {
            name: name.into(),
            description: format!("{name} for the golden file"),
            unit: unit.into(),
            metadata: vec![],
            data: Some(data),
        }
    }

    fn number(value: Number) -> NumberDataPoint {
        NumberDataPoint {
            attributes: attributes(),
            start_time_unix_nano: START,
            time_unix_nano: TIME,
            value: Some(value),
            ..NumberDataPoint::default()
        }
    }

    #[test]
    fn golden_counter_point() {
        let data = Data::Sum(Sum {
            data_points: vec![number(Number::AsInt(42))],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        });
        assert_golden(
            "counter_point",
            &bag(metric("http.server.request.count", "{request}", data)),
        );
    }

    #[test]
    fn golden_gauge_point() {
        let data = Data::Gauge(Gauge {
            data_points: vec![number(Number::AsDouble(0.625))],
        });
        assert_golden(
            "gauge_point",
            &bag(metric("process.cpu.utilization", "1", data)),
        );
    }

    #[test]
    fn golden_histogram_point() {
        let data = Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint {
                attributes: attributes(),
                start_time_unix_nano: START,
                time_unix_nano: TIME,
                count: 6,
                sum: Some(2.5),
                bucket_counts: vec![1, 3, 2, 0],
                explicit_bounds: vec![0.005, 0.25, 1.0],
                min: Some(0.001),
                max: Some(0.9),
                ..HistogramDataPoint::default()
            }],
            aggregation_temporality: AggregationTemporality::Delta as i32,
        });
        assert_golden(
            "histogram_point",
            &bag(metric("http.server.request.duration", "s", data)),
        );
    }

    #[test]
    fn golden_exponential_histogram_point() {
        let data = Data::ExponentialHistogram(ExponentialHistogram {
            data_points: vec![ExponentialHistogramDataPoint {
                attributes: attributes(),
                start_time_unix_nano: START,
                time_unix_nano: TIME,
                count: 5,
                sum: Some(11.0),
                scale: 1,
                zero_count: 1,
                positive: Some(Buckets {
                    offset: 1,
                    bucket_counts: vec![2, 0, 1],
                }),
                negative: Some(Buckets {
                    offset: 0,
                    bucket_counts: vec![1],
                }),
                zero_threshold: 0.001,
                ..ExponentialHistogramDataPoint::default()
            }],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        });
        assert_golden(
            "exponential_histogram_point",
            &bag(metric("http.server.request.body.size", "By", data)),
        );
    }

    #[test]
    fn golden_summary_point() {
        let data = Data::Summary(Summary {
            data_points: vec![SummaryDataPoint {
                attributes: attributes(),
                start_time_unix_nano: START,
                time_unix_nano: TIME,
                count: 100,
                sum: 12.5,
                quantile_values: vec![
                    ValueAtQuantile {
                        quantile: 0.5,
                        value: 0.1,
                    },
                    ValueAtQuantile {
                        quantile: 0.99,
                        value: 0.75,
                    },
                ],
                ..SummaryDataPoint::default()
            }],
        });
        assert_golden(
            "summary_point",
            &bag(metric("rpc.server.duration", "s", data)),
        );
    }
}

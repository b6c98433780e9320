//! Re-export of ingested OTLP points (`points`): each instance's `point` (the front end's
//! `otel.metric.point`) arrives at the receiver as it was sent to the mixer, in its own
//! temporality, merged by resource, scope and metric; failures fail the batch.

use mixer_adapter_api::{ErrorKind, ReportHandler};
use mixer_model::{Template, Value};
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, ExponentialHistogram, ExponentialHistogramDataPoint, Metric,
    NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, exponential_histogram_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;
use serde_json::json;
use tonic::Code;

use crate::fixtures::{build, instance, map};
use crate::receiver::{Receiver, serve};

fn point(metric: Metric) -> ResourceMetrics {
    ResourceMetrics {
        resource: Some(Resource {
            attributes: vec![KeyValue {
                key: "service.name".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue("shop".into())),
                }),
                key_strindex: 0,
            }],
            ..Resource::default()
        }),
        scope_metrics: vec![ScopeMetrics {
            scope: Some(InstrumentationScope {
                name: "shop.meter".into(),
                version: "1.2".into(),
                ..InstrumentationScope::default()
            }),
            metrics: vec![metric],
            schema_url: String::new(),
        }],
        schema_url: "https://opentelemetry.io/schemas/1.26.0".into(),
    }
}

fn delta_sum(value: i64, route: &str) -> Metric {
    Metric {
        name: "shop.requests".into(),
        unit: "{request}".into(),
        data: Some(Data::Sum(Sum {
            data_points: vec![NumberDataPoint {
                attributes: vec![KeyValue {
                    key: "route".into(),
                    // Typed attributes stay typed: an integer here.
                    value: Some(AnyValue {
                        value: Some(any_value::Value::IntValue(route.len() as i64)),
                    }),
                    key_strindex: 0,
                }],
                start_time_unix_nano: 10,
                time_unix_nano: 20,
                value: Some(Number::AsInt(value)),
                ..NumberDataPoint::default()
            }],
            aggregation_temporality: AggregationTemporality::Delta as i32,
            is_monotonic: true,
        })),
        ..Metric::default()
    }
}

fn exponential() -> Metric {
    Metric {
        name: "shop.payload".into(),
        unit: "By".into(),
        data: Some(Data::ExponentialHistogram(ExponentialHistogram {
            data_points: vec![ExponentialHistogramDataPoint {
                count: 3,
                sum: Some(7.0),
                scale: 3,
                zero_count: 1,
                positive: Some(exponential_histogram_data_point::Buckets {
                    offset: 4,
                    bucket_counts: vec![1, 0, 1],
                }),
                ..ExponentialHistogramDataPoint::default()
            }],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        })),
        ..Metric::default()
    }
}

fn carrying(name: &str, point: &ResourceMetrics) -> mixer_model::Instance {
    instance(
        name,
        Template::Metric,
        vec![
            ("value", crate::fixtures::v(0.0)),
            (
                "dimensions",
                map(vec![("point", Value::Bytes(point.encode_to_vec().into()))]),
            ),
        ],
    )
}

fn params(addr: std::net::SocketAddr) -> serde_json::Value {
    json!({
        "endpoint": format!("http://{addr}"),
        "timeout": "2s",
        "retry": {"enabled": false},
        "points": ["otlppoint.instance.istio-system"],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn points_are_sent_on_as_they_came_with_their_temporality() {
    let receiver = Receiver::new(0, Code::Ok);
    let addr = serve(receiver.clone()).await;
    let handler = build(params(addr));
    let sent = [
        point(delta_sum(3, "/cart")),
        point(delta_sum(2, "/pay")),
        point(exponential()),
    ];
    let mut instances: Vec<_> = sent
        .iter()
        .map(|p| carrying("otlppoint.istio-system", p))
        .collect();
    // An instance for another handler's metric is not this one's business.
    instances.push(carrying("other.istio-system", &sent[0]));
    handler.report(&instances).await.expect("exported");

    let received = receiver.take();
    assert_eq!(received.metrics.len(), 1, "one export call");
    let request = &received.metrics[0];
    // One resource, one scope; the two delta points share their metric.
    assert_eq!(request.resource_metrics.len(), 1);
    let resource = &request.resource_metrics[0];
    assert_eq!(resource.resource, sent[0].resource);
    assert_eq!(resource.schema_url, sent[0].schema_url);
    assert_eq!(resource.scope_metrics.len(), 1);
    let metrics = &resource.scope_metrics[0].metrics;
    assert_eq!(metrics.len(), 2);
    let Some(Data::Sum(sum)) = &metrics[0].data else {
        panic!("{:?}", metrics[0]);
    };
    assert_eq!(
        sum.aggregation_temporality,
        AggregationTemporality::Delta as i32
    );
    assert!(sum.is_monotonic);
    let values: Vec<_> = sum.data_points.iter().map(|p| p.value).collect();
    assert_eq!(values, [Some(Number::AsInt(3)), Some(Number::AsInt(2))]);
    let Some(Data::Sum(original)) = &delta_sum(3, "/cart").data else {
        unreachable!()
    };
    assert_eq!(sum.data_points[0], original.data_points[0]);
    assert_eq!(metrics[1], exponential());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_point_or_a_failed_export_fails_the_batch() {
    let receiver = Receiver::new(1, Code::Unavailable);
    let addr = serve(receiver.clone()).await;
    let handler = build(params(addr));
    let good = carrying("otlppoint.istio-system", &point(exponential()));
    let err = handler
        .report(std::slice::from_ref(&good))
        .await
        .expect_err("the receiver is down");
    assert_eq!(err.kind, ErrorKind::Unavailable);
    assert!(err.retryable, "{err:?}");
    assert!(
        err.message.contains("1 points not exported"),
        "{}",
        err.message
    );

    let without = instance(
        "otlppoint.istio-system",
        Template::Metric,
        vec![("dimensions", map(vec![("point", Value::from("text"))]))],
    );
    let err = handler
        .report(&[without, good])
        .await
        .expect_err("one instance has no point");
    assert_eq!(err.kind, ErrorKind::InvalidInstance);
    assert!(err.message.contains("not the BYTES"), "{}", err.message);
    // The good one was still exported.
    assert_eq!(receiver.take().metrics.len(), 1);
}

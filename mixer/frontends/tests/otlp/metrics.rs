//! Metric exports over a real socket, driven by the generated tonic client: each data point
//! becomes one report record, unmappable points are answered in `partial_success`, the
//! points count against `--max-export-records`, and the served path is the generated one.

use super::*;

use mixer_runtime::RequestLimits;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use tonic::Code;

/// Every point as a log entry of what the attributes say, so that the recorder's text view
/// shows them.
const METRICS_CONFIG: &str = r#"
kind: handler
metadata: {name: recorder, namespace: istio-system}
spec: {compiledAdapter: recorder}
---
kind: instance
metadata: {name: point, namespace: istio-system}
spec:
  compiledTemplate: logentry
  params:
    variables:
      name: otel.metric.name
      kind: otel.metric.kind
      unit: otel.metric.unit | ""
      temporality: otel.metric.temporality | ""
      monotonic: otel.metric.monotonic | false
      value: otel.metric.value | 0.0
      int_value: otel.metric.int_value | 0
      count: otel.metric.count | 0
      sum: otel.metric.sum | 0.0
      buckets: otel.metric.buckets | emptyStringMap()
      attributes: otel.metric.attributes | emptyStringMap()
      route: otel.attributes["http.route"] | ""
      service: otel.resource["service.name"] | ""
      scope: otel.scope.name | ""
      start: otel.metric.start_time | timestamp("1970-01-01T00:00:00Z")
      time: otel.metric.time | timestamp("1970-01-01T00:00:00Z")
      method: request.method | ""
---
kind: rule
metadata: {name: points, namespace: istio-system}
spec:
  match: (otel.metric.kind | "") != ""
  actions: [{handler: recorder, instances: [point]}]
"#;

struct MetricsHarness {
    client: MetricsServiceClient<Channel>,
    channel: Channel,
    records: Arc<Mutex<Vec<Instance>>>,
}

async fn start_metrics(max_export_records: usize, ready: bool) -> MetricsHarness {
    let records = Arc::new(Mutex::new(Vec::new()));
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(Recorder::new(records.clone())));
    let mut limits = RequestLimits::default();
    limits.export_records.max = max_export_records;
    let runtime = Runtime::new(
        ConfigOrigin::Embedded(vec![SourceFile {
            name: "metrics.yaml".into(),
            text: METRICS_CONFIG.into(),
        }]),
        registry,
        ConfigOptions::default(),
        RuntimeOptions {
            limits,
            ..RuntimeOptions::default()
        },
        RuntimeMetrics::unregistered(),
    );
    if ready {
        runtime.reload().expect("test config loads");
    }
    let runtime = Arc::new(runtime);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("bound");
    // The mixer's own server: the method is served from `grpc::unary_methods`, as in
    // `mixer serve`.
    let server = mixer_grpc::Server::new(
        mixer_frontends::grpc::unary_methods(&runtime),
        tonic::service::RoutesBuilder::default().routes(),
    );
    tokio::spawn(server.serve(listener, std::future::pending()));
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    MetricsHarness {
        client: MetricsServiceClient::new(channel.clone()),
        channel,
        records,
    }
}

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(Any::StringValue(v.into())),
        }),
        key_strindex: 0,
    }
}

fn request(metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![kv("service.name", "checkout")],
                ..Resource::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "checkout.http".into(),
                    ..InstrumentationScope::default()
                }),
                metrics,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

fn number(v: Number, attributes: Vec<KeyValue>) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        start_time_unix_nano: 1_700_000_000_000_000_000,
        time_unix_nano: 1_700_000_000_123_000_000,
        value: Some(v),
        ..NumberDataPoint::default()
    }
}

fn requests_counter(points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        name: "http.server.request.count".into(),
        unit: "{request}".into(),
        data: Some(Data::Sum(Sum {
            data_points: points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        })),
        ..Metric::default()
    }
}

fn gauge(v: f64) -> Metric {
    Metric {
        name: "system.memory.utilization".into(),
        unit: "1".into(),
        data: Some(Data::Gauge(Gauge {
            data_points: vec![number(Number::AsDouble(v), vec![])],
        })),
        ..Metric::default()
    }
}

fn latency() -> Metric {
    Metric {
        name: "http.server.request.duration".into(),
        unit: "s".into(),
        data: Some(Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint {
                attributes: vec![kv("http.route", "/pay")],
                start_time_unix_nano: 1,
                time_unix_nano: 2,
                count: 4,
                sum: Some(1.75),
                bucket_counts: vec![1, 2, 1],
                explicit_bounds: vec![0.1, 1.0],
                ..HistogramDataPoint::default()
            }],
            aggregation_temporality: AggregationTemporality::Delta as i32,
        })),
        ..Metric::default()
    }
}

#[tokio::test]
async fn every_data_point_becomes_one_record() {
    let mut h = start_metrics(10_000, true).await;
    let response = h
        .client
        .export(request(vec![
            requests_counter(vec![
                number(
                    Number::AsInt(12),
                    vec![kv("http.route", "/cart"), kv("http.request.method", "GET")],
                ),
                number(Number::AsInt(3), vec![kv("http.route", "/pay")]),
            ]),
            gauge(0.25),
            latency(),
        ]))
        .await
        .expect("export")
        .into_inner();
    assert_eq!(response.partial_success, None);
    let got = wait_recorded(&h.records, 4).await;
    assert_eq!(got.len(), 4, "{got:#?}");

    let cart = &got[0];
    assert_eq!(var(cart, "name"), Some("http.server.request.count"));
    assert_eq!(var(cart, "kind"), Some("sum"));
    assert_eq!(var(cart, "unit"), Some("{request}"));
    assert_eq!(var(cart, "temporality"), Some("cumulative"));
    assert_eq!(var(cart, "monotonic"), Some("true"));
    assert_eq!(var(cart, "value"), Some("12"));
    assert_eq!(var(cart, "int_value"), Some("12"));
    assert_eq!(var(cart, "route"), Some("/cart"));
    // Point attributes feed the standard attributes as for logs and spans.
    assert_eq!(var(cart, "method"), Some("GET"));
    assert_eq!(var(cart, "service"), Some("checkout"));
    assert_eq!(var(cart, "scope"), Some("checkout.http"));
    assert_eq!(var(cart, "start"), Some("2023-11-14T22:13:20Z"));
    assert_eq!(var(cart, "time"), Some("2023-11-14T22:13:20.123Z"));
    assert_eq!(var(&got[1], "route"), Some("/pay"));
    assert_eq!(var(&got[1], "value"), Some("3"));

    let memory = &got[2];
    assert_eq!(var(memory, "kind"), Some("gauge"));
    assert_eq!(var(memory, "temporality"), Some(""));
    assert_eq!(var(memory, "value"), Some("0.25"));

    let latency = &got[3];
    assert_eq!(var(latency, "kind"), Some("histogram"));
    assert_eq!(var(latency, "temporality"), Some("delta"));
    assert_eq!(var(latency, "count"), Some("4"));
    assert_eq!(var(latency, "sum"), Some("1.75"));
    assert_eq!(
        var(latency, "buckets"),
        Some(r#"{"+Inf": "4", "0.1": "1", "1": "3"}"#)
    );
}

#[tokio::test]
async fn unmappable_points_are_counted_in_partial_success_and_the_rest_reported() {
    let mut h = start_metrics(10_000, true).await;
    let mut unspecified = requests_counter(vec![number(Number::AsInt(1), vec![])]);
    if let Some(Data::Sum(s)) = &mut unspecified.data {
        s.aggregation_temporality = AggregationTemporality::Unspecified as i32;
    }
    let response = h
        .client
        .export(request(vec![
            gauge(f64::NAN),
            gauge(0.5),
            unspecified,
            Metric {
                name: "no.data".into(),
                ..Metric::default()
            },
        ]))
        .await
        .expect("a partial success is a success")
        .into_inner();
    let partial = response.partial_success.expect("partial_success is set");
    assert_eq!(partial.rejected_data_points, 2, "{partial:?}");
    assert_eq!(
        partial.error_message,
        "2 of 3 data points not fully accepted: 2 could not be mapped (the first: metric \
         \"system.memory.utilization\": the value is NaN)"
    );
    let got = wait_recorded(&h.records, 1).await;
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(var(&got[0], "value"), Some("0.5"));
}

#[tokio::test]
async fn data_points_count_against_the_export_limit() {
    let mut h = start_metrics(3, true).await;
    let points = |n: usize| {
        request(vec![requests_counter(
            (0..n).map(|_| number(Number::AsInt(1), vec![])).collect(),
        )])
    };
    h.client.export(points(3)).await.expect("at the limit");
    let err = h
        .client
        .export(points(4))
        .await
        .expect_err("over the limit");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(
        err.message(),
        "metric data points in the export: 4 is over the limit of 3 (mixer serve \
         --max-export-records)"
    );
    // Nothing of the refused export is reported.
    assert_eq!(wait_recorded(&h.records, 3).await.len(), 3);
}

#[tokio::test]
async fn empty_and_unconfigured_exports() {
    let mut h = start_metrics(10_000, true).await;
    let response = h
        .client
        .export(ExportMetricsServiceRequest::default())
        .await
        .expect("empty")
        .into_inner();
    assert_eq!(response.partial_success, None);
    let mut cold = start_metrics(10_000, false).await;
    let err = cold
        .client
        .export(request(vec![gauge(1.0)]))
        .await
        .expect_err("no config");
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(err.message(), "no valid config is active");
}

#[tokio::test]
async fn garbage_is_refused_and_the_server_keeps_serving() {
    let h = start_metrics(10_000, true).await;
    let mut grpc = tonic::client::Grpc::new(h.channel.clone());
    for garbage in [vec![0xff; 64], b"not a protobuf message".to_vec()] {
        grpc.ready().await.expect("ready");
        let err = grpc
            .unary(
                tonic::Request::new(garbage),
                tonic::codegen::http::uri::PathAndQuery::from_static(
                    mixer_frontends::grpc::OTLP_METRICS,
                ),
                common::RawCodec,
            )
            .await
            .expect_err("garbage is refused");
        assert_ne!(err.code(), Code::Ok);
    }
    let mut client = h.client.clone();
    client
        .export(request(vec![gauge(1.0)]))
        .await
        .expect("still serving");
    assert_eq!(wait_recorded(&h.records, 1).await.len(), 1);
}

//! Records arrive as sent: spans, logs and metrics with their resource and headers, and the
//! valid part of a batch that holds invalid instances.

use mixer_adapter_api::{ErrorKind, Handler};
use mixer_model::{Template, Value};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use tonic::Code;

use crate::fixtures::*;
use crate::receiver::{Receiver, serve};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_logs_and_metrics_arrive_record_for_record() {
    let receiver = Receiver::new(0, Code::Ok);
    let addr = serve(receiver.clone()).await;
    let handler = build(params(addr));
    let report = handler.as_report().unwrap();

    report
        .report(&[
            client_span(),
            server_span("00000000000000ff"),
            log_entry("Info", 200),
            log_entry("Error", 503),
            metric("requestcount.istio-system", Value::Int64(1), 200),
            metric("requestcount.istio-system", Value::Int64(1), 200),
            metric("requestcount.istio-system", Value::Int64(1), 503),
            metric(
                "requestduration.istio-system",
                Value::Duration(mixer_model::Duration(50_000_000)),
                200,
            ),
            metric("connections.istio-system", Value::Double(7.0), 200),
            metric("connections.istio-system", Value::Double(3.0), 200),
            // Not configured: ignored.
            metric("other.istio-system", Value::Int64(1), 200),
            instance("nothing.istio-system", Template::ReportNothing, vec![]),
        ])
        .await
        .expect("exported");
    handler.flush_metrics().await.expect("metrics flushed");

    let received = receiver.take();
    // One export call per signal for the batch.
    assert_eq!(received.traces.len(), 1);
    assert_eq!(received.logs.len(), 1);
    assert_eq!(received.metrics.len(), 1);

    // Resource and headers.
    let rs = &received.traces[0].resource_spans[0];
    let resource = rs.resource.as_ref().unwrap();
    assert_eq!(attr(&resource.attributes, "service.name"), s("mixer"));
    assert_eq!(attr(&resource.attributes, "k8s.cluster.name"), s("test"));
    assert_eq!(attr(&resource.attributes, "replicas"), i(2));
    assert_eq!(received.metadata.len(), 3);
    for md in &received.metadata {
        assert_eq!(md.get("authorization").unwrap(), "Bearer t0ken");
        assert_eq!(md.get("x-tenant").unwrap(), "team-a");
    }

    // Spans.
    let scope_spans = &rs.scope_spans;
    assert_eq!(scope_spans.len(), 1);
    assert_eq!(
        scope_spans[0].scope.as_ref().unwrap().name,
        "tracespan.istio-system"
    );
    let spans = &scope_spans[0].spans;
    assert_eq!(spans.len(), 2);
    let client = spans.iter().find(|s| s.name == "GET /ratings").unwrap();
    assert_eq!(
        client.trace_id,
        [
            0x46, 0x3a, 0xc3, 0x5c, 0x9f, 0x64, 0x13, 0xad, 0x48, 0x48, 0x5a, 0x39, 0x53, 0xbb,
            0x61, 0x24
        ]
    );
    assert_eq!(
        client.span_id,
        [0xa2, 0xfb, 0x4a, 0x1d, 0x1a, 0x96, 0xd3, 0x12]
    );
    assert_eq!(client.parent_span_id, [0x00, 0x20, 0, 0, 0, 0, 0, 0x01]);
    assert_eq!(client.kind, 3, "CLIENT");
    assert_eq!(client.start_time_unix_nano, T0 as u64);
    assert_eq!(client.end_time_unix_nano, T0 as u64 + 19_000_000);
    assert_eq!(attr(&client.attributes, "http.method"), s("GET"));
    assert_eq!(attr(&client.attributes, "request.size"), i(128));
    assert_eq!(attr(&client.attributes, "source.ip"), s("10.1.2.3"));
    assert_eq!(
        attr(&client.attributes, "http.response.status_code"),
        i(503)
    );
    assert_eq!(client.status.as_ref().unwrap().code, 2, "ERROR");
    let server = spans.iter().find(|s| s.name == "/health").unwrap();
    let mut short_trace = [0u8; 16];
    short_trace[8..].copy_from_slice(&[0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
    assert_eq!(server.trace_id, short_trace);
    assert_eq!(server.span_id, [0, 0, 0, 0, 0, 0, 0, 0xff]);
    assert!(server.parent_span_id.is_empty(), "a root span");
    assert_eq!(server.kind, 2, "SERVER");
    assert_eq!(
        attr(&server.attributes, "http.response.status_code"),
        i(404)
    );
    assert_eq!(
        server.status.as_ref().map_or(0, |s| s.code),
        0,
        "a server's 404 is not an error"
    );

    // Logs.
    let rl = &received.logs[0].resource_logs[0];
    assert_eq!(
        attr(&rl.resource.as_ref().unwrap().attributes, "service.name"),
        s("mixer")
    );
    assert_eq!(rl.scope_logs.len(), 1);
    assert_eq!(
        rl.scope_logs[0].scope.as_ref().unwrap().name,
        "accesslog.istio-system"
    );
    let records = &rl.scope_logs[0].log_records;
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].time_unix_nano, T0 as u64);
    assert!(records[0].observed_time_unix_nano > 0);
    assert_eq!(records[0].severity_text, "Info");
    assert_eq!(records[0].severity_number, 9);
    assert_eq!(records[1].severity_text, "Error");
    assert_eq!(records[1].severity_number, 17);
    assert_eq!(attr(&records[0].attributes, "method"), s("GET"));
    assert_eq!(attr(&records[0].attributes, "responseCode"), i(200));
    assert_eq!(attr(&records[0].attributes, "latency"), s("19ms"));
    assert_eq!(
        attr(&records[1].attributes, "ok"),
        Some(any_value::Value::BoolValue(false))
    );

    // Metrics.
    let rm = &received.metrics[0].resource_metrics[0];
    assert_eq!(
        attr(
            &rm.resource.as_ref().unwrap().attributes,
            "k8s.cluster.name"
        ),
        s("test")
    );
    let metrics: Vec<_> = rm
        .scope_metrics
        .iter()
        .flat_map(|sm| {
            sm.metrics
                .iter()
                .map(move |m| (sm.scope.as_ref().unwrap().name.clone(), m))
        })
        .collect();
    assert_eq!(metrics.len(), 3, "{metrics:?}");
    let (scope, requests) = metrics
        .iter()
        .find(|(_, m)| m.name == "istio.requests")
        .unwrap();
    assert_eq!(scope, "requestcount.istio-system");
    assert_eq!(requests.unit, "{request}");
    assert_eq!(requests.description, "Requests");
    let Some(metric::Data::Sum(sum)) = &requests.data else {
        panic!("a sum: {requests:?}")
    };
    assert!(sum.is_monotonic);
    assert_eq!(sum.aggregation_temporality, 2, "CUMULATIVE");
    assert_eq!(sum.data_points.len(), 2);
    for p in &sum.data_points {
        let expected = match attr(&p.attributes, "response_code") {
            Some(any_value::Value::IntValue(200)) => 2.0,
            Some(any_value::Value::IntValue(503)) => 1.0,
            other => panic!("unexpected series {other:?}"),
        };
        assert_eq!(p.value, Some(number_data_point::Value::AsDouble(expected)));
        assert_eq!(attr(&p.attributes, "source_app"), s("web"));
    }
    let (_, duration) = metrics
        .iter()
        .find(|(_, m)| m.name == "istio.request.duration")
        .unwrap();
    let Some(metric::Data::Histogram(h)) = &duration.data else {
        panic!("a histogram: {duration:?}")
    };
    assert_eq!(h.data_points.len(), 1);
    let p = &h.data_points[0];
    assert_eq!(p.count, 1);
    assert_eq!(p.sum, Some(0.05));
    assert_eq!(p.explicit_bounds, [0.01, 0.1, 1.0]);
    assert_eq!(p.bucket_counts, [0, 1, 0, 0]);
    let (_, connections) = metrics
        .iter()
        .find(|(_, m)| m.name == "istio.connections")
        .unwrap();
    let Some(metric::Data::Gauge(g)) = &connections.data else {
        panic!("a gauge: {connections:?}")
    };
    assert_eq!(g.data_points.len(), 1);
    assert_eq!(
        g.data_points[0].value,
        Some(number_data_point::Value::AsDouble(3.0))
    );
    handler.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_instances_fail_the_batch_but_the_others_are_exported() {
    let receiver = Receiver::new(0, Code::Ok);
    let addr = serve(receiver.clone()).await;
    let handler = build(params(addr));
    let mut bad_id = server_span("00000000000000ff");
    bad_id.fields[1].1 = v("not-hex");
    let err = handler
        .as_report()
        .unwrap()
        .report(&[
            server_span("0000000000000001"),
            bad_id,
            server_span("0000000000000002"),
            metric("requestcount.istio-system", Value::Int64(-1), 200),
            log_entry("Warning", 200),
        ])
        .await
        .expect_err("two invalid instances");
    assert_eq!(err.kind, ErrorKind::InvalidInstance);
    assert!(!err.retryable);
    assert!(
        err.message.contains("span_id \"not-hex\""),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("counter cannot be incremented by -1"),
        "{}",
        err.message
    );
    let received = receiver.take();
    let spans = &received.traces[0].resource_spans[0].scope_spans[0].spans;
    let ids: Vec<u8> = spans.iter().map(|s| s.span_id[7]).collect();
    assert_eq!(ids, [1, 2]);
    assert_eq!(
        received.logs[0].resource_logs[0].scope_logs[0].log_records[0].severity_number,
        13
    );
    handler.close().await;
}

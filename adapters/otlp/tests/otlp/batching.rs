//! When records leave: batches split by size, metrics on their interval, on close, and on a
//! drop without close.

use std::time::{Duration, Instant};

use mixer_adapter_api::Handler;
use mixer_model::{Instance, Value};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use serde_json::json;
use tonic::Code;

use crate::fixtures::*;
use crate::receiver::{Receiver, serve};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_batches_are_split_and_close_flushes_metrics() {
    let receiver = Receiver::new(0, Code::Ok);
    let addr = serve(receiver.clone()).await;
    let mut p = params(addr);
    p["batch"]["maxExportBatchSize"] = json!(2);
    let handler = build(p);
    let report = handler.as_report().unwrap();
    let spans: Vec<Instance> = (1..=5)
        .map(|n| server_span(&format!("{n:016x}")))
        .chain([metric("requestcount.istio-system", Value::from("4"), 200)])
        .collect();
    report.report(&spans).await.expect("exported");
    {
        let received = receiver.take();
        let sizes: Vec<usize> = received
            .traces
            .iter()
            .map(|t| t.resource_spans[0].scope_spans[0].spans.len())
            .collect();
        assert_eq!(sizes, [2, 2, 1]);
        assert!(
            received.metrics.is_empty(),
            "metrics wait for their interval"
        );
    }
    handler.close().await;
    {
        let received = receiver.take();
        assert_eq!(received.metrics.len(), 1, "close exports the metrics");
        let m = &received.metrics[0].resource_metrics[0].scope_metrics[0].metrics[0];
        let Some(metric::Data::Sum(sum)) = &m.data else {
            panic!("{m:?}")
        };
        assert_eq!(
            sum.data_points[0].value,
            Some(number_data_point::Value::AsDouble(4.0))
        );
    }
    let err = report
        .report(&[server_span("0000000000000001")])
        .await
        .expect_err("closed");
    assert!(!err.retryable);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_metric_exports() {
    let receiver = Receiver::new(0, Code::Ok);
    let addr = serve(receiver.clone()).await;
    let mut p = params(addr);
    p["batch"]["scheduledDelay"] = json!("100ms");
    p["metricTemporality"] = json!("DELTA");
    let handler = build(p);
    handler
        .as_report()
        .unwrap()
        .report(&[metric("requestcount.istio-system", Value::Int64(3), 200)])
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if !receiver.received.lock().unwrap().metrics.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "no periodic export");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let received = receiver.take();
    let m = &received.metrics[0].resource_metrics[0].scope_metrics[0].metrics[0];
    let Some(metric::Data::Sum(sum)) = &m.data else {
        panic!("{m:?}")
    };
    assert_eq!(sum.aggregation_temporality, 1, "DELTA");
    handler.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_without_metrics_and_one_dropped_without_close() {
    let receiver = Receiver::new(0, Code::Ok);
    let addr = serve(receiver.clone()).await;
    let handler = build(json!({"endpoint": format!("http://{addr}")}));
    handler
        .as_report()
        .unwrap()
        .report(&[
            log_entry("notice", 200),
            metric("requestcount.istio-system", Value::Int64(1), 200),
        ])
        .await
        .expect("exported");
    handler.flush_metrics().await.expect("nothing to flush");
    let received = receiver.take();
    assert_eq!(received.logs.len(), 1);
    assert!(received.metrics.is_empty());
    let record = &received.logs[0].resource_logs[0].scope_logs[0].log_records[0];
    assert_eq!(
        (record.severity_text.as_str(), record.severity_number),
        ("notice", 10)
    );
    handler.close().await;

    // Dropped without close: the meter provider shuts down on a thread of its own.
    let handler = build(params(addr));
    handler
        .as_report()
        .unwrap()
        .report(&[metric("requestcount.istio-system", Value::Int64(1), 200)])
        .await
        .unwrap();
    drop(handler);
    let deadline = Instant::now() + Duration::from_secs(5);
    while receiver.received.lock().unwrap().metrics.is_empty() {
        assert!(Instant::now() < deadline, "no export on drop");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

//! The mixer's own traces when a request is not sampled: its children are not opened at all
//! (the sampler is parent-based, so they would be dropped anyway), while a sampled request
//! still gets one per step. A test binary of its own: the tracer is installed once per process.

use mixer_runtime::traces::{self, ADAPTER_CALL};
use opentelemetry::Context;
use opentelemetry::trace::{SpanId, TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};

/// The span id current in the request's span and in its adapter call's.
async fn request_and_child_span_ids(traceparent: &str) -> (SpanId, SpanId) {
    let parent = traces::parent(|name| (name == "traceparent").then_some(traceparent));
    traces::request("check", parent, async {
        let request = Context::current().span().span_context().span_id();
        let child = traces::child(ADAPTER_CALL, Some("h"), async {
            Context::current().span().span_context().span_id()
        })
        .await;
        (request, child)
    })
    .await
}

#[tokio::test]
async fn an_unsampled_request_opens_no_child_spans_and_a_sampled_one_does() {
    // Ratio 0: only what the proxy sampled is sampled.
    let provider = SdkTracerProvider::builder()
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            0.0,
        ))))
        .build();
    traces::install(provider.tracer("test"), 0.0).expect("the only tracer of this process");

    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let (request, child) =
        request_and_child_span_ids(&format!("00-{trace}-00f067aa0ba902b7-00")).await;
    assert_ne!(request, SpanId::INVALID);
    assert_eq!(child, request, "a child of an unsampled request was opened");

    let (request, child) =
        request_and_child_span_ids(&format!("00-{trace}-00f067aa0ba902b7-01")).await;
    assert_ne!(
        child, request,
        "a sampled request's adapter call has a span of its own"
    );

    // No trace context from the proxy, and the ratio starts none: no span is built, not
    // even a non-recording one.
    let no_span = traces::request("check", traces::parent(|_| None), async {
        !Context::current().has_active_span()
    })
    .await;
    assert!(no_span, "a request the ratio did not sample got a span");

    // Nor is a context built for it: its one header read finds no `traceparent`, and the
    // propagator is not asked (most requests come without one).
    let read = std::cell::RefCell::new(Vec::new());
    let parent = traces::parent(|name| {
        read.borrow_mut().push(name.to_string());
        None
    });
    assert!(
        parent.is_none(),
        "a context was built without a traceparent"
    );
    assert_eq!(*read.borrow(), ["traceparent"]);
}

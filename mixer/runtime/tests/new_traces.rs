//! The mixer's own traces for requests that bring no trace context: at ratio 1 each starts a
//! sampled trace of its own. A test binary of its own: the tracer is installed once per
//! process, and `unsampled_traces.rs` installs ratio 0.

use mixer_runtime::traces;
use opentelemetry::Context;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};

#[tokio::test]
async fn a_request_without_a_trace_starts_a_sampled_one_at_ratio_one() {
    // As `mixer serve` configures it: the SDK keeps every root it is given, the runtime
    // decides which requests start one.
    let provider = SdkTracerProvider::builder()
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)))
        .build();
    traces::install(provider.tracer("test"), 1.0).expect("the only tracer of this process");

    let span = traces::request("check", traces::parent(|_| None), async {
        Context::current().span().span_context().clone()
    })
    .await;
    assert!(span.is_valid(), "no span for a request the ratio sampled");
    assert!(span.is_sampled(), "the new trace is not sampled");
}

//! The mixer's own traces (`mixer serve --tracing-otlp-endpoint`): a span per request, with
//! child spans for the cache lookup, the rule evaluation and each adapter call, continuing
//! the W3C `traceparent` the proxy sent.
//!
//! The tracer is the OpenTelemetry SDK's, installed once at start ([`install`]); the spans
//! are opened here, not through the `tracing` log pipeline, so that logs and traces are
//! configured apart. The current span travels with the request's futures as OpenTelemetry's
//! [`Context`] (set while they are polled), which is also where an out-of-process adapter
//! client finds it to propagate. With no tracer installed every function here is a branch
//! on an empty [`OnceLock`]: no allocation, no lock, no clock read.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context as TaskContext, Poll};

use opentelemetry::Context;
use opentelemetry::KeyValue;
use opentelemetry::context::{FutureExt as _, WithContext};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, Sampler, SamplingDecision, SdkTracer, ShouldSample,
};

/// The child span around the check cache's lookup.
pub const CACHE_LOOKUP: &str = "cache lookup";
/// The child span around the rule evaluation (matches and instances).
pub const RULE_EVALUATION: &str = "rule evaluation";
/// The child span around one adapter call (built-in, out of process or Wasm).
pub const ADAPTER_CALL: &str = "adapter call";
/// The attribute naming the handler of an [`ADAPTER_CALL`] span.
pub const HANDLER_ATTRIBUTE: &str = "mixer.handler";

static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// The W3C trace context header that says whether a request continues a trace.
const TRACEPARENT: &str = "traceparent";

/// Whether a request with no trace of its own starts one: the ratio sampler, asked before
/// any span is built (see [`request`]).
static NEW_TRACES: OnceLock<Sampler> = OnceLock::new();

/// Installs the tracer every span is started with, once per process; a second tracer is
/// refused (given back). `new_trace_ratio` (0 to 1) is the share of requests without a
/// trace context that start a trace. It is decided here, before a span is built, so the
/// tracer's own sampler should sample every root span it is given
/// (`ParentBased(AlwaysOn)`), and follow the parent otherwise.
pub fn install(tracer: SdkTracer, new_trace_ratio: f64) -> Result<(), SdkTracer> {
    TRACER.set(tracer)?;
    // Set only by the call that installed the tracer: it cannot have been set before.
    let _ = NEW_TRACES.set(Sampler::TraceIdRatioBased(new_trace_ratio));
    Ok(())
}

/// Whether a new trace is started: the ratio sampler's decision on a fresh random trace id,
/// as the SDK would take it for a root span.
fn starts_new_trace() -> bool {
    let Some(sampler) = NEW_TRACES.get() else {
        return true;
    };
    let trace_id = RandomIdGenerator::default().new_trace_id();
    let decision = sampler
        .should_sample(None, trace_id, "", &SpanKind::Server, &[], &[])
        .decision;
    decision != SamplingDecision::Drop
}

/// Whether the mixer traces its requests.
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// The parent of a request's span: the W3C `traceparent` (and `tracestate`) that `header`
/// gives by name, when tracing is on; `None` when the request has no `traceparent`, and
/// `None` (with `header` never called) when tracing is off.
pub fn parent<'h>(header: impl Fn(&str) -> Option<&'h str>) -> Option<Context> {
    // The marker ties the headers' lifetime to the extractor's, so a borrow of it may hand
    // them out.
    struct Headers<'h, F>(F, std::marker::PhantomData<&'h str>);
    impl<'h, F: Fn(&str) -> Option<&'h str>> Extractor for Headers<'h, F> {
        fn get(&self, key: &str) -> Option<&str> {
            (self.0)(key)
        }
        fn keys(&self) -> Vec<&str> {
            vec![TRACEPARENT, "tracestate"]
        }
    }
    TRACER.get()?;
    // Most requests carry no trace context: one header lookup says so, before the
    // propagator reads the current context and builds one (#36: 1% tracing costs <= 3%).
    header(TRACEPARENT)?;
    Some(TraceContextPropagator::new().extract(&Headers(header, std::marker::PhantomData)))
}

/// Runs `future` as the span `name` of one request (kind SERVER), a child of `parent` (see
/// [`parent`]; a new trace when it holds none). Without a tracer, `future` alone.
pub fn request<F: Future>(name: &'static str, parent: Option<Context>, future: F) -> Traced<F> {
    let Some(tracer) = TRACER.get() else {
        return Traced::Plain { future };
    };
    let parent = match parent {
        // A trace the proxy sent, sampled or not, is continued as the parent-based sampler
        // says.
        Some(parent) if parent.span().span_context().is_valid() => parent,
        // No trace of the proxy's to continue, and the ratio says not to start one (99
        // requests in 100 at 1%): nothing is built, no span, no context (#36).
        _ if !starts_new_trace() => return Traced::Plain { future },
        _ => Context::new(),
    };
    let span = tracer
        .span_builder(name)
        .with_kind(SpanKind::Server)
        .start_with_context(tracer, &parent);
    Traced::InSpan {
        future: future.with_context(parent.with_span(span)),
    }
}

/// Runs `future` as the child span `name` of the request being traced (the current
/// context), naming `handler` if given. Without a tracer, or outside a traced request
/// (reports, which are batched apart from their requests), `future` alone.
pub fn child<F: Future>(name: &'static str, handler: Option<&str>, future: F) -> Traced<F> {
    match child_context(name, handler) {
        None => Traced::Plain { future },
        Some(cx) => Traced::InSpan {
            future: future.with_context(cx),
        },
    }
}

pin_project_lite::pin_project! {
    /// The future of [`request`] and [`child`]: the work alone, or the work in its span's
    /// context. An enum rather than an `async fn`, which held the work twice (as its
    /// argument and as what it awaited, a third time in context), so that every caller
    /// moved a future two to three times the work's size: the whole check's, for a
    /// request (#36).
    #[project = TracedProjection]
    // The macro takes no doc comment on a pinned field; each variant's says what it holds.
    #[allow(missing_docs)]
    #[must_use = "futures do nothing unless polled"]
    pub enum Traced<F> {
        /// Not traced: the work alone.
        Plain {
            #[pin]
            future: F,
        },
        /// Traced: the work, polled in its span's context.
        InSpan {
            #[pin]
            future: WithContext<F>,
        },
    }
}

impl<F: Future> Future for Traced<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<F::Output> {
        match self.project() {
            TracedProjection::Plain { future } => future.poll(cx),
            TracedProjection::InSpan { future } => future.poll(cx),
        }
    }
}

/// [`child`] for work that does not wait.
pub fn child_sync<R>(name: &'static str, work: impl FnOnce() -> R) -> R {
    match child_context(name, None) {
        None => work(),
        Some(cx) => {
            let _attached = cx.attach();
            work()
        }
    }
}

/// Whether [`child`] would open a span now: a tracer is installed and the request being
/// traced is sampled. Work that can be done without a future when no span is wanted (a quota
/// handler that answers at once) asks this first.
pub(crate) fn child_wanted() -> bool {
    TRACER.get().is_some()
        && Context::map_current(|cx| cx.has_active_span() && cx.span().span_context().is_sampled())
}

fn child_context(name: &'static str, handler: Option<&str>) -> Option<Context> {
    let tracer = TRACER.get()?;
    // The sampler is parent-based: the child of a span that is not sampled would not be
    // either. Skipping it spares an unsampled request (99 in 100 at the default ratio) the
    // span objects, its attributes and a context per adapter call; what an out-of-process
    // adapter is sent is the request's context, which says "not sampled" all the same.
    // Asked in place: the current context is cloned only for a child that is built.
    let sampled =
        Context::map_current(|cx| cx.has_active_span() && cx.span().span_context().is_sampled());
    if !sampled {
        return None;
    }
    let current = Context::current();
    let mut builder = tracer.span_builder(name).with_kind(SpanKind::Internal);
    if let Some(handler) = handler {
        builder = builder.with_attributes([KeyValue::new(HANDLER_ATTRIBUTE, handler.to_owned())]);
    }
    let span = builder.start_with_context(tracer, &current);
    Some(current.with_span(span))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Off (no tracer in this test process), nothing is read, and the work runs as is.
    #[tokio::test]
    async fn without_a_tracer_nothing_is_read_or_wrapped() {
        assert!(!enabled());
        let parent = parent(|_| panic!("a header read with tracing off"));
        assert!(parent.is_none());
        assert_eq!(request("check", parent, async { 7 }).await, 7);
        assert_eq!(child(ADAPTER_CALL, Some("h"), async { 8 }).await, 8);
        assert_eq!(child_sync(RULE_EVALUATION, || 9), 9);
    }

    /// A traced future holds its work once: a request's wraps the whole check's future and
    /// is moved with it, so a wrapper twice the work's size doubled every move.
    #[test]
    fn a_traced_future_is_the_size_of_its_work_and_a_context() {
        let work = || async {
            let held = std::hint::black_box([1u8; 1024]);
            tokio::task::yield_now().await;
            held.iter().map(|b| usize::from(*b)).sum::<usize>()
        };
        let work_size = std::mem::size_of_val(&work());
        assert!(work_size >= 1024, "the work holds its array: {work_size}");
        let limit = work_size + std::mem::size_of::<Context>() + 16;
        let request = request("check", None, work());
        assert!(
            std::mem::size_of_val(&request) <= limit,
            "a request's future of {} bytes around {work_size}",
            std::mem::size_of_val(&request)
        );
        let child = child(ADAPTER_CALL, Some("h"), work());
        assert!(
            std::mem::size_of_val(&child) <= limit,
            "a child's future of {} bytes around {work_size}",
            std::mem::size_of_val(&child)
        );
    }

    #[tokio::test]
    async fn a_traced_future_answers_its_work() {
        assert_eq!(request("check", None, async { 3 }).await, 3);
        assert_eq!(child(ADAPTER_CALL, None, async { 4 }).await, 4);
    }
}

//! The W3C trace context of the mixer's own traces, propagated to out-of-process adapters in
//! each call's gRPC metadata (`traceparent`, `tracestate`), so that an adapter's spans join
//! the request's trace under the mixer's `adapter call` span.

use opentelemetry::propagation::{Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue, MetadataMap};

/// Writes the current span's trace context into `metadata`, when a span is current (the
/// mixer traces its requests and this call is part of one); otherwise touches nothing.
pub(crate) fn propagate(metadata: &mut MetadataMap) {
    struct Metadata<'m>(&'m mut MetadataMap);
    impl Injector for Metadata<'_> {
        fn set(&mut self, key: &str, value: String) {
            if let (Ok(key), Ok(value)) = (
                AsciiMetadataKey::from_bytes(key.as_bytes()),
                AsciiMetadataValue::try_from(value),
            ) {
                self.0.insert(key, value);
            }
        }
    }
    opentelemetry::Context::map_current(|cx| {
        if cx.has_active_span() {
            TraceContextPropagator::new().inject_context(cx, &mut Metadata(metadata));
        }
    });
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

    use super::*;

    #[test]
    fn the_current_span_is_written_as_traceparent_and_nothing_without_one() {
        let mut metadata = MetadataMap::new();
        propagate(&mut metadata);
        assert!(metadata.is_empty());
        let span = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").expect("hex"),
            SpanId::from_hex("00f067aa0ba902b7").expect("hex"),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        );
        let _current = opentelemetry::Context::new()
            .with_remote_span_context(span)
            .attach();
        propagate(&mut metadata);
        assert_eq!(
            metadata.get("traceparent").and_then(|v| v.to_str().ok()),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
    }
}

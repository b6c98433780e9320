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

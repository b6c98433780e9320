//! The attribute bag of sample entries, compared with the golden files; flag short names.

use std::path::PathBuf;
use std::sync::Arc;

use crate::common::render_bag as render;
use crate::samples::*;
use envoy_types::pb::envoy::data::accesslog::v3::response_flags::Unauthorized;
use envoy_types::pb::envoy::data::accesslog::v3::{
    AccessLogType, HttpAccessLogEntry, ResponseFlags,
};
use envoy_types::pb::envoy::service::accesslog::v3::stream_access_logs_message::Identifier;
use mixer_frontends::access_log::{self, ConnectionTotals};
use mixer_model::{AttributeBag, Timestamp, Vocabulary};

const NOW: Timestamp = Timestamp(1_700_000_100_000_000_000);

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/access_log")
}

fn assert_golden(name: &str, actual: &str) {
    crate::common::assert_golden(&golden_dir(), name, actual);
}

fn http_bag(identifier: Option<&Identifier>, entry: &HttpAccessLogEntry) -> String {
    let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
    access_log::fill_http(&mut bag, identifier, entry, NOW);
    render(&bag)
}

#[test]
fn golden_full_http() {
    assert_golden(
        "full_http",
        &http_bag(Some(&identifier()), &full_http_entry()),
    );
}

#[test]
fn golden_grpc() {
    assert_golden("grpc", &http_bag(None, &grpc_entry()));
}

#[test]
fn golden_empty_http() {
    assert_golden(
        "empty_http",
        &http_bag(None, &HttpAccessLogEntry::default()),
    );
}

#[test]
fn golden_tcp() {
    let mut totals = ConnectionTotals::new();
    let mut out = String::new();
    for (i, entry) in [
        tcp_entry(AccessLogType::TcpConnectionStart, 0, 0),
        tcp_entry(AccessLogType::TcpPeriodic, 1000, 100),
        tcp_entry(AccessLogType::TcpConnectionEnd, 1500, 400),
    ]
    .iter()
    .enumerate()
    {
        let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
        access_log::fill_tcp(&mut bag, Some(&identifier()), entry, &mut totals, NOW);
        out.push_str(&format!("# entry {i}\n"));
        out.push_str(&render(&bag));
    }
    assert_golden("tcp", &out);
}

#[test]
fn every_flag_has_its_short_name_in_envoys_order() {
    let all = ResponseFlags {
        failed_local_healthcheck: true,
        no_healthy_upstream: true,
        upstream_request_timeout: true,
        local_reset: true,
        upstream_remote_reset: true,
        upstream_connection_failure: true,
        upstream_connection_termination: true,
        upstream_overflow: true,
        no_route_found: true,
        delay_injected: true,
        fault_injected: true,
        rate_limited: true,
        unauthorized_details: Some(Unauthorized { reason: 1 }),
        rate_limit_service_error: true,
        downstream_connection_termination: true,
        upstream_retry_limit_exceeded: true,
        stream_idle_timeout: true,
        invalid_envoy_request_headers: true,
        downstream_protocol_error: true,
        upstream_max_stream_duration_reached: true,
        response_from_cache_filter: true,
        no_filter_config_found: true,
        duration_timeout: true,
        upstream_protocol_error: true,
        no_cluster_found: true,
        overload_manager: true,
        dns_resolution_failure: true,
        downstream_remote_reset: true,
    };
    assert_eq!(
        access_log::response_flags(Some(&all)),
        "LH,UH,UT,LR,UR,UF,UC,UO,NR,DI,FI,RL,UAEX,RLSE,DC,URX,SI,IH,DPE,UMSDR,RFCF,NFCF,DT,UPE,NC,OM,DF,DR"
    );
}

//! Response flags, connection byte deltas and Istio cluster names.

use envoy_types::pb::envoy::data::accesslog::v3::ResponseFlags;

use super::common::istio_cluster;
use super::*;

#[test]
fn flags_print_in_envoys_order() {
    assert_eq!(response_flags(None), "-");
    assert_eq!(response_flags(Some(&ResponseFlags::default())), "-");
    let flags = ResponseFlags {
        upstream_connection_failure: true,
        no_healthy_upstream: true,
        downstream_remote_reset: true,
        ..Default::default()
    };
    assert_eq!(response_flags(Some(&flags)), "UH,UF,DR");
}

#[test]
fn connection_totals_give_deltas_and_forget_closed_connections() {
    let mut t = ConnectionTotals::new();
    assert_eq!(t.delta("c1", (100, 10), false), (100, 10));
    assert_eq!(t.delta("c1", (150, 30), false), (50, 20));
    assert_eq!(t.delta("c1", (160, 30), true), (10, 0));
    assert_eq!(t.delta("c1", (5, 5), false), (5, 5));
    assert_eq!(t.delta("", (7, 8), false), (7, 8));
}

#[test]
fn istio_cluster_names() {
    assert_eq!(
        istio_cluster("outbound|9080||reviews.default.svc.cluster.local"),
        Some(("outbound", "reviews.default.svc.cluster.local"))
    );
    assert_eq!(istio_cluster("inbound|9080||"), Some(("inbound", "")));
    assert_eq!(istio_cluster("my_cluster"), None);
}

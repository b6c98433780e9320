//! Envoy's response flags in their short form, as `%RESPONSE_FLAGS%` prints them.

use envoy_types::pb::envoy::data::accesslog::v3::ResponseFlags;

/// Envoy's short response flag names, in the order Envoy prints them (`%RESPONSE_FLAGS%`).
fn flag_names(f: &ResponseFlags) -> [(bool, &'static str); 28] {
    [
        (f.failed_local_healthcheck, "LH"),
        (f.no_healthy_upstream, "UH"),
        (f.upstream_request_timeout, "UT"),
        (f.local_reset, "LR"),
        (f.upstream_remote_reset, "UR"),
        (f.upstream_connection_failure, "UF"),
        (f.upstream_connection_termination, "UC"),
        (f.upstream_overflow, "UO"),
        (f.no_route_found, "NR"),
        (f.delay_injected, "DI"),
        (f.fault_injected, "FI"),
        (f.rate_limited, "RL"),
        (f.unauthorized_details.is_some(), "UAEX"),
        (f.rate_limit_service_error, "RLSE"),
        (f.downstream_connection_termination, "DC"),
        (f.upstream_retry_limit_exceeded, "URX"),
        (f.stream_idle_timeout, "SI"),
        (f.invalid_envoy_request_headers, "IH"),
        (f.downstream_protocol_error, "DPE"),
        (f.upstream_max_stream_duration_reached, "UMSDR"),
        (f.response_from_cache_filter, "RFCF"),
        (f.no_filter_config_found, "NFCF"),
        (f.duration_timeout, "DT"),
        (f.upstream_protocol_error, "UPE"),
        (f.no_cluster_found, "NC"),
        (f.overload_manager, "OM"),
        (f.dns_resolution_failure, "DF"),
        (f.downstream_remote_reset, "DR"),
    ]
}

/// Envoy's short form of the response flags: `"UH,UF"`, or `"-"` when none is set (also
/// what Istio's proxies reported as `response.flags`).
pub fn response_flags(flags: Option<&ResponseFlags>) -> String {
    let Some(flags) = flags else {
        return "-".to_string();
    };
    let set: Vec<&str> = flag_names(flags)
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| name)
        .collect();
    if set.is_empty() {
        "-".to_string()
    } else {
        set.join(",")
    }
}

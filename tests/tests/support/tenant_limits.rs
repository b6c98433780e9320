//! A rate limit per tenant on redisquota, as the RLS tests configure and ask it: descriptor key
//! `tenant`, one counter per value.
#![allow(dead_code)]

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

/// A `ratelimitconfig` for RLS domain `domain` (also its name) letting each `tenant` value
/// make `per_unit` requests a `unit` (second, minute, hour, day), counted by redisquota
/// with `params`: the entries of its YAML flow map, `redisServerUrl` among them.
pub fn tenant_limits(domain: &str, params: &str, unit: &str, per_unit: u32) -> String {
    format!(
        r#"
apiVersion: config.istio.io/v1alpha2
kind: ratelimitconfig
metadata: {{name: {domain}, namespace: istio-system}}
spec:
  domain: {domain}
  backend:
    adapter: redisquota
    params: {{{params}}}
  descriptors:
  - key: tenant
    rate_limit: {{unit: {unit}, requests_per_unit: {per_unit}}}
"#
    )
}

/// An RLS request of `domain` for one hit, with a `tenant` descriptor for each of `tenants`.
pub fn tenant_request(domain: &str, tenants: &[&str]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: tenants
            .iter()
            .map(|t| RateLimitDescriptor {
                entries: vec![Entry {
                    key: "tenant".into(),
                    value: t.to_string(),
                }],
                ..Default::default()
            })
            .collect(),
        hits_addend: 1,
    }
}

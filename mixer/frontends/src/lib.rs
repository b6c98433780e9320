//! Front ends: one module per protocol. Each turns its requests into an attribute bag for the
//! active snapshot, asks the runtime, and maps the verdict (or the failure to reach one) back
//! to its wire format.
//!
//! | module | protocol | address |
//! |---|---|---|
//! | [`forward_auth`] | HTTP forward-auth (nginx `auth_request`, Caddy `forward_auth`, Traefik `forwardAuth`) | `--http-addr` |
//! | [`ext_authz`] | Envoy external authorization, gRPC `envoy.service.auth.v3.Authorization/Check` (`ext_authz` filter) | the gRPC address |
//! | [`mixer_v1`] | Istio Mixer v1, gRPC `istio.mixer.v1.Mixer/Check` and `/Report` (Istio 1.0–1.4 proxies) | the gRPC address |
//! | [`ratelimit`] | Envoy rate limit service, gRPC `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` (`ratelimit` filters) | the gRPC address |
//! | [`access_log`] | Envoy access log service, gRPC `envoy.service.accesslog.v3.AccessLogService/StreamAccessLogs` (`http_grpc` / `tcp_grpc` access loggers) | the gRPC address |
//! | [`otlp`] | OTLP logs and traces, gRPC `opentelemetry.proto.collector.{logs,trace}.v1.{LogsService,TraceService}/Export` | the gRPC address |

pub mod access_log;
mod bag_pool;
mod envoy_core;
pub mod ext_authz;
pub mod forward_auth;
pub mod grpc;
mod host;
pub mod mixer_v1;
pub mod otlp;
mod protowire;
pub mod ratelimit;
mod request_scope;
pub mod rlqs;

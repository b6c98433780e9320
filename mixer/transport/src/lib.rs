//! The mixer's listeners, everything between a socket and a front end: the gRPC listener
//! ([`grpc`], the `mixer-grpc` server the adapter SDK shares), the HTTP listeners of
//! forward-auth and admin ([`http_listener`]), their limits, flags and metrics
//! ([`listeners`]), and TLS on the gRPC and forward-auth listeners ([`tls`], re-read when its
//! files change: [`tls_reload`]).
//!
//! The front ends map protocols to the runtime and know no listener: forward-auth declares
//! what it reads of a connection's TLS handshake (`mixer_frontends::forward_auth::TlsPeer`)
//! and the HTTP listener fills it in. The server parses the command line and wires a listener
//! to each front end.

pub mod http_listener;
pub mod listeners;
pub mod tls;
pub mod tls_reload;

/// gRPC over HTTP/2: the gRPC listener's server and its limits.
pub use mixer_grpc as grpc;

/// Parses a duration flag (`10s`, `5m`, `1h`); negative durations are refused.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    mixer_model::Duration::parse(text)
        .filter(|d| d.0 >= 0)
        .map(|d| d.to_std())
        .ok_or_else(|| format!("{text:?} is not a duration such as 10s"))
}

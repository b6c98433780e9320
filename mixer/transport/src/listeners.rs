//! The limits of `serve`'s three listeners: their flags, how they are fitted to the
//! process's file descriptors, and the metrics of what they refused or closed.

use std::sync::Arc;
use std::time::Duration;

use crate::grpc::limits::{Event, Events, Limits, Refusal, StreamRefusal, Timeout};
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

use crate::http_listener::{HttpLimits, SharingCounters};

/// Connections, timeouts and sizes the listeners allow (README, "Operations: limits and
/// timeouts").
#[derive(clap::Args, Debug, Clone)]
pub struct ListenerArgs {
    /// Most connections the gRPC listener keeps open; a new one past it is reset.
    #[arg(long, default_value_t = 10_000)]
    pub grpc_max_connections: usize,
    /// Most connections the forward-auth listener keeps open; a new one past it is reset.
    #[arg(long, default_value_t = 10_000)]
    pub http_max_connections: usize,
    /// Most connections the admin listener keeps open, its own share of file descriptors,
    /// so probes and scrapes are answered while the others are full.
    #[arg(long, default_value_t = 100)]
    pub admin_max_connections: usize,
    /// Most connections one address may hold on the admin listener, so that one client
    /// cannot take the places probes need; 0: no such limit. At `--admin-max-connections`
    /// the oldest connection with no request in flight is closed to let a new one in.
    #[arg(long, default_value_t = 10)]
    pub admin_max_connections_per_peer: usize,
    /// Time for an HTTP/1 request's headers on the admin listener: probes and scrapes send
    /// theirs at once, so a connection that stays silent is closed soon.
    #[arg(long, default_value = "3s", value_parser = crate::parse_duration)]
    pub admin_header_read_timeout: Duration,
    /// How long a gRPC connection may have no stream open before it is closed (GOAWAY).
    #[arg(long, default_value = "1h", value_parser = crate::parse_duration)]
    pub grpc_idle_timeout: Duration,
    /// How long a forward-auth or admin connection may wait with no request in flight.
    #[arg(long, default_value = "5m", value_parser = crate::parse_duration)]
    pub http_idle_timeout: Duration,
    /// Time for a new connection's TLS handshake and HTTP/2 preface.
    #[arg(long, default_value = "10s", value_parser = crate::parse_duration)]
    pub handshake_timeout: Duration,
    /// Time for an HTTP/1 request's headers on forward-auth (admin has its own).
    #[arg(long, default_value = "10s", value_parser = crate::parse_duration)]
    pub header_read_timeout: Duration,
    /// Time from a gRPC request's headers to the end of its body (to its first message on
    /// the access log stream).
    #[arg(long, default_value = "10s", value_parser = crate::parse_duration)]
    pub body_read_timeout: Duration,
    /// Streams one HTTP/2 connection may have open at once.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_streams: u32,
    /// Largest header list of a gRPC request, in bytes (name, value and 32 per field).
    #[arg(long, default_value_t = 16 << 10)]
    pub grpc_max_header_bytes: usize,
    /// Largest header list of a forward-auth or admin request, in bytes.
    #[arg(long, default_value_t = 60 << 10)]
    pub http_max_header_bytes: usize,
    /// Request bytes the gRPC listener holds at once across its connections (4 KiB per
    /// open stream plus the bodies read); a stream past it gets RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = crate::grpc::limits::DEFAULT_MAX_REQUEST_BYTES_IN_FLIGHT)]
    pub grpc_max_request_bytes_in_flight: usize,
}

/// File descriptors kept for everything but accepted connections: the listening sockets,
/// config files and their watcher, connections to Redis, out-of-process adapters and
/// exporters, the runtime's own.
pub const RESERVED_FDS: u64 = 256;

/// The three listeners' connection caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// gRPC.
    pub grpc: usize,
    /// Forward-auth.
    pub http: usize,
    /// Admin.
    pub admin: usize,
}

impl ListenerArgs {
    /// The caps' defaults.
    pub const DEFAULT_CAPS: Caps = Caps {
        grpc: 10_000,
        http: 10_000,
        admin: 100,
    };

    /// The caps asked for on the command line.
    pub fn caps(&self) -> Caps {
        Caps {
            grpc: self.grpc_max_connections,
            http: self.http_max_connections,
            admin: self.admin_max_connections,
        }
    }

    /// The gRPC listener's limits with `max_connections`.
    pub fn grpc(&self, max_connections: usize) -> Limits {
        Limits {
            max_connections,
            handshake_timeout: self.handshake_timeout,
            idle_timeout: self.grpc_idle_timeout,
            body_timeout: self.body_read_timeout,
            max_concurrent_streams: self.max_concurrent_streams,
            max_header_list_bytes: self.grpc_max_header_bytes,
            max_request_bytes_in_flight: self.grpc_max_request_bytes_in_flight,
        }
    }

    /// An HTTP listener's limits with `max_connections`.
    pub fn http(&self, max_connections: usize) -> HttpLimits {
        HttpLimits {
            max_connections,
            handshake_timeout: self.handshake_timeout,
            header_read_timeout: self.header_read_timeout,
            idle_timeout: self.http_idle_timeout,
            max_concurrent_streams: self.max_concurrent_streams,
            max_header_list_bytes: self.http_max_header_bytes,
            // Proxies in front of forward-auth bring every client from one address, and a
            // proxy's pooled connection may be about to carry a check: neither applies.
            max_connections_per_peer: 0,
            evict_idle_at_cap: false,
        }
    }

    /// The admin listener's limits with `max_connections`: those of [`Self::http`], shared
    /// among peers, with a shorter header-read timeout (README, "Operations: limits and
    /// timeouts").
    pub fn admin(&self, max_connections: usize) -> HttpLimits {
        HttpLimits {
            header_read_timeout: self.admin_header_read_timeout,
            max_connections_per_peer: self.admin_max_connections_per_peer,
            evict_idle_at_cap: true,
            ..self.http(max_connections)
        }
    }
}

/// Raises the soft limit of open files to the hard one (as Go's runtime and most servers do)
/// and returns it; `None` if it cannot be read.
pub fn raise_fd_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            return limit.maximum.or(Some(u64::MAX));
        }
    }
    Some(limit.current.unwrap_or(u64::MAX))
}

/// The caps fitted to `fd_limit` open files: unchanged when they fit beside
/// [`RESERVED_FDS`]; otherwise the admin listener keeps its cap and the gRPC and forward-auth
/// listeners share what is left in proportion to theirs, so that when both are full the
/// admin listener still has descriptors to accept probes with.
pub fn fit_caps(caps: Caps, fd_limit: u64) -> Caps {
    let wanted = [caps.grpc, caps.http, caps.admin]
        .iter()
        .map(|&c| c as u64)
        .sum::<u64>()
        + RESERVED_FDS;
    if wanted <= fd_limit {
        return caps;
    }
    let room = fd_limit.saturating_sub(RESERVED_FDS + caps.admin as u64);
    let data = (caps.grpc + caps.http).max(1) as u64;
    let grpc = (room * caps.grpc as u64 / data).max(1);
    let http = room.saturating_sub(grpc).max(1);
    Caps {
        grpc: usize::try_from(grpc).unwrap_or(usize::MAX),
        http: usize::try_from(http).unwrap_or(usize::MAX),
        admin: caps.admin,
    }
}

/// The `reason` of `mixer_connections_refused_total` for a connection reset at the cap of
/// connections from one address.
const PEER_LIMIT_REASON: &str = "peer_limit";

/// `mixer_connections_*` and `mixer_streams_refused_total`, by listener.
pub struct ListenerMetrics {
    open: IntGaugeVec,
    refused: IntCounterVec,
    timed_out: IntCounterVec,
    streams_refused: IntCounterVec,
    past_deadline: IntCounterVec,
    evicted: IntCounterVec,
}

impl ListenerMetrics {
    /// Registers the metrics in `registry`.
    pub fn new(registry: &Registry) -> prometheus::Result<ListenerMetrics> {
        let open = IntGaugeVec::new(
            Opts::new("mixer_connections_open", "Connections open, by listener."),
            &["listener"],
        )?;
        let refused = IntCounterVec::new(
            Opts::new(
                "mixer_connections_refused_total",
                "Connections not served: reset at the listener's connection cap \
                 (connection_limit) or at the cap of connections from one address \
                 (peer_limit), accepts that failed (accept_failed, most often no \
                 file descriptor left), or TLS handshakes that failed (tls_handshake: under \
                 mutual TLS, clients without a certificate from the client CA).",
            ),
            &["listener", "reason"],
        )?;
        let timed_out = IntCounterVec::new(
            Opts::new(
                "mixer_connections_timed_out_total",
                "Connections closed by a timeout: handshake, header_read or idle.",
            ),
            &["listener", "timeout"],
        )?;
        let streams_refused = IntCounterVec::new(
            Opts::new(
                "mixer_streams_refused_total",
                "Requests answered with an error before a front end saw them, the connection \
                 kept: header_list_too_large (431 / RESOURCE_EXHAUSTED), body_timeout \
                 (DEADLINE_EXCEEDED), request_budget (RESOURCE_EXHAUSTED: the gRPC \
                 listener held its most request bytes in flight).",
            ),
            &["listener", "reason"],
        )?;
        let past_deadline = IntCounterVec::new(
            Opts::new(
                "mixer_calls_past_deadline_total",
                "gRPC calls whose deadline (the client's grpc-timeout) passed before they were \
                 answered: answered DEADLINE_EXCEEDED, their handler calls cancelled.",
            ),
            &["listener"],
        )?;
        let evicted = IntCounterVec::new(
            Opts::new(
                "mixer_connections_evicted_total",
                "Connections with no request in flight closed at the listener's connection cap \
                 to let a new one in (admin).",
            ),
            &["listener"],
        )?;
        registry.register(Box::new(evicted.clone()))?;
        registry.register(Box::new(open.clone()))?;
        registry.register(Box::new(past_deadline.clone()))?;
        registry.register(Box::new(refused.clone()))?;
        registry.register(Box::new(timed_out.clone()))?;
        registry.register(Box::new(streams_refused.clone()))?;
        Ok(ListenerMetrics {
            open,
            refused,
            timed_out,
            streams_refused,
            past_deadline,
            evicted,
        })
    }

    /// The events of the listener called `listener`, with the counters of its sharing among
    /// peers (for [`crate::http_listener::serve`]).
    pub fn http_events(&self, listener: &str) -> (Arc<dyn Events>, SharingCounters) {
        let sharing = SharingCounters {
            peer_limit: self
                .refused
                .with_label_values(&[listener, PEER_LIMIT_REASON]),
            evicted: self.evicted.with_label_values(&[listener]),
        };
        (self.events(listener), sharing)
    }

    /// The events of the listener called `listener`, every series present from the start.
    pub fn events(&self, listener: &str) -> Arc<dyn Events> {
        let refused = |r: Refusal| self.refused.with_label_values(&[listener, r.label()]);
        let timed_out = |t: Timeout| self.timed_out.with_label_values(&[listener, t.label()]);
        let streams = |r: StreamRefusal| {
            self.streams_refused
                .with_label_values(&[listener, r.label()])
        };
        Arc::new(ListenerEvents {
            open: self.open.with_label_values(&[listener]),
            connection_limit: refused(Refusal::ConnectionLimit),
            accept_failed: refused(Refusal::AcceptFailed),
            tls_handshake: refused(Refusal::TlsHandshake),
            handshake: timed_out(Timeout::Handshake),
            header_read: timed_out(Timeout::HeaderRead),
            idle: timed_out(Timeout::Idle),
            header_list_too_large: streams(StreamRefusal::HeaderListTooLarge),
            body_timeout: streams(StreamRefusal::BodyTimeout),
            request_budget: streams(StreamRefusal::RequestBudget),
            past_deadline: self.past_deadline.with_label_values(&[listener]),
        })
    }
}

struct ListenerEvents {
    open: IntGauge,
    connection_limit: IntCounter,
    accept_failed: IntCounter,
    tls_handshake: IntCounter,
    handshake: IntCounter,
    header_read: IntCounter,
    idle: IntCounter,
    header_list_too_large: IntCounter,
    body_timeout: IntCounter,
    request_budget: IntCounter,
    past_deadline: IntCounter,
}

impl Events for ListenerEvents {
    fn event(&self, event: Event) {
        match event {
            Event::Opened => self.open.inc(),
            Event::Closed => self.open.dec(),
            Event::Refused(Refusal::ConnectionLimit) => self.connection_limit.inc(),
            Event::Refused(Refusal::AcceptFailed) => self.accept_failed.inc(),
            Event::Refused(Refusal::TlsHandshake) => self.tls_handshake.inc(),
            Event::TimedOut(Timeout::Handshake) => self.handshake.inc(),
            Event::TimedOut(Timeout::HeaderRead) => self.header_read.inc(),
            Event::TimedOut(Timeout::Idle) => self.idle.inc(),
            Event::StreamRefused(StreamRefusal::HeaderListTooLarge) => {
                self.header_list_too_large.inc()
            }
            Event::StreamRefused(StreamRefusal::BodyTimeout) => self.body_timeout.inc(),
            Event::StreamRefused(StreamRefusal::RequestBudget) => self.request_budget.inc(),
            Event::DeadlineExceeded => self.past_deadline.inc(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULTS: Caps = Caps {
        grpc: 10_000,
        http: 10_000,
        admin: 100,
    };

    #[test]
    fn the_flags_defaults_are_the_default_caps() {
        #[derive(clap::Parser)]
        struct Flags {
            #[command(flatten)]
            listeners: ListenerArgs,
        }
        let flags = <Flags as clap::Parser>::parse_from(["mixer"]);
        assert_eq!(flags.listeners.caps(), ListenerArgs::DEFAULT_CAPS);
        assert_eq!(DEFAULTS, ListenerArgs::DEFAULT_CAPS);
        let grpc = flags.listeners.grpc(1);
        assert_eq!(
            (grpc.idle_timeout, grpc.body_timeout),
            (Duration::from_secs(3600), Duration::from_secs(10))
        );
        // The admin listener is shared among peers; forward-auth, behind proxies, is not.
        let admin = flags.listeners.admin(100);
        assert_eq!(
            (
                admin.max_connections_per_peer,
                admin.evict_idle_at_cap,
                admin.header_read_timeout
            ),
            (10, true, Duration::from_secs(3))
        );
        let http = flags.listeners.http(100);
        assert_eq!(
            (http.max_connections_per_peer, http.evict_idle_at_cap),
            (0, false)
        );
    }

    #[test]
    fn caps_that_fit_are_kept() {
        assert_eq!(fit_caps(DEFAULTS, 1 << 20), DEFAULTS);
        assert_eq!(fit_caps(DEFAULTS, 20_356), DEFAULTS);
    }

    #[test]
    fn caps_past_the_fd_limit_leave_the_admin_listener_its_share() {
        // A common default soft limit.
        let fitted = fit_caps(DEFAULTS, 1024);
        assert_eq!(fitted.admin, 100);
        assert_eq!(fitted.grpc + fitted.http, 1024 - 256 - 100);
        assert_eq!(fitted.grpc, fitted.http);
        let uneven = fit_caps(
            Caps {
                grpc: 30_000,
                http: 10_000,
                admin: 100,
            },
            20_356,
        );
        assert_eq!((uneven.grpc, uneven.http), (15_000, 5_000));
        // Nothing left: one connection each rather than none.
        let tiny = fit_caps(DEFAULTS, 300);
        assert_eq!((tiny.grpc, tiny.http), (1, 1));
    }

    #[test]
    fn the_metrics_count_each_listener_apart() {
        let registry = Registry::new();
        let metrics = ListenerMetrics::new(&registry).expect("register");
        let grpc = metrics.events("grpc");
        let _http = metrics.events("http");
        grpc.event(Event::Opened);
        grpc.event(Event::Refused(Refusal::ConnectionLimit));
        grpc.event(Event::StreamRefused(StreamRefusal::BodyTimeout));
        let mut text = Vec::new();
        prometheus::Encoder::encode(
            &prometheus::TextEncoder::new(),
            &registry.gather(),
            &mut text,
        )
        .expect("encode");
        let text = String::from_utf8(text).expect("UTF-8");
        for line in [
            r#"mixer_connections_open{listener="grpc"} 1"#,
            r#"mixer_connections_open{listener="http"} 0"#,
            r#"mixer_connections_refused_total{listener="grpc",reason="connection_limit"} 1"#,
            r#"mixer_connections_refused_total{listener="http",reason="connection_limit"} 0"#,
            r#"mixer_streams_refused_total{listener="grpc",reason="body_timeout"} 1"#,
            r#"mixer_connections_timed_out_total{listener="http",timeout="idle"} 0"#,
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}

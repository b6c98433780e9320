//! Envoy's gRPC access log service: `envoy.service.accesslog.v3.AccessLogService/StreamAccessLogs`,
//! what Envoy's `envoy.access_loggers.http_grpc` and `envoy.access_loggers.tcp_grpc` loggers
//! stream to. Every entry becomes one attribute bag, reported through the active snapshot (the
//! report rules pick what to do with it), like a Mixer v1 Report record.
//!
//! A client-streaming method, so the one front end the mixer's gRPC server hands to tonic's
//! routes ([`crate::grpc::routes`]) rather than serving it directly.
//!
//! ## The stream
//!
//! Envoy opens one stream per logger (and worker thread) and keeps it open. The first message
//! carries the `identifier` (node and `log_name`); later ones carry only entries, so the
//! identifier is remembered for the whole stream. Each message holds a batch of HTTP entries
//! or of TCP entries. Entries are reported in order as they arrive. The (empty) response is
//! only sent when Envoy closes its side.
//!
//! ## From an entry to attributes
//!
//! HTTP and TCP entries share `common_properties` ([`AccessLogCommon`]):
//!
//! | attribute | from |
//! |---|---|
//! | `source.ip`, `source.port` | `downstream_remote_address` (socket addresses only) |
//! | `destination.ip`, `destination.port` | `upstream_remote_address`, else `downstream_local_address` |
//! | `connection.mtls` | true when the downstream TLS session has a peer certificate; always set |
//! | `connection.requested_server_name` | `tls_properties.tls_sni_hostname` |
//! | `source.principal`, `source.namespace` | the first URI SAN of the peer certificate (namespace from a SPIFFE `/ns/<ns>/` path) |
//! | `destination.principal`, `destination.namespace` | the same from the local certificate |
//! | `request.time` | `start_time` |
//! | `response.duration` (HTTP) | `time_to_last_downstream_tx_byte`, else `duration` |
//! | `response.time` (HTTP) | `start_time` + `response.duration` |
//! | `connection.duration` (TCP) | `duration`, else `time_to_last_downstream_tx_byte` |
//! | `response.flags`, `context.proxy_error_code` | `response_flags` as Envoy prints `%RESPONSE_FLAGS%`: short names joined with `,` in Envoy's order (`UH,UF`), `-` when none |
//! | `connection.id` | `stream_id` |
//! | `context.reporter.kind`, `destination.service.host` | an Istio cluster name in `upstream_cluster` (`outbound\|9080\|\|reviews.default.svc.cluster.local`): its direction (`inbound`/`outbound`) and host. Other cluster names set neither |
//! | `context.reporter.uid` | an Istio node id (`sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local`) in the identifier: `kubernetes://pod.ns` |
//! | `context.time` | the mixer's clock |
//!
//! HTTP entries (`HTTPAccessLogEntry`) add:
//!
//! | attribute | from |
//! |---|---|
//! | `request.method` | `request.request_method` (unset when `METHOD_UNSPECIFIED` or unknown) |
//! | `request.scheme`, `request.host`, `request.useragent`, `request.referer`, `request.id` | `request.scheme`, `authority`, `user_agent`, `referer`, `request_id`, when not empty |
//! | `request.path`, `request.url_path`, `request.query_params` | `request.path` as sent, and split at `?` (a repeated parameter keeps its first value) |
//! | `request.headers` | `request.request_headers` with lower-case names (Envoy sends only the headers named in `additional_request_headers_to_log`) |
//! | `request.size`, `request.total_size` | `request_body_bytes`; `request_headers_bytes` + `request_body_bytes` |
//! | `response.code` | `response.response_code` |
//! | `response.size`, `response.total_size` | `response_body_bytes`; `response_headers_bytes` + `response_body_bytes` |
//! | `response.headers` | `response.response_headers`, lower-case names |
//! | `response.grpc_status`, `response.grpc_message` | `grpc-status` / `grpc-message` from the trailers, else from the headers (trailers-only answers) |
//! | `context.protocol` | `grpc` when there is a `grpc-status` or an `application/grpc` content type in the logged headers, else `http` |
//!
//! TCP entries (`TCPAccessLogEntry`) add:
//!
//! | attribute | from |
//! |---|---|
//! | `context.protocol` | `tcp` |
//! | `connection.event` | `access_log_type`: `open` (connection start, upstream connected), `continue` (periodic), `close` (connection end, and entries without a type: Envoy then logs a connection once, at its end) |
//! | `connection.received.bytes_total`, `connection.sent.bytes_total` | `connection_properties.received_bytes` / `sent_bytes` (Envoy's running totals) |
//! | `connection.received.bytes`, `connection.sent.bytes` | the same minus what the previous entry of the same connection (`stream_id`) on this stream said, as Istio defined them; the totals when there is no earlier entry |
//!
//! Envoy-specific values have no standard attribute; they are set as undeclared attributes,
//! which rules can read once an `attributemanifest` declares them: `envoy.upstream_cluster`
//! (STRING), `envoy.route_name` (STRING), `envoy.log_name` (STRING, the identifier's
//! `log_name`), `envoy.node.id` (STRING), `envoy.response_code_details` (STRING) and
//! `envoy.custom_tags` (STRING_MAP, the logger's `custom_tags`).
//!
//! Not mapped: `metadata`, `filter_state_objects` (typed `Any` values), upstream timings other
//! than the ones above, wire byte counts, the HTTP version, `original_path`, `forwarded_for`.
//!
//! ## Answers and errors
//!
//! * No valid config: UNAVAILABLE "no valid config is active", before anything is read.
//! * A message that does not decode: INVALID_ARGUMENT for the stream (tonic reports it as
//!   INTERNAL; it is the client's bytes that are wrong). Entries of earlier messages have
//!   been reported; the server keeps serving other streams.
//! * A message over the 4 MiB limit: RESOURCE_EXHAUSTED (tonic's OUT_OF_RANGE, recoded by
//!   `mixer-grpc`), as for the other front ends.
//! * A message with more entries than `--max-access-log-entries` (10,000): INVALID_ARGUMENT
//!   naming the limit and its flag, for the stream; none of that message's entries are
//!   reported (those of earlier messages have been).
//! * A queue that is full drops instances (counted in `mixer_report_dropped_total`); Envoy
//!   never reads an answer, so nothing else is said.
//! * Otherwise, when Envoy closes its side, the empty `StreamAccessLogsResponse`.

mod attributes;

use std::sync::Arc;

use envoy_types::pb::envoy::service::accesslog::v3::access_log_service_server::{
    AccessLogService, AccessLogServiceServer,
};
use envoy_types::pb::envoy::service::accesslog::v3::stream_access_logs_message::{
    Identifier, LogEntries,
};
use envoy_types::pb::envoy::service::accesslog::v3::{
    StreamAccessLogsMessage, StreamAccessLogsResponse,
};
use mixer_model::{AttributeBag, Timestamp};
use mixer_runtime::{Runtime, Snapshot};
use tonic::{Code, Request, Response, Status, Streaming};

#[doc(no_inline)]
pub use envoy_types::pb::envoy::data::accesslog::v3::AccessLogCommon;

pub use attributes::{
    CUSTOM_TAGS_ATTRIBUTE, ConnectionTotals, LOG_NAME_ATTRIBUTE, NODE_ID_ATTRIBUTE,
    RESPONSE_CODE_DETAILS_ATTRIBUTE, ROUTE_NAME_ATTRIBUTE, UPSTREAM_CLUSTER_ATTRIBUTE, fill_http,
    fill_tcp, response_flags,
};

/// The access log service, ready to add to a tonic server.
pub fn service(runtime: Arc<Runtime>) -> AccessLogServiceServer<AccessLog> {
    AccessLogServiceServer::new(AccessLog::new(runtime))
}

/// The `AccessLogService` implementation; [`service`] wraps it in its tonic server type.
#[derive(Clone)]
pub struct AccessLog {
    runtime: Arc<Runtime>,
}

impl std::fmt::Debug for AccessLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessLog").finish_non_exhaustive()
    }
}

/// What one stream did, for the logs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamSummary {
    /// Messages read.
    pub messages: usize,
    /// Entries reported.
    pub entries: usize,
    /// Instances queued for handlers.
    pub queued: usize,
    /// Instances dropped because a queue was full.
    pub dropped: usize,
}

/// One open stream: the identifier from its first message, the byte counts of its TCP
/// connections, and a bag reused for every entry.
struct StreamState {
    identifier: Option<Identifier>,
    totals: ConnectionTotals,
    summary: StreamSummary,
}

impl AccessLog {
    /// A service reporting through `runtime`'s active snapshot.
    pub fn new(runtime: Arc<Runtime>) -> AccessLog {
        AccessLog { runtime }
    }

    /// Reports the entries of one message on the report threads. The snapshot is taken per
    /// message, so a long-lived stream follows config reloads.
    async fn handle(
        &self,
        mut state: StreamState,
        message: StreamAccessLogsMessage,
    ) -> Result<StreamState, Status> {
        let entries = match &message.log_entries {
            Some(LogEntries::HttpLogs(logs)) => logs.log_entry.len(),
            Some(LogEntries::TcpLogs(logs)) => logs.log_entry.len(),
            None => 0,
        };
        self.runtime
            .limits()
            .access_log_entries
            .check(
                entries,
                &format!(
                    "entries in message {} of the stream",
                    state.summary.messages
                ),
            )
            .map_err(Status::invalid_argument)?;
        let snapshot = self.runtime.snapshot();
        self.runtime
            .run_report(async move {
                report_message(&snapshot, &mut state, message).await;
                state
            })
            .await
            .map_err(|e| Status::unavailable(e.to_string()))
    }
}

/// Puts the instances of one message's entries on the report queues.
async fn report_message(
    snapshot: &Snapshot,
    state: &mut StreamState,
    message: StreamAccessLogsMessage,
) {
    state.summary.messages += 1;
    if let Some(identifier) = message.identifier {
        // Envoy sends it on the first message only; a later one replaces it.
        state.identifier = Some(identifier);
    }
    let Some(entries) = message.log_entries else {
        return;
    };
    let mut bag = AttributeBag::new(snapshot.vocabulary().clone());
    let identifier = state.identifier.as_ref();
    match entries {
        LogEntries::HttpLogs(logs) => {
            for entry in &logs.log_entry {
                bag.clear();
                fill_http(&mut bag, identifier, entry, Timestamp::now());
                let outcome = mixer_runtime::report(snapshot, &bag).await;
                state.summary.entries += 1;
                state.summary.queued += outcome.queued;
                state.summary.dropped += outcome.dropped;
            }
        }
        LogEntries::TcpLogs(logs) => {
            for entry in &logs.log_entry {
                bag.clear();
                fill_tcp(
                    &mut bag,
                    identifier,
                    entry,
                    &mut state.totals,
                    Timestamp::now(),
                );
                let outcome = mixer_runtime::report(snapshot, &bag).await;
                state.summary.entries += 1;
                state.summary.queued += outcome.queued;
                state.summary.dropped += outcome.dropped;
            }
        }
    }
}

/// A stream error from tonic, as the client should see it.
fn stream_error(status: Status) -> Status {
    match status.code() {
        // tonic (following gRPC's status code guide) reports bytes that do not decode as
        // INTERNAL; here they are the client's fault. Other INTERNAL errors pass through.
        Code::Internal if status.message().starts_with("failed to decode") => {
            Status::invalid_argument(format!(
                "malformed StreamAccessLogsMessage: {}",
                status.message()
            ))
        }
        _ => status,
    }
}

#[tonic::async_trait]
impl AccessLogService for AccessLog {
    async fn stream_access_logs(
        &self,
        request: Request<Streaming<StreamAccessLogsMessage>>,
    ) -> Result<Response<StreamAccessLogsResponse>, Status> {
        self.runtime
            .ready_snapshot()
            .map_err(crate::request_scope::grpc_status)?;
        let mut stream = request.into_inner();
        let mut state = StreamState {
            identifier: None,
            totals: ConnectionTotals::new(),
            summary: StreamSummary::default(),
        };
        loop {
            match stream.message().await {
                Ok(Some(message)) => state = self.handle(state, message).await?,
                Ok(None) => break,
                Err(status) => {
                    let status = stream_error(status);
                    tracing::debug!(
                        summary = ?state.summary,
                        "access log stream failed: {}",
                        status.message()
                    );
                    return Err(status);
                }
            }
        }
        if state.summary.dropped > 0 {
            tracing::debug!(summary = ?state.summary, "access log stream: instances dropped");
        }
        Ok(Response::new(StreamAccessLogsResponse {}))
    }
}

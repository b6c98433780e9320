//! Out-of-process adapters: a gRPC client that makes an adapter running in another process
//! look like a local handler. It speaks Istio 1.4's adapter protocol (the
//! `InfrastructureBackend` service and one `Handle<Template>Service` per template, generated
//! in `mixer-proto`), so adapters written for Istio's Mixer work unchanged.
//!
//! The runtime never sees this crate: the server installs a [`RemoteAdapterFactory`] in the
//! mixer's adapter registry (`mixer_config::AdapterRegistry`) with `register_remote`, and every
//! handler whose config has a `connection` is built by it into a [`RemoteHandler`], which
//! implements the same handler traits as a built-in adapter.
//!
//! What a remote handler does for each call:
//!
//! 1. **Circuit breaker** ([`BreakerOptions`]): after 5 consecutive failures calls fail at
//!    once (`CircuitOpen`, counted as `circuit_open`) for 500 ms, then one probe goes through.
//! 2. **Concurrency limit** ([`OopOptions::max_concurrency`], 256): over it, `Overloaded`.
//! 3. **Deadline**: `connection.timeout`, or 1 s; it covers session creation and the call,
//!    is sent to the adapter as `grpc-timeout`, and past it the call is `Timeout` and the
//!    next call goes over a new HTTP/2 connection (the adapter's host may have vanished
//!    without closing the old one).
//! 4. **Session**: the first call asks `CreateSession`; if the adapter has one, later calls
//!    send only the session id (`adapter_config.type_url` = [`SESSION_TYPE_URL`], `value` =
//!    the id in UTF-8); otherwise (`Unimplemented`) every call carries the params (see
//!    below). `Handler::close` closes the session. When the handler's `adapter` document
//!    says `session_based: false`, no session is asked for.
//! 5. **Retries**: report batches only, on retryable errors, 3 attempts with backoff
//!    (100 ms, 200 ms) under one `dedup_id`. Checks and quota are never retried: the
//!    handler's fail policy decides (closed for checks, open for quota by default).
//!
//! Errors map to [`AdapterError`](mixer_adapter_api::AdapterError) kinds: unreachable →
//! `Unavailable`, deadline → `Timeout`, undecodable answer → `InvalidResponse`, breaker or
//! limit → `Overloaded`, a template the adapter does not serve → `InvalidInstance`.
//!
//! At config load, [`RemoteAdapterFactory`] calls the adapter's `Validate` (2 s at most): a
//! refusal rejects the config with the adapter's message and the previous config stays; an
//! adapter that cannot be reached is accepted with a warning (it may start after the mixer).
//!
//! ## Params: the adapter's own message, or a Struct
//!
//! Like Istio 1.4, a handler's `params` go in the adapter's own config message when an
//! `adapter` document describes it: its `spec.config` is the base64 of a serialized
//! `google.protobuf.FileDescriptorSet`, and its top-level message named `Params` is the
//! config message (`mixer-config` checks the params against it at load, and passes the
//! descriptor as [`RemoteHandlerSpec::params_descriptor`](mixer_remote::RemoteHandlerSpec)).
//! The YAML is read with proto3's JSON mapping (`backendAddress` or `backend_address`, enums
//! by name, durations as `"1.5s"`, nested messages, lists, maps) and sent as an `Any` of type
//! `type.googleapis.com/<package>.Params` ([`typed_params_any`]); params that do not fit are
//! refused by [`RemoteAdapter::compile_remote`](mixer_remote::RemoteAdapter::compile_remote), so
//! the config is rejected and the previous one stays. Without an `adapter` document (or with
//! an empty `config`) the params go as a `google.protobuf.Struct` ([`STRUCT_TYPE_URL`],
//! [`params_any`]).
//!
//! ```yaml
//! kind: adapter
//! metadata: {name: mygrpcadapter}
//! spec:
//!   templates: [metric]
//!   config: CnQKDGNvbmZpZy5wcm90bxIU...   # base64 -w0 of `protoc --include_imports -o set.bin`
//! ---
//! kind: handler
//! metadata: {name: mygrpc}
//! spec:
//!   adapter: mygrpcadapter            # name, name.namespace or name.adapter.namespace
//!   connection: {address: "127.0.0.1:9070"}
//!   params: {filePath: /tmp/out.txt, max_entries: 10}   # -> mygrpcadapter.config.Params
//! ```
//!
//! ## TLS: `connection.authentication`
//!
//! Istio 1.4's block, with its field names (the adapter side is `mixer-adapter-sdk`'s
//! `Server::tls`):
//!
//! ```yaml
//! connection:
//!   address: adapter.istio-system:9070      # host:port; TLS implies https (http:// is refused)
//!   authentication:
//!     tls:                                  # the adapter proves itself with a certificate
//!       caCertificates: /etc/certs/root-cert.pem   # trusted on top of the system's CAs
//!       tokenPath: /var/run/secrets/adapter-token  # optional, sent with every call:
//!       authHeader: BEARER                  # `authorization: Bearer <token>`; PLAIN: as is;
//!                                           # or customHeader: x-api-key
//!       serverName: adapter.example         # optional: the name checked, and sent as SNI
//!   # or mutual: {clientCertificate: ..., privateKey: ..., caCertificates: ..., serverName: ...}
//! ```
//!
//! Instead of `tokenPath`, the token may come from an OAuth 2.0 token endpoint, with the
//! client-credentials grant (RFC 6749 section 4.4):
//!
//! ```yaml
//!     tls:
//!       caCertificates: /etc/certs/root-cert.pem   # also trusted for an https tokenUrl
//!       oauth:
//!         clientId: mixer
//!         clientSecret: /var/run/secrets/oauth-client-secret   # a file, read per request
//!         tokenUrl: https://idp.example/oauth2/token
//!         scopes: [adapter.check]             # optional, sent as `scope=adapter.check`
//!         endpointParams: {audience: adapter} # optional, more form fields
//!       # authHeader / customHeader as above; without either: `authorization: Bearer`
//! ```
//!
//! - Certificate and key files are read and PEM-checked when the config loads (errors carry
//!   their field path) and rustls's own refusals, such as a key that does not match its
//!   certificate, reject the config too. Their contents are part of the handler's config:
//!   a reload after a rotation builds the handler again with the new files.
//! - The token file is read again when the last read is older than [`TOKEN_REFRESH`]
//!   (1 s), so a rotated token needs no reload; it is trimmed, and if the file becomes
//!   unreadable the last good token is kept (with a warning).
//! - OAuth: the token request is a form-encoded POST (`grant_type=client_credentials`,
//!   `scope`, the endpoint parameters) with the client id and secret in an
//!   `authorization: Basic` header (section 2.3.1); the answer must be a Bearer token. The
//!   secret file is read for every request, so a rotated secret needs no reload. The token
//!   is kept until `expires_in` (5 minutes when the answer does not say) and replaced in the
//!   background from 10% of its lifetime (10 s at most) before that; a call that finds no
//!   token waits for one, but not past its deadline. After a failed request, calls that find
//!   no token fail at once until a backoff (250 ms, doubling up to 30 s) lets one try again.
//!   The error is `Unavailable`, names the handler and says what the endpoint answered, so
//!   the handler's fail policy applies. An `http://` URL to another host loads with a
//!   warning (the secret would cross the network readable); redirects are not followed and
//!   proxies are not used.
//! - A failed handshake (unknown CA, wrong name, no client certificate) is an `Unavailable`
//!   error that names the handler and rustls's reason; the handler's fail policy applies.
//! - Unlike Istio 1.4: `mutual` checks the adapter's certificate against `serverName` (or
//!   the address's host) like `tls` does, where Istio ignored the name and wanted a SPIFFE
//!   URI equal to the mixer's own; `tls` without a token is allowed; with `oauth`,
//!   `authHeader: PLAIN` and `customHeader` are honoured (Istio always sent a bearer token),
//!   `endpointParams` are sent (Istio dropped them) and the secret is re-read (Istio read it
//!   once, untrimmed); `mutual` has no default mixer certificate to fall back to.
//!
//! Metrics (`mixer_oop_*`, see [`metrics`]) are served through `Handler::as_exposition`.
//!
//! ```
//! use std::sync::Arc;
//! use mixer_adapter_api::BuildContext;
//! use mixer_adapter_api::host::AnyAdapter;
//! use mixer_remote::{RemoteAdapter, RemoteConnection, RemoteHandlerSpec};
//! use mixer_config::AdapterRegistry;
//! use mixer_oop::{OopOptions, RemoteAdapterFactory};
//!
//! let factory = Arc::new(RemoteAdapterFactory::new(OopOptions { validate: false, ..Default::default() }));
//! let mut registry = AdapterRegistry::new();
//! registry.register_remote(factory.clone());
//!
//! // Building needs no adapter: the channel connects on the first call.
//! let connection = RemoteConnection { address: "127.0.0.1:1".into(), timeout: None, authentication: None };
//! let params = serde_json::json!({"list": ["a"]});
//! let spec = RemoteHandlerSpec {
//!     handler_name: "h.istio-system".into(), adapter: "myadapter", params: &params, params_descriptor: None, session_based: None,
//!     connection: &connection, instances: &[], declared_templates: None,
//! };
//! let compiled = factory.compile_remote(&spec).unwrap();
//! assert!(compiled.unreachable.is_none());
//! let ctx = BuildContext { handler_name: spec.handler_name.clone() };
//! let handler = factory.build_compiled(&compiled.config, &ctx).unwrap();
//! assert!(handler.as_check().is_some() && handler.as_report().is_some());
//! ```

mod breaker;
mod connection;
mod convert;
mod factory;
mod handler;
pub mod metrics;
mod oauth;
mod options;
mod reflection;
mod tls;
mod token;
mod trace_context;
mod transport;
mod typed;

pub use breaker::{Admission, BreakerOptions, CircuitBreaker, CircuitState};
pub use connection::{AdapterConnection, ResponseBody, TransportError};
pub use convert::{
    SESSION_TYPE_URL, STRUCT_TYPE_URL, apikey_generated, check_result, inferred_types,
    jwt_generated, kubernetes_generated, params_any, quota_result, session_any, value, value_type,
};
pub use factory::{RemoteAdapterFactory, ValidateOutcome};
pub use handler::RemoteHandler;
pub use options::OopOptions;
pub use reflection::templates_served;
pub use token::REFRESH as TOKEN_REFRESH;
pub use typed::{adapter_config, typed_params_any};

/// Conversions of instances to each template's `InstanceMsg`.
pub mod instances {
    pub use crate::convert::{
        apikey, authorization, jwt, kubernetes, listentry, logentry, metric, quota, tracespan,
    };
}

//! Serve an adapter out of process: any [`Adapter`](mixer_adapter_api::Adapter) of the
//! adapter API, the very type a mixer builds in, answers the mixer over gRPC with Istio 1.4's
//! out-of-process adapter protocol. A handler points at it with `adapter: NAME` and
//! `connection: {address: HOST:PORT}`.
//!
//! There is one adapter API: typed params ([`Adapter::Config`](mixer_adapter_api::Adapter),
//! compiled once), a handler built from them, instances read through their templates' typed
//! views ([`mixer_model::ListEntryInstance`] and so on), answers as
//! [`mixer_model::CheckResult`] and the like, [`AdapterError`](mixer_adapter_api::AdapterError)
//! for "could not decide". An adapter written for the SDK can be built into a mixer, and a
//! built-in one (`Server::new(mixer_adapter_denier::Denier)`) served by the SDK, unchanged.
//! For convenience the SDK re-exports the two crates ([`api`], [`model`]) and
//! [`async_trait`](macro@async_trait).
//!
//! ```no_run
//! use std::{collections::HashSet, sync::Arc, time::Duration};
//!
//! use mixer_adapter_sdk::api::{Adapter, AdapterError, AdapterInfo, BuildContext, Handler};
//! use mixer_adapter_sdk::api::{ParamError, Stability};
//! use mixer_adapter_sdk::model::{CheckResult, Code, ListEntryInstance, Status, Template};
//!
//! /// Lets through the values listed in the handler's `params.allowed`.
//! struct Allow;
//!
//! static INFO: AdapterInfo = AdapterInfo {
//!     name: "allow",
//!     description: "lets through the values listed in params.allowed",
//!     templates: &[Template::ListEntry],
//!     cacheable: true,
//!     stability: Stability::Alpha,
//! };
//!
//! /// The handler's params.
//! #[derive(serde::Deserialize)]
//! #[serde(deny_unknown_fields)]
//! struct Config {
//!     allowed: Vec<String>,
//! }
//!
//! impl Adapter for Allow {
//!     type Config = Config;
//!     type Compiled = HashSet<String>;
//!
//!     fn info(&self) -> &AdapterInfo {
//!         &INFO
//!     }
//!
//!     // Runs when the mixer loads a config naming this adapter (Validate, CreateSession):
//!     // bad params are a config error, not a request-time surprise.
//!     fn compile(&self, config: Config) -> Result<HashSet<String>, Vec<ParamError>> {
//!         if config.allowed.is_empty() {
//!             return Err(vec![ParamError::new("allowed", "name at least one value")]);
//!         }
//!         Ok(config.allowed.into_iter().collect())
//!     }
//!
//!     fn build(&self, allowed: &HashSet<String>, _: &BuildContext)
//!         -> Result<Arc<dyn Handler>, AdapterError> {
//!         let allowed = allowed.clone();
//!         Ok(mixer_adapter_sdk::check_fn(move |instance| {
//!             let entry = ListEntryInstance::of(instance).and_then(|entry| entry.value);
//!             let value = entry.as_ref().and_then(|v| v.as_str()).unwrap_or_default();
//!             let mut answer = CheckResult::ok(Duration::from_secs(5), 1000);
//!             if !allowed.contains(value) {
//!                 answer.status = Status::new(Code::PermissionDenied, format!("{value} is not allowed"));
//!             }
//!             Ok(answer)
//!         }))
//!     }
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     mixer_adapter_sdk::serve(Allow) // on argv[1], $ADAPTER_ADDR, or 127.0.0.1:9070
//! }
//! ```
//!
//! A report adapter's `build` returns [`report_fn`] with a function of the batch
//! (`Fn(&[Instance]) -> Result<(), AdapterError>`). A handler that must `.await` (it asks a
//! backend) is a type of its own with `impl Handler` (`as_check`, `as_report`) and
//! `#[async_trait] impl CheckHandler` (or `ReportHandler`, whose `report` is async too); [`Server`] is
//! [`serve`] with every piece (runtime, address, TLS, token, typed params) in your hands.
//!
//! What the SDK does for you:
//!
//! - registers `/listentry.HandleListEntryService/HandleListEntry` (and so on) for each
//!   template the adapter declares, and no other, so the mixer's Validate of a handler whose
//!   instances use another template fails at config load, not at request time;
//! - keeps the session contract: a call carrying a session id it does not know (the
//!   adapter restarted) is answered NOT_FOUND before anything is done, and the mixer then
//!   creates a new session and sends the call again (README.md, "Sessions, and restarts");
//! - serves `InfrastructureBackend`: `Validate` compiles the params
//!   ([`AnyAdapter::compile`](mixer_adapter_api::AnyAdapter::compile)) and answers
//!   INVALID_ARGUMENT with each [`ParamError`](mixer_adapter_api::ParamError) as
//!   `path: message`; `CreateSession` compiles and builds a handler and keeps it under a new
//!   session id; calls that carry the id use it; `CloseSession` closes it
//!   ([`Handler::close`](mixer_adapter_api::Handler::close)) once the calls holding it are
//!   done. Calls that carry params instead (no session) share a handler built from the same
//!   params, kept in a small cache. Past 1024 sessions (or 32 distinct carried params), the
//!   least recently used handler is closed, so that sessions a mixer forgot without closing
//!   them do not pile up; a mixer that still used it is told NOT_FOUND and opens another;
//! - reads the params as JSON (the mixer sends a `google.protobuf.Struct`), or as the
//!   adapter's own protobuf message, by its descriptor ([`Server::params_message`]);
//! - turns each template's wire message into a [`mixer_model::Instance`]: a field at its
//!   proto3 default (an empty string, 0, `false`, an empty map, an absent message) is left
//!   out, so its view reads `None`, as for a field whose expression found nothing;
//! - drops a report batch whose `dedup_id` it has already handled (the mixer retries a batch
//!   under the same id when an answer is lost), so retries are not recorded twice, and hands
//!   a quota call's `dedup_id` to the handler as
//!   [`QuotaArgs::deduplication_id`](mixer_adapter_api::QuotaArgs::deduplication_id);
//! - maps an [`AdapterError`](mixer_adapter_api::AdapterError) (could not decide) to a gRPC
//!   status the mixer reads back as the same kind (UNAVAILABLE, DEADLINE_EXCEEDED,
//!   RESOURCE_EXHAUSTED, INVALID_ARGUMENT, INTERNAL), so the handler's `failPolicy` and
//!   retries apply as they would built in; a handler without the side a declared template
//!   needs answers UNIMPLEMENTED;
//! - serves `grpc.health.v1.Health`, with each registered service `SERVING`;
//! - serves over TLS, or mutual TLS with a client CA, when given a [`ServerTls`] with
//!   [`Server::tls`] (the handler's `connection.authentication` on the mixer's side), and
//!   refuses calls without the mixer's token with [`Server::require_token`].
//!
//! README.md beside this crate walks from `cargo new` to a check answered through a running
//! mixer.

mod check_fn;
mod convert;
mod generate_fn;
mod handlers;
mod params;
mod report_fn;
mod server;
mod services;
mod tls;
mod token;
mod watched_file;

pub use check_fn::check_fn;
pub use generate_fn::generate_fn;
pub use report_fn::report_fn;
pub use server::{DEFAULT_ADDR, Server, listen_addr, serve};
pub use tls::ServerTls;
pub use token::RequiredToken;
pub use watched_file::WatchedFile;

/// Handlers implement their async traits with it.
pub use async_trait::async_trait;
/// The adapter API an adapter implements (the same crate the mixer's built-in adapters use).
pub use mixer_adapter_api as api;
/// The conformance kit (feature `testkit`): `testkit::assert_adapter_conforms(adapter, params)`.
#[cfg(feature = "testkit")]
pub use mixer_adapter_api::testkit;
/// The mixer's model: instances and their typed views, values, check and quota results.
pub use mixer_model as model;

/// The wire protocol, for tests and tools that call an adapter directly (an adapter itself
/// never needs it).
pub use mixer_proto as proto;

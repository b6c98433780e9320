//! Write an out-of-process (OOP) Mixer adapter in Rust: implement one trait per template,
//! name the templates in a [`Server`], serve. The mixer reaches the adapter over gRPC, with
//! Istio 1.4's adapter protocol; a handler points at it with `adapter: NAME` and
//! `connection: {address: HOST:PORT}`.
//!
//! An adapter never touches generated code: instances arrive as plain Rust structs
//! ([`ListEntryInstance`], [`MetricInstance`]...) whose dynamic fields are [`Value`]s, and the
//! handler's `params` arrive as JSON ([`Config`]), or, when the mixer's config has an `adapter`
//! document describing the adapter's own config message, as that message
//! ([`Config::decode`] gives the prost type).
//!
//! ```no_run
//! use mixer_adapter_sdk::{Adapter, CheckResult, Config, Error, ListEntry, ListEntryInstance, Server};
//!
//! /// Lets through the values listed in the handler's `params.allowed`.
//! struct Allow;
//!
//! impl Adapter for Allow {
//!     // Called when the mixer loads a config naming this adapter: reject bad params early.
//!     fn validate(&self, config: &Config) -> Result<(), String> {
//!         match config.get("allowed") {
//!             Some(serde_json::Value::Array(_)) => Ok(()),
//!             _ => Err("params.allowed: expected a list of strings".into()),
//!         }
//!     }
//! }
//!
//! impl ListEntry for Allow {
//!     async fn check(&self, instance: &ListEntryInstance, config: &Config) -> Result<CheckResult, Error> {
//!         let allowed = config["allowed"].as_array().into_iter().flatten();
//!         Ok(if allowed.filter_map(|v| v.as_str()).any(|v| v == instance.value) {
//!             CheckResult::ok()
//!         } else {
//!             CheckResult::deny(format!("{} is not allowed", instance.value))
//!         })
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> std::io::Result<()> {
//!     Server::new(Allow).list_entry().serve("127.0.0.1:9070").await
//! }
//! ```
//!
//! What the SDK does for you:
//!
//! - serves `InfrastructureBackend`: `Validate` calls [`Adapter::validate`]; `CreateSession`
//!   validates and stores the params under a new session id; request-time calls carrying that
//!   id get the stored params; `CloseSession` drops them. Calls carrying params directly (a
//!   `google.protobuf.Struct`, or the adapter's own message, in `adapter_config`) get those.
//! - registers `/listentry.HandleListEntryService/HandleListEntry` (and so on) only for the
//!   templates you name, so the mixer's Validate of a handler whose instances use another
//!   template fails at config load, not at request time;
//! - serves `grpc.health.v1.Health`, with each registered service `SERVING`;
//! - serves over TLS, or mutual TLS with a client CA, when given a [`ServerTls`] with
//!   [`Server::tls`] (the handler's `connection.authentication` on the mixer's side);
//! - drops a report batch whose `dedup_id` it has already handled (the mixer retries a batch
//!   under the same id when an answer is lost), so retries are not recorded twice;
//! - maps [`Error`] (could not decide) to a gRPC status, which the mixer treats by the
//!   handler's `failPolicy`, and [`CheckResult`] (a decision) to the wire result.
//!
//! README.md beside this crate walks from `cargo new` to a check answered through a running
//! mixer.

mod config;
mod convert;
mod server;
mod services;
mod sessions;
mod tls;
mod token;
mod traits;
mod types;

pub use config::Config;
pub use convert::params_to_any;
pub use server::{Server, listen_addr};
pub use tls::ServerTls;
pub use token::RequiredToken;
pub use traits::{
    Adapter, Authorization, CheckNothing, ListEntry, LogEntry, Metric, Quota, ReportNothing,
    TraceSpan,
};
pub use types::{
    Action, AuthorizationInstance, CheckNothingInstance, CheckResult, Code, Error,
    ListEntryInstance, LogEntryInstance, MetricInstance, QuotaArgs, QuotaInstance, QuotaResult,
    ReportNothingInstance, Subject, TraceSpanInstance, Value, Values,
};

/// The wire protocol, for tests and tools that call an adapter directly (an adapter itself
/// never needs it).
pub use mixer_proto as proto;

//! Generated code for the protocols under `proto/`: the Istio Mixer v1 API
//! (`istio.mixer.v1.Mixer` with Check and Report), the `google.rpc.Status` it carries, and
//! Istio 1.4's out-of-process adapter protocol:
//!
//! - [`istio::mixer::adapter::model::v1beta1`]: `InfrastructureBackend` (Validate,
//!   CreateSession, CloseSession) and the results `CheckResult`, `QuotaRequest`/`QuotaResult`,
//!   `ReportResult`;
//! - [`istio::policy::v1beta1`]: `Value` (dynamically typed instance fields) and `ValueType`;
//! - one module per template at the crate root, named after its proto package as Istio named
//!   them ([`authorization`], [`checknothing`], [`listentry`], [`quota`], [`metric`],
//!   [`logentry`], [`tracespan`], [`reportnothing`]), each with `InstanceMsg`,
//!   `Handle<T>Request`, the client `handle_<t>_service_client` and the server
//!   `handle_<t>_service_server`. [`template`] re-exports them under one roof;
//! - the attribute generators, whose method answers an `OutputMsg`: Istio 1.4's
//!   kubernetesenv template ([`adapter::template::kubernetes`], its package) and our own
//!   [`jwt`] and [`apikey`], written in the same generated style.
//!
//! The `.proto` files were written from the wire format Istio 1.0-1.4 proxies speak (same
//! packages, message names, field numbers and types; gogoproto options dropped). Both the
//! server trait ([`istio::mixer::v1::mixer_server`]) and the client
//! ([`istio::mixer::v1::mixer_client`]) are generated; well-known types
//! (`Timestamp`, `Duration`, `Any`) come from `prost-types`.
//!
//! ```
//! use mixer_proto::istio::mixer::v1::{CheckRequest, CompressedAttributes};
//! use prost::Message;
//!
//! let mut attributes = CompressedAttributes::default();
//! attributes.words.push("bob".into());
//! attributes.strings.insert(19, -1); // global word 19 (request.method) = message word 0
//! let request = CheckRequest { attributes: Some(attributes), global_word_count: 221, ..Default::default() };
//! let bytes = request.encode_to_vec();
//! assert_eq!(CheckRequest::decode(bytes.as_slice()).unwrap(), request);
//! ```
//!
//! An adapter-side request:
//!
//! ```
//! use mixer_proto::istio::policy::v1beta1::{Value, value};
//! use mixer_proto::listentry::{HandleListEntryRequest, InstanceMsg};
//!
//! let request = HandleListEntryRequest {
//!     instance: Some(InstanceMsg { name: "appversion.instance.istio-system".into(), value: "v1".into() }),
//!     dedup_id: "42".into(),
//!     ..Default::default()
//! };
//! let v = Value { value: Some(value::Value::StringValue("v1".into())) };
//! assert_eq!(request.instance.unwrap().value, "v1");
//! assert!(matches!(v.value, Some(value::Value::StringValue(_))));
//! ```

/// The serialized `google.protobuf.FileDescriptorSet` of every file above, for gRPC server
/// reflection (an adapter serving it tells the mixer which `Handle<Template>Service`s it
/// serves).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/mixer_descriptor.bin"));

/// `google.*` packages.
pub mod google {
    /// `google.rpc`: the status message.
    pub mod rpc {
        #![allow(missing_docs, clippy::all, clippy::pedantic)]
        include!(concat!(env!("OUT_DIR"), "/google.rpc.rs"));
    }
}

/// `istio.*` packages.
pub mod istio {
    /// `istio.mixer`.
    pub mod mixer {
        /// `istio.mixer.v1`: the Mixer API proxies speak.
        pub mod v1 {
            #![allow(missing_docs, clippy::all, clippy::pedantic)]
            include!(concat!(env!("OUT_DIR"), "/istio.mixer.v1.rs"));
        }

        /// `istio.mixer.adapter`.
        pub mod adapter {
            /// `istio.mixer.adapter.model`.
            pub mod model {
                /// `istio.mixer.adapter.model.v1beta1`: the out-of-process adapter model
                /// (`InfrastructureBackend`, check/quota/report results).
                pub mod v1beta1 {
                    #![allow(missing_docs, clippy::all, clippy::pedantic)]
                    include!(concat!(
                        env!("OUT_DIR"),
                        "/istio.mixer.adapter.model.v1beta1.rs"
                    ));
                }
            }
        }
    }

    /// `istio.policy`.
    pub mod policy {
        /// `istio.policy.v1beta1`: `Value` and `ValueType`, the dynamic types of instance fields.
        pub mod v1beta1 {
            #![allow(missing_docs, clippy::all, clippy::pedantic)]
            include!(concat!(env!("OUT_DIR"), "/istio.policy.v1beta1.rs"));
        }
    }
}

/// `authorization`: the template's `InstanceMsg` and `HandleAuthorizationService`.
pub mod authorization {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/authorization.rs"));
}

/// `checknothing`: the template's `InstanceMsg` and `HandleCheckNothingService`.
pub mod checknothing {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/checknothing.rs"));
}

/// `listentry`: the template's `InstanceMsg` and `HandleListEntryService`.
pub mod listentry {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/listentry.rs"));
}

/// `quota`: the template's `InstanceMsg` and `HandleQuotaService`.
pub mod quota {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/quota.rs"));
}

/// `metric`: the template's `InstanceMsg` and `HandleMetricService`.
pub mod metric {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/metric.rs"));
}

/// `logentry`: the template's `InstanceMsg` and `HandleLogEntryService`.
pub mod logentry {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/logentry.rs"));
}

/// `tracespan`: the template's `InstanceMsg` and `HandleTraceSpanService`.
pub mod tracespan {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/tracespan.rs"));
}

/// `reportnothing`: the template's `InstanceMsg` and `HandleReportNothingService`.
pub mod reportnothing {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/reportnothing.rs"));
}

/// `jwt` (ours): the template's `InstanceMsg`, `OutputMsg` and `HandleJwtService`.
pub mod jwt {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/jwt.rs"));
}

/// `apikey` (ours): the template's `InstanceMsg`, `OutputMsg` and `HandleApiKeyService`.
pub mod apikey {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/apikey.rs"));
}

/// `adapter.*`: Istio named the kubernetesenv template's package `adapter.template.kubernetes`.
pub mod adapter {
    /// `adapter.template`.
    pub mod template {
        /// `adapter.template.kubernetes`: the template's `InstanceMsg`, `OutputMsg` and
        /// `HandleKubernetesService`.
        pub mod kubernetes {
            #![allow(missing_docs, clippy::all, clippy::pedantic)]
            include!(concat!(env!("OUT_DIR"), "/adapter.template.kubernetes.rs"));
        }
    }
}

/// The per-template modules under one name (`mixer_proto::template::metric` is
/// `mixer_proto::metric`). The generated code lives at the crate root because its package
/// names (`metric`, `quota`...) are top-level, as in Istio.
pub mod template {
    pub use crate::adapter::template::kubernetes;
    pub use crate::{
        apikey, authorization, checknothing, jwt, listentry, logentry, metric, quota,
        reportnothing, tracespan,
    };
}

/// A test adapter's config message, `testadapter.config.Params` (from
/// `testdata/typed_params.proto`), and the serialized `google.protobuf.FileDescriptorSet` that
/// describes it, as an `adapter` resource's `spec.config` carries it (base64-encoded). For tests
/// of typed handler params; only with the `testdata` feature.
#[cfg(feature = "testdata")]
pub mod testdata {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/testadapter.config.rs"));

    /// The descriptor set of `typed_params.proto` and its imports (`google/protobuf/duration.proto`).
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/typed_params.bin"));
}

//! Generated code for the protocols under `proto/`: the Istio Mixer v1 API
//! (`istio.mixer.v1.Mixer` with Check and Report) and the `google.rpc.Status` it carries.
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
    }
}

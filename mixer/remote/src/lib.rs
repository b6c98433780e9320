//! What the config says about an out-of-process adapter, and how the mixer builds its
//! handlers.
//!
//! A handler whose config names a `connection` is not looked up by adapter name: the config
//! loader (`mixer-config`) reads its [`RemoteConnection`] (address, deadline, and Istio's
//! `authentication`: [`Tls`] or [`MutualTls`], an access token from a file or from an OAuth
//! 2.0 token endpoint, certificates as [`PemFile`]s read at load), and the runtime gathers a
//! [`RemoteHandlerSpec`]: its params (encoded into the adapter's own message when a
//! [`ParamsDescriptor`] is known), that connection, and the [`RemoteInstance`]s rules send it
//! with their [`InferredField`] types. One [`RemoteAdapter`] implementation, the gRPC client
//! in `mixer-oop`, compiles every such handler when config loads (asking the adapter to
//! validate its params and which templates it serves) and builds it like any other adapter;
//! the server registers it with `mixer_config::AdapterRegistry::register_remote`. The runtime
//! never depends on that implementation: it sees the adapter API's traits only.
//!
//! These are the mixer's own settings: an adapter, in process or out of it, never sees them,
//! which is why they are not part of `mixer-adapter-api`.

mod connection;
mod spec;

pub use connection::{
    AccessToken, Authentication, MutualTls, OAuthClient, PemFile, RemoteConnection, Tls,
    TokenHeader, TokenSource,
};
pub use spec::{
    InferredField, ParamsDescriptor, RemoteAdapter, RemoteCompiled, RemoteHandlerSpec,
    RemoteInstance,
};

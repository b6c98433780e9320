//! gRPC server reflection (`grpc.reflection.v1` and `v1alpha`) on the gRPC listener, so that
//! `grpcurl -plaintext HOST:9091 list` names every service the listener serves.
//!
//! The list is taken from the paths the server routes (its unary methods, its streaming
//! paths, its health service), not written out a second time: a service registered later
//! is listed without editing this file. Descriptors are served for the files whose
//! descriptor sets are in the build (Mixer v1, gRPC health, reflection itself); Envoy's and
//! OTLP's services are listed by name only, since `envoy-types` and `opentelemetry-proto`
//! ship no descriptor sets.
//!
//! Each service is built on its first call ([`Lazy`]), not at start: building one decodes
//! every descriptor set it serves (about 15M instructions for the two, at every start and
//! in every short-lived `mixer serve` of a test), and most listeners are never asked.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::NamedService;
use tonic::service::RoutesBuilder;
use tower_service::Service;

/// The reflection services, by the path of their one (bidirectional streaming) method: the
/// gRPC listener treats them as streaming requests.
pub const PATHS: [&str; 2] = [
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

/// The service names of gRPC paths (`/package.Service/Method`), each once, sorted; paths
/// of another shape are left out.
pub fn services<'a>(paths: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    paths
        .into_iter()
        .filter_map(|path| path.strip_prefix('/')?.split_once('/'))
        .map(|(service, _)| service)
        .filter(|service| !service.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The name a tonic service is routed under.
pub fn name_of<S: NamedService>(_: &S) -> &'static str {
    S::NAME
}

/// Adds reflection v1 and v1alpha to `routes`, listing `served` (service names) and the
/// reflection services themselves. Each is built on its first call ([`Lazy`]); a descriptor
/// set that does not decode then fails that call with INTERNAL (the sets are compiled in:
/// this module's tests build both).
pub fn add(routes: &mut RoutesBuilder, served: &BTreeSet<String>) {
    let names = Arc::new(names(served));
    let v1 = names.clone();
    routes.add_service(Lazy::new(move || builder(&v1).build_v1()));
    routes.add_service(Lazy::new(move || builder(&names).build_v1alpha()));
}

/// `served` and the reflection services themselves.
fn names(served: &BTreeSet<String>) -> BTreeSet<String> {
    let mut names = served.clone();
    names.extend(services(PATHS));
    names
}

/// A reflection builder over the descriptor sets in the build, listing `names`.
fn builder(names: &BTreeSet<String>) -> tonic_reflection::server::Builder<'static> {
    names.iter().fold(
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(mixer_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET),
        |builder, name| builder.with_service_name(name.clone()),
    )
}

/// A tonic service `S` built by `build` on its first call and kept for the next ones (every
/// clone shares it), routed under `S`'s name.
struct Lazy<S> {
    built: Arc<OnceLock<Result<S, String>>>,
    build: Arc<dyn Fn() -> Result<S, String> + Send + Sync>,
}

impl<S> Lazy<S> {
    fn new<E: std::fmt::Display>(
        build: impl Fn() -> Result<S, E> + Send + Sync + 'static,
    ) -> Lazy<S> {
        Lazy {
            built: Arc::new(OnceLock::new()),
            build: Arc::new(move || build().map_err(|e| e.to_string())),
        }
    }
}

impl<S> Clone for Lazy<S> {
    fn clone(&self) -> Lazy<S> {
        Lazy {
            built: self.built.clone(),
            build: self.build.clone(),
        }
    }
}

impl<S: NamedService> NamedService for Lazy<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<Body>> for Lazy<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

    /// Always ready: tonic's generated servers are, and the service is built in `call`.
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        match self.built.get_or_init(|| (self.build)()) {
            // A clone per call, as tonic's router clones a service per request.
            Ok(service) => Box::pin(service.clone().call(request)),
            Err(e) => {
                let status =
                    tonic::Status::internal(format!("gRPC reflection is unavailable: {e}"));
                Box::pin(std::future::ready(Ok(status.into_http())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The services are built on their first call, so their descriptor sets are proven to
    /// decode here rather than at each start.
    #[test]
    fn both_versions_build_from_the_descriptor_sets_in_the_build() {
        let names = names(&services(["/istio.mixer.v1.Mixer/Check"]));
        assert!(names.contains("grpc.reflection.v1.ServerReflection"));
        assert!(builder(&names).build_v1().is_ok());
        assert!(builder(&names).build_v1alpha().is_ok());
    }

    #[test]
    fn services_are_named_once_from_their_paths() {
        let got = services([
            "/istio.mixer.v1.Mixer/Check",
            "/istio.mixer.v1.Mixer/Report",
            "/grpc.health.v1.Health/Check",
            "not-a-path",
            "//Method",
        ]);
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            ["grpc.health.v1.Health", "istio.mixer.v1.Mixer"]
        );
    }
}

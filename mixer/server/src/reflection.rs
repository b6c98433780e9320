//! gRPC server reflection (`grpc.reflection.v1` and `v1alpha`) on the gRPC listener, so that
//! `grpcurl -plaintext HOST:9091 list` names every service the listener serves.
//!
//! The list is taken from the paths the server routes (its unary methods, its streaming
//! paths, its health service), not written out a second time: a service registered later
//! is listed without editing this file. Descriptors are served for the files whose
//! descriptor sets are in the build (Mixer v1, gRPC health, reflection itself); Envoy's and
//! OTLP's services are listed by name only, since `envoy-types` and `opentelemetry-proto`
//! ship no descriptor sets.

use std::collections::BTreeSet;

use tonic::server::NamedService;
use tonic::service::RoutesBuilder;

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
/// reflection services themselves.
pub fn add(routes: &mut RoutesBuilder, served: &BTreeSet<String>) -> anyhow::Result<()> {
    let mut names = served.clone();
    names.extend(services(PATHS));
    let builder = || {
        names.iter().fold(
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(mixer_proto::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET),
            |builder, name| builder.with_service_name(name.clone()),
        )
    };
    routes.add_service(builder().build_v1()?);
    routes.add_service(builder().build_v1alpha()?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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

//! A gRPC server reflection client from the upstream proto (`tonic_reflection::pb`), for
//! tests that ask a server which services it lists.

/// The services a gRPC server lists through server reflection, asked with `$version` of the
/// reflection protocol (`v1` or `v1alpha` of `tonic_reflection::pb`), sorted.
macro_rules! reflected_services {
    ($version:ident, $addr:expr) => {{
        use tonic_reflection::pb::$version::ServerReflectionRequest;
        use tonic_reflection::pb::$version::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::$version::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::$version::server_reflection_response::MessageResponse;
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", $addr))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        let ask = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut answers = ServerReflectionClient::new(channel)
            .server_reflection_info(futures_util::stream::iter([ask]))
            .await
            .expect("server reflection")
            .into_inner();
        let answer = answers
            .message()
            .await
            .expect("answer")
            .expect("one answer");
        let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
            panic!("not a service list: {answer:?}");
        };
        let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
        names.sort();
        names
    }};
}

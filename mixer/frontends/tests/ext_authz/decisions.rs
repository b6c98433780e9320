//! Allow, deny and could-not-decide answers over the wire: statuses, headers, metadata.

use super::*;
use envoy_types::pb::envoy::config::core::v3::HeaderValueOption;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{DeniedHttpResponse, OkHttpResponse};
use envoy_types::pb::google::protobuf::value::Kind;
use tonic::Code;

fn ok_response(response: &CheckResponse) -> &OkHttpResponse {
    match &response.http_response {
        Some(HttpResponse::OkResponse(ok)) => ok,
        other => panic!("expected an OK response, got {other:?}"),
    }
}

fn denied_response(response: &CheckResponse) -> &DeniedHttpResponse {
    match &response.http_response {
        Some(HttpResponse::DeniedResponse(denied)) => denied,
        other => panic!("expected a denied response, got {other:?}"),
    }
}

fn header<'a>(options: &'a [HeaderValueOption], name: &str) -> Option<&'a HeaderValueOption> {
    options
        .iter()
        .find(|o| o.header.as_ref().is_some_and(|h| h.key == name))
}

fn header_value<'a>(options: &'a [HeaderValueOption], name: &str) -> Option<&'a str> {
    header(options, name).and_then(|o| o.header.as_ref().map(|h| h.value.as_str()))
}

fn metadata_field<'a>(response: &'a CheckResponse, key: &str) -> Option<&'a Kind> {
    response
        .dynamic_metadata
        .as_ref()
        .and_then(|m| m.fields.get(key))
        .and_then(|v| v.kind.as_ref())
}

fn matched_rules(response: &CheckResponse) -> Vec<String> {
    match metadata_field(response, "matched_rules") {
        Some(Kind::ListValue(list)) => list
            .values
            .iter()
            .filter_map(|v| match &v.kind {
                Some(Kind::StringValue(s)) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        other => panic!("matched_rules missing: {other:?}"),
    }
}

#[tokio::test]
async fn allowed_request_gets_header_operations_and_metadata() {
    let (mut client, _) = serve(ready_runtime()).await;
    let response = check(
        &mut client,
        http_check(
            "GET",
            "/products?page=2",
            &[("x-user", "alice"), ("authorization", "Bearer t")],
        ),
    )
    .await;
    assert_eq!(status_code(&response), 0);
    let ok = ok_response(&response);

    let user = header(&ok.headers, "x-mixer-user").expect("x-mixer-user set");
    assert_eq!(header_value(&ok.headers, "x-mixer-user"), Some("alice"));
    // REPLACE: overwrite-or-add, with the deprecated flag agreeing for older Envoys.
    assert_eq!(user.append_action, 2, "OVERWRITE_IF_EXISTS_OR_ADD");
    #[allow(deprecated)]
    let append = user.append.map(|b| b.value);
    assert_eq!(append, Some(false));

    let trace = header(&ok.headers, "x-mixer-trace").expect("x-mixer-trace set");
    assert_eq!(
        trace.header.as_ref().map(|h| h.value.as_str()),
        Some("mixer")
    );
    assert_eq!(trace.append_action, 0, "APPEND_IF_EXISTS_OR_ADD");
    #[allow(deprecated)]
    let append = trace.append.map(|b| b.value);
    assert_eq!(append, Some(true));

    assert_eq!(ok.headers_to_remove, vec!["authorization".to_string()]);
    assert_eq!(
        header_value(&ok.response_headers_to_add, "x-mixer-checked"),
        Some("yes")
    );

    assert_eq!(
        matched_rules(&response),
        vec!["tag-user.rule.istio-system".to_string()]
    );
    assert_eq!(
        metadata_field(&response, "cache_hit"),
        Some(&Kind::BoolValue(false))
    );
    assert_eq!(
        metadata_field(&response, "status"),
        Some(&Kind::StringValue("OK".into()))
    );
}

/// The `decision_id` of an answer's dynamic metadata.
fn decision_id(response: &CheckResponse) -> String {
    match metadata_field(response, "decision_id") {
        Some(Kind::StringValue(id)) => id.clone(),
        other => panic!("decision_id missing: {other:?}"),
    }
}

#[tokio::test]
async fn allowed_and_denied_answers_carry_their_decision_id() {
    let (mut client, _) = serve(ready_runtime()).await;
    let allowed = check(&mut client, http_check("GET", "/", &[])).await;
    let denied = check(
        &mut client,
        http_check("GET", "/", &[("x-mixer-deny", "true")]),
    )
    .await;
    assert_eq!(status_code(&denied), 7, "PERMISSION_DENIED");
    let (a, d) = (decision_id(&allowed), decision_id(&denied));
    for id in [&a, &d] {
        assert_eq!(id.len(), 32, "{id}");
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    }
    assert_ne!(a, d);
}

#[tokio::test]
async fn anonymous_user_is_tagged_by_default() {
    let (mut client, _) = serve(ready_runtime()).await;
    let response = check(&mut client, http_check("GET", "/", &[])).await;
    let ok = ok_response(&response);
    assert_eq!(header_value(&ok.headers, "x-mixer-user"), Some("anonymous"));
}

#[tokio::test]
async fn header_rule_denies_with_403_body_and_response_headers() {
    let (mut client, _) = serve(ready_runtime()).await;
    let response = check(
        &mut client,
        http_check("GET", "/", &[("x-mixer-deny", "true")]),
    )
    .await;
    assert_eq!(status_code(&response), 7, "PERMISSION_DENIED");
    assert_eq!(
        response.status.as_ref().map(|s| s.message.as_str()),
        Some("denied by policy")
    );
    let denied = denied_response(&response);
    assert_eq!(denied.status.as_ref().map(|s| s.code), Some(403));
    assert_eq!(denied.body, "denied by policy");
    // Response header operations of every matched rule reach the client, request ones do not.
    assert_eq!(
        header_value(&denied.headers, "x-denied-by"),
        Some("deny-on-header")
    );
    assert_eq!(
        header_value(&denied.headers, "x-mixer-checked"),
        Some("yes")
    );
    assert!(header(&denied.headers, "x-mixer-user").is_none());
    let rules = matched_rules(&response);
    assert!(
        rules.contains(&"deny-on-header.rule.istio-system".to_string()),
        "{rules:?}"
    );
    assert_eq!(
        metadata_field(&response, "status"),
        Some(&Kind::StringValue("PERMISSION_DENIED".into()))
    );
}

#[tokio::test]
async fn url_path_rule_denies_admin_but_not_its_query() {
    let (mut client, _) = serve(ready_runtime()).await;
    let response = check(&mut client, http_check("GET", "/admin/users?x=1", &[])).await;
    assert_eq!(status_code(&response), 7);
    assert_eq!(
        denied_response(&response).status.as_ref().map(|s| s.code),
        Some(403)
    );
    // The query string is not part of request.url_path.
    let response = check(&mut client, http_check("GET", "/shop?next=/admin", &[])).await;
    assert_eq!(status_code(&response), 0);
}

#[tokio::test]
async fn bad_principal_is_unauthenticated_401() {
    let (mut client, _) = serve(ready_runtime()).await;
    let request = with_source(
        http_check("GET", "/", &[]),
        "10.0.0.1",
        "spiffe://cluster.local/ns/x/sa/bad",
    );
    let response = check(&mut client, request).await;
    assert_eq!(status_code(&response), 16, "UNAUTHENTICATED");
    let denied = denied_response(&response);
    assert_eq!(denied.status.as_ref().map(|s| s.code), Some(401));
    assert_eq!(denied.body, "workload identity not accepted");

    let request = with_source(
        http_check("GET", "/", &[]),
        "10.0.0.1",
        "spiffe://cluster.local/ns/x/sa/good",
    );
    assert_eq!(status_code(&check(&mut client, request).await), 0);
}

#[tokio::test]
async fn source_ip_rule_uses_the_socket_address() {
    let (mut client, _) = serve(ready_runtime()).await;
    let request = with_source(http_check("GET", "/", &[]), "10.9.9.9", "");
    let response = check(&mut client, request).await;
    assert_eq!(status_code(&response), 7);
    let rules = matched_rules(&response);
    assert!(
        rules.contains(&"deny-source-ip.rule.istio-system".to_string()),
        "{rules:?}"
    );
}

#[tokio::test]
async fn context_extensions_reach_rules() {
    let (mut client, _) = serve(ready_runtime()).await;
    let mut request = http_check("GET", "/", &[]);
    if let Some(attrs) = request.attributes.as_mut() {
        attrs.context_extensions = strings(&[("tier", "blocked")]);
    }
    assert_eq!(status_code(&check(&mut client, request).await), 7);
}

#[tokio::test]
async fn resource_exhausted_is_429() {
    let (mut client, _) = serve(ready_runtime()).await;
    let response = check(&mut client, http_check("POST", "/limited/orders", &[])).await;
    assert_eq!(status_code(&response), 8, "RESOURCE_EXHAUSTED");
    let denied = denied_response(&response);
    assert_eq!(denied.status.as_ref().map(|s| s.code), Some(429));
    assert_eq!(denied.body, "slow down");
}

// ---------------------------------------------------------------- could not decide

#[tokio::test]
async fn handler_failing_closed_is_unavailable_not_a_denial() {
    let (mut client, _) = serve(ready_runtime()).await;
    let status = client
        .check(http_check("GET", "/", &[("x-fail", "1")]))
        .await
        .expect_err("a failed handler must not produce an answer");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("broken"), "{}", status.message());
    // The server keeps serving.
    assert_eq!(
        status_code(&check(&mut client, http_check("GET", "/", &[])).await),
        0
    );
}

#[tokio::test]
async fn no_config_yet_is_unavailable() {
    let (mut client, _) = serve(runtime()).await;
    let status = client
        .check(http_check("GET", "/", &[]))
        .await
        .expect_err("not ready");
    assert_eq!(status.code(), Code::Unavailable);
}

/// Checks on one thread reuse one attribute bag: nothing of a check may stay in it for the
/// next. Each request below lacks what made the one before it denied.
#[test]
fn a_check_sees_nothing_of_the_check_before_it() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let authz = mixer_frontends::ext_authz::ExtAuthz::new(ready_runtime());
    let bad = "spiffe://cluster.local/ns/x/sa/bad";
    let mut blocked_tier = http_check("GET", "/", &[]);
    if let Some(attributes) = blocked_tier.attributes.as_mut() {
        attributes
            .context_extensions
            .insert("tier".into(), "blocked".into());
    }
    rt.block_on(async {
        for _ in 0..3 {
            let decide = |request: CheckRequest| {
                let authz = &authz;
                async move { status_code(&authz.decide(&request).await.expect("decided")) }
            };
            let principal = with_source(http_check("GET", "/", &[]), "10.0.0.1", bad);
            assert_eq!(decide(principal).await, Code::Unauthenticated as i32);
            assert_eq!(
                decide(http_check("GET", "/", &[])).await,
                0,
                "source.principal stayed in the bag"
            );
            assert_ne!(decide(blocked_tier.clone()).await, 0);
            assert_eq!(
                decide(http_check("GET", "/", &[])).await,
                0,
                "context.extensions stayed in the bag"
            );
        }
    });
}

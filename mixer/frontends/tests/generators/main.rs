//! Attribute generators behind the HTTP check front ends: a generator's denial is answered
//! as each protocol answers an UNAUTHENTICATED check (forward-auth 401 with the
//! `WWW-Authenticate` header, ext_authz a denied response with status 401 and the header),
//! and an accepted credential's bound attribute reaches the rules (a header operation).
//!
//! The generator is a test adapter for the `jwt` template that accepts one fixed token: the
//! front ends' part is the mapping, not the verification.

use std::sync::Arc;

use async_trait::async_trait;
use axum::body::Body;
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Request};
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest, CheckResponse};
use mixer_adapter_api::host::Params;
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, AttributeHandler, BuildContext, Denial, Generated, Handler,
    ParamError, Stability,
};
use mixer_config::{AdapterRegistry, ConfigOptions, SourceFile};
use mixer_model::{Code, HeaderOp, HeaderOperation, Instance, JwtInstance, Status, Template};
use mixer_runtime::{ConfigOrigin, Runtime, RuntimeMetrics, RuntimeOptions};
use tower::ServiceExt;

const CONFIG: &str = r#"
kind: handler
metadata: {name: tokens, namespace: istio-system}
spec: {compiledAdapter: tokens}
---
kind: instance
metadata: {name: bearer, namespace: istio-system}
spec:
  compiledTemplate: jwt
  params:
    token: request.headers["authorization"] | ""
  attributeBindings:
    request.auth.principal: $out.principal | ""
---
kind: rule
metadata: {name: authenticate, namespace: istio-system}
spec:
  actions: [{handler: tokens, instances: [bearer]}]
---
kind: rule
metadata: {name: tag-principal, namespace: istio-system}
spec:
  requestHeaderOperations:
  - name: x-mixer-principal
    values: [request.auth.principal]
"#;

/// The one token [`Tokens`] accepts, for principal `issuer/alice`.
const GOOD: &str = "Bearer good";

struct Tokens;

static TOKENS: AdapterInfo = AdapterInfo {
    name: "tokens",
    description: "accepts one fixed bearer token",
    templates: &[Template::Jwt],
    cacheable: true,
    stability: Stability::Alpha,
};

impl Adapter for Tokens {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &TOKENS
    }
    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        Ok(params)
    }
    fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(TokensHandler))
    }
}

struct TokensHandler;

impl Handler for TokensHandler {
    fn as_attributes(&self) -> Option<&dyn AttributeHandler> {
        Some(self)
    }
}

#[async_trait]
impl AttributeHandler for TokensHandler {
    async fn generate(&self, instance: &Instance) -> Result<Generated, AdapterError> {
        let token = JwtInstance::of(instance).and_then(|j| j.token);
        if token == Some(GOOD) {
            return Ok(Generated::outputs(vec![(
                "principal",
                "issuer/alice".into(),
            )]));
        }
        Ok(Generated::denied(Denial {
            status: Status::new(Code::Unauthenticated, "missing or invalid token"),
            response_headers: vec![HeaderOperation {
                name: "www-authenticate".into(),
                value: "Bearer error=\"invalid_token\"".into(),
                op: HeaderOp::Replace,
            }],
        }))
    }
}

fn runtime() -> Arc<Runtime> {
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(Tokens));
    let runtime = Arc::new(Runtime::new(
        ConfigOrigin::Embedded(vec![SourceFile::new("generators_test.yaml", CONFIG)]),
        registry,
        ConfigOptions::default(),
        RuntimeOptions::default(),
        RuntimeMetrics::unregistered(),
    ));
    if let Err(e) = runtime.reload() {
        panic!("test config rejected: {e}");
    }
    runtime
}

async fn forward_auth(runtime: &Arc<Runtime>, token: Option<&str>) -> axum::response::Response {
    let router = mixer_frontends::forward_auth::router(runtime.clone(), Default::default());
    let mut request = axum::http::Request::get("/check").header("x-forwarded-uri", "/orders");
    if let Some(token) = token {
        request = request.header("authorization", token);
    }
    router
        .oneshot(request.body(Body::empty()).expect("request"))
        .await
        .expect("answered")
}

#[tokio::test]
async fn forward_auth_answers_a_generators_denial_with_401_and_its_header() {
    let runtime = runtime();
    for token in [None, Some("Bearer forged")] {
        let response = forward_auth(&runtime, token).await;
        assert_eq!(response.status(), 401, "{token:?}");
        assert_eq!(
            response.headers()["www-authenticate"],
            "Bearer error=\"invalid_token\""
        );
    }
    let response = forward_auth(&runtime, Some(GOOD)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-mixer-principal"], "issuer/alice");
}

fn ext_authz_check(token: Option<&str>) -> CheckRequest {
    let mut headers = std::collections::HashMap::from([
        (":method".to_string(), "GET".to_string()),
        (":path".to_string(), "/orders".to_string()),
    ]);
    if let Some(token) = token {
        headers.insert("authorization".into(), token.into());
    }
    CheckRequest {
        attributes: Some(AttributeContext {
            request: Some(Request {
                http: Some(HttpRequest {
                    method: "GET".into(),
                    path: "/orders".into(),
                    headers,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

async fn ext_authz(runtime: &Arc<Runtime>, token: Option<&str>) -> CheckResponse {
    let service = mixer_frontends::ext_authz::ExtAuthz::new(runtime.clone());
    service
        .decide(&ext_authz_check(token))
        .await
        .expect("decided")
}

#[tokio::test]
async fn ext_authz_answers_a_generators_denial_unauthenticated_with_its_header() {
    let runtime = runtime();
    let response = ext_authz(&runtime, Some("Bearer forged")).await;
    assert_eq!(
        response.status.as_ref().map(|s| s.code),
        Some(Code::Unauthenticated as i32)
    );
    let Some(HttpResponse::DeniedResponse(denied)) = &response.http_response else {
        panic!("denied response expected: {response:?}");
    };
    assert_eq!(denied.status.as_ref().map(|s| s.code), Some(401));
    let header = denied
        .headers
        .iter()
        .filter_map(|h| h.header.as_ref())
        .find(|h| h.key == "www-authenticate")
        .expect("WWW-Authenticate in the denied response");
    assert_eq!(header.value, "Bearer error=\"invalid_token\"");
    let response = ext_authz(&runtime, Some(GOOD)).await;
    assert!(matches!(
        response.http_response,
        Some(HttpResponse::OkResponse(_))
    ));
}

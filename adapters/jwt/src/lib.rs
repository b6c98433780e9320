//! The `jwt` adapter: an attribute generator (template `jwt`) that verifies a bearer token
//! (JWT, as OIDC providers issue them) and answers its claims as outputs, which an instance's
//! `attributeBindings` bind to `request.auth.principal`, `request.auth.claims` and the rest.
//!
//! - Signatures: RS256/384/512, PS256/384/512, ES256/384 and EdDSA against the issuer's keys;
//!   HS256/384/512 only against a configured `secret`, never against a key from a JWKS (so an
//!   RSA public key cannot be used as an HMAC secret).
//! - Keys: inline (`jwks`), from `jwksUri`, or from the issuer's OIDC discovery document.
//!   Fetched keys are refreshed on their `Cache-Control: max-age` (bounded by
//!   `minRefreshInterval` and `maxRefreshInterval`) and when a token names an unknown `kid`
//!   (at most once a second per handler), so a rotated key works without a reload; a provider
//!   that is down leaves the keys fetched before in use. No keys at all is an
//!   [`AdapterError`](mixer_adapter_api::AdapterError): the handler's fail policy applies.
//! - Claims: `iss` must be the configured issuer, `aud` one of `audiences` (when given), `exp`
//!   is required, and `exp`/`nbf` are checked with `leeway` (default 60s).
//! - A missing token gives no outputs (a rule on the principal decides) unless `requireToken`;
//!   a bad one is a denial: UNAUTHENTICATED with `WWW-Authenticate: Bearer
//!   error="invalid_token", error_description="<reason>"`. The reason is logged, never the token.
//!
//! ```
//! use mixer_adapter_api::BuildContext;
//! use mixer_adapter_api::host::AnyAdapter;
//! use mixer_adapter_jwt::JwtAdapter;
//! use mixer_model::{Code, FieldValue, Instance, Template, Value};
//!
//! let params = serde_json::json!({
//!     "issuer": "https://issuer.example",
//!     "jwks": r#"{"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1",
//!         "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
//!         "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}"#,
//! });
//! let config = JwtAdapter.compile(&params).expect("valid params");
//! let ctx = BuildContext { handler_name: "jwt.istio-system".into() };
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! rt.block_on(async {
//!     let handler = JwtAdapter.build_compiled(&config, &ctx).expect("built");
//!     let jwt = handler.as_attributes().expect("an attribute generator");
//!     let instance = Instance {
//!         name: "credential.istio-system".into(),
//!         template: Template::Jwt,
//!         fields: vec![("token", FieldValue::Value(Value::from("Bearer not-a-token")))],
//!     };
//!     let answer = jwt.generate(&instance).await.expect("decided");
//!     let denial = answer.denial.expect("denied");
//!     assert_eq!(denial.status.code, Code::Unauthenticated);
//!     assert!(denial.response_headers[0].value.starts_with("Bearer error=\"invalid_token\""));
//! });
//! ```

mod handler;
mod keys;
mod params;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use mixer_adapter_api::secrets::SecretParam;
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, Handler, ParamError, Stability,
};
use mixer_model::Template;

pub use handler::{JwtHandler, MAX_TOKEN};
pub use keys::{KeySet, KeyStore, MAX_DOCUMENT, MAX_KEYS, MAX_RSA_BITS, UNKNOWN_KID_INTERVAL};
pub use params::{JwtConfig, JwtParams, KeySource};

static INFO: AdapterInfo = AdapterInfo {
    name: "jwt",
    description: "Verifies a bearer token (JWT/OIDC) into request.auth attributes",
    templates: &[Template::Jwt],
    // What it answers depends only on the token (its inputs) until the token's `exp`, which
    // bounds the answer's validity.
    cacheable: true,
    stability: Stability::Alpha,
};

/// The params holding secrets: the HS* secret (`secretFile` reads it from a file).
const SECRET_PARAMS: &[SecretParam] = &[SecretParam::value("secret")];

/// The jwt adapter.
#[derive(Debug, Default, Clone, Copy)]
pub struct JwtAdapter;

impl JwtAdapter {
    /// Builds the concrete handler (what [`Adapter::build`] returns, unerased), for callers
    /// that want its [`JwtHandler::key_store`].
    pub fn build_handler(
        &self,
        config: &JwtConfig,
        ctx: &BuildContext,
    ) -> Result<Arc<JwtHandler>, AdapterError> {
        JwtHandler::start(config.clone(), ctx.handler_name.clone()).map(Arc::new)
    }
}

impl Adapter for JwtAdapter {
    type Config = JwtParams;
    type Compiled = JwtConfig;

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, params: JwtParams) -> Result<JwtConfig, Vec<ParamError>> {
        params.compile()
    }

    fn build(
        &self,
        config: &JwtConfig,
        ctx: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(self.build_handler(config, ctx)?)
    }

    fn secret_params(&self) -> &'static [SecretParam] {
        SECRET_PARAMS
    }
}

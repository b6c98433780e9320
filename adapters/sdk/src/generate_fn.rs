//! [`generate_fn`]: an attribute-generating handler from a plain function, for generators
//! that do not wait on anything (a lookup in memory or in a watched file).

use std::sync::Arc;

use async_trait::async_trait;
use mixer_adapter_api::{AdapterError, AttributeHandler, Generated, Handler};
use mixer_model::Instance;

/// A handler whose attribute generation `generate` answers: what [`Adapter::build`] returns
/// for an adapter of the `kubernetes`, `jwt` or `apikey` template that needs no `.await`. An
/// adapter that calls a backend writes its own handler with
/// `#[async_trait] impl AttributeHandler`.
///
/// [`Adapter::build`]: mixer_adapter_api::Adapter::build
pub fn generate_fn<F>(generate: F) -> Arc<dyn Handler>
where
    F: Fn(&Instance) -> Result<Generated, AdapterError> + Send + Sync + 'static,
{
    Arc::new(GenerateFn(generate))
}

struct GenerateFn<F>(F);

impl<F> Handler for GenerateFn<F>
where
    F: Fn(&Instance) -> Result<Generated, AdapterError> + Send + Sync + 'static,
{
    fn as_attributes(&self) -> Option<&dyn AttributeHandler> {
        Some(self)
    }
}

#[async_trait]
impl<F> AttributeHandler for GenerateFn<F>
where
    F: Fn(&Instance) -> Result<Generated, AdapterError> + Send + Sync + 'static,
{
    async fn generate(&self, instance: &Instance) -> Result<Generated, AdapterError> {
        (self.0)(instance)
    }
}

#[cfg(test)]
mod tests {
    use mixer_model::{Template, Value};

    use super::*;

    #[tokio::test]
    async fn the_function_generates_and_does_nothing_else() {
        let handler = generate_fn(|instance| {
            Ok(Generated::outputs(vec![(
                "principal",
                Value::from(instance.name.as_ref()),
            )]))
        });
        let instance = Instance {
            name: "key.instance.istio-system".into(),
            template: Template::ApiKey,
            fields: vec![],
        };
        let answer = handler
            .as_attributes()
            .expect("an attribute handler")
            .generate(&instance)
            .await
            .expect("answered");
        assert_eq!(
            answer.outputs,
            [("principal", Value::from("key.instance.istio-system"))]
        );
        assert!(handler.as_check().is_none() && handler.as_report().is_none());
    }
}

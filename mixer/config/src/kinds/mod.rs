//! One module per kind: each turns a document's `spec` into its typed config, reporting every
//! problem with a field path.

pub(crate) mod adapter;
pub(crate) mod authentication;
pub(crate) mod bindings;
pub(crate) mod decision_log;
pub(crate) mod handler;
pub(crate) mod headers;
pub(crate) mod instance;
pub(crate) mod manifest;
pub(crate) mod oauth;
pub(crate) mod ratelimit;
pub(crate) mod rule;
pub(crate) mod sampling;
pub(crate) mod typed_params;

use mixer_model::{ValueType, Vocabulary};
use serde_json::Value;

use crate::document::{RawDoc, expression_text, type_name};
use crate::error::Diagnostics;
use crate::expr::{Expression, Syntax};

/// A document being validated with the expression syntax it uses.
pub(crate) struct Doc<'a> {
    pub raw: &'a RawDoc,
    pub syntax: Syntax,
    /// The directory of the file on disk that holds the document, when known.
    pub dir: Option<std::path::PathBuf>,
}

/// Compiles one expression leaf at `path`; `expected` asks for a result type.
pub(crate) fn compile_leaf(
    doc: &Doc<'_>,
    value: &Value,
    path: &str,
    expected: Option<ValueType>,
    vocabulary: &Vocabulary,
    diags: &mut Diagnostics,
) -> Option<Expression> {
    let Some(text) = expression_text(value) else {
        diags.error(
            &doc.raw.doc,
            path,
            format!("expected an expression, found {}", type_name(value)),
        );
        return None;
    };
    let compiled = match expected {
        Some(t) => Expression::compile_expecting(&text, doc.syntax, vocabulary, t),
        None => Expression::compile(&text, doc.syntax, vocabulary),
    };
    match compiled {
        Ok(e) => Some(e),
        Err(e) => {
            diags.error(&doc.raw.doc, path, e.message);
            None
        }
    }
}

/// Parses an enum-like string field against its allowed spellings.
pub(crate) fn parse_enum<T: Copy>(
    doc: &Doc<'_>,
    value: Option<&Value>,
    path: &str,
    choices: &[(&str, T)],
    diags: &mut Diagnostics,
) -> Option<T> {
    let value = value.filter(|v| !v.is_null())?;
    let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
    match value {
        Value::String(s) => {
            if let Some((_, v)) = choices.iter().find(|(n, _)| n == s) {
                return Some(*v);
            }
            diags.error(
                &doc.raw.doc,
                path,
                format!("unknown value {s:?} (expected one of {})", names.join(", ")),
            );
        }
        other => diags.error(
            &doc.raw.doc,
            path,
            format!(
                "expected one of {}, found {}",
                names.join(", "),
                type_name(other)
            ),
        ),
    }
    None
}

#[cfg(test)]
pub(crate) mod test_support {
    use std::sync::Arc;

    use mixer_adapter_api::host::CompiledConfig;

    use crate::registry::AdapterRegistry;
    use crate::{ConfigOptions, SourceFile, Validated};

    /// Denier and noop, and [`Remote`] for handlers with a connection (never reached).
    pub fn registry() -> AdapterRegistry {
        let mut r = AdapterRegistry::new();
        r.register(Arc::new(mixer_adapter_denier::Denier));
        r.register(Arc::new(mixer_adapter_noop::Noop));
        r.register_remote(Arc::new(Remote::default()));
        r
    }

    /// An out-of-process adapter that is never reached: it says it serves `serves` (else what
    /// the `adapter` document declares), or that it is `unreachable`.
    #[derive(Default)]
    pub struct Remote {
        pub serves: Option<Vec<mixer_model::Template>>,
        pub unreachable: Option<String>,
    }

    static REMOTE: mixer_adapter_api::AdapterInfo = mixer_adapter_api::AdapterInfo {
        name: "remote",
        description: "",
        templates: &[],
        cacheable: true,
        stability: mixer_adapter_api::Stability::Alpha,
    };

    impl mixer_adapter_api::host::AnyAdapter for Remote {
        fn info(&self) -> &mixer_adapter_api::AdapterInfo {
            &REMOTE
        }
        fn compile(
            &self,
            _: &mixer_adapter_api::host::Params,
        ) -> Result<CompiledConfig, Vec<mixer_adapter_api::ParamError>> {
            Ok(CompiledConfig::new("remote", ()))
        }
        fn build_compiled(
            &self,
            _: &CompiledConfig,
            _: &mixer_adapter_api::BuildContext,
        ) -> Result<Arc<dyn mixer_adapter_api::Handler>, mixer_adapter_api::AdapterError> {
            Err(mixer_adapter_api::AdapterError::permanent(
                mixer_adapter_api::ErrorKind::Internal,
                "not built in config tests",
            ))
        }
        fn secret_params(&self) -> &'static [mixer_adapter_api::secrets::SecretParam] {
            &[]
        }
        fn path_params(&self) -> &'static [&'static str] {
            &[]
        }
        fn files_read(&self, _: &CompiledConfig) -> Vec<std::path::PathBuf> {
            Vec::new()
        }
        fn templates_of(&self, _: &CompiledConfig) -> Vec<mixer_model::Template> {
            Vec::new()
        }
    }

    impl mixer_remote::RemoteAdapter for Remote {
        fn compile_remote(
            &self,
            spec: &mixer_remote::RemoteHandlerSpec<'_>,
        ) -> Result<mixer_remote::RemoteCompiled, Vec<mixer_adapter_api::ParamError>> {
            Ok(mixer_remote::RemoteCompiled {
                config: CompiledConfig::new("remote", ()),
                templates: self
                    .serves
                    .clone()
                    .or_else(|| spec.declared_templates.map(<[_]>::to_vec)),
                unreachable: self.unreachable.clone(),
            })
        }
    }

    /// Validates one file called `c.yaml` with `registry`; errors as displayed.
    pub fn run_with(yaml: &str, registry: &AdapterRegistry) -> Result<Validated, Vec<String>> {
        crate::validate(
            &[SourceFile::new("c.yaml", yaml)],
            registry,
            &ConfigOptions::default(),
        )
        .map_err(|errs| errs.iter().map(ToString::to_string).collect())
    }

    /// Validates one file called `c.yaml`; errors as displayed.
    pub fn run(yaml: &str) -> Result<Validated, Vec<String>> {
        crate::validate(
            &[SourceFile::new("c.yaml", yaml)],
            &registry(),
            &ConfigOptions::default(),
        )
        .map_err(|errs| errs.iter().map(ToString::to_string).collect())
    }

    /// The errors of a config that must fail.
    pub fn errors(yaml: &str) -> Vec<String> {
        match run(yaml) {
            Ok(_) => panic!("expected errors for:\n{yaml}"),
            Err(e) => e,
        }
    }

    /// The config of one that must pass.
    pub fn ok(yaml: &str) -> Validated {
        match run(yaml) {
            Ok(v) => v,
            Err(e) => panic!("unexpected errors: {e:#?}"),
        }
    }
}

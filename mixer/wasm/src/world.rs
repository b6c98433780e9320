//! The worlds a plugin may implement: the current one, `mixer:adapter@0.2.0`, and the
//! previous one, `@0.1.0`, whose plugins still load and run as they did. The rest of the
//! host speaks the current world's types; a plugin of the previous world is called through
//! [`Exports`], which converts its arguments down and its answers up (the two worlds share
//! every type but the `template` enum, which 0.2.0 extended at its end, and the generator's
//! records, which 0.1.0 lacks).

use wasmtime::Store;
use wasmtime::component::{Component, Linker};

use crate::bindings::{self as wit, v0_1};
use crate::call::CallState;

/// The host interface of the current world.
pub(crate) const HOST_0_2: &str = "mixer:adapter/host@0.2.0";
/// The host interface of the previous world.
pub(crate) const HOST_0_1: &str = "mixer:adapter/host@0.1.0";

/// A pre-instantiated plugin of either world.
pub(crate) enum Pre {
    Current(wit::PluginPre<CallState>),
    V0_1(v0_1::PluginPre<CallState>),
}

/// An instance's exports, of either world.
pub(crate) enum Exports {
    Current(wit::Plugin),
    V0_1(v0_1::Plugin),
}

/// Which world `component` implements: the one whose host interface it imports; importing
/// none, the current one if it exports `generate` (which 0.1.0 lacks).
fn previous(component: &Component, engine: &wasmtime::Engine) -> bool {
    let ty = component.component_type();
    let mut imports = ty.imports(engine).map(|(name, _)| name);
    if let Some(host) = imports.next() {
        return host == HOST_0_1;
    }
    !ty.exports(engine).any(|(name, _)| name == "generate")
}

impl Pre {
    /// Links `component` against the host imports of its world and checks its exports.
    pub(crate) fn new(
        linker: &Linker<CallState>,
        component: &Component,
        engine: &wasmtime::Engine,
    ) -> wasmtime::Result<Pre> {
        let pre = linker.instantiate_pre(component)?;
        Ok(if previous(component, engine) {
            Pre::V0_1(v0_1::PluginPre::new(pre)?)
        } else {
            Pre::Current(wit::PluginPre::new(pre)?)
        })
    }

    pub(crate) fn instantiate(&self, store: &mut Store<CallState>) -> wasmtime::Result<Exports> {
        Ok(match self {
            Pre::Current(pre) => Exports::Current(pre.instantiate(store)?),
            Pre::V0_1(pre) => Exports::V0_1(pre.instantiate(store)?),
        })
    }

    /// The world's version, for logs and `mixer conformance`.
    pub(crate) fn version(&self) -> &'static str {
        match self {
            Pre::Current(_) => "0.2.0",
            Pre::V0_1(_) => "0.1.0",
        }
    }
}

/// A failure of the host's own making: a previous-world plugin asked what its world lacks.
fn unsupported(what: &str) -> wasmtime::Error {
    wasmtime::Error::msg(format!(
        "a plugin of mixer:adapter@0.1.0 cannot {what}: rebuild it against @0.2.0"
    ))
}

impl Exports {
    pub(crate) fn call_info(&self, s: &mut Store<CallState>) -> wasmtime::Result<wit::PluginInfo> {
        match self {
            Exports::Current(p) => p.call_info(s),
            Exports::V0_1(p) => {
                let info = p.call_info(s)?;
                Ok(wit::PluginInfo {
                    name: info.name,
                    templates: info.templates.into_iter().map(template_up).collect(),
                })
            }
        }
    }

    pub(crate) fn call_validate(
        &self,
        s: &mut Store<CallState>,
        config: &str,
    ) -> wasmtime::Result<Vec<wit::FieldError>> {
        match self {
            Exports::Current(p) => p.call_validate(s, config),
            Exports::V0_1(p) => Ok(p
                .call_validate(s, config)?
                .into_iter()
                .map(|e| wit::FieldError {
                    path: e.path,
                    message: e.message,
                })
                .collect()),
        }
    }

    pub(crate) fn call_check(
        &self,
        s: &mut Store<CallState>,
        config: &str,
        instance: &wit::Instance,
    ) -> wasmtime::Result<Result<wit::CheckResult, String>> {
        match self {
            Exports::Current(p) => p.call_check(s, config, instance),
            Exports::V0_1(p) => {
                let answer = p.call_check(s, config, &instance_down(instance)?)?;
                Ok(answer.map(|r| wit::CheckResult {
                    code: r.code,
                    message: r.message,
                    valid_duration_ms: r.valid_duration_ms,
                    valid_use_count: r.valid_use_count,
                }))
            }
        }
    }

    pub(crate) fn call_quota(
        &self,
        s: &mut Store<CallState>,
        config: &str,
        instance: &wit::Instance,
        args: &wit::QuotaArgs,
    ) -> wasmtime::Result<Result<wit::QuotaResult, String>> {
        match self {
            Exports::Current(p) => p.call_quota(s, config, instance, args),
            Exports::V0_1(p) => {
                let args = v0_1::QuotaArgs {
                    amount: args.amount,
                    best_effort: args.best_effort,
                    deduplication_id: args.deduplication_id.clone(),
                };
                let answer = p.call_quota(s, config, &instance_down(instance)?, &args)?;
                Ok(answer.map(|r| wit::QuotaResult {
                    code: r.code,
                    message: r.message,
                    granted_amount: r.granted_amount,
                    valid_duration_ms: r.valid_duration_ms,
                }))
            }
        }
    }

    pub(crate) fn call_report(
        &self,
        s: &mut Store<CallState>,
        config: &str,
        batch: &wit::ReportBatch,
    ) -> wasmtime::Result<Result<(), String>> {
        match self {
            Exports::Current(p) => p.call_report(s, config, batch),
            // The batch's words number the templates as both worlds do: 0.2.0 appended its
            // cases, and a 0.1.0 plugin is sent only the templates it declared.
            Exports::V0_1(p) => {
                let batch = v0_1::ReportBatch {
                    text: batch.text.clone(),
                    bytes: batch.bytes.clone(),
                    words: batch.words.clone(),
                };
                p.call_report(s, config, &batch)
            }
        }
    }

    pub(crate) fn call_generate(
        &self,
        s: &mut Store<CallState>,
        config: &str,
        instance: &wit::Instance,
    ) -> wasmtime::Result<Result<wit::Generated, String>> {
        match self {
            Exports::Current(p) => p.call_generate(s, config, instance),
            Exports::V0_1(_) => Err(unsupported("generate attributes")),
        }
    }
}

fn template_up(t: v0_1::Template) -> wit::Template {
    match t {
        v0_1::Template::Authorization => wit::Template::Authorization,
        v0_1::Template::Checknothing => wit::Template::Checknothing,
        v0_1::Template::Listentry => wit::Template::Listentry,
        v0_1::Template::Quota => wit::Template::Quota,
        v0_1::Template::Metric => wit::Template::Metric,
        v0_1::Template::Logentry => wit::Template::Logentry,
        v0_1::Template::Tracespan => wit::Template::Tracespan,
        v0_1::Template::Reportnothing => wit::Template::Reportnothing,
    }
}

fn template_down(t: wit::Template) -> wasmtime::Result<v0_1::Template> {
    Ok(match t {
        wit::Template::Authorization => v0_1::Template::Authorization,
        wit::Template::Checknothing => v0_1::Template::Checknothing,
        wit::Template::Listentry => v0_1::Template::Listentry,
        wit::Template::Quota => v0_1::Template::Quota,
        wit::Template::Metric => v0_1::Template::Metric,
        wit::Template::Logentry => v0_1::Template::Logentry,
        wit::Template::Tracespan => v0_1::Template::Tracespan,
        wit::Template::Reportnothing => v0_1::Template::Reportnothing,
        wit::Template::Kubernetes | wit::Template::Jwt | wit::Template::Apikey => {
            return Err(unsupported("take an attribute generator's instance"));
        }
    })
}

fn value_down(v: &wit::Value) -> v0_1::Value {
    use v0_1::Value as V;
    match v.clone() {
        wit::Value::String(s) => V::String(s),
        wit::Value::Int64(n) => V::Int64(n),
        wit::Value::Double(d) => V::Double(d),
        wit::Value::Boolean(b) => V::Boolean(b),
        wit::Value::Timestamp(t) => V::Timestamp(t),
        wit::Value::Duration(d) => V::Duration(d),
        wit::Value::Bytes(b) => V::Bytes(b),
        wit::Value::IpAddress(b) => V::IpAddress(b),
        wit::Value::EmailAddress(s) => V::EmailAddress(s),
        wit::Value::Uri(s) => V::Uri(s),
        wit::Value::DnsName(s) => V::DnsName(s),
        wit::Value::StringMap(m) => V::StringMap(m),
    }
}

fn instance_down(i: &wit::Instance) -> wasmtime::Result<v0_1::Instance> {
    Ok(v0_1::Instance {
        name: i.name.clone(),
        template: template_down(i.template)?,
        fields: i
            .fields
            .iter()
            .map(|f| v0_1::Field {
                name: f.name.clone(),
                value: match &f.value {
                    wit::FieldValue::Single(v) => v0_1::FieldValue::Single(value_down(v)),
                    wit::FieldValue::Map(entries) => v0_1::FieldValue::Map(
                        entries
                            .iter()
                            .map(|(k, v)| (k.clone(), value_down(v)))
                            .collect(),
                    ),
                },
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_previous_worlds_templates_keep_their_cases() {
        for t in [
            v0_1::Template::Authorization,
            v0_1::Template::Checknothing,
            v0_1::Template::Listentry,
            v0_1::Template::Quota,
            v0_1::Template::Metric,
            v0_1::Template::Logentry,
            v0_1::Template::Tracespan,
            v0_1::Template::Reportnothing,
        ] {
            let up = template_up(t);
            // The report batch numbers templates by their case: the same in both worlds.
            assert_eq!(up as u32, t as u32, "{t:?}");
            assert_eq!(template_down(up).expect("a 0.1.0 template"), t);
        }
        assert!(template_down(wit::Template::Jwt).is_err());
    }
}

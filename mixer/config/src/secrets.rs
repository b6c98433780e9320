//! Secrets that configs need not hold: `${NAME}` in a string param is the environment
//! variable `NAME`, and a param an adapter declares secret may be given as `<name>File`, a
//! file read at every load (so a rotated secret is picked up by the next reload). What is
//! secret is then hidden in the dump and removed from every error about the handler
//! ([`mixer_adapter_api::secrets`]).
//!
//! Scope: only the values of string params (not keys, not other fields of a document);
//! `$${` is a literal `${`; a `$` not followed by `{` is itself. An unset variable is a
//! config error naming the file and the field path.

use std::path::Path;

use mixer_adapter_api::secrets::{Redactor, SecretKind, SecretParam};
use serde_json::Value;

use crate::error::{Diagnostics, DocRef, index, join};
use crate::inputs::InputFile;

/// Params as they go to the adapter, and what hides their secrets.
pub(crate) struct Resolved {
    pub params: Value,
    pub redactor: Redactor,
    /// The `<name>File`s read, with the digest of what was read.
    pub files: Vec<InputFile>,
    /// What the config hash covers of the params: those the redactor knows as secret by
    /// themselves hidden (declared params, secret-named keys, URL passwords and query keys),
    /// values from the environment expanded.
    pub hashed: Value,
}

/// Expands `${NAME}`, reads `<name>File`s, and finds the secrets of `params` (at `path` in
/// the document). Every problem goes to `diags`; `None` when there was one.
pub(crate) fn resolve(
    doc: &DocRef,
    params: &Value,
    path: &str,
    declared: &[SecretParam],
    diags: &mut Diagnostics,
) -> Option<Resolved> {
    resolve_with(doc, params, path, declared, diags, &|name| {
        std::env::var(name).ok()
    })
}

fn resolve_with(
    doc: &DocRef,
    params: &Value,
    path: &str,
    declared: &[SecretParam],
    diags: &mut Diagnostics,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<Resolved> {
    let before = diags.errors.len();
    let written = params;
    let mut params = params.clone();
    let mut from_env = Vec::new();
    expand(&mut params, path, doc, diags, env, &mut from_env);
    let mut from_files = Vec::new();
    for d in declared.iter().filter(|d| d.kind == SecretKind::Value) {
        let segments: Vec<&str> = d.path.split('.').filter(|s| !s.is_empty()).collect();
        let Some((name, parents)) = segments.split_last() else {
            continue;
        };
        if *name == "*" {
            continue;
        }
        read_files(
            &mut params,
            parents,
            name,
            path,
            doc,
            diags,
            &mut from_files,
        );
    }
    let mut redactor = Redactor::new(&params, declared);
    let hashed = redactor.params();
    let mut files = Vec::with_capacity(from_files.len());
    for (secret, file) in from_files {
        redactor.add_secret(secret);
        files.push(file);
    }
    // A value from the environment is shown as the `${NAME}` that brought it, and kept out
    // of every text (an error, a denial built from the params): whatever its param's name,
    // the environment is where deployments put what they do not want in a config file.
    for secret in from_env {
        redactor.add_secret(secret);
    }
    redactor.show_as_written(written, &|s| s.contains("${") && !s.contains("$${"));
    if diags.errors.len() > before {
        // An error about a param may quote it: none may show a secret.
        scrub_errors(&redactor, diags, before);
        return None;
    }
    Some(Resolved {
        params,
        redactor,
        files,
        hashed,
    })
}

/// Removes the secrets `redactor` knows from the errors recorded since `from`.
pub(crate) fn scrub_errors(redactor: &Redactor, diags: &mut Diagnostics, from: usize) {
    for e in diags.errors.iter_mut().skip(from) {
        e.message = redactor.scrub(&e.message);
    }
}

/// Expands every string of `value`; the variables' values go to `found`.
fn expand(
    value: &mut Value,
    path: &str,
    doc: &DocRef,
    diags: &mut Diagnostics,
    env: &dyn Fn(&str) -> Option<String>,
    found: &mut Vec<String>,
) {
    match value {
        Value::String(s) if s.contains('$') => match expand_text(s, env, found) {
            Ok(expanded) => *s = expanded,
            Err(message) => diags.error(doc, path, message),
        },
        Value::Array(items) => {
            for (i, v) in items.iter_mut().enumerate() {
                expand(v, &index(path, i), doc, diags, env, found);
            }
        }
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                expand(v, &join(path, k), doc, diags, env, found);
            }
        }
        _ => {}
    }
}

/// `${NAME}` -> the variable's value (also pushed on `found`); `$${` -> `${`.
fn expand_text(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    found: &mut Vec<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(escaped) = after.strip_prefix("${") {
            out.push_str("${");
            rest = escaped;
        } else if let Some(inner) = after.strip_prefix('{') {
            let Some(end) = inner.find('}') else {
                return Err("unclosed ${ (write $${ for a literal ${)".to_string());
            };
            let name = &inner[..end];
            let valid = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(format!(
                    "${{{name}}} is not an environment variable name (letters, digits, _; write $${{ for a literal ${{)"
                ));
            }
            match env(name) {
                Some(v) => {
                    out.push_str(&v);
                    found.push(v);
                }
                None => {
                    return Err(format!(
                        "environment variable {name} is not set (write $${{ for a literal ${{)"
                    ));
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// For each object at `parents` (from the params' root) holding `<name>File`: puts the file's
/// contents in `<name>` (without one trailing newline) and removes `<name>File`.
fn read_files(
    value: &mut Value,
    parents: &[&str],
    name: &str,
    path: &str,
    doc: &DocRef,
    diags: &mut Diagnostics,
    found: &mut Vec<(String, InputFile)>,
) {
    if let Some((first, rest)) = parents.split_first() {
        match value {
            Value::Object(map) if *first == "*" => {
                for (k, v) in map.iter_mut() {
                    read_files(v, rest, name, &join(path, k), doc, diags, found);
                }
            }
            Value::Array(items) if *first == "*" => {
                for (i, v) in items.iter_mut().enumerate() {
                    read_files(v, rest, name, &index(path, i), doc, diags, found);
                }
            }
            Value::Object(map) => {
                if let Some(v) = map.get_mut(*first) {
                    read_files(v, rest, name, &join(path, first), doc, diags, found);
                }
            }
            _ => {}
        }
        return;
    }
    let Value::Object(map) = value else {
        return;
    };
    let file_key = format!("{name}File");
    let Some(file) = map.get(&file_key) else {
        return;
    };
    let field = join(path, &file_key);
    let Some(file) = file.as_str().filter(|f| !f.trim().is_empty()) else {
        diags.error(doc, field, "expected the path of a file holding the secret");
        return;
    };
    if map.contains_key(name) {
        diags.error(doc, field, format!("give {name} or {file_key}, not both"));
        return;
    }
    match std::fs::read_to_string(Path::new(file)) {
        Ok(text) => {
            let read = InputFile::secret(Path::new(file), text.as_bytes());
            let secret = text
                .strip_suffix('\n')
                .map(|t| t.strip_suffix('\r').unwrap_or(t))
                .unwrap_or(&text)
                .to_string();
            found.push((secret.clone(), read));
            map.remove(&file_key);
            map.insert(name.to_string(), Value::String(secret));
        }
        Err(e) => diags.error(doc, field, format!("cannot read {file:?}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc() -> DocRef {
        DocRef {
            file: "h.yaml".into(),
            document: Some("handler r".into()),
            id: 0,
        }
    }

    fn env(name: &str) -> Option<String> {
        match name {
            "REDIS_PASSWORD" => Some("s3cr3t".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    fn run(params: Value, declared: &[SecretParam]) -> Result<Resolved, Vec<String>> {
        let mut diags = Diagnostics::default();
        resolve_with(&doc(), &params, "spec.params", declared, &mut diags, &env)
            .ok_or_else(|| diags.errors.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn environment_variables_in_string_params() {
        let r = run(
            json!({"url": "redis://:${REDIS_PASSWORD}@h:1", "n": 3, "list": ["a$b", "$${X}", "x${EMPTY}y"]}),
            &[],
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            r.params,
            json!({"url": "redis://:s3cr3t@h:1", "n": 3, "list": ["a$b", "${X}", "xy"]})
        );
        // Shown as written, and the value kept out of any text.
        assert_eq!(r.redactor.params()["url"], "redis://:${REDIS_PASSWORD}@h:1");
        assert_eq!(r.redactor.scrub("auth s3cr3t failed"), "auth *** failed");
        // A value from the environment in a param of any name: shown as written.
        let r = run(
            json!({"message": "tenant ${REDIS_PASSWORD}", "x": "$${Y}"}),
            &[],
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            r.redactor.params(),
            json!({"message": "tenant ${REDIS_PASSWORD}", "x": "${Y}"})
        );
        assert_eq!(r.redactor.scrub("tenant s3cr3t"), "tenant ***");
        let errors = run(
            json!({"a": {"b": ["${NOPE}"]}, "c": "${1x}", "d": "${OPEN"}),
            &[],
        )
        .err()
        .expect("errors");
        assert_eq!(
            errors,
            [
                "h.yaml: handler r: spec.params.a.b[0]: environment variable NOPE is not set (write $${ for a literal ${)",
                "h.yaml: handler r: spec.params.c: ${1x} is not an environment variable name (letters, digits, _; write $${ for a literal ${)",
                "h.yaml: handler r: spec.params.d: unclosed ${ (write $${ for a literal ${)",
            ]
        );
    }

    #[test]
    fn declared_secrets_from_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("pw");
        std::fs::write(&file, "from-file\n").expect("write");
        let declared = [
            SecretParam::value("password"),
            SecretParam::value("servers.*.key"),
        ];
        let f = file.display().to_string();
        let r = run(
            json!({"passwordFile": f, "servers": [{"keyFile": f}, {"key": "inline"}]}),
            &declared,
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            r.params,
            json!({"password": "from-file", "servers": [{"key": "from-file"}, {"key": "inline"}]})
        );
        assert_eq!(
            r.redactor.params(),
            json!({"password": "***", "servers": [{"key": "***"}, {"key": "***"}]})
        );
        assert_eq!(r.redactor.scrub("x from-file inline"), "x *** ***");
        let missing = dir.path().join("missing").display().to_string();
        let errors = run(
            json!({"passwordFile": missing, "password": "p", "servers": [{"keyFile": 3}]}),
            &declared,
        )
        .err()
        .expect("errors");
        assert_eq!(
            errors,
            [
                "h.yaml: handler r: spec.params.passwordFile: give password or passwordFile, not both",
                "h.yaml: handler r: spec.params.servers[0].keyFile: expected the path of a file holding the secret",
            ]
        );
        let errors = run(json!({"passwordFile": missing}), &declared)
            .err()
            .expect("errors");
        assert!(
            errors[0].starts_with("h.yaml: handler r: spec.params.passwordFile: cannot read"),
            "{errors:?}"
        );
    }
}

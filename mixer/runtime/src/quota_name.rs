//! Which instances answer a quota that a request names: its own module, because both the
//! rules' evaluation (which builds only those instances) and the quota dispatch use it.

use mixer_model::Template;

/// Whether the instance named `instance` (its full name, `name.kind.namespace`) answers the
/// quota called `quota` in a request. Istio 1.4 compares the short name, ignoring case
/// (`mixer/pkg/runtime/dispatcher/session.go`); qualified forms are accepted too:
/// `name.namespace`, `name.instance.namespace`, `name.<template>.namespace` and the full name.
pub fn quota_name_matches(quota: &str, instance: &str, template: Template) -> bool {
    if quota == instance {
        return true;
    }
    let (short, rest) = instance.split_once('.').unwrap_or((instance, ""));
    if quota.eq_ignore_ascii_case(short) {
        return true;
    }
    let namespace = rest.rsplit('.').next().unwrap_or("");
    let Some(after) = quota.strip_prefix(short).and_then(|q| q.strip_prefix('.')) else {
        return false;
    };
    after == namespace
        || [template.name(), "instance"].iter().any(|kind| {
            after.strip_prefix(kind).and_then(|a| a.strip_prefix('.')) == Some(namespace)
        })
}

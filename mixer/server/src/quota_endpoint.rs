//! `GET /quota` on the admin listener: how much of one quota is left, read from memquota or
//! redisquota without charging it.
//!
//! A counter is named as the config names it, in one of two ways:
//!
//! * `handler=NAME&quota=NAME&dimension=KEY=VALUE...`: the counter of the quota instance
//!   `quota` in the handler `handler` (full names, or short ones in the default namespace), one
//!   `dimension` per dimension of the instance, its value as the request would give it.
//! * `domain=DOMAIN&descriptor=KEY=VALUE...`: the counters an Envoy rate limit request with
//!   this descriptor (its entries in order) would be counted on, found by the same rules.
//!
//! The answer is JSON: `{"counters": [{"handler", "quota", "dimensions", "limit",
//! "remaining", "window_seconds", "reset_after_seconds"}]}` (the descriptor form also echoes
//! `domain` and `descriptor`, and says `"unlimited": true` for an `unlimited` limit). A query
//! that is missing, malformed, too long, oddly encoded or has unknown parameters is a 400 with
//! a message naming the parameters; a handler, quota, dimension or descriptor the config does
//! not have is a 404; a handler that cannot read counters without charging them is a 501; a
//! store that cannot be read is a 503. Nothing is charged or kept, whatever the query.
//!
//! The remaining amounts tell who uses what, so the endpoint is served on a loopback
//! `--admin-addr` only, unless `--admin-quota-remote` says otherwise (and behind
//! `--admin-token-file` like `/metrics`).

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use mixer_config::FieldExprValue;
use mixer_model::{AttributeBag, FieldValue, Instance, Template, Timestamp, Value};
use mixer_runtime::quota::{Peek, PeekedCounter};
use mixer_runtime::{Runtime, Snapshot, quota_name_matches};
use serde_json::{Map, json};

/// The longest query taken, in bytes.
pub const MAX_QUERY_BYTES: usize = 4096;
/// The most `dimension` or `descriptor` parameters in one query.
pub const MAX_ENTRIES: usize = 64;

/// What `/quota` tells a caller that did not say which counter.
pub const USAGE: &str = "GET /quota takes either handler=NAME&quota=NAME&dimension=KEY=VALUE (one \
     dimension parameter per dimension of the quota instance) or domain=DOMAIN&descriptor=KEY=VALUE \
     (one descriptor parameter per entry of an Envoy rate limit descriptor, in order)";

/// Whether `/quota` is served on this admin listener.
#[derive(Clone, Copy, Debug)]
pub enum QuotaAccess {
    /// Served: the listener is on a loopback address, or `--admin-quota-remote` is set.
    Served,
    /// Refused with 403: the listener is reachable from other hosts.
    Refused,
}

impl QuotaAccess {
    /// `Served` on a loopback `--admin-addr` or with `--admin-quota-remote`.
    pub fn for_listener(admin_addr: std::net::SocketAddr, remote: bool) -> QuotaAccess {
        if admin_addr.ip().is_loopback() || remote {
            QuotaAccess::Served
        } else {
            QuotaAccess::Refused
        }
    }
}

/// A query that names a counter.
#[derive(Debug, PartialEq, Eq)]
enum Query {
    Counter {
        handler: String,
        quota: String,
        dimensions: Vec<(String, String)>,
    },
    Descriptor {
        domain: String,
        entries: Vec<(String, String)>,
    },
}

/// Answers `GET /quota` with `raw` as its query.
pub async fn answer(runtime: &Arc<Runtime>, access: QuotaAccess, raw: Option<&str>) -> Response {
    if matches!(access, QuotaAccess::Refused) {
        return (
            StatusCode::FORBIDDEN,
            "/quota is served on a loopback --admin-addr only; set --admin-quota-remote to serve it on this address\n",
        )
            .into_response();
    }
    let query = match parse(raw.unwrap_or("")) {
        Ok(q) => q,
        Err(message) => return (StatusCode::BAD_REQUEST, format!("{message}\n")).into_response(),
    };
    let snapshot = match runtime.ready_snapshot() {
        Ok(s) => s,
        Err(not_ready) => {
            return (StatusCode::SERVICE_UNAVAILABLE, format!("{not_ready}\n")).into_response();
        }
    };
    let result = match &query {
        Query::Counter {
            handler,
            quota,
            dimensions,
        } => counter(&snapshot, handler, quota, dimensions).await,
        Query::Descriptor { domain, entries } => descriptor(&snapshot, domain, entries).await,
    };
    match result {
        Ok(body) => (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            format!("{body}\n"),
        )
            .into_response(),
        Err((status, message)) => (status, format!("{message}\n")).into_response(),
    }
}

type Answer = Result<serde_json::Value, (StatusCode, String)>;

/// One counter of one handler.
async fn counter(
    snapshot: &Snapshot,
    handler: &str,
    quota: &str,
    dimensions: &[(String, String)],
) -> Answer {
    let namespace = &snapshot.config.default_namespace;
    // Istio's full name is `name.handler.namespace`; `name.namespace` and a short name in
    // the default namespace say the same.
    let mut names = vec![
        handler.to_string(),
        format!("{handler}.handler.{namespace}"),
    ];
    if let Some((name, ns)) = handler.split_once('.') {
        names.push(format!("{name}.handler.{ns}"));
    }
    let Some(built) = snapshot
        .handlers
        .iter()
        .find(|h| names.iter().any(|n| *n == *h.name))
    else {
        return Err((
            StatusCode::NOT_FOUND,
            format!("no handler {handler:?} in the active config"),
        ));
    };
    if built.handler.as_quota().is_none() {
        return Err((
            StatusCode::NOT_FOUND,
            format!("handler {} takes no quota", built.name),
        ));
    }
    let Some(config) =
        snapshot.config.instances.iter().find(|i| {
            i.template == Template::Quota && quota_name_matches(quota, &i.name, i.template)
        })
    else {
        return Err((
            StatusCode::NOT_FOUND,
            format!("no quota instance {quota:?} in the active config"),
        ));
    };
    // The instance's dimensions in its config order, which is the counter key's.
    let keys: Vec<&str> = config
        .fields
        .iter()
        .filter(|f| f.name == "dimensions")
        .flat_map(|f| match &f.value {
            FieldExprValue::Map(entries) => entries.iter().map(|(k, _)| &**k).collect(),
            _ => Vec::new(),
        })
        .collect();
    if let Some((extra, _)) = dimensions.iter().find(|(k, _)| !keys.contains(&k.as_str())) {
        return Err((
            StatusCode::NOT_FOUND,
            format!(
                "quota {} has no dimension {extra:?} (its dimensions: {})",
                config.name,
                keys.join(", ")
            ),
        ));
    }
    let mut entries = Vec::with_capacity(keys.len());
    for key in &keys {
        let Some((_, value)) = dimensions.iter().find(|(k, _)| k == key) else {
            return Err((
                StatusCode::BAD_REQUEST,
                format!(
                    "dimension={key}=VALUE is missing: quota {} is counted per {}",
                    config.name,
                    keys.join(", ")
                ),
            ));
        };
        entries.push((Arc::from(*key), Value::from(value.as_str())));
    }
    let instance = Instance {
        name: config.name.clone(),
        template: Template::Quota,
        fields: vec![("dimensions", FieldValue::Map(entries))],
    };
    let peeked = PeekedCounter {
        handler: built.name.clone(),
        peek: mixer_runtime::quota::peek(built, &instance).await,
        instance,
    };
    let counter = described(&peeked)?;
    Ok(json!({ "counters": [counter] }))
}

/// The counters an Envoy rate limit descriptor is counted on.
async fn descriptor(snapshot: &Snapshot, domain: &str, entries: &[(String, String)]) -> Answer {
    let descriptor = RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.clone(),
                value: v.clone(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    };
    let mut bag = AttributeBag::new(snapshot.vocabulary().clone());
    mixer_frontends::ratelimit::fill_bag(&mut bag, domain, &descriptor, 1, Timestamp::now());
    let plan = mixer_runtime::quota::plan_preprocessed(snapshot, &bag, None).await;
    let unlimited = plan
        .rate_limits(snapshot)
        .next()
        .is_some_and(|b| b.unlimited);
    let peeked = mixer_runtime::quota::peek_plan(snapshot, &plan)
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let shown: Vec<serde_json::Value> = entries
        .iter()
        .map(|(k, v)| json!({"key": k, "value": v}))
        .collect();
    if peeked.is_empty() && !unlimited {
        return Err((
            StatusCode::NOT_FOUND,
            format!(
                "no limit of domain {domain:?} matches the descriptor {}",
                entries
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let counters = peeked
        .iter()
        .map(described)
        .collect::<Result<Vec<_>, _>>()?;
    let mut body = json!({"domain": domain, "descriptor": shown, "counters": counters});
    if unlimited && counters_empty(&body) {
        body["unlimited"] = json!(true);
    }
    Ok(body)
}

fn counters_empty(body: &serde_json::Value) -> bool {
    body["counters"].as_array().is_none_or(Vec::is_empty)
}

/// One counter as JSON, or why it could not be read.
fn described(c: &PeekedCounter) -> Result<serde_json::Value, (StatusCode, String)> {
    let limit = match &c.peek {
        Peek::Read(limit) => limit,
        Peek::Unsupported => {
            return Err((
                StatusCode::NOT_IMPLEMENTED,
                format!(
                    "handler {} cannot read a counter without charging it (memquota and redisquota can)",
                    c.handler
                ),
            ));
        }
        Peek::Failed(e) => {
            return Err((
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "handler {} could not read the counter: {}",
                    c.handler, e.message
                ),
            ));
        }
    };
    let mut dimensions = Map::new();
    if let Some(FieldValue::Map(entries)) = c.instance.field("dimensions") {
        for (k, v) in entries {
            let text = match v {
                Value::String(s) => s.to_string(),
                other => other.to_string(),
            };
            dimensions.insert(k.to_string(), json!(text));
        }
    }
    Ok(json!({
        "handler": &*c.handler,
        "quota": &*c.instance.name,
        "dimensions": dimensions,
        "limit": limit.max_amount,
        "remaining": limit.remaining,
        "window_seconds": limit.window.as_secs_f64(),
        "reset_after_seconds": limit.reset_after.as_secs_f64(),
    }))
}

/// Reads the query (see the module documentation); the message says what is wrong.
fn parse(raw: &str) -> Result<Query, String> {
    if raw.is_empty() {
        return Err(USAGE.to_string());
    }
    if raw.len() > MAX_QUERY_BYTES {
        return Err(format!(
            "the query is {} bytes, more than {MAX_QUERY_BYTES}; {USAGE}",
            raw.len()
        ));
    }
    check_percent_encoding(raw)?;
    let mut handler = None;
    let mut quota = None;
    let mut domain = None;
    let mut dimensions: Vec<(String, String)> = Vec::new();
    let mut descriptor: Vec<(String, String)> = Vec::new();
    for (name, value) in form_urlencoded::parse(raw.as_bytes()) {
        for text in [&name, &value] {
            if text.contains('\u{FFFD}') || text.chars().any(char::is_control) {
                return Err(format!(
                    "parameter {name:?} is not printable UTF-8 once percent-decoded"
                ));
            }
        }
        let once = |slot: &mut Option<String>| {
            if slot.is_some() {
                return Err(format!("{name} is given twice; {USAGE}"));
            }
            if value.is_empty() {
                return Err(format!("{name} is empty; {USAGE}"));
            }
            *slot = Some(value.to_string());
            Ok(())
        };
        match &*name {
            "handler" => once(&mut handler)?,
            "quota" => once(&mut quota)?,
            "domain" => once(&mut domain)?,
            "dimension" | "descriptor" => {
                let list = if name == "dimension" {
                    &mut dimensions
                } else {
                    &mut descriptor
                };
                if list.len() == MAX_ENTRIES {
                    return Err(format!("more than {MAX_ENTRIES} {name} parameters"));
                }
                let Some((k, v)) = value.split_once('=') else {
                    return Err(format!("{name}={value} is not KEY=VALUE; {USAGE}"));
                };
                if k.is_empty() {
                    return Err(format!("{name}={value} has an empty key"));
                }
                if list.iter().any(|(seen, _)| seen == k) {
                    return Err(format!("{name} {k:?} is given twice"));
                }
                list.push((k.to_string(), v.to_string()));
            }
            other => return Err(format!("unknown parameter {other:?}; {USAGE}")),
        }
    }
    match (handler, quota, domain) {
        (Some(handler), Some(quota), None) if descriptor.is_empty() => Ok(Query::Counter {
            handler,
            quota,
            dimensions,
        }),
        (None, None, Some(domain)) if dimensions.is_empty() => {
            if descriptor.is_empty() {
                return Err(format!("domain= needs descriptor=KEY=VALUE; {USAGE}"));
            }
            Ok(Query::Descriptor {
                domain,
                entries: descriptor,
            })
        }
        _ => Err(USAGE.to_string()),
    }
}

/// Every `%` starts two hex digits: `form_urlencoded` would take a stray one as itself.
fn check_percent_encoding(raw: &str) -> Result<(), String> {
    let bytes = raw.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'%'
            && !(bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
        {
            return Err(format!(
                "malformed percent-encoding at byte {i} of the query; {USAGE}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_names_a_counter_one_way_or_the_other() {
        assert_eq!(
            parse("handler=h&quota=q&dimension=user%3Dalice&dimension=path=/a%20b"),
            Ok(Query::Counter {
                handler: "h".into(),
                quota: "q".into(),
                dimensions: vec![
                    ("user".into(), "alice".into()),
                    ("path".into(), "/a b".into())
                ],
            })
        );
        assert_eq!(
            parse("domain=rl&descriptor=foo=bar&descriptor=baz=shady"),
            Ok(Query::Descriptor {
                domain: "rl".into(),
                entries: vec![("foo".into(), "bar".into()), ("baz".into(), "shady".into())],
            })
        );
        // A quota without dimensions needs none.
        assert!(parse("handler=h&quota=q").is_ok());
    }

    #[test]
    fn bad_queries_are_refused_with_what_it_takes() {
        for bad in [
            "",
            "handler=h",
            "quota=q",
            "domain=rl",
            "handler=h&quota=q&domain=rl&descriptor=a=b",
            "handler=h&quota=q&descriptor=a=b",
            "domain=rl&descriptor=a=b&dimension=c=d",
            "handler=h&handler=i&quota=q",
            "handler=&quota=q",
            "handler=h&quota=q&dimension=novalue",
            "handler=h&quota=q&dimension==v",
            "handler=h&quota=q&dimension=a=1&dimension=a=2",
            "handler=h&quota=q&limit=5",
            "handler=h%zz&quota=q",
            "handler=h%&quota=q",
            "handler=%FF%FE&quota=q",
            "handler=a%0Ab&quota=q",
        ] {
            let message = parse(bad).expect_err(bad);
            assert!(!message.is_empty(), "{bad}");
        }
        // The message names the parameters.
        let message = parse("").expect_err("empty");
        for name in ["handler=", "quota=", "dimension=", "domain=", "descriptor="] {
            assert!(message.contains(name), "{message}");
        }
        let long = format!("handler={}&quota=q", "h".repeat(MAX_QUERY_BYTES));
        assert!(parse(&long).expect_err("long").contains("bytes"));
        let many: String = (0..=MAX_ENTRIES)
            .map(|i| format!("&dimension=k{i}=v"))
            .collect();
        assert!(
            parse(&format!("handler=h&quota=q{many}"))
                .expect_err("many")
                .contains("more than")
        );
    }

    #[test]
    fn quota_is_refused_on_a_listener_other_hosts_reach() {
        let any: std::net::SocketAddr = "0.0.0.0:9093".parse().expect("addr");
        let local: std::net::SocketAddr = "127.0.0.1:9093".parse().expect("addr");
        assert!(matches!(
            QuotaAccess::for_listener(any, false),
            QuotaAccess::Refused
        ));
        assert!(matches!(
            QuotaAccess::for_listener(any, true),
            QuotaAccess::Served
        ));
        assert!(matches!(
            QuotaAccess::for_listener(local, false),
            QuotaAccess::Served
        ));
    }
}

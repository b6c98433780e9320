//! Cache hints on forward-auth allows: `Cache-Control: private, max-age=<valid duration>`
//! (and nginx's `X-Accel-Expires` with the same seconds) and `Vary` on the request headers
//! the decision read, so that a gateway caching its auth
//! answers (nginx `proxy_cache` on the `auth_request` location) reuses an allow exactly as
//! long, and for exactly the requests, that the mixer's own check cache would.
//!
//! Hints are given only when reusing the answer is as safe as the mixer's own reuse:
//! never on a denial (a 403 must be asked again; the gateway would otherwise have to be told
//! to forget it), never when a quota rule could charge the request (a cached allow would
//! skip the charge), never when the decision read something a header list cannot name (the
//! clock, a whole header map) and never when the reads were not recorded: the check cache
//! records them as its key, so with `--check-cache-size 0` (verdicts decided afresh every
//! time, by the operator's choice) no hint invites the gateway to reuse them either.

use std::collections::BTreeSet;

use axum::http::{HeaderMap, HeaderValue, header};
use mixer_model::{Variety, Verdict, Vocabulary};
use mixer_runtime::{DEFAULT_VALID_USE_COUNT, Snapshot};

/// Adds the cache hints of `verdict`, decided on `snapshot`, to an answer's `headers`, when
/// the module's conditions hold.
pub(crate) fn add(headers: &mut HeaderMap, verdict: &Verdict, snapshot: &Snapshot) {
    if !verdict.is_allowed() || snapshot.has_rules(Variety::Quota) {
        return;
    }
    let Some((max_age, vary)) = hints(verdict, snapshot.vocabulary()) else {
        return;
    };
    let Ok(cache_control) = HeaderValue::from_str(&format!("private, max-age={max_age}")) else {
        return;
    };
    // nginx caches nothing marked `private`; its own header for how long a proxied answer
    // stays cached is honoured beside `proxy_ignore_headers Cache-Control`, so the gateway
    // keeps the mixer's duration rather than one of its own.
    headers.insert("x-accel-expires", HeaderValue::from(max_age));
    if !vary.is_empty() {
        let joined = vary.into_iter().collect::<Vec<_>>().join(", ");
        let Ok(vary) = HeaderValue::from_str(&joined) else {
            return;
        };
        headers.insert(header::VARY, vary);
    }
    headers.insert(header::CACHE_CONTROL, cache_control);
}

/// The whole seconds an allow may be reused and the request headers it varies on (lower
/// case, sorted), or `None` when it must not be reused.
fn hints(verdict: &Verdict, vocabulary: &Vocabulary) -> Option<(u64, BTreeSet<String>)> {
    let max_age = verdict.valid_duration.as_secs();
    // A gateway cannot count uses: a verdict limited below Istio's default count is the
    // handler's way of asking to be consulted again soon.
    if max_age == 0
        || verdict.valid_use_count < DEFAULT_VALID_USE_COUNT
        || !verdict.referenced.is_recording()
    {
        return None;
    }
    let mut vary = BTreeSet::new();
    for read in verdict.referenced.iter() {
        let attribute = vocabulary.name(read.attr);
        if attribute == "request.headers" {
            // One entry names its header; the whole map names none that could be listed.
            vary.insert(read.map_key.as_deref()?.to_ascii_lowercase());
            continue;
        }
        vary.extend(headers_of(attribute)?.iter().map(|h| (*h).to_owned()));
    }
    Some((max_age, vary))
}

/// The request headers forward-auth fills `attribute` from (see the table in the
/// [module](super) docs); `None` for attributes no header list can stand for (the clock,
/// attributes of unknown origin).
fn headers_of(attribute: &str) -> Option<&'static [&'static str]> {
    Some(match attribute {
        "request.method" => &["x-original-method", "x-forwarded-method"],
        "request.path" | "request.url_path" | "request.query_params" => {
            &["x-original-uri", "x-forwarded-uri"]
        }
        "request.host" | "destination.service.host" => &["x-forwarded-host", "host"],
        "request.scheme" => &["x-forwarded-proto"],
        "request.useragent" => &["user-agent"],
        "request.referer" => &["referer"],
        "request.id" => &["x-request-id"],
        // The client's address: the gateway's own unless it is a trusted proxy, which names
        // the client in one of these.
        "source.ip" => &["x-forwarded-for", "x-real-ip"],
        // The calling gateway's connection, the same for every request it caches.
        "connection.mtls" | "source.principal" | "source.namespace" | "context.protocol" => &[],
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use mixer_model::{Presence, ReferencedAttributes, Status};

    use super::*;

    fn allowed(reads: &[(&str, Option<&str>)]) -> (Verdict, Vocabulary) {
        let vocabulary = Vocabulary::istio();
        let mut referenced = ReferencedAttributes::new();
        for (name, key) in reads {
            let id = vocabulary.lookup(name).expect("an Istio attribute");
            match key {
                Some(key) => referenced.record_key(id, Arc::from(*key), Presence::Exact),
                None => referenced.record(id, Presence::Exact),
            }
        }
        let verdict = Verdict {
            status: Status::default(),
            valid_duration: Duration::from_millis(10_900),
            valid_use_count: DEFAULT_VALID_USE_COUNT,
            referenced,
            ..Verdict::default()
        };
        (verdict, vocabulary)
    }

    #[test]
    fn an_allow_varies_on_the_headers_it_read_for_its_whole_seconds() {
        let (verdict, vocabulary) = allowed(&[
            ("request.headers", Some("X-User")),
            ("request.method", None),
            ("connection.mtls", None),
        ]);
        let (max_age, vary) = hints(&verdict, &vocabulary).expect("hints");
        assert_eq!(max_age, 10);
        assert_eq!(
            vary.into_iter().collect::<Vec<_>>(),
            ["x-forwarded-method", "x-original-method", "x-user"]
        );
    }

    #[test]
    fn no_hints_when_reuse_would_not_be_safe() {
        // The clock, and a whole header map, cannot be listed in Vary.
        for reads in [[("request.time", None)], [("request.headers", None)]] {
            let (verdict, vocabulary) = allowed(&reads);
            assert_eq!(hints(&verdict, &vocabulary), None, "{reads:?}");
        }
        let (mut verdict, vocabulary) = allowed(&[]);
        verdict.valid_duration = Duration::from_millis(999);
        assert_eq!(hints(&verdict, &vocabulary), None, "under a second");
        let (mut verdict, vocabulary) = allowed(&[]);
        verdict.valid_use_count = 5;
        assert_eq!(hints(&verdict, &vocabulary), None, "a limited use count");
        let (mut verdict, vocabulary) = allowed(&[]);
        verdict.referenced = ReferencedAttributes::ignoring();
        assert_eq!(hints(&verdict, &vocabulary), None, "reads not recorded");
    }
}

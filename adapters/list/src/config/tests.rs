use super::*;
use mixer_adapter_api::host::decode_params;
use serde_json::json;

fn compile(v: serde_json::Value) -> Result<ListConfig, Vec<ParamError>> {
    decode_params::<ListParams>(&v)
        .map_err(|e| vec![e])?
        .compile()
}

fn paths(v: serde_json::Value) -> Vec<String> {
    compile(v)
        .expect_err("invalid")
        .into_iter()
        .map(|e| e.path)
        .collect()
}

#[test]
fn defaults_follow_istio() {
    let c = compile(json!(null)).expect("valid");
    assert_eq!(c.provider, None);
    assert_eq!(c.refresh_interval, Duration::from_secs(60));
    assert_eq!(c.ttl, Duration::from_secs(300));
    assert_eq!(c.caching_interval, Duration::from_secs(300));
    assert_eq!(c.caching_use_count, 10_000);
    assert_eq!(c.entry_type, EntryType::Strings);
    assert!(!c.blacklist);
}

#[test]
fn istio_names_are_accepted() {
    let c = compile(json!({
        "providerUrl": "http://lists.example.com:8080/v1/list?x=1",
        "refreshInterval": "10s",
        "ttl": "1m",
        "cachingInterval": "5s",
        "cachingUseCount": 7,
        "overrides": ["10.0.0.0/8", "::1"],
        "entryType": "IP_ADDRESSES",
        "blacklist": true
    }))
    .expect("valid");
    assert_eq!(
        c.provider,
        Some(Provider::Http(HttpUrl {
            host: "lists.example.com".into(),
            port: 8080,
            path: "/v1/list?x=1".into()
        }))
    );
    assert_eq!(c.ttl, Duration::from_secs(60));
    assert_eq!(c.caching_use_count, 7);
    assert!(c.blacklist);
    let c = compile(json!({"entryType": 3, "overrides": ["^a"]})).expect("number");
    assert_eq!(c.entry_type, EntryType::Regex);
}

#[test]
fn every_error_is_collected_with_its_path() {
    let errs = compile(json!({
            "providerUrl": "ftp://x/y",
        "refreshInterval": "500ms",
        "ttl": "soon",
        "cachingInterval": "-1s",
        "cachingUseCount": -1,
        "entryType": "IP_ADDRESSES",
        "overrides": ["10.0.0.0/8", "300.1.1.1", "10.0.0.0/40"]
    }))
    .expect_err("invalid");
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "providerUrl",
            "ttl",
            "refreshInterval",
            "cachingInterval",
            "cachingUseCount",
            "overrides[1]",
            "overrides[2]"
        ],
        "{errs:?}"
    );
    assert!(errs[2].message.contains("at least 1 second"), "{}", errs[2]);
    assert!(errs[5].message.contains("300.1.1.1"), "{}", errs[5]);
}

#[test]
fn ttl_must_not_be_below_refresh() {
    let errs = compile(json!({"providerUrl": "http://h/", "refreshInterval": "60s", "ttl": "30s"}))
        .expect_err("invalid");
    assert_eq!(errs[0].path, "ttl");
    assert_eq!(
        errs[0].message,
        "ttl must be > refreshInterval, ttl is 30s and refreshInterval is 60s"
    );
    // Equal is accepted, as Istio's check was `ttl < refreshInterval`.
    compile(json!({"providerUrl": "http://h/", "refreshInterval": "60s", "ttl": "60s"}))
        .expect("valid");
    // Without a provider, Istio did not look at them.
    compile(json!({"refreshInterval": "0s", "ttl": "0s"})).expect("valid");
}

#[test]
fn provider_urls() {
    assert_eq!(
        paths(json!({"providerUrl": "https://lists.example.com/x"})),
        ["providerUrl"]
    );
    let e = compile(json!({"providerUrl": "https://lists.example.com/x"})).expect_err("https");
    assert_eq!(e[0].message, "https providers are not supported yet");
    for bad in [
        "lists.example.com",
        "http://",
        "http:///x",
        "http://h:0/",
        "http://h:99999/",
        "gopher://h/",
    ] {
        assert_eq!(paths(json!({"providerUrl": bad})), ["providerUrl"], "{bad}");
    }
    assert_eq!(
        parse_provider_url("http://[::1]:9000").expect("v6"),
        Provider::Http(HttpUrl {
            host: "::1".into(),
            port: 9000,
            path: "/".into()
        })
    );
    assert_eq!(
        parse_provider_url("file:///etc/my%20list.txt").expect("file"),
        Provider::File(PathBuf::from("/etc/my list.txt"))
    );
    assert_eq!(
        parse_provider_url("file://localhost/etc/l").expect("file"),
        Provider::File(PathBuf::from("/etc/l"))
    );
    assert!(parse_provider_url("file://relative/x").is_err());
}

#[test]
fn regex_overrides_and_unknown_fields() {
    assert_eq!(
        paths(json!({"entryType": "REGEX", "overrides": ["ok", "(bad"]})),
        ["overrides[1]"]
    );
    // STRINGS do not parse entries.
    compile(json!({"overrides": ["(bad", "300.1.1.1"]})).expect("plain strings");
    let errs = paths(json!({"provider_url": "http://h/"}));
    assert_eq!(
        errs,
        ["provider_url"],
        "unknown field is reported at its name"
    );
    let e = compile(json!({"entryType": "IPS"})).expect_err("bad enum");
    assert_eq!(e[0].path, "entryType");
    let e = compile(json!({"cachingUseCount": 3_000_000_000_i64})).expect_err("too big");
    assert_eq!(e[0].path, "cachingUseCount");
}

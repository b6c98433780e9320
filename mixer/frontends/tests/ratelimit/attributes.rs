//! The domain and descriptor entries as attributes, seen by rules, instances and the bag.

use super::*;
use mixer_model::Value;

#[tokio::test]
async fn domain_and_descriptor_attributes_reach_rules_and_instances() {
    let mut h = start().await;
    let r = h
        .ask(request(
            "edge",
            vec![
                descriptor(&[("path", "/x"), ("method", "GET")]),
                descriptor(&[("user", "vip")]),
                descriptor(&[("user", "amy"), ("extra", "1")]),
            ],
            0,
        ))
        .await;
    // The vip rule denies through the denier; the two-entry user descriptor has another shape
    // than the users rule requires, so no rule applies to it.
    assert_eq!(codes(&r), [RlCode::Ok, RlCode::OverLimit, RlCode::Ok]);
    assert_eq!(
        h.calls(),
        [(
            "per-path.instance.istio-system".to_string(),
            vec![
                ("path".to_string(), "/x".to_string()),
                ("method".to_string(), "GET".to_string())
            ],
            1
        )]
    );
    // The same descriptor in another domain matches nothing.
    let r = h
        .ask(request("other", vec![descriptor(&[("user", "vip")])], 0))
        .await;
    assert_eq!(codes(&r), [RlCode::Ok]);
    assert!(headers(&r).is_empty());
}

#[tokio::test]
async fn every_answer_carries_its_decision_id() {
    let mut h = start().await;
    let mut ids = Vec::new();
    for user in ["amy", "vip"] {
        let r = h
            .ask(request("edge", vec![descriptor(&[("user", user)])], 0))
            .await;
        let id: Vec<&str> = r
            .response_headers_to_add
            .iter()
            .filter(|h| h.key == mixer_runtime::DECISION_ID_HEADER)
            .map(|h| h.value.as_str())
            .collect();
        assert_eq!(id.len(), 1, "{r:?}");
        assert_eq!(id[0].len(), 32, "{r:?}");
        ids.push(id[0].to_string());
    }
    assert_ne!(ids[0], ids[1]);
}

#[test]
fn the_bag_carries_the_descriptor() {
    let vocabulary = Arc::new(mixer_model::Vocabulary::istio());
    let mut bag = mixer_model::AttributeBag::new(vocabulary);
    let d = descriptor(&[
        ("remote_address", "10.0.0.1"),
        ("path", "/a"),
        ("path", "/b"),
    ]);
    let r = request("edge", vec![d.clone()], 0);
    ratelimit::fill_bag(
        &mut bag,
        "edge",
        &d,
        ratelimit::hits_addend(&r, &d),
        mixer_model::Timestamp(0),
    );
    assert_eq!(
        bag.get_by_name(ratelimit::DESCRIPTOR_KEYS),
        Some(&Value::from("remote_address.path.path"))
    );
    let map = bag
        .get_by_name(ratelimit::DESCRIPTOR)
        .and_then(Value::as_map)
        .expect("map");
    assert_eq!(map.get("path"), Some("/a"));
    assert_eq!(
        bag.get_by_name(ratelimit::HITS_ADDEND),
        Some(&Value::Int64(1))
    );
    assert_eq!(
        bag.get_by_name(ratelimit::DOMAIN),
        Some(&Value::from("edge"))
    );
}

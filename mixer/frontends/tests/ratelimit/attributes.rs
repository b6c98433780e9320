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

/// `fill_bag` keeps the attribute ids of the vocabulary it last filled on its thread: filling
/// bags of vocabularies that number the attributes differently, or leave them undeclared, one
/// after the other on one thread, must still put each value under its own name.
#[test]
fn descriptor_attributes_land_under_their_names_whatever_the_vocabulary() {
    use mixer_frontends::ratelimit::{DESCRIPTOR, DESCRIPTOR_KEYS, DOMAIN, HITS_ADDEND, fill_bag};
    use mixer_model::{AttributeBag, Timestamp, ValueType, Vocabulary};
    use std::sync::Arc;

    let names = [
        (DOMAIN, ValueType::String),
        (DESCRIPTOR, ValueType::StringMap),
        (DESCRIPTOR_KEYS, ValueType::String),
        (HITS_ADDEND, ValueType::Int64),
        ("context.time", ValueType::Timestamp),
    ];
    let mut reversed = Vocabulary::empty();
    reversed
        .declare("x.first", ValueType::Bool, "")
        .expect("declare");
    for (name, ty) in names.iter().rev() {
        reversed.declare(name, *ty, "").expect("declare");
    }
    let vocabularies = [
        Arc::new(mixer_model::Vocabulary::istio()),
        Arc::new(reversed),
        Arc::new(Vocabulary::empty()),
    ];
    let now = Timestamp::now();
    for round in 0..2 {
        for (i, v) in vocabularies.iter().enumerate() {
            let mut bag = AttributeBag::new(v.clone());
            let domain = format!("d{round}{i}");
            let d = descriptor(&[("user", "amy"), ("path", "/x")]);
            fill_bag(&mut bag, &domain, &d, 3, now);
            assert_eq!(bag.get_by_name(DOMAIN), Some(&Value::from(domain.as_str())));
            assert_eq!(
                bag.get_by_name(DESCRIPTOR_KEYS),
                Some(&Value::from("user.path"))
            );
            assert_eq!(bag.get_by_name(HITS_ADDEND), Some(&Value::Int64(3)));
            assert_eq!(
                bag.get_by_name("context.time"),
                Some(&Value::Timestamp(now))
            );
            let Some(Value::StringMap(m)) = bag.get_by_name(DESCRIPTOR) else {
                panic!("{DESCRIPTOR} in vocabulary {i}: {bag:?}");
            };
            assert_eq!(m.get("user"), Some("amy"));
            // One entry: its key is the whole shape.
            fill_bag(&mut bag, &domain, &descriptor(&[("user", "bo")]), 1, now);
            assert_eq!(bag.get_by_name(DESCRIPTOR_KEYS), Some(&Value::from("user")));
        }
    }
}

use super::*;

#[test]
fn durations_parse_like_go() {
    assert_eq!(Duration::parse("19ms"), Some(Duration(19_000_000)));
    assert_eq!(Duration::parse("1h30m"), Some(Duration(5_400_000_000_000)));
    assert_eq!(Duration::parse("1.5s"), Some(Duration(1_500_000_000)));
    assert_eq!(Duration::parse("-2us"), Some(Duration(-2_000)));
    assert_eq!(Duration::parse("0"), Some(Duration(0)));
    assert_eq!(Duration::parse("10"), None);
    assert_eq!(Duration::parse("ms"), None);
    assert_eq!(Duration::parse(""), None);
    assert_eq!(Duration::parse("5 parsecs"), None);
    assert_eq!(Duration(19_000_000).to_string(), "19ms");
    assert_eq!(Duration(-3_000_000_000).to_string(), "-3s");
}

#[test]
fn timestamps_round_trip_rfc3339() {
    let t = Timestamp::parse_rfc3339("2017-01-01T00:00:00Z").expect("parses");
    assert_eq!(t.0, 1_483_228_800_000_000_000);
    assert_eq!(t.to_string(), "2017-01-01T00:00:00Z");
    assert_eq!(
        Timestamp::from_parts(1_483_228_800, 5),
        Some(Timestamp(t.0 + 5))
    );
    assert!(Timestamp::parse_rfc3339("yesterday").is_none());
}

#[test]
fn the_extreme_times_come_back_from_their_protobuf_parts() {
    // Protobuf keeps nanos in 0..10^9, so the earliest timestamp's seconds times 10^9 alone
    // leave the i64 range, though the sum is the earliest value there is.
    for t in [i64::MIN, i64::MIN + 1, -1, 0, i64::MAX] {
        let (seconds, nanos) = (t.div_euclid(1_000_000_000), t.rem_euclid(1_000_000_000));
        let nanos = i32::try_from(nanos).expect("below 10^9");
        assert_eq!(
            Timestamp::from_parts(seconds, nanos),
            Some(Timestamp(t)),
            "{t}"
        );
        assert_eq!(
            Duration::from_parts(seconds, nanos),
            Some(Duration(t)),
            "{t}"
        );
    }
    assert_eq!(Timestamp::from_parts(i64::MIN, 0), None);
    assert_eq!(Duration::from_parts(i64::MAX, 999_999_999), None);
    assert_eq!(
        Duration::from_parts(-1, -500),
        Some(Duration(-1_000_000_500))
    );
}

#[test]
fn typed_equality() {
    let v4: IpAddr = "10.0.0.1".parse().expect("ip");
    let mapped: IpAddr = "::ffff:10.0.0.1".parse().expect("ip");
    assert_eq!(Value::IpAddress(v4), Value::IpAddress(mapped));
    assert_ne!(Value::IpAddress(v4), Value::String("10.0.0.1".into()));
    assert_eq!(
        Value::DnsName("Foo.Example.COM.".into()),
        Value::DnsName("foo.example.com".into())
    );
    assert_eq!(
        Value::EmailAddress("bob@EXAMPLE.com".into()),
        Value::EmailAddress("bob@example.com".into())
    );
    assert_ne!(
        Value::EmailAddress("Bob@example.com".into()),
        Value::EmailAddress("bob@example.com".into())
    );
    assert_eq!(
        Value::Uri("HTTP://Example.com/Path".into()),
        Value::Uri("http://example.com/Path".into())
    );
    assert_ne!(
        Value::Uri("http://example.com/Path".into()),
        Value::Uri("http://example.com/path".into())
    );
    assert_eq!(Value::Int64(2), Value::Double(2.0));
    assert_ne!(Value::Int64(2), Value::String("2".into()));
}

#[test]
fn parse_as_validates_each_type() {
    assert!(Value::parse_as(ValueType::IpAddress, "300.1.1.1").is_none());
    assert!(Value::parse_as(ValueType::EmailAddress, "no-at-sign").is_none());
    assert!(Value::parse_as(ValueType::DnsName, "bad..name").is_none());
    assert!(Value::parse_as(ValueType::Uri, "not a uri").is_none());
    assert_eq!(
        Value::parse_as(ValueType::Duration, "19ms"),
        Some(Value::Duration(Duration(19_000_000)))
    );
    for ty in ValueType::ALL {
        assert_eq!(ValueType::from_manifest_name(ty.manifest_name()), Some(ty));
    }
}

proptest::proptest! {
    #[test]
    fn duration_display_parses_back(n in -1_000_000_000_000_000i64..1_000_000_000_000_000) {
        let d = Duration(n);
        proptest::prop_assert_eq!(Duration::parse(&d.to_string()), Some(d));
    }

    #[test]
    fn parse_as_never_panics(s in ".*") {
        for ty in ValueType::ALL {
            let _ = Value::parse_as(ty, &s);
        }
        let _ = Duration::parse(&s);
    }
}

#[test]
fn metric_numbers_are_read_as_istio_metric_adapters_read_them() {
    assert_eq!(Value::Int64(3).to_metric_number(), Ok(3.0));
    assert_eq!(Value::Double(1.5).to_metric_number(), Ok(1.5));
    // Durations in seconds, booleans as 1 or 0, text parsed.
    assert_eq!(
        Value::Duration(Duration(250_000_000)).to_metric_number(),
        Ok(0.25)
    );
    assert_eq!(Value::Bool(false).to_metric_number(), Ok(0.0));
    assert_eq!(Value::from(" 2.5 ").to_metric_number(), Ok(2.5));
    assert_eq!(
        Value::from("many").to_metric_number(),
        Err("\"many\" is not a number".to_string())
    );
    assert!(
        Value::StringMap(Arc::new(StringMap::new()))
            .to_metric_number()
            .is_err_and(|e| e.contains("STRING_MAP"))
    );
}

//! The SDK's conversions against the mixer's own (`mixer-oop`): an instance the mixer sends
//! arrives as it was, a result the adapter answers reaches the mixer as it was.

use std::time::Duration as StdDuration;

use mixer_model::{Code, FieldKind, FieldSpec, InstanceView, Status as ModelStatus, ValueType};
use proptest::prelude::*;
use proptest::strategy::ValueTree;

use super::*;
use mixer_adapter_api::Generated;

/// The instance the SDK makes of what the mixer sends for `instance`.
fn through_the_wire(instance: &Instance) -> Instance {
    use mixer_oop::instances as mixer;
    match instance.view() {
        InstanceView::Authorization(a) => authorization(Some(mixer::authorization(&a))).unwrap(),
        InstanceView::CheckNothing(c) => check_nothing(Some(checknothing::InstanceMsg {
            name: c.name.to_owned(),
        })),
        InstanceView::ListEntry(l) => list_entry(Some(mixer::listentry(&l))),
        InstanceView::Quota(q) => {
            quota(Some(mixer::quota(&q)), None, String::new())
                .unwrap()
                .0
        }
        InstanceView::Metric(m) => metric(mixer::metric(&m)).unwrap(),
        InstanceView::LogEntry(l) => log_entry(mixer::logentry(&l)).unwrap(),
        InstanceView::TraceSpan(t) => trace_span(mixer::tracespan(&t)).unwrap(),
        InstanceView::ReportNothing(r) => report_nothing(reportnothing::InstanceMsg {
            name: r.name.to_owned(),
        }),
        InstanceView::Kubernetes(k) => kubernetes(Some(mixer::kubernetes(&k))).unwrap(),
        InstanceView::Jwt(j) => jwt(Some(mixer::jwt(&j))),
        InstanceView::ApiKey(a) => apikey(Some(mixer::apikey(&a))),
    }
}

fn ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(IpAddr::from),
        any::<[u8; 16]>().prop_map(IpAddr::from),
    ]
}

/// Any value the protocol carries (bytes have no wire type of their own).
fn any_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        ".{0,8}".prop_map(Value::from),
        any::<i64>().prop_map(Value::Int64),
        (-1e12_f64..1e12).prop_map(Value::Double),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| Value::Timestamp(Timestamp(n))),
        any::<i64>().prop_map(|n| Value::Duration(Duration(n))),
        ip().prop_map(Value::IpAddress),
        "[a-z]{1,5}@[a-z]{1,5}\\.com".prop_map(|s| Value::EmailAddress(s.into())),
        "https://[a-z]{1,5}/[a-z]{0,5}".prop_map(|s| Value::Uri(s.into())),
        "[a-z]{1,8}\\.example".prop_map(|s| Value::DnsName(s.into())),
        prop::collection::btree_map("[a-z]{1,4}", "[a-z]{0,4}", 0..3)
            .prop_map(|m| Value::StringMap(Arc::new(StringMap::from_pairs(m)))),
    ]
}

/// A value of a declared type that is not that type's proto3 default (which the SDK leaves
/// out, see the module's rule).
fn set_value(template: Template, ty: Option<ValueType>) -> BoxedStrategy<Value> {
    match ty {
        Some(ValueType::String) => ".{1,8}".prop_map(Value::from).boxed(),
        Some(ValueType::Int64) => any::<i64>()
            .prop_filter("not 0", |n| *n != 0)
            .prop_map(Value::Int64)
            .boxed(),
        Some(ValueType::Bool) => Just(Value::Bool(true)).boxed(),
        Some(ValueType::Timestamp) => any::<i64>()
            .prop_map(|n| Value::Timestamp(Timestamp(n)))
            .boxed(),
        Some(ValueType::IpAddress) => ip().prop_map(Value::IpAddress).boxed(),
        Some(other) => panic!("no template field is of type {other}"),
        // A list entry's value is a string on the wire.
        None if template == Template::ListEntry => ".{1,8}".prop_map(Value::from).boxed(),
        None => any_value().boxed(),
    }
}

/// Any instance of `template` the mixer could send: each field set or not.
fn instance(template: Template) -> impl Strategy<Value = Instance> {
    instance_with(template, false)
}

/// Instances of `template`, with every field set when `full`.
/// The fields of `template` that Istio's out-of-process protocol carries. The quota
/// template's `charge`, `min_remaining` and `deduplication_id` are the mixer's own (see
/// `mixer_model::template`): Istio's quota `InstanceMsg` holds `dimensions` only, and the
/// mixer acts on them itself, never an out-of-process quota handler.
fn carried_fields(template: Template) -> impl Iterator<Item = &'static FieldSpec> {
    template.fields().iter().filter(move |f| {
        template != Template::Quota
            || !matches!(f.name, "charge" | "min_remaining" | "deduplication_id")
    })
}

fn instance_with(template: Template, full: bool) -> impl Strategy<Value = Instance> {
    let fields: Vec<BoxedStrategy<Option<(&'static str, FieldValue)>>> = carried_fields(template)
        .map(|spec| {
            let name = spec.name;
            let value = match spec.kind {
                FieldKind::Value(ty) => set_value(template, ty).prop_map(FieldValue::Value).boxed(),
                FieldKind::Map(_) => prop::collection::btree_map("[a-z_]{1,6}", any_value(), 1..4)
                    .prop_map(|m| {
                        FieldValue::Map(m.into_iter().map(|(k, v)| (k.into(), v)).collect())
                    })
                    .boxed(),
            };
            let field = value.prop_map(move |v| (name, v));
            if full {
                field.prop_map(Some).boxed()
            } else {
                prop::option::of(field).boxed()
            }
        })
        .collect();
    ("[a-z.-]{0,12}", fields).prop_map(move |(name, fields)| Instance {
        name: name.into(),
        template,
        fields: fields.into_iter().flatten().collect(),
    })
}

fn any_instance() -> impl Strategy<Value = Instance> {
    prop::sample::select(Template::ALL.to_vec()).prop_flat_map(instance)
}

fn status() -> impl Strategy<Value = ModelStatus> {
    (prop::sample::select(Code::ALL.to_vec()), ".{0,12}")
        .prop_map(|(code, message)| ModelStatus::new(code, message))
}

fn std_duration() -> impl Strategy<Value = StdDuration> {
    (0..u64::MAX).prop_map(StdDuration::from_nanos)
}

/// An output value of a declared type that is not its proto3 default (left out on the wire,
/// so that the binding's default applies).
fn output_value(ty: ValueType) -> BoxedStrategy<Value> {
    match ty {
        ValueType::String => ".{1,8}".prop_map(Value::from).boxed(),
        ValueType::IpAddress => ip().prop_map(Value::IpAddress).boxed(),
        ValueType::Timestamp => any::<i64>()
            .prop_map(|n| Value::Timestamp(Timestamp(n)))
            .boxed(),
        ValueType::StringMap => prop::collection::btree_map("[a-z]{1,4}", "[a-z]{0,4}", 1..3)
            .prop_map(|m| Value::StringMap(Arc::new(StringMap::from_pairs(m))))
            .boxed(),
        other => panic!("no output field is of type {other}"),
    }
}

fn header() -> impl Strategy<Value = mixer_model::HeaderOperation> {
    (
        "[a-z-]{1,8}",
        ".{0,8}",
        prop::sample::select(vec![
            mixer_model::HeaderOp::Replace,
            mixer_model::HeaderOp::Append,
            mixer_model::HeaderOp::Remove,
        ]),
    )
        .prop_map(|(name, value, op)| mixer_model::HeaderOperation { name, value, op })
}

/// Any answer a generator of `template` could give: each output set or not; a validity and a
/// denial only where the template's `OutputMsg` has room for them (not Istio's kubernetes).
fn generated(template: Template) -> impl Strategy<Value = Generated> {
    let outputs: Vec<BoxedStrategy<Option<(&'static str, Value)>>> = template
        .outputs()
        .iter()
        .map(|spec| {
            let name = spec.name;
            let FieldKind::Value(Some(ty)) = spec.kind else {
                panic!("{template} output {name} has no single type");
            };
            prop::option::of(output_value(ty).prop_map(move |v| (name, v))).boxed()
        })
        .collect();
    let ours = template != Template::Kubernetes;
    let denial = (
        prop::sample::select(
            Code::ALL
                .iter()
                .copied()
                .filter(|c| *c != Code::Ok)
                .collect::<Vec<_>>(),
        ),
        ".{0,12}",
        prop::collection::vec(header(), 0..3),
    )
        .prop_map(
            |(code, message, response_headers)| mixer_adapter_api::Denial {
                status: ModelStatus::new(code, message),
                response_headers,
            },
        );
    (
        outputs,
        prop::option::of(std_duration()),
        prop::option::of(denial),
    )
        .prop_map(move |(outputs, valid_duration, denial)| Generated {
            outputs: outputs.into_iter().flatten().collect(),
            valid_duration: valid_duration.filter(|_| ours),
            denial: denial.filter(|_| ours),
        })
}

fn any_generated() -> impl Strategy<Value = (Template, Generated)> {
    prop::sample::select(
        Template::ALL
            .into_iter()
            .filter(|t| t.variety() == mixer_model::Variety::AttributeGenerator)
            .collect::<Vec<_>>(),
    )
    .prop_flat_map(|t| generated(t).prop_map(move |g| (t, g)))
}

/// What the mixer reads of the `OutputMsg` the SDK makes of `g`.
fn generated_through_the_wire(template: Template, g: &Generated) -> Generated {
    match template {
        Template::Kubernetes => mixer_oop::kubernetes_generated(kubernetes_output(g).unwrap()),
        Template::Jwt => mixer_oop::jwt_generated(jwt_output(g).unwrap()),
        Template::ApiKey => mixer_oop::apikey_generated(apikey_output(g).unwrap()),
        other => panic!("{other} generates nothing"),
    }
    .unwrap()
}

proptest! {
    #[test]
    fn a_generators_answer_reaches_the_mixer_as_answered((template, g) in any_generated()) {
        prop_assert_eq!(generated_through_the_wire(template, &g), g);
    }

    #[test]
    fn an_instance_arrives_as_the_mixer_sent_it(instance in any_instance()) {
        prop_assert_eq!(through_the_wire(&instance), instance);
    }

    #[test]
    fn a_check_result_reaches_the_mixer_as_answered(
        status in status(),
        valid_duration in std_duration(),
        valid_use_count in 0..i32::MAX,
    ) {
        let answered = CheckResult { status, valid_duration, valid_use_count };
        prop_assert_eq!(mixer_oop::check_result(&check_result(&answered)), answered);
    }

    #[test]
    fn a_quota_result_reaches_the_mixer_as_answered(
        status in status(),
        valid_duration in std_duration(),
        granted_amount in 0..i64::MAX,
        name in "[a-z.]{1,12}",
    ) {
        let answered = QuotaResult { status, valid_duration, granted_amount, limit: None };
        let wire = quota_result(name.clone(), &answered);
        prop_assert_eq!(mixer_oop::quota_result(&wire, &name), answered);
    }
}

#[test]
fn every_declared_field_arrives_named_and_typed_as_its_template_says() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    for template in Template::ALL {
        let full = instance_with(template, true)
            .new_tree(&mut runner)
            .expect("an instance")
            .current();
        let arrived = through_the_wire(&full);
        let names: Vec<&str> = arrived.fields.iter().map(|(n, _)| *n).collect();
        let declared: Vec<&str> = carried_fields(template).map(|f| f.name).collect();
        assert_eq!(names, declared, "{template}");
        for ((name, value), spec) in arrived.fields.iter().zip(carried_fields(template)) {
            match (spec.kind, value) {
                (FieldKind::Value(Some(ty)), FieldValue::Value(v)) => {
                    assert_eq!(v.value_type(), ty, "{template} {name}");
                }
                (FieldKind::Value(None), FieldValue::Value(_))
                | (FieldKind::Map(_), FieldValue::Map(_)) => {}
                (kind, v) => panic!("{template} {name}: {v:?} is not a {kind:?}"),
            }
        }
    }
}

#[test]
fn fields_at_their_proto3_default_are_left_out_and_map_entries_kept() {
    use policy::value::Value as V;
    let set = |v: V| policy::Value { value: Some(v) };
    let span = trace_span(tracespan::InstanceMsg {
        name: "span.instance.default".into(),
        span_id: "0123".into(),
        http_status_code: 0,
        client_span: false,
        rewrite_client_span_id: true,
        source_ip: Some(policy::IpAddress { value: vec![] }),
        span_tags: [
            ("empty".to_string(), set(V::StringValue(String::new()))),
            ("zero".to_string(), set(V::Int64Value(0))),
            ("unset".to_string(), policy::Value { value: None }),
        ]
        .into(),
        ..Default::default()
    })
    .expect("converts");
    assert_eq!(
        span.fields,
        vec![
            ("span_id", FieldValue::Value(Value::from("0123"))),
            (
                "span_tags",
                FieldValue::Map(vec![
                    ("empty".into(), Value::from("")),
                    ("zero".into(), Value::Int64(0)),
                ])
            ),
            (
                "rewrite_client_span_id",
                FieldValue::Value(Value::Bool(true))
            ),
        ]
    );
    let view = mixer_model::TraceSpanInstance::of(&span).expect("a span");
    assert_eq!(
        (view.http_status_code, view.client_span, view.source_ip),
        (None, None, None)
    );
    let entry = list_entry(Some(listentry::InstanceMsg {
        name: "user".into(),
        value: String::new(),
    }));
    assert_eq!(
        mixer_model::ListEntryInstance::of(&entry).unwrap().value,
        None
    );
}

#[test]
fn a_value_without_a_model_form_is_an_invalid_argument_naming_it() {
    let bad = metric::InstanceMsg {
        dimensions: [(
            "peer".to_string(),
            policy::Value {
                value: Some(policy::value::Value::IpAddressValue(policy::IpAddress {
                    value: vec![10, 0, 0],
                })),
            },
        )]
        .into(),
        ..Default::default()
    };
    let status = metric(bad).expect_err("3 bytes are no IP address");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "metric instance: dimensions.peer: an IP address of 3 bytes"
    );
}

#[test]
fn a_quota_request_becomes_the_handlers_args() {
    let request = model::QuotaRequest {
        quotas: [(
            "requestcount.instance.default".to_string(),
            model::quota_request::QuotaParams {
                amount: 3,
                best_effort: true,
            },
        )]
        .into(),
    };
    let i = quota::InstanceMsg {
        name: "requestcount.instance.default".into(),
        ..Default::default()
    };
    let (_, args) = quota(Some(i), Some(&request), "d-1".into()).expect("converts");
    assert_eq!(
        args,
        QuotaArgs {
            amount: 3,
            best_effort: true,
            deduplication_id: "d-1".into(),
            limit_override: None,
        }
    );
    // Keyed otherwise: the only entry; none at all: one unit.
    let other = quota::InstanceMsg {
        name: "other".into(),
        ..Default::default()
    };
    let (_, args) = quota(Some(other.clone()), Some(&request), String::new()).unwrap();
    assert_eq!((args.amount, args.best_effort), (3, true));
    let (_, args) = quota(Some(other), None, String::new()).unwrap();
    assert_eq!((args.amount, args.best_effort), (1, false));
}

#[test]
fn each_error_kind_has_the_code_the_mixer_reads_it_by() {
    use tonic::Code as G;
    for (kind, code) in [
        (ErrorKind::Unavailable, G::Unavailable),
        (ErrorKind::CircuitOpen, G::Unavailable),
        (ErrorKind::Timeout, G::DeadlineExceeded),
        (ErrorKind::Overloaded, G::ResourceExhausted),
        (ErrorKind::InvalidInstance, G::InvalidArgument),
        (ErrorKind::InvalidResponse, G::Internal),
        (ErrorKind::Internal, G::Internal),
    ] {
        let status = error_status(&AdapterError::transient(kind, "it broke"));
        assert_eq!(status.code(), code, "{kind:?}");
        assert!(status.message().starts_with("it broke"), "{kind:?}");
    }
}

#[test]
fn an_output_the_template_does_not_declare_or_of_another_type_fails_the_call() {
    let undeclared = Generated::outputs(vec![("tier", Value::from("gold"))]);
    let status = apikey_output(&undeclared).expect_err("apikey has no output tier");
    assert_eq!(status.code(), tonic::Code::Internal);
    assert!(
        status.message().contains("\"tier\""),
        "{}",
        status.message()
    );
    let mistyped = Generated::outputs(vec![("source_pod_ip", Value::from("10.0.0.1"))]);
    let status = kubernetes_output(&mistyped).expect_err("an IP output as a string");
    assert!(
        status.message().contains("source_pod_ip as a STRING"),
        "{}",
        status.message()
    );
}

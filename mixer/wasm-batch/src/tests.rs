//! Round trips: what the writer writes, the reader reads back, for any batch.

use proptest::prelude::*;

use crate::{BatchRef, FieldRef, Packed, ValueRef, Writer, case};

/// A value as a test spells it.
#[derive(Debug, Clone, PartialEq)]
enum V {
    Text(u32, String),
    Int64(i64),
    Double(u64),
    Boolean(bool),
    Timestamp(i64),
    Duration(i64),
    Bytes(u32, Vec<u8>),
    StringMap(Vec<(String, String)>),
}

#[derive(Debug, Clone, PartialEq)]
enum F {
    Single(V),
    Map(Vec<(String, V)>),
}

#[derive(Debug, Clone, PartialEq)]
struct I {
    name: String,
    template: u32,
    fields: Vec<(String, F)>,
}

fn value() -> impl Strategy<Value = V> {
    let text_case = prop::sample::select(vec![
        case::STRING,
        case::EMAIL_ADDRESS,
        case::URI,
        case::DNS_NAME,
    ]);
    let bytes_case = prop::sample::select(vec![case::BYTES, case::IP_ADDRESS]);
    prop_oneof![
        (text_case, any::<String>()).prop_map(|(c, s)| V::Text(c, s)),
        any::<i64>().prop_map(V::Int64),
        any::<u64>().prop_map(V::Double),
        any::<bool>().prop_map(V::Boolean),
        any::<i64>().prop_map(V::Timestamp),
        any::<i64>().prop_map(V::Duration),
        (bytes_case, prop::collection::vec(any::<u8>(), 0..20)).prop_map(|(c, b)| V::Bytes(c, b)),
        prop::collection::vec((any::<String>(), any::<String>()), 0..4).prop_map(V::StringMap),
    ]
}

fn instance() -> impl Strategy<Value = I> {
    let field = prop_oneof![
        value().prop_map(F::Single),
        prop::collection::vec(("[a-z_]{0,12}", value()), 0..4).prop_map(F::Map),
    ];
    (
        "[a-z.-]{0,30}",
        0u32..8,
        prop::collection::vec(("[a-z_.]{0,12}", field), 0..5),
    )
        .prop_map(|(name, template, fields)| I {
            name,
            template,
            fields,
        })
}

fn write_value<'a>(w: &mut Writer<'a>, v: &'a V) {
    match v {
        V::Text(c, s) => w.text(*c, s),
        V::Int64(n) => w.wide(case::INT64, *n as u64),
        V::Double(bits) => w.wide(case::DOUBLE, *bits),
        V::Boolean(b) => w.boolean(*b),
        V::Timestamp(t) => w.wide(case::TIMESTAMP, *t as u64),
        V::Duration(d) => w.wide(case::DURATION, *d as u64),
        V::Bytes(c, b) => w.bytes(*c, b),
        V::StringMap(pairs) => w.string_map(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
    }
}

fn write<'a>(instances: impl Iterator<Item = &'a I>) -> Packed {
    let mut w = Writer::default();
    for i in instances {
        let at = w.instance(&i.name, i.template, i.fields.len());
        for (name, f) in &i.fields {
            let field = w.field(name);
            match f {
                F::Single(v) => write_value(&mut w, v),
                F::Map(entries) => {
                    w.map(entries.len());
                    for (k, v) in entries {
                        w.key(k);
                        write_value(&mut w, v);
                    }
                }
            }
            w.end(field);
        }
        w.end(at);
    }
    w.finish()
}

fn read_value(v: ValueRef<'_>) -> V {
    match v {
        ValueRef::String(s) => V::Text(case::STRING, s.into()),
        ValueRef::EmailAddress(s) => V::Text(case::EMAIL_ADDRESS, s.into()),
        ValueRef::Uri(s) => V::Text(case::URI, s.into()),
        ValueRef::DnsName(s) => V::Text(case::DNS_NAME, s.into()),
        ValueRef::Int64(n) => V::Int64(n),
        ValueRef::Double(d) => V::Double(d.to_bits()),
        ValueRef::Boolean(b) => V::Boolean(b),
        ValueRef::Timestamp(t) => V::Timestamp(t),
        ValueRef::Duration(d) => V::Duration(d),
        ValueRef::Bytes(b) => V::Bytes(case::BYTES, b.to_vec()),
        ValueRef::IpAddress(b) => V::Bytes(case::IP_ADDRESS, b.to_vec()),
        ValueRef::StringMap(m) => {
            V::StringMap(m.iter().map(|(k, v)| (k.into(), v.into())).collect())
        }
    }
}

fn read(p: &Packed) -> Vec<I> {
    let batch = BatchRef::new(&p.text, &p.bytes, &p.words).expect("UTF-8");
    let all: Vec<I> = batch
        .iter()
        .map(|i| I {
            name: i.name().into(),
            template: i.template_case().expect("a template"),
            fields: i
                .fields()
                .map(|(name, f)| {
                    let f = match f {
                        FieldRef::Single(v) => F::Single(read_value(v)),
                        FieldRef::Map(m) => {
                            F::Map(m.iter().map(|(k, v)| (k.into(), read_value(v))).collect())
                        }
                    };
                    (name.into(), f)
                })
                .collect(),
        })
        .collect();
    assert_eq!(all.len(), batch.len());
    all
}

proptest! {
    /// Written twice over, so that the second half finds every string already written.
    #[test]
    fn a_batch_reads_back_as_written(instances in prop::collection::vec(instance(), 0..6)) {
        let packed = write(instances.iter().chain(&instances));
        let twice: Vec<I> = instances.iter().chain(&instances).cloned().collect();
        prop_assert_eq!(read(&packed), twice);
    }

    /// Lookups by name find what a scan finds.
    #[test]
    fn lookups_find_the_first_match(i in instance()) {
        let packed = write(std::iter::once(&i));
        let batch = BatchRef::new(&packed.text, &packed.bytes, &packed.words).unwrap();
        let read = batch.iter().next().unwrap();
        for (name, f) in &i.fields {
            let first = i.fields.iter().find(|(n, _)| n == name).map(|(_, f)| f).unwrap();
            let found = read.field(name).unwrap();
            match (first, found) {
                (F::Single(v), FieldRef::Single(r)) => prop_assert_eq!(v, &read_value(r)),
                (F::Map(entries), FieldRef::Map(m)) => {
                    for (k, _) in entries {
                        let want = entries.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
                        prop_assert_eq!(want, m.get(k).map(read_value));
                    }
                }
                _ => prop_assert!(false, "{name}: {f:?} read as another kind"),
            }
        }
    }

    /// Cut short or scrambled words read as less, never as a panic.
    #[test]
    fn damaged_words_never_panic(i in instance(), cut in any::<prop::sample::Index>(), noise in any::<u32>()) {
        let packed = write(std::iter::once(&i));
        let mut words = packed.words.clone();
        let at = cut.index(words.len());
        words[at] = noise;
        for w in [&words[..], &packed.words[..at]] {
            let batch = BatchRef::new(&packed.text, &packed.bytes, w).unwrap();
            for i in batch.iter() {
                let _ = (i.name(), i.template_case());
                for (_, f) in i.fields() {
                    if let FieldRef::Map(m) = f {
                        m.iter().for_each(drop);
                    }
                }
            }
        }
    }
}

#[test]
fn text_that_is_not_utf8_is_an_error() {
    let e = BatchRef::new(&[0xff], &[], &[0]).err().expect("refused");
    assert!(e.starts_with("batch text:"), "{e}");
}

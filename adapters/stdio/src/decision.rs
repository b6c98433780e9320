//! Decision-log records written as JSON lines from their typed fields ([`DecisionRecord`]),
//! not through the generic entries every other logentry is written from: the same text, at
//! a fraction of the cost (#36).
//!
//! A field's name is known by its place, and written from text made once. A field whose
//! value is the very string the last record had there (the config hash, the deciding rule,
//! the verdict: strings the decision log shares between records) is copied from the text it
//! was written as then. As in [`crate::Repeats`], strings are known by address and length,
//! which is sound only while every string seen is alive: a [`DecisionLines<'a>`] only takes
//! records borrowed for `'a`, and is bound by `'a`.

use std::marker::PhantomData;
use std::sync::LazyLock;

use mixer_model::{DecisionField, DecisionRecord, DecisionValue, FieldValue, Instance, Timestamp};

use crate::config::Level;
use crate::format::{TimeText, json_head, json_string, json_string_map, push_go_duration};

/// A string's identity within a batch: where its text is, and its length.
type Id = (usize, usize);

fn id_of(text: &str) -> Id {
    (text.as_ptr() as usize, text.len())
}

/// What a decision-log instance holds for a line: its record, time and severity.
pub(crate) struct DecisionEntry<'a> {
    pub(crate) record: &'a DecisionRecord,
    pub(crate) time: Option<Timestamp>,
    pub(crate) severity: Option<&'a str>,
}

impl<'a> DecisionEntry<'a> {
    /// The instance's record, time and severity, read as [`Instance::view`] reads a
    /// logentry's, without making the record's generic entries; `None` for an instance
    /// without a record, which is written as any other.
    pub(crate) fn of(instance: &'a Instance) -> Option<DecisionEntry<'a>> {
        let mut record = None;
        let mut time = None;
        let mut severity = None;
        for (name, value) in &instance.fields {
            match (*name, value) {
                ("variables", FieldValue::Decision(r)) => record = Some(&**r),
                ("variables", _) => record = None,
                ("timestamp", FieldValue::Value(mixer_model::Value::Timestamp(t))) => {
                    time = Some(*t);
                }
                ("timestamp", _) => time = None,
                ("severity", FieldValue::Value(v)) => severity = v.as_str(),
                ("severity", _) => severity = None,
                _ => {}
            }
        }
        Some(DecisionEntry {
            record: record?,
            time,
            severity,
        })
    }
}

/// `,"name":` of every field, by [`DecisionField`].
fn keys() -> &'static [String] {
    static KEYS: LazyLock<Vec<String>> = LazyLock::new(|| {
        DecisionField::ALL
            .iter()
            .map(|field| {
                let mut key = String::from(",");
                json_string(&mut key, field.name());
                key.push(':');
                key
            })
            .collect()
    });
    &KEYS
}

/// Appends the 16 hex digits of `value`.
fn push_hex(out: &mut String, value: u64) {
    let digits = mixer_model::hex_digits(value);
    // Hex digits: always UTF-8.
    out.push_str(std::str::from_utf8(&digits).unwrap_or_default());
}

/// One place of a line (the instance, or a field) as the last line to have it wrote it.
#[derive(Default)]
struct Place {
    /// The text value written there last.
    value: Option<Id>,
    /// `,"name":value`, when the value was the same two lines in a row: a value that
    /// changes every line (a request id) is never copied.
    text: Option<String>,
}

impl Place {
    /// Appends `key` and `text` as a JSON string, or the text this place wrote last when
    /// `text` is the string it wrote.
    // Always inlined: about eight calls a line, each costing a third of its work in saved
    // registers (#36).
    #[inline(always)]
    fn write(&mut self, out: &mut String, key: &str, text: &str) {
        let id = Some(id_of(text));
        if self.value == id
            && let Some(whole) = &self.text
        {
            out.push_str(whole);
            return;
        }
        let start = out.len();
        out.push_str(key);
        json_string(out, text);
        if self.value == id {
            self.text = Some(out[start..].to_string());
        } else {
            self.value = id;
            self.text = None;
        }
    }
}

/// The lines of one batch's decision records, written from their typed fields.
pub(crate) struct DecisionLines<'a> {
    instance: Place,
    places: Vec<Place>,
    /// The field and first half of the last id written, and its text with the field's key
    /// before it: the same for every id this process makes.
    id_high: Option<(DecisionField, u64, String)>,
    /// The strings seen, borrowed for `'a` (invariant: see [`crate::Repeats`]).
    strings: PhantomData<fn(&'a str) -> &'a str>,
}

impl Default for DecisionLines<'_> {
    fn default() -> Self {
        DecisionLines {
            instance: Place::default(),
            places: DecisionField::ALL
                .iter()
                .map(|_| Place::default())
                .collect(),
            id_high: None,
            strings: PhantomData,
        }
    }
}

impl<'a> DecisionLines<'a> {
    /// Appends `record`'s line: the text [`crate::Record::write_json`] writes for its
    /// generic entries ([`DecisionRecord::entries`]), in name order.
    pub(crate) fn write(
        &mut self,
        out: &mut String,
        (level, time, instance): (Level, Timestamp, &'a str),
        record: &'a DecisionRecord,
        times: &mut TimeText,
    ) {
        json_head(out, level, time, times);
        self.instance.write(out, ",\"instance\":", instance);
        let keys = keys();
        for (field, value) in record.fields() {
            let key = &keys[field as usize];
            match value {
                DecisionValue::Text(text) => self.places[field as usize].write(out, key, text),
                DecisionValue::Word(word) => self.places[field as usize].write(out, key, word),
                DecisionValue::Id { high, low } => {
                    let start = match &self.id_high {
                        Some((at, last, text)) if *at == field && last == high => text,
                        _ => {
                            let mut text = String::from(key.as_str());
                            text.push('"');
                            push_hex(&mut text, *high);
                            &self.id_high.insert((field, *high, text)).2
                        }
                    };
                    out.push_str(start);
                    push_hex(out, *low);
                    out.push('"');
                }
                DecisionValue::Int(n) => {
                    out.push_str(key);
                    out.push_str(itoa::Buffer::new().format(*n));
                }
                DecisionValue::Duration(d) => {
                    // A duration has no character JSON escapes.
                    out.push_str(key);
                    out.push('"');
                    push_go_duration(out, *d);
                    out.push('"');
                }
                DecisionValue::Map(map) => {
                    out.push_str(key);
                    json_string_map(out, map);
                }
            }
        }
        out.push_str("}\n");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, UNIX_EPOCH};

    use mixer_model::{StringMap, Value};
    use proptest::prelude::*;

    use super::*;
    use crate::{StdioHandler, StdioParams};

    fn handler(output_level: &str) -> StdioHandler {
        let params = serde_json::json!({"outputAsJson": true, "outputLevel": output_level});
        let config = mixer_adapter_api::host::decode_params::<StdioParams>(&params)
            .expect("decodes")
            .compile()
            .expect("valid params");
        // A fixed clock: the lines of records without a time are compared across batches.
        let clock: crate::Clock = Arc::new(|| UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        StdioHandler::with_clock(config, "stdio.istio-system".into(), clock).expect("built")
    }

    /// What a record could hold, with strings from a small pool: shared strings repeat
    /// across records, as the config's do, and some need escapes.
    fn value() -> impl Strategy<Value = DecisionValue> {
        let pool: Vec<Arc<str>> = [
            "allow",
            "tag-user.rule.istio-system",
            "a\"b\\c\n",
            "é\u{2028}x",
            "",
        ]
        .into_iter()
        .map(Arc::from)
        .collect();
        prop_oneof![
            proptest::sample::select(pool).prop_map(DecisionValue::Text),
            proptest::sample::select(vec!["allow", "deny", "in_process", "a\"b"])
                .prop_map(DecisionValue::Word),
            "[ -~é]{0,12}".prop_map(|s| DecisionValue::Text(Arc::from(s))),
            // Ids share their first half, as one process's do, in any field.
            (prop_oneof![Just(7u64), any::<u64>()], any::<u64>())
                .prop_map(|(high, low)| DecisionValue::Id { high, low }),
            any::<i64>().prop_map(DecisionValue::Int),
            any::<i64>().prop_map(|n| DecisionValue::Duration(mixer_model::Duration(n))),
            proptest::collection::vec(("[a-z\\[\\]\"]{0,6}", "[ -~]{0,6}"), 0..3)
                .prop_map(|pairs| DecisionValue::Map(Arc::new(StringMap::from_pairs(pairs)))),
        ]
    }

    fn record() -> impl Strategy<Value = DecisionRecord> {
        proptest::collection::vec((0..DecisionField::ALL.len(), value()), 0..12).prop_map(
            |fields| {
                let mut record = DecisionRecord::default();
                for (at, value) in fields {
                    record.set(DecisionField::ALL[at], value);
                }
                record
            },
        )
    }

    /// A decision-log instance of `record`, as the runtime makes one.
    fn instance(
        name: &str,
        record: Arc<DecisionRecord>,
        time: Option<i64>,
        severity: &str,
    ) -> Instance {
        let mut fields = vec![("variables", FieldValue::Decision(record))];
        if let Some(t) = time {
            fields.push((
                "timestamp",
                FieldValue::Value(Value::Timestamp(Timestamp(t))),
            ));
        }
        fields.push(("severity", FieldValue::Value(Value::from(severity))));
        Instance {
            name: name.into(),
            template: mixer_model::Template::LogEntry,
            fields,
        }
    }

    /// The same instance with its record as generic entries: written the way every other
    /// logentry is.
    fn generic(instance: &Instance) -> Instance {
        let mut copy = instance.clone();
        for (_, value) in &mut copy.fields {
            if let FieldValue::Decision(record) = value {
                *value = FieldValue::Map(record.entries().to_vec());
            }
        }
        copy
    }

    proptest! {
        /// A batch of records reads as the same batch written from generic entries, whatever
        /// the fields, their values, repeats between lines, levels and times.
        #[test]
        fn records_read_as_their_generic_entries(
            batch in proptest::collection::vec(
                (record(), proptest::option::of(0i64..4_000_000_000_000_000_000), 0usize..4, 0usize..2),
                1..8,
            ),
            output_level in proptest::sample::select(vec!["INFO", "WARNING"]),
        ) {
            let records: Vec<Arc<DecisionRecord>> =
                batch.iter().map(|(r, ..)| Arc::new(r.clone())).collect();
            let instances: Vec<Instance> = batch
                .iter()
                .zip(&records)
                .map(|((_, time, severity, name), record)| {
                    let severity = ["Info", "WARNING", "error", "unknown"][*severity];
                    let name = ["decisions.instance.istio-system", "other.instance.default"][*name];
                    // Lines that share a record share its strings, as copies for two rules do.
                    instance(name, record.clone(), *time, severity)
                })
                .collect();
            let generic: Vec<Instance> = instances.iter().map(generic).collect();
            let handler = handler(output_level);
            let typed = handler.format_batch(&instances);
            prop_assert_eq!(&typed, &handler.format_batch(&generic));
            // And every line is JSON.
            for line in typed.lines() {
                prop_assert!(serde_json::from_str::<serde_json::Value>(line).is_ok(), "{}", line);
            }
        }
    }

    #[test]
    fn a_record_between_other_lines_is_written_from_its_fields() {
        let mut record = DecisionRecord::default();
        record.set(
            DecisionField::Verdict,
            DecisionValue::Text(Arc::from("deny")),
        );
        record.set(
            DecisionField::DecisionId,
            DecisionValue::Id { high: 1, low: 255 },
        );
        let record = Arc::new(record);
        let other = Instance {
            name: "access.instance.istio-system".into(),
            template: mixer_model::Template::LogEntry,
            fields: vec![(
                "variables",
                FieldValue::Map(vec![(Arc::from("path"), Value::from("/a"))]),
            )],
        };
        let batch = [
            other.clone(),
            instance(
                "decisions.instance.istio-system",
                record.clone(),
                Some(0),
                "Info",
            ),
            other,
        ];
        let text = handler("INFO").format_batch(&batch);
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON"))
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[1]["verdict"], "deny");
        assert_eq!(lines[1]["decision_id"], "000000000000000100000000000000ff");
        assert_eq!(lines[1]["time"], "1970-01-01T00:00:00.000000Z");
        assert_eq!(lines[0]["path"], "/a");
        assert_eq!(lines[2]["path"], "/a");
    }
}

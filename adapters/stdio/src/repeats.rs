//! What the JSON lines of one batch repeat: the fields whose names and values are the very
//! strings the line before had at the same place, written from that line's text rather than
//! escaped again.
//!
//! A decision-log record quotes names and words every record shares: its field names, the
//! config hash, the deciding rule and its handler, the verdict, the cache tier. These are one
//! shared string each, not copies, and they made about half of a line's cost, escaped and
//! copied piece by piece (#36).
//!
//! Strings are recognised by address and length. That is sound only while every string seen
//! stays alive and unchanged: were one freed, another could take its address. A
//! [`Repeats<'a>`] only takes strings borrowed for `'a`, and is itself bound by `'a`: the
//! compiler keeps every string it saw alive while it is used (a batch's, while its instances
//! are borrowed).

use std::marker::PhantomData;

use mixer_model::Value;

use crate::format::{Record, TimeText, json_string, json_value};

/// A string's identity within a batch: where its text is, and its length.
type Id = (usize, usize);

fn id_of(text: &str) -> Id {
    (text.as_ptr() as usize, text.len())
}

/// The identity of a value written as a JSON string from one shared string; `None` for the
/// rest (numbers, times, maps), which are written every time.
fn value_id(value: &Value) -> Option<Id> {
    match value {
        Value::String(s) | Value::EmailAddress(s) | Value::Uri(s) | Value::DnsName(s) => {
            Some(id_of(s))
        }
        _ => None,
    }
}

/// One place of a line (the instance, then its n-th field) as the last line to have it
/// wrote it.
#[derive(Default)]
struct Place {
    name: Option<Id>,
    value: Option<Id>,
    /// `,"name":value`: the name's part always, the value's only when `whole`.
    text: String,
    /// Where the name's part of `text` ends.
    name_end: usize,
    /// Whether `text` holds the value `value` names too.
    whole: bool,
}

/// The places the lines of one batch wrote ([`crate::format::Record`]): every place of a
/// line is written through it, the instance first.
///
/// (Copying a run of repeated places at once from the last line's own text was tried: the
/// bookkeeping of where each place lay cost more than the copies it saved.)
///
/// Strings alive as long as the `Repeats` that sees them:
///
/// ```
/// use mixer_adapter_stdio::Repeats;
/// use mixer_model::Value;
/// let ids: Vec<Value> = (0..2).map(|n| Value::string(n.to_string())).collect();
/// let mut repeats = Repeats::default();
/// let mut out = String::new();
/// for id in &ids {
///     repeats.write_field(&mut out, "id", id);
/// }
/// assert_eq!(out, r#","id":"0","id":"1""#);
/// ```
///
/// A string freed while the `Repeats` that saw it is still in use is refused by the compiler,
/// since another string could take its address:
///
/// ```compile_fail
/// use mixer_adapter_stdio::Repeats;
/// use mixer_model::Value;
/// let mut repeats = Repeats::default();
/// let mut out = String::new();
/// for n in 0..2 {
///     let id = Value::string(n.to_string());
///     repeats.write_field(&mut out, "id", &id);
/// }
/// ```
pub struct Repeats<'a> {
    places: Vec<Place>,
    /// How many places this line has written.
    at: usize,
    /// How many places the last line wrote.
    last_len: usize,
    /// The strings seen, borrowed for `'a` (invariant: a `Repeats` cannot be passed off as
    /// one of a shorter borrow).
    strings: PhantomData<fn(&'a str) -> &'a str>,
}

impl Default for Repeats<'_> {
    fn default() -> Self {
        Repeats {
            places: Vec::new(),
            at: 0,
            last_len: 0,
            strings: PhantomData,
        }
    }
}

impl<'a> Repeats<'a> {
    /// Appends `record` as [`Record::write_json`] does, the time through `times` and the
    /// fields the last line had through this. Both live no longer than the batch's records.
    pub fn write_json(&mut self, out: &mut String, record: &Record<'a>, times: &mut TimeText) {
        record.write_json_head(out, times);
        self.write_instance(out, record.instance);
        for (name, value) in &record.fields {
            self.write_field(out, name, value);
        }
        self.end_line();
        out.push_str("}\n");
    }

    /// Appends `,"instance":"name"`, the first place of a line.
    pub fn write_instance(&mut self, out: &mut String, name: &'a str) {
        self.write(out, "instance", Some(id_of(name)), |out| {
            json_string(out, name)
        });
    }

    /// Appends `,"name":value`, the next place of the line.
    // Inlined into the line's loop: a call per field cost about 15 instructions of saved
    // registers alone (#36).
    #[inline]
    pub fn write_field(&mut self, out: &mut String, name: &'a str, value: &'a Value) {
        self.write(out, name, value_id(value), |out| json_value(out, value));
    }

    /// Ends the line.
    pub fn end_line(&mut self) {
        self.last_len = self.at;
        self.at = 0;
    }

    /// Whether `names` are the field names the last line wrote, in its order: then they are
    /// in the order that line was sorted into, and need no sort.
    pub fn written_last<'n>(&self, mut names: impl ExactSizeIterator<Item = &'n str>) -> bool {
        // The last line's first place is its instance.
        let fields = self.places.get(1..self.last_len).unwrap_or_default();
        names.len() == fields.len()
            && fields
                .iter()
                .zip(&mut names)
                .all(|(place, name)| place.name == Some(id_of(name)))
    }

    #[inline]
    fn write(
        &mut self,
        out: &mut String,
        name: &str,
        value: Option<Id>,
        render: impl FnOnce(&mut String),
    ) {
        if self.at == self.places.len() {
            self.places.push(Place::default());
        }
        let place = &mut self.places[self.at];
        self.at += 1;
        let name_id = id_of(name);
        if place.name == Some(name_id) {
            if place.whole && value.is_some() && place.value == value {
                out.push_str(&place.text);
                return;
            }
            out.push_str(&place.text[..place.name_end]);
        } else {
            place.name = Some(name_id);
            place.value = None;
            place.whole = false;
            place.text.clear();
            place.text.push(',');
            json_string(&mut place.text, name);
            place.text.push(':');
            place.name_end = place.text.len();
            out.push_str(&place.text);
        }
        let start = out.len();
        render(out);
        if value.is_some() && value == place.value {
            // The second line in a row with this value here: worth keeping. A value that
            // changes every line (an id, a latency) is never copied.
            place.text.truncate(place.name_end);
            place.text.push_str(&out[start..]);
            place.whole = true;
        } else {
            place.value = value;
            place.whole = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;

    /// Writes `lines` (each an instance name and a list of fields, by index into `names`
    /// and `values`) with and without the repeats, line by line.
    fn both(
        names: &[Arc<str>],
        values: &[Value],
        lines: &[(usize, Vec<(usize, usize)>)],
    ) -> (String, String) {
        let mut repeats = Repeats::default();
        let (mut with, mut without) = (String::new(), String::new());
        for (i, (instance, line)) in lines.iter().enumerate() {
            // What a line writes before its places (its time), different each line.
            for out in [&mut with, &mut without] {
                out.push_str(&format!("{{{i}"));
            }
            repeats.write_instance(&mut with, &names[*instance]);
            without.push_str(",\"instance\":");
            json_string(&mut without, &names[*instance]);
            for &(n, v) in line {
                repeats.write_field(&mut with, &names[n], &values[v]);
                without.push(',');
                json_string(&mut without, &names[n]);
                without.push(':');
                json_value(&mut without, &values[v]);
            }
            repeats.end_line();
            with.push('\n');
            without.push('\n');
        }
        (with, without)
    }

    proptest! {
        /// Whatever lines repeat, a batch's text is what each line written alone gives.
        #[test]
        fn repeated_fields_are_written_as_they_are(
            lines in prop::collection::vec(
                (0usize..4, prop::collection::vec((0usize..4, 0usize..6), 0..6)), 1..12),
        ) {
            // Two names with equal text in different strings, and values of each kind that
            // is or is not recognised.
            let names: Vec<Arc<str>> = ["a", "b\"q", "a", "c"].map(Arc::from).to_vec();
            let values = vec![
                Value::string("x"),
                Value::string("x"),
                Value::string("line\nbreak"),
                Value::Int64(7),
                Value::Uri(Arc::from("http://h/")),
                Value::string(""),
            ];
            let (with, without) = both(&names, &values, &lines);
            prop_assert_eq!(with, without);
        }
    }

    #[test]
    fn a_batch_reads_as_its_lines_written_alone() {
        use crate::config::Level;
        use mixer_model::Timestamp;
        let (verdict, rule, id): (Arc<str>, Arc<str>, Arc<str>) =
            (Arc::from("verdict"), Arc::from("rule"), Arc::from("id"));
        let words = [Value::string("allow"), Value::string("deny")];
        // Each record's own id, alive as long as the batch (as a batch's instances are).
        let ids: Vec<Value> = (0..6).map(|n| Value::string(format!("{n:032x}"))).collect();
        let mut batch = String::new();
        let mut alone = String::new();
        let (mut repeats, mut times) = (Repeats::default(), TimeText::default());
        for (n, own_id) in (0_i64..).zip(&ids) {
            let record = Record {
                level: if n == 4 { Level::Error } else { Level::Info },
                time: Timestamp(n * 700_000_000),
                instance: "decisions.instance.istio-system",
                fields: vec![
                    (&*id, own_id),
                    (&*rule, &words[0]),
                    (&*verdict, &words[usize::from(n % 3 == 2)]),
                ],
            };
            repeats.write_json(&mut batch, &record, &mut times);
            record.write_json(&mut alone);
        }
        assert_eq!(batch, alone);
    }

    #[test]
    fn a_line_of_the_names_last_written_needs_no_sort() {
        let names: Vec<Arc<str>> = ["a", "b", "c"].map(Arc::from).to_vec();
        let copy_of_a: Arc<str> = Arc::from("a");
        let value = Value::Int64(1);
        let mut repeats = Repeats::default();
        let mut out = String::new();
        assert!(!repeats.written_last(names.iter().map(|n| &**n)));
        repeats.write_instance(&mut out, "i");
        for name in &names {
            repeats.write_field(&mut out, name, &value);
        }
        repeats.end_line();
        assert!(repeats.written_last(names.iter().map(|n| &**n)));
        // The same text in another string, another order, fewer names: not known sorted.
        let other = [&*copy_of_a, &names[1], &names[2]];
        assert!(!repeats.written_last(other.into_iter()));
        assert!(!repeats.written_last([&*names[1], &*names[0], &*names[2]].into_iter()));
        assert!(!repeats.written_last([&*names[0], &*names[1]].into_iter()));
    }
}

//! A report batch as a plugin reads it: the lists the mixer sent, read in place by
//! mixer-wasm-batch (the layout is `report-batch` in `proto/wit/adapter.wit`).

use mixer_wasm_batch::{BatchRef, InstanceRef, Instances};

use crate::bindings::{ReportBatch, Template};

/// The instances of one report call, in the order the mixer dispatched them.
pub struct Batch {
    text: String,
    bytes: Vec<u8>,
    words: Vec<u32>,
}

impl Batch {
    /// Takes the batch the mixer sent; its text must be UTF-8, as the mixer sends it.
    #[doc(hidden)]
    pub fn __new(raw: ReportBatch) -> Result<Batch, String> {
        let text = String::from_utf8(raw.text).map_err(|e| format!("batch text: {e}"))?;
        Ok(Batch {
            text,
            bytes: raw.bytes,
            words: raw.words,
        })
    }

    fn view(&self) -> BatchRef<'_> {
        BatchRef::with_text(&self.text, &self.bytes, &self.words)
    }

    /// How many instances the batch holds.
    pub fn len(&self) -> usize {
        self.view().len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.view().is_empty()
    }

    /// Its instances, in order.
    pub fn iter(&self) -> Instances<'_> {
        self.view().iter()
    }
}

impl<'a> IntoIterator for &'a Batch {
    type Item = InstanceRef<'a>;
    type IntoIter = Instances<'a>;

    fn into_iter(self) -> Instances<'a> {
        self.iter()
    }
}

impl Template {
    /// The template of a report instance; `None` for one this SDK does not know.
    pub fn of(instance: &InstanceRef<'_>) -> Option<Template> {
        Some(match instance.template_case()? {
            0 => Template::Authorization,
            1 => Template::Checknothing,
            2 => Template::Listentry,
            3 => Template::Quota,
            4 => Template::Metric,
            5 => Template::Logentry,
            6 => Template::Tracespan,
            7 => Template::Reportnothing,
            _ => return None,
        })
    }
}

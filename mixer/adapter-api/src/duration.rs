//! Duration params, in Go's syntax as Istio's params took them (`"5s"`, `"1m30s"`, `"0.5s"`).

use serde::{Deserialize, Deserializer};

use crate::ParamError;

/// A duration param as written. Decoding takes any string, so that a typo is reported with
/// every other problem of the params (an adapter's compile collects them all); the syntax and
/// the range are checked, at the param's path, by [`DurationParam::value`],
/// [`DurationParam::non_negative`] or [`DurationParam::positive`]. Other bounds (at most 10s,
/// at least a second) are the adapter's, with [`DurationParam::text`] for its messages.
///
/// ```
/// use mixer_adapter_api::DurationParam;
/// use mixer_adapter_api::host::decode_params;
/// #[derive(serde::Deserialize)]
/// #[serde(rename_all = "camelCase")]
/// struct Params { valid_duration: Option<DurationParam> }
/// let p: Params = decode_params(&serde_json::json!({"validDuration": " 1m30s "})).unwrap();
/// let valid = p.valid_duration.unwrap();
/// assert_eq!(valid.positive("validDuration").unwrap().as_secs(), 90);
/// assert_eq!(valid.text(), " 1m30s ");
/// let p: Params = decode_params(&serde_json::json!({"validDuration": "soon"})).unwrap();
/// let e = p.valid_duration.unwrap().value("validDuration").unwrap_err();
/// assert_eq!(e.to_string(), "validDuration: \"soon\" is not a duration such as \"5s\"");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurationParam {
    text: String,
    value: Option<mixer_model::Duration>,
}

impl DurationParam {
    /// `text` as a param (surrounding spaces ignored when it is parsed).
    pub fn new(text: impl Into<String>) -> DurationParam {
        let text = text.into();
        let value = mixer_model::Duration::parse(text.trim());
        DurationParam { text, value }
    }

    /// The param as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The duration, signed (so that a negative one can be named), or an error at `path`
    /// when it is not one.
    pub fn value(&self, path: &str) -> Result<mixer_model::Duration, ParamError> {
        self.value.ok_or_else(|| {
            let text = &self.text;
            ParamError::new(path, format!("{text:?} is not a duration such as \"5s\""))
        })
    }

    /// The duration, or an error at `path` when it is not one or is negative.
    pub fn non_negative(&self, path: &str) -> Result<std::time::Duration, ParamError> {
        match self.value(path)? {
            d if d.0 >= 0 => Ok(d.to_std()),
            d => Err(ParamError::new(
                path,
                format!("must not be negative, it is {d}"),
            )),
        }
    }

    /// The duration, or an error at `path` when it is not one or is not above zero.
    pub fn positive(&self, path: &str) -> Result<std::time::Duration, ParamError> {
        match self.value(path)? {
            d if d.0 > 0 => Ok(d.to_std()),
            d => Err(ParamError::new(
                path,
                format!("must be above zero, it is {d}"),
            )),
        }
    }
}

impl<'de> Deserialize<'de> for DurationParam {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<DurationParam, D::Error> {
        String::deserialize(deserializer).map(DurationParam::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_duration_is_named() {
        let d = DurationParam::new("-1s");
        assert_eq!(
            d.value("a").expect("parses"),
            mixer_model::Duration(-1_000_000_000)
        );
    }

    #[test]
    fn ranges_are_named_at_their_path() {
        let zero = DurationParam::new("0s");
        assert_eq!(
            zero.non_negative("a")
                .expect("zero is not negative")
                .as_secs(),
            0
        );
        let e = zero.positive("a").expect_err("zero");
        assert_eq!(e.to_string(), "a: must be above zero, it is 0s");
        let e = DurationParam::new("-2s").non_negative("b");
        assert_eq!(
            e.expect_err("negative").to_string(),
            "b: must not be negative, it is -2s"
        );
    }

    #[test]
    fn a_number_is_not_a_duration() {
        let e =
            crate::host::decode_params::<DurationParam>(&serde_json::json!(5)).expect_err("number");
        assert!(e.message.contains("expected a string"), "{e}");
    }
}

//! Handler params as config gives them, and their decoding into an adapter's own config type.

use serde::de::DeserializeOwned;

use crate::error::ParamError;

/// Handler params as they come from config: YAML turned into a JSON-like tree.
pub type Params = serde_json::Value;

/// Decodes params into an adapter's own config type, reporting the field path of the first
/// problem. Missing params (`null`) decode as an empty map so that defaults apply.
///
/// ```
/// #[derive(serde::Deserialize)]
/// #[serde(deny_unknown_fields)]
/// struct Config { size: u32 }
/// let err = mixer_adapter_api::host::decode_params::<Config>(&serde_json::json!({"size": "big"}))
///     .err().unwrap();
/// assert_eq!(err.path, "size");
/// ```
pub fn decode_params<T: DeserializeOwned>(params: &Params) -> Result<T, ParamError> {
    let empty = serde_json::Value::Object(serde_json::Map::new());
    let params = if params.is_null() { &empty } else { params };
    serde_path_to_error::deserialize(params).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        ParamError::new(path, e.into_inner().to_string())
    })
}

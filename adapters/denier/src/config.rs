//! The denier's params, in Istio 1.4's shape.

use mixer_adapter_api::{DurationParam, ParamError};
use mixer_model::{CheckResult, Code, Status};
use serde::Deserialize;

/// `params` of a denier handler.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DenierParams {
    /// The status every check gets (default FAILED_PRECONDITION).
    #[serde(default)]
    pub status: Option<StatusParams>,
    /// How long a result may be cached (default 5s).
    #[serde(default)]
    pub valid_duration: Option<DurationParam>,
    /// How many uses a result may be cached for (default 1000).
    #[serde(default)]
    pub valid_use_count: Option<i64>,
}

/// A google.rpc.Status as YAML: `{code: 7, message: "..."}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusParams {
    /// A number (7) or a name (PERMISSION_DENIED).
    #[serde(default)]
    pub code: Option<serde_json::Value>,
    /// Text for people.
    #[serde(default)]
    pub message: String,
    /// Accepted for Istio compatibility; not sent on.
    #[serde(default)]
    pub details: Option<serde_json::Value>,
}

impl DenierParams {
    /// The answer every check gets, or every problem with these params.
    pub fn compile(&self) -> Result<CheckResult, Vec<ParamError>> {
        match (self.code(), self.duration(), self.use_count()) {
            (Ok(code), Ok(valid_duration), Ok(valid_use_count)) => {
                let message = self.status.as_ref().map(|s| s.message.clone());
                Ok(CheckResult {
                    status: Status::new(code, message.unwrap_or_default()),
                    valid_duration,
                    valid_use_count,
                })
            }
            (code, duration, count) => Err([code.err(), duration.err(), count.err()]
                .into_iter()
                .flatten()
                .collect()),
        }
    }

    /// The status code.
    pub fn code(&self) -> Result<Code, ParamError> {
        let Some(code) = self.status.as_ref().and_then(|s| s.code.as_ref()) else {
            return Ok(Code::FailedPrecondition);
        };
        let parsed = match code {
            serde_json::Value::Number(n) => n
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .and_then(|n| Code::parse(&n.to_string())),
            serde_json::Value::String(s) => Code::parse(s),
            _ => None,
        };
        parsed.ok_or_else(|| {
            ParamError::new(
                "status.code",
                format!("{code} is not a status code (0-16 or a name such as PERMISSION_DENIED)"),
            )
        })
    }

    /// The valid duration.
    pub fn duration(&self) -> Result<std::time::Duration, ParamError> {
        match &self.valid_duration {
            None => Ok(std::time::Duration::from_secs(5)),
            Some(valid) => valid.non_negative("validDuration"),
        }
    }

    /// The valid use count.
    pub fn use_count(&self) -> Result<i32, ParamError> {
        match self.valid_use_count {
            None => Ok(1000),
            Some(n) => i32::try_from(n).ok().filter(|n| *n >= 0).ok_or_else(|| {
                ParamError::new(
                    "validUseCount",
                    format!("{n} is not a count between 0 and 2147483647"),
                )
            }),
        }
    }
}

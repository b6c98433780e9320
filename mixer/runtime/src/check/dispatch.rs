//! The check's dispatch stage: one instance to one handler, bounded by the handler's
//! deadline ([`crate::deadline`]). Built-in, out-of-process and Wasm handlers are all asked
//! through the adapter API's [`CheckHandler`](mixer_adapter_api::CheckHandler); this stage
//! never knows which it calls.

use mixer_adapter_api::{AdapterError, ErrorKind};
use mixer_model::{CheckResult, Instance};

use crate::deadline;
use crate::snapshot::BuiltHandler;

/// Asks `built` about `instance`. A handler that cannot answer checks is refused when the
/// snapshot is built; if one ever gets here it fails (and its fail policy decides) rather than
/// being skipped, which would allow the request without asking it.
pub(super) async fn ask(
    built: &BuiltHandler,
    instance: &Instance,
) -> Result<CheckResult, AdapterError> {
    let answer = match built.handler.as_check() {
        Some(handler) => {
            let call = deadline::within(built.deadline, handler.check(instance));
            crate::traces::child(crate::traces::ADAPTER_CALL, Some(&built.name), call).await
        }
        None => Err(AdapterError::permanent(
            ErrorKind::Internal,
            "the handler does not answer checks",
        )),
    };
    // What a handler answers reaches the client: never with a secret of its params (a
    // denial message written with `${NAME}`, an error quoting its URL).
    match (answer, &built.secrets) {
        (Ok(mut result), Some(secrets)) => {
            result.status.message = secrets.scrub(&result.status.message);
            Ok(result)
        }
        (Err(mut e), Some(secrets)) => {
            e.message = secrets.scrub(&e.message);
            Err(e)
        }
        (answer, None) => answer,
    }
}

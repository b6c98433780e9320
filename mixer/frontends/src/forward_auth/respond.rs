//! Verdict -> HTTP answer, and "could not decide" -> 5xx.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use mixer_model::{Code, HeaderOp, HeaderOperation};
use mixer_runtime::Checked;

use crate::request_scope::NoDecision;

/// The answer for a decided check. Allowed: 200 with the rules' request and response header
/// operations as headers (nginx copies them upstream with `auth_request_set`). Denied: the
/// code's status ([`http_status`]) with the response header operations, and the verdict's
/// status as the body.
pub(crate) fn check_response(checked: &Checked) -> Response {
    let verdict = &checked.verdict;
    let mut headers = HeaderMap::new();
    if verdict.is_allowed() {
        apply(&mut headers, &verdict.request_header_ops);
        apply(&mut headers, &verdict.response_header_ops);
        (StatusCode::OK, headers, Body::empty()).into_response()
    } else {
        apply(&mut headers, &verdict.response_header_ops);
        let status = http_status(verdict.status.code);
        let body = format!("{}\n", verdict.status);
        (status, headers, body).into_response()
    }
}

/// The answer for a request the mixer could not decide: 5xx, never a denial, so the proxy's
/// own failure setting decides (nginx turns an auth_request 5xx into 500 for the client). 503
/// when no valid config is active or a handler failed closed, 500 when an instance could not
/// be built (Istio's INTERNAL); the body is the runtime's wording.
pub(crate) fn could_not_decide(no_decision: impl Into<NoDecision>) -> Response {
    let no_decision = no_decision.into();
    let status = if no_decision.is_internal() {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, format!("{no_decision}\n")).into_response()
}

/// The HTTP status for a denial's code: 401 for UNAUTHENTICATED, 429 for RESOURCE_EXHAUSTED,
/// 403 for everything else.
pub fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::FORBIDDEN,
    }
}

fn apply(headers: &mut HeaderMap, ops: &[HeaderOperation]) {
    for op in ops {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(op.name.as_bytes()),
            HeaderValue::from_str(&op.value),
        ) else {
            continue;
        };
        match op.op {
            HeaderOp::Replace => {
                headers.insert(name, value);
            }
            HeaderOp::Append => {
                headers.append(name, value);
            }
            // A forward-auth answer can only add headers; removal has no meaning here.
            HeaderOp::Remove => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use mixer_runtime::NotReady;

    use super::*;
    use crate::request_scope::tests::{handler_down, instance_unbuilt};

    async fn answer(response: Response) -> (StatusCode, String) {
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        (
            status,
            String::from_utf8(body.to_vec()).expect("UTF-8 body"),
        )
    }

    #[tokio::test]
    async fn no_decision_is_a_5xx_in_the_runtimes_words() {
        assert_eq!(
            answer(could_not_decide(NotReady)).await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "no valid config is active\n".to_string()
            )
        );
        assert_eq!(
            answer(could_not_decide(handler_down())).await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("{}\n", handler_down())
            )
        );
        assert_eq!(
            answer(could_not_decide(instance_unbuilt())).await,
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("{}\n", instance_unbuilt())
            )
        );
    }
}

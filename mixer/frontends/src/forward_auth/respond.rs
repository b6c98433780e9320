//! Verdict -> HTTP answer, and "could not decide" -> 5xx.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use mixer_model::{Code, HeaderOp, HeaderOperation};
use mixer_runtime::Checked;

use crate::request_scope::NoDecision;

/// Headers an allow carries beside its rules': see [`check_response`].
const ALLOW_EXTRA_HEADERS: usize = 8;

/// The answer for a decided check. Allowed: 200 with the rules' request and response header
/// operations as headers (nginx copies them upstream with `auth_request_set`). Denied: the
/// code's status ([`http_status`]) with the response header operations, and the verdict's
/// status as the body.
pub(crate) fn check_response(checked: &Checked) -> Response {
    let verdict = &checked.verdict;
    if verdict.is_allowed() {
        // Sized once for everything an allow carries: the rules' headers, then the cache
        // hints (3), the draft rate limit headers (3), the decision id and the length. The
        // map is the response's own, not merged into an empty one: growing and merging were
        // two reallocations per check (#36).
        let ops = verdict.request_header_ops.len() + verdict.response_header_ops.len();
        let mut response = Body::empty().into_response();
        let headers = response.headers_mut();
        *headers = HeaderMap::with_capacity(ops + ALLOW_EXTRA_HEADERS);
        apply(headers, &verdict.request_header_ops);
        apply(headers, &verdict.response_header_ops);
        response
    } else {
        let mut headers = HeaderMap::new();
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

    /// An allow's header map is sized at once for its rules' headers and everything added
    /// after them, so that none of those additions reallocates it.
    #[test]
    fn an_allow_has_room_for_the_headers_added_after_it() {
        let ops = (0..3)
            .map(|i| HeaderOperation {
                name: format!("x-rule-{i}"),
                value: "v".to_string(),
                op: HeaderOp::Append,
            })
            .collect();
        let verdict = mixer_model::Verdict {
            request_header_ops: ops,
            ..mixer_model::Verdict::default()
        };
        let response = check_response(&Checked {
            verdict: std::sync::Arc::new(verdict),
            cache_hit: false,
            tier: mixer_runtime::CacheTier::None,
        });
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers().len(), 3);
        assert!(
            response.headers().capacity() >= 3 + ALLOW_EXTRA_HEADERS,
            "room for {} headers",
            response.headers().capacity()
        );
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

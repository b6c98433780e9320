//! The `CheckResponse` of [`check_response`](super::check_response) for a check without quota,
//! written straight to its gRPC frame: the same bytes prost writes for that message, without
//! building it first (a string per word, per header and for the status message) only to
//! encode and drop it.

use bytes::Bytes;
use mixer_model::{AttributeBag, HeaderOp, HeaderOperation, Verdict, Vocabulary};

use super::respond::{duration, referenced_matches};
use crate::protowire::{int, int64, message, sint32, string, string_always};

/// The gRPC frame (flag, length, message) of `check_response(verdict, vocabulary, bag,
/// global_word_count)`.
pub fn framed_check_response(
    verdict: &Verdict,
    vocabulary: &Vocabulary,
    bag: &AttributeBag,
    global_word_count: usize,
) -> Bytes {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&[0; 5]);
    // CheckResponse.precondition: PreconditionResult.
    message(&mut out, 2, |p| {
        // google.rpc.Status.
        message(p, 1, |s| {
            int(s, 1, verdict.status.code as i32);
            string(s, 2, &verdict.istio_message());
        });
        // google.protobuf.Duration.
        let valid = duration(verdict.valid_duration);
        message(p, 2, |d| {
            int64(d, 1, valid.seconds);
            int(d, 2, valid.nanos);
        });
        int(p, 3, verdict.valid_use_count);
        // ReferencedAttributes.
        let (words, matches) =
            referenced_matches(&verdict.referenced, vocabulary, bag, global_word_count);
        message(p, 5, |r| {
            for word in words {
                string_always(r, 1, word);
            }
            for m in &matches {
                message(r, 2, |a| {
                    sint32(a, 1, m.name);
                    int(a, 2, m.condition);
                    string(a, 3, &m.regex);
                    sint32(a, 4, m.map_key);
                });
            }
        });
        // RouteDirective, only when there is a header operation.
        if !verdict.request_header_ops.is_empty() || !verdict.response_header_ops.is_empty() {
            message(p, 6, |d| {
                for op in &verdict.request_header_ops {
                    message(d, 1, |h| header_operation(h, op));
                }
                for op in &verdict.response_header_ops {
                    message(d, 2, |h| header_operation(h, op));
                }
            });
        }
    });
    let len = u32::try_from(out.len() - 5).unwrap_or(u32::MAX);
    out[1..5].copy_from_slice(&len.to_be_bytes());
    Bytes::from(out)
}

/// `HeaderOperation`: name, value, and the operation (REPLACE 0, REMOVE 1, APPEND 2).
fn header_operation(out: &mut Vec<u8>, op: &HeaderOperation) {
    string(out, 1, &op.name);
    string(out, 2, &op.value);
    let operation = match op.op {
        HeaderOp::Replace => 0,
        HeaderOp::Remove => 1,
        HeaderOp::Append => 2,
    };
    int(out, 3, operation);
}

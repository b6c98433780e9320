//! The `CheckResponse` of [`check_response`](super::check_response), written straight to
//! its gRPC frame: the same message without building it first (a string per header, a
//! hashed map for the decision metadata) only to encode and drop it.

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::header_value_option::HeaderAppendAction;
use mixer_model::{HeaderOp, HeaderOperation, Verdict};
use mixer_runtime::{CacheTier, Checked, DecisionId};

use super::respond::{http_status, metadata_keys, usable};
use crate::protowire::{LEN, VARINT, int, message, string, string_always, write_key, write_varint};

/// The gRPC frame (flag, length, message) of `check_response(checked)`.
pub fn framed_check_response(checked: &Checked) -> Bytes {
    framed_check_response_with_id(checked, None)
}

/// The gRPC frame of `check_response_with_id(checked, decision_id)`.
pub fn framed_check_response_with_id(checked: &Checked, decision_id: Option<DecisionId>) -> Bytes {
    let verdict = &checked.verdict;
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&[0; 5]);
    // CheckResponse.status: google.rpc.Status.
    message(&mut out, 1, |m| {
        int(m, 1, verdict.status.code as i32);
        string(m, 2, &verdict.status.message);
    });
    if verdict.is_allowed() {
        // CheckResponse.ok_response: OkHttpResponse.
        message(&mut out, 3, |m| ok_response(m, verdict));
    } else {
        // CheckResponse.denied_response: DeniedHttpResponse.
        message(&mut out, 2, |m| {
            message(m, 1, |s| int(s, 1, http_status(verdict.status.code) as i32));
            response_headers(m, 2, &verdict.response_header_ops);
            if verdict.status.message.is_empty() {
                string(m, 3, verdict.status.code.name());
            } else {
                string(m, 3, &verdict.status.message);
            }
        });
    }
    // CheckResponse.dynamic_metadata: google.protobuf.Struct.
    message(&mut out, 4, |m| decision_metadata(m, checked, decision_id));
    let len = u32::try_from(out.len() - 5).unwrap_or(u32::MAX);
    out[1..5].copy_from_slice(&len.to_be_bytes());
    Bytes::from(out)
}

fn ok_response(m: &mut Vec<u8>, verdict: &Verdict) {
    for op in &verdict.request_header_ops {
        match op.op {
            HeaderOp::Remove if usable(op, true) => string(m, 5, &op.name),
            HeaderOp::Replace | HeaderOp::Append if usable(op, false) => header_option(m, 2, op),
            _ => {}
        }
    }
    response_headers(m, 6, &verdict.response_header_ops);
}

fn response_headers(m: &mut Vec<u8>, field: u32, ops: &[HeaderOperation]) {
    for op in ops {
        if op.op != HeaderOp::Remove && usable(op, false) {
            header_option(m, field, op);
        }
    }
}

/// A HeaderValueOption, with `append` and `append_action` agreeing (see `respond.rs`).
fn header_option(m: &mut Vec<u8>, field: u32, op: &HeaderOperation) {
    let append = op.op == HeaderOp::Append;
    message(m, field, |o| {
        message(o, 1, |h| {
            string(h, 1, &op.name);
            string(h, 2, &op.value);
        });
        message(o, 2, |b| {
            if append {
                // BoolValue.value.
                write_key(b, 1, VARINT);
                b.push(1);
            }
        });
        let action = if append {
            HeaderAppendAction::AppendIfExistsOrAdd
        } else {
            HeaderAppendAction::OverwriteIfExistsOrAdd
        };
        int(o, 3, action as i32);
    });
}

/// The Struct of `matched_rules` (a list), `cache_hit`, `cache_tier` (only `shared`),
/// `status`, `denied_by`, `dry_run` (a Struct) and `decision_id`.
fn decision_metadata(m: &mut Vec<u8>, checked: &Checked, decision_id: Option<DecisionId>) {
    let (verdict, cache_hit) = (&*checked.verdict, checked.cache_hit);
    // Each field is a map entry: key (1) and google.protobuf.Value (2).
    message(m, 1, |e| {
        string(e, 1, metadata_keys::MATCHED_RULES);
        message(e, 2, |v| {
            // Value.list_value: ListValue of Value.string_value.
            message(v, 6, |l| {
                for rule in &verdict.matched_rules {
                    message(l, 1, |r| string_always(r, 3, rule));
                }
            });
        });
    });
    message(m, 1, |e| {
        string(e, 1, metadata_keys::CACHE_HIT);
        // Value.bool_value: a oneof case is written even when false.
        message(e, 2, |v| {
            write_key(v, 4, VARINT);
            v.push(u8::from(cache_hit));
        });
    });
    if checked.tier == CacheTier::Shared {
        message(m, 1, |e| {
            string(e, 1, metadata_keys::CACHE_TIER);
            message(e, 2, |v| string_always(v, 3, CacheTier::Shared.label()));
        });
    }
    message(m, 1, |e| {
        string(e, 1, metadata_keys::STATUS);
        message(e, 2, |v| string_always(v, 3, verdict.status.code.name()));
    });
    if let Some(handler) = &verdict.denied_by {
        message(m, 1, |e| {
            string(e, 1, metadata_keys::DENIED_BY);
            message(e, 2, |v| string_always(v, 3, handler));
        });
    }
    if !verdict.dry_run.is_empty() {
        message(m, 1, |e| {
            string(e, 1, metadata_keys::DRY_RUN);
            // Value.struct_value: a Struct of rule name to Value.string_value.
            message(e, 2, |v| {
                message(v, 5, |runs| {
                    for d in &verdict.dry_run {
                        message(runs, 1, |r| {
                            string(r, 1, &d.rule);
                            message(r, 2, |w| string_always(w, 3, d.would_be.label()));
                        });
                    }
                });
            });
        });
    }
    if let Some(id) = decision_id {
        message(m, 1, |e| {
            string(e, 1, metadata_keys::DECISION_ID);
            // Value.string_value: the hex digits written as they are, rather than through
            // a `String` formatted and dropped on every answer (#36: off costs nothing).
            let hex = id.to_hex();
            message(e, 2, |v| {
                write_key(v, 3, LEN);
                write_varint(v, hex.len() as u64);
                v.extend_from_slice(&hex);
            });
        });
    }
}

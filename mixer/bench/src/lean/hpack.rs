//! The request side of HPACK (RFC 7541), as much as the lean driver needs: one header block
//! per method, built once, that leaves the server's view of our dynamic table empty.

/// The request header block for `path` at `authority`: static-table references and
/// literals that are never indexed, so it is the same bytes for every call.
pub(super) fn request_block(path: &str, authority: &str) -> Vec<u8> {
    let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
    literal(&mut block, 4, path.as_bytes()); // :path
    literal(&mut block, 1, authority.as_bytes()); // :authority
    literal(&mut block, 31, b"application/grpc"); // content-type
    block.push(0x00); // a literal with a new name
    string(&mut block, b"te");
    string(&mut block, b"trailers");
    block
}

/// A literal without indexing whose name is static-table entry `name`.
fn literal(block: &mut Vec<u8>, name: usize, value: &[u8]) {
    integer(block, 0x00, 4, name);
    string(block, value);
}

fn string(block: &mut Vec<u8>, text: &[u8]) {
    integer(block, 0x00, 7, text.len());
    block.extend_from_slice(text);
}

/// An HPACK integer with an `n`-bit prefix after `high` (RFC 7541 §5.1).
fn integer(block: &mut Vec<u8>, high: u8, n: u32, value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        block.push(high | value as u8);
        return;
    }
    block.push(high | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        block.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    block.push(rest as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_blocks_decode_to_the_call_headers() {
        let block = request_block(
            "/envoy.service.auth.v3.Authorization/Check",
            "127.0.0.1:9191",
        );
        let mut fields = Vec::new();
        httlib_hpack::Decoder::default()
            .decode(&mut block.clone(), &mut fields)
            .expect("decodes");
        let fields: Vec<(String, String)> = fields
            .into_iter()
            .map(|(n, v, _)| {
                (
                    String::from_utf8_lossy(&n).into(),
                    String::from_utf8_lossy(&v).into(),
                )
            })
            .collect();
        let expect = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/envoy.service.auth.v3.Authorization/Check"),
            (":authority", "127.0.0.1:9191"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ];
        assert_eq!(fields.len(), expect.len());
        for ((n, v), (en, ev)) in fields.iter().zip(expect) {
            assert_eq!((n.as_str(), v.as_str()), (en, ev));
        }
    }

    #[test]
    fn long_integers_continue_in_seven_bit_groups() {
        let mut out = Vec::new();
        integer(&mut out, 0, 5, 1337);
        assert_eq!(out, [31, 154, 10]); // RFC 7541 C.1.2
        out.clear();
        integer(&mut out, 0, 5, 10);
        assert_eq!(out, [10]);
    }
}

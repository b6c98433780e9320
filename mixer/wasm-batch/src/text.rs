//! String comparison eight bytes at a time, for plugins. On wasm32, `str`'s `==` and `Ord`
//! call the standard library's `memcmp`, which compares byte by byte through a function
//! call; a report plugin compares a field name, a map key and a counter's key per
//! instance, and in the report benchmark (docs/wasm.md) that `memcmp` was a fifth of the
//! whole call.

use std::cmp::Ordering;

/// The first eight bytes of `b`, as a big-endian number: numbers order as the bytes do.
fn word(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    u64::from_be_bytes(w)
}

/// `a == b`.
#[inline]
pub fn eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && cmp(a, b) == Ordering::Equal
}

/// `a.cmp(b)`: lexicographic by byte, a prefix first.
pub fn cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    while a.len() >= 8 && b.len() >= 8 {
        match word(a).cmp(&word(b)) {
            Ordering::Equal => {}
            unequal => return unequal,
        }
        a = &a[8..];
        b = &b[8..];
    }
    for (x, y) in a.iter().zip(b) {
        match x.cmp(y) {
            Ordering::Equal => {}
            unequal => return unequal,
        }
    }
    a.len().cmp(&b.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn orders_as_str_does() {
        let words = [
            "",
            "a",
            "b",
            "ab",
            "abcdefgh",
            "abcdefgi",
            "abcdefghi",
            "abcdefgh\u{e9}",
            "reviews",
            "requests",
            "destination",
            "destinatioo",
            "\u{ff}",
            "zzzzzzzzzzzzzzzzz",
            "zzzzzzzzzzzzzzzz",
        ];
        for a in words {
            for b in words {
                assert_eq!(cmp(a, b), a.cmp(b), "{a:?} {b:?}");
                assert_eq!(eq(a, b), a == b, "{a:?} {b:?}");
            }
        }
    }

    proptest! {
        /// Against the standard library's comparison, on strings that share long prefixes
        /// (so that the eight-byte words are equal for a while) and on any text.
        #[test]
        fn agrees_with_str(a in "[ab\u{e9}]{0,20}", b in "[ab\u{e9}]{0,20}", c in any::<String>()) {
            for (x, y) in [(&a, &b), (&a, &c), (&c, &b), (&c, &c)] {
                prop_assert_eq!(cmp(x, y), x.cmp(y));
                prop_assert_eq!(eq(x, y), x == y);
            }
        }
    }
}

//! Decision ids: one per decision, returned to the proxy (a response header, ext_authz dynamic
//! metadata) and written in the decision log, so that a user can quote the id of a surprising
//! answer and an operator find its record.
//!
//! A random per-process prefix and a counter: unique across replicas and restarts without a
//! syscall or a lock per decision (the prefix is drawn once, from the OS's randomness through
//! the standard library's hasher keys).

use std::fmt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Header the HTTP and rate limit front ends answer a decision's id in.
pub const DECISION_ID_HEADER: &str = "x-mixer-decision-id";

/// The id of one decision: 32 hex digits, as a W3C trace id is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DecisionId {
    counter: u64,
}

static NEXT: AtomicU64 = AtomicU64::new(1);

fn process_prefix() -> u64 {
    static PREFIX: OnceLock<u64> = OnceLock::new();
    *PREFIX.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.finish()
    })
}

impl DecisionId {
    /// A new id, different from every other this process made.
    pub fn next() -> DecisionId {
        DecisionId {
            counter: NEXT.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// A number in `[0, 1)` drawn from the id (splitmix64 of prefix and counter): what
    /// decision log sampling compares its percentage with, so that sampling needs no state
    /// of its own.
    pub fn sample(self) -> f64 {
        let mut z = (process_prefix() ^ self.counter).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl fmt::Display for DecisionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}{:016x}", process_prefix(), self.counter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_differ_and_read_as_32_hex_digits() {
        let a = DecisionId::next();
        let b = DecisionId::next();
        assert_ne!(a, b);
        let (ta, tb) = (a.to_string(), b.to_string());
        assert_ne!(ta, tb);
        assert_eq!(ta.len(), 32);
        assert!(ta.chars().all(|c| c.is_ascii_hexdigit()), "{ta}");
        // One process, one prefix.
        assert_eq!(ta[..16], tb[..16]);
    }

    #[test]
    fn samples_spread_over_the_unit_interval() {
        let n = 10_000;
        let below: usize = (0..n).filter(|_| DecisionId::next().sample() < 0.1).count();
        assert!((800..1200).contains(&below), "{below} of {n} below 0.1");
    }
}

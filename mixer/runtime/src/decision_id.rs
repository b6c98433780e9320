//! Decision ids: one per decision, returned to the proxy (a response header, ext_authz dynamic
//! metadata) and written in the decision log, so that a user can quote the id of a surprising
//! answer and an operator find its record.
//!
//! A random per-process prefix and a counter: unique across replicas and restarts without a
//! syscall or a lock per decision (the prefix is drawn once, from the OS's randomness through
//! the standard library's hasher keys).

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

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

impl DecisionId {
    /// The id's two halves, its text's first 16 hex digits and its last: the decision log
    /// writes them itself ([`mixer_model::DecisionValue::Id`]).
    pub fn parts(self) -> (u64, u64) {
        (process_prefix(), self.counter)
    }

    /// The id as written: 32 lowercase hex digits, prefix then counter. By hand rather than
    /// through `{:016x}`, as every ext_authz answer writes it.
    pub fn to_hex(self) -> [u8; 32] {
        // The prefix is the same for every id: written once, copied after (#36: half the
        // digits of every answer's id).
        static PREFIX_HEX: OnceLock<[u8; 16]> = OnceLock::new();
        let mut out = [0u8; 32];
        out[..16]
            .copy_from_slice(PREFIX_HEX.get_or_init(|| mixer_model::hex_digits(process_prefix())));
        out[16..].copy_from_slice(&mixer_model::hex_digits(self.counter));
        out
    }

    /// The decision whose request is being worked on on this thread (see [`with_current`]),
    /// for the log to write beside every line about it.
    pub fn current() -> Option<DecisionId> {
        CURRENT.with(Cell::get)
    }
}

/// `value` as 16 lowercase hex digits, the most significant first: each byte's two digits
/// looked up at once, rather than a digit per nibble (#36: every ext_authz answer writes them).
impl fmt::Display for DecisionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = self.to_hex();
        // Only ASCII hex digits were written.
        f.write_str(std::str::from_utf8(&hex).map_err(|_| fmt::Error)?)
    }
}

thread_local! {
    static CURRENT: Cell<Option<DecisionId>> = const { Cell::new(None) };
}

/// Restores the thread's previous current decision when dropped (also when a poll panics).
struct Entered(Option<DecisionId>);

impl Entered {
    fn enter(id: DecisionId) -> Entered {
        Entered(CURRENT.with(|c| c.replace(Some(id))))
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.0));
    }
}

/// Runs `future` with `id` as the thread's current decision while it is polled, so that every
/// log line written meanwhile can carry the id ([`DecisionId::current`]).
///
/// A thread-local set and reset per poll rather than a `tracing` span per request: a span is
/// allocated in the subscriber's registry and has its fields formatted even when nothing is
/// logged, which cost about a tenth of an uncached check; this costs nothing until a line is
/// actually written.
pub fn with_current<F: Future>(id: DecisionId, future: F) -> WithCurrent<F> {
    WithCurrent { id, future }
}

pin_project_lite::pin_project! {
    /// The future of [`with_current`]. It holds the request's future in place (pinned
    /// projection), as a check's future is large and an `async` wrapper would move it.
    #[must_use = "futures do nothing unless polled"]
    pub struct WithCurrent<F> {
        id: DecisionId,
        #[pin]
        future: F,
    }
}

impl<F: Future> Future for WithCurrent<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = Entered::enter(*this.id);
        this.future.poll(cx)
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
    fn the_hex_form_is_prefix_then_counter() {
        let id = DecisionId {
            counter: 0x0123_4567_89ab_cdef,
        };
        assert_eq!(
            id.to_string(),
            format!("{:016x}0123456789abcdef", process_prefix())
        );
        let first = DecisionId { counter: 1 };
        assert!(first.to_string().ends_with("0000000000000001"));
    }

    #[tokio::test]
    async fn the_current_decision_is_set_only_while_its_future_is_polled() {
        let (outer, inner) = (DecisionId::next(), DecisionId::next());
        assert_eq!(DecisionId::current(), None);
        let seen = with_current(outer, async {
            let before = DecisionId::current();
            // Yields once, so the id must be set again on the second poll.
            tokio::task::yield_now().await;
            let nested = with_current(inner, async { DecisionId::current() }).await;
            (before, nested, DecisionId::current())
        })
        .await;
        assert_eq!(seen, (Some(outer), Some(inner), Some(outer)));
        assert_eq!(DecisionId::current(), None);
    }

    #[test]
    fn samples_spread_over_the_unit_interval() {
        let n = 10_000;
        let below: usize = (0..n).filter(|_| DecisionId::next().sample() < 0.1).count();
        assert!((800..1200).contains(&below), "{below} of {n} below 0.1");
    }
}

//! A gate for a log line that a failing backend would otherwise write on every call.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Opens at most once per interval and counts the calls it held back, for a warning that
/// every call would write while a backend is down: one line per interval says as much, and a
/// line per call would flood the log and spend the CPU the remaining calls need.
///
/// ```
/// use std::time::Duration;
/// use mixer_adapter_api::log_gate::LogGate;
///
/// static DOWN: LogGate = LogGate::new(Duration::from_secs(10));
/// if let Some(held_back) = DOWN.due() {
///     eprintln!("backend down ({held_back} more failures since the last line)");
/// }
/// ```
#[derive(Debug)]
pub struct LogGate {
    every_ms: u64,
    /// When the gate last opened, in milliseconds since the process's first look at the
    /// clock, plus one (0: never).
    last: AtomicU64,
    held_back: AtomicU64,
}

impl LogGate {
    /// A gate that opens at most once per `every`.
    pub const fn new(every: Duration) -> LogGate {
        LogGate {
            every_ms: every.as_millis() as u64,
            last: AtomicU64::new(0),
            held_back: AtomicU64::new(0),
        }
    }

    /// `Some(n)` when a line is due now (`n`: the calls held back since the last line),
    /// otherwise `None`, and this call is counted as held back.
    pub fn due(&self) -> Option<u64> {
        static START: OnceLock<Instant> = OnceLock::new();
        let elapsed = START.get_or_init(Instant::now).elapsed().as_millis();
        self.due_at(u64::try_from(elapsed).unwrap_or(u64::MAX - 1) + 1)
    }

    fn due_at(&self, now: u64) -> Option<u64> {
        let last = self.last.load(Ordering::Relaxed);
        let open = last == 0 || now >= last.saturating_add(self.every_ms);
        // Of callers arriving together, one opens the gate.
        if open
            && self
                .last
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.held_back.swap(0, Ordering::Relaxed));
        }
        self.held_back.fetch_add(1, Ordering::Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_once_per_interval_and_counts_what_it_held_back() {
        let gate = LogGate::new(Duration::from_secs(10));
        assert_eq!(gate.due_at(1), Some(0));
        assert_eq!(gate.due_at(2), None);
        assert_eq!(gate.due_at(9_999), None);
        assert_eq!(gate.due_at(10_001), Some(2));
        assert_eq!(gate.due_at(10_002), None);
        assert_eq!(gate.due_at(30_000), Some(1));
    }

    #[test]
    fn the_first_call_opens_it() {
        let gate = LogGate::new(Duration::from_secs(3600));
        assert_eq!(gate.due(), Some(0));
        assert_eq!(gate.due(), None);
        assert_eq!(gate.held_back.load(Ordering::Relaxed), 1);
    }
}

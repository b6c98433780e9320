//! A circuit breaker for a handler that calls a backend (an out-of-process adapter, Redis):
//! after `failure_threshold` consecutive failures (unreachable, timed out, broken answers)
//! calls fail at once for `cool_down`; then one probe call goes through (half open): its
//! success closes the circuit, its failure opens it again. Time comes from `tokio::time`, so
//! tests can pause the clock.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// When the breaker opens and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerOptions {
    /// Consecutive failures that open the circuit; 0 disables the breaker.
    pub failure_threshold: u32,
    /// How long the circuit stays open before a probe is let through.
    pub cool_down: Duration,
}

impl Default for BreakerOptions {
    /// Five failures in a row; a probe after half a second (a restarted adapter is used again
    /// within a second).
    fn default() -> BreakerOptions {
        BreakerOptions {
            failure_threshold: 5,
            cool_down: Duration::from_millis(500),
        }
    }
}

/// The breaker's state, as reported in metrics (`mixer_oop_circuit_state`,
/// `mixer_redisquota_circuit_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CircuitState {
    /// Calls go through (0).
    Closed,
    /// Calls fail at once (1).
    Open,
    /// One probe call is (or may be) under way (2).
    HalfOpen,
}

impl CircuitState {
    /// 0 closed, 1 open, 2 half open.
    pub fn gauge(self) -> i64 {
        match self {
            CircuitState::Closed => 0,
            CircuitState::Open => 1,
            CircuitState::HalfOpen => 2,
        }
    }
}

#[derive(Debug)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { probing: bool },
}

/// The breaker. Take a [`Admission`] before each call and report its outcome on it.
#[derive(Debug)]
pub struct CircuitBreaker {
    options: BreakerOptions,
    state: Mutex<State>,
    opened: std::sync::atomic::AtomicU64,
}

/// The right to make one call; report how it went with [`Admission::success`] or
/// [`Admission::failure`]. Dropped without either (the call was abandoned), it counts as
/// neither, and a probe slot is given back.
#[derive(Debug)]
pub struct Admission<'a> {
    breaker: &'a CircuitBreaker,
    probe: bool,
    done: bool,
}

impl CircuitBreaker {
    /// A closed breaker.
    pub fn new(options: BreakerOptions) -> CircuitBreaker {
        CircuitBreaker {
            options,
            state: Mutex::new(State::Closed { failures: 0 }),
            opened: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets a call through, or `None` while the circuit is open (or half open with its probe
    /// under way).
    pub fn admit(&self) -> Option<Admission<'_>> {
        if self.options.failure_threshold == 0 {
            return Some(Admission {
                breaker: self,
                probe: false,
                done: false,
            });
        }
        let mut state = self.lock();
        let probe = match &*state {
            State::Closed { .. } => false,
            State::Open { until } if Instant::now() >= *until => {
                *state = State::HalfOpen { probing: true };
                true
            }
            State::Open { .. } | State::HalfOpen { probing: true } => return None,
            State::HalfOpen { probing: false } => {
                *state = State::HalfOpen { probing: true };
                true
            }
        };
        Some(Admission {
            breaker: self,
            probe,
            done: false,
        })
    }

    /// The current state (an open circuit whose cool-down is over reads as half open).
    pub fn state(&self) -> CircuitState {
        match &*self.lock() {
            State::Closed { .. } => CircuitState::Closed,
            State::Open { until } if Instant::now() >= *until => CircuitState::HalfOpen,
            State::Open { .. } => CircuitState::Open,
            State::HalfOpen { .. } => CircuitState::HalfOpen,
        }
    }

    /// How many times the circuit has opened.
    pub fn times_opened(&self) -> u64 {
        self.opened.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn record(&self, probe: bool, ok: bool) {
        if self.options.failure_threshold == 0 {
            return;
        }
        let mut state = self.lock();
        let open = |state: &mut State| {
            *state = State::Open {
                until: Instant::now() + self.options.cool_down,
            };
            self.opened
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        };
        match (&mut *state, ok) {
            (_, true) => *state = State::Closed { failures: 0 },
            (State::Closed { failures }, false) => {
                *failures += 1;
                if *failures >= self.options.failure_threshold {
                    open(&mut state);
                }
            }
            (State::HalfOpen { .. }, false) if probe => open(&mut state),
            // A call admitted before the circuit opened failing late changes nothing.
            (_, false) => {}
        }
    }
}

impl Admission<'_> {
    /// The backend answered.
    pub fn success(mut self) {
        self.done = true;
        self.breaker.record(self.probe, true);
    }

    /// The backend could not be reached, timed out or answered garbage.
    pub fn failure(mut self) {
        self.done = true;
        self.breaker.record(self.probe, false);
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        if !self.done && self.probe {
            let mut state = self.breaker.lock();
            if let State::HalfOpen { probing } = &mut *state {
                *probing = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn opens_after_consecutive_failures_and_recovers_after_a_probe() {
        let b = CircuitBreaker::new(BreakerOptions {
            failure_threshold: 3,
            cool_down: Duration::from_secs(1),
        });
        b.admit().expect("closed").failure();
        b.admit().expect("closed").success();
        for _ in 0..3 {
            b.admit().expect("closed").failure();
        }
        assert_eq!(b.state(), CircuitState::Open);
        assert!(b.admit().is_none());
        tokio::time::advance(Duration::from_millis(1001)).await;
        let probe = b.admit().expect("half open");
        assert!(b.admit().is_none(), "one probe at a time");
        probe.failure();
        assert_eq!(b.state(), CircuitState::Open);
        tokio::time::advance(Duration::from_millis(1001)).await;
        drop(b.admit().expect("probe"));
        b.admit()
            .expect("abandoned probe gives its slot back")
            .success();
        assert_eq!(b.state(), CircuitState::Closed);
        assert_eq!(b.times_opened(), 2);
    }
}

//! The engine plugins run on with the clock of their deadlines: the epoch advances every
//! tick, and a deadline is a number of ticks.

use std::time::Duration;

use wasmtime::Engine;

/// An engine, how often its epoch advances, and whether it meters fuel.
#[derive(Clone)]
pub(crate) struct EpochClock {
    engine: Engine,
    tick: Duration,
    metered: bool,
}

impl EpochClock {
    /// `engine`, whose epoch something advances every `tick`; `metered` when it was built
    /// with fuel accounting.
    pub(crate) fn new(engine: Engine, tick: Duration, metered: bool) -> EpochClock {
        EpochClock {
            engine,
            tick,
            metered,
        }
    }

    /// The engine.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Whether code compiled by this engine counts fuel (and a store must be given some).
    pub(crate) fn metered(&self) -> bool {
        self.metered
    }

    /// Deadline in epoch ticks: at least the deadline, at most one tick more.
    pub(crate) fn ticks(&self, deadline: Duration) -> u64 {
        let tick = self.tick.as_nanos().max(1);
        let ticks = deadline.as_nanos().div_ceil(tick);
        u64::try_from(ticks).unwrap_or(u64::MAX - 1) + 1
    }
}

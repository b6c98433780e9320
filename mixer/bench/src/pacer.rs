//! A sleep with microsecond precision for the open loop.
//!
//! tokio's timer wheel has millisecond slots: every caller due within the same millisecond
//! wakes at once, so an open loop paced by it sends bursts, and when a caller's interval is
//! below a millisecond its schedule falls behind and the lag shows up as latency that the
//! server never caused. A timerfd per caller fires at its own due time, through the same
//! epoll the runtime already waits on, so pacing costs no extra thread.

use std::io;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::time::{
    Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
    timerfd_settime,
};
use tokio::io::unix::AsyncFd;

/// One caller's timer.
pub struct Pacer {
    timer: Option<AsyncFd<OwnedFd>>,
}

impl Pacer {
    /// A timerfd, or tokio's timer where a timerfd cannot be had.
    pub fn new() -> Pacer {
        let timer = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )
        .ok()
        .and_then(register);
        Pacer { timer }
    }

    /// Returns at `due` (or at once if it has passed).
    pub async fn sleep_until(&mut self, due: Instant) {
        let Some(timer) = &self.timer else {
            tokio::time::sleep_until(due.into()).await;
            return;
        };
        let wait = due.saturating_duration_since(Instant::now());
        if wait.is_zero() {
            return;
        }
        if arm(timer, wait).is_err() {
            tokio::time::sleep_until(due.into()).await;
            return;
        }
        loop {
            let Ok(mut ready) = timer.readable().await else {
                tokio::time::sleep_until(due.into()).await;
                return;
            };
            let mut expirations = [0u8; 8];
            match ready.try_io(|fd| Ok(rustix::io::read(fd.get_ref(), &mut expirations)?)) {
                Ok(Ok(_)) => return,
                Ok(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Ok(Err(_)) => {
                    tokio::time::sleep_until(due.into()).await;
                    return;
                }
                Err(_would_block) => continue,
            }
        }
    }
}

impl Default for Pacer {
    fn default() -> Self {
        Pacer::new()
    }
}

// `AsyncFd::new` is deprecated because a borrowed descriptor could be closed while
// registered; here the `OwnedFd` moves into the `AsyncFd`, which closes it only after
// deregistering, and the safe constructor keeps the crate free of `unsafe`.
#[allow(deprecated)]
fn register(fd: OwnedFd) -> Option<AsyncFd<OwnedFd>> {
    AsyncFd::with_interest(fd, tokio::io::Interest::READABLE).ok()
}

fn arm(timer: &AsyncFd<OwnedFd>, wait: Duration) -> io::Result<()> {
    let value = Timespec {
        tv_sec: i64::try_from(wait.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(wait.subsec_nanos()),
    };
    let spec = Itimerspec {
        it_interval: Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: value,
    };
    timerfd_settime(timer.get_ref(), TimerfdTimerFlags::empty(), &spec)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn never_wakes_before_the_due_time() {
        let mut pacer = Pacer::new();
        assert!(pacer.timer.is_some(), "Linux has timerfd");
        for wait in [0, 50, 300, 1500] {
            let due = Instant::now() + Duration::from_micros(wait);
            pacer.sleep_until(due).await;
            assert!(Instant::now() >= due, "woke before a {wait} µs due time");
        }
    }
}

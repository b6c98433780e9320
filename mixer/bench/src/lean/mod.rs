//! The lean driver for gRPC targets: one thread, no async runtime, a few HTTP/2 connections
//! polled together, requests encoded and framed once.
//!
//! On a 2-core machine the generator shares the CPU with the server it measures. Driven by
//! tokio and the `h2` crate, with a timer per caller, it cost about as much CPU per call as
//! the mixer itself (24 µs at 20k calls/s, half of it in the kernel), so at half of the
//! mixer's saturation it needed most of a core and its own lateness became the tail it
//! measured. Here one loop sends what is due, writes once per connection, waits in a single
//! `poll` until the next request is due or an answer arrives, and reads what came.

mod conn;
mod hpack;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustix::event::{PollFd, PollFlags, poll};
use rustix::time::Timespec;

use crate::load::{Report, Spec};
use crate::targets::Outcome;
use conn::Conn;

/// How long calls still in flight at the end may take to finish before the run stops.
const GRACE: Duration = Duration::from_secs(5);

/// What to call and how to read its answers.
pub struct Calls {
    /// Server address.
    pub addr: SocketAddr,
    /// The gRPC method's path.
    pub path: &'static str,
    /// Framed request messages, cycled through.
    pub requests: Arc<Vec<Bytes>>,
    /// The outcome of an answer message.
    pub classify: fn(&[u8]) -> Outcome,
    /// HTTP/2 connections to spread the calls over.
    pub connections: usize,
}

/// A call's place in the schedule.
#[derive(Clone, Copy)]
struct Slot {
    /// When latency counts from: when the call was due, so that the server's queueing is not
    /// hidden; but when the loop went to sleep before it was due and woke late, from when it
    /// was sent, as the loop's lateness is the machine's (it is shown apart, as the lag).
    from: Instant,
    measured: bool,
}

/// Runs `spec` against `calls` on the current thread (it blocks: run it off the runtime).
pub fn run(spec: Spec, calls: &Calls) -> anyhow::Result<Report> {
    let mut conns = (0..calls.connections.max(1))
        .map(|_| Conn::connect(calls.addr, calls.path))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Timer slack (50 µs by default) would make every wake-up late by up to that much.
    let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1));
    let cap = spec.concurrency.max(1);
    let start = Instant::now();
    let measure_from = start + spec.warmup;
    let end = measure_from + spec.duration;
    let interval = spec.interval();
    let mut report = Report::empty(spec.duration);
    let mut slots: Vec<Slot> = Vec::new();
    let mut free: Vec<u64> = Vec::new();
    let mut next: u64 = 0;
    let mut in_flight = 0usize;
    let mut turn = 0usize;
    let mut finished = Vec::new();
    // When the loop last saw the schedule before sleeping: a call due after then was ahead of
    // schedule, so only the loop's own wake-up can have made it late.
    let mut looked = start;
    loop {
        let now = Instant::now();
        // Start what is due, as long as a caller is free.
        loop {
            let due = match interval {
                Some(iv) => start + iv.mul_f64(next as f64),
                None => now,
            };
            if due > now || due >= end || in_flight >= cap {
                break;
            }
            let Some(conn) = pick(&mut conns, &mut turn) else {
                break;
            };
            let ahead = interval.is_some() && due > looked;
            if ahead && due >= measure_from {
                let late = now.saturating_duration_since(due);
                let _ = report.lag.record(nanos(late).max(1_000));
            }
            let slot = Slot {
                from: if ahead { now } else { due },
                measured: due >= measure_from,
            };
            let tag = match free.pop() {
                Some(tag) => {
                    slots[tag as usize] = slot;
                    tag
                }
                None => {
                    slots.push(slot);
                    slots.len() as u64 - 1
                }
            };
            let message = calls.requests[(next as usize) % calls.requests.len()].clone();
            conn.start(tag, message);
            next += 1;
            in_flight += 1;
        }
        for conn in &mut conns {
            if conn.flush().is_err() {
                conn.receive(&mut finished);
            }
        }
        let now = Instant::now();
        if now >= end && (in_flight == 0 || now >= end + GRACE) {
            break;
        }
        // Closed loop: the start loop above filled every free caller, so only answers wake.
        let startable = in_flight < cap && conns.iter().any(Conn::can_start);
        let wake = match interval {
            Some(iv) if startable && now < end => (start + iv.mul_f64(next as f64)).min(end),
            _ => end.max(now) + GRACE,
        };
        looked = now;
        let readable = wait(&conns, wake.saturating_duration_since(now))?;
        for (conn, _) in conns.iter_mut().zip(readable).filter(|(_, r)| *r) {
            conn.receive(&mut finished);
        }
        for (call, at) in finished.drain(..) {
            in_flight -= 1;
            free.push(call.tag);
            let Some(slot) = slots.get(call.tag as usize).copied() else {
                continue;
            };
            if !slot.measured {
                continue;
            }
            let _ = report
                .latency
                .record(nanos(at.saturating_duration_since(slot.from)).max(1_000));
            match call.message.as_deref().map(calls.classify) {
                Some(Outcome::Allowed) => report.allowed += 1,
                Some(Outcome::Denied) => report.denied += 1,
                Some(Outcome::Error) | None => report.errors += 1,
            }
        }
        if conns.iter().all(|c| !c.can_start() && c.in_flight() == 0) {
            anyhow::bail!("every connection to {} closed", calls.addr);
        }
    }
    report.calls = report.allowed + report.denied + report.errors;
    Ok(report)
}

/// The next connection able to start a call, taking turns.
fn pick<'a>(conns: &'a mut [Conn], turn: &mut usize) -> Option<&'a mut Conn> {
    let n = conns.len();
    let i = (0..n)
        .map(|k| (*turn + k) % n)
        .find(|&i| conns[i].can_start())?;
    *turn = i + 1;
    conns.get_mut(i)
}

/// Waits until a connection has something to read (or room to write what waits), or for
/// `timeout`; says which connections to read (a broken one reads as readable).
fn wait(conns: &[Conn], timeout: Duration) -> anyhow::Result<Vec<bool>> {
    let mut fds: Vec<PollFd<'_>> = conns
        .iter()
        .map(|c| {
            let mut flags = PollFlags::IN;
            if c.wants_write() {
                flags |= PollFlags::OUT;
            }
            PollFd::new(c.socket(), flags)
        })
        .collect();
    let timeout = Timespec {
        tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    match poll(&mut fds, Some(&timeout)) {
        Ok(_) | Err(rustix::io::Errno::INTR) => {}
        Err(e) => return Err(e.into()),
    }
    let wake = PollFlags::IN | PollFlags::ERR | PollFlags::HUP;
    Ok(fds.iter().map(|fd| fd.revents().intersects(wake)).collect())
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

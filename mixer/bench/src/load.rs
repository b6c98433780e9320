//! The load driver: closed loop (fixed concurrency, as fast as answers come) or open loop
//! (fixed rate; latency measured from when each request was due, so a slow server cannot
//! hide its queueing).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::pacer::Pacer;
use crate::targets::{Client, Outcome};

/// How to drive.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// Concurrent callers.
    pub concurrency: usize,
    /// Measured time.
    pub duration: Duration,
    /// Unmeasured time first.
    pub warmup: Duration,
    /// Requests per second in total; `None` for closed loop.
    pub rate: Option<f64>,
}

impl Spec {
    /// Open loop: the time between two requests' due times.
    pub fn interval(&self) -> Option<Duration> {
        self.rate
            .map(|r| Duration::from_secs_f64(1.0 / r.max(1e-9)))
    }
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct Report {
    /// Calls completed in the measured window.
    pub calls: u64,
    /// Of which allowed.
    pub allowed: u64,
    /// Of which denied.
    pub denied: u64,
    /// Of which failed.
    pub errors: u64,
    /// Measured time.
    pub elapsed: Duration,
    /// Latency in nanoseconds.
    pub latency: Histogram<u64>,
    /// Open loop: how late, in nanoseconds, a caller that slept until its request was due
    /// woke to send it. The generator's own lag (its timer and its share of the CPU): when
    /// it is large, the machine, not the server, sets the tail.
    pub lag: Histogram<u64>,
}

impl Report {
    /// No calls yet, over a measured time of `elapsed`.
    pub fn empty(elapsed: Duration) -> Report {
        Report {
            calls: 0,
            allowed: 0,
            denied: 0,
            errors: 0,
            elapsed,
            latency: histogram(),
            lag: histogram(),
        }
    }

    /// Completed calls per second.
    pub fn throughput(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// A latency percentile in microseconds.
    pub fn micros(&self, percentile: f64) -> f64 {
        self.latency.value_at_percentile(percentile) as f64 / 1000.0
    }

    /// One line for people.
    pub fn line(&self, label: &str) -> String {
        let lag = if self.lag.is_empty() {
            String::new()
        } else {
            format!(
                "  generator lag p99 {:.0}us",
                self.lag.value_at_percentile(99.0) as f64 / 1000.0
            )
        };
        format!(
            "{label:<28} {:>10.0} req/s  p50 {:>8.1}us  p90 {:>8.1}us  p99 {:>8.1}us  p99.9 {:>8.1}us  allowed {} denied {} errors {}{lag}",
            self.throughput(),
            self.micros(50.0),
            self.micros(90.0),
            self.micros(99.0),
            self.micros(99.9),
            self.allowed,
            self.denied,
            self.errors
        )
    }
}

fn histogram() -> Histogram<u64> {
    // 1 µs .. 60 s at 3 significant digits; these bounds are valid, so creation cannot fail.
    Histogram::new_with_bounds(1_000, 60_000_000_000, 3)
        .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable_histogram()))
}

#[cold]
fn unreachable_histogram() -> Histogram<u64> {
    panic!("histogram bounds are constants and valid")
}

/// Runs `spec` with one client per caller from `make`.
///
/// Open loop: request `k` is due at `k / rate` after the start, and the first free caller
/// takes the next one due, so a slow answer delays no later request more than the server
/// does. Closed loop: each caller sends again as soon as it has its answer.
pub async fn run<C: Client>(spec: Spec, mut make: impl FnMut(usize) -> C) -> Report {
    let start = Instant::now();
    let measure_from = start + spec.warmup;
    let end = measure_from + spec.duration;
    let interval = spec.interval();
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(spec.concurrency);
    for worker in 0..spec.concurrency {
        let mut client = make(worker);
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let mut hist = histogram();
            let mut lag = histogram();
            let mut pacer = Pacer::new();
            let (mut allowed, mut denied, mut errors) = (0u64, 0u64, 0u64);
            let mut closed_count = worker as u64;
            loop {
                let (k, due, sent) = match interval {
                    Some(iv) => {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let due = start + iv.mul_f64(k as f64);
                        if due >= end {
                            break;
                        }
                        // Latency counts from when the request was due (so a server that
                        // falls behind cannot hide its queueing), except for the timer's own
                        // lateness when the caller was ahead of schedule and slept.
                        let sent = if due > Instant::now() {
                            pacer.sleep_until(due).await;
                            let woke = Instant::now();
                            if due >= measure_from {
                                let late = u64::try_from((woke - due).as_nanos());
                                let _ = lag.record(late.unwrap_or(u64::MAX).max(1_000));
                            }
                            woke
                        } else {
                            due
                        };
                        (k, due, sent)
                    }
                    None => {
                        let now = Instant::now();
                        if now >= end {
                            break;
                        }
                        let k = closed_count;
                        closed_count += spec.concurrency as u64;
                        (k, now, now)
                    }
                };
                let outcome = client.call(usize::try_from(k).unwrap_or(0)).await;
                let done = Instant::now();
                if due >= measure_from {
                    let _ = hist.record(
                        u64::try_from((done - sent).as_nanos())
                            .unwrap_or(u64::MAX)
                            .max(1_000),
                    );
                    match outcome {
                        Outcome::Allowed => allowed += 1,
                        Outcome::Denied => denied += 1,
                        Outcome::Error => errors += 1,
                    }
                }
            }
            (hist, lag, allowed, denied, errors)
        }));
    }
    let mut report = Report::empty(spec.duration);
    for t in tasks {
        if let Ok((hist, lag, a, d, e)) = t.await {
            let _ = report.latency.add(&hist);
            let _ = report.lag.add(&lag);
            report.allowed += a;
            report.denied += d;
            report.errors += e;
        }
    }
    report.calls = report.allowed + report.denied + report.errors;
    report
}

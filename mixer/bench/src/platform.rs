//! What the machine itself gives any server, measured beside the servers so that a run's
//! latency can be read against it:
//!
//! - **stalls**: a thread that only sleeps 100 µs at a time, on an otherwise idle machine,
//!   should wake 100 µs later. How often it wakes more than a millisecond late, and what share
//!   of the time such stalls cover, is the floor of any p99: a request in flight during a
//!   stall waits it out, whatever the server does. On a virtual machine these are mostly the
//!   host running something else on our virtual CPU.
//! - **round trip**: a plain TCP ping-pong between two processes (blocking sockets, no
//!   runtime, no HTTP/2, no protobuf) is the floor of any out-of-process hop, which needs at
//!   least one.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// How late a sleeping thread woke.
#[derive(Clone, Copy, Debug)]
pub struct Stalls {
    /// Sleeps taken.
    pub sleeps: u64,
    /// Of which woke more than 1 ms late.
    pub over_1ms: u64,
    /// The share of the measured time (0..1) that those late wake-ups cover.
    pub covered: f64,
    /// The latest wake-up.
    pub worst: Duration,
}

impl Stalls {
    /// One line for people.
    pub fn line(&self) -> String {
        format!(
            "platform: a thread sleeping 100 us at a time on the idle machine woke > 1 ms late {} times in {} sleeps; those stalls cover {:.2}% of the time (worst {:.1} ms). A p99 under 1 ms needs them well under 1%.",
            self.over_1ms,
            self.sleeps,
            self.covered * 100.0,
            self.worst.as_secs_f64() * 1e3
        )
    }
}

const NAP: Duration = Duration::from_micros(100);
const LATE: Duration = Duration::from_millis(1);

/// Sleeps 100 µs at a time for `duration` on a thread of its own and counts the late
/// wake-ups. Run it while nothing else is driven: under load, waiting for a busy core would
/// count too.
pub fn stalls(duration: Duration) -> Stalls {
    let measure = move || {
        let start = Instant::now();
        let (mut sleeps, mut over_1ms, mut late_total, mut worst) =
            (0u64, 0u64, Duration::ZERO, Duration::ZERO);
        while start.elapsed() < duration {
            let before = Instant::now();
            std::thread::sleep(NAP);
            let late = before.elapsed().saturating_sub(NAP);
            sleeps += 1;
            if late > LATE {
                over_1ms += 1;
                late_total += late;
            }
            worst = worst.max(late);
        }
        Stalls {
            sleeps,
            over_1ms,
            covered: late_total.as_secs_f64() / start.elapsed().as_secs_f64().max(1e-9),
            worst,
        }
    };
    // A thread of its own: the caller may be a runtime worker, which must not block.
    std::thread::spawn(measure).join().unwrap_or(Stalls {
        sleeps: 0,
        over_1ms: 0,
        covered: 0.0,
        worst: Duration::ZERO,
    })
}

/// Echoes every connection's bytes back until it closes, a thread per connection.
pub fn echo_server(addr: SocketAddr) -> anyhow::Result<()> {
    let listener = TcpListener::bind(addr)?;
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        std::thread::spawn(move || {
            let _ = stream.set_nodelay(true);
            let mut buf = [0u8; 4096];
            loop {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if stream.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
    Ok(())
}

/// Ping-pongs a `size`-byte message with the echo server at `addr` for `duration` and
/// returns the round trips' latency histogram (nanoseconds). Blocking, on a thread of its
/// own.
pub fn round_trips(
    addr: SocketAddr,
    size: usize,
    duration: Duration,
) -> anyhow::Result<Histogram<u64>> {
    std::thread::spawn(move || -> anyhow::Result<Histogram<u64>> {
        let mut stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let message = vec![0x5au8; size.max(1)];
        let mut answer = vec![0u8; message.len()];
        let mut hist = Histogram::<u64>::new_with_bounds(1_000, 60_000_000_000, 3)?;
        let start = Instant::now();
        while start.elapsed() < duration {
            let sent = Instant::now();
            stream.write_all(&message)?;
            stream.read_exact(&mut answer)?;
            let took = u64::try_from(sent.elapsed().as_nanos()).unwrap_or(u64::MAX);
            hist.record(took.max(1_000))?;
        }
        anyhow::ensure!(answer == message, "the echo server changed the message");
        Ok(hist)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the round-trip thread panicked"))?
}

/// The round trips' p50 in microseconds.
pub fn p50_micros(trips: &Histogram<u64>) -> f64 {
    trips.value_at_quantile(0.5) as f64 / 1e3
}

/// One line for people about [`round_trips`].
pub fn round_trip_line(trips: &Histogram<u64>) -> String {
    format!(
        "platform: a plain TCP round trip between two processes (200 bytes, blocking sockets) takes {:.0} us at p50, {:.0} us at p99",
        p50_micros(trips),
        trips.value_at_quantile(0.99) as f64 / 1e3
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stalls_count_sleeps_and_cover_a_share_of_the_time() {
        let s = stalls(Duration::from_millis(50));
        assert!(s.sleeps > 0);
        assert!(s.over_1ms <= s.sleeps);
        assert!((0.0..=1.0).contains(&s.covered), "{}", s.covered);
        assert!(s.line().contains(&format!("in {} sleeps", s.sleeps)));
    }

    #[test]
    fn round_trips_go_through_the_echo_server() {
        let addr = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port");
        std::thread::spawn(move || echo_server(addr));
        let start = Instant::now();
        let hist = loop {
            match round_trips(addr, 200, Duration::from_millis(50)) {
                Ok(h) => break h,
                Err(e) if start.elapsed() > Duration::from_secs(5) => panic!("{e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        assert!(hist.len() > 10, "only {} round trips", hist.len());
        assert!(hist.value_at_quantile(0.5) >= 1_000);
    }
}

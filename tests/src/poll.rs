//! Waiting for what a real process does a moment later (a reload seen, a charge counted, a
//! series scraped): bounded polling that says, when it gives up, what it saw last.

use std::time::{Duration, Instant};

/// Asks `probe` every `every` until it answers `Ok`, for at most `limit`; its answer and how
/// long the wait took. Past `limit` the test fails with `probe`'s last `Err`, which says what
/// it saw instead, so a timeout names its cause.
pub fn until<T>(
    limit: Duration,
    every: Duration,
    mut probe: impl FnMut() -> Result<T, String>,
) -> (T, Duration) {
    let start = Instant::now();
    loop {
        match probe() {
            Ok(answer) => return (answer, start.elapsed()),
            Err(seen) if start.elapsed() >= limit => panic!("after {limit:?}: {seen}"),
            Err(_) => std::thread::sleep(every),
        }
    }
}

/// [`until`] for async tests: the runtime's other tasks (a gRPC client's connection, a
/// server in the test) go on while it waits.
pub async fn until_async<T>(
    limit: Duration,
    every: Duration,
    mut probe: impl FnMut() -> Result<T, String>,
) -> (T, Duration) {
    let start = Instant::now();
    loop {
        match probe() {
            Ok(answer) => return (answer, start.elapsed()),
            Err(seen) if start.elapsed() >= limit => panic!("after {limit:?}: {seen}"),
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_the_first_ok_answer() {
        let mut calls = 0;
        let (answer, _) = until(Duration::from_secs(1), Duration::ZERO, || {
            calls += 1;
            if calls == 3 {
                Ok(calls)
            } else {
                Err(format!("call {calls}"))
            }
        });
        assert_eq!(answer, 3);
    }

    #[test]
    #[should_panic(expected = "still 7")]
    fn a_timeout_names_what_was_seen_last() {
        until::<()>(Duration::from_millis(30), Duration::from_millis(5), || {
            Err("still 7".to_owned())
        });
    }

    #[tokio::test]
    async fn the_async_form_waits_the_same_way() {
        let mut calls = 0;
        let (answer, _) = until_async(Duration::from_secs(1), Duration::ZERO, || {
            calls += 1;
            if calls == 2 {
                Ok("done")
            } else {
                Err(String::new())
            }
        })
        .await;
        assert_eq!(answer, "done");
    }
}

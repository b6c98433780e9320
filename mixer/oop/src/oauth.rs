//! The OAuth token of a `tls` connection (Istio's `oauth`): fetched from the token endpoint
//! with the client-credentials grant ([`crate::token_request`]), kept, and sent with every
//! call until it expires.
//!
//! Calls never fetch a token themselves and the interceptor that adds it to a call only reads
//! the cache. Before a call, [`OAuthSource::ready`] looks at the cache:
//!
//! - a token that has not expired is used; once it is past [`refresh_at`](schedule) (10% of
//!   its lifetime before expiry, 10 s at most), the call also starts fetching its successor
//!   in a background task, so busy handlers never wait;
//! - with no usable token, the call starts a fetch (or joins the one under way) and waits for
//!   it, but not past its own deadline;
//! - after a failed fetch, no new one starts before a backoff (250 ms, doubling up to 30 s);
//!   calls in between fail at once with the failure's reason.
//!
//! A fetch is bounded by [`FETCH_TIMEOUT`] (or the connection timeout if longer) and
//! completes even if the call that started it gave up, so the next call finds its token.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mixer_adapter_api::{OAuthClient, PemFile};
use tokio::sync::Notify;
use tokio::time::Instant;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};

use crate::token_request::{Grant, Issued, TokenEndpoint};

/// The shortest bound of one token request.
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// How early a token is replaced at most (Go's oauth2 package uses the same margin).
const REFRESH_EARLY_MAX: Duration = Duration::from_secs(10);
/// How long a token whose answer has no `expires_in` is used.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);
/// The shortest lifetime believed: a shorter one would have every call fetch a token.
const MIN_LIFETIME: Duration = Duration::from_secs(1);
/// Wait after the first failed fetch; doubled after each further one, up to the maximum.
const BACKOFF_FIRST: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// One connection's token source, shared by its channel's interceptor and its handler.
pub(crate) struct OAuthSource {
    endpoint: TokenEndpoint,
    grant: Grant,
    key: AsciiMetadataKey,
    bearer: bool,
    fetch_timeout: Duration,
    state: Mutex<State>,
    /// Woken when a fetch ends, well or badly.
    changed: Notify,
}

#[derive(Default)]
struct State {
    token: Option<Cached>,
    /// Why the last fetch failed, until one succeeds.
    error: Option<String>,
    fetching: bool,
    failures: u32,
    /// No fetch starts before this, after a failure.
    retry_at: Option<Instant>,
}

struct Cached {
    value: AsciiMetadataValue,
    refresh_at: Instant,
    expires_at: Instant,
}

/// What a call does next.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Go with the cached token; `refresh`: start fetching its successor.
    Go { refresh: bool },
    /// Wait for a fetch; `start`: this call starts it.
    Wait { start: bool },
    /// Fail now, for this reason.
    Fail(String),
}

impl OAuthSource {
    /// Checks the URL and header and builds the TLS client; fetches nothing yet (there may
    /// be no runtime: config validation builds transports too).
    pub(crate) fn new(
        client: &OAuthClient,
        ca: Option<&PemFile>,
        timeout: Duration,
    ) -> Result<OAuthSource, String> {
        let (key, bearer) = crate::token::header_key(&client.header)?;
        Ok(OAuthSource {
            endpoint: TokenEndpoint::new(&client.token_url, ca)?,
            grant: Grant::new(client),
            key,
            bearer,
            fetch_timeout: timeout.max(FETCH_TIMEOUT),
            state: Mutex::new(State::default()),
            changed: Notify::new(),
        })
    }

    /// The token endpoint's URL, for messages.
    pub(crate) fn url(&self) -> &str {
        self.endpoint.url()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until a call may go: a token is cached, or `deadline` passed, or the last fetch
    /// failed (the error says why).
    pub(crate) async fn ready(self: &Arc<Self>, deadline: Instant) -> Result<(), String> {
        loop {
            // Registered before the state is read, so a fetch ending in between still wakes us.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let step = self.lock().step(Instant::now());
            match step {
                Step::Go { refresh } => {
                    if refresh {
                        self.spawn_fetch();
                    }
                    return Ok(());
                }
                Step::Fail(why) => return Err(why),
                Step::Wait { start } => {
                    if start {
                        self.spawn_fetch();
                    }
                }
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(format!("{} has not answered yet", self.url()));
            }
        }
    }

    /// The header of a call: the cached token, never waiting.
    pub(crate) fn header(&self) -> Result<(AsciiMetadataKey, AsciiMetadataValue), String> {
        let state = self.lock();
        match &state.token {
            Some(t) if Instant::now() < t.expires_at => Ok((self.key.clone(), t.value.clone())),
            _ => Err(state
                .error
                .clone()
                .unwrap_or_else(|| format!("no token from {} yet", self.url()))),
        }
    }

    /// Fetches in a task of its own: it outlives a call that stops waiting.
    fn spawn_fetch(self: &Arc<Self>) {
        let source = self.clone();
        tokio::spawn(async move {
            let mut fetch = Fetch {
                sent: Instant::now(),
                result: None,
                source,
            };
            let s = &fetch.source;
            let result =
                match tokio::time::timeout(s.fetch_timeout, s.endpoint.request(&s.grant)).await {
                    Ok(Ok(issued)) => s.value(issued),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(format!(
                        "{} did not answer within {:?}",
                        s.url(),
                        s.fetch_timeout
                    )),
                };
            fetch.result = Some(result);
        });
    }

    /// The header value of an issued token, and how long it lives.
    fn value(&self, issued: Issued) -> Result<(AsciiMetadataValue, Option<Duration>), String> {
        let text = if self.bearer {
            format!("Bearer {}", issued.token)
        } else {
            issued.token
        };
        let mut value = AsciiMetadataValue::try_from(text).map_err(|_| {
            format!(
                "{} issued a token with characters a header cannot carry",
                self.url()
            )
        })?;
        value.set_sensitive(true);
        Ok((value, issued.lifetime))
    }
}

/// A fetch under way; dropping it records its outcome and wakes the waiting calls, also when
/// the task is cancelled (the runtime shutting down), so no call waits for a fetch that is gone.
struct Fetch {
    source: Arc<OAuthSource>,
    sent: Instant,
    result: Option<Result<(AsciiMetadataValue, Option<Duration>), String>>,
}

impl Drop for Fetch {
    fn drop(&mut self) {
        let result = self
            .result
            .take()
            .unwrap_or_else(|| Err("the token request was abandoned".into()));
        let now = Instant::now();
        let url = self.source.url();
        {
            let mut state = self.source.lock();
            let recovered = state.failures > 0;
            match &result {
                Ok((_, lifetime)) if recovered => {
                    tracing::info!(token_url = %url, ?lifetime, "OAuth token obtained again");
                }
                Ok((_, lifetime)) => {
                    tracing::debug!(token_url = %url, ?lifetime, "OAuth token obtained")
                }
                Err(e) => tracing::warn!(
                    token_url = %url,
                    failures = state.failures + 1,
                    "OAuth token request failed: {e}"
                ),
            }
            state.fetched(result, self.sent, now);
        }
        self.source.changed.notify_waiters();
    }
}

impl State {
    fn step(&mut self, now: Instant) -> Step {
        if let Some(t) = &self.token
            && now < t.expires_at
        {
            let refresh = now >= t.refresh_at && self.may_fetch(now);
            self.fetching |= refresh;
            return Step::Go { refresh };
        }
        if self.fetching {
            return Step::Wait { start: false };
        }
        if self.may_fetch(now) {
            self.fetching = true;
            return Step::Wait { start: true };
        }
        Step::Fail(
            self.error
                .clone()
                .unwrap_or_else(|| "no token fetched yet".into()),
        )
    }

    fn may_fetch(&self, now: Instant) -> bool {
        !self.fetching && self.retry_at.is_none_or(|at| now >= at)
    }

    fn fetched(
        &mut self,
        result: Result<(AsciiMetadataValue, Option<Duration>), String>,
        sent: Instant,
        now: Instant,
    ) {
        self.fetching = false;
        match result {
            Ok((value, lifetime)) => {
                let (refresh_at, expires_at) = schedule(sent, lifetime);
                self.token = Some(Cached {
                    value,
                    refresh_at,
                    expires_at,
                });
                self.error = None;
                self.failures = 0;
                self.retry_at = None;
            }
            Err(e) => {
                self.failures = self.failures.saturating_add(1);
                self.retry_at = Some(now + backoff(self.failures));
                self.error = Some(e);
            }
        }
    }
}

/// When to start replacing a token and when to stop sending it, counted from when it was
/// asked for (the endpoint's clock started later, so this errs on the early side).
fn schedule(sent: Instant, lifetime: Option<Duration>) -> (Instant, Instant) {
    let lifetime = lifetime.unwrap_or(DEFAULT_LIFETIME).max(MIN_LIFETIME);
    let early = (lifetime / 10).min(REFRESH_EARLY_MAX);
    (sent + lifetime - early, sent + lifetime)
}

fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    BACKOFF_FIRST
        .saturating_mul(1 << doublings)
        .min(BACKOFF_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(text: &str) -> AsciiMetadataValue {
        AsciiMetadataValue::try_from(text).expect("ascii")
    }

    #[test]
    fn a_token_is_replaced_shortly_before_it_expires() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(schedule(t0, Some(s(3600))), (t0 + s(3590), t0 + s(3600)));
        assert_eq!(
            schedule(t0, Some(s(2))),
            (t0 + Duration::from_millis(1800), t0 + s(2))
        );
        assert_eq!(schedule(t0, None), (t0 + s(290), t0 + s(300)));
        assert_eq!(schedule(t0, Some(Duration::ZERO)).1, t0 + MIN_LIFETIME);

        let mut state = State::default();
        // No token: the first call starts a fetch, the next ones wait for it.
        assert_eq!(state.step(t0), Step::Wait { start: true });
        assert_eq!(state.step(t0), Step::Wait { start: false });
        state.fetched(Ok((token("Bearer a"), Some(s(100)))), t0, t0);
        // Fresh: used as it is.
        assert_eq!(state.step(t0 + s(50)), Step::Go { refresh: false });
        // In the last 10 s: used, and one call (only one) starts fetching the next.
        assert_eq!(state.step(t0 + s(91)), Step::Go { refresh: true });
        assert_eq!(state.step(t0 + s(92)), Step::Go { refresh: false });
        // The refresh fails: the old token goes on until it expires...
        state.fetched(Err("503".into()), t0 + s(91), t0 + s(93));
        assert_eq!(state.step(t0 + s(93)), Step::Go { refresh: false });
        assert_eq!(state.step(t0 + s(94)), Step::Go { refresh: true });
        state.fetched(Err("503".into()), t0 + s(94), t0 + s(100));
        // ...then calls fail with the reason until the backoff (500 ms now) is over.
        let ms = Duration::from_millis;
        assert_eq!(state.step(t0 + s(100)), Step::Fail("503".into()));
        assert_eq!(state.step(t0 + s(100) + ms(499)), Step::Fail("503".into()));
        assert_eq!(
            state.step(t0 + s(100) + ms(500)),
            Step::Wait { start: true }
        );
        state.fetched(Ok((token("Bearer b"), None)), t0 + s(100), t0 + s(100));
        assert_eq!((state.failures, state.error.as_deref()), (0, None));
        assert_eq!(state.step(t0 + s(101)), Step::Go { refresh: false });
    }

    #[test]
    fn failures_back_off_exponentially_up_to_a_cap() {
        let ms = Duration::from_millis;
        let waits: Vec<Duration> = (1..=10).map(backoff).collect();
        assert_eq!(waits[..5], [ms(250), ms(500), ms(1000), ms(2000), ms(4000)]);
        assert_eq!(waits[9], BACKOFF_MAX);
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX);
    }
}

//! Report sampling (Istio 1.4's `rule.sampling`): which records a matched report rule sends to
//! its actions.
//!
//! Istio 1.4 accepted `sampling` and never applied it (its runtime has no sampling code); the
//! semantics here are those its proto documents (istio/api `release-1.4`,
//! `policy/v1beta1/cfg.proto`):
//!
//! - `random`: a record is kept with probability `percentSampled`. Unless
//!   `useIndependentRandomness`, the draw is the request's `request.id` (Envoy's
//!   `x-request-id`, a UUID): its first 8 hex digits, as Envoy's `RuntimeFilter` reads it, so
//!   that every rule and every mixer replica keep or drop a request's records alike (a rule
//!   at 10% keeps a subset of what a rule at 20% keeps). Without a request id that parses,
//!   the draw is independent. `attributeExpression` replaces the numerator; when it gives no
//!   number, nothing is kept.
//! - `rateLimit`: in each `samplingDuration` window the first `maxUnsampledEntries` records
//!   are kept, then one in `samplingRate`.
//!
//! With both, a record must be kept by both: `random` draws first and `rateLimit` counts only
//! what it kept, so the rate limit bounds what is actually sent.

use std::sync::Mutex;
use std::time::Instant;

use mixer_config::{RandomSamplingConfig, RateLimitSamplingConfig, SamplingConfig};
use mixer_model::{AttrId, Bag, ReferencedAttributes, Value};

/// Parts per million in the whole.
const MILLION: u64 = 1_000_000;

/// One rule's sampling, with the state its rate limit keeps.
#[derive(Debug)]
pub(crate) struct Sampler {
    random: Option<RandomSamplingConfig>,
    rate_limit: Option<(RateLimitSamplingConfig, Mutex<Window>)>,
    /// `request.id` in the snapshot's vocabulary.
    request_id: Option<AttrId>,
    /// `mixer_report_sampled_out_total{rule}` of the rule.
    pub(crate) sampled_out: prometheus::IntCounter,
}

/// A rate limit's current window.
#[derive(Debug)]
struct Window {
    started: Instant,
    entries: u64,
}

impl Sampler {
    /// The sampler of a rule configured with `config`.
    pub(crate) fn new(
        config: &SamplingConfig,
        request_id: Option<AttrId>,
        sampled_out: prometheus::IntCounter,
    ) -> Sampler {
        Sampler {
            random: config.random.clone(),
            rate_limit: config.rate_limit.clone().map(|r| {
                let window = Window {
                    started: Instant::now(),
                    entries: 0,
                };
                (r, Mutex::new(window))
            }),
            request_id,
            sampled_out,
        }
    }

    /// Whether the record `bag` goes to the rule's report actions; a record left out is
    /// counted.
    pub(crate) fn keep(&self, bag: &dyn Bag, refs: &mut ReferencedAttributes) -> bool {
        let kept = self.random.as_ref().is_none_or(|r| self.draw(r, bag, refs))
            && self
                .rate_limit
                .as_ref()
                .is_none_or(|(r, w)| within(r, w, Instant::now()));
        if !kept {
            self.sampled_out.inc();
        }
        kept
    }

    fn draw(
        &self,
        random: &RandomSamplingConfig,
        bag: &dyn Bag,
        refs: &mut ReferencedAttributes,
    ) -> bool {
        let ppm = match &random.attribute_expression {
            None => u64::from(random.parts_per_million),
            Some(expr) => {
                let numerator = match expr.eval(bag, refs) {
                    Ok(Value::Int64(n)) => n.max(0) as f64,
                    Ok(Value::Double(d)) if d.is_finite() => d.max(0.0),
                    // Istio: no value, or not a number, samples at 0%.
                    _ => 0.0,
                };
                let ppm = numerator * MILLION as f64 / f64::from(random.denominator.max(1));
                ppm.min(MILLION as f64) as u64
            }
        };
        if ppm >= MILLION {
            return true;
        }
        if ppm == 0 {
            return false;
        }
        let position = if random.use_independent_randomness {
            None
        } else {
            self.request_id
                .and_then(|id| bag.get(id))
                .and_then(Value::as_str)
                .and_then(request_id_position)
        };
        position.unwrap_or_else(|| fastrand::u64(..MILLION)) < ppm
    }
}

/// Where a request id falls in a million: its first 8 hex digits as a number (Envoy reads a
/// UUID's so, `UuidUtils::uuidModBy`), modulo a million. `None` when they are not hex.
fn request_id_position(id: &str) -> Option<u64> {
    let head = id.get(..8)?;
    let n = u64::from_str_radix(head, 16).ok()?;
    Some(n % MILLION)
}

/// Counts an entry in the rate limit's window (a new one once `samplingDuration` has passed)
/// and says whether it is kept.
fn within(config: &RateLimitSamplingConfig, window: &Mutex<Window>, now: Instant) -> bool {
    let mut w = window.lock().unwrap_or_else(|e| e.into_inner());
    if now.duration_since(w.started) >= config.sampling_duration {
        w.started = now;
        w.entries = 0;
    }
    w.entries += 1;
    let n = w.entries;
    n <= config.max_unsampled_entries
        || (n - config.max_unsampled_entries).is_multiple_of(config.sampling_rate.max(1))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn rate_limit(max_unsampled: u64, rate: u64) -> RateLimitSamplingConfig {
        RateLimitSamplingConfig {
            sampling_duration: Duration::from_secs(1),
            max_unsampled_entries: max_unsampled,
            sampling_rate: rate,
        }
    }

    #[test]
    fn rate_limit_keeps_the_first_entries_then_one_in_n_per_window() {
        let config = rate_limit(3, 4);
        let start = Instant::now();
        let window = Mutex::new(Window {
            started: start,
            entries: 0,
        });
        let kept: Vec<bool> = (0..11).map(|_| within(&config, &window, start)).collect();
        // 1..=3 unsampled, then entries 7 and 11 (the 4th and 8th past the limit).
        assert_eq!(
            kept,
            [
                true, true, true, false, false, false, true, false, false, false, true
            ]
        );
        // A new window starts over.
        let later = start + Duration::from_secs(1);
        assert!(within(&config, &window, later));
        assert!(within(&config, &window, later + Duration::from_millis(10)));
        // One in one keeps everything; no unsampled entries samples from the first.
        let every = Mutex::new(Window {
            started: start,
            entries: 0,
        });
        assert!((0..5).all(|_| within(&rate_limit(0, 1), &every, start)));
        let from_first = Mutex::new(Window {
            started: start,
            entries: 0,
        });
        let kept = (0..10)
            .filter(|_| within(&rate_limit(0, 5), &from_first, start))
            .count();
        assert_eq!(kept, 2);
    }

    #[test]
    fn a_request_id_falls_where_its_first_eight_hex_digits_say() {
        assert_eq!(
            request_id_position("000186a0-1111-4222-8333-444444444444"),
            Some(100_000)
        );
        assert_eq!(
            request_id_position("ffffffff"),
            Some(4_294_967_295 % MILLION)
        );
        assert_eq!(request_id_position("not-a-uuid"), None);
        assert_eq!(request_id_position("abc"), None);
    }
}

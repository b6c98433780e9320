//! What a `charge` (a quota instance's usage, charged by a report) may be: a whole number of
//! units from 0 to [`MAX_CHARGE`]. A charge only ever adds usage: a negative amount would be
//! a refund, a fraction cannot be counted, and a huge one would overflow a counter (redisquota
//! counts in Lua numbers, exact only up to 2^53).
//!
//! ```
//! use mixer_model::{InvalidCharge, Value, charge_amount};
//!
//! assert_eq!(charge_amount(&Value::Int64(150)), Ok(150));
//! // A response header's value, as Envoy's access log carries it.
//! assert_eq!(charge_amount(&Value::from(" 150 ")), Ok(150));
//! assert_eq!(charge_amount(&Value::Double(2.0)), Ok(2));
//! assert_eq!(charge_amount(&Value::Int64(-1)), Err(InvalidCharge::Negative));
//! assert_eq!(charge_amount(&Value::from("1.5")), Err(InvalidCharge::NotAWholeNumber));
//! assert_eq!(charge_amount(&Value::Int64(1 << 50)), Err(InvalidCharge::TooLarge));
//! ```

use crate::value::Value;

/// The largest amount one charge may take: 2^40 (about 1.1e12) units. Far above any single
/// request's usage (tokens, bytes, cents), and a counter can take a million of them before it
/// leaves the range where Lua's numbers (Redis scripts) are exact.
pub const MAX_CHARGE: i64 = 1 << 40;

/// Why a value is not a charge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidCharge {
    /// Below zero: a charge never refunds.
    #[error("a charge must not be negative (it would refund usage)")]
    Negative,
    /// A fraction, or text that is not a whole number.
    #[error("a charge must be a whole number of units")]
    NotAWholeNumber,
    /// Above [`MAX_CHARGE`].
    #[error("a charge must be at most {MAX_CHARGE} units")]
    TooLarge,
    /// A type that holds no amount (bool, timestamp, map...).
    #[error("a charge must be an integer, or a string or double holding one")]
    NotANumber,
}

/// The units `value` charges: an INT64, a DOUBLE without a fraction, or a STRING holding a
/// whole number (a header's value; surrounding spaces are ignored).
pub fn charge_amount(value: &Value) -> Result<i64, InvalidCharge> {
    let amount = match value {
        Value::Int64(n) => *n,
        Value::Double(d) => {
            if !d.is_finite() || d.fract() != 0.0 {
                return Err(InvalidCharge::NotAWholeNumber);
            }
            if *d < 0.0 {
                return Err(InvalidCharge::Negative);
            }
            if *d > MAX_CHARGE as f64 {
                return Err(InvalidCharge::TooLarge);
            }
            *d as i64
        }
        Value::String(s) => {
            let s = s.trim();
            match s.parse::<i64>() {
                Ok(n) => n,
                // Digits beyond i64 are still a whole number, just too large.
                Err(_) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
                    return Err(InvalidCharge::TooLarge);
                }
                Err(_) if s.starts_with('-') && s[1..].bytes().all(|b| b.is_ascii_digit()) => {
                    return Err(InvalidCharge::Negative);
                }
                Err(_) => return Err(InvalidCharge::NotAWholeNumber),
            }
        }
        _ => return Err(InvalidCharge::NotANumber),
    };
    if amount < 0 {
        Err(InvalidCharge::Negative)
    } else if amount > MAX_CHARGE {
        Err(InvalidCharge::TooLarge)
    } else {
        Ok(amount)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_amounts_are_refused_by_reason() {
        assert_eq!(charge_amount(&Value::Int64(0)), Ok(0));
        assert_eq!(charge_amount(&Value::Int64(MAX_CHARGE)), Ok(MAX_CHARGE));
        assert_eq!(
            charge_amount(&Value::Int64(MAX_CHARGE + 1)),
            Err(InvalidCharge::TooLarge)
        );
        assert_eq!(
            charge_amount(&Value::Int64(i64::MIN)),
            Err(InvalidCharge::Negative)
        );
        assert_eq!(
            charge_amount(&Value::from("99999999999999999999999")),
            Err(InvalidCharge::TooLarge)
        );
        assert_eq!(
            charge_amount(&Value::from("-5")),
            Err(InvalidCharge::Negative)
        );
        assert_eq!(
            charge_amount(&Value::from("")),
            Err(InvalidCharge::NotAWholeNumber)
        );
        assert_eq!(
            charge_amount(&Value::from("12abc")),
            Err(InvalidCharge::NotAWholeNumber)
        );
        assert_eq!(
            charge_amount(&Value::Double(f64::NAN)),
            Err(InvalidCharge::NotAWholeNumber)
        );
        assert_eq!(
            charge_amount(&Value::Double(-3.0)),
            Err(InvalidCharge::Negative)
        );
        assert_eq!(
            charge_amount(&Value::Double(1e300)),
            Err(InvalidCharge::TooLarge)
        );
        assert_eq!(
            charge_amount(&Value::Bool(true)),
            Err(InvalidCharge::NotANumber)
        );
    }
}

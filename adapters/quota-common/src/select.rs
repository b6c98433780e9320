//! From a quota instance to the quota, the limit and the counter key.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::{AdapterError, ErrorKind, LimitOverride};
use mixer_model::{Instance, QuotaInstance, Value};

use crate::config::{Limit, MAX_BUCKETS, Override, Quota, Quotas, default_bucket};

/// What an instance selects.
#[derive(Clone, Debug)]
pub struct Selected<'a> {
    /// The quota, found by the instance's name.
    pub quota: &'a Quota,
    /// The caller's limit override, else the first matching override's limit, else the
    /// quota's.
    pub limit: Cow<'a, Limit>,
    /// Which override matched.
    pub override_index: Option<usize>,
    /// The counter key: quota name and every dimension of the instance (see [`counter_key`]).
    pub key: String,
}

impl Quotas {
    /// The quota configured for an instance name (Istio's full `name.kind.namespace`): the
    /// exact name first, then the same name without its kind (`name.namespace`, which is also
    /// how `name.quota.namespace` and `name.instance.namespace` quotas are filed), then a
    /// configured short name equal to the part of the instance name before its first dot.
    /// Istio looked names up exactly.
    pub fn find(&self, instance_name: &str) -> Option<&Quota> {
        let without_kind = || {
            let mut parts = instance_name.split('.');
            match (parts.next(), parts.next(), parts.next(), parts.next()) {
                (Some(name), Some(_kind), Some(namespace), None) => {
                    self.by_full_name.get(&format!("{name}.{namespace}"))
                }
                _ => None,
            }
        };
        let index = self
            .by_full_name
            .get(instance_name)
            .or_else(without_kind)
            .or_else(|| {
                let short = instance_name.split('.').next().unwrap_or(instance_name);
                self.by_short_name.get(short)
            })?;
        self.quotas.get(*index)
    }

    /// Selects quota, limit and key for an instance. An instance whose name no quota carries
    /// is an error that is not retryable (`InvalidInstance`): config load cannot see it.
    pub fn select<'a>(&'a self, instance: &Instance) -> Result<Selected<'a>, AdapterError> {
        self.select_in(instance, String::new())
    }

    /// [`Quotas::select`] writing the counter key into `key` (emptied first): a caller that
    /// keeps one buffer for every allocation (memquota, per thread) allocates no key for a
    /// counter it already tracks.
    pub fn select_in<'a>(
        &'a self,
        instance: &Instance,
        mut key: String,
    ) -> Result<Selected<'a>, AdapterError> {
        let quota = self.find(&instance.name).ok_or_else(|| {
            AdapterError::permanent(
                ErrorKind::InvalidInstance,
                format!("no quota configured for instance {:?}", instance.name),
            )
        })?;
        let dims = QuotaInstance::of(instance).map_or(&[][..], |q| q.dimensions.as_slice());
        let matched = quota
            .overrides
            .iter()
            .enumerate()
            .find(|(_, o)| matches(o, dims));
        let (limit, override_index) = match matched {
            Some((i, o)) => (&o.limit, Some(i)),
            None => (&quota.limit, None),
        };
        counter_key_into(&mut key, &quota.name, dims);
        Ok(Selected {
            quota,
            limit: Cow::Borrowed(limit),
            override_index,
            key,
        })
    }

    /// [`Quotas::select`], then the caller's limit in place of the configured one when
    /// `limit_override` is given (see [`Selected::overridden`]).
    pub fn select_with<'a>(
        &'a self,
        instance: &Instance,
        limit_override: Option<LimitOverride>,
    ) -> Result<Selected<'a>, AdapterError> {
        self.select_with_in(instance, limit_override, String::new())
    }

    /// [`Quotas::select_with`] writing the counter key into `key` (see [`Quotas::select_in`]).
    pub fn select_with_in<'a>(
        &'a self,
        instance: &Instance,
        limit_override: Option<LimitOverride>,
        key: String,
    ) -> Result<Selected<'a>, AdapterError> {
        let selected = self.select_in(instance, key)?;
        Ok(match limit_override {
            Some(o) => selected.overridden(o),
            None => selected,
        })
    }
}

impl Selected<'_> {
    /// The selection with a caller's limit: its amount and window, the quota's algorithm, and
    /// a counter of its own per window (the key gains `|window=<ns>`) so that requests with
    /// and without the override do not mix their counts. Shadow mode does not apply: the
    /// caller asked for this limit (as envoyproxy/ratelimit treats descriptor overrides).
    pub fn overridden(mut self, o: LimitOverride) -> Self {
        let window = o.window.max(Duration::from_millis(1));
        let mut bucket = match self.limit.algorithm {
            crate::Algorithm::RollingWindow => self.limit.bucket_duration,
            _ => default_bucket(window),
        };
        if bucket >= window
            || window.as_nanos().div_ceil(bucket.as_nanos().max(1)) > u128::from(MAX_BUCKETS)
        {
            bucket = default_bucket(window);
        }
        self.limit = Cow::Owned(Limit {
            max_amount: o.max_amount.max(0),
            valid_duration: window,
            bucket_duration: bucket,
            algorithm: self.limit.algorithm,
            shadow: false,
        });
        let _ = write!(self.key, "|window={}", window.as_nanos());
        self.override_index = None;
        self
    }
}

/// Whether every configured dimension is present on the instance with a value whose text is
/// the configured text (Istio compared strings, and other values by their string form).
pub fn matches(o: &Override, dims: &[(Arc<str>, Value)]) -> bool {
    o.dimensions.iter().all(|(name, want)| {
        dims.iter().any(|(k, v)| {
            **k == **name
                && match v.as_str() {
                    Some(s) => s == want,
                    None => v.to_string() == *want,
                }
        })
    })
}

/// The counter key: the quota name, then each dimension sorted by name, every part length
/// prefixed so that no two different dimension sets encode alike, and each value tagged with
/// its type (`s` string-like, `i` integer, ... so `"5"` and `5` are different keys):
/// `requestcount|11:destination=s7:ratings|4:user=s3:bob`.
pub fn counter_key(quota: &str, dims: &[(Arc<str>, Value)]) -> String {
    let mut key = String::new();
    counter_key_into(&mut key, quota, dims);
    key
}

/// [`counter_key`] written into `key`, which is emptied first (its capacity kept).
pub fn counter_key_into(key: &mut String, quota: &str, dims: &[(Arc<str>, Value)]) {
    // Instances usually carry their dimensions sorted already: no copy to sort then.
    let mut sorted: Vec<&(Arc<str>, Value)> = Vec::new();
    let in_order: &mut dyn Iterator<Item = &(Arc<str>, Value)> =
        if dims.is_sorted_by(|a, b| a.0 <= b.0) {
            &mut dims.iter()
        } else {
            sorted.extend(dims);
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            &mut sorted.iter().copied()
        };
    key.clear();
    key.reserve(quota.len() + 24 * dims.len());
    key.push_str(quota);
    let mut digits = itoa::Buffer::new();
    for (k, v) in in_order {
        let text = match v.as_str() {
            Some(s) => std::borrow::Cow::Borrowed(s),
            None => std::borrow::Cow::Owned(v.to_string()),
        };
        let tag = match v {
            Value::String(_) => 's',
            Value::Int64(_) => 'i',
            Value::Double(_) => 'd',
            Value::Bool(_) => 'b',
            Value::Timestamp(_) => 't',
            Value::Duration(_) => 'D',
            Value::Bytes(_) => 'x',
            Value::IpAddress(_) => 'a',
            Value::EmailAddress(_) => 'e',
            Value::Uri(_) => 'u',
            Value::DnsName(_) => 'n',
            Value::StringMap(_) => 'm',
        };
        // `|<len>:<name>=<tag><len>:<text>`, pushed piece by piece: this runs on every
        // allocation, and the formatting machinery costs more than the key itself.
        key.push('|');
        key.push_str(digits.format(k.len()));
        key.push(':');
        key.push_str(k);
        key.push('=');
        key.push(tag);
        key.push_str(digits.format(text.len()));
        key.push(':');
        key.push_str(&text);
    }
}

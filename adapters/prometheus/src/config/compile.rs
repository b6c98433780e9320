//! Validation of prometheus params: every problem collected with its params path.

use super::*;

fn buckets(path: &str, def: &Option<BucketsDefinition>, errors: &mut Vec<ParamError>) -> Vec<f64> {
    let Some(def) = def else {
        // Istio used the client library's default buckets when none were given.
        return prometheus::DEFAULT_BUCKETS.to_vec();
    };
    let set = [
        def.linear_buckets.is_some(),
        def.exponential_buckets.is_some(),
        def.explicit_buckets.is_some(),
    ]
    .into_iter()
    .filter(|s| *s)
    .count();
    if set > 1 {
        errors.push(ParamError::new(
            path,
            "set only one of linearBuckets, exponentialBuckets and explicitBuckets",
        ));
        return Vec::new();
    }
    let before = errors.len();
    let count = |field: String, n: i64, errors: &mut Vec<ParamError>| -> usize {
        match usize::try_from(n) {
            Ok(n) if n > 0 && n < MAX_BUCKETS => n,
            _ => {
                errors.push(ParamError::new(
                    field,
                    format!(
                        "numFiniteBuckets must be between 1 and {}, it is {n}",
                        MAX_BUCKETS - 1
                    ),
                ));
                0
            }
        }
    };
    let bounds: Vec<f64> = if let Some(l) = &def.linear_buckets {
        let p = format!("{path}.linearBuckets");
        let n = count(
            format!("{p}.numFiniteBuckets"),
            l.num_finite_buckets,
            errors,
        );
        if !(l.width > 0.0 && l.width.is_finite()) {
            errors.push(ParamError::new(
                format!("{p}.width"),
                format!("width must be greater than 0, it is {}", l.width),
            ));
        }
        if !l.offset.is_finite() {
            errors.push(ParamError::new(
                format!("{p}.offset"),
                "offset must be a finite number",
            ));
        }
        (0..=n).map(|i| l.offset + l.width * i as f64).collect()
    } else if let Some(e) = &def.exponential_buckets {
        let p = format!("{path}.exponentialBuckets");
        let n = count(
            format!("{p}.numFiniteBuckets"),
            e.num_finite_buckets,
            errors,
        );
        if !(e.growth_factor > 1.0 && e.growth_factor.is_finite()) {
            errors.push(ParamError::new(
                format!("{p}.growthFactor"),
                format!(
                    "growthFactor must be greater than 1, it is {}",
                    e.growth_factor
                ),
            ));
        }
        if !(e.scale > 0.0 && e.scale.is_finite()) {
            errors.push(ParamError::new(
                format!("{p}.scale"),
                format!("scale must be greater than 0, it is {}", e.scale),
            ));
        }
        let mut bound = e.scale;
        let mut out = Vec::with_capacity(n + 1);
        for _ in 0..=n {
            out.push(bound);
            bound *= e.growth_factor;
        }
        out
    } else if let Some(x) = &def.explicit_buckets {
        let p = format!("{path}.explicitBuckets.bounds");
        if x.bounds.is_empty() {
            errors.push(ParamError::new(&p, "at least one bound is required"));
        } else if x.bounds.len() > MAX_BUCKETS {
            errors.push(ParamError::new(
                &p,
                format!(
                    "at most {MAX_BUCKETS} bounds are allowed, there are {}",
                    x.bounds.len()
                ),
            ));
        }
        for (i, b) in x.bounds.iter().enumerate() {
            if !b.is_finite() {
                errors.push(ParamError::new(
                    format!("{p}[{i}]"),
                    "bounds must be finite numbers",
                ));
            } else if i > 0 && x.bounds[i - 1] >= *b {
                errors.push(ParamError::new(
                    format!("{p}[{i}]"),
                    format!(
                        "bounds must be strictly increasing: {} follows {}",
                        b,
                        x.bounds[i - 1]
                    ),
                ));
            }
        }
        x.bounds.clone()
    } else {
        errors.push(ParamError::new(
            path,
            "set one of linearBuckets, exponentialBuckets and explicitBuckets",
        ));
        Vec::new()
    };
    if errors.len() == before && bounds.windows(2).any(|w| w[0] >= w[1] || !w[1].is_finite()) {
        // Large growth factors overflow; tiny widths lose precision.
        errors.push(ParamError::new(
            path,
            "the bucket bounds are not finite and strictly increasing",
        ));
    }
    bounds
}

impl PrometheusParams {
    /// Checks everything, collecting every problem with its path.
    pub fn compile(&self) -> Result<PrometheusConfig, Vec<ParamError>> {
        let mut errors = Vec::new();
        let mut metrics = Vec::with_capacity(self.metrics.len());
        let mut by_name: HashMap<String, usize> = HashMap::new();
        let mut by_instance: HashMap<String, usize> = HashMap::new();
        for (i, m) in self.metrics.iter().enumerate() {
            let path = format!("metrics[{i}]");
            let instance_name = m.instance_name.trim().to_string();
            if instance_name.is_empty() {
                errors.push(ParamError::new(
                    format!("{path}.instanceName"),
                    "instanceName is required: the fully qualified name of a metric instance",
                ));
            } else if let Some(first) = by_instance.insert(instance_key(&instance_name), i) {
                errors.push(ParamError::new(
                    format!("{path}.instanceName"),
                    format!("instance {instance_name:?} is already used by metrics[{first}]"),
                ));
                by_instance.insert(instance_key(&instance_name), first);
            }
            if m.kind == Kind::Unspecified {
                errors.push(ParamError::new(
                    format!("{path}.kind"),
                    "kind is required: COUNTER, GAUGE or DISTRIBUTION",
                ));
            }
            let namespace = if m.namespace.is_empty() {
                DEFAULT_NAMESPACE.to_string()
            } else {
                safe_name(&m.namespace)
            };
            if !namespace.is_empty() && !is_valid_metric_name(&namespace) {
                errors.push(ParamError::new(
                    format!("{path}.namespace"),
                    format!("{namespace:?} is not a valid Prometheus metric name prefix"),
                ));
            }
            let raw_name = if m.name.is_empty() {
                instance_name.as_str()
            } else {
                m.name.as_str()
            };
            let name = safe_name(raw_name);
            let full_name = if namespace.is_empty() {
                name.clone()
            } else {
                format!("{namespace}_{name}")
            };
            let name_field = if m.name.is_empty() {
                "instanceName"
            } else {
                "name"
            };
            if !raw_name.is_empty() && !is_valid_metric_name(&full_name) {
                errors.push(ParamError::new(
                    format!("{path}.{name_field}"),
                    format!("{full_name:?} is not a valid Prometheus metric name"),
                ));
            } else if !raw_name.is_empty() {
                if let Some(first) = by_name.get(&full_name) {
                    errors.push(ParamError::new(
                        format!("{path}.{name_field}"),
                        format!("metric name {full_name:?} is already used by metrics[{first}]"),
                    ));
                } else {
                    by_name.insert(full_name.clone(), i);
                }
            }
            let mut labels: Vec<Label> = Vec::with_capacity(m.label_names.len());
            for (j, l) in m.label_names.iter().enumerate() {
                let lpath = format!("{path}.labelNames[{j}]");
                let exposed = safe_name(l);
                if !is_valid_label_name(&exposed) {
                    errors.push(ParamError::new(
                        lpath,
                        format!(
                            "{l:?} is not a valid Prometheus label name \
                             ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)"
                        ),
                    ));
                } else if m.kind == Kind::Distribution && exposed == "le" {
                    errors.push(ParamError::new(
                        lpath,
                        "\"le\" is reserved for histogram buckets",
                    ));
                } else if let Some(k) = labels.iter().position(|x| x.exposed == exposed) {
                    errors.push(ParamError::new(
                        lpath,
                        format!("label {exposed:?} is already used by labelNames[{k}]"),
                    ));
                } else {
                    labels.push(Label {
                        configured: l.clone(),
                        exposed,
                    });
                }
            }
            let sum_dimension = m.sum_dimension.trim();
            if m.precounted.is_some() && m.kind != Kind::Distribution {
                errors.push(ParamError::new(
                    format!("{path}.precounted"),
                    format!(
                        "precounted is for DISTRIBUTION metrics, this one is {}",
                        m.kind
                    ),
                ));
            }
            if !sum_dimension.is_empty() && m.precounted.is_none() {
                errors.push(ParamError::new(
                    format!("{path}.sumDimension"),
                    "sumDimension needs precounted: CUMULATIVE or DELTA",
                ));
            } else if let Some(j) = m
                .label_names
                .iter()
                .position(|l| !sum_dimension.is_empty() && l.trim() == sum_dimension)
            {
                errors.push(ParamError::new(
                    format!("{path}.sumDimension"),
                    format!(
                        "{sum_dimension:?} is also labelNames[{j}]: the sum is a value, not a label"
                    ),
                ));
            }
            let buckets = if m.kind == Kind::Distribution && m.precounted.is_some() {
                if m.buckets.is_some() {
                    errors.push(ParamError::new(
                        format!("{path}.buckets"),
                        "a precounted histogram takes its bucket bounds from its points: \
                         leave buckets out",
                    ));
                }
                Vec::new()
            } else if m.kind == Kind::Distribution {
                buckets(&format!("{path}.buckets"), &m.buckets, &mut errors)
            } else {
                // Ignored for other kinds, as Istio did.
                Vec::new()
            };
            let help = if m.description.trim().is_empty() {
                raw_name.to_string()
            } else {
                m.description.clone()
            };
            metrics.push(MetricSpec {
                instance_name,
                full_name,
                help,
                kind: m.kind,
                labels,
                buckets,
                precounted: m.precounted.filter(|_| m.kind == Kind::Distribution),
                sum_dimension: (!sum_dimension.is_empty()).then(|| sum_dimension.to_string()),
            });
        }

        let expiry = self.metrics_expiration_policy.as_ref().and_then(|p| {
            let base = "metricsExpirationPolicy";
            let ttl = match &p.metrics_expiry_duration {
                None => {
                    errors.push(ParamError::new(
                        format!("{base}.metricsExpiryDuration"),
                        "metricsExpiryDuration is required in an expiration policy",
                    ));
                    None
                }
                Some(t) => {
                    let path = format!("{base}.metricsExpiryDuration");
                    ParamError::collect(t.value(&path), &mut errors).map(|d| d.0)
                }
            };
            if let Some(t) = ttl
                && t <= 0
            {
                errors.push(ParamError::new(
                    format!("{base}.metricsExpiryDuration"),
                    format!(
                        "metricsExpiryDuration {} is invalid, must be > 0",
                        mixer_model::Duration(t)
                    ),
                ));
            }
            let interval = match &p.expiry_check_interval_duration {
                None => Some(0),
                Some(t) => {
                    let path = format!("{base}.expiryCheckIntervalDuration");
                    ParamError::collect(t.value(&path), &mut errors).map(|d| d.0)
                }
            };
            if let Some(i) = interval
                && i < 0
            {
                errors.push(ParamError::new(
                    format!("{base}.expiryCheckIntervalDuration"),
                    format!(
                        "expiryCheckIntervalDuration {} is invalid, must be >= 0",
                        mixer_model::Duration(i)
                    ),
                ));
            }
            let (ttl, interval) = (ttl?, interval?);
            if ttl <= 0 || interval < 0 {
                return None;
            }
            let interval = if interval == 0 { ttl / 2 } else { interval };
            Some(Expiry {
                ttl: mixer_model::Duration(ttl).to_std(),
                check_interval: mixer_model::Duration(interval.max(1)).to_std(),
            })
        });

        let max_series = match self.max_series {
            None => crate::DEFAULT_MAX_SERIES_PER_HANDLER,
            Some(0) => {
                errors.push(ParamError::new(
                    "maxSeries",
                    "maxSeries 0 would drop every point, must be at least 1",
                ));
                0
            }
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        };

        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(PrometheusConfig {
            metrics,
            expiry,
            max_series,
        })
    }
}

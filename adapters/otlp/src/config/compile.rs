//! Validation of otlp params: every problem collected with its params path.

use super::*;

/// Every duration param of the otlp adapter has a default and must be above zero.
fn duration(
    path: &str,
    param: &Option<DurationParam>,
    default: Duration,
    errors: &mut Vec<ParamError>,
) -> Duration {
    param
        .as_ref()
        .and_then(|d| ParamError::collect(d.positive(path), errors))
        .unwrap_or(default)
}

fn check_endpoint(endpoint: &str, errors: &mut Vec<ParamError>) {
    let endpoint = endpoint.trim();
    if endpoint.is_empty() {
        errors.push(ParamError::new(
            "endpoint",
            "endpoint is required: the collector's gRPC address, such as http://127.0.0.1:4317",
        ));
        return;
    }
    // Messages name the endpoint without the password it may hold.
    let shown = mixer_adapter_api::secrets::redact_url(endpoint);
    let uri = match endpoint.parse::<tonic::codegen::http::Uri>() {
        Ok(uri) => uri,
        Err(e) => {
            errors.push(ParamError::new(
                "endpoint",
                format!("{shown:?} is not a URI: {e}"),
            ));
            return;
        }
    };
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            errors.push(ParamError::new(
                "endpoint",
                "https is not supported yet (this build has no TLS); use http:// to a local \
                 collector or a TLS-terminating sidecar",
            ));
            return;
        }
        _ => {
            errors.push(ParamError::new(
                "endpoint",
                format!("{shown:?} must start with http://, such as http://127.0.0.1:4317"),
            ));
            return;
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        errors.push(ParamError::new(
            "endpoint",
            format!("{shown:?} has no host"),
        ));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        errors.push(ParamError::new(
            "endpoint",
            format!("{shown:?} has a path or query; a gRPC endpoint is only scheme://host:port"),
        ));
    }
    if tonic::transport::Endpoint::from_shared(endpoint.to_string()).is_err() {
        errors.push(ParamError::new(
            "endpoint",
            format!("{shown:?} is not a valid gRPC endpoint"),
        ));
    }
}

fn check_header(key: &str, value: &str, errors: &mut Vec<ParamError>) -> Option<(String, String)> {
    let path = format!("headers.{key}");
    let lower = key.to_ascii_lowercase();
    if key.is_empty() {
        errors.push(ParamError::new(path, "a header name cannot be empty"));
        return None;
    }
    if key.starts_with(':')
        || lower.starts_with("grpc-")
        || matches!(lower.as_str(), "content-type" | "te")
    {
        errors.push(ParamError::new(
            path,
            format!("{key:?} is reserved by gRPC and cannot be set"),
        ));
        return None;
    }
    if lower.ends_with("-bin") {
        errors.push(ParamError::new(
            path,
            "binary metadata (names ending in -bin) is not supported",
        ));
        return None;
    }
    if tonic::metadata::AsciiMetadataKey::from_str(&lower).is_err() {
        errors.push(ParamError::new(
            path,
            format!("{key:?} is not a valid gRPC metadata name (letters, digits, -, _ and .)"),
        ));
        return None;
    }
    // The value is left out of messages: headers often carry credentials.
    // gRPC allows printable ASCII and spaces in values (HTTP/2 would take more).
    if !value.bytes().all(|b| (0x20..=0x7e).contains(&b))
        || tonic::metadata::AsciiMetadataValue::from_str(value).is_err()
    {
        errors.push(ParamError::new(
            path,
            "the value is not valid gRPC metadata (printable ASCII only)",
        ));
        return None;
    }
    Some((lower, value.to_string()))
}

fn resource_value(
    path: &str,
    v: &serde_json::Value,
    errors: &mut Vec<ParamError>,
) -> Option<ResourceValue> {
    match v {
        serde_json::Value::String(s) => Some(ResourceValue::String(s.clone())),
        serde_json::Value::Bool(b) => Some(ResourceValue::Bool(*b)),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Some(ResourceValue::Int(i)),
            None => n.as_f64().map(ResourceValue::Double),
        },
        _ => {
            errors.push(ParamError::new(
                path,
                "a resource attribute must be a string, a number or a boolean",
            ));
            None
        }
    }
}

fn check_buckets(path: &str, bounds: &[f64], errors: &mut Vec<ParamError>) {
    if bounds.is_empty() {
        errors.push(ParamError::new(
            path,
            "at least one bound is needed (leave buckets out for the default bounds)",
        ));
    }
    if bounds.len() > MAX_BUCKETS {
        errors.push(ParamError::new(
            path,
            format!("{} bounds, at most {MAX_BUCKETS}", bounds.len()),
        ));
    }
    for (i, b) in bounds.iter().enumerate() {
        if !b.is_finite() {
            errors.push(ParamError::new(
                format!("{path}[{i}]"),
                format!("{b} is not finite"),
            ));
        } else if i > 0 && *b <= bounds[i - 1] {
            errors.push(ParamError::new(
                format!("{path}[{i}]"),
                format!("{b} is not above the previous bound {}", bounds[i - 1]),
            ));
        }
    }
}

impl OtlpParams {
    /// Validates the params, collecting every problem with its path.
    pub fn compile(&self) -> Result<OtlpConfig, Vec<ParamError>> {
        let mut errors = Vec::new();
        check_endpoint(&self.endpoint, &mut errors);
        let timeout = duration("timeout", &self.timeout, DEFAULT_TIMEOUT, &mut errors);

        let headers: Vec<(String, String)> = self
            .headers
            .iter()
            .filter_map(|(k, v)| check_header(k, v, &mut errors))
            .collect();
        let mut seen = HashSet::new();
        for (k, _) in &headers {
            if !seen.insert(k.clone()) {
                errors.push(ParamError::new(
                    format!("headers.{k}"),
                    "the same header is set twice (names are case-insensitive)",
                ));
            }
        }

        let max_export_batch_size = match self.batch.max_export_batch_size {
            None => DEFAULT_MAX_EXPORT_BATCH_SIZE,
            Some(n) if n >= 1 && n as u64 <= MAX_EXPORT_BATCH_SIZE as u64 => n as usize,
            Some(n) => {
                errors.push(ParamError::new(
                    "batch.maxExportBatchSize",
                    format!("{n} is out of range 1..={MAX_EXPORT_BATCH_SIZE}"),
                ));
                DEFAULT_MAX_EXPORT_BATCH_SIZE
            }
        };
        let scheduled_delay = duration(
            "batch.scheduledDelay",
            &self.batch.scheduled_delay,
            DEFAULT_SCHEDULED_DELAY,
            &mut errors,
        );

        let initial_backoff = duration(
            "retry.initialBackoff",
            &self.retry.initial_backoff,
            DEFAULT_INITIAL_BACKOFF,
            &mut errors,
        );
        let max_backoff = duration(
            "retry.maxBackoff",
            &self.retry.max_backoff,
            DEFAULT_MAX_BACKOFF.max(initial_backoff),
            &mut errors,
        );
        if max_backoff < initial_backoff {
            errors.push(ParamError::new(
                "retry.maxBackoff",
                format!(
                    "{} is below initialBackoff {}",
                    mixer_model::Duration::from_std(max_backoff),
                    mixer_model::Duration::from_std(initial_backoff)
                ),
            ));
        }
        let max_elapsed_time = duration(
            "retry.maxElapsedTime",
            &self.retry.max_elapsed_time,
            DEFAULT_MAX_ELAPSED_TIME,
            &mut errors,
        );
        let retry = self.retry.enabled.unwrap_or(true).then_some(RetryConfig {
            initial_backoff,
            max_backoff,
            max_elapsed_time,
        });

        let mut resource = Vec::new();
        for (k, v) in &self.resource {
            let path = format!("resource.{k}");
            if k.trim().is_empty() {
                errors.push(ParamError::new(path, "an attribute name cannot be empty"));
                continue;
            }
            if let Some(v) = resource_value(&path, v, &mut errors) {
                resource.push((k.clone(), v));
            }
        }
        if !self.resource.contains_key("service.name") {
            resource.push((
                "service.name".to_string(),
                ResourceValue::String(DEFAULT_SERVICE_NAME.to_string()),
            ));
        }

        let mut metrics = Vec::with_capacity(self.metrics.len());
        let mut by_instance: BTreeMap<String, usize> = BTreeMap::new();
        let mut by_name: BTreeMap<String, usize> = BTreeMap::new();
        for (i, m) in self.metrics.iter().enumerate() {
            let path = format!("metrics[{i}]");
            let instance_name = m.instance_name.trim().to_string();
            if instance_name.is_empty() {
                errors.push(ParamError::new(
                    format!("{path}.instanceName"),
                    "instanceName is required: the fully qualified name of a metric instance",
                ));
            } else if let Some(first) = by_instance.get(&instance_key(&instance_name)) {
                errors.push(ParamError::new(
                    format!("{path}.instanceName"),
                    format!("instance {instance_name:?} is already used by metrics[{first}]"),
                ));
            } else {
                by_instance.insert(instance_key(&instance_name), i);
            }
            if m.name.is_empty() {
                errors.push(ParamError::new(
                    format!("{path}.name"),
                    "name is required: the instrument name, such as istio.requests",
                ));
            } else if !is_valid_instrument_name(&m.name) {
                errors.push(ParamError::new(
                    format!("{path}.name"),
                    format!(
                        "{:?} is not a valid instrument name ([A-Za-z][A-Za-z0-9_./-]*, at most \
                         255 characters)",
                        m.name
                    ),
                ));
            } else if let Some(first) = by_name.get(&m.name.to_ascii_lowercase()) {
                errors.push(ParamError::new(
                    format!("{path}.name"),
                    format!(
                        "metric name {:?} is already used by metrics[{first}]",
                        m.name
                    ),
                ));
            } else {
                // Instrument names are case-insensitive in OpenTelemetry.
                by_name.insert(m.name.to_ascii_lowercase(), i);
            }
            if m.unit.len() > 63 || !m.unit.is_ascii() {
                errors.push(ParamError::new(
                    format!("{path}.unit"),
                    "a unit is at most 63 ASCII characters",
                ));
            }
            let kind = match m.kind {
                Some(k) => k,
                None => {
                    errors.push(ParamError::new(
                        format!("{path}.kind"),
                        "kind is required: COUNTER, GAUGE or HISTOGRAM",
                    ));
                    Kind::Gauge
                }
            };
            if let Some(bounds) = &m.buckets {
                if kind == Kind::Histogram {
                    check_buckets(&format!("{path}.buckets"), bounds, &mut errors);
                } else if m.kind.is_some() {
                    errors.push(ParamError::new(
                        format!("{path}.buckets"),
                        format!("buckets apply to HISTOGRAM only, not {kind}"),
                    ));
                }
            }
            metrics.push(MetricSpec {
                instance_name,
                name: m.name.clone(),
                kind,
                unit: m.unit.clone(),
                description: m.description.clone(),
                buckets: m.buckets.clone().filter(|_| kind == Kind::Histogram),
            });
        }

        let mut points: Vec<String> = Vec::with_capacity(self.points.len());
        for (i, name) in self.points.iter().enumerate() {
            let path = format!("points[{i}]");
            let name = name.trim();
            let key = instance_key(name);
            if name.is_empty() {
                errors.push(ParamError::new(
                    path,
                    "an instance name is required: the fully qualified name of a metric \
                     instance with a point dimension",
                ));
            } else if let Some(first) = by_instance.get(&key) {
                errors.push(ParamError::new(
                    path,
                    format!("instance {name:?} is already used by metrics[{first}]"),
                ));
            } else if points.contains(&key) {
                errors.push(ParamError::new(
                    path,
                    format!("instance {name:?} is listed twice"),
                ));
            } else {
                points.push(key);
            }
        }

        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(OtlpConfig {
            endpoint: self.endpoint.trim().to_string(),
            timeout,
            headers,
            max_export_batch_size,
            scheduled_delay,
            retry,
            resource,
            temporality: self.metric_temporality.unwrap_or_default(),
            metrics,
            points,
        })
    }
}

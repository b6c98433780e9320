//! Re-export of ingested OTLP data points: `metric` instances named in `points` carry the
//! point the mixer received (the `otel.metric.point` attribute: a `ResourceMetrics` holding
//! one point under its metric, scope and resource), which is sent on as it came, temporality,
//! start time, attribute types and exemplars included. The SDK's instruments are not used:
//! they would aggregate again, and in their own temporality.

use std::time::Duration;

use mixer_adapter_api::{AdapterError, ErrorKind};
use mixer_model::{MetricInstance, Value};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::{Metric, ResourceMetrics, ScopeMetrics};
use prost::Message as _;
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;

/// The dimension of a points instance that holds the encoded point.
pub const POINT_DIMENSION: &str = "point";

/// Sends batches of points over the handler's channel.
pub(super) struct PointExporter {
    pub(super) client: MetricsServiceClient<Channel>,
    pub(super) metadata: MetadataMap,
    pub(super) timeout: Duration,
}

/// The point an instance carries, decoded.
pub fn decode_point(instance: &MetricInstance<'_>) -> Result<ResourceMetrics, String> {
    match instance.dimensions.get(POINT_DIMENSION) {
        Some(Value::Bytes(b)) => ResourceMetrics::decode(&b[..])
            .map_err(|e| format!("dimension {POINT_DIMENSION:?} is not an OTLP point: {e}")),
        Some(other) => Err(format!(
            "dimension {POINT_DIMENSION:?} is a {}, not the BYTES of otel.metric.point",
            other.value_type()
        )),
        None => Err(format!(
            "no dimension {POINT_DIMENSION:?} (set it to otel.metric.point)"
        )),
    }
}

/// Points merged into as few resources, scopes and metrics as they allow: points of the same
/// resource share one `ResourceMetrics`, of the same scope one `ScopeMetrics`, and of the
/// same metric (name, description, unit, kind, temporality, monotonicity) one `Metric`.
/// Order is kept.
pub fn merge(points: Vec<ResourceMetrics>) -> Vec<ResourceMetrics> {
    let mut out: Vec<ResourceMetrics> = Vec::new();
    for rm in points {
        let index = match out
            .iter()
            .position(|r| r.resource == rm.resource && r.schema_url == rm.schema_url)
        {
            Some(i) => i,
            None => {
                out.push(ResourceMetrics {
                    resource: rm.resource.clone(),
                    scope_metrics: Vec::new(),
                    schema_url: rm.schema_url.clone(),
                });
                out.len() - 1
            }
        };
        let scopes = &mut out[index].scope_metrics;
        for sm in rm.scope_metrics {
            merge_scope(scopes, sm);
        }
    }
    out
}

fn merge_scope(scopes: &mut Vec<ScopeMetrics>, sm: ScopeMetrics) {
    let index = match scopes
        .iter()
        .position(|s| s.scope == sm.scope && s.schema_url == sm.schema_url)
    {
        Some(i) => i,
        None => {
            scopes.push(ScopeMetrics {
                scope: sm.scope.clone(),
                metrics: Vec::new(),
                schema_url: sm.schema_url.clone(),
            });
            scopes.len() - 1
        }
    };
    let metrics = &mut scopes[index].metrics;
    for metric in sm.metrics {
        match metrics.iter_mut().find(|m| same_stream(m, &metric)) {
            Some(m) => append(m, metric),
            None => metrics.push(metric),
        }
    }
}

/// Same name, description, unit and metadata, same kind, temporality and monotonicity.
fn same_stream(a: &Metric, b: &Metric) -> bool {
    if a.name != b.name || a.description != b.description || a.unit != b.unit {
        return false;
    }
    if a.metadata != b.metadata {
        return false;
    }
    match (&a.data, &b.data) {
        (Some(Data::Gauge(_)), Some(Data::Gauge(_)))
        | (Some(Data::Summary(_)), Some(Data::Summary(_))) => true,
        (Some(Data::Sum(x)), Some(Data::Sum(y))) => {
            x.aggregation_temporality == y.aggregation_temporality
                && x.is_monotonic == y.is_monotonic
        }
        (Some(Data::Histogram(x)), Some(Data::Histogram(y))) => {
            x.aggregation_temporality == y.aggregation_temporality
        }
        (Some(Data::ExponentialHistogram(x)), Some(Data::ExponentialHistogram(y))) => {
            x.aggregation_temporality == y.aggregation_temporality
        }
        _ => false,
    }
}

fn append(into: &mut Metric, from: Metric) {
    match (&mut into.data, from.data) {
        (Some(Data::Gauge(x)), Some(Data::Gauge(y))) => x.data_points.extend(y.data_points),
        (Some(Data::Sum(x)), Some(Data::Sum(y))) => x.data_points.extend(y.data_points),
        (Some(Data::Histogram(x)), Some(Data::Histogram(y))) => {
            x.data_points.extend(y.data_points);
        }
        (Some(Data::ExponentialHistogram(x)), Some(Data::ExponentialHistogram(y))) => {
            x.data_points.extend(y.data_points);
        }
        (Some(Data::Summary(x)), Some(Data::Summary(y))) => x.data_points.extend(y.data_points),
        // `same_stream` matched the kinds.
        _ => {}
    }
}

impl PointExporter {
    /// One export call of `points` (already merged). A transport failure or a transient gRPC
    /// code is a transient error (the runtime counts the batch as dropped); a receiver that
    /// rejects points (its `partial_success`) fails the batch with a permanent error.
    pub(super) async fn export(&self, points: Vec<ResourceMetrics>) -> Result<(), AdapterError> {
        let count: usize = points
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
            .map(point_count)
            .sum();
        let mut request = tonic::Request::new(ExportMetricsServiceRequest {
            resource_metrics: points,
        });
        *request.metadata_mut() = self.metadata.clone();
        request.set_timeout(self.timeout);
        let mut client = self.client.clone();
        let response = match tokio::time::timeout(self.timeout, client.export(request)).await {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(status)) => return Err(status_error(&status, count)),
            Err(_) => {
                return Err(AdapterError::transient(
                    ErrorKind::Timeout,
                    format!(
                        "OTLP point export took longer than {:?} ({count} points not exported)",
                        self.timeout
                    ),
                ));
            }
        };
        match response.partial_success {
            Some(p) if p.rejected_data_points > 0 || !p.error_message.is_empty() => {
                Err(AdapterError::permanent(
                    ErrorKind::InvalidResponse,
                    format!(
                        "the receiver rejected {} of {count} points: {}",
                        p.rejected_data_points, p.error_message
                    ),
                ))
            }
            _ => Ok(()),
        }
    }
}

fn point_count(m: &Metric) -> usize {
    match &m.data {
        None => 0,
        Some(Data::Gauge(g)) => g.data_points.len(),
        Some(Data::Sum(s)) => s.data_points.len(),
        Some(Data::Histogram(h)) => h.data_points.len(),
        Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
        Some(Data::Summary(s)) => s.data_points.len(),
    }
}

/// The kinds the span and log exporters give the same codes (see `export_error`).
fn status_error(status: &tonic::Status, count: usize) -> AdapterError {
    use tonic::Code;
    let message = format!(
        "OTLP point export failed: {} {} ({count} points not exported)",
        status.code(),
        status.message()
    );
    match status.code() {
        Code::Unavailable | Code::Aborted => {
            AdapterError::transient(ErrorKind::Unavailable, message)
        }
        Code::DeadlineExceeded | Code::Cancelled => {
            AdapterError::transient(ErrorKind::Timeout, message)
        }
        Code::ResourceExhausted => AdapterError::transient(ErrorKind::Overloaded, message),
        Code::InvalidArgument
        | Code::Unimplemented
        | Code::Unknown
        | Code::DataLoss
        | Code::OutOfRange => AdapterError::permanent(ErrorKind::InvalidResponse, message),
        _ => AdapterError::permanent(ErrorKind::Internal, message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mixer_model::Instance;
    use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
    use opentelemetry_proto::tonic::metrics::v1::{
        AggregationTemporality, NumberDataPoint, Sum, number_data_point,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;

    fn sum_point(name: &str, temporality: AggregationTemporality, v: i64) -> ResourceMetrics {
        ResourceMetrics {
            resource: Some(Resource::default()),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "s".into(),
                    ..InstrumentationScope::default()
                }),
                metrics: vec![Metric {
                    name: name.into(),
                    data: Some(Data::Sum(Sum {
                        data_points: vec![NumberDataPoint {
                            value: Some(number_data_point::Value::AsInt(v)),
                            ..NumberDataPoint::default()
                        }],
                        aggregation_temporality: temporality as i32,
                        is_monotonic: true,
                    })),
                    ..Metric::default()
                }],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }
    }

    #[test]
    fn points_of_one_stream_share_a_metric_and_temporalities_stay_apart() {
        use AggregationTemporality::{Cumulative, Delta};
        let merged = merge(vec![
            sum_point("a", Cumulative, 1),
            sum_point("a", Cumulative, 2),
            sum_point("a", Delta, 3),
            sum_point("b", Cumulative, 4),
        ]);
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].scope_metrics.len(), 1);
        let metrics = &merged[0].scope_metrics[0].metrics;
        let shape: Vec<(&str, i32, usize)> = metrics
            .iter()
            .map(|m| match &m.data {
                Some(Data::Sum(s)) => (
                    m.name.as_str(),
                    s.aggregation_temporality,
                    s.data_points.len(),
                ),
                _ => panic!("not a sum"),
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("a", Cumulative as i32, 2),
                ("a", Delta as i32, 1),
                ("b", Cumulative as i32, 1)
            ]
        );
    }

    #[test]
    fn an_instance_without_its_point_is_refused_by_name() {
        let decode = |i: &Instance| decode_point(&MetricInstance::of(i).expect("a metric"));
        let instance = |dims: Vec<(&str, Value)>| Instance {
            name: "p.istio-system".into(),
            template: mixer_model::Template::Metric,
            fields: vec![(
                "dimensions",
                mixer_model::FieldValue::Map(
                    dims.into_iter().map(|(k, v)| (k.into(), v)).collect(),
                ),
            )],
        };
        assert!(
            decode(&instance(vec![]))
                .unwrap_err()
                .contains("no dimension")
        );
        assert!(
            decode(&instance(vec![("point", Value::from("x"))]))
                .unwrap_err()
                .contains("not the BYTES")
        );
        assert!(
            decode(&instance(vec![(
                "point",
                Value::Bytes(vec![0xff, 0xff].into())
            )]))
            .unwrap_err()
            .contains("not an OTLP point")
        );
        let good = sum_point("a", AggregationTemporality::Delta, 1);
        let decoded = decode(&instance(vec![(
            "point",
            Value::Bytes(good.encode_to_vec().into()),
        )]))
        .expect("decodes");
        assert_eq!(decoded, good);
    }
}

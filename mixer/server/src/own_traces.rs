//! `mixer serve --tracing-otlp-endpoint`: the mixer's own traces, exported over OTLP/gRPC by
//! the OpenTelemetry SDK (spans are opened by `mixer_runtime::traces`).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};

/// Where the mixer's own traces go, and how many are kept.
#[derive(clap::Args, Debug, Clone)]
pub struct TracingArgs {
    /// An OTLP/gRPC endpoint (`http://collector:4317`) to export the mixer's own traces to:
    /// a span per request with child spans for the cache lookup, the rule evaluation and
    /// each adapter call. Off when not given.
    #[arg(long, value_name = "URL")]
    pub tracing_otlp_endpoint: Option<String>,
    /// The share of new traces sampled, 0 to 1; a request whose `traceparent` says whether
    /// its trace is sampled follows that (parent-based).
    #[arg(long, default_value_t = 0.01, value_parser = parse_ratio)]
    pub tracing_sample_ratio: f64,
}

fn parse_ratio(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|r| (0.0..=1.0).contains(r))
        .ok_or_else(|| format!("{text:?} is not a ratio between 0 and 1"))
}

/// Starts the exporter and installs the tracer, when an endpoint is given; the provider is
/// to be shut down at exit (it flushes the spans still batched). Must run inside the Tokio
/// runtime, whose reactor the gRPC exporter's channel uses.
pub fn start(args: &TracingArgs) -> anyhow::Result<Option<SdkTracerProvider>> {
    let Some(endpoint) = &args.tracing_otlp_endpoint else {
        return Ok(None);
    };
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        anyhow::bail!("--tracing-otlp-endpoint {endpoint:?} is not an http:// or https:// URL");
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint.clone())
        .build()
        .map_err(|e| anyhow::anyhow!("--tracing-otlp-endpoint {endpoint}: {e}"))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        // New traces are sampled at the ratio by the runtime before it builds anything
        // (`traces::install`); what reaches the SDK without a parent is to be kept.
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)))
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("mixer")
                .build(),
        )
        .build();
    let tracer = provider.tracer("mixer");
    if mixer_runtime::traces::install(tracer, args.tracing_sample_ratio).is_err() {
        anyhow::bail!("the mixer's tracer was already installed");
    }
    tracing::info!(
        endpoint = %endpoint,
        sample_ratio = args.tracing_sample_ratio,
        "exporting the mixer's own traces"
    );
    Ok(Some(provider))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_outside_zero_to_one_is_refused() {
        assert_eq!(parse_ratio("0.25"), Ok(0.25));
        for bad in ["-0.1", "1.5", "NaN", "half"] {
            assert!(parse_ratio(bad).is_err(), "{bad}");
        }
    }
}

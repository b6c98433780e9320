"""An application instrumented with the official OpenTelemetry Python SDK, exporting metrics
to the mixer with the official OTLP/gRPC exporter (tests/tests/otlp_metrics.rs).

    python otlp_metrics_client.py export HOST:PORT   # the five instrument kinds, then deltas
    python otlp_metrics_client.py reject HOST:PORT   # a NaN gauge beside a good counter
    python otlp_metrics_client.py distinct HOST:PORT N   # a counter with N distinct user_ids

`export` and `distinct` print one JSON line per export: {"exporter": "SUCCESS"}. The exporter returns only
success or failure (it drops the response), so `reject` sends its data, encoded by the
exporter's own encoder, with the stub generated from opentelemetry-proto instead, and prints
the response's partial_success: {"rejected": 1, "message": "..."}.
"""

import json
import math
import sys

import grpc
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    InMemoryMetricReader,
    Metric,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource

RESOURCE = Resource.create({"service.name": "shop", "service.version": "1.0"})


def export(endpoint, data):
    exporter = OTLPMetricExporter(endpoint=endpoint, insecure=True, timeout=10)
    result = exporter.export(data)
    exporter.shutdown()
    ok = "SUCCESS" if result is MetricExportResult.SUCCESS else "FAILURE"
    print(json.dumps({"exporter": ok}), flush=True)


def export_reading_the_response(endpoint, data):
    with grpc.insecure_channel(endpoint) as channel:
        stub = metrics_service_pb2_grpc.MetricsServiceStub(channel)
        response = stub.Export(data, timeout=10)
    partial = response.partial_success
    print(
        json.dumps(
            {
                "partial_success": response.HasField("partial_success"),
                "rejected": partial.rejected_data_points,
                "message": partial.error_message,
            }
        ),
        flush=True,
    )


def cumulative_instruments():
    """A counter, an up-down counter, a gauge, a histogram (the SDK's default explicit
    bounds) and an exponential histogram, with the SDK's default (cumulative) temporality."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(
        resource=RESOURCE,
        metric_readers=[reader],
        views=[
            View(
                instrument_name="shop.payload",
                aggregation=ExponentialBucketHistogramAggregation(),
            )
        ],
    )
    meter = provider.get_meter("shop.meter", "1.2")
    requests = meter.create_counter("shop.requests", unit="{request}", description="Requests served")
    requests.add(3, {"route": "/cart"})
    requests.add(2, {"route": "/pay"})
    depth = meter.create_up_down_counter("shop.queue.depth", unit="{job}")
    depth.add(5)
    depth.add(-2)
    temperature = meter.create_gauge("shop.temperature", unit="Cel")
    temperature.set(21.5, {"room": "server"})
    latency = meter.create_histogram("shop.latency", unit="ms")
    for ms in (5, 50, 500):
        latency.record(ms, {"route": "/cart"})
    payload = meter.create_histogram("shop.payload", unit="By")
    for size in (1, 2, 4, 1000):
        payload.record(size)
    data = reader.get_metrics_data()
    provider.shutdown()
    return data


def delta_counter():
    """A counter read with delta temporality (the exporter's choice for a delta backend)."""
    reader = InMemoryMetricReader(preferred_temporality={Counter: AggregationTemporality.DELTA})
    provider = MeterProvider(resource=RESOURCE, metric_readers=[reader])
    provider.get_meter("shop.jobs.meter").create_counter("shop.jobs").add(7)
    data = reader.get_metrics_data()
    provider.shutdown()
    return data


def delta_histogram_batches():
    """A histogram read twice with delta temporality: each reading holds only what was
    recorded since the one before (10 and 20 ms, then 30 ms)."""
    reader = InMemoryMetricReader(
        preferred_temporality={Histogram: AggregationTemporality.DELTA}
    )
    provider = MeterProvider(resource=RESOURCE, metric_readers=[reader])
    batch = provider.get_meter("shop.batch.meter").create_histogram("shop.batch", unit="ms")
    batch.record(10)
    batch.record(20)
    first = reader.get_metrics_data()
    batch.record(30)
    second = reader.get_metrics_data()
    provider.shutdown()
    return [first, second]


def with_nan_gauge():
    """A gauge and a counter, encoded by the exporter's encoder; then the gauge's value is
    made NaN in the message itself (the SDK drops NaN measurements before they are
    exported, but a collector relaying another source's data sends them)."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(resource=RESOURCE, metric_readers=[reader])
    meter = provider.get_meter("shop.meter")
    meter.create_gauge("shop.broken").set(1.5)
    meter.create_counter("shop.fine").add(1)
    request = encode_metrics(reader.get_metrics_data())
    provider.shutdown()
    for resource_metrics in request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.name == "shop.broken":
                    metric.gauge.data_points[0].as_double = math.nan
    return request


def distinct_users(count, per_export=1000):
    """A cumulative counter `shop.logins` with `count` points, each of its own `user_id`
    (a label of unbounded cardinality), in exports of `per_export` points. The data is
    built in the SDK's own types rather than recorded through an instrument, since the
    SDK's cardinality limit (2000 attribute sets) would fold the rest into one overflow
    point; a collector relaying many applications' data sends them all."""
    now = 1_700_000_000_000_000_000
    scope = InstrumentationScope("shop.logins.meter")
    for start in range(0, count, per_export):
        points = [
            NumberDataPoint(
                attributes={"user_id": f"user-{i}"},
                start_time_unix_nano=now,
                time_unix_nano=now,
                value=1,
            )
            for i in range(start, min(start + per_export, count))
        ]
        metric = Metric(
            name="shop.logins",
            description="Logins",
            unit="{login}",
            data=Sum(
                data_points=points,
                aggregation_temporality=AggregationTemporality.CUMULATIVE,
                is_monotonic=True,
            ),
        )
        yield MetricsData(
            resource_metrics=[
                ResourceMetrics(
                    resource=RESOURCE,
                    scope_metrics=[ScopeMetrics(scope=scope, metrics=[metric], schema_url="")],
                    schema_url="",
                )
            ]
        )


def main():
    mode, endpoint = sys.argv[1], sys.argv[2]
    if mode == "export":
        export(endpoint, cumulative_instruments())
        export(endpoint, delta_counter())
        for data in delta_histogram_batches():
            export(endpoint, data)
    elif mode == "reject":
        export_reading_the_response(endpoint, with_nan_gauge())
    elif mode == "distinct":
        exporter = OTLPMetricExporter(endpoint=endpoint, insecure=True, timeout=30)
        failed = 0
        for data in distinct_users(int(sys.argv[3])):
            if exporter.export(data) is not MetricExportResult.SUCCESS:
                failed += 1
        exporter.shutdown()
        print(json.dumps({"exporter": "FAILURE" if failed else "SUCCESS", "failed": failed}), flush=True)
    else:
        sys.exit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()

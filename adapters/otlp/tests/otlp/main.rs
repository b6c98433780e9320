//! The otlp adapter against a real OTLP/gRPC receiver on loopback: a tonic server with
//! opentelemetry-proto's collector services that records every request (and its metadata),
//! and can be told to fail the next calls with a given gRPC code.

mod fixtures;
mod receiver;

mod batching;
mod export;
mod points;
mod retries;
mod validation;

//! The OOP client against a real tonic adapter server on 127.0.0.1: verdicts, quota,
//! report batches with retries, deadlines, the concurrency limit, the circuit breaker,
//! sessions and validation.

mod adapter;
mod fixtures;

mod calls;
mod resilience;
mod sessions;

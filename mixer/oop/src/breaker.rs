//! The circuit breaker of each remote handler: the adapter API's generic one
//! ([`mixer_adapter_api::breaker`]), which built-in adapters that call a backend (redisquota)
//! share.

pub use mixer_adapter_api::breaker::{Admission, BreakerOptions, CircuitBreaker, CircuitState};

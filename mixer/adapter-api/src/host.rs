//! The mixer's side of the adapter boundary: what the config loader and the runtime use to
//! hold, configure and call adapters of every kind alike. An adapter implements [`Adapter`]
//! (crate root) and never needs these: every [`Adapter`] is an [`AnyAdapter`], its params
//! are decoded for it, and a handler's [`FailPolicy`] is the config's to choose.
//!
//! [`Adapter`]: crate::Adapter

mod any_adapter;
mod fail_policy;
mod params;

pub use any_adapter::{AnyAdapter, CompiledConfig};
pub use fail_policy::FailPolicy;
pub use params::{Params, decode_params};

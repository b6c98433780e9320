//! The expression API this crate compiles with, from `mixer-policy`.

pub use mixer_policy::{CompileError, Expression, Syntax};

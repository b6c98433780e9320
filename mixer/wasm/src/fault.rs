//! What can stop a plugin call: the kinds counted in `mixer_wasm_plugin_faults_total`.

/// What kind of limit or failure stopped a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum FaultKind {
    /// The plugin trapped (`unreachable`, out-of-bounds access, a Rust panic).
    Trap,
    /// Its wall-clock deadline passed.
    Deadline,
    /// It tried to grow its memory past the cap.
    Memory,
    /// It used up its fuel.
    Fuel,
    /// No instance could be made (the pool is full, the initial memory is over the cap).
    Instantiate,
    /// Not run: the handler already had `limits.concurrency` calls running.
    Concurrency,
}

impl FaultKind {
    /// The `kind` label of `mixer_wasm_plugin_faults_total`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            FaultKind::Trap => "trap",
            FaultKind::Deadline => "deadline",
            FaultKind::Memory => "memory",
            FaultKind::Fuel => "fuel",
            FaultKind::Instantiate => "instantiate",
            FaultKind::Concurrency => "concurrency",
        }
    }
}

/// A call that did not return.
#[derive(Clone, Debug)]
pub(crate) struct Fault {
    pub(crate) kind: FaultKind,
    pub(crate) message: String,
}

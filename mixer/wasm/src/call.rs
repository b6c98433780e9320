//! One call's store data: who is calling (for the host imports' logs and metrics) and the
//! memory cap that bounds it.

use std::sync::Arc;

use wasmtime::ResourceLimiter;

use crate::metrics::WasmMetrics;

/// Who is calling, for the host imports' logs and metrics.
pub(crate) struct CallContext {
    pub(crate) handler: Arc<str>,
    pub(crate) metrics: Arc<WasmMetrics>,
}

/// The data of one call's store.
pub(crate) struct CallState {
    pub(crate) cap: MemoryCap,
    pub(crate) ctx: Arc<CallContext>,
}

/// The memory cap, remembering whether it refused a growth so that the trap that follows
/// (Rust aborts on a failed allocation) is counted as what it is.
pub(crate) struct MemoryCap {
    pub(crate) max_bytes: usize,
    pub(crate) refused: bool,
}

/// Table elements an instance may have; generous for any wit-bindgen component.
const MAX_TABLE_ELEMENTS: usize = 100_000;

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_bytes {
            self.refused = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

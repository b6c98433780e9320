//! A handler backed by a plugin: each call in a fresh instance (or, when the handler asks, in
//! one of its warm instances), under the handler's limits.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use mixer_adapter_api::log_gate::LogGate;
use mixer_adapter_api::{
    AdapterError, AttributeHandler, CheckHandler, ErrorKind, Exposition, Generated, Handler,
    QuotaArgs, QuotaHandler, ReportHandler,
};
use mixer_model::{CheckResult, Instance, QuotaResult, Variety};

use crate::batch;
use crate::bindings as wit;
use crate::call::{CallContext, CallState};
use crate::convert;
use crate::fault::{Fault, FaultKind};
use crate::host::WasmHost;
use crate::limits::Limits;
use crate::plugin::{Live, Plugin};
use crate::world::Exports;

/// Where a handler's calls run (`params.instances`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Instances {
    /// A new instance for every call, dropped after it: nothing one call leaves in the
    /// plugin's memory or globals reaches the next. The default.
    Fresh,
    /// Instances kept between calls of this one handler and reused, at most `keep` of them
    /// idle. A warm instance keeps its linear memory, globals and tables from one call to
    /// the next (a guest's heap, its statics, a Python interpreter's modules and objects):
    /// what one request's call leaves there, the next request's call of the same handler
    /// can read. It is never shared with another handler or another config, and it is
    /// dropped after any fault (trap, deadline, memory, fuel). Each call gets its full
    /// deadline and fuel again; the memory cap holds for the instance's whole life.
    Warm {
        /// Idle instances kept; more calls at once make (and then drop) fresh ones.
        keep: usize,
    },
}

impl Instances {
    /// Idle warm instances kept when `params.keepWarm` is not given.
    pub const DEFAULT_KEEP: usize = 4;
}

/// A built Wasm handler.
#[derive(Clone)]
pub struct WasmHandler {
    plugin: Arc<Plugin>,
    /// The plugin's own config, as JSON text (what `validate` accepted).
    config: String,
    limits: Limits,
    instances: Instances,
    /// Idle warm instances (always empty with [`Instances::Fresh`]).
    warm: Arc<Mutex<Vec<Live>>>,
    ctx: Arc<CallContext>,
    fault_log: Arc<LogGate>,
    /// Check and quota calls running now, at most `limits.concurrency`.
    running: Arc<tokio::sync::Semaphore>,
}

/// Check and quota calls with a deadline up to this run on the request's task: a hop to a
/// blocking thread costs tens of microseconds, more than such a call, and the deadline
/// bounds how long the task's thread is held. Longer ones run on a blocking thread, so that
/// a plugin spinning to its deadline holds no serving thread.
const INLINE_DEADLINE: Duration = Duration::from_millis(2);

/// How long a call may wait for one of its handler's slots. A plugin that answers in
/// microseconds frees one long before, so a burst of requests queues briefly instead of
/// meeting the fail policy; a plugin that runs to its deadline does not, and the calls
/// behind it get the fail policy after this wait rather than after its deadline.
const SLOT_WAIT: Duration = Duration::from_millis(10);

impl WasmHandler {
    pub(crate) fn new(
        host: &WasmHost,
        plugin: Arc<Plugin>,
        config: String,
        limits: Limits,
        instances: Instances,
        handler: Arc<str>,
    ) -> WasmHandler {
        let ctx = Arc::new(CallContext::new(handler, host.metrics.clone()));
        WasmHandler {
            running: Arc::new(tokio::sync::Semaphore::new(limits.concurrency.max(1))),
            plugin,
            config,
            limits,
            instances,
            warm: Arc::default(),
            ctx,
            fault_log: Arc::new(LogGate::new(Duration::from_secs(10))),
        }
    }

    /// Runs `f` in a fresh instance, or in a warm one that goes back to the handler's idle
    /// list if the call returned.
    fn call<R>(
        &self,
        deadline: Duration,
        f: impl FnOnce(&Exports, &mut wasmtime::Store<CallState>) -> wasmtime::Result<R>,
    ) -> Result<R, Fault> {
        let Instances::Warm { keep } = self.instances else {
            return self.plugin.call(&self.ctx, &self.limits, deadline, f);
        };
        let idle = self.warm.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut live = match idle {
            Some(live) => live,
            None => self.plugin.instantiate(&self.ctx, &self.limits, deadline)?,
        };
        // A fault drops the instance with `live`: its memory may be half-written.
        let answer = self.plugin.run(&mut live, &self.limits, deadline, f)?;
        let mut idle = self.warm.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < keep {
            idle.push(live);
        }
        Ok(answer)
    }

    /// Where the handler's calls run.
    pub fn instances(&self) -> Instances {
        self.instances
    }

    fn serves(&self, variety: Variety) -> bool {
        self.plugin
            .templates()
            .iter()
            .any(|t| t.variety() == variety)
    }

    fn accepts(&self, instance: &Instance) -> Result<(), AdapterError> {
        if self.plugin.templates().contains(&instance.template) {
            return Ok(());
        }
        Err(AdapterError::permanent(
            ErrorKind::InvalidInstance,
            format!(
                "plugin {} does not take template {}",
                self.plugin.name(),
                instance.template.name()
            ),
        ))
    }

    /// A fault as the dispatcher sees it, counted and (at most once per 10 s) logged.
    fn fault(&self, fault: Fault) -> AdapterError {
        self.ctx.metrics.fault(&self.ctx.handler, fault.kind);
        if let Some(held_back) = self.fault_log.due() {
            tracing::warn!(
                handler = %self.ctx.handler,
                plugin = self.plugin.name(),
                kind = fault.kind.label(),
                held_back,
                "Wasm plugin call stopped: {}",
                fault.message
            );
        }
        let kind = match fault.kind {
            FaultKind::Deadline | FaultKind::Fuel => ErrorKind::Timeout,
            FaultKind::Instantiate | FaultKind::Concurrency => ErrorKind::Overloaded,
            FaultKind::Trap | FaultKind::Memory => ErrorKind::Internal,
        };
        AdapterError::transient(
            kind,
            format!(
                "Wasm plugin {} ({}): {}",
                self.plugin.name(),
                fault.kind.label(),
                fault.message
            ),
        )
    }

    fn declined(&self, message: String) -> AdapterError {
        AdapterError::transient(
            ErrorKind::Internal,
            format!(
                "Wasm plugin {} could not decide: {message}",
                self.plugin.name()
            ),
        )
    }

    /// A slot for one check or quota call, or the fault that answers it when the handler
    /// runs `limits.concurrency` of them and none ends within [`SLOT_WAIT`] (or the check
    /// deadline, if shorter). The wait is asynchronous: it holds no thread.
    async fn slot(&self) -> Result<tokio::sync::OwnedSemaphorePermit, AdapterError> {
        if let Ok(slot) = self.running.clone().try_acquire_owned() {
            return Ok(slot);
        }
        let wait = self.limits.check_deadline.min(SLOT_WAIT);
        match tokio::time::timeout(wait, self.running.clone().acquire_owned()).await {
            Ok(Ok(slot)) => Ok(slot),
            _ => Err(self.fault(Fault {
                kind: FaultKind::Concurrency,
                message: format!(
                    "{} calls already running (limits.concurrency), none ended within {wait:?}",
                    self.limits.concurrency
                ),
            })),
        }
    }

    /// Runs `call` (a check or a quota call) in one of the handler's slots: on this thread
    /// when its deadline is short, else on a blocking thread.
    async fn bounded<R: Send + 'static>(
        &self,
        call: impl FnOnce(&WasmHandler) -> Result<R, AdapterError> + Send + 'static,
    ) -> Result<R, AdapterError> {
        let slot = self.slot().await?;
        if self.limits.check_deadline <= INLINE_DEADLINE {
            let answer = call(self);
            drop(slot);
            return answer;
        }
        let this = self.clone();
        // The slot is held until the call ends, even if the request gave up on it first.
        tokio::task::spawn_blocking(move || {
            let answer = call(&this);
            drop(slot);
            answer
        })
        .await
        .unwrap_or_else(|e| {
            Err(AdapterError::transient(
                ErrorKind::Internal,
                format!("Wasm plugin call task failed: {e}"),
            ))
        })
    }

    /// One check, synchronously on this thread (bounded by the check deadline, not by the
    /// handler's concurrency limit).
    pub fn check_now(&self, instance: &Instance) -> Result<CheckResult, AdapterError> {
        self.accepts(instance)?;
        let arg = convert::instance(instance);
        let answer = self
            .call(self.limits.check_deadline, |p, s| {
                p.call_check(s, &self.config, &arg)
            })
            .map_err(|f| self.fault(f))?
            .map_err(|m| self.declined(m))?;
        Ok(CheckResult {
            status: convert::status(answer.code, answer.message),
            valid_duration: convert::millis(answer.valid_duration_ms),
            valid_use_count: answer.valid_use_count,
        })
    }

    /// One attribute generation, synchronously on this thread (bounded by the check
    /// deadline: it runs before the check, on the request's path).
    pub fn generate_now(&self, instance: &Instance) -> Result<Generated, AdapterError> {
        self.accepts(instance)?;
        let arg = convert::instance(instance);
        let answer = self
            .call(self.limits.check_deadline, |p, s| {
                p.call_generate(s, &self.config, &arg)
            })
            .map_err(|f| self.fault(f))?
            .map_err(|m| self.declined(m))?;
        convert::generated(instance.template, answer).map_err(|why| {
            AdapterError::permanent(
                ErrorKind::InvalidResponse,
                format!(
                    "Wasm plugin {} answered {} badly: {why}",
                    self.plugin.name(),
                    instance.template.name()
                ),
            )
        })
    }

    /// One report batch, synchronously (bounded by the report deadline).
    pub fn report_now(&self, instances: &[Instance]) -> Result<(), AdapterError> {
        let batch = batch::pack(
            instances
                .iter()
                .filter(|i| self.plugin.templates().contains(&i.template)),
        );
        // The first word is the instance count.
        if batch.words.first().is_none_or(|&n| n == 0) {
            return Ok(());
        }
        self.call(self.limits.report_deadline, |p, s| {
            p.call_report(s, &self.config, &batch)
        })
        .map_err(|f| self.fault(f))?
        .map_err(|m| self.declined(m))
    }

    /// The plugin behind the handler.
    pub fn plugin(&self) -> &Arc<Plugin> {
        &self.plugin
    }
}

#[async_trait]
impl Handler for WasmHandler {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        self.serves(Variety::Check).then_some(self as _)
    }

    fn as_quota(&self) -> Option<&dyn QuotaHandler> {
        self.serves(Variety::Quota).then_some(self as _)
    }

    fn as_report(&self) -> Option<&dyn ReportHandler> {
        self.serves(Variety::Report).then_some(self as _)
    }

    fn as_attributes(&self) -> Option<&dyn AttributeHandler> {
        self.serves(Variety::AttributeGenerator)
            .then_some(self as _)
    }

    fn as_exposition(&self) -> Option<&dyn Exposition> {
        Some(self)
    }
}

impl Exposition for WasmHandler {
    fn render(&self, out: &mut String) {
        self.ctx.metrics.render(out);
    }
}

#[async_trait]
impl CheckHandler for WasmHandler {
    async fn check(&self, instance: &Instance) -> Result<CheckResult, AdapterError> {
        self.accepts(instance)?;
        if self.limits.check_deadline <= INLINE_DEADLINE {
            // No copy of the instance for the common, short case.
            let _slot = self.slot().await?;
            return self.check_now(instance);
        }
        let instance = instance.clone();
        self.bounded(move |this| this.check_now(&instance)).await
    }
}

#[async_trait]
impl AttributeHandler for WasmHandler {
    /// As a check: inline when the deadline is short, else in one of the handler's slots.
    async fn generate(&self, instance: &Instance) -> Result<Generated, AdapterError> {
        self.accepts(instance)?;
        if self.limits.check_deadline <= INLINE_DEADLINE {
            let _slot = self.slot().await?;
            return self.generate_now(instance);
        }
        let instance = instance.clone();
        self.bounded(move |this| this.generate_now(&instance)).await
    }
}

#[async_trait]
impl QuotaHandler for WasmHandler {
    async fn allocate(
        &self,
        instance: &Instance,
        args: &QuotaArgs,
    ) -> Result<QuotaResult, AdapterError> {
        self.accepts(instance)?;
        let arg = convert::instance(instance);
        let quota_args = wit::QuotaArgs {
            amount: args.amount,
            best_effort: args.best_effort,
            deduplication_id: args.deduplication_id.clone(),
        };
        let amount = args.amount;
        self.bounded(move |this| {
            let answer = this
                .call(this.limits.check_deadline, |p, s| {
                    p.call_quota(s, &this.config, &arg, &quota_args)
                })
                .map_err(|f| this.fault(f))?
                .map_err(|m| this.declined(m))?;
            Ok(QuotaResult {
                status: convert::status(answer.code, answer.message),
                valid_duration: convert::millis(answer.valid_duration_ms),
                granted_amount: answer.granted_amount.clamp(0, amount.max(0)),
                limit: None,
            })
        })
        .await
    }
}

#[async_trait]
impl ReportHandler for WasmHandler {
    async fn report(&self, instances: &[Instance]) -> Result<(), AdapterError> {
        if instances.len() < 64 {
            return self.report_now(instances);
        }
        // A large batch may run up to its (longer) deadline: off the async workers.
        let this = self.clone();
        let instances = instances.to_vec();
        tokio::task::spawn_blocking(move || this.report_now(&instances))
            .await
            .unwrap_or_else(|e| {
                Err(AdapterError::transient(
                    ErrorKind::Internal,
                    format!("Wasm report task failed: {e}"),
                ))
            })
    }
}

//! The handler trait family: one per variety, the same for every kind of adapter.

use async_trait::async_trait;
use std::time::Duration;

use mixer_model::{CheckResult, HeaderOperation, Instance, QuotaLimit, QuotaResult, Status, Value};

use crate::error::{AdapterError, ErrorKind};

/// A built handler. It offers one or more varieties; the runtime asks once, when the config
/// snapshot is built, and routes each template to the matching trait.
#[async_trait]
pub trait Handler: Send + Sync {
    /// The check side, if this handler decides checks.
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        None
    }

    /// The quota side, if this handler allocates quota.
    fn as_quota(&self) -> Option<&dyn QuotaHandler> {
        None
    }

    /// The report side, if this handler takes telemetry.
    fn as_report(&self) -> Option<&dyn ReportHandler> {
        None
    }

    /// The attribute-generating side, if this handler produces attributes.
    fn as_attributes(&self) -> Option<&dyn AttributeHandler> {
        None
    }

    /// Metrics the handler serves itself (the prometheus adapter), rendered on the mixer's
    /// admin `/metrics` beside the mixer's own.
    fn as_exposition(&self) -> Option<&dyn Exposition> {
        None
    }

    /// Something readiness (`/readyz`) should say about the handler now, as a `note:` line
    /// (the kubernetesenv cache serving stale pods while the API server is down). A note
    /// never makes the mixer unready: the handler still answers.
    fn readiness_note(&self) -> Option<String> {
        None
    }

    /// Releases what the handler holds; called once, when no snapshot uses it any more.
    async fn close(&self) {}
}

/// Decides checks.
#[async_trait]
pub trait CheckHandler: Send + Sync {
    /// Decides one instance (of authorization, checknothing or listentry).
    async fn check(&self, instance: &Instance) -> Result<CheckResult, AdapterError>;
}

/// What a quota call asks for.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct QuotaArgs {
    /// Units wanted.
    pub amount: i64,
    /// Grant what is left instead of failing when fewer than `amount` remain.
    pub best_effort: bool,
    /// A retried request with the same id is not charged twice.
    pub deduplication_id: String,
    /// A limit the caller sets for this request instead of the configured one (Envoy's
    /// per-descriptor `limit`). Handlers that count against configured limits apply it in
    /// place of theirs, on a counter of its own per window; others may ignore it.
    pub limit_override: Option<LimitOverride>,
}

/// A caller-supplied limit: `max_amount` units per `window`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitOverride {
    /// Units per window.
    pub max_amount: i64,
    /// The window.
    pub window: std::time::Duration,
}

/// One allocation of a batch given to [`QuotaHandler::allocate_many`].
pub type QuotaCall<'a> = (&'a Instance, &'a QuotaArgs);

/// Allocates quota.
#[async_trait]
pub trait QuotaHandler: Send + Sync {
    /// Allocates `args.amount` against the instance's dimensions.
    async fn allocate(
        &self,
        instance: &Instance,
        args: &QuotaArgs,
    ) -> Result<QuotaResult, AdapterError>;

    /// Allocates every call of one request (an Envoy rate limit request's descriptors, a Mixer
    /// v1 Check's quotas), answering in the same order. A handler whose backend can take them
    /// together (redisquota: one script call) overrides this, so that a request costs one round
    /// trip however many allocations it holds. The default runs [`allocate`](Self::allocate)
    /// for each, concurrently.
    async fn allocate_many(
        &self,
        calls: &[QuotaCall<'_>],
    ) -> Vec<Result<QuotaResult, AdapterError>> {
        match calls {
            [] => Vec::new(),
            [(instance, args)] => vec![self.allocate(instance, args).await],
            _ => {
                futures_util::future::join_all(
                    calls
                        .iter()
                        .map(|(instance, args)| self.allocate(instance, args)),
                )
                .await
            }
        }
    }

    /// [`allocate_many`](Self::allocate_many) answered on the caller's stack, for a handler
    /// whose answers never wait (memquota: counters in this process's memory); `None`, the
    /// default, for one that must be awaited (a store over the network, an out-of-process or
    /// Wasm adapter). The dispatcher asks this first and awaits `allocate_many` only on
    /// `None`, so that a handler answering at once costs no boxed future and no deadline
    /// timer: on a rate limit decision counted in memory those were a fifth of what counting
    /// cost. A handler that answers `Some` must answer exactly as `allocate_many` would.
    fn allocate_now(
        &self,
        calls: &[QuotaCall<'_>],
    ) -> Option<Vec<Result<QuotaResult, AdapterError>>> {
        let _ = calls;
        None
    }

    /// Charges usage known only after the response (a report rule's quota instance with a
    /// `charge`): each call's `amount` is added to its counter whether or not it fits, so a
    /// counter may end at or over its limit and the next check is refused. A charge is never
    /// refused and never refunds. A call with a `deduplication_id` seen before (a retried
    /// report record) counts once. Answers are in the order of `calls`; an error that is
    /// `retryable` (the backend is down) is tried again from the report queue.
    ///
    /// Handlers that cannot charge keep this default: a permanent error for every call.
    async fn charge_many(&self, calls: &[QuotaCall<'_>]) -> Vec<Result<QuotaResult, AdapterError>> {
        calls
            .iter()
            .map(|_| {
                Err(AdapterError::permanent(
                    crate::error::ErrorKind::InvalidInstance,
                    "this quota handler cannot charge usage from reports",
                ))
            })
            .collect()
    }

    /// Whether [`peek`](Self::peek) reads counters (the admin `/quota` endpoint answers 501
    /// for a handler that cannot).
    fn can_peek(&self) -> bool {
        false
    }

    /// Reads the counter `instance` names without charging it: its limit, what is left of it
    /// now and when it is full again (`retry_after` zero), for the admin `/quota` endpoint. A
    /// counter never charged is full. The default, for handlers that cannot read a counter
    /// without counting, is an error saying so.
    async fn peek(&self, instance: &Instance) -> Result<QuotaLimit, AdapterError> {
        Err(AdapterError::permanent(
            ErrorKind::InvalidInstance,
            format!(
                "this handler cannot read the counter of {} without charging it",
                instance.name
            ),
        ))
    }
}

/// Takes telemetry, a batch at a time.
#[async_trait]
pub trait ReportHandler: Send + Sync {
    /// Handles a batch of instances (metric, logentry, tracespan, reportnothing).
    async fn report(&self, instances: &[Instance]) -> Result<(), AdapterError>;
}

/// A handler that serves metrics in the Prometheus text exposition format.
pub trait Exposition: Send + Sync {
    /// Appends this handler's metric families, in text format 0.0.4, to `out`.
    fn render(&self, out: &mut String);
}

/// Produces attributes before any check, quota or report rule is evaluated (Istio's
/// attribute-producing adapters, `TEMPLATE_VARIETY_ATTRIBUTE_GENERATOR`): the kubernetesenv
/// lookup, a verified token's claims, an API key's labels. The instance's
/// `attributeBindings` map the answer's outputs onto the request's attributes.
#[async_trait]
pub trait AttributeHandler: Send + Sync {
    /// Answers one instance (of kubernetes, jwt or apikey) with its template's outputs.
    async fn generate(&self, instance: &Instance) -> Result<Generated, AdapterError>;
}

/// An attribute generator's answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Generated {
    /// Output values by the template's output field name ([`Template::outputs`]); a field
    /// left out takes its binding's default, as an unset output did in Istio.
    ///
    /// [`Template::outputs`]: mixer_model::Template::outputs
    pub outputs: Vec<(&'static str, Value)>,
    /// How long the same inputs give the same outputs (a token's remaining life); a verdict
    /// decided on them is cached no longer. `None`: no bound of the generator's own.
    pub valid_duration: Option<Duration>,
    /// A check that reads these outputs is denied with this instead (an invalid credential).
    /// Quota and report ignore it: their rules see the bindings' defaults.
    pub denial: Option<Denial>,
}

impl Generated {
    /// Outputs only.
    pub fn outputs(outputs: Vec<(&'static str, Value)>) -> Generated {
        Generated {
            outputs,
            ..Generated::default()
        }
    }

    /// A denial, with no outputs.
    pub fn denied(denial: Denial) -> Generated {
        Generated {
            denial: Some(denial),
            ..Generated::default()
        }
    }
}

/// Why a generator refuses a request, and what the answer to the proxy carries.
#[derive(Clone, Debug, PartialEq)]
pub struct Denial {
    /// The status (UNAUTHENTICATED for a bad credential: 401 on HTTP front ends).
    pub status: Status,
    /// Headers for the denied response (`WWW-Authenticate`).
    pub response_headers: Vec<HeaderOperation>,
}

//! What every front end's request starts with and holds to its end: the snapshot it was
//! taken on (whatever reloads happen meanwhile) and a pooled attribute bag built for that
//! snapshot's vocabulary ([`crate::bag_pool`]), given back when the request ends.
//!
//! A request begins only once a valid config is active; before that it gets the runtime's
//! [`NotReady`]. Once begun, its check or quota may be [`Undecided`]. Either way it gets no
//! decision ([`NoDecision`]), which each front end's `respond.rs` maps to its protocol (gRPC
//! UNAVAILABLE or INTERNAL, HTTP 503 or 500) with the runtime's one wording.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::log_gate::LogGate;
use mixer_model::AttributeBag;
use mixer_runtime::{
    Checked, Decision, DecisionId, DecisionOutcome, NotReady, Prepared, QuotaAfterCheck, Runtime,
    Snapshot, Undecided, Wants,
};

use crate::bag_pool::{keep_spare, spare_bag};

/// One request's snapshot and bag, and the id of the decision made for it.
pub(crate) struct RequestScope {
    snapshot: Arc<Snapshot>,
    /// Always present until the scope drops and gives it back to the pool.
    bag: Option<AttributeBag>,
    /// The id the request's decision is answered and logged with.
    decision_id: DecisionId,
    /// When the request began, for the decision log's latency; taken only when a rule logs
    /// decisions.
    started: Option<std::time::Instant>,
}

impl RequestScope {
    /// Begins a request on the active snapshot, or says that no valid config is active.
    pub(crate) fn begin(runtime: &Runtime) -> Result<RequestScope, NotReady> {
        let snapshot = runtime.ready_snapshot()?;
        let bag = spare_bag(snapshot.vocabulary());
        Ok(RequestScope {
            started: snapshot.logs_decisions().then(std::time::Instant::now),
            snapshot,
            bag: Some(bag),
            decision_id: DecisionId::next(),
        })
    }

    /// The id of the request's decision, to answer the proxy with.
    pub(crate) fn decision_id(&self) -> DecisionId {
        self.decision_id
    }

    /// Whether a rule logs decisions (so a front end builds what it logs only then).
    pub(crate) fn logs_decisions(&self) -> bool {
        self.started.is_some()
    }

    /// Logs the request's decision when a rule logs decisions (one test otherwise).
    pub(crate) fn log_decision(&mut self, protocol: &'static str, outcome: DecisionOutcome<'_>) {
        let Some(started) = self.started else {
            return;
        };
        let id = self.decision_id;
        let (snapshot, bag) = self.parts();
        snapshot.log_decision(
            bag,
            &Decision {
                id,
                front_end: protocol,
                started,
                outcome,
            },
        );
    }

    /// The request's bag, to fill.
    pub(crate) fn bag_mut(&mut self) -> &mut AttributeBag {
        self.parts_mut().1
    }

    /// The snapshot and the request's bag, to read both.
    pub(crate) fn parts(&mut self) -> (&Snapshot, &AttributeBag) {
        let (snapshot, bag) = self.parts_mut();
        (snapshot, bag)
    }

    /// The snapshot and the request's bag, to fill the bag again between decisions on it.
    pub(crate) fn parts_mut(&mut self) -> (&Snapshot, &mut AttributeBag) {
        let vocabulary = self.snapshot.vocabulary();
        let bag = self
            .bag
            .get_or_insert_with(|| AttributeBag::new(vocabulary.clone()));
        (&self.snapshot, bag)
    }

    /// The W3C trace context the request carries in its headers (`request.headers`: the
    /// proxy's, for ext_authz and forward-auth), when the mixer traces its requests.
    fn trace_parent(&self) -> Option<opentelemetry::Context> {
        // Off (the default), not even the header map is looked up: a name lookup in the
        // bag on every request for nothing (#36: off costs nothing measurable).
        if !mixer_runtime::traces::enabled() {
            return None;
        }
        let headers = self
            .bag
            .as_ref()
            .and_then(|bag| bag.get_by_name("request.headers"))
            .and_then(|headers| headers.as_map());
        mixer_runtime::traces::parent(|name| headers.and_then(|h| h.get(name)))
    }

    /// Decides the request's check ([`mixer_runtime::check_prepared`]; `prepared` holds the
    /// attribute generators' outputs when they ran ahead of it). A check left undecided is
    /// logged here, for every front end alike: a line per 10 s (a handler that is down fails
    /// every check), naming the protocol.
    pub(crate) async fn check_prepared(
        &mut self,
        wants: Wants,
        protocol: &'static str,
        prepared: &Prepared,
    ) -> Result<Checked, Undecided> {
        let parent = self.trace_parent();
        let (snapshot, bag) = self.parts();
        // Boxed: the check's future is large (kilobytes) and every future above it (the
        // traced wrapper, this method's, the front end's handler, the server's task) would
        // otherwise hold it inline and move it whole several times a request, which cost
        // more than one allocation (#36: off costs nothing).
        let check = Box::pin(mixer_runtime::check_prepared(
            snapshot, bag, wants, prepared,
        ));
        let checked = mixer_runtime::traces::request(protocol, parent, check).await;
        if let Err(e) = &checked {
            log_undecided(protocol, e);
        }
        if self.started.is_some() {
            self.log_decision(protocol, checked_outcome(&checked));
        }
        checked
    }

    /// Decides the request's check and charges the quota rules that match once it allows
    /// ([`mixer_runtime::check_with_quota`]), for the check protocols with no quota field of
    /// their own. Undecided is logged as [`RequestScope::check_prepared`] logs it.
    pub(crate) async fn check_with_quota(
        &mut self,
        wants: Wants,
        protocol: &'static str,
    ) -> Result<QuotaAfterCheck, Undecided> {
        let parent = self.trace_parent();
        let (snapshot, bag) = self.parts();
        // Boxed, as in [`RequestScope::check_prepared`].
        let check = Box::pin(mixer_runtime::check_with_quota(snapshot, bag, wants));
        let checked = mixer_runtime::traces::request(protocol, parent, check).await;
        if let Err(e) = &checked {
            log_undecided(protocol, e);
        }
        if self.started.is_some() {
            let outcome = match &checked {
                Ok(QuotaAfterCheck::Checked(c) | QuotaAfterCheck::Granted { checked: c, .. }) => {
                    DecisionOutcome::Verdict {
                        verdict: &c.verdict,
                        cache: c.tier,
                    }
                }
                Ok(QuotaAfterCheck::Refused(r)) => DecisionOutcome::Verdict {
                    verdict: &r.verdict,
                    cache: r.tier,
                },
                Err(e) => DecisionOutcome::Undecided(e),
            };
            self.log_decision(protocol, outcome);
        }
        checked
    }
}

/// A check's outcome as the decision log takes it.
pub(crate) fn checked_outcome(checked: &Result<Checked, Undecided>) -> DecisionOutcome<'_> {
    match checked {
        Ok(c) => DecisionOutcome::Verdict {
            verdict: &c.verdict,
            cache: c.tier,
        },
        Err(e) => DecisionOutcome::Undecided(e),
    }
}

impl Drop for RequestScope {
    fn drop(&mut self) {
        if let Some(bag) = self.bag.take() {
            keep_spare(bag);
        }
    }
}

/// Why a request got no decision: no valid config is active, or the runtime left its check or
/// quota undecided. Never a denial: each front end answers it with an error of its protocol,
/// so that the proxy's own failure setting decides, worded as the runtime words the cause
/// (this type's `Display`).
#[derive(Debug)]
pub(crate) enum NoDecision {
    /// No valid config is active yet.
    NotReady(NotReady),
    /// A handler failed closed, or an instance cannot be built from the request.
    Undecided(Undecided),
}

impl NoDecision {
    /// True when this request cannot be decided on the active config: an instance of a matched
    /// rule cannot be built from it (gRPC INTERNAL, HTTP 500, as Istio 1.4 answers). False when
    /// the mixer cannot decide for now (no config yet, a handler that failed closed), which a
    /// retry may mend (gRPC UNAVAILABLE, HTTP 503).
    pub(crate) fn is_internal(&self) -> bool {
        matches!(self, NoDecision::Undecided(Undecided::Instance(_)))
    }
}

impl fmt::Display for NoDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoDecision::NotReady(e) => e.fmt(f),
            NoDecision::Undecided(e) => e.fmt(f),
        }
    }
}

impl From<NotReady> for NoDecision {
    fn from(e: NotReady) -> NoDecision {
        NoDecision::NotReady(e)
    }
}

impl From<Undecided> for NoDecision {
    fn from(e: Undecided) -> NoDecision {
        NoDecision::Undecided(e)
    }
}

/// The gRPC error for a request without a decision, the same on every gRPC front end:
/// INTERNAL or UNAVAILABLE ([`NoDecision::is_internal`]), which proxies and exporters retry or
/// fail by their own failure setting.
pub(crate) fn grpc_status(no_decision: impl Into<NoDecision>) -> tonic::Status {
    let no_decision = no_decision.into();
    let code = if no_decision.is_internal() {
        tonic::Code::Internal
    } else {
        tonic::Code::Unavailable
    };
    tonic::Status::new(code, no_decision.to_string())
}

/// Logs a check or quota the mixer could not decide, at most a line per 10 s.
pub(crate) fn log_undecided(protocol: &'static str, error: &Undecided) {
    static UNDECIDED: LogGate = LogGate::new(Duration::from_secs(10));
    if let Some(held_back) = UNDECIDED.due() {
        tracing::warn!(held_back, protocol, "could not decide: {error}");
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use mixer_adapter_api::{AdapterError, ErrorKind};
    use mixer_runtime::InstanceError;

    use super::*;

    /// A quota handler that failed closed.
    pub(crate) fn handler_down() -> Undecided {
        Undecided::Handler {
            handler: Arc::from("quota.handler.istio-system"),
            error: AdapterError::transient(ErrorKind::Unavailable, "redis is down"),
        }
    }

    /// An instance that cannot be built from the request.
    pub(crate) fn instance_unbuilt() -> Undecided {
        Undecided::Instance(InstanceError {
            instance: Arc::from("requestcount.instance.istio-system"),
            field: "dimensions[user]".to_string(),
            message: "attribute request.headers is absent".to_string(),
        })
    }

    #[test]
    fn grpc_front_ends_answer_in_the_runtimes_words() {
        let status = grpc_status(NotReady);
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(status.message(), "no valid config is active");

        let status = grpc_status(handler_down());
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(status.message(), handler_down().to_string());

        let status = grpc_status(instance_unbuilt());
        assert_eq!(status.code(), tonic::Code::Internal);
        assert_eq!(status.message(), instance_unbuilt().to_string());
    }
}

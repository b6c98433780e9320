//! What every front end's request starts with and holds to its end: the snapshot it was
//! taken on (whatever reloads happen meanwhile) and a pooled attribute bag built for that
//! snapshot's vocabulary ([`crate::bag_pool`]), given back when the request ends.
//!
//! A request begins only once a valid config is active; before that it gets the runtime's
//! [`NotReady`], which each front end's answer maps to its protocol (gRPC UNAVAILABLE, HTTP
//! 503) with the runtime's one wording.

use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::LogGate;
use mixer_model::AttributeBag;
use mixer_runtime::{Checked, NotReady, Runtime, Snapshot, Undecided, Wants};

use crate::bag_pool::{keep_spare, spare_bag};

/// One request's snapshot and bag.
pub(crate) struct RequestScope {
    snapshot: Arc<Snapshot>,
    /// Always present until the scope drops and gives it back to the pool.
    bag: Option<AttributeBag>,
}

impl RequestScope {
    /// Begins a request on the active snapshot, or says that no valid config is active.
    pub(crate) fn begin(runtime: &Runtime) -> Result<RequestScope, NotReady> {
        let snapshot = runtime.ready_snapshot()?;
        let bag = spare_bag(snapshot.vocabulary());
        Ok(RequestScope {
            snapshot,
            bag: Some(bag),
        })
    }

    /// The request's bag, to fill.
    pub(crate) fn bag_mut(&mut self) -> &mut AttributeBag {
        let vocabulary = self.snapshot.vocabulary();
        self.bag
            .get_or_insert_with(|| AttributeBag::new(vocabulary.clone()))
    }

    /// The snapshot and the request's bag, to read both.
    pub(crate) fn parts(&mut self) -> (&Snapshot, &AttributeBag) {
        let vocabulary = self.snapshot.vocabulary();
        let bag = self
            .bag
            .get_or_insert_with(|| AttributeBag::new(vocabulary.clone()));
        (&self.snapshot, bag)
    }

    /// Decides the request's check ([`mixer_runtime::check`]). A check left undecided is
    /// logged here, for every front end alike: a line per 10 s (a handler that is down fails
    /// every check), naming the protocol.
    pub(crate) async fn check(
        &mut self,
        wants: Wants,
        protocol: &'static str,
    ) -> Result<Checked, Undecided> {
        let (snapshot, bag) = self.parts();
        let checked = mixer_runtime::check(snapshot, bag, wants).await;
        if let Err(e) = &checked {
            log_undecided(protocol, e);
        }
        checked
    }
}

impl Drop for RequestScope {
    fn drop(&mut self) {
        if let Some(bag) = self.bag.take() {
            keep_spare(bag);
        }
    }
}

/// No valid config is active: UNAVAILABLE on every gRPC front end, which proxies and
/// exporters retry (or fail by their own failure setting), with the runtime's wording.
pub(crate) fn unavailable(not_ready: NotReady) -> tonic::Status {
    tonic::Status::unavailable(not_ready.to_string())
}

/// Logs a check or quota the mixer could not decide, at most a line per 10 s.
pub(crate) fn log_undecided(protocol: &'static str, error: &Undecided) {
    static UNDECIDED: LogGate = LogGate::new(Duration::from_secs(10));
    if let Some(held_back) = UNDECIDED.due() {
        tracing::warn!(held_back, protocol, "could not decide: {error}");
    }
}

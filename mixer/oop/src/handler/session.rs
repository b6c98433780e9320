//! Sessions with the adapter: created on the first call, forgotten when the adapter seems to
//! have lost them, so the next call (or the retry of this one) creates a new one.
//!
//! The contract, as Istio 1.4's adapters keep it: an adapter answers NOT_FOUND for a session
//! id it does not know (it restarted, or dropped the session), and nothing else with
//! NOT_FOUND. The mixer then creates a new session and sends the call once more.

use std::sync::atomic::Ordering;
use std::time::Duration;

use mixer_proto::istio::mixer::adapter::model::v1beta1 as model;
use prost_types::Any;
use tokio::time::Instant;
use tonic::{Code, Request};

use super::RemoteHandler;
use crate::convert;
use crate::transport::map_status;

/// How the handler passes its config to the adapter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Session {
    /// Not asked yet (or forgotten after the adapter went away).
    Unknown,
    /// The adapter has no sessions: every call carries the params.
    Stateless,
    /// Calls carry this session id; the number tells this session from later ones.
    Id(String, u64),
    /// Closed: the handler is retired.
    Closed,
}

/// Which session a call carried, if any: the number of [`Session::Id`].
pub(super) type SentSession = Option<u64>;

impl RemoteHandler {
    /// The `adapter_config` of a call: the session id, or the params, and which session it
    /// carried. Creates the session on first use.
    pub(super) async fn adapter_config(
        &self,
        remaining: Duration,
    ) -> Result<(Any, SentSession), tonic::Status> {
        let mut session = self.session.lock().await;
        if *session == Session::Unknown {
            let mut client = model::infrastructure_backend_client::InfrastructureBackendClient::new(
                self.channel(),
            );
            let mut req = Request::new(model::CreateSessionRequest {
                adapter_config: Some(self.params.clone()),
                inferred_types: self.inferred_types.clone(),
            });
            req.set_timeout(remaining);
            let started = Instant::now();
            match client.create_session(req).await {
                Ok(resp) => {
                    let resp = resp.into_inner();
                    let ok = resp.status.as_ref().is_none_or(|s| s.code == 0);
                    self.metrics
                        .record("create_session", "ok", started.elapsed());
                    *session = if ok && !resp.session_id.is_empty() {
                        tracing::debug!(handler = %self.name, session = %resp.session_id, "adapter session created");
                        let n = self.sessions_created.fetch_add(1, Ordering::Relaxed);
                        Session::Id(resp.session_id, n)
                    } else {
                        tracing::warn!(
                            handler = %self.name,
                            status = ?resp.status,
                            "adapter refused a session; sending params with every call"
                        );
                        Session::Stateless
                    };
                }
                Err(s) if s.code() == Code::Unimplemented => {
                    self.metrics
                        .record("create_session", "unimplemented", started.elapsed());
                    *session = Session::Stateless;
                }
                Err(s) => {
                    self.metrics.record(
                        "create_session",
                        map_status(&s).kind.label(),
                        started.elapsed(),
                    );
                    return Err(s);
                }
            }
        }
        Ok(match &*session {
            Session::Id(id, n) => (convert::session_any(id), Some(*n)),
            Session::Closed => return Err(tonic::Status::unavailable("handler closed")),
            _ => (self.params.clone(), None),
        })
    }

    /// Forgets the session `sent` after errors that suggest the adapter lost it (it
    /// restarted, or says it does not know it); the next call creates a new one. A session
    /// created since by another call is kept: it is not the one the adapter lost.
    pub(super) async fn maybe_forget_session(&self, status: &tonic::Status, sent: SentSession) {
        if sent.is_some()
            && matches!(
                status.code(),
                Code::Unavailable | Code::NotFound | Code::FailedPrecondition
            )
        {
            let mut session = self.session.lock().await;
            if matches!(*session, Session::Id(_, n) if Some(n) == sent) {
                *session = Session::Unknown;
            }
        }
    }
}

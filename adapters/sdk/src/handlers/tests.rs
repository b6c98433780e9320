//! Handlers are built once per session or per distinct params, and closed once, after the
//! calls that hold them.

use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use async_trait::async_trait;
use mixer_adapter_api::{Adapter, AdapterError, AdapterInfo, ParamError, Stability};

use super::*;

#[derive(Default)]
struct Counts {
    built: AtomicUsize,
    closed: AtomicUsize,
}

/// Counts the handlers it builds and those closed.
#[derive(Default)]
struct Counting(Arc<Counts>);

static INFO: AdapterInfo = AdapterInfo {
    name: "counting",
    description: "counts its handlers",
    templates: &[Template::CheckNothing],
    cacheable: true,
    stability: Stability::Alpha,
};

#[derive(serde::Deserialize)]
struct Config {
    #[serde(default)]
    n: u32,
}

impl Adapter for Counting {
    type Config = Config;
    type Compiled = u32;

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, config: Config) -> Result<u32, Vec<ParamError>> {
        if config.n == 999 {
            return Err(vec![ParamError::new("n", "not 999")]);
        }
        Ok(config.n)
    }

    fn build(&self, _: &u32, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        self.0.built.fetch_add(1, Ordering::SeqCst);
        Ok(Arc::new(Closing(self.0.clone())))
    }
}

struct Closing(Arc<Counts>);

#[async_trait]
impl Handler for Closing {
    async fn close(&self) {
        self.0.closed.fetch_add(1, Ordering::SeqCst);
    }
}

fn handlers() -> (Handlers, Arc<Counts>) {
    let counting = Counting::default();
    let counts = counting.0.clone();
    (
        Handlers::new(Arc::new(counting), ParamsReader::default()),
        counts,
    )
}

fn params(n: u32) -> Any {
    mixer_oop::params_any(&serde_json::json!({ "n": n }))
}

fn counted(counts: &Counts) -> (usize, usize) {
    (
        counts.built.load(Ordering::SeqCst),
        counts.closed.load(Ordering::SeqCst),
    )
}

#[tokio::test]
async fn calls_with_the_same_params_share_one_handler() {
    let (handlers, counts) = handlers();
    for _ in 0..3 {
        drop(handlers.handler(Some(&params(1))).await.expect("built"));
    }
    drop(
        handlers
            .handler(None)
            .await
            .expect("no params are params too"),
    );
    drop(handlers.handler(Some(&params(2))).await.expect("built"));
    assert_eq!(counted(&counts), (3, 0));
    let refused = handlers.handler(Some(&params(999))).await.err().unwrap();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert_eq!(refused.message(), "n: not 999");
    handlers.close_all().await;
    assert_eq!(counted(&counts), (3, 3));
}

#[tokio::test]
async fn an_evicted_handler_is_closed_and_built_again_when_needed() {
    let (handlers, counts) = handlers();
    let extra = 5;
    let distinct = u32::try_from(INLINE_HANDLERS).unwrap() + extra;
    for n in 0..distinct {
        drop(handlers.handler(Some(&params(n))).await.expect("built"));
    }
    handlers.inline.run_pending_tasks();
    closed(&counts, extra as usize).await;
    assert_eq!(counted(&counts), (distinct as usize, extra as usize));
    // The first ones were the least recently used: asking again builds them again.
    drop(handlers.handler(Some(&params(0))).await.expect("built"));
    assert_eq!(counts.built.load(Ordering::SeqCst), distinct as usize + 1);
}

/// Waits (a second at most) for `n` handlers closed: evicted ones close on tasks of their own.
async fn closed(counts: &Counts, n: usize) {
    for _ in 0..100 {
        if counts.closed.load(Ordering::SeqCst) >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn sessions_past_the_bound_are_closed_least_recently_used_first() {
    let (handlers, counts) = handlers();
    let first = handlers
        .create_session(Some(&params(1)), &HashMap::new())
        .expect("created");
    let second = handlers
        .create_session(Some(&params(1)), &HashMap::new())
        .expect("created");
    let extra = 3;
    for _ in 1..SESSIONS + extra {
        // The first session is in use; the second, forgotten by its mixer, is not.
        drop(
            handlers
                .handler(Some(&mixer_oop::session_any(&first)))
                .await,
        );
        handlers
            .create_session(Some(&params(1)), &HashMap::new())
            .expect("created");
    }
    handlers.sessions.run_pending_tasks();
    let evicted = usize::try_from(extra + 1).unwrap();
    closed(&counts, evicted).await;
    assert_eq!(counts.closed.load(Ordering::SeqCst), evicted);
    let gone = handlers
        .handler(Some(&mixer_oop::session_any(&second)))
        .await;
    assert_eq!(gone.err().map(|s| s.code()), Some(tonic::Code::NotFound));
    let kept = handlers
        .handler(Some(&mixer_oop::session_any(&first)))
        .await;
    assert!(kept.is_ok(), "the session in use is kept");
}

#[tokio::test]
async fn a_session_is_closed_after_its_calls_in_flight_and_then_unknown() {
    let (handlers, counts) = handlers();
    let id = handlers
        .create_session(Some(&params(1)), &HashMap::new())
        .expect("created");
    assert!(id.starts_with("counting-session-"), "{id}");
    let session = mixer_oop::session_any(&id);
    let in_flight = handlers.handler(Some(&session)).await.expect("the session");
    let handlers = Arc::new(handlers);
    let closing = tokio::spawn({
        let handlers = handlers.clone();
        let id = id.clone();
        async move { handlers.close_session(&id).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(counted(&counts), (1, 0), "not closed under a call");
    drop(in_flight);
    assert!(closing.await.expect("join"));
    assert_eq!(counted(&counts), (1, 1));
    let gone = handlers.handler(Some(&session)).await.err().unwrap();
    assert_eq!(gone.code(), tonic::Code::NotFound);
    assert!(!handlers.close_session(&id).await, "closed once");
    handlers.close_all().await;
    assert_eq!(counted(&counts), (1, 1));
}

#[test]
fn instances_of_templates_the_adapter_does_not_serve_are_refused() {
    let (handlers, _) = handlers();
    let quota = HashMap::from([(
        "requestcount.istio-system".to_string(),
        Any {
            type_url: "type.googleapis.com/quota.Type".into(),
            value: vec![],
        },
    )]);
    assert_eq!(
        handlers.validate(None, &quota).err().unwrap(),
        "instance requestcount.istio-system: template quota is not served by this adapter \
         (it serves: checknothing)"
    );
    let session = mixer_oop::session_any("s");
    assert!(handlers.validate(Some(&session), &HashMap::new()).is_err());
    assert!(handlers.validate(None, &HashMap::new()).is_ok());
}

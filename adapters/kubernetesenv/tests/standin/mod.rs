//! A stand-in for the Kubernetes API server. No API server can be installed on the machines
//! these tests run on, so this HTTP server answers what kubernetesenv's watcher asks: a list
//! (`GET /api/v1/pods`, `/apis/apps/v1/replicasets`, `/api/v1/replicationcontrollers`, with
//! the list's `resourceVersion`) and a watch (`?watch=true&resourceVersion=N`: a stream of
//! `{"type":"ADDED"|"MODIFIED"|"DELETED","object":…}` lines from after N). Objects are
//! Kubernetes JSON as `kubectl get -o json` prints them (`tests/data/`). Shared with the
//! end-to-end test in `tests/tests/kubernetesenv.rs` (included by path).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

/// The kinds the stand-in serves, by path.
const KINDS: [(&str, &str, &str); 3] = [
    ("/api/v1/pods", "v1", "PodList"),
    ("/apis/apps/v1/replicasets", "apps/v1", "ReplicaSetList"),
    (
        "/api/v1/replicationcontrollers",
        "v1",
        "ReplicationControllerList",
    ),
];

#[derive(Default)]
struct Cluster {
    /// Per path: objects by `<namespace>/<name>`.
    objects: BTreeMap<&'static str, BTreeMap<String, Value>>,
    /// Every change, for watches that resume from a version.
    log: Vec<(u64, &'static str, Value)>,
    version: u64,
}

struct Inner {
    cluster: Mutex<Cluster>,
    /// The bearer token every request must carry, if any (as a service account's would).
    token: Mutex<Option<String>>,
    events: broadcast::Sender<(u64, &'static str, Value)>,
    down: watch::Sender<bool>,
}

/// A running stand-in API server.
#[derive(Clone)]
pub struct StandIn {
    inner: Arc<Inner>,
    /// Where it listens (http, 127.0.0.1).
    pub addr: SocketAddr,
    task: Arc<tokio::task::JoinHandle<()>>,
}

/// The path of a fixture under the adapter's `tests/data/`.
pub fn data(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../adapters/kubernetesenv/tests/data")
        .join(file)
        .canonicalize()
        .or_else(|_| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data")
                .join(file)
                .canonicalize()
        })
        .unwrap_or_else(|e| panic!("fixture {file}: {e}"))
}

/// A fixture's JSON.
pub fn fixture(file: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(data(file)).unwrap()).unwrap()
}

/// A fixture list's items.
pub fn items(file: &str) -> Vec<Value> {
    fixture(file)["items"].as_array().unwrap().clone()
}

fn path_of(object: &Value) -> &'static str {
    match object["kind"].as_str() {
        Some("Pod") => KINDS[0].0,
        Some("ReplicaSet") => KINDS[1].0,
        Some("ReplicationController") => KINDS[2].0,
        other => panic!("stand-in serves no {other:?}"),
    }
}

fn key(object: &Value) -> String {
    let meta = &object["metadata"];
    format!(
        "{}/{}",
        meta["namespace"].as_str().unwrap(),
        meta["name"].as_str().unwrap()
    )
}

#[derive(serde::Deserialize)]
struct Params {
    watch: Option<String>,
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
}

impl StandIn {
    /// Starts serving on a free port with `objects` already in the cluster.
    pub async fn start(objects: impl IntoIterator<Item = Value>) -> StandIn {
        let (events, _) = broadcast::channel(1024);
        let (down, _) = watch::channel(false);
        let inner = Arc::new(Inner {
            cluster: Mutex::new(Cluster::default()),
            token: Mutex::new(None),
            events,
            down,
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut router = axum::Router::new();
        for (path, api_version, list_kind) in KINDS {
            router = router.route(
                path,
                axum::routing::get(
                    move |State(inner): State<Arc<Inner>>,
                          headers: axum::http::HeaderMap,
                          Query(params): Query<Params>| {
                        serve(inner, path, api_version, list_kind, params, headers)
                    },
                ),
            );
        }
        let router = router.with_state(inner.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        let standin = StandIn {
            inner,
            addr,
            task: Arc::new(task),
        };
        for object in objects {
            standin.change("ADDED", object);
        }
        standin
    }

    /// Records a change (`ADDED`, `MODIFIED`, `DELETED`) and sends it to open watches.
    pub fn change(&self, kind: &str, mut object: Value) {
        let mut cluster = self.inner.cluster.lock().unwrap();
        cluster.version += 1;
        let version = cluster.version;
        object["metadata"]["resourceVersion"] = json!(version.to_string());
        let path = path_of(&object);
        let objects = cluster.objects.entry(path).or_default();
        if kind == "DELETED" {
            objects.remove(&key(&object));
        } else {
            objects.insert(key(&object), object.clone());
        }
        let event = json!({"type": kind, "object": object});
        cluster.log.push((version, path, event.clone()));
        let _ = self.inner.events.send((version, path, event));
    }

    /// From now on, answers 401 to a request without `Authorization: Bearer <token>`.
    pub fn require_token(&self, token: &str) {
        *self.inner.token.lock().unwrap() = Some(token.to_owned());
    }

    /// Goes away: open watches end and every request is answered 503 (a connection the
    /// client keeps alive would otherwise still reach it); the listener closes.
    pub fn go_away(&self) {
        self.inner.down.send_replace(true);
        self.task.abort();
    }

    /// A kubeconfig file in `dir` whose current context is this server (no credentials).
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        self.kubeconfig_with_token(dir, None)
    }

    /// [`StandIn::kubeconfig`], its user authenticating with a bearer `token`.
    pub fn kubeconfig_with_token(&self, dir: &Path, token: Option<&str>) -> PathBuf {
        let path = dir.join("kubeconfig");
        let user = match token {
            Some(token) => format!("{{token: {token}}}"),
            None => "{}".to_owned(),
        };
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: standin\n  cluster:\n    server: http://{}\n\
             contexts:\n- name: standin\n  context:\n    cluster: standin\n    user: nobody\n\
             current-context: standin\nusers:\n- name: nobody\n  user: {user}\n",
            self.addr
        );
        std::fs::write(&path, text).unwrap();
        path
    }
}

async fn serve(
    inner: Arc<Inner>,
    path: &'static str,
    api_version: &'static str,
    list_kind: &'static str,
    params: Params,
    headers: axum::http::HeaderMap,
) -> Response {
    if *inner.down.borrow() {
        return (StatusCode::SERVICE_UNAVAILABLE, "stand-in gone away").into_response();
    }
    let wanted = inner.token.lock().unwrap().clone();
    if let Some(token) = wanted {
        let given = headers.get("authorization").and_then(|v| v.to_str().ok());
        if given != Some(format!("Bearer {token}").as_str()) {
            return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response();
        }
    }
    let watching = matches!(params.watch.as_deref(), Some("true" | "1"));
    if !watching {
        let cluster = inner.cluster.lock().unwrap();
        let items: Vec<Value> = cluster
            .objects
            .get(path)
            .map(|o| o.values().cloned().collect())
            .unwrap_or_default();
        let list = json!({
            "apiVersion": api_version,
            "kind": list_kind,
            "metadata": {"resourceVersion": cluster.version.to_string()},
            "items": items,
        });
        return axum::Json(list).into_response();
    }
    let from: u64 = params
        .resource_version
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // Subscribe before reading the log, so that no change falls between the two.
    let live = inner.events.subscribe();
    let backlog: Vec<(u64, Value)> = inner
        .cluster
        .lock()
        .unwrap()
        .log
        .iter()
        .filter(|(v, p, _)| *v > from && *p == path)
        .map(|(v, _, e)| (*v, e.clone()))
        .collect();
    let down = inner.down.subscribe();
    let last = backlog.last().map_or(from, |(v, _)| *v);
    let state = (backlog.into_iter(), live, down, last);
    let stream = futures_util::stream::unfold(
        state,
        move |(mut backlog, mut live, mut down, last)| async move {
            if let Some((_, event)) = backlog.next() {
                return Some((
                    Ok::<_, std::io::Error>(format!("{event}\n")),
                    (backlog, live, down, last),
                ));
            }
            loop {
                let got = tokio::select! {
                    _ = down.wait_for(|d| *d) => None,
                    got = live.recv() => Some(got),
                };
                match got {
                    Some(Ok((v, p, event))) if v > last && p == path => {
                        return Some((Ok(format!("{event}\n")), (backlog, live, down, v)));
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => return None,
                }
            }
        },
    );
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}

//! Realistic, varied requests: the attributes a sidecar or an edge proxy sends for ordinary
//! traffic, drawn from small pools so that some repeat (as real traffic does) and some don't.

/// One request, protocol-neutral.
#[derive(Clone, Debug)]
pub struct Request {
    /// HTTP method.
    pub method: &'static str,
    /// Path with query.
    pub path: String,
    /// Host (authority).
    pub host: String,
    /// Client address.
    pub source_ip: String,
    /// Client principal (SPIFFE id).
    pub source_principal: String,
    /// Headers, lower-case names.
    pub headers: Vec<(String, String)>,
}

const METHODS: [&str; 4] = ["GET", "GET", "POST", "PUT"];
const PATHS: [&str; 6] = [
    "/api/v1/orders",
    "/api/v1/users",
    "/health",
    "/static/app.js",
    "/admin/stats",
    "/api/v1/cart",
];
const USERS: [&str; 5] = ["alice", "bob", "carol", "dave", "erin"];
const AGENTS: [&str; 3] = [
    "curl/8.5.0",
    "Mozilla/5.0 (X11; Linux x86_64)",
    "okhttp/4.12.0",
];

/// `n` requests, deterministic for a given `n` and `distinct` (how many different request
/// ids and query strings there are: 1 makes every request of a shape identical, which is
/// what a cache sees under repeated traffic).
pub fn requests(n: usize, distinct: usize) -> Vec<Request> {
    let distinct = distinct.max(1);
    (0..n)
        .map(|i| {
            let v = i % distinct;
            let user = USERS[i % USERS.len()];
            let path = format!("{}?page={}", PATHS[i % PATHS.len()], v % 50);
            let host = format!("svc-{}.default.svc.cluster.local", i % 7);
            Request {
                method: METHODS[i % METHODS.len()],
                path,
                host: host.clone(),
                source_ip: format!("10.{}.{}.{}", (i / 65536) % 256, (i / 256) % 256, i % 256),
                source_principal: format!("spiffe://cluster.local/ns/default/sa/{user}"),
                headers: vec![
                    (":authority".into(), host),
                    ("user-agent".into(), AGENTS[i % AGENTS.len()].into()),
                    ("x-request-id".into(), format!("req-{v:08x}")),
                    ("x-user".into(), user.into()),
                    ("accept".into(), "application/json".into()),
                    ("x-b3-traceid".into(), format!("{:016x}", v * 7919)),
                    ("content-type".into(), "application/json".into()),
                ],
            }
        })
        .collect()
}

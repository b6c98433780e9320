//! The crates depend on each other one way only (adapters never on the runtime):
//! model <- adapter-api <- adapters; model <- policy <- config <- runtime <- frontends <- server;
//! adapter-api <- remote (out-of-process adapters as the config describes them) <- config and
//! the out-of-process client; the leaves `mixer-proto` and `mixer-grpc` are shared by the front
//! ends and the SDK, which serves the adapter API out of process; `mixer-transport` (the
//! listeners, their limits and TLS, over `mixer-grpc`) sits between the front ends and the
//! server, which wires the two.

use std::collections::BTreeMap;
use std::process::Command;

fn allowed(krate: &str) -> Option<&'static [&'static str]> {
    Some(match krate {
        "mixer-model" => &[],
        "mixer-adapter-api" => &["mixer-model"],
        // What the config says about an out-of-process adapter, and the adapter trait its
        // handlers are compiled through: settings the mixer reads, that no adapter sees.
        "mixer-remote" => &["mixer-model", "mixer-adapter-api"],
        "mixer-policy" => &["mixer-model"],
        "mixer-config" => &[
            "mixer-model",
            "mixer-policy",
            "mixer-adapter-api",
            "mixer-remote",
        ],
        "mixer-runtime" => &[
            "mixer-model",
            "mixer-policy",
            "mixer-config",
            "mixer-adapter-api",
            "mixer-remote",
        ],
        "mixer-frontends" => &[
            "mixer-model",
            "mixer-policy",
            "mixer-config",
            "mixer-adapter-api",
            "mixer-runtime",
            "mixer-proto",
            "mixer-grpc",
        ],
        // The listeners (gRPC and HTTP), their limits and TLS: over the gRPC server the
        // adapter SDK shares, filling in what forward-auth reads of a TLS handshake; never
        // the runtime or the config, which reach a listener only through a front end.
        "mixer-transport" => &["mixer-model", "mixer-grpc", "mixer-frontends"],
        // The shared check cache tier implements the runtime's `SharedTier` over Redis; the
        // runtime never depends on it, the server wires it in.
        "mixer-shared-cache" => &["mixer-model", "mixer-adapter-api", "mixer-runtime"],
        "mixer-proto" => &[],
        // gRPC serving over h2, shared by the front ends and the SDK: a leaf like the
        // generated protocol, so neither side reaches the other through it.
        "mixer-grpc" => &[],
        // The out-of-process client is adapter-level: it implements the adapter API's handler
        // traits and `mixer-remote`'s `RemoteAdapter` over the generated protocol. The runtime never
        // depends on it; the server wires it in.
        "mixer-oop" => &[
            "mixer-model",
            "mixer-adapter-api",
            "mixer-remote",
            "mixer-proto",
        ],
        // The SDK for out-of-process adapter authors serves the adapter API (any `Adapter`,
        // the same a mixer builds in) over the generated protocol; it is adapter-level like
        // `mixer-oop`, its client-side counterpart.
        "mixer-adapter-sdk" => &[
            "mixer-model",
            "mixer-adapter-api",
            "mixer-proto",
            "mixer-grpc",
        ],
        // Adapters see only the adapter API (and the model it speaks), plus shared adapter
        // libraries that obey the same rule.
        k if k.starts_with("mixer-adapter-") => &[
            "mixer-model",
            "mixer-adapter-api",
            "mixer-adapter-quota-common",
        ],
        _ => return None,
    })
}

/// Each workspace crate's normal (not dev or build) dependencies: the workspace's own when
/// `internal`, else every one.
fn dependencies(internal: bool) -> BTreeMap<String, Vec<String>> {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let packages = meta["packages"].as_array().expect("packages");
    let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in packages {
        let name = p["name"].as_str().expect("name").to_string();
        let deps = p["dependencies"]
            .as_array()
            .expect("deps")
            .iter()
            .filter(|d| d["kind"].is_null() && (!internal || d["path"].is_string()))
            .map(|d| d["name"].as_str().expect("dep name").to_string())
            .collect();
        graph.insert(name, deps);
    }
    graph
}

#[test]
fn internal_dependencies_point_one_way() {
    let graph = dependencies(true);
    assert!(graph.contains_key("mixer-model") && graph.contains_key("mixer-runtime"));
    let mut violations = Vec::new();
    for (krate, deps) in &graph {
        let Some(ok) = allowed(krate) else { continue };
        for d in deps {
            if !ok.contains(&d.as_str()) {
                violations.push(format!("{krate} depends on {d}"));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "dependency direction broken: {violations:#?}"
    );
}

/// The listeners (gRPC and HTTP), their limits and TLS live in `mixer-transport`, not half in
/// the binary: the server reaches sockets, HTTP serving and TLS only through it.
#[test]
fn the_server_serves_through_the_transport_crate() {
    let graph = dependencies(false);
    let server = graph.get("mixer-server").expect("mixer-server");
    assert!(server.iter().any(|d| d == "mixer-transport"), "{server:?}");
    let listener_crates = [
        "mixer-grpc",
        "hyper",
        "hyper-util",
        "rustls",
        "tokio-rustls",
        "x509-parser",
        "arc-swap",
    ];
    let direct: Vec<&String> = server
        .iter()
        .filter(|d| listener_crates.contains(&d.as_str()))
        .collect();
    assert!(
        direct.is_empty(),
        "the server serves listeners of its own through {direct:?}; they belong in mixer-transport"
    );
}

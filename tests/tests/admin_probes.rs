//! Probes on the admin port against a client that holds idle connections to it (issue #32,
//! section 3): 150 silent TCP connections from 127.0.0.2, each re-opened as soon as it is
//! closed, against the admin listener's cap of 100. `/healthz`, `/readyz` and gRPC health
//! there, asked from 127.0.0.1 as a kubelet would (a new connection per probe, 1 s timeout),
//! keep answering: first by the per-peer cap alone (the defaults), then, with that cap
//! lifted, by closing the oldest idle connection at the listener's cap.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mixer_tests::Mixer;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

/// Where the idle connections come from: another address than the probes'.
const ATTACKER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const IDLE_CONNECTIONS: usize = 150;
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long probes are sent while the idle connections are held.
const PROBING: Duration = Duration::from_secs(5);

/// Holds `IDLE_CONNECTIONS` silent connections from [`ATTACKER`] to `admin` until `stop`,
/// re-opening each one the server closes. Returns how many connections it opened.
fn hold_idle_connections(
    admin: SocketAddr,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut held: Vec<Option<TcpStream>> = (0..IDLE_CONNECTIONS).map(|_| None).collect();
        let mut opened = 0;
        // Bounded by time as well as by `stop`, should the test fail before it stops this.
        let end = Instant::now() + Duration::from_secs(30);
        while !stop.load(Ordering::Relaxed) && Instant::now() < end {
            for slot in &mut held {
                if slot.as_mut().is_some_and(closed) {
                    *slot = None;
                }
                if slot.is_none() {
                    *slot = connect_from(ATTACKER, admin);
                    opened += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        opened
    })
}

fn connect_from(source: Ipv4Addr, addr: SocketAddr) -> Option<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    socket.bind(&SocketAddr::from((source, 0)).into()).ok()?;
    socket
        .connect_timeout(&addr.into(), Duration::from_millis(500))
        .ok()?;
    let tcp: TcpStream = socket.into();
    tcp.set_nonblocking(true).ok()?;
    Some(tcp)
}

/// Whether the server closed `tcp` (EOF or reset); it is non-blocking.
fn closed(tcp: &mut TcpStream) -> bool {
    let mut buf = [0u8; 512];
    match tcp.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != ErrorKind::WouldBlock,
    }
}

/// An HTTP/1.1 GET on a new connection from 127.0.0.1, as the kubelet probes: its status, or
/// `None` past [`PROBE_TIMEOUT`].
fn http_probe(admin: SocketAddr, path: &str) -> Option<u16> {
    let start = Instant::now();
    let mut tcp = TcpStream::connect_timeout(&admin, PROBE_TIMEOUT).ok()?;
    let left = PROBE_TIMEOUT.checked_sub(start.elapsed())?;
    tcp.set_read_timeout(Some(left)).ok()?;
    tcp.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: mixer\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .ok()?;
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).ok()?;
    if start.elapsed() > PROBE_TIMEOUT {
        return None;
    }
    String::from_utf8_lossy(&raw)
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// gRPC health's overall status on a new connection, or `None` past [`PROBE_TIMEOUT`].
async fn grpc_probe(admin: SocketAddr) -> Option<ServingStatus> {
    let probe = async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{admin}"))
            .ok()?
            .connect()
            .await
            .ok()?;
        let answer = HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .ok()?;
        Some(answer.into_inner().status())
    };
    tokio::time::timeout(PROBE_TIMEOUT, probe)
        .await
        .ok()
        .flatten()
}

/// Probes `/healthz`, `/readyz` and gRPC health for [`PROBING`] while the idle connections
/// are held, and asserts each answered at least 95% of its probes in time.
async fn probes_keep_answering(mixer: &Mixer, what: &str) {
    let admin = mixer.admin;
    let stop = Arc::new(AtomicBool::new(false));
    let attacker = hold_idle_connections(admin, stop.clone());
    // Let the idle connections fill the listener first.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (sent, healthz, readyz, grpc) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    let start = Instant::now();
    while start.elapsed() < PROBING {
        sent.fetch_add(1, Ordering::Relaxed);
        let (h, r) = tokio::task::spawn_blocking(move || {
            (http_probe(admin, "/healthz"), http_probe(admin, "/readyz"))
        })
        .await
        .expect("join");
        if h == Some(200) {
            healthz.fetch_add(1, Ordering::Relaxed);
        }
        if r == Some(200) {
            readyz.fetch_add(1, Ordering::Relaxed);
        }
        if grpc_probe(admin).await == Some(ServingStatus::Serving) {
            grpc.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let opened = tokio::task::spawn_blocking(move || attacker.join().expect("attacker"))
        .await
        .expect("join");
    let sent = sent.into_inner();
    let answered = [
        ("/healthz", healthz.into_inner()),
        ("/readyz", readyz.into_inner()),
        ("gRPC health", grpc.into_inner()),
    ];
    eprintln!(
        "{what}: {sent} probes of each kind while {IDLE_CONNECTIONS} idle connections were held \
         ({opened} opened): answered {answered:?}"
    );
    assert!(
        opened >= IDLE_CONNECTIONS,
        "the idle connections were not opened"
    );
    for (probe, ok) in answered {
        assert!(
            ok * 100 >= sent * 95,
            "{probe}: {ok} of {sent} probes answered within {PROBE_TIMEOUT:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_are_answered_while_another_peer_holds_idle_admin_connections() {
    let mixer = Mixer::start(binary(), &[]);
    mixer.wait_ready(Duration::from_secs(10));
    probes_keep_answering(&mixer, "per-peer cap").await;
    // Most of the idle peer's connections were refused at its own cap.
    let refused = mixer
        .metric(r#"mixer_connections_refused_total{listener="admin",reason="peer_limit"}"#)
        .expect("the per-peer refusals are counted");
    assert!(refused >= 1.0, "no connection refused at the per-peer cap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_admin_cap_the_oldest_idle_connection_makes_room_for_a_probe() {
    // Without the per-peer cap, the listener's own cap is reached: the probes get in by
    // closing the oldest connection with no request in flight.
    let mixer = Mixer::start(binary(), &["--admin-max-connections-per-peer", "0"]);
    mixer.wait_ready(Duration::from_secs(10));
    probes_keep_answering(&mixer, "eviction at the cap").await;
    let evicted = mixer
        .metric(r#"mixer_connections_evicted_total{listener="admin"}"#)
        .expect("the evictions are counted");
    assert!(evicted >= 1.0, "no idle connection was closed at the cap");
}

//! The load generator against its own no-op ext_authz server, as real processes: every call
//! is answered and allowed, and the line it prints says so.

use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_mixer-bench");

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn number_after(line: &str, word: &str) -> u64 {
    let mut words = line.split_whitespace();
    words.find(|w| *w == word);
    words
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {word:?} in {line:?}"))
}

#[test]
fn the_generator_drives_the_noop_server_without_errors() {
    let addr = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port");
    let _server = Killed(
        Command::new(BIN)
            .args(["--threads", "1", "noop-server", "--addr", &addr.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .expect("start the no-op server"),
    );
    let start = Instant::now();
    while TcpStream::connect(addr).is_err() {
        assert!(start.elapsed() < Duration::from_secs(20), "never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    let clients = ["lean", "h2"];
    for (client, rate) in clients.iter().flat_map(|c| [(c, None), (c, Some("500"))]) {
        let mut args = vec![
            "--threads",
            "1",
            "run",
            "--client",
            client,
            "--target",
            "ext-authz",
            "--duration",
            "1s",
            "--warmup",
            "0s",
            "--concurrency",
            "4",
        ];
        let addr = addr.to_string();
        args.extend(["--addr", &addr]);
        if let Some(r) = rate {
            args.extend(["--rate", r]);
        }
        let out = Command::new(BIN)
            .args(&args)
            .output()
            .expect("run the generator");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().last().expect("a result line");
        let line = &format!("{client}: {line}");
        assert!(number_after(line, "allowed") > 100, "{line}");
        assert_eq!(number_after(line, "denied"), 0, "{line}");
        assert_eq!(number_after(line, "errors"), 0, "{line}");
    }
}

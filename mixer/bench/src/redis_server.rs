//! A redis-server of a run's own, on a free loopback port, with no persistence: what the
//! Redis scenarios (`redis-quota`, `shared`) start, and what they read back from it.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::Context;

use crate::process::{Killed, free_addr, wait_port};

/// A running redis-server, stopped when dropped.
pub struct RedisServer {
    /// The process (its pid for CPU readings).
    pub process: Killed,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl RedisServer {
    /// Starts `binary` on a free loopback port, writing nothing to disk (no RDB, no AOF;
    /// `dir` only as its working directory), and waits until it accepts connections.
    pub fn start(binary: &Path, dir: &Path) -> anyhow::Result<RedisServer> {
        let addr = free_addr()?;
        let mut cmd = Command::new(binary);
        cmd.args(["--port", &addr.port().to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let process = Killed(crate::pin::spawn(&mut cmd).with_context(|| {
            format!(
                "starting {} (apt-get install redis-server)",
                binary.display()
            )
        })?);
        wait_port(addr)?;
        Ok(RedisServer { process, addr })
    }

    /// Its `redis://` URL.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Commands Redis has run: every `cmdstat_*` of `INFO commandstats` (the INFO calls
    /// themselves left out; a script's own commands, `HMGET`, `HSET`, `PEXPIRE`, included),
    /// and of them the script calls (`EVALSHA`, `EVAL`).
    pub async fn commands(&self) -> anyhow::Result<(u64, u64)> {
        let client = redis::Client::open(self.url())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let text: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await?;
        Ok(command_counts(&text))
    }

    /// Empties every database (`FLUSHALL`).
    pub async fn flush(&self) -> anyhow::Result<()> {
        let client = redis::Client::open(self.url())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("FLUSHALL").query_async::<()>(&mut conn).await?;
        Ok(())
    }
}

/// All commands and script calls of an `INFO commandstats` answer (see
/// [`RedisServer::commands`]).
fn command_counts(text: &str) -> (u64, u64) {
    let calls = |l: &str| {
        l.split("calls=")
            .nth(1)
            .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let lines = || text.lines().filter(|l| l.starts_with("cmdstat_"));
    let all = lines()
        .filter(|l| !l.starts_with("cmdstat_info:"))
        .map(calls)
        .sum();
    let scripts = lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .map(calls)
        .sum();
    (all, scripts)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both scenarios start the same server and read it the same way: a real redis-server
    /// answers, counts what it ran and forgets its keys on flush.
    #[tokio::test]
    async fn starts_counts_and_flushes() {
        let dir = crate::process::TempDir::new("mixer-bench-redis-server").expect("dir");
        let redis = match RedisServer::start(Path::new("redis-server"), &dir.0) {
            Ok(r) => r,
            Err(e) => {
                assert!(std::env::var_os("CI").is_none(), "{e:#}");
                eprintln!("skipped: {e:#}");
                return;
            }
        };
        let client = redis::Client::open(redis.url()).expect("url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connected");
        redis::cmd("SET")
            .arg("k")
            .arg("v")
            .query_async::<()>(&mut conn)
            .await
            .expect("SET");
        let (all, scripts) = redis.commands().await.expect("INFO");
        assert!(all >= 1 && scripts == 0, "{all} {scripts}");
        redis.flush().await.expect("FLUSHALL");
        let n: i64 = redis::cmd("DBSIZE")
            .query_async(&mut conn)
            .await
            .expect("DBSIZE");
        assert_eq!(n, 0);
    }

    #[test]
    fn script_calls_are_told_apart_and_info_left_out() {
        let text = "# Commandstats\r\ncmdstat_info:calls=7,usec=1\r\ncmdstat_evalsha:calls=3,usec=2\r\ncmdstat_eval:calls=1,usec=2\r\ncmdstat_hset:calls=4,usec=1\r\n";
        assert_eq!(command_counts(text), (8, 4));
    }
}

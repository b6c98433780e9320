//! `--pin`: the load generator on one CPU, the servers it starts on the others.
//!
//! On a machine that the generator shares with the server, splitting the threads (`--threads 1`,
//! `--server-threads 1`) still leaves the kernel free to put both on one CPU for a while, and
//! then each waits for the other's time slice: milliseconds in the tail that neither caused.
//! Pinning takes that out of the measurement, the same way for the mixer and the no-op
//! baseline.

use std::io;
use std::process::{Child, Command};
use std::sync::OnceLock;

use anyhow::bail;
use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};

/// The CPUs for the servers this process starts, once [`split`] has run.
static SERVERS: OnceLock<CpuSet> = OnceLock::new();

/// Pins the calling thread to the first CPU this process may use and keeps the others for the
/// servers that [`spawn`] starts. Call it before any other thread starts: threads inherit the
/// mask of the thread that creates them. Returns a line that says which CPUs went where.
pub fn split() -> anyhow::Result<String> {
    let cpus = cpus(&sched_getaffinity(None)?);
    let Some((&generator, servers)) = cpus.split_first().filter(|(_, rest)| !rest.is_empty())
    else {
        bail!(
            "--pin needs two or more CPUs; this process may use {}",
            cpus.len()
        );
    };
    sched_setaffinity(None, &set_of(&[generator]))?;
    let _ = SERVERS.set(set_of(servers));
    Ok(format!(
        "pinned: load generator on CPU {generator}, servers on CPUs {servers:?}"
    ))
}

/// Starts `cmd` on the servers' CPUs when [`split`] has run, otherwise as it is.
pub fn spawn(cmd: &mut Command) -> io::Result<Child> {
    match SERVERS.get() {
        Some(servers) => spawn_on(cmd, servers),
        None => cmd.spawn(),
    }
}

/// Starts `cmd` with `cpus` as its mask. A child inherits the mask of the thread that forks
/// it, so this thread takes `cpus` for the moment of the spawn and then its own mask back.
fn spawn_on(cmd: &mut Command, cpus: &CpuSet) -> io::Result<Child> {
    let own = sched_getaffinity(None)?;
    sched_setaffinity(None, cpus)?;
    let child = cmd.spawn();
    sched_setaffinity(None, &own)?;
    child
}

fn cpus(set: &CpuSet) -> Vec<usize> {
    (0..CpuSet::MAX_CPU).filter(|&i| set.is_set(i)).collect()
}

fn set_of(cpus: &[usize]) -> CpuSet {
    let mut set = CpuSet::new();
    for &cpu in cpus {
        set.set(cpu);
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPUs a process may run on, from the kernel's own account.
    fn allowed_of(pid: u32) -> String {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_string()
    }

    #[test]
    fn a_child_runs_on_the_given_cpus_and_the_spawner_keeps_its_own() {
        // On a thread of its own, so a failure cannot leave the test harness pinned.
        std::thread::spawn(|| {
            let own = sched_getaffinity(None).unwrap();
            let all = cpus(&own);
            let last = *all.last().unwrap();
            let mut child = spawn_on(Command::new("sleep").arg("5"), &set_of(&[last])).unwrap();
            let seen = allowed_of(child.id());
            child.kill().unwrap();
            child.wait().unwrap();
            assert_eq!(seen, last.to_string());
            assert!(sched_getaffinity(None).unwrap() == own);
        })
        .join()
        .unwrap();
    }
}

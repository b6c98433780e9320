//! Re-reading the TLS files while serving.
//!
//! The files are read whole every [`POLL`], through their symlinks, and compared by content:
//! that sees cert-manager writing them in place, a Kubernetes Secret volume renaming its
//! `..data` symlink over a new timestamped directory, and a file deleted and written again,
//! all the same way, with no inotify watch to lose when the inode it watched is replaced.
//! Three small files read four times a second cost nothing next to serving.
//!
//! New content is loaded once it has stayed the same for one more poll, so that a writer
//! caught between the certificate and the key is not taken for a bad certificate. Content
//! that does not load keeps the running certificate, says why in the log and counts in
//! `mixer_tls_reloads_total{result="failure"}`, with `mixer_tls_reload_failing` at 1 until
//! files that load replace it.

use std::sync::Arc;
use std::time::Duration;

use prometheus::{IntCounterVec, IntGauge, Opts, Registry};

use crate::tls::{FileContents, Material, TlsFiles, TlsState, load};

/// How often the files are read.
pub const POLL: Duration = Duration::from_millis(250);

/// `mixer_tls_*`.
#[derive(Clone)]
pub struct TlsMetrics {
    reloads: IntCounterVec,
    failing: IntGauge,
    not_after: IntGauge,
}

impl TlsMetrics {
    /// Registers the metrics in `registry`.
    pub fn new(registry: &Registry) -> prometheus::Result<TlsMetrics> {
        let reloads = IntCounterVec::new(
            Opts::new(
                "mixer_tls_reloads_total",
                "Changes of the --tls-cert, --tls-key or --tls-client-ca files, by whether \
                 they were loaded (success) or kept the running certificate (failure).",
            ),
            &["result"],
        )?;
        let failing = IntGauge::new(
            "mixer_tls_reload_failing",
            "1 while the TLS files on disk could not be loaded and an older certificate is \
             served.",
        )?;
        let not_after = IntGauge::new(
            "mixer_tls_certificate_expiry_timestamp_seconds",
            "When the served certificate expires (its notAfter), in seconds since the epoch.",
        )?;
        registry.register(Box::new(reloads.clone()))?;
        registry.register(Box::new(failing.clone()))?;
        registry.register(Box::new(not_after.clone()))?;
        for result in ["success", "failure"] {
            reloads.with_label_values(&[result]);
        }
        Ok(TlsMetrics {
            reloads,
            failing,
            not_after,
        })
    }

    /// `material` is served.
    pub fn served(&self, material: &Material) {
        self.not_after.set(material.not_after);
    }
}

/// What the poller remembers between reads.
pub struct Reloader {
    files: TlsFiles,
    state: Arc<TlsState>,
    metrics: TlsMetrics,
    /// The content being served.
    active: FileContents,
    /// What the last read found, when it differs from `active`.
    seen: Option<FileContents>,
    /// Content that failed to load, not tried again until it changes.
    refused: Option<FileContents>,
}

/// What one poll did.
#[derive(Debug, PartialEq, Eq)]
pub enum Polled {
    /// The files are what is served, or a change is waiting for the next poll.
    Unchanged,
    /// New files are served.
    Reloaded,
    /// New files did not load; the running certificate stays.
    Refused(String),
}

impl Reloader {
    /// Polls `files`, whose `active` content `state` serves.
    pub fn new(
        files: TlsFiles,
        active: FileContents,
        state: Arc<TlsState>,
        metrics: TlsMetrics,
    ) -> Reloader {
        Reloader {
            files,
            state,
            metrics,
            active,
            seen: None,
            refused: None,
        }
    }

    /// Reads the files once and acts on what changed.
    pub fn poll(&mut self) -> Polled {
        let now = FileContents::read(&self.files);
        if now == self.active {
            if self.refused.take().is_some() {
                // Back to what is served (a bad write undone): nothing is failing any more.
                self.metrics.failing.set(0);
            }
            self.seen = None;
            return Polled::Unchanged;
        }
        if self.refused.as_ref() == Some(&now) {
            return Polled::Unchanged;
        }
        if self.seen.as_ref() != Some(&now) {
            // Wait one poll for the rest of a write in progress.
            self.seen = Some(now);
            return Polled::Unchanged;
        }
        self.seen = None;
        match load(&self.files, &now) {
            Ok(material) => {
                self.state.replace(&material);
                self.metrics.served(&material);
                self.metrics.reloads.with_label_values(&["success"]).inc();
                self.metrics.failing.set(0);
                self.active = now;
                self.refused = None;
                Polled::Reloaded
            }
            Err(e) => {
                self.metrics.reloads.with_label_values(&["failure"]).inc();
                self.metrics.failing.set(1);
                self.refused = Some(now);
                Polled::Refused(e.to_string())
            }
        }
    }

    /// Polls every [`POLL`] until the process ends, logging what changed.
    pub async fn run(mut self) {
        let mut ticks = tokio::time::interval(POLL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            // Reading files blocks; they are small, but a slow volume should not stall a
            // serving thread.
            let (reloader, polled) = match tokio::task::spawn_blocking(move || {
                let polled = self.poll();
                (self, polled)
            })
            .await
            {
                Ok(done) => done,
                Err(_) => return,
            };
            self = reloader;
            match polled {
                Polled::Unchanged => {}
                Polled::Reloaded => tracing::info!(
                    cert = %self.files.cert.display(),
                    "TLS files changed: new connections get the new certificate"
                ),
                Polled::Refused(why) => tracing::warn!(
                    "TLS files changed but cannot be served, the running certificate is kept: {why}"
                ),
            }
        }
    }
}

/// The TLS acceptors of the gRPC and forward-auth listeners.
pub struct Acceptors {
    /// gRPC: ALPN `h2` only.
    pub grpc: tokio_rustls::TlsAcceptor,
    /// Forward-auth: ALPN `h2`, then `http/1.1`.
    pub http: tokio_rustls::TlsAcceptor,
}

/// Loads the files `args` names (an error names the flag and file: the mixer does not start
/// with a certificate it cannot serve), registers `mixer_tls_*` and starts the poller on the
/// current runtime. `None` when TLS is off.
pub fn start(args: &crate::tls::TlsArgs, registry: &Registry) -> anyhow::Result<Option<Acceptors>> {
    use anyhow::Context;
    let Some(files) = args.files() else {
        return Ok(None);
    };
    let contents = FileContents::read(&files);
    let material = load(&files, &contents)?;
    let metrics = TlsMetrics::new(registry).context("registering metrics")?;
    metrics.served(&material);
    let state = Arc::new(TlsState::new(&material));
    let config = |alpn: &[&[u8]]| {
        state
            .server_config(alpn)
            .map(tokio_rustls::TlsAcceptor::from)
            .context("building the TLS configuration")
    };
    let acceptors = Acceptors {
        grpc: config(&[b"h2"])?,
        http: config(&[b"h2", b"http/1.1"])?,
    };
    tracing::info!(
        cert = %files.cert.display(),
        mutual = state.mutual(),
        "gRPC and forward-auth listeners serve TLS"
    );
    tokio::spawn(Reloader::new(files, contents, state, metrics).run());
    Ok(Some(acceptors))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::tls::test_pki::Ca;

    fn served_leaf(state: &TlsState) -> Vec<u8> {
        state.served().cert[0].to_vec()
    }

    fn pem_der(pem: &str) -> Vec<u8> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_slice(pem.as_bytes())
            .expect("pem")
            .to_vec()
    }

    fn reloader(cert: &Path, key: &Path) -> (Reloader, Arc<TlsState>) {
        let files = TlsFiles {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            client_ca: None,
        };
        let contents = FileContents::read(&files);
        let material = load(&files, &contents).expect("load");
        let state = Arc::new(TlsState::new(&material));
        let metrics = TlsMetrics::new(&Registry::new()).expect("metrics");
        (
            Reloader::new(files, contents, state.clone(), metrics),
            state,
        )
    }

    #[test]
    fn a_file_rewritten_in_place_is_served_once_it_holds_still() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("CA");
        let (cert, key) = ca.leaf(None);
        let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert_path, &cert).expect("write");
        std::fs::write(&key_path, &key).expect("write");
        let (mut reloader, state) = reloader(&cert_path, &key_path);
        assert_eq!(reloader.poll(), Polled::Unchanged);

        let (new_cert, new_key) = ca.leaf(None);
        // The certificate first, the key a poll later, as a writer of two files does.
        std::fs::write(&cert_path, &new_cert).expect("write");
        assert_eq!(reloader.poll(), Polled::Unchanged);
        std::fs::write(&key_path, &new_key).expect("write");
        assert_eq!(reloader.poll(), Polled::Unchanged);
        assert_eq!(served_leaf(&state), pem_der(&cert));
        assert_eq!(reloader.poll(), Polled::Reloaded);
        assert_eq!(served_leaf(&state), pem_der(&new_cert));
        assert_eq!(reloader.poll(), Polled::Unchanged);
    }

    #[test]
    fn a_bad_new_certificate_keeps_the_running_one_until_a_good_one_comes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("CA");
        let (cert, key) = ca.leaf(None);
        let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert_path, &cert).expect("write");
        std::fs::write(&key_path, &key).expect("write");
        let (mut reloader, state) = reloader(&cert_path, &key_path);
        std::fs::write(&cert_path, "-----BEGIN CERTIFICATE-----\nAAAA\n").expect("write");
        assert_eq!(reloader.poll(), Polled::Unchanged);
        let Polled::Refused(why) = reloader.poll() else {
            panic!("a truncated certificate was served");
        };
        assert!(why.starts_with("--tls-cert "), "{why}");
        assert_eq!(reloader.metrics.failing.get(), 1);
        // Refused once, not again on every poll.
        assert_eq!(reloader.poll(), Polled::Unchanged);
        assert_eq!(served_leaf(&state), pem_der(&cert));
        let (new_cert, new_key) = ca.leaf(None);
        std::fs::write(&key_path, &new_key).expect("write");
        std::fs::write(&cert_path, &new_cert).expect("write");
        assert_eq!(reloader.poll(), Polled::Unchanged);
        assert_eq!(reloader.poll(), Polled::Reloaded);
        assert_eq!(reloader.metrics.failing.get(), 0);
        assert_eq!(served_leaf(&state), pem_der(&new_cert));
    }

    /// A Secret volume: `tls.crt -> ..data/tls.crt`, `..data -> ..2026_01_01_v1`; an update
    /// writes a new timestamped directory, renames a new `..data` link over the old one and
    /// removes the old directory.
    #[test]
    fn a_kubernetes_data_symlink_swap_is_followed() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let ca = Ca::new("CA");
        let (cert, key) = ca.leaf(None);
        let v1 = root.join("..2026_01_01_v1");
        std::fs::create_dir(&v1).expect("mkdir");
        std::fs::write(v1.join("tls.crt"), &cert).expect("write");
        std::fs::write(v1.join("tls.key"), &key).expect("write");
        symlink("..2026_01_01_v1", root.join("..data")).expect("symlink");
        symlink("..data/tls.crt", root.join("tls.crt")).expect("symlink");
        symlink("..data/tls.key", root.join("tls.key")).expect("symlink");
        let (mut reloader, state) = reloader(&root.join("tls.crt"), &root.join("tls.key"));

        let (new_cert, new_key) = ca.leaf(None);
        let v2 = root.join("..2026_01_02_v2");
        std::fs::create_dir(&v2).expect("mkdir");
        std::fs::write(v2.join("tls.crt"), &new_cert).expect("write");
        std::fs::write(v2.join("tls.key"), &new_key).expect("write");
        symlink("..2026_01_02_v2", root.join("..data_tmp")).expect("symlink");
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).expect("rename");
        std::fs::remove_dir_all(&v1).expect("remove old");
        assert_eq!(reloader.poll(), Polled::Unchanged);
        assert_eq!(reloader.poll(), Polled::Reloaded);
        assert_eq!(served_leaf(&state), pem_der(&new_cert));
    }
}

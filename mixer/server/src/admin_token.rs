//! `--admin-token-file`: the bearer token every admin endpoint but the probes asks for.
//!
//! The file is read at start (a file that cannot be read, or holds no token, stops the
//! start) and looked at again on each request that needs it: a changed file (its
//! modification time or size) is read again, so a rotated Secret takes effect without a
//! restart. A file that turns unreadable or empty refuses every such request until it is
//! fixed: failing closed, never open.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::Context;
use axum::http::HeaderValue;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The token, as the file last read held it.
pub struct AdminToken {
    path: PathBuf,
    loaded: Mutex<Loaded>,
}

/// What identifies a version of the file, to notice a change without reading it.
type Stamp = (Option<SystemTime>, u64);

struct Loaded {
    stamp: Option<Stamp>,
    /// The token's SHA-256, so that tokens of any length compare in the same time; or why
    /// there is none.
    digest: Result<[u8; 32], String>,
}

impl AdminToken {
    /// Reads the token from `path` (surrounding white space, a trailing newline included,
    /// is not part of it).
    pub fn load(path: &Path) -> anyhow::Result<Arc<AdminToken>> {
        let (stamp, digest) = read(path)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("--admin-token-file {}", path.display()))?;
        Ok(Arc::new(AdminToken {
            path: path.to_path_buf(),
            loaded: Mutex::new(Loaded {
                stamp: Some(stamp),
                digest: Ok(digest),
            }),
        }))
    }

    /// Whether `authorization` (the request's header) is `Bearer <token>`. The file is
    /// looked at first, off the async workers.
    pub async fn allows(self: &Arc<Self>, authorization: Option<&HeaderValue>) -> bool {
        let offered = authorization.and_then(bearer).map(|t| digest(t.as_bytes()));
        let token = self.clone();
        let Ok(expected) = tokio::task::spawn_blocking(move || token.current()).await else {
            return false;
        };
        match (offered, expected) {
            (Some(offered), Some(expected)) => bool::from(offered.ct_eq(&expected)),
            _ => false,
        }
    }

    /// The digest of the token the file holds now, if it holds one.
    fn current(&self) -> Option<[u8; 32]> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        let now = stamp(&self.path).ok();
        if now.is_none() || now != loaded.stamp {
            let was_ok = loaded.digest.is_ok();
            match read(&self.path) {
                Ok((stamp, digest)) => {
                    if !was_ok {
                        tracing::info!(path = %self.path.display(), "admin token file readable again");
                    }
                    *loaded = Loaded {
                        stamp: Some(stamp),
                        digest: Ok(digest),
                    };
                }
                Err(e) => {
                    // Said once, not on every request.
                    if loaded.digest.as_ref().err() != Some(&e) {
                        tracing::warn!(
                            path = %self.path.display(),
                            "{e}: admin requests that need the token are refused until it is fixed"
                        );
                    }
                    *loaded = Loaded {
                        stamp: now,
                        digest: Err(e),
                    };
                }
            }
        }
        loaded.digest.as_ref().ok().copied()
    }
}

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    let meta = std::fs::metadata(path)?;
    Ok((meta.modified().ok(), meta.len()))
}

fn read(path: &Path) -> Result<(Stamp, [u8; 32]), String> {
    let stamp = stamp(path).map_err(|e| format!("cannot read the admin token file: {e}"))?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the admin token file: {e}"))?;
    let token = text.trim();
    if token.is_empty() {
        return Err("the admin token file holds no token".to_string());
    }
    if token.chars().any(char::is_whitespace) {
        return Err("the admin token file holds white space inside the token".to_string());
    }
    Ok((stamp, digest(token.as_bytes())))
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case, as RFC
/// 9110 says).
fn bearer(value: &HeaderValue) -> Option<&str> {
    let value = value.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(value: &str) -> HeaderValue {
        HeaderValue::from_str(value).expect("header value")
    }

    #[tokio::test]
    async fn only_the_files_token_is_allowed_and_a_new_one_replaces_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cret\n").expect("write");
        let token = AdminToken::load(&path).expect("load");
        assert!(token.allows(Some(&header("Bearer s3cret"))).await);
        assert!(token.allows(Some(&header("bearer s3cret"))).await);
        for refused in [
            "Bearer s3cre",
            "Bearer s3cret2",
            "Basic s3cret",
            "s3cret",
            "Bearer ",
        ] {
            assert!(!token.allows(Some(&header(refused))).await, "{refused}");
        }
        assert!(!token.allows(None).await);
        // Rotated: the old token stops working at once.
        std::fs::write(&path, "n3w-token\n").expect("write");
        assert!(!token.allows(Some(&header("Bearer s3cret"))).await);
        assert!(token.allows(Some(&header("Bearer n3w-token"))).await);
        // Emptied or removed: nothing is allowed, rather than everything.
        std::fs::write(&path, "\n").expect("write");
        assert!(!token.allows(Some(&header("Bearer n3w-token"))).await);
        std::fs::remove_file(&path).expect("remove");
        assert!(!token.allows(Some(&header("Bearer n3w-token"))).await);
        std::fs::write(&path, "back").expect("write");
        assert!(token.allows(Some(&header("Bearer back"))).await);
    }

    #[test]
    fn a_file_without_a_token_stops_the_start() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("token");
        let missing = AdminToken::load(&path)
            .err()
            .expect("missing file")
            .to_string();
        assert!(missing.contains("--admin-token-file"), "{missing}");
        std::fs::write(&path, "  \n").expect("write");
        let empty = format!("{:#}", AdminToken::load(&path).err().expect("empty file"));
        assert!(empty.contains("holds no token"), "{empty}");
    }
}

//! Entries sealed with a key the replicas share, so that whoever can write to the shared
//! Redis cannot have a verdict served that no replica stored.
//!
//! Without sealing, an entry carries nothing bound to its key: an allow copied over a deny
//! key would be served, and so would an entry whose expiry was lifted. A sealed value is
//! `S`, the signing key's id (the first 4 bytes of the key's SHA-256), the expiry (Unix
//! milliseconds, little-endian u64; 0 for never), an HMAC-SHA256 over the Redis key, the
//! expiry and the value, then the value. A reader serves it only when a key it holds with
//! that id verifies the MAC, and not past its expiry.
//!
//! Rotation needs no flag day: every key of the list verifies, the first signs. Add the new
//! key second on every replica, then move it first, then remove the old one once entries
//! sealed with it have expired.
//!
//! Use counts (`u`) are counted by Redis itself and are not sealed: a writer can add uses to
//! a verdict a replica stored, never change the verdict or its expiry.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// The shortest key accepted, in bytes.
pub const MIN_KEY_LEN: usize = 16;
const TAG: u8 = b'S';
const HEADER: usize = 1 + 4 + 8 + 32;

/// The keys the replicas share: the first seals, every one opens.
#[derive(Clone)]
pub struct Keys {
    keys: Vec<([u8; 4], HmacSha256)>,
}

impl std::fmt::Debug for Keys {
    // The keys themselves never show.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("count", &self.keys.len())
            .finish_non_exhaustive()
    }
}

/// Why a sealed value was not served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unsealed {
    /// Not a sealed value (written without a key, or damaged).
    #[error("not sealed")]
    NotSealed,
    /// Sealed with a key this replica does not hold.
    #[error("sealed with an unknown key")]
    UnknownKey,
    /// The MAC does not match: the value, its key or its expiry was changed.
    #[error("MAC mismatch")]
    Forged,
    /// Past the expiry it was sealed with.
    #[error("expired")]
    Expired,
}

impl Keys {
    /// The keys in `text`: one a line, the first seals; blank lines and lines starting with
    /// `#` are skipped; each at least [`MIN_KEY_LEN`] bytes (a line as written, e.g. the
    /// output of `openssl rand -base64 32`).
    pub fn parse(text: &str) -> Result<Keys, String> {
        let mut keys = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if line.len() < MIN_KEY_LEN {
                return Err(format!(
                    "key on line {} is {} bytes; at least {MIN_KEY_LEN} are needed (openssl rand -base64 32 makes one)",
                    i + 1,
                    line.len()
                ));
            }
            let digest = Sha256::digest(line.as_bytes());
            let id = [digest[0], digest[1], digest[2], digest[3]];
            let mac = HmacSha256::new_from_slice(line.as_bytes())
                .map_err(|e| format!("key on line {}: {e}", i + 1))?;
            keys.push((id, mac));
        }
        if keys.is_empty() {
            return Err("no key: give one a line (the first seals, every one opens)".into());
        }
        Ok(Keys { keys })
    }

    /// `value`, stored under `key`, sealed with the first key, valid until `expires_ms`
    /// (Unix milliseconds; 0 for never).
    pub fn seal(&self, key: &[u8], value: &[u8], expires_ms: u64) -> Vec<u8> {
        let (id, mac) = &self.keys[0];
        let tag = tag(mac, key, expires_ms, value);
        let mut out = Vec::with_capacity(HEADER + value.len());
        out.push(TAG);
        out.extend_from_slice(id);
        out.extend_from_slice(&expires_ms.to_le_bytes());
        out.extend_from_slice(&tag);
        out.extend_from_slice(value);
        out
    }

    /// The value of `sealed`, read under `key`, when one of the keys verifies it and it has
    /// not expired at `now_ms`.
    pub fn open<'s>(
        &self,
        key: &[u8],
        sealed: &'s [u8],
        now_ms: u64,
    ) -> Result<&'s [u8], Unsealed> {
        if sealed.len() < HEADER || sealed[0] != TAG {
            return Err(Unsealed::NotSealed);
        }
        let id = &sealed[1..5];
        let expires_ms =
            u64::from_le_bytes(sealed[5..13].try_into().map_err(|_| Unsealed::NotSealed)?);
        let tag_given = &sealed[13..HEADER];
        let value = &sealed[HEADER..];
        let (_, mac) = self
            .keys
            .iter()
            .find(|(k, _)| k == id)
            .ok_or(Unsealed::UnknownKey)?;
        let mut mac = mac.clone();
        feed(&mut mac, key, expires_ms, value);
        // Constant time, so the comparison tells nothing of the tag.
        mac.verify_slice(tag_given).map_err(|_| Unsealed::Forged)?;
        if expires_ms != 0 && now_ms > expires_ms {
            return Err(Unsealed::Expired);
        }
        Ok(value)
    }
}

fn tag(mac: &HmacSha256, key: &[u8], expires_ms: u64, value: &[u8]) -> [u8; 32] {
    let mut mac = mac.clone();
    feed(&mut mac, key, expires_ms, value);
    mac.finalize().into_bytes().into()
}

fn feed(mac: &mut HmacSha256, key: &[u8], expires_ms: u64, value: &[u8]) {
    mac.update(&(key.len() as u64).to_le_bytes());
    mac.update(key);
    mac.update(&expires_ms.to_le_bytes());
    mac.update(value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const OLD: &str = "old-key-0123456789abcdef";
    const NEW: &str = "new-key-0123456789abcdef";

    #[test]
    fn a_sealed_value_opens_under_its_key_only() {
        let keys = Keys::parse(OLD).expect("key");
        let sealed = keys.seal(b"mixer:cache:{g:deny}", b"deny", 2_000);
        assert_eq!(
            keys.open(b"mixer:cache:{g:deny}", &sealed, 1_000),
            Ok(&b"deny"[..])
        );
        // The same bytes copied over another entry's key.
        assert_eq!(
            keys.open(b"mixer:cache:{g:allow}", &sealed, 1_000),
            Err(Unsealed::Forged)
        );
        assert_eq!(
            keys.open(b"mixer:cache:{g:deny}", &sealed, 2_001),
            Err(Unsealed::Expired)
        );
        let mut lifted = sealed.clone();
        lifted[5..13].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(
            keys.open(b"mixer:cache:{g:deny}", &lifted, 3_000),
            Err(Unsealed::Forged)
        );
        assert_eq!(keys.open(b"k", b"deny", 0), Err(Unsealed::NotSealed));
        let other = Keys::parse(NEW).expect("key");
        assert_eq!(
            other.open(b"mixer:cache:{g:deny}", &sealed, 1_000),
            Err(Unsealed::UnknownKey)
        );
    }

    #[test]
    fn rotation_opens_both_keys_and_seals_with_the_first() {
        let old = Keys::parse(OLD).expect("key");
        let adding = Keys::parse(&format!("{OLD}\n{NEW}\n")).expect("keys");
        let moved = Keys::parse(&format!("# rotated\n{NEW}\n\n{OLD}\n")).expect("keys");
        let new = Keys::parse(NEW).expect("key");
        let by_old = old.seal(b"k", b"v", 0);
        let by_moved = moved.seal(b"k", b"v", 0);
        for keys in [&adding, &moved] {
            assert_eq!(keys.open(b"k", &by_old, 1), Ok(&b"v"[..]));
            assert_eq!(keys.open(b"k", &by_moved, 1), Ok(&b"v"[..]));
        }
        assert_eq!(new.open(b"k", &by_moved, 1), Ok(&b"v"[..]));
        assert_eq!(adding.seal(b"k", b"v", 0), by_old);
    }

    #[test]
    fn short_or_missing_keys_are_refused() {
        assert!(Keys::parse("short").unwrap_err().contains("at least 16"));
        assert!(
            Keys::parse("# only a comment\n\n")
                .unwrap_err()
                .contains("no key")
        );
        assert!(!format!("{:?}", Keys::parse(OLD).expect("key")).contains(OLD));
    }

    proptest! {
        /// Any change to a sealed value, its key or a byte of it is refused; the value as
        /// sealed is given back.
        #[test]
        fn any_damage_is_refused(
            key in proptest::collection::vec(any::<u8>(), 0..40),
            value in proptest::collection::vec(any::<u8>(), 0..200),
            flip in any::<usize>(),
            bit in 0u8..8,
        ) {
            let keys = Keys::parse(OLD).expect("key");
            let sealed = keys.seal(&key, &value, 0);
            prop_assert_eq!(keys.open(&key, &sealed, 5), Ok(&value[..]));
            let mut damaged = sealed.clone();
            let at = flip % damaged.len();
            damaged[at] ^= 1 << bit;
            prop_assert!(keys.open(&key, &damaged, 5).is_err());
        }
    }
}

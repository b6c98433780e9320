//! The loaded keys: SHA-256 digests mapped to who holds them, and the key-file format.
//!
//! A key file is YAML (or JSON, which YAML reads too):
//!
//! ```yaml
//! keys:
//! - name: alice                 # the principal
//!   key: "…"                    # the key itself, hashed when read and then dropped, or
//!   keySha256: "9f86d08…"       # its SHA-256 digest (64 hex digits), so the file holds no key
//!   labels: {tier: gold}        # optional: become the `claims` output
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use mixer_model::{StringMap, Value};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The longest key a request may present, and a file may hold, in bytes. Keys are random
/// tokens of tens of bytes; the cap bounds what one request makes the mixer hash.
pub const MAX_KEY_BYTES: usize = 4096;

/// The largest key file read, in bytes (about 50,000 keys with labels): bounds the memory a
/// wrong path (a log file, a device) can take.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The SHA-256 digest of a key: what is stored and compared, never the key.
///
/// Equality is constant-time (`subtle`), so comparing a presented key's digest with a stored
/// one does not reveal, through timing, how many leading bytes matched. Finding the candidate
/// through a hash map (whose bucket choice and probing depend on the digest) is fine: what a
/// timing side channel could reveal there is about the digest, and a digest does not help to
/// find a key whose SHA-256 it is.
#[derive(Clone, Copy)]
pub struct KeyDigest([u8; 32]);

impl KeyDigest {
    /// The digest of `key`.
    pub fn of(key: &[u8]) -> KeyDigest {
        KeyDigest(Sha256::digest(key).into())
    }

    /// A digest written as 64 hex digits (either case).
    pub fn from_hex(text: &str) -> Option<KeyDigest> {
        let bytes = text.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let high = (pair[0] as char).to_digit(16)?;
            let low = (pair[1] as char).to_digit(16)?;
            out[i] = u8::try_from(high * 16 + low).ok()?;
        }
        Some(KeyDigest(out))
    }
}

impl PartialEq for KeyDigest {
    fn eq(&self, other: &KeyDigest) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl Eq for KeyDigest {}

impl std::hash::Hash for KeyDigest {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl std::fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Even a digest stays out of logs: with a weak (guessable) key it would confirm a guess.
        f.write_str("KeyDigest(..)")
    }
}

/// Who holds a key, as the template's outputs: built once at load, so a lookup only clones
/// two reference counts.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    /// `principal`: the key's name.
    pub principal: Value,
    /// `claims`: the key's labels.
    pub claims: Value,
}

/// Where a key came from, for messages: file and position, never the key.
#[derive(Debug, Clone)]
struct Origin {
    file: String,
    index: usize,
    name: String,
}

/// A set of keys, by digest.
#[derive(Debug, Default)]
pub struct KeySet {
    by_digest: HashMap<KeyDigest, Holder, foldhash::fast::RandomState>,
}

impl KeySet {
    /// How many keys.
    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    /// Who holds the key whose digest is `digest`.
    pub fn holder(&self, digest: &KeyDigest) -> Option<&Holder> {
        self.by_digest.get(digest)
    }

    /// Who holds `key`.
    pub fn lookup(&self, key: &str) -> Option<&Holder> {
        self.holder(&KeyDigest::of(key.as_bytes()))
    }

    /// The keys of several files, each given as `(name for messages, text)`. A key that two
    /// entries share (in one file or across files) is an error: its labels would be ambiguous.
    pub fn parse<'a>(
        files: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<KeySet, KeyFileError> {
        let mut by_digest = HashMap::with_hasher(foldhash::fast::RandomState::default());
        let mut origins: HashMap<KeyDigest, Origin, foldhash::fast::RandomState> =
            HashMap::with_hasher(foldhash::fast::RandomState::default());
        for (file, text) in files {
            for (index, entry) in parse_file(file, text)?.into_iter().enumerate() {
                let origin = Origin {
                    file: file.to_owned(),
                    index,
                    name: entry.name.clone(),
                };
                if let Some(first) = origins.get(&entry.digest) {
                    return Err(KeyFileError::new(
                        file,
                        format!("keys[{index}]"),
                        format!(
                            "the key of {:?} is also the key of {:?} (keys[{}] in {}); \
                             each key must be given once",
                            origin.name, first.name, first.index, first.file
                        ),
                    ));
                }
                origins.insert(entry.digest, origin);
                by_digest.insert(entry.digest, entry.holder());
            }
        }
        Ok(KeySet { by_digest })
    }
}

/// A key file that cannot be used: the file, the field (`keys[2].keySha256`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyFileError {
    /// The file, as named to the parser.
    pub file: String,
    /// The field inside it; empty for the file as a whole.
    pub field: String,
    /// What is wrong. Never holds a key.
    pub message: String,
}

impl KeyFileError {
    pub(crate) fn new(
        file: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> KeyFileError {
        KeyFileError {
            file: file.into(),
            field: field.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for KeyFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}: {}: {}", self.file, self.field, self.message)
        }
    }
}

impl std::error::Error for KeyFileError {}

/// A key file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    keys: Vec<KeyEntry>,
}

/// One entry as written. `key` is kept untyped so that a wrong type is reported without
/// serde's message, which would quote the value.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct KeyEntry {
    name: String,
    #[serde(default)]
    key: Option<serde_json::Value>,
    #[serde(default)]
    key_sha256: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// One key, checked and hashed.
struct Parsed {
    name: String,
    digest: KeyDigest,
    labels: BTreeMap<String, String>,
}

impl Parsed {
    fn holder(&self) -> Holder {
        Holder {
            principal: Value::from(self.name.as_str()),
            claims: Value::StringMap(Arc::new(StringMap::from_pairs(
                self.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            ))),
        }
    }
}

fn parse_file(file: &str, text: &str) -> Result<Vec<Parsed>, KeyFileError> {
    let yaml: serde_json::Value = match serde_saphyr::from_str::<Option<serde_json::Value>>(text) {
        Ok(Some(v)) => v,
        Ok(None) => {
            return Err(KeyFileError::new(file, "", "empty: expected `keys: [...]`"));
        }
        Err(e) => return Err(KeyFileError::new(file, "", describe_yaml_error(&e))),
    };
    let mut track = serde_path_to_error::Track::new();
    let decoded = KeyFile::deserialize(serde_path_to_error::Deserializer::new(&yaml, &mut track));
    let written = match decoded {
        Ok(f) => f,
        Err(e) => {
            // Entries were decoded as values of their own types, so no message quotes a key
            // (`key` is untyped here, checked below).
            return Err(KeyFileError::new(
                file,
                track.path().to_string(),
                e.to_string(),
            ));
        }
    };
    written
        .keys
        .into_iter()
        .enumerate()
        .map(|(i, entry)| check_entry(file, i, entry))
        .collect()
}

fn check_entry(file: &str, i: usize, entry: KeyEntry) -> Result<Parsed, KeyFileError> {
    let at = |field: &str| format!("keys[{i}].{field}");
    if entry.name.trim().is_empty() {
        return Err(KeyFileError::new(file, at("name"), "must not be empty"));
    }
    let digest = match (&entry.key, &entry.key_sha256) {
        (Some(_), Some(_)) => {
            return Err(KeyFileError::new(
                file,
                format!("keys[{i}]"),
                "give either `key` or `keySha256`, not both",
            ));
        }
        (None, None) => {
            return Err(KeyFileError::new(
                file,
                format!("keys[{i}]"),
                "needs `key` (the key) or `keySha256` (its SHA-256 digest in hex)",
            ));
        }
        (Some(key), None) => {
            let Some(key) = key.as_str() else {
                return Err(KeyFileError::new(
                    file,
                    at("key"),
                    "must be a string (quote it; the value is not shown)",
                ));
            };
            if key.is_empty() {
                return Err(KeyFileError::new(file, at("key"), "must not be empty"));
            }
            if key.len() > MAX_KEY_BYTES {
                return Err(KeyFileError::new(
                    file,
                    at("key"),
                    format!("longer than {MAX_KEY_BYTES} bytes, so no request could present it"),
                ));
            }
            if key.trim() != key {
                return Err(KeyFileError::new(
                    file,
                    at("key"),
                    "has leading or trailing whitespace, which proxies strip from header values",
                ));
            }
            KeyDigest::of(key.as_bytes())
        }
        (None, Some(hex)) => KeyDigest::from_hex(hex.trim()).ok_or_else(|| {
            KeyFileError::new(
                file,
                at("keySha256"),
                "must be 64 hex digits (a SHA-256 digest)",
            )
        })?,
    };
    Ok(Parsed {
        name: entry.name,
        digest,
        labels: entry.labels,
    })
}

/// A YAML error's line and message, without the source snippet the error renders (which
/// could hold a key).
fn describe_yaml_error(e: &serde_saphyr::Error) -> String {
    let text = e.without_snippet().to_string();
    let first = text.lines().next().unwrap_or("invalid YAML").trim();
    let message = first.strip_prefix("error: ").unwrap_or(first);
    match e.location().map(|l| l.line()).filter(|l| *l > 0) {
        Some(line) => format!("line {line}: invalid YAML: {message}"),
        None => format!("invalid YAML: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha256_hex(key: &[u8]) -> String {
        Sha256::digest(key)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn parse_one(text: &str) -> Result<KeySet, KeyFileError> {
        KeySet::parse([("keys.yaml", text)])
    }

    fn err(text: &str) -> String {
        parse_one(text).expect_err("refused").to_string()
    }

    fn claims(holder: &Holder) -> Vec<(String, String)> {
        let Value::StringMap(map) = &holder.claims else {
            panic!("claims is a map")
        };
        map.iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    #[test]
    fn keys_are_found_by_value_or_digest_with_their_labels() {
        // sha256("fake-silver-key")
        let silver = sha256_hex(b"fake-silver-key");
        let text = format!(
            "keys:\n\
             - name: alice\n  key: fake-gold-key\n  labels: {{tier: gold, team: a}}\n\
             - name: bob\n  keySha256: \"{}\"\n  labels: {{tier: silver}}\n\
             - name: carol\n  key: fake-free-key\n",
            silver.to_uppercase()
        );
        let set = parse_one(&text).expect("parses");
        assert_eq!(set.len(), 3);
        let alice = set.lookup("fake-gold-key").expect("alice");
        assert_eq!(alice.principal, Value::from("alice"));
        assert_eq!(
            claims(alice),
            [("team".into(), "a".into()), ("tier".into(), "gold".into())]
        );
        let bob = set.lookup("fake-silver-key").expect("bob by digest");
        assert_eq!(bob.principal, Value::from("bob"));
        assert!(claims(set.lookup("fake-free-key").expect("carol")).is_empty());
        assert!(set.lookup("fake-gold-key ").is_none());
        assert!(set.lookup("FAKE-GOLD-KEY").is_none());
        assert!(set.lookup("").is_none());
    }

    #[test]
    fn json_is_read_too() {
        let set =
            parse_one(r#"{"keys": [{"name": "svc", "key": "fake-json-key"}]}"#).expect("parses");
        assert!(set.lookup("fake-json-key").is_some());
    }

    #[test]
    fn an_empty_list_is_an_empty_set_but_an_empty_file_is_an_error() {
        assert!(parse_one("keys: []\n").expect("parses").is_empty());
        assert_eq!(err(""), "keys.yaml: empty: expected `keys: [...]`");
        assert_eq!(
            err("# nothing\n"),
            "keys.yaml: empty: expected `keys: [...]`"
        );
    }

    #[test]
    fn bad_entries_are_named_by_file_and_field() {
        let cases = [
            (
                "keys:\n- name: a\n  key: fake-1\n- name: b\n  keySha256: abc\n",
                "keys.yaml: keys[1].keySha256: must be 64 hex digits (a SHA-256 digest)",
            ),
            (
                "keys:\n- name: a\n",
                "keys.yaml: keys[0]: needs `key` (the key) or `keySha256` (its SHA-256 digest in hex)",
            ),
            (
                "keys:\n- name: ''\n  key: fake-1\n",
                "keys.yaml: keys[0].name: must not be empty",
            ),
            (
                "keys:\n- name: a\n  key: ''\n",
                "keys.yaml: keys[0].key: must not be empty",
            ),
            (
                "keys:\n- name: a\n  key: 'fake-1 '\n",
                "keys.yaml: keys[0].key: has leading or trailing whitespace, which proxies strip from header values",
            ),
            (
                "keys:\n- name: a\n  key: fake-1\n  keySha256: '00'\n",
                "keys.yaml: keys[0]: give either `key` or `keySha256`, not both",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(err(text), want, "{text}");
        }
        let e = err("keys:\n- name: a\n  key: fake-1\n  lables: {tier: gold}\n");
        assert!(
            e.starts_with("keys.yaml: keys[0].lables: unknown field"),
            "{e}"
        );
        let e = err("keys:\n- name: a\n  key: fake-1\n  labels: {tier: [gold]}\n");
        assert!(
            e.starts_with("keys.yaml: keys[0].labels.tier: invalid type"),
            "{e}"
        );
        let e = err("key:\n- name: a\n");
        assert!(e.starts_with("keys.yaml: key: unknown field"), "{e}");
    }

    #[test]
    fn no_message_shows_a_key() {
        // A key written as a number, a YAML syntax error on a key's line, an oversized key,
        // and a duplicate: none of the messages quote it.
        let secret = "731946285";
        let e = err(&format!("keys:\n- name: a\n  key: {secret}\n"));
        assert_eq!(
            e,
            "keys.yaml: keys[0].key: must be a string (quote it; the value is not shown)"
        );
        let e = err("keys:\n- name: a\n  key: \"fake-secret-731946285\n");
        assert!(e.starts_with("keys.yaml: line "), "{e}");
        assert!(!e.contains("731946285"), "{e}");
        let long = "k".repeat(MAX_KEY_BYTES + 1);
        let e = err(&format!("keys:\n- name: a\n  key: {long}\n"));
        assert_eq!(
            e,
            "keys.yaml: keys[0].key: longer than 4096 bytes, so no request could present it"
        );
        let e = KeySet::parse([
            ("a.yaml", "keys:\n- name: alice\n  key: fake-731946285\n"),
            (
                "b.yaml",
                "keys: [{name: x, key: fake-2}, {name: bob, key: fake-731946285}]",
            ),
        ])
        .expect_err("duplicate");
        assert_eq!(
            e.to_string(),
            "b.yaml: keys[1]: the key of \"bob\" is also the key of \"alice\" (keys[0] in a.yaml); \
             each key must be given once"
        );
        assert!(!format!("{:?}", KeyDigest::of(b"x")).contains('1'));
    }

    #[test]
    fn a_key_of_the_largest_size_is_accepted() {
        let key = "k".repeat(MAX_KEY_BYTES);
        let set = parse_one(&format!("keys:\n- name: a\n  key: {key}\n")).expect("parses");
        assert!(set.lookup(&key).is_some());
    }

    #[test]
    fn digests_compare_by_value() {
        let hex = sha256_hex(b"fake");
        assert_eq!(KeyDigest::from_hex(&hex), Some(KeyDigest::of(b"fake")));
        assert_ne!(KeyDigest::of(b"fake"), KeyDigest::of(b"fakf"));
        assert!(KeyDigest::from_hex(&hex[1..]).is_none());
        assert!(KeyDigest::from_hex(&format!("{}zz", &hex[2..])).is_none());
    }
}

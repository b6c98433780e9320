//! The global dictionary: words both sides of the Mixer v1 protocol know by index.
//!
//! Where the list comes from: istio/api `mixer/v1/global_dictionary.yaml`, as Istio's mixer
//! server (`mixer/pkg/attribute/list.gen.go`, `GlobalList()`) and the proxy's mixer client
//! (`global_dictionary.cc`) compile it. Both generators copy each `- word` line's text verbatim,
//! so YAML quotes stay part of the word (`'200'` and `"-"` are words with their quotes; the bare
//! `200` is a different word). The file is append-only; this is the 222-word list of
//! istio/api release-1.3, release-1.4 and release-1.5, which added `context.proxy_version` as word
//! 221 in August 2019. Older clients (Istio 1.0-1.2, 221 words or fewer) know a prefix of it
//! and say so in `global_word_count`; the answer to them uses only the words they know. A copy
//! of the upstream file is `proto/istio/mixer/v1/global_dictionary.yaml`, and the tests compare
//! this table with it word by word.
//!
//! Two rbac words were once inserted in the middle (istio/api#608) and reverted a day later
//! (istio/api#611); they are not here.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, LazyLock, Weak};

use mixer_model::{AttrId, Vocabulary};

/// Number of words in [`GLOBAL_WORDS`]: what this server answers clients about.
pub const GLOBAL_WORD_COUNT: usize = 222;

/// The global dictionary, in order: index `i` on the wire means `GLOBAL_WORDS[i]`.
pub static GLOBAL_WORDS: [&str; GLOBAL_WORD_COUNT] = [
    "source.ip",                        // 0
    "source.port",                      // 1
    "source.name",                      // 2
    "source.uid",                       // 3
    "source.namespace",                 // 4
    "source.labels",                    // 5
    "source.user",                      // 6
    "target.ip",                        // 7
    "target.port",                      // 8
    "target.service",                   // 9
    "target.name",                      // 10
    "target.uid",                       // 11
    "target.namespace",                 // 12
    "target.labels",                    // 13
    "target.user",                      // 14
    "request.headers",                  // 15
    "request.id",                       // 16
    "request.path",                     // 17
    "request.host",                     // 18
    "request.method",                   // 19
    "request.reason",                   // 20
    "request.referer",                  // 21
    "request.scheme",                   // 22
    "request.size",                     // 23
    "request.time",                     // 24
    "request.useragent",                // 25
    "response.headers",                 // 26
    "response.size",                    // 27
    "response.time",                    // 28
    "response.duration",                // 29
    "response.code",                    // 30
    ":authority",                       // 31
    ":method",                          // 32
    ":path",                            // 33
    ":scheme",                          // 34
    ":status",                          // 35
    "access-control-allow-origin",      // 36
    "access-control-allow-methods",     // 37
    "access-control-allow-headers",     // 38
    "access-control-max-age",           // 39
    "access-control-request-method",    // 40
    "access-control-request-headers",   // 41
    "accept-charset",                   // 42
    "accept-encoding",                  // 43
    "accept-language",                  // 44
    "accept-ranges",                    // 45
    "accept",                           // 46
    "access-control-allow",             // 47
    "age",                              // 48
    "allow",                            // 49
    "authorization",                    // 50
    "cache-control",                    // 51
    "content-disposition",              // 52
    "content-encoding",                 // 53
    "content-language",                 // 54
    "content-length",                   // 55
    "content-location",                 // 56
    "content-range",                    // 57
    "content-type",                     // 58
    "cookie",                           // 59
    "date",                             // 60
    "etag",                             // 61
    "expect",                           // 62
    "expires",                          // 63
    "from",                             // 64
    "host",                             // 65
    "if-match",                         // 66
    "if-modified-since",                // 67
    "if-none-match",                    // 68
    "if-range",                         // 69
    "if-unmodified-since",              // 70
    "keep-alive",                       // 71
    "last-modified",                    // 72
    "link",                             // 73
    "location",                         // 74
    "max-forwards",                     // 75
    "proxy-authenticate",               // 76
    "proxy-authorization",              // 77
    "range",                            // 78
    "referer",                          // 79
    "refresh",                          // 80
    "retry-after",                      // 81
    "server",                           // 82
    "set-cookie",                       // 83
    "strict-transport-sec",             // 84
    "transfer-encoding",                // 85
    "user-agent",                       // 86
    "vary",                             // 87
    "via",                              // 88
    "www-authenticate",                 // 89
    "GET",                              // 90
    "POST",                             // 91
    "http",                             // 92
    "envoy",                            // 93
    "'200'",                            // 94
    "Keep-Alive",                       // 95
    "chunked",                          // 96
    "x-envoy-service-time",             // 97
    "x-forwarded-for",                  // 98
    "x-forwarded-host",                 // 99
    "x-forwarded-proto",                // 100
    "x-http-method-override",           // 101
    "x-request-id",                     // 102
    "x-requested-with",                 // 103
    "application/json",                 // 104
    "application/xml",                  // 105
    "gzip",                             // 106
    "text/html",                        // 107
    "text/html; charset=utf-8",         // 108
    "text/plain",                       // 109
    "text/plain; charset=utf-8",        // 110
    "'0'",                              // 111
    "'1'",                              // 112
    "true",                             // 113
    "false",                            // 114
    "gzip, deflate",                    // 115
    "max-age=0",                        // 116
    "x-envoy-upstream-service-time",    // 117
    "x-envoy-internal",                 // 118
    "x-envoy-expected-rq-timeout-ms",   // 119
    "x-ot-span-context",                // 120
    "x-b3-traceid",                     // 121
    "x-b3-sampled",                     // 122
    "x-b3-spanid",                      // 123
    "tcp",                              // 124
    "connection.id",                    // 125
    "connection.received.bytes",        // 126
    "connection.received.bytes_total",  // 127
    "connection.sent.bytes",            // 128
    "connection.sent.bytes_total",      // 129
    "connection.duration",              // 130
    "context.protocol",                 // 131
    "context.timestamp",                // 132
    "context.time",                     // 133
    "0",                                // 134
    "1",                                // 135
    "200",                              // 136
    "302",                              // 137
    "400",                              // 138
    "401",                              // 139
    "403",                              // 140
    "404",                              // 141
    "409",                              // 142
    "429",                              // 143
    "499",                              // 144
    "500",                              // 145
    "501",                              // 146
    "502",                              // 147
    "503",                              // 148
    "504",                              // 149
    "destination.ip",                   // 150
    "destination.port",                 // 151
    "destination.service",              // 152
    "destination.name",                 // 153
    "destination.uid",                  // 154
    "destination.namespace",            // 155
    "destination.labels",               // 156
    "destination.user",                 // 157
    "source.service",                   // 158
    "api.service",                      // 159
    "api.version",                      // 160
    "api.operation",                    // 161
    "api.protocol",                     // 162
    "request.auth.principal",           // 163
    "request.auth.audiences",           // 164
    "request.auth.presenter",           // 165
    "request.api_key",                  // 166
    "check.error_code",                 // 167
    "check.error_message",              // 168
    "request.total_size",               // 169
    "response.total_size",              // 170
    "connection.event",                 // 171
    "check.cache_hit",                  // 172
    "quota.cache_hit",                  // 173
    "source.principal",                 // 174
    "request.auth.claims",              // 175
    "request.auth.raw_claims",          // 176
    "connection.mtls",                  // 177
    "source.metadata",                  // 178
    "source.owner",                     // 179
    "source.services",                  // 180
    "source.workload.uid",              // 181
    "source.workload.name",             // 182
    "source.workload.namespace",        // 183
    "destination.metadata",             // 184
    "destination.owner",                // 185
    "destination.principal",            // 186
    "destination.workload.uid",         // 187
    "destination.workload.name",        // 188
    "destination.workload.namespace",   // 189
    "destination.service.uid",          // 190
    "destination.service.name",         // 191
    "destination.service.namespace",    // 192
    "destination.service.host",         // 193
    "destination.container.name",       // 194
    "destination.container.image",      // 195
    "context.reporter.local",           // 196
    "context.reporter.uid",             // 197
    "response.grpc_status",             // 198
    "response.grpc_message",            // 199
    "context.reporter.type",            // 200
    "context.reporter.kind",            // 201
    "connection.requested_server_name", // 202
    "request.url_path",                 // 203
    "request.query_params",             // 204
    "context.proxy_error_code",         // 205
    "UH",                               // 206
    "UF",                               // 207
    "UO",                               // 208
    "NR",                               // 209
    "LH",                               // 210
    "UT",                               // 211
    "LR",                               // 212
    "UR",                               // 213
    "UC",                               // 214
    "DI",                               // 215
    "FI",                               // 216
    "RL",                               // 217
    "\"-\"",    // 218 (the quotes are part of the word: both generators copy the YAML text)
    "inbound",  // 219
    "outbound", // 220
    "context.proxy_version", // 221
];

/// Words are looked up for every name and key a check response refers to: a fast hash, seeded,
/// since keys can come from requests.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

static GLOBAL_INDEX: LazyLock<FastMap<&'static str, i32>> = LazyLock::new(|| {
    GLOBAL_WORDS
        .iter()
        .enumerate()
        .map(|(i, w)| (*w, i as i32))
        .collect()
});

/// The global index of `word`, if the dictionary has it.
pub fn global_index(word: &str) -> Option<i32> {
    GLOBAL_INDEX.get(word).copied()
}

/// The word a wire index names: `i >= 0` is global word `i` (any of ours, whatever count the
/// client announced, as Istio's server looks words up), `i < 0` is message word `-(i + 1)`.
pub fn lookup<W: AsRef<str>>(index: i32, message_words: &[W]) -> Option<&str> {
    if index >= 0 {
        GLOBAL_WORDS.get(index as usize).copied()
    } else {
        // -(i + 1) without overflow for i32::MIN.
        let slot = (-(i64::from(index) + 1)) as usize;
        message_words.get(slot).map(AsRef::as_ref)
    }
}

thread_local! {
    /// The last vocabulary's [`global_ids`] on this thread. The `Weak` keeps the vocabulary's
    /// allocation, so no later vocabulary can take its address while the table is kept.
    static GLOBAL_IDS: RefCell<Option<(Weak<Vocabulary>, GlobalIds)>> =
        const { RefCell::new(None) };
}

/// The vocabulary's id of each global word, by global index.
type GlobalIds = Rc<[Option<AttrId>]>;

/// The id `vocabulary` gives each global word (by global index; `None` for a word that names
/// no attribute). Nearly every attribute name on the wire is a global word: looking it up here
/// is an index instead of a hash of the name. Built once per vocabulary and thread.
pub(crate) fn global_ids(vocabulary: &Arc<Vocabulary>) -> GlobalIds {
    GLOBAL_IDS.with_borrow_mut(|kept| {
        if let Some((v, ids)) = kept
            && std::ptr::eq(v.as_ptr(), Arc::as_ptr(vocabulary))
        {
            return ids.clone();
        }
        let ids: GlobalIds = GLOBAL_WORDS.iter().map(|w| vocabulary.lookup(w)).collect();
        *kept = Some((Arc::downgrade(vocabulary), ids.clone()));
        ids
    })
}

/// Builds indices for outgoing words: a global index when the word is among the first
/// `global_limit` global words (the words the other side announced it knows), otherwise a
/// slot in a message dictionary built on the way (`-1`, `-2`, ...), each word once.
#[derive(Debug, Default)]
pub struct WordEncoder<'a> {
    global_limit: usize,
    words: Vec<&'a str>,
    slots: FastMap<&'a str, i32>,
}

impl<'a> WordEncoder<'a> {
    /// An encoder that may use the first `global_limit` global words.
    pub fn new(global_limit: usize) -> WordEncoder<'a> {
        WordEncoder {
            global_limit,
            ..WordEncoder::default()
        }
    }

    /// The index for `word`.
    pub fn index(&mut self, word: &'a str) -> i32 {
        if let Some(i) = global_index(word)
            && (i as usize) < self.global_limit
        {
            return i;
        }
        if let Some(i) = self.slots.get(word) {
            return *i;
        }
        let i = -(self.words.len() as i32) - 1;
        self.words.push(word);
        self.slots.insert(word, i);
        i
    }

    /// The message dictionary built so far, in slot order.
    pub fn into_words(self) -> Vec<&'a str> {
        self.words
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_istios() {
        // Indices the proxy's own compressor tests rely on.
        for (word, index) in [
            ("source.ip", 0),
            ("source.name", 2),
            ("request.headers", 15),
            ("response.size", 27),
            (":method", 32),
            ("authorization", 50),
            ("content-type", 58),
            ("keep-alive", 71),
            ("range", 78),
            ("GET", 90),
            ("x-http-method-override", 101),
            ("application/json", 104),
            ("connection.received.bytes_total", 127),
            ("context.timestamp", 132),
        ] {
            assert_eq!(global_index(word), Some(index), "{word}");
        }
        assert_eq!(GLOBAL_WORDS[94], "'200'");
        assert_eq!(GLOBAL_WORDS[GLOBAL_WORD_COUNT - 1], "context.proxy_version");
        assert_eq!(GLOBAL_INDEX.len(), GLOBAL_WORD_COUNT, "words are unique");
    }

    /// Each `- word` line of istio/api's `mixer/v1/global_dictionary.yaml`, its text verbatim,
    /// as Istio's generators read it (`mixer/pkg/attribute/list.gen.go` on the server side).
    fn upstream_words(file: &str) -> Vec<&str> {
        file.lines()
            .filter_map(|line| line.strip_prefix("- "))
            .map(str::trim_end)
            .collect()
    }

    #[test]
    fn the_table_is_istio_1_4s_word_for_word() {
        // A copy of istio/api release-1.4 `mixer/v1/global_dictionary.yaml` (the same file
        // on release-1.3 and release-1.5).
        let upstream = upstream_words(include_str!(
            "../../../../proto/istio/mixer/v1/global_dictionary.yaml"
        ));
        assert_eq!(upstream.len(), 222);
        assert_eq!(upstream.len(), GLOBAL_WORD_COUNT);
        for (i, (ours, theirs)) in GLOBAL_WORDS.iter().zip(&upstream).enumerate() {
            assert_eq!(ours, theirs, "word {i}");
        }
        // A copy of istio/api release-1.2's file: 221 words, a prefix of 1.4's, so a 1.2
        // client's indices mean the same words here.
        let older = upstream_words(include_str!(
            "../../../../proto/testdata/global_dictionary-release-1.2.yaml"
        ));
        assert_eq!(older.len(), 221);
        assert_eq!(&upstream[..older.len()], older.as_slice());
    }

    #[test]
    fn global_ids_follow_the_vocabulary() {
        let istio = Arc::new(Vocabulary::istio());
        let ids = global_ids(&istio);
        for (i, word) in GLOBAL_WORDS.iter().enumerate() {
            assert_eq!(ids[i], istio.lookup(word), "{word}");
        }
        assert!(ids[0].is_some() && ids[220].is_none() && ids[221].is_some());
        // Another vocabulary, even one built alike, gets a table of its own.
        let small = Arc::new(Vocabulary::empty());
        assert!(global_ids(&small).iter().all(Option::is_none));
        assert_eq!(global_ids(&istio)[0], istio.lookup("source.ip"));
    }

    #[test]
    fn lookup_and_encode() {
        let words = vec!["a".to_string(), "b".to_string()];
        assert_eq!(lookup(-1, &words), Some("a"));
        assert_eq!(lookup(-2, &words), Some("b"));
        assert_eq!(lookup(-3, &words), None);
        assert_eq!(lookup(i32::MIN, &words), None);
        assert_eq!(lookup(222, &words), None);
        let mut e = WordEncoder::new(16);
        assert_eq!(e.index("request.headers"), 15);
        assert_eq!(e.index("request.id"), -1); // global 16, beyond the limit
        assert_eq!(e.index("x"), -2);
        assert_eq!(e.index("request.id"), -1);
        assert_eq!(e.into_words(), ["request.id", "x"]);
    }
}

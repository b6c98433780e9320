//! The decision log: one record per decision, sent by the rules over `decisionlog` instances
//! to their report handlers, through the same bounded queues as reports.
//!
//! ```text
//! front end ──decision──> Snapshot::log_decision ──(no decision-log rule: return)
//!     ──> each decision-log rule: match over the request, sampling ──> record (masked)
//!     ──> a logentry instance ──> the handler's report queue
//! ```
//!
//! A snapshot without a decision-log rule holds no [`DecisionLog`]: logging a decision is then
//! one test, and checks record no reads they would not have recorded anyway.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, RwLock};
use std::time::Instant;

use mixer_adapter_api::secrets::{REDACTED, Redactor, is_secret_key, redact_urls_in};
use mixer_config::{Config, DecisionLogParams, Expression};
use mixer_model::{
    Bag, Code, FieldValue, Instance, Presence, ReferencedAttributes, StringMap, Template,
    Timestamp, Value, Verdict,
};

use crate::decision::Undecided;
use crate::decision_id::DecisionId;

/// One decision-log rule's action: which instance goes to which handler.
#[derive(Debug)]
struct Route {
    /// Index into `Config::rules`.
    rule: usize,
    /// Index into `Snapshot::handlers`.
    handler: usize,
    /// The `decisionlog` instance's full name.
    instance: Arc<str>,
    params: Arc<DecisionLogParams>,
    /// `mixer_decision_log_sampled_out_total` of the rule.
    sampled_out: prometheus::IntCounter,
}

/// The decision-log rules of a snapshot, and what hides the secrets of its handlers' params.
#[derive(Debug)]
pub(crate) struct DecisionLog {
    routes: Vec<Route>,
    secrets: Vec<Arc<Redactor>>,
    /// `request.id` in the config's vocabulary, looked up once rather than per record.
    request_id: Option<mixer_model::AttrId>,
    /// [`is_secret_key`] of the attribute names and map keys records showed: it lowercases
    /// each into a new string (about 600 instructions a value read, #36), and the names
    /// read are mostly the few the rules name. Bounded by [`SECRET_KEYS_CACHED`]; past it,
    /// names are judged afresh.
    secret_keys: RwLock<HashMap<Box<str>, bool, foldhash::fast::RandomState>>,
    /// Where the config's rule and handler names that hold nothing to scrub are in memory:
    /// a record quotes them (the deciding rule, its handler, the matched rules) as shared
    /// `Arc`s of the config, and scanning them per record cost about 250 instructions each
    /// (#36). A name the config holds is alive as long as this log, so an address found
    /// here is that very name. Anything else is scrubbed as before.
    clean_names: HashSet<usize, foldhash::fast::RandomState>,
}

/// Where `name`'s text is in memory.
fn address(name: &Arc<str>) -> usize {
    Arc::as_ptr(name).cast::<u8>() as usize
}

/// Most names [`DecisionLog::is_secret_key`] remembers (a whole-map read shows every key a
/// request sent, which a client chooses).
const SECRET_KEYS_CACHED: usize = 1024;

impl DecisionLog {
    /// The decision-log rules of `config`; `None` when it has none. `secrets`: the redactors
    /// of the handlers whose params hold a secret, which no record may quote; `sampled_out`:
    /// where each rule's sampled-out decisions are counted.
    pub(crate) fn build(
        config: &Config,
        secrets: Vec<Arc<Redactor>>,
        sampled_out: &prometheus::IntCounterVec,
    ) -> Option<DecisionLog> {
        let mut routes = Vec::new();
        for (r, rule) in config.rules.iter().enumerate() {
            for action in &rule.actions {
                for &i in &action.instances {
                    let Some(ic) = config.instances.get(i) else {
                        continue;
                    };
                    if let Some(params) = &ic.decision_log {
                        routes.push(Route {
                            rule: r,
                            handler: action.handler,
                            instance: ic.name.clone(),
                            params: params.clone(),
                            sampled_out: sampled_out.with_label_values(&[rule.name.as_ref()]),
                        });
                    }
                }
            }
        }
        if routes.is_empty() {
            return None;
        }
        let mut log = DecisionLog {
            routes,
            secrets,
            request_id: config.vocabulary.lookup("request.id"),
            secret_keys: RwLock::default(),
            clean_names: HashSet::default(),
        };
        let names = config.rules.iter().map(|r| &r.name);
        let names = names.chain(config.handlers.iter().map(|h| &h.name));
        let clean: HashSet<usize, foldhash::fast::RandomState> = names
            .filter(|name| matches!(log.scrub(name), Cow::Borrowed(_)))
            .map(address)
            .collect();
        log.clean_names = clean;
        Some(log)
    }

    /// [`is_secret_key`], remembered.
    fn is_secret_key(&self, name: &str) -> bool {
        let known = self.secret_keys.read().unwrap_or_else(|e| e.into_inner());
        if let Some(&secret) = known.get(name) {
            return secret;
        }
        let full = known.len() >= SECRET_KEYS_CACHED;
        drop(known);
        let secret = is_secret_key(name);
        if !full {
            self.secret_keys
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(name.into(), secret);
        }
        secret
    }

    /// The records `decision` gives, each handed to `out` with the index of the handler it
    /// goes to: one per decision-log rule whose match is true on `bag` and whose sampling
    /// keeps the decision. `config_hash`: the hash `/readyz` reports for the snapshot.
    ///
    /// Handed over one by one rather than returned as a list: the list was an allocation per
    /// decision for what is mostly one record (#36).
    pub(crate) fn records(
        &self,
        config: &Config,
        config_hash: Option<&Arc<str>>,
        bag: &dyn Bag,
        decision: &Decision<'_>,
        mut out: impl FnMut(usize, Instance),
    ) {
        let denial = decision.is_denial();
        let sample = decision.id.sample() * 100.0;
        let mut logging = self.routes.iter().filter(|route| {
            let params = &route.params;
            if !rule_applies(config, route.rule, bag) {
                return false;
            }
            let sampled = sample < params.percent_sampled || (denial && params.always_log_denials);
            if !sampled {
                route.sampled_out.inc();
            }
            sampled
        });
        let Some(mut route) = logging.next() else {
            return;
        };
        let record = Record::of(self, config, config_hash, bag, decision);
        // Every route but the last gets a copy; the last (mostly the only) takes the record.
        for next in logging {
            out(
                route.handler,
                record.instance(self, config, &route.instance, &route.params),
            );
            route = next;
        }
        out(
            route.handler,
            record.into_instance(self, config, &route.instance, &route.params),
        );
    }

    /// `text` without credentials: a bearer token or a JWT anywhere in it, the value of a
    /// secret-named query parameter, a URL's password, and the secrets of every handler's
    /// params (as `/config_dump` hides them).
    ///
    /// Most of what a record holds (rule names, codes, header values) holds none of these:
    /// such text is given back as it is, without the passes that would copy it unchanged.
    fn scrub<'t>(&self, text: &'t str) -> Cow<'t, str> {
        if !may_hold_a_credential(text) && !self.secrets.iter().any(|r| r.may_appear_in(text)) {
            return Cow::Borrowed(text);
        }
        let mut out = redact_urls_in(&redact_query(&redact_tokens(text)));
        for secrets in &self.secrets {
            out = secrets.scrub(&out);
        }
        Cow::Owned(out)
    }
}

/// Whether a decision-log rule's match is true on the request (an error: it is not).
fn rule_applies(config: &Config, rule: usize, bag: &dyn Bag) -> bool {
    let Some(rule) = config.rules.get(rule) else {
        return false;
    };
    let Some(expr) = &rule.match_expr else {
        return true;
    };
    matches(expr, bag)
}

/// What was decided, as a front end got it.
#[derive(Clone, Copy, Debug)]
pub enum DecisionOutcome<'a> {
    /// A verdict (allow or deny); `cache` says which tier answered it.
    Verdict {
        /// The verdict.
        verdict: &'a Verdict,
        /// Which cache tier answered, if any.
        cache: CacheTier,
    },
    /// The mixer could not decide.
    Undecided(&'a Undecided),
    /// A rate limit service answer: OK or RESOURCE_EXHAUSTED, and each descriptor's.
    RateLimit {
        /// The request's verdict: over the limit when a descriptor is.
        verdict: &'a Verdict,
        /// Each descriptor's verdict, in request order.
        descriptors: &'a [DescriptorDecision],
    },
}

/// What one rate limit descriptor came to, for the decision log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescriptorDecision {
    /// Its entries as `key=value`, joined by `,`.
    pub entries: String,
    /// Its code as the response says it: `OK` or `OVER_LIMIT`.
    pub code: &'static str,
    /// The limit that applied to it (`name: N/UNIT`, or `N/UNIT` for a limit without a
    /// name); `None` when no limit did.
    pub limit: Option<String>,
    /// Requests left under that limit.
    pub remaining: u32,
}

impl DescriptorDecision {
    /// Whether this descriptor is over its limit.
    pub fn is_over(&self) -> bool {
        self.code == "OVER_LIMIT"
    }
}

impl<'a> DecisionOutcome<'a> {
    /// The outcome of a check as [`crate::check`] decided it.
    pub fn of_check(checked: &'a Result<crate::Checked, Undecided>) -> DecisionOutcome<'a> {
        match checked {
            Ok(c) => DecisionOutcome::Verdict {
                verdict: &c.verdict,
                cache: c.tier,
            },
            Err(e) => DecisionOutcome::Undecided(e),
        }
    }
}

/// Which cache tier answered a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheTier {
    /// The in-process cache.
    InProcess,
    /// The cache shared by the replicas (`--shared-cache`).
    Shared,
    /// No cache: the handlers were asked.
    None,
}

impl CacheTier {
    /// The tier's name in decision records and ext_authz metadata.
    pub fn label(self) -> &'static str {
        match self {
            CacheTier::InProcess => "in_process",
            CacheTier::Shared => "shared",
            CacheTier::None => "none",
        }
    }
}

/// One decision, as a front end hands it to [`Snapshot::log_decision`].
#[derive(Clone, Copy, Debug)]
pub struct Decision<'a> {
    /// Its id, as the proxy was answered.
    pub id: DecisionId,
    /// The front end that made it (`forward-auth`, `ext_authz`, `ratelimit`...).
    pub front_end: &'static str,
    /// When the request arrived, for the latency.
    pub started: Instant,
    /// What was decided.
    pub outcome: DecisionOutcome<'a>,
}

impl Decision<'_> {
    fn is_denial(&self) -> bool {
        match self.outcome {
            DecisionOutcome::Verdict { verdict, .. }
            | DecisionOutcome::RateLimit { verdict, .. } => !verdict.is_allowed(),
            DecisionOutcome::Undecided(_) => true,
        }
    }
}

fn matches(expr: &Expression, bag: &dyn Bag) -> bool {
    expr.eval_bool(bag, &mut ReferencedAttributes::ignoring())
        .unwrap_or(false)
}

/// One decision's record before masking: what every decision-log instance is made from.
/// It lives within [`DecisionLog::records`], while the request's bag does.
struct Record<'b> {
    time: Timestamp,
    /// In name order ([`Field`]), with room for `attributes` (added first per instance).
    fields: Vec<(Arc<str>, Value)>,
    /// The attributes the decision read, borrowed from the bag: the instances copy what
    /// they show anyway, and a copy here was two allocations a header (#36).
    reads: Vec<Read<'b>>,
}

/// One attribute value a decision read: (attribute, map key, value).
type Read<'b> = (mixer_model::AttrId, Option<&'b str>, ReadValue<'b>);

/// An attribute's name as a record shows it: the attribute's, or a map entry's (where it
/// lies in [`Record::attributes`]'s buffer of them).
enum Shown<'n> {
    Name(&'n str),
    Keyed(std::ops::Range<usize>),
}

/// The value of a [`Read`]: a map's entry, or a whole attribute.
#[derive(Clone, Copy)]
enum ReadValue<'b> {
    Entry(&'b str),
    Value(&'b Value),
}

/// The names of a record's fields, made once for every record to share (#36: the record's
/// cost; a name per field and record was an allocation each). In the names' order, so that
/// a record sorted by field is sorted by name: the stdio handler sorts a line's fields by
/// name, which takes one pass over a sorted record.
#[derive(Clone, Copy)]
enum Field {
    Attributes,
    Cache,
    Code,
    ConfigHash,
    DecisionId,
    Descriptor,
    Descriptors,
    DryRun,
    Error,
    FailPolicy,
    FrontEnd,
    Handler,
    HandlerErrors,
    Latency,
    Limit,
    LimitRemaining,
    MatchedRules,
    Message,
    RequestId,
    Rule,
    Verdict,
}

/// How many fields a record can have ([`Field`]).
const FIELD_COUNT: usize = 21;

/// [`Field`]'s names, in its order.
const FIELD_NAMES: [&str; FIELD_COUNT] = [
    "attributes",
    "cache",
    "code",
    "config_hash",
    "decision_id",
    "descriptor",
    "descriptors",
    "dry_run",
    "error",
    "fail_policy",
    "front_end",
    "handler",
    "handler_errors",
    "latency",
    "limit",
    "limit_remaining",
    "matched_rules",
    "message",
    "request_id",
    "rule",
    "verdict",
];

impl Field {
    fn name(self) -> Arc<str> {
        Field::name_at(self as usize)
    }

    /// The name of the field at `at` in [`Field`]'s order.
    fn name_at(at: usize) -> Arc<str> {
        static NAMES: LazyLock<[Arc<str>; FIELD_COUNT]> =
            LazyLock::new(|| FIELD_NAMES.map(Arc::from));
        NAMES[at].clone()
    }
}

/// The words a record is written with that no request or config chose (verdicts, cache
/// tiers, fail policies, severity), made once for every record to share.
#[derive(Clone, Copy)]
enum Word {
    Allow,
    Deny,
    Undecided,
    Open,
    Close,
    Info,
    InProcess,
    Shared,
    NoCache,
}

impl Word {
    fn value(self) -> Value {
        static WORDS: LazyLock<[Arc<str>; 9]> = LazyLock::new(|| {
            [
                "allow",
                "deny",
                "undecided",
                "open",
                "close",
                "Info",
                CacheTier::InProcess.label(),
                CacheTier::Shared.label(),
                CacheTier::None.label(),
            ]
            .map(Arc::from)
        });
        Value::String(WORDS[self as usize].clone())
    }

    fn of_cache(tier: CacheTier) -> Word {
        match tier {
            CacheTier::InProcess => Word::InProcess,
            CacheTier::Shared => Word::Shared,
            CacheTier::None => Word::NoCache,
        }
    }

    fn of_verdict(verdict: &Verdict) -> Word {
        if verdict.is_allowed() {
            Word::Allow
        } else {
            Word::Deny
        }
    }
}

/// A front end's name, shared by every record of the known front ends.
fn front_end_value(name: &'static str) -> Value {
    const KNOWN: [&str; 4] = ["ext_authz", "forward-auth", "mixer-v1", "ratelimit"];
    static NAMES: LazyLock<[Arc<str>; 4]> = LazyLock::new(|| KNOWN.map(Arc::from));
    match KNOWN.iter().position(|known| *known == name) {
        Some(at) => Value::String(NAMES[at].clone()),
        None => Value::string(name),
    }
}

/// A status code's name (`PERMISSION_DENIED`), made once for every record to share.
fn code_name(code: Code) -> Value {
    static NAMES: LazyLock<Vec<Arc<str>>> = LazyLock::new(|| {
        (0..=16)
            .map(|n| Arc::from(Code::from_i32(n).name()))
            .collect()
    });
    match NAMES.get(code as usize) {
        Some(name) => Value::String(name.clone()),
        None => Value::string(code.name()),
    }
}

/// A record's fields as they are put: text that may quote a request or a handler is scrubbed
/// here, once per record, whatever number of rules log it.
struct Fields<'l> {
    /// Each field's value at its place in name order: the record comes out sorted without a
    /// sort, and in one list rather than a list and its named copy (#36).
    slots: [Option<Value>; FIELD_COUNT],
    /// How many slots hold a value.
    count: usize,
    log: &'l DecisionLog,
}

impl Fields<'_> {
    /// Sets `field` (a record sets each field at most once).
    fn put(&mut self, field: Field, value: Value) {
        if self.slots[field as usize].replace(value).is_none() {
            self.count += 1;
        }
    }

    /// The fields in name order, named, with room for `attributes` in front.
    fn named(self) -> Vec<(Arc<str>, Value)> {
        let mut out = Vec::with_capacity(self.count + 1);
        for (at, slot) in self.slots.into_iter().enumerate() {
            if let Some(value) = slot {
                out.push((Field::name_at(at), value));
            }
        }
        out
    }

    /// `text`, without the credentials it may quote ([`DecisionLog::scrub`]).
    fn put_text(&mut self, field: Field, text: &Arc<str>) {
        if self.log.clean_names.contains(&address(text)) {
            self.put(field, Value::String(text.clone()));
            return;
        }
        let value = match self.log.scrub(text) {
            Cow::Borrowed(_) => Value::String(text.clone()),
            Cow::Owned(clean) => Value::string(clean),
        };
        self.put(field, value);
    }
}

impl<'b> Record<'b> {
    fn of(
        log: &DecisionLog,
        config: &Config,
        config_hash: Option<&Arc<str>>,
        bag: &'b dyn Bag,
        decision: &Decision<'b>,
    ) -> Record<'b> {
        let mut fields = Fields {
            slots: Default::default(),
            count: 0,
            log,
        };
        let id = decision.id.to_hex();
        // Hex digits: always UTF-8.
        let id = std::str::from_utf8(&id).unwrap_or_default();
        fields.put(Field::DecisionId, Value::string(id));
        fields.put(Field::FrontEnd, front_end_value(decision.front_end));
        if let Some(hash) = config_hash {
            fields.put(Field::ConfigHash, Value::String(hash.clone()));
        }
        // What a Mixer v1 client, whose protocol has no place for the decision id, can quote
        // instead: the proxy's `x-request-id`.
        if let Some(Value::String(id)) = log.request_id.and_then(|a| bag.get(a)) {
            fields.put_text(Field::RequestId, id);
        }
        let latency = decision.started.elapsed();
        fields.put(
            Field::Latency,
            Value::Duration(mixer_model::Duration(
                i64::try_from(latency.as_nanos()).unwrap_or(i64::MAX),
            )),
        );
        let mut reads = Vec::new();
        match decision.outcome {
            DecisionOutcome::Verdict { verdict, cache } => {
                fields.put(Field::Verdict, Word::of_verdict(verdict).value());
                fields.put(Field::Code, code_name(verdict.status.code));
                if !verdict.status.message.is_empty() {
                    fields.put_text(Field::Message, &Arc::from(verdict.istio_message()));
                }
                fields.put(Field::Cache, Word::of_cache(cache).value());
                match verdict.matched_rules.as_slice() {
                    [] => {}
                    // Mostly one rule: its name shared, not joined into a new string.
                    [rule] => fields.put_text(Field::MatchedRules, rule),
                    rules => {
                        let names: Vec<&str> = rules.iter().map(|r| &**r).collect();
                        fields.put_text(Field::MatchedRules, &Arc::from(names.join(",")));
                    }
                }
                if !verdict.dry_run.is_empty() {
                    // What each matched dry-run rule would have decided, never enforced.
                    let runs = verdict
                        .dry_run
                        .iter()
                        .map(|d| (&*d.rule, d.would_be.label()));
                    fields.put(Field::DryRun, Value::from(StringMap::from_pairs(runs)));
                }
                let (rule, handler) = deciding(config, verdict);
                if let Some(rule) = rule {
                    fields.put_text(Field::Rule, &rule);
                }
                if let Some(handler) = handler {
                    fields.put_text(Field::Handler, &handler);
                }
                put_failed_open(&mut fields, verdict);
                reads = read_values(bag, &verdict.referenced);
            }
            DecisionOutcome::RateLimit {
                verdict,
                descriptors,
            } => {
                fields.put(Field::Verdict, Word::of_verdict(verdict).value());
                fields.put(Field::Code, code_name(verdict.status.code));
                fields.put(Field::Cache, Word::NoCache.value());
                put_descriptors(&mut fields, descriptors);
                put_failed_open(&mut fields, verdict);
            }
            DecisionOutcome::Undecided(undecided) => {
                fields.put(Field::Verdict, Word::Undecided.value());
                match undecided {
                    Undecided::Handler { handler, error } => {
                        fields.put(Field::Code, code_name(Code::Unavailable));
                        fields.put_text(Field::Handler, handler);
                        if let Some(rule) = rule_routing_to(config, handler) {
                            fields.put_text(Field::Rule, &rule);
                        }
                        let error = error.to_string();
                        let errors = [(&**handler, error.as_str())];
                        fields.put(
                            Field::HandlerErrors,
                            Value::from(StringMap::from_pairs(errors)),
                        );
                        fields.put_text(Field::Error, &Arc::from(error));
                        fields.put(Field::FailPolicy, Word::Close.value());
                    }
                    Undecided::Instance(e) => {
                        fields.put(Field::Code, code_name(Code::Internal));
                        fields.put_text(Field::Error, &Arc::from(e.to_string()));
                    }
                }
                fields.put(Field::Cache, Word::NoCache.value());
            }
        }
        Record {
            time: Timestamp::now(),
            fields: fields.named(),
            reads,
        }
    }

    /// The record as `instance` sends it, masked as its params say.
    fn instance(
        &self,
        log: &DecisionLog,
        config: &Config,
        instance: &Arc<str>,
        params: &DecisionLogParams,
    ) -> Instance {
        let attributes = self.attributes(log, config, params);
        Record::logentry(instance, attributes, self.fields.clone(), self.time)
    }

    /// [`Record::instance`], the record's fields moved rather than copied.
    fn into_instance(
        self,
        log: &DecisionLog,
        config: &Config,
        instance: &Arc<str>,
        params: &DecisionLogParams,
    ) -> Instance {
        let attributes = self.attributes(log, config, params);
        Record::logentry(instance, attributes, self.fields, self.time)
    }

    /// The attribute values read, masked as `params` say.
    fn attributes(
        &self,
        log: &DecisionLog,
        config: &Config,
        params: &DecisionLogParams,
    ) -> Option<Value> {
        if self.reads.is_empty() {
            return None;
        }
        let vocabulary = &config.vocabulary;
        // Names and values borrowed where they are shown as they are: the map copies them
        // into its one buffer anyway. A map entry's name (`request.headers[x-user]`) is
        // written into `keyed`, one buffer for the record, not a string each.
        let mut keyed = String::new();
        let mut attributes: Vec<(Shown<'_>, Cow<'_, str>)> = Vec::with_capacity(self.reads.len());
        for &(attr, key, value) in &self.reads {
            if params.drop.iter().any(|s| s.selects(attr, key)) {
                continue;
            }
            let name = vocabulary.name(attr);
            let shown = match key {
                Some(key) => {
                    if keyed.capacity() == 0 {
                        // About a header name and its attribute's each: one allocation.
                        keyed.reserve(self.reads.len() * 32);
                    }
                    let start = keyed.len();
                    keyed.push_str(name);
                    keyed.push('[');
                    keyed.push_str(key);
                    keyed.push(']');
                    Shown::Keyed(start..keyed.len())
                }
                None => Shown::Name(name),
            };
            let secret = log.is_secret_key(key.unwrap_or(name));
            // Most values read are text: taken as they are, not through `Display`.
            let text = || match value {
                ReadValue::Entry(text) => Cow::Borrowed(text),
                ReadValue::Value(value) => match value.as_str() {
                    Some(text) => Cow::Borrowed(text),
                    None => Cow::Owned(value.to_string()),
                },
            };
            let text = if secret {
                Cow::Borrowed(REDACTED)
            } else if params.hash.iter().any(|s| s.selects(attr, key)) {
                Cow::Owned(hashed(&text()))
            } else {
                let text = text();
                match log.scrub(&text) {
                    Cow::Borrowed(_) => text,
                    Cow::Owned(clean) => Cow::Owned(clean),
                }
            };
            attributes.push((shown, text));
        }
        if attributes.is_empty() {
            return None;
        }
        let pairs = attributes.iter().map(|(shown, text)| {
            let shown = match shown {
                Shown::Name(name) => *name,
                Shown::Keyed(at) => keyed.get(at.clone()).unwrap_or_default(),
            };
            (shown, &**text)
        });
        Some(Value::from(StringMap::from_pairs(pairs)))
    }

    /// A logentry instance of a record's masked attribute values and its fields (in name
    /// order).
    fn logentry(
        instance: &Arc<str>,
        attributes: Option<Value>,
        mut variables: Vec<(Arc<str>, Value)>,
        time: Timestamp,
    ) -> Instance {
        // The fields were scrubbed as the record was made (`Fields::put_text`).
        // `attributes` first: the record stays in name order ([`Field`]). The record's list
        // has room for it ([`Fields::named`]).
        if let Some(attributes) = attributes {
            variables.insert(0, (Field::Attributes.name(), attributes));
        }
        Instance {
            name: instance.clone(),
            template: Template::LogEntry,
            fields: vec![
                ("variables", FieldValue::Map(variables)),
                ("timestamp", FieldValue::Value(Value::Timestamp(time))),
                ("severity", FieldValue::Value(Word::Info.value())),
            ],
        }
    }
}

/// The handlers that failed and whose fail policy (open) let the decision be made without
/// them, with their errors; nothing when none did.
fn put_failed_open(fields: &mut Fields<'_>, verdict: &Verdict) {
    if verdict.failed_open.is_empty() {
        return;
    }
    let errors = verdict
        .failed_open
        .iter()
        .map(|f| (&*f.handler, f.error.as_str()));
    fields.put(
        Field::HandlerErrors,
        Value::from(StringMap::from_pairs(errors)),
    );
    fields.put(Field::FailPolicy, Word::Open.value());
}

/// A rate limit decision's descriptors (`descriptors`: each one's entries to its code) and
/// the one that decided, with its limit: the first over its limit, else the one with the
/// fewest requests left (as the `X-RateLimit-*` headers pick it).
fn put_descriptors(fields: &mut Fields<'_>, descriptors: &[DescriptorDecision]) {
    let mut seen: Vec<&str> = Vec::with_capacity(descriptors.len());
    let mut codes: Vec<(String, &str)> = Vec::with_capacity(descriptors.len());
    for (i, d) in descriptors.iter().enumerate() {
        // The same entries twice (two of Envoy's actions alike) stay two keys.
        let key = if seen.contains(&d.entries.as_str()) {
            format!("{} #{i}", d.entries)
        } else {
            d.entries.clone()
        };
        seen.push(&d.entries);
        codes.push((key, d.code));
    }
    fields.put(
        Field::Descriptors,
        Value::from(StringMap::from_pairs(codes)),
    );
    let deciding = descriptors
        .iter()
        .filter(|d| d.limit.is_some())
        .min_by_key(|d| (!d.is_over(), d.remaining));
    if let Some(d) = deciding {
        fields.put_text(Field::Descriptor, &Arc::from(d.entries.as_str()));
        if let Some(limit) = &d.limit {
            fields.put_text(Field::Limit, &Arc::from(limit.as_str()));
        }
        fields.put(Field::LimitRemaining, Value::Int64(i64::from(d.remaining)));
    }
}

/// The rule that decided `verdict` and its handler: for a denial, the first matched rule that
/// sends to the handler that denied; for an allowance, the last rule consulted (every matched
/// rule allowed; the last one completed the decision).
fn deciding(config: &Config, verdict: &Verdict) -> (Option<Arc<str>>, Option<Arc<str>>) {
    if let Some(denier) = &verdict.denied_by {
        let rule = verdict.matched_rules.iter().find(|name| {
            config.rule(name).is_some_and(|r| {
                r.actions.iter().any(|a| {
                    config
                        .handlers
                        .get(a.handler)
                        .is_some_and(|h| h.name == *denier)
                })
            })
        });
        return (rule.cloned(), Some(denier.clone()));
    }
    let Some(rule) = verdict.matched_rules.last() else {
        return (None, None);
    };
    let handler = config
        .rule(rule)
        .and_then(|r| r.actions.first())
        .and_then(|a| config.handlers.get(a.handler))
        .map(|h| h.name.clone());
    (Some(rule.clone()), handler)
}

/// The first rule (in config order) that sends to `handler`.
fn rule_routing_to(config: &Config, handler: &str) -> Option<Arc<str>> {
    config
        .rules
        .iter()
        .find(|r| {
            r.actions.iter().any(|a| {
                config
                    .handlers
                    .get(a.handler)
                    .is_some_and(|h| &*h.name == handler)
            })
        })
        .map(|r| r.name.clone())
}

/// The values of what a decision read and found present (a whole map read is every key),
/// borrowed from `bag`.
fn read_values<'b>(bag: &'b dyn Bag, referenced: &'b ReferencedAttributes) -> Vec<Read<'b>> {
    let mut out = Vec::new();
    for r in referenced.iter() {
        if r.presence != Presence::Exact {
            continue;
        }
        let Some(value) = bag.get(r.attr) else {
            continue;
        };
        match (&r.map_key, value) {
            (Some(key), Value::StringMap(map)) => {
                if let Some(v) = map.get(key) {
                    out.push((r.attr, Some(&**key), ReadValue::Entry(v)));
                }
            }
            (None, Value::StringMap(map)) => {
                for (k, v) in map.iter() {
                    out.push((r.attr, Some(k), ReadValue::Entry(v)));
                }
            }
            (_, v) => out.push((r.attr, None, ReadValue::Value(v))),
        }
    }
    out.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
    out
}

/// Whether `text` holds what [`redact_tokens`], [`redact_query`] or [`redact_urls_in`] could
/// change: a `bearer` word, a JWT's `eyJ`, a query's `?` or a URL's `://`. One pass over the
/// bytes; a yes only means the passes run.
fn may_hold_a_credential(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.iter().enumerate().any(|(i, &b)| {
        let rest = &bytes[i..];
        match b {
            b'?' => true,
            b':' => rest.starts_with(b"://"),
            b'e' => rest.starts_with(b"eyJ"),
            b'b' | b'B' => rest.len() >= 6 && rest[..6].eq_ignore_ascii_case(b"bearer"),
            _ => false,
        }
    })
}

/// Every word after a `Bearer` scheme, and every word that reads as a JWT (three base64url
/// parts, the first a JSON object: `eyJ`), replaced by [`REDACTED`].
fn redact_tokens(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut after_bearer = false;
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let jwt = word.starts_with("eyJ") && word.matches('.').count() == 2;
        if (after_bearer && !word.is_empty()) || jwt {
            out.push_str(REDACTED);
        } else {
            out.push_str(word);
        }
        after_bearer = word.eq_ignore_ascii_case("bearer");
    }
    out
}

/// The values of secret-named query parameters (`?api_key=...&token=...`) replaced by
/// [`REDACTED`].
fn redact_query(text: &str) -> String {
    let Some((path, query)) = text.split_once('?') else {
        return text.to_string();
    };
    let parts: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if is_secret_key(k) => format!("{k}={REDACTED}"),
            _ => pair.to_string(),
        })
        .collect();
    format!("{path}?{}", parts.join("&"))
}

/// `sha256:` and the first 16 hex digits of the SHA-256 of `text`: equal values log alike.
fn hashed(text: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(text.as_bytes());
    let mut out = String::from("sha256:");
    for b in digest.iter().take(8) {
        use std::fmt::Write as _;
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_that_could_hold_a_credential_is_told_apart() {
        for plain in [
            "",
            "allow",
            "deny-on-header.rule.istio-system",
            "PERMISSION_DENIED",
            "a:b",
        ] {
            assert!(!may_hold_a_credential(plain), "{plain}");
        }
        for suspect in [
            "Bearer abc",
            "x BEARER",
            "eyJhbGciOi.e30.sig",
            "/path?token=1",
            "see http://u:p@host",
        ] {
            assert!(may_hold_a_credential(suspect), "{suspect}");
        }
    }

    #[test]
    fn plain_text_is_kept_as_is_and_a_handler_secret_is_still_hidden() {
        let params = serde_json::json!({"password": "hunter2-secret"});
        let log = DecisionLog {
            routes: Vec::new(),
            secrets: vec![Arc::new(Redactor::new(&params, &[]))],
            request_id: None,
            secret_keys: RwLock::default(),
            clean_names: HashSet::default(),
        };
        assert!(matches!(
            log.scrub("tag-user.rule"),
            Cow::Borrowed("tag-user.rule")
        ));
        let scrubbed = log.scrub("failed with hunter2-secret");
        assert!(!scrubbed.contains("hunter2"), "{scrubbed}");
        assert_eq!(log.scrub("Bearer abc"), "Bearer ***");
    }

    #[test]
    fn remembered_secret_names_are_judged_as_fresh_ones() {
        let log = DecisionLog {
            routes: Vec::new(),
            secrets: Vec::new(),
            request_id: None,
            secret_keys: RwLock::default(),
            clean_names: HashSet::default(),
        };
        for round in 0..2 {
            for name in [
                "authorization",
                "X-Api-Key",
                "x-user",
                "request.path",
                "tokenFile",
            ] {
                assert_eq!(
                    log.is_secret_key(name),
                    is_secret_key(name),
                    "{name} {round}"
                );
            }
        }
        // Past the bound names are still judged, and no longer remembered.
        for i in 0..SECRET_KEYS_CACHED + 10 {
            assert!(!log.is_secret_key(&format!("x-header-{i}")));
        }
        assert!(log.is_secret_key("x-auth-token"));
        assert!(!log.is_secret_key("x-plain"));
        let remembered = log
            .secret_keys
            .read()
            .map(|k| k.len())
            .unwrap_or(usize::MAX);
        assert_eq!(remembered, SECRET_KEYS_CACHED);
    }

    #[test]
    fn tokens_and_secret_query_values_are_never_logged() {
        assert_eq!(redact_tokens("Bearer abc.def"), "Bearer ***");
        assert_eq!(
            redact_tokens("token eyJhbGciOi.eyJzdWIiOi.sig is bad"),
            "token *** is bad"
        );
        assert_eq!(redact_tokens("a plain message"), "a plain message");
        assert_eq!(
            redact_query("/pets?api_key=k1&page=2&access_token=t"),
            "/pets?api_key=***&page=2&access_token=***"
        );
        assert_eq!(redact_query("/pets"), "/pets");
    }

    #[test]
    fn a_hash_is_stable_and_hides_the_value() {
        assert_eq!(hashed("alice"), hashed("alice"));
        assert_ne!(hashed("alice"), hashed("bob"));
        assert!(!hashed("alice").contains("alice"));
        assert_eq!(hashed("alice").len(), "sha256:".len() + 16);
    }
}

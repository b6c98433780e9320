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
    Bag, Code, DecisionField, DecisionRecord, DecisionValue, FieldValue, Instance, Presence,
    ReferencedAttributes, StringMap, StringMapBuilder, Template, Timestamp, Value, Verdict,
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
    /// Every field but `attributes`, which each instance masks as its params say. Made in
    /// place: the record is about half a kilobyte, and each move of it was a copy (#36).
    fields: Arc<DecisionRecord>,
    /// What the decision read, looked up in the bag as each instance shows it: the instance
    /// copies what it shows anyway, and a list of the reads in between cost an allocation a
    /// record (#36).
    reads: Option<Reads<'b>>,
}

/// The attribute values a decision read: those of `referenced` found in `bag`.
struct Reads<'b> {
    bag: &'b dyn Bag,
    referenced: &'b ReferencedAttributes,
}

/// The value of a read: a map's entry, or a whole attribute.
#[derive(Clone, Copy)]
enum ReadValue<'b> {
    Entry(&'b str),
    Value(&'b Value),
}

impl<'b> Reads<'b> {
    /// Each value read and found present (a whole map read is every key), with its attribute
    /// and map key. An attribute and key read twice may come twice.
    fn each(&self, mut read: impl FnMut(mixer_model::AttrId, Option<&'b str>, ReadValue<'b>)) {
        for r in self.referenced.iter() {
            if r.presence != Presence::Exact {
                continue;
            }
            let Some(value) = self.bag.get(r.attr) else {
                continue;
            };
            match (&r.map_key, value) {
                (Some(key), Value::StringMap(map)) => {
                    if let Some(v) = map.get(key) {
                        read(r.attr, Some(&**key), ReadValue::Entry(v));
                    }
                }
                (None, Value::StringMap(map)) => {
                    for (k, v) in map.iter() {
                        read(r.attr, Some(k), ReadValue::Entry(v));
                    }
                }
                (_, v) => read(r.attr, None, ReadValue::Value(v)),
            }
        }
    }
}

/// The words a record is written with that no request or config chose (verdicts, fail
/// policies): static text, which a record holds without counting references.
#[derive(Clone, Copy)]
enum Word {
    Allow,
    Deny,
    Undecided,
    Open,
    Close,
}

impl Word {
    /// The word as a record's field.
    fn field(self) -> DecisionValue {
        DecisionValue::Word(match self {
            Word::Allow => "allow",
            Word::Deny => "deny",
            Word::Undecided => "undecided",
            Word::Open => "open",
            Word::Close => "close",
        })
    }

    fn of_verdict(verdict: &Verdict) -> Word {
        if verdict.is_allowed() {
            Word::Allow
        } else {
            Word::Deny
        }
    }
}

/// The cache tier that answered, as a record's field.
fn cache_field(tier: CacheTier) -> DecisionValue {
    DecisionValue::Word(tier.label())
}

/// A front end's name, as a record's field.
fn front_end_value(name: &'static str) -> DecisionValue {
    DecisionValue::Word(name)
}

/// A status code's name (`PERMISSION_DENIED`), as a record's field.
fn code_name(code: Code) -> DecisionValue {
    DecisionValue::Word(code.name())
}

/// Every record's severity, one string they share.
fn info() -> Value {
    static INFO: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from("Info"));
    Value::String(INFO.clone())
}

/// A record's fields as they are put: text that may quote a request or a handler is scrubbed
/// here, once per record, whatever number of rules log it.
struct Fields<'l, 'r> {
    record: &'r mut DecisionRecord,
    log: &'l DecisionLog,
}

impl Fields<'_, '_> {
    fn put(&mut self, field: DecisionField, value: DecisionValue) {
        self.record.set(field, value);
    }

    /// `text`, without the credentials it may quote ([`DecisionLog::scrub`]).
    fn put_text(&mut self, field: DecisionField, text: &Arc<str>) {
        if self.log.clean_names.contains(&address(text)) {
            self.put(field, DecisionValue::Text(text.clone()));
            return;
        }
        let value = match self.log.scrub(text) {
            Cow::Borrowed(_) => text.clone(),
            Cow::Owned(clean) => Arc::from(clean),
        };
        self.put(field, DecisionValue::Text(value));
    }

    /// `config_hash` and `decision_id`, which every record has.
    fn put_ids(&mut self, config_hash: Option<&Arc<str>>, id: DecisionId) {
        if let Some(hash) = config_hash {
            self.put(DecisionField::ConfigHash, DecisionValue::Text(hash.clone()));
        }
        let (high, low) = id.parts();
        self.put(DecisionField::DecisionId, DecisionValue::Id { high, low });
    }

    /// `latency`, which every record has.
    fn put_latency(&mut self, decision: &Decision<'_>) {
        let latency = decision.started.elapsed();
        self.put(
            DecisionField::Latency,
            DecisionValue::Duration(mixer_model::Duration(
                i64::try_from(latency.as_nanos()).unwrap_or(i64::MAX),
            )),
        );
    }

    /// `request_id`, when the request had one: what a Mixer v1 client, whose protocol has
    /// no place for the decision id, can quote instead (the proxy's `x-request-id`).
    fn put_request_id(&mut self, bag: &dyn Bag) {
        if let Some(Value::String(id)) = self.log.request_id.and_then(|a| bag.get(a)) {
            self.put_text(DecisionField::RequestId, id);
        }
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
        let mut record = Arc::new(DecisionRecord::default());
        let mut fields = Fields {
            // A new record: unique, so made in place.
            record: Arc::make_mut(&mut record),
            log,
        };
        let mut reads = None;
        match decision.outcome {
            DecisionOutcome::Verdict { verdict, cache } => {
                fields.put(DecisionField::Cache, cache_field(cache));
                fields.put(DecisionField::Code, code_name(verdict.status.code));
                fields.put_ids(config_hash, decision.id);
                if !verdict.dry_run.is_empty() {
                    // What each matched dry-run rule would have decided, never enforced.
                    let runs = verdict
                        .dry_run
                        .iter()
                        .map(|d| (&*d.rule, d.would_be.label()));
                    fields.put(DecisionField::DryRun, string_map(runs));
                }
                if !verdict.failed_open.is_empty() {
                    fields.put(DecisionField::FailPolicy, Word::Open.field());
                }
                fields.put(DecisionField::FrontEnd, front_end_value(decision.front_end));
                let (rule, handler) = deciding(config, verdict);
                if let Some(handler) = handler {
                    fields.put_text(DecisionField::Handler, &handler);
                }
                put_failed_open(&mut fields, verdict);
                fields.put_latency(decision);
                match verdict.matched_rules.as_slice() {
                    [] => {}
                    // Mostly one rule: its name shared, not joined into a new string.
                    [rule] => fields.put_text(DecisionField::MatchedRules, rule),
                    rules => {
                        let names: Vec<&str> = rules.iter().map(|r| &**r).collect();
                        fields.put_text(DecisionField::MatchedRules, &Arc::from(names.join(",")));
                    }
                }
                if !verdict.status.message.is_empty() {
                    fields.put_text(DecisionField::Message, &Arc::from(verdict.istio_message()));
                }
                fields.put_request_id(bag);
                if let Some(rule) = rule {
                    fields.put_text(DecisionField::Rule, &rule);
                }
                fields.put(DecisionField::Verdict, Word::of_verdict(verdict).field());
                reads = Some(Reads {
                    bag,
                    referenced: &verdict.referenced,
                });
            }
            DecisionOutcome::RateLimit {
                verdict,
                descriptors,
            } => {
                fields.put(DecisionField::Cache, cache_field(CacheTier::None));
                fields.put(DecisionField::Code, code_name(verdict.status.code));
                fields.put_ids(config_hash, decision.id);
                let deciding = deciding_descriptor(descriptors);
                if let Some(d) = deciding {
                    fields.put_text(DecisionField::Descriptor, &Arc::from(d.entries.as_str()));
                }
                fields.put(DecisionField::Descriptors, descriptor_codes(descriptors));
                if !verdict.failed_open.is_empty() {
                    fields.put(DecisionField::FailPolicy, Word::Open.field());
                }
                fields.put(DecisionField::FrontEnd, front_end_value(decision.front_end));
                put_failed_open(&mut fields, verdict);
                fields.put_latency(decision);
                if let Some(d) = deciding {
                    if let Some(limit) = &d.limit {
                        fields.put_text(DecisionField::Limit, &Arc::from(limit.as_str()));
                    }
                    fields.put(
                        DecisionField::LimitRemaining,
                        DecisionValue::Int(i64::from(d.remaining)),
                    );
                }
                fields.put_request_id(bag);
                fields.put(DecisionField::Verdict, Word::of_verdict(verdict).field());
            }
            DecisionOutcome::Undecided(undecided) => {
                fields.put(DecisionField::Cache, cache_field(CacheTier::None));
                match undecided {
                    Undecided::Handler { handler, error } => {
                        fields.put(DecisionField::Code, code_name(Code::Unavailable));
                        fields.put_ids(config_hash, decision.id);
                        let error = error.to_string();
                        fields.put_text(DecisionField::Error, &Arc::from(error.as_str()));
                        fields.put(DecisionField::FailPolicy, Word::Close.field());
                        fields.put(DecisionField::FrontEnd, front_end_value(decision.front_end));
                        fields.put_text(DecisionField::Handler, handler);
                        let errors = [(&**handler, error.as_str())];
                        fields.put(DecisionField::HandlerErrors, string_map(errors));
                        fields.put_latency(decision);
                        fields.put_request_id(bag);
                        if let Some(rule) = rule_routing_to(config, handler) {
                            fields.put_text(DecisionField::Rule, &rule);
                        }
                    }
                    Undecided::Instance(e) => {
                        fields.put(DecisionField::Code, code_name(Code::Internal));
                        fields.put_ids(config_hash, decision.id);
                        fields.put_text(DecisionField::Error, &Arc::from(e.to_string()));
                        fields.put(DecisionField::FrontEnd, front_end_value(decision.front_end));
                        fields.put_latency(decision);
                        fields.put_request_id(bag);
                    }
                }
                fields.put(DecisionField::Verdict, Word::Undecided.field());
            }
        }
        Record {
            time: Timestamp::now(),
            fields: record,
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
    ) -> Option<StringMap> {
        let reads = self.reads.as_ref()?;
        let vocabulary = &config.vocabulary;
        // Names and values written straight into the map's one buffer, a map entry's name
        // (`request.headers[x-user]`) in its pieces.
        let mut map: Option<StringMapBuilder> = None;
        reads.each(|attr, key, value| {
            if params.drop.iter().any(|s| s.selects(attr, key)) {
                return;
            }
            let name = vocabulary.name(attr);
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
            // About a header's name, its attribute's and its value: one allocation each for
            // the text and the entries of most records.
            let map = map.get_or_insert_with(|| StringMapBuilder::with_capacity(4, 128));
            match key {
                Some(key) => map.push(&[name, "[", key, "]"], &text),
                None => map.push(&[name], &text),
            }
        });
        map.map(StringMapBuilder::build)
    }

    /// A logentry instance of a record's fields and its masked attribute values.
    fn logentry(
        instance: &Arc<str>,
        attributes: Option<StringMap>,
        mut fields: Arc<DecisionRecord>,
        time: Timestamp,
    ) -> Instance {
        // The fields were scrubbed as the record was made (`Fields::put_text`).
        if let Some(attributes) = attributes {
            // The only reference but for a record logged by several rules, whose copies
            // differ here.
            Arc::make_mut(&mut fields).set(
                DecisionField::Attributes,
                DecisionValue::Map(Arc::new(attributes)),
            );
        }
        Instance {
            name: instance.clone(),
            template: Template::LogEntry,
            fields: vec![
                ("variables", FieldValue::Decision(fields)),
                ("timestamp", FieldValue::Value(Value::Timestamp(time))),
                ("severity", FieldValue::Value(info())),
            ],
        }
    }
}

/// The handlers that failed and whose fail policy (open) let the decision be made without
/// them, with their errors; nothing when none did (`fail_policy` is put beside it).
fn put_failed_open(fields: &mut Fields<'_, '_>, verdict: &Verdict) {
    if verdict.failed_open.is_empty() {
        return;
    }
    let errors = verdict
        .failed_open
        .iter()
        .map(|f| (&*f.handler, f.error.as_str()));
    fields.put(DecisionField::HandlerErrors, string_map(errors));
}

/// A rate limit decision's descriptors: each one's entries to its code.
fn descriptor_codes(descriptors: &[DescriptorDecision]) -> DecisionValue {
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
    string_map(codes)
}

/// A map field of `pairs`.
fn string_map<K: AsRef<str>, V: AsRef<str>>(
    pairs: impl IntoIterator<Item = (K, V)>,
) -> DecisionValue {
    DecisionValue::Map(Arc::new(StringMap::from_pairs(pairs)))
}

/// The descriptor that decided a rate limit decision, with its limit: the first over its
/// limit, else the one with the fewest requests left (as the `X-RateLimit-*` headers pick it).
fn deciding_descriptor(descriptors: &[DescriptorDecision]) -> Option<&DescriptorDecision> {
    descriptors
        .iter()
        .filter(|d| d.limit.is_some())
        .min_by_key(|d| (!d.is_over(), d.remaining))
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

/// Whether `text` holds what [`redact_tokens`], [`redact_query`] or [`redact_urls_in`] could
/// change: a `bearer` word, a JWT's `eyJ`, a query's `?` or a URL's `://`. The bytes are
/// looked at closer only when a word-wise pass saw a byte that starts one; a yes only means
/// the passes run.
fn may_hold_a_credential(text: &str) -> bool {
    let bytes = text.as_bytes();
    has_credential_mark(bytes) && starts_a_credential(bytes)
}

/// The closer look of [`may_hold_a_credential`]: whether a byte of `bytes` starts one of what
/// it looks for.
fn starts_a_credential(bytes: &[u8]) -> bool {
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

/// Whether `bytes` holds a byte that starts what [`may_hold_a_credential`] looks for: `?`,
/// `:`, `J` (of `eyJ`) or `b` (of `bearer`), in either case. Most text a record quotes (rule
/// names, request ids, header values) holds none, and this tests eight bytes a step where
/// the closer look costs about ten instructions a byte (#36: 250 a record).
fn has_credential_mark(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // Exact for "has this word a zero byte" ("Bit Twiddling Hacks"), not for which one.
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    // With bit 5 set, `B` reads as `b` and `J` as `j`; a few other bytes read as a mark
    // too (`j`, and controls as `?` and `:`), which only sends them to the closer look.
    let marks = |word: u64| {
        let folded = word | (ONES * 0x20);
        has_zero(folded ^ (ONES * u64::from(b'?')))
            | has_zero(folded ^ (ONES * u64::from(b':')))
            | has_zero(folded ^ (ONES * u64::from(b'j')))
            | has_zero(folded ^ (ONES * u64::from(b'b')))
    };
    let mut words = bytes.chunks_exact(8);
    let mut found = 0;
    for word in &mut words {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(word);
        found |= marks(u64::from_le_bytes(eight));
    }
    found != 0
        || words
            .remainder()
            .iter()
            .any(|&b| matches!(b | 0x20, b'?' | b':' | b'j' | b'b'))
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

    proptest::proptest! {
        /// Whatever the closer look would find starts with a byte the word-wise test sees.
        #[test]
        fn the_credential_prefilter_misses_nothing(
            text in "(?s)[a-zA-Z0-9 :/?=&.bBeEyYjJ\u{e9}-]{0,40}",
        ) {
            let marked = text
                .bytes()
                .any(|b| matches!(b, b'?' | b':' | b'J' | b'j' | b'b' | b'B'));
            proptest::prop_assert_eq!(has_credential_mark(text.as_bytes()), marked);
            // What the closer look finds, the word-wise test never rules out.
            let closer = starts_a_credential(text.as_bytes());
            proptest::prop_assert!(!closer || marked);
            proptest::prop_assert_eq!(may_hold_a_credential(&text), closer);
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

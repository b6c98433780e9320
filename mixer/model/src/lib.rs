//! The mixer's data model: typed attribute values, attribute bags and the vocabulary that
//! declares them, referenced-attribute sets, template instances and verdicts.
//!
//! Nothing here knows about protocols, policies or adapters; every other crate builds on it.
//! Adapters read instances through their templates' typed views ([`Instance::view`]).
//!
//! ```
//! use std::sync::Arc;
//! use mixer_model::{AttributeBag, Bag, Value, Vocabulary};
//!
//! let vocabulary = Arc::new(Vocabulary::istio());
//! let mut bag = AttributeBag::new(vocabulary.clone());
//! bag.set("request.path", Value::from("/health")).unwrap();
//! bag.set("source.ip", Value::from("10.0.0.7")).unwrap(); // parsed as IP_ADDRESS
//! let path = vocabulary.lookup("request.path").unwrap();
//! assert_eq!(bag.get(path), Some(&Value::from("/health")));
//! ```

mod bag;
mod charge;
mod decision_record;
mod instance;
mod referenced;
mod standard;
mod status;
mod string_map;
mod template;
mod value;
mod verdict;
mod vocabulary;

pub use bag::{AttributeBag, Bag, BagError};
pub use charge::{InvalidCharge, MAX_CHARGE, charge_amount};
pub use decision_record::{DecisionField, DecisionRecord, DecisionValue, hex_digits, id_digits};
pub use instance::{
    Action, ApiKeyInstance, AuthorizationInstance, CheckNothingInstance, Entries, FieldValue,
    Instance, InstanceView, JwtInstance, KubernetesInstance, ListEntryInstance, LogEntryInstance,
    MetricInstance, QuotaInstance, ReportNothingInstance, Subject, TraceSpanInstance,
};
pub use referenced::{Presence, Reference, ReferencedAttributes};
pub use standard::STANDARD_ATTRIBUTES;
pub use status::{Code, Status};
pub use string_map::{StringMap, StringMapBuilder};
pub use template::{FieldKind, FieldSpec, Template, Variety, camel_to_snake};
pub use value::{Duration, Timestamp, Value, ValueType};
pub use verdict::{
    CheckResult, DryRunOutcome, HandlerFailure, HeaderOp, HeaderOperation, QuotaLimit, QuotaResult,
    Verdict, WouldBe,
};
pub use vocabulary::{AttrId, AttributeInfo, Vocabulary, VocabularyError, edit_distance};

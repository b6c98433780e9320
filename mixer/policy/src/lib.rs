//! Policy expressions: the language of rule `match` clauses, instance fields and header values.
//!
//! An expression is compiled **once**, when config is loaded, against the attribute
//! [`Vocabulary`]: names are resolved to ids, types are checked, string literals are converted
//! where a typed value is expected, regular expressions are compiled and constants folded.
//! Evaluation then walks a small typed tree over a [`Bag`], borrowing values instead of
//! copying them, and records into [`ReferencedAttributes`] exactly which attributes (and which
//! map keys) it read, present or absent: the verdict cache and Mixer's protocol depend on it.
//!
//! Three [`Syntax`]es share one evaluator:
//!
//! * [`Syntax::Cel`]: Common Expression Language, parsed by the `cel` crate's parser.
//! * [`Syntax::Cexl`]: Istio Mixer's original language (Go expression syntax, `|` defaults,
//!   `"re".matches(s)`, errors propagate left to right through `&&` and `||`).
//! * [`Syntax::Compat`] (the default): CEL plus Mixer's extensions, so Istio 1.4 configs keep
//!   working and CEL works too.
//!
//! # Tutorial
//!
//! ```
//! use std::sync::Arc;
//! use mixer_model::{AttributeBag, Presence, ReferencedAttributes, Value, ValueType, Vocabulary};
//! use mixer_policy::{Expression, Syntax};
//!
//! let vocabulary = Arc::new(Vocabulary::istio());
//!
//! // Compile once, at config load. A rule's match must be a BOOL.
//! let rule = Expression::compile_expecting(
//!     r#"request.method == "GET" && request.headers["x-user"] | "anonymous" != "admin""#,
//!     Syntax::default(),
//!     &vocabulary,
//!     ValueType::Bool,
//! )?;
//!
//! // Mistakes are found at load time, with a hint.
//! let err = Expression::compile(r#"request.hedaers["x"] == "y""#, Syntax::Compat, &vocabulary)
//!     .unwrap_err();
//! assert_eq!(err.message, r#"unknown attribute "request.hedaers" (did you mean request.headers?)"#);
//!
//! // Evaluate per request.
//! let mut bag = AttributeBag::new(vocabulary.clone());
//! bag.set("request.method", Value::from("GET"))?;
//! let mut refs = ReferencedAttributes::new();
//! assert!(rule.eval_bool(&bag, &mut refs)?);
//!
//! // The evaluation read request.method and found request.headers absent.
//! let method = vocabulary.lookup("request.method").unwrap();
//! let headers = vocabulary.lookup("request.headers").unwrap();
//! assert_eq!(refs.find(method, None), Some(Presence::Exact));
//! assert_eq!(refs.find(headers, None), Some(Presence::Absent));
//!
//! // A string literal is converted where a typed value is expected.
//! let timeout = Expression::compile_expecting(r#""19ms""#, Syntax::Compat, &vocabulary, ValueType::Duration)?;
//! assert_eq!(timeout.result_type(), Some(ValueType::Duration));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod analysis;
mod cel_lower;
mod conjunction;
mod error;
mod eval;
mod functions;
mod ir;
mod parse;
mod syntax;
#[cfg(test)]
mod tests;
mod typecheck;
mod val;

use std::fmt;
use std::sync::Arc;

use mixer_model::{AttrId, Bag, ReferencedAttributes, Value, ValueType, Vocabulary};

pub use error::{CompileError, EvalError, EvalErrorKind};

/// Which grammar and semantics an expression is written in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Syntax {
    /// The Common Expression Language, parsed by the `cel` crate.
    Cel,
    /// Istio Mixer's expression language (CEXL).
    Cexl,
    /// CEL plus Mixer's extensions (`|` defaults, Mixer's functions and argument orders).
    /// The default, so that Istio 1.4 configs keep working and CEL works as well.
    #[default]
    Compat,
}

impl Syntax {
    /// From Istio's annotation `policy.istio.io/lang` value: `CEL`, `CEXL`, `COMPAT`
    /// (case-insensitive); `None` if unknown.
    pub fn from_annotation(s: &str) -> Option<Syntax> {
        match s.trim().to_ascii_uppercase().as_str() {
            "CEL" => Some(Syntax::Cel),
            "CEXL" => Some(Syntax::Cexl),
            "COMPAT" => Some(Syntax::Compat),
            _ => None,
        }
    }
}

/// An `attr == literal` (or `attr["key"] == literal`) test found at the top level of an
/// expression's conjunction: the expression is false unless it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct EqualityConstraint {
    /// The attribute tested.
    pub attr: AttrId,
    /// The literal map key, when a key of a `STRING_MAP` attribute is tested.
    pub map_key: Option<Arc<str>>,
    /// The literal compared with (already of the attribute's type).
    pub value: Value,
}

struct Inner {
    source: String,
    syntax: Syntax,
    node: ir::Node,
    ty: ValueType,
    /// The tests, when the expression is only `attr == literal` tests joined by `&&`.
    conjunction: Option<conjunction::Conjunction>,
}

/// A compiled expression. Cheap to clone (shared), `Send + Sync`.
#[derive(Clone)]
pub struct Expression {
    inner: Arc<Inner>,
}

impl fmt::Debug for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Expression")
            .field("source", &self.inner.source)
            .field("syntax", &self.inner.syntax)
            .field("type", &self.inner.ty)
            .finish()
    }
}

impl Expression {
    /// Parses and type-checks `source` against `vocabulary`.
    pub fn compile(
        source: &str,
        syntax: Syntax,
        vocabulary: &Vocabulary,
    ) -> Result<Expression, CompileError> {
        let typed = Self::lower(source, syntax, vocabulary)?;
        Ok(Self::build(source, syntax, typed.node, typed.ty))
    }

    /// Compiles and requires the result type (BOOL for a rule match, a template field's type).
    /// A string literal where a DURATION, TIMESTAMP, IP_ADDRESS... is expected is converted at
    /// compile time (`"19ms"`); otherwise a different type is an error.
    pub fn compile_expecting(
        source: &str,
        syntax: Syntax,
        vocabulary: &Vocabulary,
        expected: ValueType,
    ) -> Result<Expression, CompileError> {
        let typed = Self::lower(source, syntax, vocabulary)?;
        let node = typecheck::coerce(typed, expected, 0)
            .map_err(|e| CompileError::new(e.message, None))?;
        Ok(Self::build(source, syntax, node, expected))
    }

    fn lower(
        source: &str,
        syntax: Syntax,
        vocabulary: &Vocabulary,
    ) -> Result<typecheck::Typed, CompileError> {
        let syn = match syntax {
            Syntax::Cel => cel_lower::parse(source)?,
            Syntax::Cexl | Syntax::Compat => parse::parse(source)?,
        };
        typecheck::Checker {
            vocab: vocabulary,
            syntax,
        }
        .check(&syn)
    }

    fn build(source: &str, syntax: Syntax, node: ir::Node, ty: ValueType) -> Expression {
        Expression {
            inner: Arc::new(Inner {
                source: source.to_string(),
                syntax,
                conjunction: conjunction::Conjunction::of(&node),
                node,
                ty,
            }),
        }
    }

    /// The source text.
    pub fn source(&self) -> &str {
        &self.inner.source
    }

    /// The syntax the expression was compiled with.
    pub fn syntax(&self) -> Syntax {
        self.inner.syntax
    }

    /// Static result type. Every expression this implementation accepts is statically typed,
    /// so this is always `Some`; `None` is reserved for dynamic results.
    pub fn result_type(&self) -> Option<ValueType> {
        Some(self.inner.ty)
    }

    /// Evaluates against `bag`, recording every attribute and map key read into `refs`.
    pub fn eval(&self, bag: &dyn Bag, refs: &mut ReferencedAttributes) -> Result<Value, EvalError> {
        eval::eval(&self.inner.node, bag, refs).map(val::Val::into_value)
    }

    /// Evaluates a BOOL expression without building a [`Value`].
    pub fn eval_bool(
        &self,
        bag: &dyn Bag,
        refs: &mut ReferencedAttributes,
    ) -> Result<bool, EvalError> {
        if let Some(decided) = self
            .inner
            .conjunction
            .as_ref()
            .and_then(|c| c.decide(bag, refs))
        {
            return Ok(decided);
        }
        eval::eval_bool(&self.inner.node, bag, refs)
    }

    /// Names of attributes (or `attr[key]`) whose absence makes this expression fail to
    /// evaluate: reads with no `|` default and no `has()`/`in` presence guard. Best effort.
    pub fn absent_failure_risks(&self) -> Vec<String> {
        let mut out = Vec::new();
        analysis::risks(&self.inner.node, &[], &mut out);
        let mut seen = std::collections::HashSet::new();
        out.retain(|s| seen.insert(s.clone()));
        out
    }

    /// Top-level conjunctive equality tests of an attribute (or a literal key of a map
    /// attribute) against a literal, for indexing rules by literal.
    pub fn equality_constraints(&self) -> Vec<EqualityConstraint> {
        let mut out = Vec::new();
        analysis::constraints(&self.inner.node, &mut out);
        out.into_iter()
            .map(|(attr, map_key, value)| EqualityConstraint {
                attr,
                map_key,
                value,
            })
            .collect()
    }

    /// Every attribute the expression can read, sorted.
    pub fn attributes(&self) -> Vec<AttrId> {
        let mut out = Vec::new();
        analysis::attributes(&self.inner.node, &mut out);
        out.sort();
        out.dedup();
        out
    }
}

//! The evaluator: walks the IR over a bag, borrowing values where it can and recording every
//! attribute (and map key) it reads.

use std::cmp::Ordering;
use std::sync::Arc;

use mixer_model::{AttrId, Bag, Duration, Presence, ReferencedAttributes, Timestamp, Value};

use crate::error::{EvalError, EvalErrorKind};
use crate::functions;
use crate::ir::{ArithOp, AttrRef, CmpOp, Node};
use crate::val::Val;

struct EmptyBag;

impl Bag for EmptyBag {
    fn get(&self, _: AttrId) -> Option<&Value> {
        None
    }
}

/// Evaluates a node that reads no attribute (constant folding).
pub(crate) fn eval_const(node: &Node) -> Result<Value, EvalError> {
    let mut refs = ReferencedAttributes::new();
    eval(node, &EmptyBag, &mut refs).map(Val::into_value)
}

fn attr<'a>(a: &AttrRef, bag: &'a dyn Bag, refs: &mut ReferencedAttributes) -> Option<&'a Value> {
    let v = bag.get(a.id);
    refs.record(
        a.id,
        if v.is_some() {
            Presence::Exact
        } else {
            Presence::Absent
        },
    );
    v
}

/// Looks a key up in a map attribute, recording the key read (or the map's absence).
fn attr_key<'a>(
    a: &AttrRef,
    key: &str,
    key_arc: impl FnOnce() -> Arc<str>,
    bag: &'a dyn Bag,
    refs: &mut ReferencedAttributes,
) -> Result<Option<&'a str>, EvalError> {
    let Some(v) = bag.get(a.id) else {
        refs.record(a.id, Presence::Absent);
        return Err(EvalError::absent(&a.name));
    };
    let map = v.as_map().ok_or_else(|| {
        EvalError::type_error(format!("attribute {:?} is not a STRING_MAP", a.name))
    })?;
    let found = map.get(key);
    if !refs.is_recording() {
        return Ok(found);
    }
    refs.record_key(
        a.id,
        key_arc(),
        if found.is_some() {
            Presence::Exact
        } else {
            Presence::Absent
        },
    );
    Ok(found)
}

pub(crate) fn eval_bool(
    node: &Node,
    bag: &dyn Bag,
    refs: &mut ReferencedAttributes,
) -> Result<bool, EvalError> {
    eval(node, bag, refs)?.as_bool()
}

pub(crate) fn eval<'a>(
    node: &'a Node,
    bag: &'a dyn Bag,
    refs: &mut ReferencedAttributes,
) -> Result<Val<'a>, EvalError> {
    Ok(match node {
        Node::Lit(v) => Val::Ref(v),
        Node::Attr(a) => Val::Ref(attr(a, bag, refs).ok_or_else(|| EvalError::absent(&a.name))?),
        Node::AttrKey(a, k) => match attr_key(a, k, || Arc::clone(k), bag, refs)? {
            Some(s) => Val::MapStr(s),
            None => return Err(EvalError::missing_key(&a.name, Arc::clone(k))),
        },
        Node::AttrDynKey(a, k) => {
            let key = eval(k, bag, refs)?;
            let text = key
                .as_str()
                .ok_or_else(|| EvalError::type_error("a map key must be a string"))?;
            match attr_key(
                a,
                text,
                || key.key_arc().unwrap_or_else(|_| Arc::from(text)),
                bag,
                refs,
            )? {
                Some(s) => Val::MapStr(s),
                None => return Err(EvalError::missing_key(&a.name, key.key_arc()?)),
            }
        }
        Node::Index(m, k) => {
            let map = eval(m, bag, refs)?;
            let key = eval(k, bag, refs)?;
            let text = key
                .as_str()
                .ok_or_else(|| EvalError::type_error("a map key must be a string"))?;
            let missing = || {
                EvalError::missing_key(
                    &Arc::from("<map>"),
                    key.key_arc().unwrap_or_else(|_| Arc::from(text)),
                )
            };
            match map {
                Val::Ref(Value::StringMap(m)) => Val::MapStr(m.get(text).ok_or_else(missing)?),
                Val::Own(Value::StringMap(m)) => {
                    Val::Own(Value::string(m.get(text).ok_or_else(missing)?))
                }
                _ => {
                    return Err(EvalError::type_error(
                        "indexing a value that is not a STRING_MAP",
                    ));
                }
            }
        }
        Node::EmptyIfAbsent(read) => match eval(read, bag, refs) {
            Err(e) if matches!(e.kind(), EvalErrorKind::MissingKey { .. }) => Val::MapStr(""),
            other => other?,
        },
        Node::HasAttr(a) => Val::Own(Value::Bool(attr(a, bag, refs).is_some())),
        Node::HasKey(a, k) => {
            let key = eval(k, bag, refs)?;
            let text = key
                .as_str()
                .ok_or_else(|| EvalError::type_error("a map key must be a string"))?;
            let present = match attr_key(
                a,
                text,
                || key.key_arc().unwrap_or_else(|_| Arc::from(text)),
                bag,
                refs,
            ) {
                Ok(found) => found.is_some(),
                Err(e) if e.is_absence() => false,
                Err(e) => return Err(e),
            };
            Val::Own(Value::Bool(present))
        }
        Node::InMap(k, m) => {
            let key = eval(k, bag, refs)?;
            let map = eval(m, bag, refs)?;
            let text = key
                .as_str()
                .ok_or_else(|| EvalError::type_error("a map key must be a string"))?;
            let map = map
                .as_value()
                .and_then(Value::as_map)
                .ok_or_else(|| EvalError::type_error("\"in\" needs a STRING_MAP"))?;
            Val::Own(Value::Bool(map.get(text).is_some()))
        }
        Node::InList(e, items) => {
            let x = eval(e, bag, refs)?;
            let mut found = false;
            for item in items {
                if equal(&x, &eval(item, bag, refs)?) {
                    found = true;
                    break;
                }
            }
            Val::Own(Value::Bool(found))
        }
        Node::Not(a) => Val::Own(Value::Bool(!eval_bool(a, bag, refs)?)),
        Node::Neg(a) => Val::Own(match eval(a, bag, refs)?.as_value() {
            Some(Value::Int64(i)) => Value::Int64(i.checked_neg().ok_or_else(overflow)?),
            Some(Value::Double(d)) => Value::Double(-d),
            Some(Value::Duration(d)) => {
                Value::Duration(Duration(d.0.checked_neg().ok_or_else(overflow)?))
            }
            _ => return Err(EvalError::type_error("cannot negate this value")),
        }),
        Node::And(l, r, strict) => Val::Own(Value::Bool(logic(l, r, *strict, false, bag, refs)?)),
        Node::Or(l, r, strict) => Val::Own(Value::Bool(logic(l, r, *strict, true, bag, refs)?)),
        Node::Default(items) => {
            let (last, init) = items
                .split_last()
                .ok_or_else(|| EvalError::type_error("empty default chain"))?;
            for item in init {
                if let Ok(v) = eval(item, bag, refs) {
                    return Ok(v);
                }
            }
            return eval(last, bag, refs);
        }
        Node::Cond(c, a, b) => {
            return if eval_bool(c, bag, refs)? {
                eval(a, bag, refs)
            } else {
                eval(b, bag, refs)
            };
        }
        Node::Cmp(op, l, r) => {
            let a = eval(l, bag, refs)?;
            let b = eval(r, bag, refs)?;
            Val::Own(Value::Bool(match op {
                CmpOp::Eq => equal(&a, &b),
                CmpOp::Ne => !equal(&a, &b),
                _ => {
                    let ord = order(&a, &b)?;
                    match op {
                        CmpOp::Lt => ord == Some(Ordering::Less),
                        CmpOp::Le => matches!(ord, Some(Ordering::Less | Ordering::Equal)),
                        CmpOp::Gt => ord == Some(Ordering::Greater),
                        _ => matches!(ord, Some(Ordering::Greater | Ordering::Equal)),
                    }
                }
            }))
        }
        Node::Arith(op, l, r) => {
            let a = eval(l, bag, refs)?;
            let b = eval(r, bag, refs)?;
            Val::Own(arith(*op, &a, &b)?)
        }
        Node::Call(f, args) => match args.as_slice() {
            [] => functions::call(*f, &[])?,
            [a] => functions::call(*f, &[eval(a, bag, refs)?])?,
            [a, b] => {
                let a = eval(a, bag, refs)?;
                functions::call(*f, &[a, eval(b, bag, refs)?])?
            }
            _ => return Err(EvalError::type_error("too many arguments")),
        },
        Node::GlobLit(g, s) => {
            let v = eval(s, bag, refs)?;
            Val::Own(Value::Bool(g.matches(v.as_str().ok_or_else(|| {
                EvalError::type_error("match() needs a string")
            })?)))
        }
        Node::Regex(re, s) => {
            let v = eval(s, bag, refs)?;
            Val::Own(Value::Bool(re.is_match(v.as_str().ok_or_else(|| {
                EvalError::type_error("matches() needs a string")
            })?)))
        }
    })
}

fn overflow() -> EvalError {
    EvalError::new(EvalErrorKind::Overflow)
}

/// `&&` (`is_or` false) and `||`. Strict: errors propagate left to right (CEXL). Otherwise
/// CEL's commutative semantics: an error on one side is absorbed when the other side decides.
fn logic(
    l: &Node,
    r: &Node,
    strict: bool,
    is_or: bool,
    bag: &dyn Bag,
    refs: &mut ReferencedAttributes,
) -> Result<bool, EvalError> {
    let decisive = is_or;
    match eval_bool(l, bag, refs) {
        Ok(v) if v == decisive => Ok(decisive),
        Ok(_) => eval_bool(r, bag, refs),
        Err(e) if strict => Err(e),
        Err(e) => match eval_bool(r, bag, refs) {
            Ok(v) if v == decisive => Ok(decisive),
            _ => Err(e),
        },
    }
}

fn equal(a: &Val<'_>, b: &Val<'_>) -> bool {
    match (a.as_value(), b.as_value()) {
        (Some(x), Some(y)) => x == y,
        _ => a.as_str().is_some() && a.as_str() == b.as_str(),
    }
}

fn order(a: &Val<'_>, b: &Val<'_>) -> Result<Option<Ordering>, EvalError> {
    if let (Some(x), Some(y)) = (a.as_str(), b.as_str()) {
        return Ok(Some(x.cmp(y)));
    }
    Ok(match (a.as_value(), b.as_value()) {
        (Some(Value::Int64(x)), Some(Value::Int64(y))) => Some(x.cmp(y)),
        (Some(Value::Double(x)), Some(Value::Double(y))) => x.partial_cmp(y),
        (Some(Value::Int64(x)), Some(Value::Double(y))) => (*x as f64).partial_cmp(y),
        (Some(Value::Double(x)), Some(Value::Int64(y))) => x.partial_cmp(&(*y as f64)),
        (Some(Value::Timestamp(x)), Some(Value::Timestamp(y))) => Some(x.cmp(y)),
        (Some(Value::Duration(x)), Some(Value::Duration(y))) => Some(x.cmp(y)),
        _ => return Err(EvalError::type_error("values cannot be ordered")),
    })
}

fn arith(op: ArithOp, a: &Val<'_>, b: &Val<'_>) -> Result<Value, EvalError> {
    use ArithOp::*;
    if let (Some(x), Some(y), Add) = (a.as_str(), b.as_str(), op) {
        let mut s = String::with_capacity(x.len() + y.len());
        s.push_str(x);
        s.push_str(y);
        return Ok(Value::string(s));
    }
    let int = |r: Option<i64>| r.map(Value::Int64).ok_or_else(overflow);
    Ok(match (a.as_value(), b.as_value()) {
        (Some(Value::Int64(x)), Some(Value::Int64(y))) => match op {
            Add => int(x.checked_add(*y))?,
            Sub => int(x.checked_sub(*y))?,
            Mul => int(x.checked_mul(*y))?,
            Div | Rem if *y == 0 => return Err(EvalError::new(EvalErrorKind::DivideByZero)),
            Div => int(x.checked_div(*y))?,
            Rem => int(x.checked_rem(*y))?,
        },
        (Some(Value::Double(x)), Some(Value::Double(y))) => Value::Double(match op {
            Add => x + y,
            Sub => x - y,
            Mul => x * y,
            Div => x / y,
            Rem => x % y,
        }),
        (Some(Value::Duration(x)), Some(Value::Duration(y))) => Value::Duration(Duration(
            match op {
                Add => x.0.checked_add(y.0),
                _ => x.0.checked_sub(y.0),
            }
            .ok_or_else(overflow)?,
        )),
        (Some(Value::Timestamp(t)), Some(Value::Duration(d))) => Value::Timestamp(Timestamp(
            match op {
                Add => t.0.checked_add(d.0),
                _ => t.0.checked_sub(d.0),
            }
            .ok_or_else(overflow)?,
        )),
        (Some(Value::Duration(d)), Some(Value::Timestamp(t))) => {
            Value::Timestamp(Timestamp(t.0.checked_add(d.0).ok_or_else(overflow)?))
        }
        (Some(Value::Timestamp(x)), Some(Value::Timestamp(y))) => {
            Value::Duration(Duration(x.0.checked_sub(y.0).ok_or_else(overflow)?))
        }
        _ => return Err(EvalError::type_error("operands cannot be combined")),
    })
}

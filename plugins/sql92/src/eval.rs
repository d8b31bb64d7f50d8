//! Evaluates a compiled expression against one message, with RocketMQ's three-valued logic and
//! its Java type conversions. Nothing here allocates: values borrow from the expression or the
//! message, and property strings are parsed as numbers only when compared with a number.

use core::cmp::Ordering;
use core::fmt;

use rockraft_plugin_sdk::Message;

use crate::parse::{Expr, OrderOp, Property, TextOp};

/// A value during evaluation: what a Java `Object` could hold in RocketMQ's evaluator.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Value<'a> {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    Double(f64),
    Str(&'a str),
}

/// An evaluation that RocketMQ aborts with an exception: the message is not delivered, whatever
/// the rest of the expression says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct EvalError(&'static str);

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

const NOT_AN_INT: EvalError = EvalError("a property value compared with an integer is not a 32-bit integer");
const NOT_A_LONG: EvalError = EvalError("a property value compared with an integer is not a 64-bit integer");
const NOT_A_DOUBLE: EvalError = EvalError("a value compared as a number is not a number");
const BOOLEAN_WITH_STRING: EvalError = EvalError("a boolean on the left cannot be compared with a string");
const NOT_A_BOOLEAN: EvalError = EvalError("a non-boolean value where a boolean is needed");

/// TRUE, FALSE, or `None` for NULL.
pub(crate) type Truth = Option<bool>;

impl Property {
    fn lookup<'a>(&self, message: &Message<'a>) -> Option<&'a str> {
        match message.property(&self.name) {
            None if self.is_tags => message.tag(),
            found => found,
        }
    }
}

/// Evaluates an expression that yields a boolean (the parser guarantees that of the root and of
/// every AND/OR/NOT operand).
pub(crate) fn test<'a>(expr: &'a Expr, message: &Message<'a>) -> Result<Truth, EvalError> {
    Ok(match expr {
        Expr::And(items) => {
            let mut unknown = false;
            for item in items {
                match test(item, message)? {
                    Some(false) => return Ok(Some(false)),
                    None => unknown = true,
                    Some(true) => {}
                }
            }
            if unknown { None } else { Some(true) }
        }
        Expr::Or(items) => {
            let mut unknown = false;
            for item in items {
                match test(item, message)? {
                    Some(true) => return Ok(Some(true)),
                    None => unknown = true,
                    Some(false) => {}
                }
            }
            if unknown { None } else { Some(false) }
        }
        Expr::Not(operand) => test(operand, message)?.map(|b| !b),
        Expr::Truthy(property) => property.lookup(message).map(|_| false),
        Expr::Equal(left, right) => equal(value(left, message)?, value(right, message)?)?,
        Expr::NotEqual(left, right) => equal(value(left, message)?, value(right, message)?)?.map(|b| !b),
        Expr::IsNull { operand, negated } => Some((value(operand, message)? == Value::Null) != *negated),
        Expr::Order { op, left, right } => order(*op, value(left, message)?, right, message)?,
        Expr::Between { value: operand, low, high, negated } => {
            // RocketMQ rewrites BETWEEN as `v >= low AND v <= high` and NOT BETWEEN as
            // `v < low OR v > high`; `v` is looked up once here, which is the same since
            // evaluating it has no effects.
            let v = value(operand, message)?;
            if *negated {
                let below = order(OrderOp::Lt, v, low, message)?;
                if below == Some(true) {
                    return Ok(Some(true));
                }
                let above = order(OrderOp::Gt, v, high, message)?;
                match (below, above) {
                    (_, Some(true)) => Some(true),
                    (Some(false), Some(false)) => Some(false),
                    _ => None,
                }
            } else {
                let from_low = order(OrderOp::Ge, v, low, message)?;
                if from_low == Some(false) {
                    return Ok(Some(false));
                }
                let to_high = order(OrderOp::Le, v, high, message)?;
                match (from_low, to_high) {
                    (_, Some(false)) => Some(false),
                    (Some(true), Some(true)) => Some(true),
                    _ => None,
                }
            }
        }
        Expr::In { property, values, negated } => property
            .lookup(message)
            .map(|v| values.binary_search_by(|candidate| (**candidate).cmp(v)).is_ok() != *negated),
        Expr::Text { op, operand, needle, negated } => {
            if needle.is_empty() {
                return Ok(Some(false));
            }
            match value(operand, message)? {
                Value::Str(s) => {
                    let found = match op {
                        TextOp::Contains => s.contains(&**needle),
                        TextOp::StartsWith => s.starts_with(&**needle),
                        TextOp::EndsWith => s.ends_with(&**needle),
                    };
                    Some(found != *negated)
                }
                // A missing property or a non-string value: FALSE, for the NOT forms too.
                _ => Some(false),
            }
        }
        Expr::Const(_) | Expr::Property(_) | Expr::Negate(_) => match value(expr, message)? {
            Value::Bool(b) => Some(b),
            Value::Null => None,
            _ => return Err(NOT_A_BOOLEAN),
        },
    })
}

/// Literals and properties, the usual operands, are inlined into their callers.
#[inline(always)]
pub(crate) fn value<'a>(expr: &'a Expr, message: &Message<'a>) -> Result<Value<'a>, EvalError> {
    match expr {
        Expr::Const(c) => Ok(c.value()),
        Expr::Property(property) => Ok(property.lookup(message).map_or(Value::Null, Value::Str)),
        _ => computed_value(expr, message),
    }
}

fn computed_value<'a>(expr: &'a Expr, message: &Message<'a>) -> Result<Value<'a>, EvalError> {
    Ok(match expr {
        Expr::Const(c) => c.value(),
        Expr::Property(property) => property.lookup(message).map_or(Value::Null, Value::Str),
        Expr::Negate(operand) => match value(operand, message)? {
            Value::Int(i) => Value::Int(i.wrapping_neg()),
            Value::Long(l) => Value::Long(l.wrapping_neg()),
            Value::Double(d) => Value::Double(-d),
            _ => Value::Null,
        },
        _ => test(expr, message)?.map_or(Value::Null, Value::Bool),
    })
}

/// `=`: NULL when only the left side is NULL, FALSE when only the right side is, TRUE when both
/// are (RocketMQ's asymmetric rule); otherwise the Java comparison.
fn equal(left: Value<'_>, right: Value<'_>) -> Result<Truth, EvalError> {
    Ok(match (left, right) {
        (Value::Null, Value::Null) => Some(true),
        (Value::Null, _) => None,
        (_, Value::Null) => Some(false),
        _ => Some(compare(left, right)?.is_eq()),
    })
}

/// `>`, `>=`, `<`, `<=`: NULL if either side is NULL (the right side is not evaluated when the
/// left is NULL); two strings are both parsed as doubles.
fn order<'a>(op: OrderOp, left: Value<'a>, right: &'a Expr, message: &Message<'a>) -> Result<Truth, EvalError> {
    if left == Value::Null {
        return Ok(None);
    }
    let right = value(right, message)?;
    let ordering = match (left, right) {
        (_, Value::Null) => return Ok(None),
        (Value::Str(l), Value::Str(r)) => java_double_cmp(parse_double(l)?, parse_double(r)?),
        _ => compare(left, right)?,
    };
    Ok(Some(match op {
        OrderOp::Gt => ordering.is_gt(),
        OrderOp::Ge => ordering.is_ge(),
        OrderOp::Lt => ordering.is_lt(),
        OrderOp::Le => ordering.is_le(),
    }))
}

/// RocketMQ's comparison of two non-NULL values of any types: a number widens to the other
/// side's number type; a string is parsed as the other side's type (an error if it does not
/// parse); pairs it cannot convert compare as "less" (Java's `-1`), except a boolean on the left
/// with a string on the right, which fails (a `ClassCastException` in RocketMQ).
pub(crate) fn compare(left: Value<'_>, right: Value<'_>) -> Result<Ordering, EvalError> {
    use Value::*;
    Ok(match (left, right) {
        (Str(l), Str(r)) => l.cmp(r),
        (Bool(l), Bool(r)) => l.cmp(&r),
        (Int(l), Int(r)) => l.cmp(&r),
        (Long(l), Long(r)) => l.cmp(&r),
        (Double(l), Double(r)) => java_double_cmp(l, r),
        (Int(l), Long(r)) => i64::from(l).cmp(&r),
        (Long(l), Int(r)) => l.cmp(&i64::from(r)),
        (Int(l), Double(r)) => java_double_cmp(f64::from(l), r),
        (Double(l), Int(r)) => java_double_cmp(l, f64::from(r)),
        (Long(l), Double(r)) => java_double_cmp(l as f64, r),
        (Double(l), Long(r)) => java_double_cmp(l, r as f64),
        (Int(l), Str(r)) => l.cmp(&r.parse::<i32>().map_err(|_| NOT_AN_INT)?),
        (Long(l), Str(r)) => l.cmp(&r.parse::<i64>().map_err(|_| NOT_A_LONG)?),
        (Double(l), Str(r)) => java_double_cmp(l, parse_double(r)?),
        (Str(l), Int(r)) => l.parse::<i32>().map_err(|_| NOT_AN_INT)?.cmp(&r),
        (Str(l), Long(r)) => l.parse::<i64>().map_err(|_| NOT_A_LONG)?.cmp(&r),
        (Str(l), Double(r)) => java_double_cmp(parse_double(l)?, r),
        (Str(l), Bool(r)) => l.eq_ignore_ascii_case("true").cmp(&r),
        (Bool(_), Str(_)) => return Err(BOOLEAN_WITH_STRING),
        _ => Ordering::Less,
    })
}

/// Java's `Double.compare`: NaN equals NaN and is above everything, and -0.0 is below 0.0.
fn java_double_cmp(l: f64, r: f64) -> Ordering {
    fn key(x: f64) -> i64 {
        if x.is_nan() { 0x7ff8_0000_0000_0000 } else { x.to_bits() as i64 }
    }
    l.partial_cmp(&r).filter(|o| o.is_ne()).unwrap_or_else(|| key(l).cmp(&key(r)))
}

fn parse_double(s: &str) -> Result<f64, EvalError> {
    java_double(s).ok_or(NOT_A_DOUBLE)
}

/// Java's `Double.valueOf(String)` for decimal text: surrounding characters up to U+0020 are
/// ignored, `NaN` and `[+-]Infinity` are accepted, and one `f`/`F`/`d`/`D` suffix may follow.
/// Java's hexadecimal form (`0x1p3`) is not supported and counts as not a number.
pub(crate) fn java_double(s: &str) -> Option<f64> {
    let trimmed = s.trim_matches(|c: char| c <= ' ');
    let unsigned = trimmed.strip_prefix(['+', '-']).unwrap_or(trimmed);
    match unsigned {
        "NaN" => return Some(f64::NAN),
        "Infinity" if trimmed.starts_with('-') => return Some(f64::NEG_INFINITY),
        "Infinity" => return Some(f64::INFINITY),
        _ => {}
    }
    let body = trimmed.strip_suffix(['f', 'F', 'd', 'D']).unwrap_or(trimmed);
    let digits = body.strip_prefix(['+', '-']).unwrap_or(body);
    // Checked first because Rust's parser also takes forms Java refuses, such as `inf`.
    if !is_plain_decimal(digits.as_bytes()) {
        return None;
    }
    body.parse().ok()
}

/// `digits [. digits] [e [+-] digits]` with at least one mantissa digit.
fn is_plain_decimal(bytes: &[u8]) -> bool {
    let digits_from = |mut at: usize| {
        while bytes.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        at
    };
    let integer_end = digits_from(0);
    let mut end = integer_end;
    let mut mantissa_digits = integer_end;
    if bytes.get(end) == Some(&b'.') {
        let fraction_end = digits_from(end + 1);
        mantissa_digits += fraction_end - (end + 1);
        end = fraction_end;
    }
    if mantissa_digits == 0 {
        return false;
    }
    if matches!(bytes.get(end), Some(b'e' | b'E')) {
        let mut exponent = end + 1;
        if matches!(bytes.get(exponent), Some(b'+' | b'-')) {
            exponent += 1;
        }
        end = digits_from(exponent);
        if end == exponent {
            return false;
        }
    }
    end == bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_double_parsing() {
        for (text, expected) in [
            ("1", 1.0),
            (" 2.5 ", 2.5),
            ("\t+3.\n", 3.0),
            ("-.5", -0.5),
            ("1e3", 1000.0),
            ("1E-2", 0.01),
            ("2f", 2.0),
            ("2.5D", 2.5),
            ("1e3d", 1000.0),
            ("Infinity", f64::INFINITY),
            ("-Infinity", f64::NEG_INFINITY),
            ("007", 7.0),
        ] {
            assert_eq!(java_double(text), Some(expected), "{text:?}");
        }
        assert!(java_double("NaN").is_some_and(f64::is_nan));
        assert!(java_double("-NaN").is_some_and(f64::is_nan));
        for bad in
            ["", " ", ".", "e5", "1e", "1e+", "inf", "nan", "infinity", "1.5ff", "1 5", "0x10", "1_0", "f", "+", "NaNd"]
        {
            assert_eq!(java_double(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn java_double_ordering() {
        assert_eq!(java_double_cmp(f64::NAN, f64::INFINITY), Ordering::Greater);
        assert_eq!(java_double_cmp(f64::NAN, f64::NAN), Ordering::Equal);
        assert_eq!(java_double_cmp(-0.0, 0.0), Ordering::Less);
        assert_eq!(java_double_cmp(1.0, 2.0), Ordering::Less);
    }

    #[test]
    fn comparisons_convert_like_java() {
        use Value::*;
        assert_eq!(compare(Str("5"), Int(5)), Ok(Ordering::Equal));
        assert_eq!(compare(Str("+5"), Int(5)), Ok(Ordering::Equal));
        assert_eq!(compare(Str("3000000000"), Int(5)), Err(NOT_AN_INT));
        assert_eq!(compare(Str("3000000000"), Long(3_000_000_000)), Ok(Ordering::Equal));
        assert_eq!(compare(Str("5.0"), Int(5)), Err(NOT_AN_INT));
        assert_eq!(compare(Str("5.0"), Double(5.0)), Ok(Ordering::Equal));
        assert_eq!(compare(Int(5), Double(5.5)), Ok(Ordering::Less));
        assert_eq!(compare(Long(1 << 40), Int(1)), Ok(Ordering::Greater));
        assert_eq!(compare(Str("TRUE"), Bool(true)), Ok(Ordering::Equal));
        assert_eq!(compare(Str("yes"), Bool(false)), Ok(Ordering::Equal));
        assert_eq!(compare(Bool(true), Str("true")), Err(BOOLEAN_WITH_STRING));
        assert_eq!(compare(Bool(true), Int(1)), Ok(Ordering::Less));
        assert_eq!(compare(Int(1), Bool(true)), Ok(Ordering::Less));
    }
}

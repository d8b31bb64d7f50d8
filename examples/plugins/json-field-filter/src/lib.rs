//! A RockRaft filter plugin that delivers a message when top-level fields of its JSON body match
//! the expression.
//!
//! # Expression
//!
//! One or more conditions joined by `&&`; a message is delivered when all of them hold:
//!
//! ```text
//! expression := condition ( "&&" condition )*
//! condition  := field ( "==" | "!=" ) value
//! field      := bare name of ASCII letters, digits, '_' and '-'   (status, order_id, x-trace)
//!             | a JSON string, for any other key                  ("order.id", "café")
//! value      := a JSON literal: "string" | number | true | false | null
//! ```
//!
//! Whitespace around the tokens is optional. Examples: `status == "paid"`,
//! `status == "paid" && amount != 0`, `"order.id" == 42 && refunded == false`.
//! Only top-level fields are looked at: `a.b` is refused (a key containing a dot is quoted).
//!
//! # Matching
//!
//! - `==` holds when the body has the field and its value is the same JSON type and equal:
//!   strings are compared after unescaping (`"p\u0061id"` equals `"paid"`), byte for byte;
//!   numbers are compared as exact decimals (`1 == 1.0 == 1e0`, `-0 == 0`, and
//!   `9007199254740993 != 9007199254740992`); `true`, `false` and `null` equal themselves.
//!   A string never equals a number (`"1" != 1`), and an object or array equals no literal.
//! - `!=` is exactly the negation of `==`: a missing field makes `==` false and `!=` true.
//! - If a key appears twice, the last value counts (as in JavaScript and most JSON libraries).
//!
//! A body that is not a JSON object (empty, an array, truncated, trailing bytes after the
//! object, nested deeper than [`MAX_DEPTH`]) is an evaluation error: the message is not
//! delivered and the broker counts the error. The body is parsed just enough to find the
//! top-level keys and values: nested objects and arrays are skipped by matching their brackets
//! (with their strings checked), not validated further. Escapes are checked everywhere; a lone
//! UTF-16 surrogate (`"\ud800"`) in the body decodes to U+FFFD.
//!
//! # Cost
//!
//! Parsing is one pass over the body without recursion (8 bytes at a time inside strings and
//! skipped values), so its cost grows with the body's length. The broker bounds each call with
//! fuel: with the default limits a message evaluated alone may have about 6 KB of typical JSON
//! (the README has the measurements); a message over its fuel is not delivered.

use rockraft_plugin_sdk::{Filter, Message, filter};

/// How deeply objects and arrays may nest inside a top-level value.
pub const MAX_DEPTH: usize = 128;

/// The compiled expression.
#[filter(bodies)]
#[derive(Debug)]
pub struct JsonFieldFilter {
    /// The distinct field names the conditions read, unescaped.
    fields: Vec<Vec<u8>>,
    conditions: Vec<Condition>,
}

#[derive(Debug)]
struct Condition {
    /// Index into `fields`.
    field: usize,
    negate: bool,
    value: Literal,
}

/// A value in the expression.
#[derive(Debug, PartialEq)]
enum Literal {
    Str(Vec<u8>),
    Num(Decimal),
    Bool(bool),
    Null,
}

/// A top-level value of the body, borrowed from it.
#[derive(Clone, Copy, Debug)]
enum Value<'a> {
    /// The bytes between the quotes; `escaped` if they contain a backslash.
    Str {
        raw: &'a [u8],
        escaped: bool,
    },
    /// The number's text, valid JSON.
    Num(&'a [u8]),
    Bool(bool),
    Null,
    /// An object or an array.
    Composite,
}

impl Filter for JsonFieldFilter {
    fn open(expression: &str) -> Result<Self, String> {
        parse_expression(expression)
    }

    fn matches(&self, message: &Message<'_>) -> Result<bool, String> {
        let body = message.body().ok_or("the message body was not included")?;
        let mut found: Vec<Option<Value<'_>>> = vec![None; self.fields.len()];
        scan_object(body, |key, escaped, value| {
            if let Some(i) = self.field_index(key, escaped) {
                found[i] = Some(value);
            }
        })
        .map_err(|e| format!("body is not a JSON object: {} at byte {}", e.what, e.at))?;
        Ok(self.conditions.iter().all(|c| equals(&c.value, found[c.field]) != c.negate))
    }
}

impl JsonFieldFilter {
    fn field_index(&self, raw_key: &[u8], escaped: bool) -> Option<usize> {
        if escaped {
            let key = unescape(raw_key).0;
            self.fields.iter().position(|f| *f == key)
        } else {
            self.fields.iter().position(|f| f == raw_key)
        }
    }
}

fn equals(want: &Literal, got: Option<Value<'_>>) -> bool {
    match (want, got) {
        (Literal::Str(want), Some(Value::Str { raw, escaped })) => {
            if escaped {
                unescape(raw).0 == *want
            } else {
                raw == want.as_slice()
            }
        }
        (Literal::Num(want), Some(Value::Num(text))) => Decimal::from_json(text) == *want,
        (Literal::Bool(want), Some(Value::Bool(got))) => *want == got,
        (Literal::Null, Some(Value::Null)) => true,
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// The expression

fn parse_expression(expression: &str) -> Result<JsonFieldFilter, String> {
    let s = expression.as_bytes();
    let mut f = JsonFieldFilter { fields: Vec::new(), conditions: Vec::new() };
    let mut i = ws(s, 0);
    if i == s.len() {
        return Err("empty expression: expected conditions like `status == \"paid\"`, joined by &&".to_string());
    }
    loop {
        let (name, next) = field_name(expression, i)?;
        i = ws(s, next);
        let negate = match s.get(i..i + 2) {
            Some(b"==") => false,
            Some(b"!=") => true,
            _ => {
                return Err(format!(
                    "expected == or != after the field {} {}",
                    String::from_utf8_lossy(&name),
                    found_at(expression, i)
                ));
            }
        };
        i = ws(s, i + 2);
        let (value, next) = literal(expression, i)?;
        i = ws(s, next);
        let field = match f.fields.iter().position(|n| *n == name) {
            Some(k) => k,
            None => {
                f.fields.push(name);
                f.fields.len() - 1
            }
        };
        f.conditions.push(Condition { field, negate, value });
        if i == s.len() {
            return Ok(f);
        }
        if s.get(i..i + 2) != Some(b"&&") {
            let hint = if s.get(i..i + 2) == Some(b"||") { " (only && is supported)" } else { "" };
            return Err(format!("expected && or the end of the expression {}{hint}", found_at(expression, i)));
        }
        i = ws(s, i + 2);
        if i == s.len() {
            return Err("expected a condition after the last &&".to_string());
        }
    }
}

fn is_bare(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// A field name at `i` (unescaped) and the position after it.
fn field_name(expression: &str, i: usize) -> Result<(Vec<u8>, usize), String> {
    let s = expression.as_bytes();
    if s.get(i) == Some(&b'"') {
        let (end, _) = string_end(s, i).map_err(|e| syntax(expression, e))?;
        let (name, lossy) = unescape(&s[i + 1..end - 1]);
        if lossy {
            return Err(format!("a lone UTF-16 surrogate in the field name at column {}", column(expression, i)));
        }
        return Ok((name, end));
    }
    let end = i + s[i..].iter().take_while(|&&b| is_bare(b)).count();
    if end == i {
        return Err(format!(
            "expected a field name (letters, digits, '_', '-', or a \"quoted\" key) {}",
            found_at(expression, i)
        ));
    }
    if matches!(s.get(end), Some(b'.' | b'[')) {
        return Err(format!(
            "only top-level fields can be compared: {} is a path (quote a key that contains '.' or '[')",
            expression.get(i..).unwrap_or_default().split_whitespace().next().unwrap_or_default()
        ));
    }
    Ok((s[i..end].to_vec(), end))
}

/// The value at `i` and the position after it.
fn literal(expression: &str, i: usize) -> Result<(Literal, usize), String> {
    let s = expression.as_bytes();
    let rest = &s[i..];
    let keyword = |word: &[u8]| rest.starts_with(word) && !rest.get(word.len()).is_some_and(|&b| is_bare(b));
    Ok(match rest.first() {
        Some(b'"') => {
            let (end, _) = string_end(s, i).map_err(|e| syntax(expression, e))?;
            let (value, lossy) = unescape(&s[i + 1..end - 1]);
            if lossy {
                return Err(format!("a lone UTF-16 surrogate in the string at column {}", column(expression, i)));
            }
            (Literal::Str(value), end)
        }
        Some(b'-' | b'0'..=b'9') => {
            let end = number_end(s, i).map_err(|e| syntax(expression, e))?;
            (Literal::Num(Decimal::from_json(&s[i..end])), end)
        }
        Some(b'{' | b'[') => {
            return Err(format!(
                "objects and arrays cannot be compared (column {}): use a string, number, true, false or null",
                column(expression, i)
            ));
        }
        _ if keyword(b"true") => (Literal::Bool(true), i + 4),
        _ if keyword(b"false") => (Literal::Bool(false), i + 5),
        _ if keyword(b"null") => (Literal::Null, i + 4),
        Some(&b) if is_bare(b) => {
            return Err(format!(
                "expected a JSON value (\"string\", number, true, false or null) {}: strings need double quotes",
                found_at(expression, i)
            ));
        }
        _ => {
            return Err(format!(
                "expected a JSON value (\"string\", number, true, false or null) {}",
                found_at(expression, i)
            ));
        }
    })
}

fn syntax(expression: &str, e: SyntaxError) -> String {
    format!("{} at column {}", e.what, column(expression, e.at))
}

/// 1-based, in characters.
fn column(expression: &str, byte: usize) -> usize {
    expression.get(..byte).map_or(byte, |p| p.chars().count()) + 1
}

/// "at column N, found `…`" or "at the end".
fn found_at(expression: &str, byte: usize) -> String {
    match expression.get(byte..) {
        Some(rest) if !rest.is_empty() => {
            let word: String = rest.split_whitespace().next().unwrap_or_default().chars().take(16).collect();
            format!("at column {}, found `{word}`", column(expression, byte))
        }
        _ => "at the end".to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// JSON scanning, shared by the expression and the body. Positions are byte offsets; nothing here
// indexes out of bounds or recurses.

#[derive(Clone, Copy, Debug, PartialEq)]
struct SyntaxError {
    at: usize,
    what: &'static str,
}

fn err<T>(at: usize, what: &'static str) -> Result<T, SyntaxError> {
    Err(SyntaxError { at, what })
}

/// Skips JSON whitespace.
fn ws(s: &[u8], mut i: usize) -> usize {
    while matches!(s.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// Calls `visit(raw_key, key_escaped, value)` for each member of the object that is the whole of
/// `body` (whitespace around it allowed).
fn scan_object<'a>(body: &'a [u8], mut visit: impl FnMut(&'a [u8], bool, Value<'a>)) -> Result<(), SyntaxError> {
    let mut i = ws(body, 0);
    match body.get(i) {
        Some(b'{') => {}
        Some(_) => return err(i, "expected '{'"),
        None => return err(i, "the body is empty"),
    }
    i = ws(body, i + 1);
    if body.get(i) == Some(&b'}') {
        i += 1;
    } else {
        loop {
            if body.get(i) != Some(&b'"') {
                return err(i, "expected a key");
            }
            let (end, escaped) = string_end(body, i)?;
            let key = &body[i + 1..end - 1];
            i = ws(body, end);
            if body.get(i) != Some(&b':') {
                return err(i, "expected ':'");
            }
            i = ws(body, i + 1);
            let (value, end) = value(body, i)?;
            visit(key, escaped, value);
            i = ws(body, end);
            match body.get(i) {
                Some(b',') => i = ws(body, i + 1),
                Some(b'}') => {
                    i += 1;
                    break;
                }
                _ => return err(i, "expected ',' or '}'"),
            }
        }
    }
    let end = ws(body, i);
    if end != body.len() {
        return err(end, "unexpected bytes after the object");
    }
    Ok(())
}

/// The value at `i` and the position after it.
fn value(s: &[u8], i: usize) -> Result<(Value<'_>, usize), SyntaxError> {
    let rest = s.get(i..).unwrap_or_default();
    Ok(match rest.first() {
        Some(b'"') => {
            let (end, escaped) = string_end(s, i)?;
            (Value::Str { raw: &s[i + 1..end - 1], escaped }, end)
        }
        Some(b'-' | b'0'..=b'9') => {
            let end = number_end(s, i)?;
            (Value::Num(&s[i..end]), end)
        }
        Some(b'{' | b'[') => (Value::Composite, composite_end(s, i)?),
        _ if rest.starts_with(b"true") => (Value::Bool(true), i + 4),
        _ if rest.starts_with(b"false") => (Value::Bool(false), i + 5),
        _ if rest.starts_with(b"null") => (Value::Null, i + 4),
        Some(_) => return err(i, "expected a value"),
        None => return err(i, "expected a value, found the end"),
    })
}

// Word-at-a-time search. Fuel counts WebAssembly instructions, and a byte-by-byte loop costs
// about 25 of them per byte; testing 8 bytes per step makes long strings and skipped nested
// values about 4 times cheaper. Each mask has the high bit set in the bytes that match; bytes
// above a match may be flagged wrongly (a borrow), but the lowest flagged byte always matches.

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// Flags the bytes of `w` below `n` (`n` ≤ 0x80).
fn lt_bytes(w: u64, n: u8) -> u64 {
    w.wrapping_sub(LO * u64::from(n)) & !w & HI
}

/// Flags the bytes of `w` equal to `c`.
fn eq_bytes(w: u64, c: u8) -> u64 {
    lt_bytes(w ^ (LO * u64::from(c)), 1)
}

/// Where a string's scan stops: a quote, a backslash or a control character.
fn is_string_stop(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

fn string_stops(w: u64) -> u64 {
    eq_bytes(w, b'"') | eq_bytes(w, b'\\') | lt_bytes(w, 0x20)
}

/// Where skipping a nested value stops: a bracket or the start of a string.
fn is_bracket_stop(b: u8) -> bool {
    matches!(b, b'{' | b'[' | b'}' | b']' | b'"')
}

fn bracket_stops(w: u64) -> u64 {
    // Setting bit 5 maps `[` onto `{` and `]` onto `}` (and no other byte onto either).
    let folded = w | (LO * 0x20);
    eq_bytes(folded, b'{') | eq_bytes(folded, b'}') | eq_bytes(w, b'"')
}

/// The first position at or after `i` whose byte `wanted` accepts (`s.len()` if none); `mask`
/// flags the same bytes in a little-endian word.
fn find(s: &[u8], mut i: usize, mask: impl Fn(u64) -> u64, wanted: impl Fn(u8) -> bool) -> usize {
    while let Some((word, _)) = s.get(i..).and_then(<[u8]>::split_first_chunk::<8>) {
        let m = mask(u64::from_le_bytes(*word));
        if m != 0 {
            return i + (m.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(&b) = s.get(i) {
        if wanted(b) {
            return i;
        }
        i += 1;
    }
    i
}

/// `s[i]` is an opening quote: the position after the closing one, and whether the string has
/// escapes. Checks the escapes and refuses raw control characters.
fn string_end(s: &[u8], i: usize) -> Result<(usize, bool), SyntaxError> {
    let mut j = i + 1;
    let mut escaped = false;
    loop {
        j = find(s, j, string_stops, is_string_stop);
        match s.get(j) {
            Some(b'"') => return Ok((j + 1, escaped)),
            Some(b'\\') => {
                escaped = true;
                match s.get(j + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => j += 2,
                    Some(b'u') if s.get(j + 2..j + 6).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) => j += 6,
                    Some(b'u') => return err(j, "a \\u escape needs 4 hex digits"),
                    Some(_) => return err(j, "an unknown escape"),
                    None => return err(i, "an unterminated string"),
                }
            }
            Some(&c) if c < 0x20 => return err(j, "a control character in a string"),
            Some(_) => j += 1,
            None => return err(i, "an unterminated string"),
        }
    }
}

/// A JSON number at `i`: the position after it.
fn number_end(s: &[u8], i: usize) -> Result<usize, SyntaxError> {
    let digits = |mut j: usize| {
        while s.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
        j
    };
    let mut j = i;
    if s.get(j) == Some(&b'-') {
        j += 1;
    }
    match s.get(j) {
        Some(b'0') => j += 1,
        Some(b'1'..=b'9') => j = digits(j + 1),
        _ => return err(j, "expected a digit"),
    }
    if s.get(j) == Some(&b'.') {
        if !s.get(j + 1).is_some_and(u8::is_ascii_digit) {
            return err(j + 1, "expected a digit after '.'");
        }
        j = digits(j + 1);
    }
    if matches!(s.get(j), Some(b'e' | b'E')) {
        j += 1;
        if matches!(s.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        if !s.get(j).is_some_and(u8::is_ascii_digit) {
            return err(j, "expected a digit in the exponent");
        }
        j = digits(j);
    }
    Ok(j)
}

/// `s[i]` opens an object or an array: the position after its closing bracket. The brackets must
/// match and nest at most [`MAX_DEPTH`] deep; strings are skipped (and checked) so brackets in
/// them do not count. The open brackets are a stack of bits (1: object), not recursion.
fn composite_end(s: &[u8], mut i: usize) -> Result<usize, SyntaxError> {
    let start = i;
    let mut stack: u128 = 0;
    let mut depth = 0usize;
    loop {
        i = find(s, i, bracket_stops, is_bracket_stop);
        match s.get(i) {
            Some(&b @ (b'{' | b'[')) => {
                if depth == MAX_DEPTH {
                    return err(i, "objects or arrays nested too deeply");
                }
                stack = (stack << 1) | u128::from(b == b'{');
                depth += 1;
                i += 1;
            }
            Some(&b @ (b'}' | b']')) => {
                if depth == 0 || (stack & 1 == 1) != (b == b'}') {
                    return err(i, "a mismatched bracket");
                }
                stack >>= 1;
                depth -= 1;
                i += 1;
                if depth == 0 {
                    return Ok(i);
                }
            }
            Some(b'"') => i = string_end(s, i)?.0,
            Some(_) => i += 1,
            None => return err(start, "an unterminated object or array"),
        }
    }
}

/// The bytes a JSON string's content (its escapes already checked) stands for, and whether a lone
/// surrogate was replaced with U+FFFD.
fn unescape(raw: &[u8]) -> (Vec<u8>, bool) {
    let hex4 = |at: usize| {
        let digits = raw.get(at..at + 4)?;
        u32::from_str_radix(core::str::from_utf8(digits).ok()?, 16).ok()
    };
    let mut out = Vec::with_capacity(raw.len());
    let mut lossy = false;
    let mut i = 0;
    while let Some(&b) = raw.get(i) {
        if b != b'\\' {
            out.push(b);
            i += 1;
            continue;
        }
        let escape = raw.get(i + 1).copied().unwrap_or(b'\\');
        i += 2;
        let byte = match escape {
            b'b' => 0x08,
            b'f' => 0x0C,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let mut code = hex4(i).unwrap_or(0xFFFD);
                i += 4;
                if (0xD800..0xDC00).contains(&code) {
                    match (raw.get(i..i + 2), hex4(i + 2)) {
                        (Some(b"\\u"), Some(low @ 0xDC00..0xE000)) => {
                            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                            i += 6;
                        }
                        _ => code = 0xD800, // lone high surrogate: replaced below
                    }
                }
                let c = char::from_u32(code).unwrap_or_else(|| {
                    lossy = true;
                    char::REPLACEMENT_CHARACTER
                });
                out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                continue;
            }
            other => other, // " \ /
        };
        out.push(byte);
    }
    (out, lossy)
}

/// A number as an exact decimal: `0.digits × 10^exponent`, `digits` without leading or trailing
/// zeros (zero has none, and is never negative), so equal numbers have equal representations.
#[derive(Debug, PartialEq)]
struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    exponent: i64,
}

impl Decimal {
    /// `text` is a valid JSON number. Exponents beyond ±9.2e18 saturate.
    fn from_json(text: &[u8]) -> Decimal {
        let (negative, rest) = match text.split_first() {
            Some((b'-', rest)) => (true, rest),
            _ => (false, text),
        };
        let mantissa_len = rest.iter().position(|&b| b == b'e' || b == b'E').unwrap_or(rest.len());
        let (mantissa, exp_text) = rest.split_at(mantissa_len);
        let (int, frac) = match mantissa.iter().position(|&b| b == b'.') {
            Some(p) => (&mantissa[..p], &mantissa[p + 1..]),
            None => (mantissa, &[][..]),
        };
        let mut exponent: i64 = 0;
        for &d in exp_text.iter().filter(|b| b.is_ascii_digit()) {
            exponent = exponent.saturating_mul(10).saturating_add(i64::from(d - b'0'));
        }
        if exp_text.contains(&b'-') {
            exponent = -exponent;
        }
        let all = int.iter().chain(frac);
        let leading = all.clone().take_while(|&&d| d == b'0').count();
        let mut digits: Vec<u8> = all.skip(leading).copied().collect();
        while digits.last() == Some(&b'0') {
            digits.pop();
        }
        if digits.is_empty() {
            return Decimal { negative: false, digits, exponent: 0 };
        }
        let point = i64::try_from(int.len()).unwrap_or(i64::MAX) - i64::try_from(leading).unwrap_or(0);
        Decimal { negative, digits, exponent: exponent.saturating_add(point) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rockraft_plugin_sdk::testing::TestMessage;

    fn run(expression: &str, body: &[u8]) -> Result<bool, String> {
        TestMessage::new("Orders").body(body).filter(&JsonFieldFilter::open(expression).unwrap())
    }

    fn open_err(expression: &str) -> String {
        JsonFieldFilter::open(expression).expect_err(expression)
    }

    #[test]
    fn expression_forms() {
        let f = JsonFieldFilter::open(r#"  status=="paid"&&amount != 0 && "order.id" == 1e1&&x-y==null "#).unwrap();
        assert_eq!(f.fields, [&b"status"[..], b"amount", b"order.id", b"x-y"]);
        assert_eq!(f.conditions.len(), 4);
        assert!(f.conditions[1].negate && !f.conditions[0].negate);
        assert_eq!(f.conditions[2].value, Literal::Num(Decimal { negative: false, digits: vec![b'1'], exponent: 2 }));
        // A field named twice is read once.
        let f = JsonFieldFilter::open(r#"a != 1 && a != 2 && "\u0061" != 3"#).unwrap();
        assert_eq!((f.fields.len(), f.conditions.len()), (1, 3));
        let f = JsonFieldFilter::open(r#"note == "a && b \"q\" \u00e9 \ud83d\ude00" && ok == true && no == false"#)
            .unwrap();
        assert_eq!(f.conditions[0].value, Literal::Str("a && b \"q\" é 😀".as_bytes().to_vec()));
        assert_eq!(f.conditions.len(), 3);
    }

    #[test]
    fn malformed_expressions_are_refused_with_a_reason() {
        let cases: &[(&str, &str)] = &[
            ("", "empty expression"),
            ("   ", "empty expression"),
            ("status", "expected == or != after the field status at the end"),
            ("status = \"paid\"", "expected == or != after the field status at column 8, found `=`"),
            ("status > 1", "expected == or !="),
            ("status ==", "expected a JSON value"),
            ("status == paid", "strings need double quotes"),
            ("status == 'paid'", "expected a JSON value"),
            ("status == \"paid", "an unterminated string at column 11"),
            ("status == \"pa\\id\"", "an unknown escape"),
            ("status == \"\\u12\"", "4 hex digits"),
            ("status == \"\\ud800\"", "lone UTF-16 surrogate"),
            ("status == \"a\tb\"", "control character"),
            ("status == \"paid\" &&", "a condition after the last &&"),
            ("status == \"paid\" && ", "a condition after the last &&"),
            ("&& status == \"paid\"", "expected a field name"),
            ("== 1", "expected a field name"),
            ("status == \"paid\" || a == 1", "only && is supported"),
            ("status == \"paid\" a == 1", "expected && or the end of the expression at column 18, found `a`"),
            ("a.b == 1", "only top-level fields"),
            ("a[0] == 1", "only top-level fields"),
            ("a == {}", "objects and arrays cannot be compared"),
            ("a == [1]", "objects and arrays cannot be compared"),
            ("a == 01", "expected && or the end"),
            ("a == 1.", "a digit after '.'"),
            ("a == .5", "expected a JSON value"),
            ("a == 1e", "a digit in the exponent"),
            ("a == -", "expected a digit"),
            ("a == +1", "expected a JSON value"),
            ("a == truex", "strings need double quotes"),
            ("a == nul", "strings need double quotes"),
            ("a == True", "strings need double quotes"),
            ("a == 1 &&& b == 2", "expected a field name"),
            ("\"a == 1", "an unterminated string at column 1"),
            ("é == 1", "expected a field name"),
        ];
        for (expression, reason) in cases {
            let got = open_err(expression);
            assert!(got.contains(reason), "{expression:?}: {got:?} lacks {reason:?}");
        }
    }

    #[test]
    fn strings() {
        let body = br#"{"status": "paid", "note": "say \"hi\"\n", "city": "K\u00f6ln", "emoji": "\ud83d\ude00"}"#;
        assert_eq!(run(r#"status == "paid""#, body), Ok(true));
        assert_eq!(run(r#"status == "PAID""#, body), Ok(false));
        assert_eq!(run(r#"status != "paid""#, body), Ok(false));
        assert_eq!(run(r#"status != "open""#, body), Ok(true));
        assert_eq!(run(r#"note == "say \"hi\"\n""#, body), Ok(true));
        assert_eq!(run(r#"city == "Köln""#, body), Ok(true));
        assert_eq!(run(r#"city == "K\u00F6ln""#, body), Ok(true));
        assert_eq!(run(r#"emoji == "😀""#, body), Ok(true));
        // Escaped keys are compared unescaped too.
        assert_eq!(run(r#"status == "paid""#, br#"{"st\u0061tus": "p\u0061id"}"#), Ok(true));
        assert_eq!(run(r#""a\/b" == 1"#, br#"{"a/b": 1}"#), Ok(true));
        // A lone surrogate in the body reads as U+FFFD; bytes that are not UTF-8 just differ.
        assert_eq!(run(r#"s == "x\ufffd""#, br#"{"s": "x\udc00"}"#), Ok(true));
        assert_eq!(run(r#"s == "x""#, b"{\"s\": \"\xff\"}"), Ok(false));
    }

    #[test]
    fn numbers_compare_as_exact_decimals() {
        let equal = [
            ("1", "1"),
            ("1", "1.0"),
            ("1.0", "1"),
            ("100", "1e2"),
            ("100", "1E+2"),
            ("0.01", "1e-2"),
            ("0", "-0"),
            ("0", "0.000e5"),
            ("-12.50", "-1.25e1"),
            ("9007199254740993", "9007199254740993.0"),
        ];
        for (expr, body) in equal {
            let body = format!(r#"{{"n": {body}}}"#);
            assert_eq!(run(&format!("n == {expr}"), body.as_bytes()), Ok(true), "{expr} == {body}");
            assert_eq!(run(&format!("n != {expr}"), body.as_bytes()), Ok(false), "{expr} != {body}");
        }
        let different =
            [("1", "-1"), ("1", "10"), ("0.1", "0.01"), ("9007199254740993", "9007199254740992"), ("1", "1.000001")];
        for (expr, body) in different {
            let body = format!(r#"{{"n": {body}}}"#);
            assert_eq!(run(&format!("n == {expr}"), body.as_bytes()), Ok(false), "{expr} == {body}");
        }
    }

    #[test]
    fn literals_types_and_missing_fields() {
        let body = br#"{"t": true, "f": false, "z": null, "s": "1", "n": 1, "o": {"a": 1}, "l": [1]}"#;
        for (expression, expected) in [
            ("t == true", true),
            ("t == false", false),
            ("f == false", true),
            ("z == null", true),
            ("z != null", false),
            ("s == 1", false),
            ("s == \"1\"", true),
            ("n == \"1\"", false),
            ("n != \"1\"", true),
            ("t == \"true\"", false),
            ("o == null", false),
            ("o != 1", true),
            ("l != null", true),
            ("missing == null", false),
            ("missing != null", true),
            ("missing == 1", false),
            ("missing != \"x\"", true),
            ("t == true && n == 1 && s == \"1\"", true),
            ("t == true && n == 2", false),
        ] {
            assert_eq!(run(expression, body), Ok(expected), "{expression}");
        }
    }

    #[test]
    fn nested_values_are_skipped() {
        let body = br#" { "a" : { "status" : "open", "x": ["}", "]", {"y": [[]]}], "s": "{\"" } ,
            "b":[ {"status": "open"} ], "status" : "paid" , "c": {} } "#;
        assert_eq!(run(r#"status == "paid""#, body), Ok(true));
        assert_eq!(run(r#"a == null"#, body), Ok(false));
        // The last of duplicate keys counts.
        assert_eq!(run("n == 2", br#"{"n": 1, "n": 2}"#), Ok(true));
        assert_eq!(run("n == 1", br#"{"n": 1, "n": 2}"#), Ok(false));
        // Depth: MAX_DEPTH levels inside a top-level value are fine, one more is an error.
        let nested = |d: usize| format!(r#"{{"deep": {}{}, "n": 1}}"#, "[".repeat(d), "]".repeat(d));
        assert_eq!(run("n == 1", nested(MAX_DEPTH).as_bytes()), Ok(true));
        assert!(run("n == 1", nested(MAX_DEPTH + 1).as_bytes()).unwrap_err().contains("nested too deeply"));
        // Far deeper input is refused without exhausting the stack.
        assert!(run("n == 1", nested(1_000_000).as_bytes()).is_err());
    }

    #[test]
    fn bodies_that_are_not_objects_are_errors() {
        for (body, reason) in [
            (&b""[..], "the body is empty at byte 0"),
            (b"  \n", "the body is empty at byte 3"),
            (b"[]", "expected '{' at byte 0"),
            (b"\"paid\"", "expected '{'"),
            (b"42", "expected '{'"),
            (b"null", "expected '{'"),
            (b"{", "expected a key at byte 1"),
            (b"{\"a\" 1}", "expected ':'"),
            (b"{a: 1}", "expected a key"),
            (b"{'a': 1}", "expected a key"),
            (b"{\"a\": 1,}", "expected a key"),
            (b"{\"a\": 1 \"b\": 2}", "expected ',' or '}'"),
            (b"{\"a\": }", "expected a value at byte 6"),
            (b"{\"a\": 01}", "expected ',' or '}'"),
            (b"{\"a\": tru}", "expected a value"),
            (b"{\"a\": [1}}", "a mismatched bracket at byte 8"),
            (b"{\"a\": {\"b\": 1]}", "a mismatched bracket"),
            (b"{\"a\": [1, 2}", "a mismatched bracket"),
            (b"{\"a\": \"x\\q\"}", "an unknown escape"),
            (b"{\"a\": \"x\ny\"}", "a control character"),
            (b"{\"a\": 1} {}", "unexpected bytes after the object at byte 9"),
            (b"{\"a\": 1}}", "unexpected bytes after the object"),
        ] {
            let got = run("a == 1", body).expect_err(&String::from_utf8_lossy(body));
            assert!(got.starts_with("body is not a JSON object: "), "{got}");
            assert!(got.contains(reason), "{:?}: {got:?} lacks {reason:?}", String::from_utf8_lossy(body));
        }
        assert_eq!(run("a == 1", b" \t\r\n{}\n"), Ok(false));
        assert_eq!(run("a != 1", b"{}"), Ok(true));
    }

    #[test]
    fn word_search_agrees_with_a_byte_loop() {
        let mut seed: u64 = 7;
        let mut data = Vec::new();
        for _ in 0..20_000 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            // Mostly plain bytes, sometimes a special one, any value at all now and then.
            let r = (seed >> 33) as u8;
            data.push(match seed >> 60 {
                0 => b"\"{}[]\\\x00\x1f{[]}"[usize::from(r) % 10],
                1 => r,
                _ => (b'a' + r % 26) | (r & 0x80),
            });
        }
        let agree = |mask: fn(u64) -> u64, stop: fn(u8) -> bool| {
            for start in 0..data.len() {
                let slow = start + data[start..].iter().position(|&b| stop(b)).unwrap_or(data.len() - start);
                assert_eq!(find(&data, start, mask, stop), slow, "from {start}");
            }
        };
        agree(string_stops, is_string_stop);
        agree(bracket_stops, is_bracket_stop);
    }

    const SAMPLES: &[&str] = &[
        r#"{"status":"paid","amount":12.5,"items":[{"sku":"a\"]}","n":1},[true,false,null]],"meta":{},"note":"\u00e9\ud83d\ude00\\","z":null}"#,
        r#"{ "a" : -0.5e-3 , "b" : [ ] , "c" : { "d" : [ { } ] } , "e" : "x" }"#,
        r#"{"":""}"#,
    ];

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let f = JsonFieldFilter::open(r#"status == "paid" && a != 1 && "" == """#).unwrap();
        for sample in SAMPLES {
            let full = TestMessage::new("T").body(*sample).filter(&f);
            assert!(full.is_ok(), "{sample}: {full:?}");
            for cut in 0..sample.len() {
                let got = TestMessage::new("T").body(&sample.as_bytes()[..cut]).filter(&f);
                assert!(got.is_err(), "{:?} gave {got:?}", &sample[..cut]);
            }
        }
    }

    #[test]
    fn mutated_bodies_never_panic() {
        let f = JsonFieldFilter::open(r#"status == "paid" && amount != 12.5 && note == "é😀\\" && z == null"#).unwrap();
        let alphabet = b"{}[]\":,\\/u0123456789abcdefnrtlse.-+E \n\x00\x1f\x7f\xc3\xa9\xff";
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for sample in SAMPLES {
            for _ in 0..3000 {
                let mut body = sample.as_bytes().to_vec();
                for _ in 0..=next() % 4 {
                    let at = next() as usize % body.len().max(1);
                    let byte = alphabet[next() as usize % alphabet.len()];
                    match next() % 3 {
                        0 if !body.is_empty() => body[at] = byte,
                        1 if !body.is_empty() => {
                            body.remove(at);
                        }
                        _ => body.insert(at.min(body.len()), byte),
                    }
                }
                let message = TestMessage::new("T").body(body);
                assert_eq!(message.filter(&f), message.filter(&f));
            }
        }
    }

    #[test]
    fn arbitrary_expressions_never_panic() {
        let mut seed: u64 = 42;
        let pieces =
            ["a", "\"a\"", "==", "!=", "&&", "1", "-", ".", "e", "\"", "\\", "u", "d800", "true", " ", "é", "{", "["];
        for _ in 0..20_000 {
            let mut expression = String::new();
            for _ in 0..seed % 9 {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                expression.push_str(pieces[(seed >> 33) as usize % pieces.len()]);
            }
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            if let Ok(f) = JsonFieldFilter::open(&expression) {
                let _ = TestMessage::new("T").body(r#"{"a": 1}"#).filter(&f);
            }
        }
    }
}

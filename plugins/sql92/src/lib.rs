//! The built-in SQL92 filter: RocketMQ 5.x's message selector (the ActiveMQ-derived
//! `SelectorParser` and its expression classes), compiled once per subscription and evaluated
//! per message without allocating. The rules are those of the conformance README; where they
//! are silent this plugin does what RocketMQ's Java code does:
//!
//! - Text after a complete expression is ignored (RocketMQ's parser has no end-of-input rule):
//!   `a = '1' b` compiles as `a = '1'`. The one token after it is still read, so it must be a
//!   valid token, and one that continues the expression (`AND`, `=`, `IS`, `NOT`...) must do so
//!   correctly. `/* */` comments and `--` comments up to a line end are skipped.
//! - Number tokens follow RocketMQ's lexer: `0` is a token of its own (`007` is `0 0 7`), only a
//!   non-zero integer takes an `l`/`L` suffix, and a decimal literal whose value is zero (`0.0`,
//!   `1e-400`) is refused, since RocketMQ refuses literals below `Double.MIN_VALUE`.
//! - An evaluation error aborts the whole evaluation and the message is not delivered, as the
//!   broker does with an exception: a property compared with a number that does not parse as
//!   the literal's type (`a > 5` with `a = "6.5"`, `" 1"`, or `"3000000000"`, which is not a
//!   32-bit integer), two properties compared with `>` that are not both doubles, or a boolean on
//!   the left of `=` with a string on the right (`(a = 'x') = b`). So `a > 5 OR b = 'x'` is not
//!   delivered when `a = "x"`, even if `b = "x"`. AND/OR short-circuit first, so `FALSE AND ...`
//!   and `TRUE OR ...` never reach an error on their right.
//! - A bare property where a boolean is needed is NULL when missing and FALSE otherwise (its
//!   value is a string, never a boolean): `NOT a` delivers every message that has `a`.
//! - `x = y` is NULL when only `x` is NULL, FALSE when only `y` is, TRUE when both are: `a = b`
//!   is TRUE when neither property is set, `'v' = a` is FALSE when `a` is missing.
//! - A property against TRUE/FALSE is TRUE when it equals `true` ignoring case, FALSE for any
//!   other text (Java's `Boolean.valueOf`): `a = FALSE` holds for `a = "xyz"`.
//! - Values that cannot be converted to each other compare as "less" (Java's `-1`): `1 = TRUE`
//!   is FALSE and `1 <> TRUE` is TRUE; `TRUE = 1` is refused at compile time, but only that way
//!   round, as in RocketMQ.
//! - A property parsed as a double follows Java's `Double.valueOf`: surrounding white space and
//!   control characters are ignored, `NaN`, `Infinity` and an `f`/`d` suffix are accepted, NaN
//!   sorts above everything and -0.0 below 0.0. Java's hexadecimal doubles and non-ASCII digits
//!   are not supported (they count as not a number).
//! - Unary minus negates a number and gives NULL for anything else; `-5` is a computed value,
//!   not a literal, so `a BETWEEN 3 AND -5` is accepted (and never true). Unary plus does nothing.
//! - CONTAINS, STARTSWITH, ENDSWITH accept any left side (`'abc' CONTAINS 'b'` is TRUE); one that
//!   is not a string gives FALSE. `IS [NOT] NULL` accepts any operand. Only BETWEEN, not NOT
//!   BETWEEN, checks that literal bounds are in order.
//! - `TAGS` is the property `TAGS` if the message has one, else the message's tag. No other
//!   system property (such as `KEYS`) is visible.
//! - Unlike RocketMQ, expressions nested deeper than [`MAX_DEPTH`] levels are refused, so that a
//!   hostile expression cannot exhaust the stack; chains of AND/OR do not count as nesting.

mod eval;
mod lex;
mod parse;

use rockraft_plugin_sdk::{Filter, Message, filter};

pub use parse::MAX_DEPTH;

#[filter(name = "sql92")]
pub struct Sql92Filter {
    root: parse::Expr,
}

impl Filter for Sql92Filter {
    fn open(expression: &str) -> Result<Self, String> {
        match parse::parse(expression) {
            Ok(root) => Ok(Sql92Filter { root }),
            Err(e) => Err(format!("invalid SQL92 expression: {e}")),
        }
    }

    fn matches(&self, message: &Message<'_>) -> Result<bool, String> {
        match eval::test(&self.root, message) {
            Ok(truth) => Ok(truth == Some(true)),
            Err(e) => Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rockraft_plugin_sdk::testing::TestMessage;

    fn message(props: &[(&str, &str)]) -> TestMessage {
        props.iter().fold(TestMessage::new("T"), |m, (k, v)| m.property(k, v))
    }

    fn compile(expression: &str) -> Sql92Filter {
        Sql92Filter::open(expression).unwrap_or_else(|e| panic!("{expression:?} should compile: {e}"))
    }

    /// TRUE, FALSE, NULL (`Ok(None)`) or an evaluation error.
    fn truth_of(expression: &str, m: &TestMessage) -> Result<Option<bool>, String> {
        let f = compile(expression);
        m.with_view(|v| eval::test(&f.root, v)).map_err(|e| e.to_string())
    }

    fn truth(expression: &str, props: &[(&str, &str)]) -> Result<Option<bool>, String> {
        truth_of(expression, &message(props))
    }

    fn delivered(expression: &str, props: &[(&str, &str)]) -> bool {
        message(props).filter(&compile(expression)) == Ok(true)
    }

    fn assert_rejected(expressions: &[&str]) {
        for e in expressions {
            assert!(Sql92Filter::open(e).is_err(), "{e:?} should be rejected");
        }
    }

    fn assert_accepted(expressions: &[&str]) {
        for e in expressions {
            assert!(Sql92Filter::open(e).is_ok(), "{e:?} should compile: {:?}", Sql92Filter::open(e).err());
        }
    }

    // ---- the conformance files ----

    type Chars<'t> = std::iter::Peekable<std::str::Chars<'t>>;

    fn skip_space(chars: &mut Chars<'_>) {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
    }

    fn hex4(chars: &mut Chars<'_>) -> Result<u32, String> {
        let hex: String = (0..4).filter_map(|_| chars.next()).collect();
        u32::from_str_radix(&hex, 16).map_err(|_| format!("bad \\u escape {hex:?}"))
    }

    fn json_string(chars: &mut Chars<'_>) -> Result<String, String> {
        if chars.next() != Some('"') {
            return Err("expected a string".into());
        }
        let mut out = String::new();
        loop {
            match chars.next().ok_or("unterminated string")? {
                '"' => return Ok(out),
                '\\' => match chars.next().ok_or("unterminated escape")? {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    'b' => out.push('\u{8}'),
                    'f' => out.push('\u{c}'),
                    'u' => {
                        let first = hex4(chars)?;
                        let code = if (0xD800..0xDC00).contains(&first) {
                            let (Some('\\'), Some('u')) = (chars.next(), chars.next()) else {
                                return Err("lone surrogate".into());
                            };
                            0x10000 + ((first - 0xD800) << 10) + hex4(chars)?.wrapping_sub(0xDC00)
                        } else {
                            first
                        };
                        out.push(char::from_u32(code).ok_or("bad code point")?);
                    }
                    c => out.push(c),
                },
                c => out.push(c),
            }
        }
    }

    /// Parses a flat JSON object of string values, such as `{"a": "1", "b": "x\"y"}`.
    fn parse_flat_json(text: &str) -> Result<Vec<(String, String)>, String> {
        let mut chars = text.trim().chars().peekable();
        let mut pairs = Vec::new();
        if chars.next() != Some('{') {
            return Err("expected {".into());
        }
        skip_space(&mut chars);
        if chars.next_if_eq(&'}').is_some() {
            return Ok(pairs);
        }
        loop {
            skip_space(&mut chars);
            let key = json_string(&mut chars)?;
            skip_space(&mut chars);
            if chars.next() != Some(':') {
                return Err("expected :".into());
            }
            skip_space(&mut chars);
            pairs.push((key, json_string(&mut chars)?));
            skip_space(&mut chars);
            match chars.next() {
                Some(',') => {}
                Some('}') => return Ok(pairs),
                _ => return Err("expected , or }".into()),
            }
        }
    }

    #[test]
    fn flat_json() {
        assert_eq!(parse_flat_json("{}"), Ok(vec![]));
        assert_eq!(
            parse_flat_json(r#" { "a" : "1", "b\"": "x\\y\u00e9\ud83d\ude00" } "#),
            Ok(vec![("a".into(), "1".into()), ("b\"".into(), "x\\yé😀".into())])
        );
        assert!(parse_flat_json(r#"{"a": 1}"#).is_err());
    }

    #[test]
    fn conformance_files() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let files = ["../../testdata/conformance/sql92_public.tsv", "../../../shared/conformance/sql92_public.tsv"];
        let mut checked = 0;
        let mut failures = Vec::new();
        for (index, file) in files.iter().enumerate() {
            let Ok(text) = std::fs::read_to_string(root.join(file)) else {
                assert!(index > 0, "{file} is missing");
                continue;
            };
            for (number, line) in text.lines().enumerate() {
                let line = line.trim_end_matches('\r');
                if line.trim().is_empty() || line.starts_with('#') {
                    continue;
                }
                let fields: Vec<&str> = line.split('\t').collect();
                let [expression, properties, expected] = fields[..] else {
                    panic!("{file}:{}: expected 3 tab-separated fields", number + 1)
                };
                let properties = parse_flat_json(properties).unwrap_or_else(|e| panic!("{file}:{}: {e}", number + 1));
                let m = TestMessage { topic: "T".into(), properties, ..Default::default() };
                let outcome = match Sql92Filter::open(expression) {
                    Err(_) => "error",
                    Ok(f) if m.filter(&f) == Ok(true) => "true",
                    Ok(_) => "false",
                };
                if outcome != expected.trim() {
                    failures.push(format!("{file}:{}: {expression:?} gave {outcome}, expected {expected}", number + 1));
                }
                checked += 1;
            }
        }
        assert!(checked > 0);
        assert!(failures.is_empty(), "{} of {checked} cases failed:\n{}", failures.len(), failures.join("\n"));
    }

    // ---- syntax ----

    #[test]
    fn keywords_ignore_case_identifiers_do_not() {
        assert!(delivered("a Is NoT nUlL aNd a iN ('x') oR FALSE", &[("a", "x")]));
        assert!(delivered("a BETWEEN 1 and 3 AND b not CONTAINS 'q'", &[("a", "2"), ("b", "x")]));
        assert!(!delivered("A = 'x'", &[("a", "x")]));
        assert!(delivered("$a_1 = 'x' AND _b = 'y'", &[("$a_1", "x"), ("_b", "y")]));
    }

    #[test]
    fn syntax_errors_are_rejected() {
        assert_rejected(&[
            "",
            "   ",
            "/* only a comment */",
            "a =",
            "a = = 1",
            "a == 1",
            "a != 1",
            "(a = 1",
            "a = 1 AND",
            "AND a = 1",
            "a IS 1",
            "a IS NOT 1",
            "a NOT LIKE 'x'",
            "a NOT b",
            "a in ()",
            "a in ('x',)",
            "a in ('x' 'y')",
            "a in 'x'",
            "a between 1 3",
            "a = 'unterminated",
            "a = 1 #",
            "a = .",
            "a = 1 /* unterminated",
            "é = 'x'",
            "a = \"x\"",
        ]);
    }

    #[test]
    fn text_after_a_complete_expression_is_ignored() {
        // RocketMQ's parser stops after the expression and reads only the token after it.
        assert!(delivered("a = '1' b = 'nope'", &[("a", "1")]));
        assert!(delivered("a = '1')", &[("a", "1")]));
        assert!(delivered("a = 007", &[("a", "0")]));
        assert!(delivered("a = 0x10", &[("a", "0")]));
        assert!(delivered("a > 5 +", &[("a", "6")]));
        assert_eq!(truth("a LIKE 'x'", &[("a", "x")]), Ok(Some(false)));
        assert!(delivered("a = '1' --no line end", &[("a", "1")]));
        assert!(delivered("a = '1' -- comment\n AND b = '2'", &[("a", "1"), ("b", "2")]));
        assert!(delivered("/* c */ a /* c */ = '1'", &[("a", "1")]));
        assert_rejected(&["a = '1' #", "a = '1' AND", "a = '1' IS", "a = '1' NOT x", "a = '1' 'open"]);
    }

    #[test]
    fn string_literals_escape_quotes() {
        assert!(delivered("a = 'it''s'", &[("a", "it's")]));
        assert!(delivered("a = ''''", &[("a", "'")]));
        assert!(delivered("a = ''", &[("a", "")]));
        assert!(delivered("a = 'é ''x'' 😀'", &[("a", "é 'x' 😀")]));
        assert!(delivered("a = 'line\nbreak'", &[("a", "line\nbreak")]));
        assert!(!delivered("a = 'it''s'", &[("a", "it''s")]));
    }

    // ---- literals ----

    #[test]
    fn integer_literals() {
        assert!(delivered("a = 2147483647", &[("a", "2147483647")]));
        assert!(delivered("a = 2147483648", &[("a", "2147483648")]));
        assert!(delivered("a = 9223372036854775807L", &[("a", "9223372036854775807")]));
        assert!(delivered("a = 5l AND b = 5L", &[("a", "5"), ("b", "5")]));
        assert!(delivered("a = -9223372036854775807", &[("a", "-9223372036854775807")]));
        // i64 overflow is a compile error, also under a minus sign.
        assert_rejected(&["a > 9223372036854775808", "a > -9223372036854775808", "a > 100000000000000000000000"]);
        // Only a non-zero integer takes the suffix: `0L` is `0` followed by ignored text.
        assert!(delivered("a > 0L", &[("a", "1")]));
    }

    #[test]
    fn decimal_literals() {
        assert!(delivered(
            "a = 1.5 AND b = .5 AND c = 5. AND d = 1e3 AND e = 2.5E-1",
            &[("a", "1.5"), ("b", "0.5"), ("c", "5"), ("d", "1000"), ("e", "0.25")]
        ));
        assert!(delivered("a = 4.9e-324", &[("a", "4.9e-324")]));
        assert!(delivered("a > 1.7976931348623157e308", &[("a", "Infinity")]));
        // Overflow to infinity, underflow to zero, and zero itself (below Double.MIN_VALUE).
        assert_rejected(&["a > 1e309", "a > 1e-400", "a > 0.0", "a > 0e5", "a > .0", "a > -0.0"]);
        assert_rejected(&["a > 1.7976931348623159e308"]);
    }

    #[test]
    fn bare_literals_and_boolean_operands() {
        assert!(delivered("True", &[]));
        assert!(delivered("(TRUE)", &[]));
        assert!(!delivered("FALSE", &[]));
        assert!(!delivered("NULL", &[]));
        assert!(delivered("NOT FALSE", &[]));
        assert_eq!(truth("NOT NULL", &[]), Ok(None));
        assert_rejected(&["'abc'", "5", "1.5", "-5", "('x')", "a = '1' AND 'x'", "'x' OR a = '1'", "NOT 'x'", "NOT 5"]);
        assert_rejected(&["a = '1' AND -b", "NOT -a"]);
        assert_accepted(&["a", "(a)", "+a", "NOT a", "a AND b", "TRUE AND a", "a OR NULL"]);
    }

    // ---- precedence ----

    #[test]
    fn and_binds_tighter_than_or() {
        assert!(delivered("a = '1' OR b = '1' AND c = '1'", &[("a", "1")]));
        assert!(!delivered("(a = '1' OR b = '1') AND c = '1'", &[("a", "1")]));
        assert!(delivered("b = '1' AND c = '1' OR a = '1'", &[("a", "1")]));
    }

    #[test]
    fn not_binds_tightest() {
        // `NOT a = '1'` is `(NOT a) = '1'`: a boolean on the left of a string fails to evaluate,
        // and is NULL when `a` is missing.
        assert!(truth("NOT a = '1'", &[("a", "2")]).is_err());
        assert_eq!(truth("NOT a = '1'", &[]), Ok(None));
        assert_eq!(truth("NOT (a = '1')", &[("a", "2")]), Ok(Some(true)));
        assert_eq!(truth("NOT a IS NULL", &[]), Ok(Some(true)));
        assert_eq!(truth("NOT a IS NULL", &[("a", "x")]), Ok(Some(false)));
        // `NOT a > 1` compares a boolean with `>`: refused.
        assert_rejected(&["NOT a > 1", "NOT a BETWEEN 1 AND 2"]);
        assert!(truth("NOT NOT a = '1'", &[("a", "1")]).is_err());
        assert_eq!(truth("NOT (NOT (a = '1'))", &[("a", "1")]), Ok(Some(true)));
    }

    #[test]
    fn equality_is_looser_than_comparison() {
        // `a > 1 = TRUE` is `(a > 1) = TRUE`.
        assert!(delivered("a > 1 = TRUE", &[("a", "2")]));
        assert!(!delivered("a > 1 = TRUE", &[("a", "0")]));
        assert!(delivered("a > 1 <> b > 1", &[("a", "2"), ("b", "0")]));
        assert!(delivered("a IS NULL = TRUE", &[]));
        assert!(delivered("a CONTAINS 'x' = b IN ('y')", &[("a", "x"), ("b", "y")]));
        // Comparisons do not chain: the left side would be a boolean.
        assert_rejected(&["a > 1 > 0", "a BETWEEN 1 AND 2 > 0", "a IN ('x') IN ('y')", "a > 1 BETWEEN 1 AND 2"]);
        assert!(delivered("a = '1' = TRUE", &[("a", "1")]));
    }

    #[test]
    fn unary_plus_and_minus() {
        assert!(delivered("a > -5", &[("a", "-4")]));
        assert!(!delivered("a > -5", &[("a", "-6")]));
        assert!(delivered("a = - -5", &[("a", "5")]));
        assert!(delivered("a = +5 AND b = -2.5", &[("a", "5"), ("b", "-2.5")]));
        assert!(delivered("a = -2147483648", &[("a", "-2147483648")]));
        // A negated non-number is NULL.
        assert_eq!(truth("a > -b", &[("a", "1"), ("b", "1")]), Ok(None));
        assert_eq!(truth("a = -'x'", &[("a", "1")]), Ok(Some(false)));
        assert_eq!(truth("a = -'x'", &[]), Ok(Some(true)));
        assert_eq!(truth("-5 > -6", &[]), Ok(Some(true)));
        // `+` keeps a literal a literal; `-` makes it a computed value.
        assert_rejected(&["a > +'x'", "+'x'"]);
        assert_accepted(&["a = -NULL", "a > -'x'"]);
    }

    // ---- compile-time rejections ----

    #[test]
    fn ordering_operands_are_checked() {
        assert_rejected(&[
            "a > 'abc'",
            "'abc' < a",
            "a >= TRUE",
            "a <= FALSE",
            "a > NULL",
            "NULL < a",
            "a > (b = '1')",
            "(b = '1') > a",
            "a > (b IS NULL)",
            "a < NOT b",
            "a > ('x')",
        ]);
        assert_accepted(&["a > b", "a > 5", "5 > a", "a > 1.5", "a > (b)", "a > -b", "5 > 3"]);
        assert!(delivered("5 > 3", &[]));
        assert!(!delivered("2.5 >= 3", &[]));
    }

    #[test]
    fn equality_operands_are_checked() {
        assert_rejected(&["a = NULL", "NULL = a", "a <> NULL", "a = (NULL)", "TRUE = 1", "FALSE <> 'x'", "TRUE = 1.5"]);
        assert_accepted(&["1 = TRUE", "'x' = FALSE", "TRUE = FALSE", "TRUE = a", "a = TRUE", "'a' = 'a'"]);
        assert!(delivered("'a' = 'a'", &[]));
        assert!(!delivered("TRUE = FALSE", &[]));
        assert!(!delivered("1 = TRUE", &[]));
        assert!(delivered("1 <> TRUE", &[]));
    }

    #[test]
    fn in_operands_are_checked() {
        assert_rejected(&[
            "'x' IN ('x')",
            "5 IN ('5')",
            "-a IN ('x')",
            "(a = 'x') IN ('x')",
            "a IN (1, 2)",
            "a IN (b)",
            "a IN ('x', 1)",
            "a NOT IN (NULL)",
        ]);
        assert_accepted(&["(a) IN ('x')", "+a IN ('x')", "a IN ('')", "a NOT IN ('x', 'x')"]);
    }

    #[test]
    fn text_operands_are_checked() {
        assert_rejected(&["a CONTAINS b", "a CONTAINS 1", "a STARTSWITH NULL", "a ENDSWITH ('x')", "a NOT CONTAINS"]);
        assert_accepted(&["'x' CONTAINS 'x'", "5 ENDSWITH '5'", "(a = 'x') STARTSWITH 't'", "a NOT ENDSWITH ''"]);
    }

    #[test]
    fn between_bounds_are_checked() {
        assert_rejected(&[
            "a BETWEEN 10 AND 0",
            "a BETWEEN 2.5 AND 2",
            "a BETWEEN 3000000000 AND 2",
            "a BETWEEN NULL AND 5",
            "a BETWEEN 1 AND NULL",
            "a NOT BETWEEN NULL AND 5",
            "a BETWEEN 'a' AND 'b'",
            "a BETWEEN TRUE AND TRUE",
            "a BETWEEN (b = '1') AND 5",
            "'x' BETWEEN 1 AND 2",
            "(a = '1') BETWEEN 1 AND 2",
        ]);
        // Equal bounds are fine; NOT BETWEEN and computed bounds are not checked.
        assert_accepted(&["a BETWEEN 5 AND 5", "a BETWEEN 2 AND 2.5", "a NOT BETWEEN 10 AND 0", "a BETWEEN 3 AND -5"]);
        assert_accepted(&["a BETWEEN b AND c", "5 BETWEEN 1 AND 10"]);
        assert!(!delivered("a BETWEEN 3 AND -5", &[("a", "0")]));
        assert!(delivered("a NOT BETWEEN 10 AND 0", &[("a", "5")]));
    }

    // ---- evaluation ----

    #[test]
    fn three_valued_logic() {
        let missing: &[(&str, &str)] = &[];
        assert_eq!(truth("a = '1'", missing), Ok(None));
        assert_eq!(truth("a = '1' AND TRUE", missing), Ok(None));
        assert_eq!(truth("a = '1' AND FALSE", missing), Ok(Some(false)));
        assert_eq!(truth("FALSE AND a = '1'", missing), Ok(Some(false)));
        assert_eq!(truth("a = '1' OR TRUE", missing), Ok(Some(true)));
        assert_eq!(truth("a = '1' OR FALSE", missing), Ok(None));
        assert_eq!(truth("NOT (a = '1')", missing), Ok(None));
        assert_eq!(truth("NOT (a = '1' OR FALSE)", missing), Ok(None));
        assert_eq!(truth("a <> '1'", missing), Ok(None));
        assert_eq!(truth("a > 1", missing), Ok(None));
        assert_eq!(truth("a BETWEEN 1 AND 2", missing), Ok(None));
        assert_eq!(truth("a NOT BETWEEN 1 AND 2", missing), Ok(None));
        assert_eq!(truth("a IN ('x')", missing), Ok(None));
        assert_eq!(truth("a NOT IN ('x')", missing), Ok(None));
        assert_eq!(truth("a IS NULL", missing), Ok(Some(true)));
        assert_eq!(truth("a IS NOT NULL", missing), Ok(Some(false)));
        assert!(!delivered("NOT (a = '1')", missing));
        assert!(!delivered("a NOT IN ('x')", missing));
    }

    #[test]
    fn short_circuit_skips_errors() {
        let bad: &[(&str, &str)] = &[("a", "not a number"), ("b", "x")];
        assert!(truth("a > 5", bad).is_err());
        assert_eq!(truth("b = 'y' AND a > 5", bad), Ok(Some(false)));
        assert_eq!(truth("b = 'x' OR a > 5", bad), Ok(Some(true)));
        // An error on the left, or on the right of an undecided left, aborts the evaluation.
        assert!(truth("a > 5 OR b = 'x'", bad).is_err());
        assert!(truth("c = 'x' AND a > 5", bad).is_err());
        assert_eq!(message(bad).filter(&compile("a > 5 OR b = 'x'")).ok(), None);
    }

    #[test]
    fn a_bare_property_is_false_or_null() {
        assert_eq!(truth("a", &[("a", "true")]), Ok(Some(false)));
        assert_eq!(truth("a", &[]), Ok(None));
        assert_eq!(truth("NOT a", &[("a", "false")]), Ok(Some(true)));
        assert_eq!(truth("a OR b = '1'", &[("a", "true"), ("b", "1")]), Ok(Some(true)));
    }

    #[test]
    fn equality_with_missing_sides() {
        assert_eq!(truth("a = b", &[]), Ok(Some(true)));
        assert_eq!(truth("a = b", &[("a", "1")]), Ok(Some(false)));
        assert_eq!(truth("a = b", &[("b", "1")]), Ok(None));
        assert_eq!(truth("a <> b", &[("a", "1")]), Ok(Some(true)));
        assert_eq!(truth("'1' = a", &[]), Ok(Some(false)));
        assert_eq!(truth("a = b", &[("a", "1"), ("b", "1")]), Ok(Some(true)));
        assert_eq!(truth("a = b", &[("a", "1"), ("b", "1.0")]), Ok(Some(false)));
    }

    #[test]
    fn numeric_coercion_follows_the_literal_type() {
        assert!(delivered("a = 5", &[("a", "5")]));
        assert!(delivered("a = 5", &[("a", "+5")]));
        assert!(delivered("a = 5", &[("a", "005")]));
        assert!(delivered("a = 0", &[("a", "-0")]));
        // Against an integer literal the value must be an integer of the literal's width.
        for bad in ["6.5", " 1", "1 ", "", "abc", "5L", "0x5", "1e3", "3000000000", "٣"] {
            assert!(truth("a > 5", &[("a", bad)]).is_err(), "{bad:?}");
            assert!(truth("a = 5", &[("a", bad)]).is_err(), "{bad:?}");
        }
        assert!(delivered("a > 2147483648", &[("a", "3000000000")]));
        assert!(truth("a > 2147483648", &[("a", "9223372036854775808")]).is_err());
        // Against a decimal literal it is parsed as a Java double.
        assert!(delivered("a > 6.4", &[("a", "6.5")]));
        assert!(delivered("a = 1.0", &[("a", " 1 ")]));
        assert!(delivered("a = 1000.0", &[("a", "1e3")]));
        assert!(delivered("a = 2.5", &[("a", "2.5f")]));
        assert!(delivered("a > 1.5", &[("a", "NaN")]));
        assert!(!delivered("a < 1.5", &[("a", "NaN")]));
        assert!(delivered("a > 1.5", &[("a", "Infinity")]));
        assert!(truth("a > 1.5", &[("a", "inf")]).is_err());
        // Number literals of different types widen.
        assert!(delivered("5 = 5.0 AND 5 < 3000000000 AND 2.5 < 3", &[]));
        // The tsv: an integer value that is not an i32 does not match, a double does not either.
        assert!(!delivered("a > 100", &[("a", "150.5")]));
    }

    #[test]
    fn two_properties() {
        // `=` compares strings, ordering operators compare doubles.
        assert!(!delivered("a = b", &[("a", "1"), ("b", "1.0")]));
        assert!(delivered("a >= b", &[("a", "1"), ("b", "1.0")]));
        assert!(delivered("a > b", &[("a", "10"), ("b", "9")]));
        assert!(delivered("a BETWEEN b AND c", &[("a", "2"), ("b", "1"), ("c", " 3 ")]));
        assert!(truth("a > b", &[("a", "x"), ("b", "1")]).is_err());
        assert_eq!(truth("a > b", &[("a", "x")]), Ok(None));
    }

    #[test]
    fn booleans_compare_with_property_text() {
        assert!(delivered("a = TRUE", &[("a", "true")]));
        assert!(delivered("a = TRUE", &[("a", "TrUe")]));
        assert!(!delivered("a = TRUE", &[("a", "1")]));
        assert!(delivered("a = FALSE", &[("a", "false")]));
        assert!(delivered("a = FALSE", &[("a", "no")]));
        assert!(delivered("a <> TRUE", &[("a", "yes")]));
        assert_eq!(truth("a = TRUE", &[]), Ok(None));
        // A boolean on the left of a string fails (RocketMQ's ClassCastException).
        assert!(truth("TRUE = a", &[("a", "true")]).is_err());
        assert_eq!(truth("TRUE = a", &[]), Ok(Some(false)));
    }

    #[test]
    fn between_and_in() {
        for (v, inside) in [("2", true), ("10", true), ("1", false), ("11", false), ("5", true)] {
            assert_eq!(delivered("a BETWEEN 2 AND 10", &[("a", v)]), inside, "{v}");
            assert_eq!(delivered("a NOT BETWEEN 2 AND 10", &[("a", v)]), !inside, "{v}");
        }
        assert!(delivered("a BETWEEN 1.5 AND 2.5", &[("a", "2")]));
        assert!(truth("a BETWEEN 1 AND 2", &[("a", "1.5")]).is_err());
        // BETWEEN short-circuits on its first half.
        assert_eq!(truth("a BETWEEN 5 AND b", &[("a", "1"), ("b", "x")]), Ok(Some(false)));
        assert_eq!(truth("a BETWEEN 1 AND b", &[("a", "1")]), Ok(None));
        assert_eq!(truth("a NOT BETWEEN 5 AND b", &[("a", "1")]), Ok(Some(true)));
        assert_eq!(truth("a NOT BETWEEN 0 AND b", &[("a", "1")]), Ok(None));
        let list = "a IN ('e', 'a', 'd', 'c', 'b', 'a', '')";
        for v in ["a", "b", "c", "d", "e", ""] {
            assert!(delivered(list, &[("a", v)]), "{v}");
        }
        assert!(!delivered(list, &[("a", "f")]));
        assert!(!delivered(list, &[("a", "A")]));
        assert!(delivered("a NOT IN ('x', 'y')", &[("a", "z")]));
        assert!(!delivered("a IN ('1')", &[("a", "1.0")]));
    }

    #[test]
    fn text_operators() {
        let props: &[(&str, &str)] = &[("a", "héllo wörld")];
        assert!(delivered("a CONTAINS 'wö'", props));
        assert!(delivered("a STARTSWITH 'hé'", props));
        assert!(delivered("a ENDSWITH 'rld'", props));
        assert!(delivered("a NOT CONTAINS 'xyz'", props));
        assert!(!delivered("a NOT STARTSWITH 'h'", props));
        assert!(!delivered("a CONTAINS 'W'", props));
        // Empty needles, missing properties and non-strings are FALSE, for NOT forms too.
        for e in ["a CONTAINS ''", "a NOT CONTAINS ''", "b CONTAINS 'x'", "b NOT ENDSWITH 'x'", "5 CONTAINS '5'"] {
            assert_eq!(truth(e, props), Ok(Some(false)), "{e}");
        }
        assert_eq!(truth("(a CONTAINS 'x') NOT STARTSWITH 't'", props), Ok(Some(false)));
        assert_eq!(truth("(b > 1) CONTAINS ''", &[("b", "x")]), Ok(Some(false)));
        assert!(truth("(b > 1) CONTAINS 'x'", &[("b", "x")]).is_err());
    }

    #[test]
    fn tags_come_from_the_property_or_the_tag() {
        let tagged = TestMessage::new("T").tag("TagA");
        assert_eq!(truth_of("TAGS = 'TagA'", &tagged), Ok(Some(true)));
        assert_eq!(truth_of("TAGS IN ('TagB', 'TagA')", &tagged), Ok(Some(true)));
        assert_eq!(truth_of("TAGS IS NOT NULL AND TAGS STARTSWITH 'Tag'", &tagged), Ok(Some(true)));
        assert_eq!(truth_of("tags = 'TagA'", &tagged), Ok(None));
        let both = TestMessage::new("T").tag("TagA").property("TAGS", "TagB");
        assert_eq!(truth_of("TAGS = 'TagB'", &both), Ok(Some(true)));
        let untagged = TestMessage::new("T");
        assert_eq!(truth_of("TAGS IS NULL", &untagged), Ok(Some(true)));
        assert_eq!(truth_of("TAGS = 'TagA'", &untagged), Ok(None));
    }

    #[test]
    fn nesting_is_bounded() {
        let nested = |n: usize| format!("{}a = '1'{}", "(".repeat(n), ")".repeat(n));
        assert!(delivered(&nested(MAX_DEPTH - 8), &[("a", "1")]));
        for hostile in [
            nested(MAX_DEPTH + 1),
            nested(100_000),
            format!("{}a", "NOT ".repeat(MAX_DEPTH + 1)),
            format!("a > {}5", "-".repeat(MAX_DEPTH + 1)),
            format!("a{}", " = TRUE".repeat(MAX_DEPTH + 1)),
            format!("{}a = '1'", "(".repeat(5000)),
        ] {
            let shown: String = hostile.chars().take(40).collect();
            assert!(Sql92Filter::open(&hostile).is_err(), "{shown}...");
        }
        // Long AND/OR chains are flat, not nested.
        let chain = vec!["a = '1'"; 500].join(" OR ");
        assert!(delivered(&chain, &[("a", "1")]));
        let chain = vec!["a = '1'"; 500].join(" AND ");
        assert!(delivered(&chain, &[("a", "1")]));
    }

    #[test]
    fn arbitrary_input_never_panics() {
        // A cheap deterministic fuzz over fragments of the grammar and stray characters.
        let pieces = [
            "a",
            "TAGS",
            "'x'",
            "''''",
            "5",
            "2147483648",
            "1.5",
            "0.0",
            "TRUE",
            "NULL",
            "(",
            ")",
            ",",
            "=",
            "<>",
            ">",
            ">=",
            "<",
            "<=",
            "+",
            "-",
            "NOT",
            "AND",
            "OR",
            "IS",
            "IN",
            "BETWEEN",
            "CONTAINS",
            "STARTSWITH",
            "ENDSWITH",
            "é",
            "#",
            "'",
            "/*",
            "*/",
            "--",
            "\n",
            ".",
            "e",
        ];
        let m = message(&[("a", "5"), ("TAGS", "x")]);
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            let mut expression = String::new();
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = seed % 12;
            for i in 0..len {
                let pick = (seed.rotate_left(i as u32 * 5) % pieces.len() as u64) as usize;
                expression.push_str(pieces[pick]);
                expression.push(' ');
            }
            if let Ok(f) = Sql92Filter::open(&expression) {
                let _ = m.filter(&f);
            }
        }
    }

    /// `cargo test -p sql92 --release -- --ignored --nocapture typical_expression_speed`
    #[test]
    #[ignore]
    fn typical_expression_speed() {
        let f = compile("a > 5 AND b = 'abc'");
        let m = message(&[("x", "1"), ("a", "10"), ("b", "abc"), ("c", "true")]);
        m.with_view(|v| {
            let rounds = 5_000_000u32;
            let start = std::time::Instant::now();
            let mut hits = 0u32;
            for _ in 0..rounds {
                hits += u32::from(f.matches(std::hint::black_box(v)) == Ok(true));
            }
            let per = start.elapsed().as_nanos() as f64 / f64::from(rounds);
            println!("{per:.1} ns per message ({hits} hits)");
            assert_eq!(hits, rounds);
        });
    }
}

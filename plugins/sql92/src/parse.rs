//! Recursive-descent parser for RocketMQ's selector grammar, with RocketMQ's compile-time checks,
//! producing an [`Expr`] whose literals are already decoded and converted.
//!
//! Grammar (lowest precedence first; every binary level is left-associative):
//!
//! ```text
//! or         := and (OR and)*
//! and        := equality (AND equality)*
//! equality   := comparison ( ('=' | '<>') comparison | IS NULL | IS NOT NULL )*
//! comparison := unary ( ('>' | '>=' | '<' | '<=') unary
//!                     | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string
//!                     | [NOT] BETWEEN unary AND unary
//!                     | [NOT] IN '(' string (',' string)* ')' )*
//! unary      := '+' unary | '-' unary | NOT unary | primary
//! primary    := literal | identifier | '(' or ')'
//! ```

use crate::eval::{self, Value};
use crate::lex::{Lexer, Tok, Token};

/// How deep expressions may nest (parentheses, unary operators, chained comparisons), so a
/// hostile expression cannot exhaust the stack while parsing, evaluating or dropping the tree.
pub const MAX_DEPTH: usize = 64;

/// The message property RocketMQ keeps a message's tag in.
const TAGS: &str = "TAGS";

#[derive(Debug)]
pub(crate) enum Expr {
    Const(Const),
    Property(Property),
    /// A negation that could not be folded at compile time.
    Negate(Box<Expr>),
    Not(Box<Expr>),
    /// A bare property where a boolean is expected: NULL when missing, FALSE otherwise (its value
    /// is a string, never a boolean).
    Truthy(Property),
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Equal(Box<Expr>, Box<Expr>),
    NotEqual(Box<Expr>, Box<Expr>),
    IsNull {
        operand: Box<Expr>,
        negated: bool,
    },
    Order {
        op: OrderOp,
        left: Box<Expr>,
        right: Box<Expr>,
    },
    Between {
        value: Box<Expr>,
        low: Box<Expr>,
        high: Box<Expr>,
        negated: bool,
    },
    /// `values` is sorted and without duplicates.
    In {
        property: Property,
        values: Vec<Box<str>>,
        negated: bool,
    },
    Text {
        op: TextOp,
        operand: Box<Expr>,
        needle: Box<str>,
        negated: bool,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Const {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    Double(f64),
    Str(Box<str>),
}

impl Const {
    pub fn value(&self) -> Value<'_> {
        match self {
            Const::Null => Value::Null,
            Const::Bool(b) => Value::Bool(*b),
            Const::Int(i) => Value::Int(*i),
            Const::Long(l) => Value::Long(*l),
            Const::Double(d) => Value::Double(*d),
            Const::Str(s) => Value::Str(s),
        }
    }

    fn is_number(&self) -> bool {
        matches!(self, Const::Int(_) | Const::Long(_) | Const::Double(_))
    }
}

#[derive(Debug)]
pub(crate) struct Property {
    pub name: Box<str>,
    /// `TAGS` falls back to the message's tag when no property of that name is set.
    pub is_tags: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum OrderOp {
    Gt,
    Ge,
    Lt,
    Le,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum TextOp {
    Contains,
    StartsWith,
    EndsWith,
}

/// A parsed sub-expression with what the compile-time checks need to know about it.
struct Node {
    expr: Expr,
    /// Written as a literal (possibly in parentheses or after `+`): RocketMQ's checks treat
    /// literals differently from computed values, even from a folded `-5`.
    literal: bool,
    height: usize,
    /// Byte offset where it starts, for error messages.
    at: usize,
}

impl Node {
    fn leaf(expr: Expr, literal: bool, at: usize) -> Node {
        Node { expr, literal, height: 1, at }
    }

    fn literal_const(&self) -> Option<&Const> {
        match &self.expr {
            Expr::Const(c) if self.literal => Some(c),
            _ => None,
        }
    }

    /// What RocketMQ calls a `BooleanExpression`: comparisons, logic, and the TRUE, FALSE and
    /// NULL literals.
    fn is_boolean(&self) -> bool {
        match &self.expr {
            Expr::Const(c) => self.literal && matches!(c, Const::Bool(_) | Const::Null),
            Expr::Property(_) | Expr::Negate(_) => false,
            _ => true,
        }
    }
}

/// Builds a node over `children`, refusing trees deeper than [`MAX_DEPTH`].
fn branch<'n>(expr: Expr, at: usize, children: impl IntoIterator<Item = &'n usize>) -> Result<Node, String> {
    let height = children.into_iter().max().copied().unwrap_or(0) + 1;
    if height > MAX_DEPTH {
        return Err(format!("expression at offset {at} nested deeper than {MAX_DEPTH} levels"));
    }
    Ok(Node { expr, literal: false, height, at })
}

pub(crate) fn parse(src: &str) -> Result<Expr, String> {
    let mut parser = Parser { lexer: Lexer::new(src), ahead: [None, None], depth: 0 };
    let root = parser.or()?;
    // As in RocketMQ, whatever follows a complete expression is not looked at (its parser has no
    // end-of-input rule), apart from the one token it peeks at to know the expression ended.
    Ok(as_boolean(root)?.expr)
}

struct Parser<'s> {
    lexer: Lexer<'s>,
    ahead: [Option<Token<'s>>; 2],
    depth: usize,
}

impl<'s> Parser<'s> {
    fn peek_token(&mut self) -> Result<Token<'s>, String> {
        match self.ahead[0] {
            Some(t) => Ok(t),
            None => {
                let t = self.lexer.next_token()?;
                self.ahead[0] = Some(t);
                Ok(t)
            }
        }
    }

    fn peek(&mut self) -> Result<Tok<'s>, String> {
        Ok(self.peek_token()?.tok)
    }

    fn peek_second(&mut self) -> Result<Tok<'s>, String> {
        self.peek_token()?;
        match self.ahead[1] {
            Some(t) => Ok(t.tok),
            None => {
                let t = self.lexer.next_token()?;
                self.ahead[1] = Some(t);
                Ok(t.tok)
            }
        }
    }

    fn bump(&mut self) -> Result<Token<'s>, String> {
        let t = self.peek_token()?;
        self.ahead = [self.ahead[1], None];
        Ok(t)
    }

    fn expect(&mut self, wanted: Tok<'static>) -> Result<(), String> {
        let t = self.bump()?;
        if t.tok == wanted { Ok(()) } else { Err(unexpected(t, &format!("{wanted}"))) }
    }

    fn expect_string(&mut self) -> Result<Box<str>, String> {
        let t = self.bump()?;
        match t.tok {
            Tok::Str(raw) => Ok(decode_string(raw)),
            _ => Err(unexpected(t, "a string literal")),
        }
    }

    fn or(&mut self) -> Result<Node, String> {
        let first = self.and()?;
        if self.peek()? != Tok::Or {
            return Ok(first);
        }
        // A chain of ORs is one node (no deeper tree); evaluating it left to right with
        // short-circuit gives the same answers as RocketMQ's nested binary ORs.
        let at = first.at;
        let mut items = vec![as_boolean(first)?];
        while self.peek()? == Tok::Or {
            self.bump()?;
            items.push(as_boolean(self.and()?)?);
        }
        let heights: Vec<usize> = items.iter().map(|n| n.height).collect();
        branch(Expr::Or(items.into_iter().map(|n| n.expr).collect()), at, &heights)
    }

    fn and(&mut self) -> Result<Node, String> {
        let first = self.equality()?;
        if self.peek()? != Tok::And {
            return Ok(first);
        }
        let at = first.at;
        let mut items = vec![as_boolean(first)?];
        while self.peek()? == Tok::And {
            self.bump()?;
            items.push(as_boolean(self.equality()?)?);
        }
        let heights: Vec<usize> = items.iter().map(|n| n.height).collect();
        branch(Expr::And(items.into_iter().map(|n| n.expr).collect()), at, &heights)
    }

    fn equality(&mut self) -> Result<Node, String> {
        let mut left = self.comparison()?;
        loop {
            left = match self.peek()? {
                Tok::Eq | Tok::Ne => {
                    let negated = self.bump()?.tok == Tok::Ne;
                    let right = self.comparison()?;
                    check_equality_operands(&left, &right)?;
                    let (at, heights) = (left.at, [left.height, right.height]);
                    let (l, r) = (Box::new(left.expr), Box::new(right.expr));
                    branch(if negated { Expr::NotEqual(l, r) } else { Expr::Equal(l, r) }, at, &heights)?
                }
                Tok::Is => {
                    self.bump()?;
                    let negated = self.peek()? == Tok::Not;
                    if negated {
                        self.bump()?;
                    }
                    self.expect(Tok::Null)?;
                    // No operand check: `5 IS NULL` and `(a > 1) IS NULL` are accepted.
                    branch(Expr::IsNull { operand: Box::new(left.expr), negated }, left.at, &[left.height])?
                }
                _ => return Ok(left),
            };
        }
    }

    fn comparison(&mut self) -> Result<Node, String> {
        let mut left = self.unary()?;
        loop {
            let order = match self.peek()? {
                Tok::Gt => Some(OrderOp::Gt),
                Tok::Ge => Some(OrderOp::Ge),
                Tok::Lt => Some(OrderOp::Lt),
                Tok::Le => Some(OrderOp::Le),
                _ => None,
            };
            if let Some(op) = order {
                self.bump()?;
                let right = self.unary()?;
                check_order_operand(&left)?;
                check_order_operand(&right)?;
                let (at, heights) = (left.at, [left.height, right.height]);
                left =
                    branch(Expr::Order { op, left: Box::new(left.expr), right: Box::new(right.expr) }, at, &heights)?;
                continue;
            }
            let negated = match self.peek()? {
                Tok::Contains | Tok::StartsWith | Tok::EndsWith | Tok::Between | Tok::In => false,
                Tok::Not => match self.peek_second()? {
                    Tok::Contains | Tok::StartsWith | Tok::EndsWith | Tok::Between | Tok::In => {
                        self.bump()?;
                        true
                    }
                    _ => {
                        let t = self.bump()?;
                        return Err(unexpected(t, "CONTAINS, STARTSWITH, ENDSWITH, BETWEEN or IN after NOT"));
                    }
                },
                _ => return Ok(left),
            };
            let operator = self.bump()?;
            left = match operator.tok {
                Tok::Contains => self.text(left, TextOp::Contains, negated)?,
                Tok::StartsWith => self.text(left, TextOp::StartsWith, negated)?,
                Tok::EndsWith => self.text(left, TextOp::EndsWith, negated)?,
                Tok::Between => self.between(left, negated)?,
                _ => self.in_list(left, negated)?,
            };
        }
    }

    fn text(&mut self, operand: Node, op: TextOp, negated: bool) -> Result<Node, String> {
        // Any left side is accepted; at run time a non-string one makes the test FALSE.
        let needle = self.expect_string()?;
        branch(Expr::Text { op, operand: Box::new(operand.expr), needle, negated }, operand.at, &[operand.height])
    }

    fn between(&mut self, value: Node, negated: bool) -> Result<Node, String> {
        let low = self.unary()?;
        self.expect(Tok::And)?;
        let high = self.unary()?;
        for operand in [&value, &low, &high] {
            check_order_operand(operand)?;
        }
        // RocketMQ checks the order of literal bounds for BETWEEN only, not for NOT BETWEEN, and
        // not for computed bounds such as `-5`.
        if let (false, Some(low_value), Some(high_value)) = (negated, low.literal_const(), high.literal_const()) {
            let order = eval::compare(high_value.value(), low_value.value()).map_err(|e| e.to_string())?;
            if order.is_lt() {
                return Err(format!(
                    "the BETWEEN bound at offset {} is greater than the one at offset {}",
                    low.at, high.at
                ));
            }
        }
        let (at, heights) = (value.at, [value.height, low.height, high.height]);
        let expr =
            Expr::Between { value: Box::new(value.expr), low: Box::new(low.expr), high: Box::new(high.expr), negated };
        branch(expr, at, &heights)
    }

    fn in_list(&mut self, left: Node, negated: bool) -> Result<Node, String> {
        self.expect(Tok::LParen)?;
        let mut values = vec![self.expect_string()?];
        while self.peek()? == Tok::Comma {
            self.bump()?;
            values.push(self.expect_string()?);
        }
        self.expect(Tok::RParen)?;
        let Expr::Property(property) = left.expr else {
            return Err(format!("the left side of IN at offset {} must be a property", left.at));
        };
        values.sort_unstable();
        values.dedup();
        Ok(Node::leaf(Expr::In { property, values, negated }, false, left.at))
    }

    fn unary(&mut self) -> Result<Node, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("expression nested deeper than {MAX_DEPTH} levels"));
        }
        let node = match self.peek()? {
            // Unary plus does nothing, not even hide that its operand is a literal.
            Tok::Plus => {
                self.bump()?;
                self.unary()?
            }
            Tok::Minus => {
                let at = self.bump()?.at;
                negate(self.unary()?, at)?
            }
            Tok::Not => {
                let at = self.bump()?.at;
                let operand = as_boolean(self.unary()?)?;
                branch(Expr::Not(Box::new(operand.expr)), at, &[operand.height])?
            }
            _ => self.primary()?,
        };
        self.depth -= 1;
        Ok(node)
    }

    fn primary(&mut self) -> Result<Node, String> {
        let t = self.bump()?;
        let constant = match t.tok {
            Tok::Str(raw) => Const::Str(decode_string(raw)),
            Tok::Integer(digits) => integer_literal(digits)?,
            Tok::Decimal(text) => decimal_literal(text)?,
            Tok::True => Const::Bool(true),
            Tok::False => Const::Bool(false),
            Tok::Null => Const::Null,
            Tok::Ident(name) => {
                let property = Property { name: name.into(), is_tags: name == TAGS };
                return Ok(Node::leaf(Expr::Property(property), false, t.at));
            }
            Tok::LParen => {
                let inner = self.or()?;
                self.expect(Tok::RParen)?;
                return Ok(inner);
            }
            _ => return Err(unexpected(t, "a literal, a property or '('")),
        };
        Ok(Node::leaf(Expr::Const(constant), true, t.at))
    }
}

fn unexpected(t: Token<'_>, wanted: &str) -> String {
    format!("expected {wanted} at offset {}, found {}", t.at, t.tok)
}

/// `''` stands for one quote.
fn decode_string(raw: &str) -> Box<str> {
    raw.replace("''", "'").into_boxed_str()
}

/// 32-bit when it fits, else 64-bit, else an error (as RocketMQ's `createFromDecimal`).
fn integer_literal(digits: &str) -> Result<Const, String> {
    let wide: i64 = digits.parse().map_err(|_| format!("integer literal {digits} is out of the 64-bit range"))?;
    Ok(i32::try_from(wide).map_or(Const::Long(wide), Const::Int))
}

/// RocketMQ refuses a decimal literal above `Double.MAX_VALUE` or below `Double.MIN_VALUE` (the
/// smallest positive double). Literals carry no sign, so the second rule refuses every literal
/// whose value is zero: `0.0` as much as `1e-400`.
fn decimal_literal(text: &str) -> Result<Const, String> {
    let value: f64 = text.parse().map_err(|_| format!("malformed decimal literal {text}"))?;
    if value.is_infinite() {
        return Err(format!("decimal literal {text} is greater than the largest double"));
    }
    if value == 0.0 {
        return Err(format!("decimal literal {text} is less than the smallest positive double"));
    }
    Ok(Const::Double(value))
}

/// Where a boolean is needed (whole expression, AND/OR/NOT operand): boolean expressions as
/// they are, a property through [`Expr::Truthy`], anything else is refused.
fn as_boolean(node: Node) -> Result<Node, String> {
    if node.is_boolean() {
        return Ok(node);
    }
    match node.expr {
        Expr::Property(p) => Ok(Node { expr: Expr::Truthy(p), literal: false, ..node }),
        _ => Err(format!("the expression at offset {} will not result in a boolean value", node.at)),
    }
}

/// `-x`. Folded when `x` is a literal or a property: a number negates; a string, boolean, NULL or
/// property value (always a string) gives NULL. The result no longer counts as a literal.
fn negate(node: Node, at: usize) -> Result<Node, String> {
    let folded = match &node.expr {
        Expr::Const(Const::Int(i)) => Some(Const::Int(i.wrapping_neg())),
        Expr::Const(Const::Long(l)) => Some(Const::Long(l.wrapping_neg())),
        Expr::Const(Const::Double(d)) => Some(Const::Double(-d)),
        Expr::Const(_) | Expr::Property(_) => Some(Const::Null),
        _ => None,
    };
    match folded {
        Some(c) => Ok(Node { expr: Expr::Const(c), literal: false, height: node.height, at }),
        None => branch(Expr::Negate(Box::new(node.expr)), at, &[node.height]),
    }
}

/// `=` and `<>` refuse a NULL literal on either side, and a TRUE/FALSE literal on the left of a
/// string or number literal (RocketMQ does not check the mirror image).
fn check_equality_operands(left: &Node, right: &Node) -> Result<(), String> {
    if let Some(null) = [left, right].iter().find(|n| n.literal_const() == Some(&Const::Null)) {
        return Err(format!("NULL at offset {} cannot be compared with = or <>; use IS [NOT] NULL", null.at));
    }
    if let (Some(Const::Bool(_)), Some(_)) = (left.literal_const(), right.literal_const())
        && !right.is_boolean()
    {
        return Err(format!("the boolean literal at offset {} cannot be compared with a string or number", left.at));
    }
    Ok(())
}

/// `>`, `>=`, `<`, `<=` and BETWEEN operands: a literal must be a number, and a boolean
/// expression is refused.
fn check_order_operand(node: &Node) -> Result<(), String> {
    let refused = match node.literal_const() {
        Some(c) => !c.is_number(),
        None => node.is_boolean(),
    };
    if refused {
        Err(format!("the operand at offset {} cannot be compared with >, >=, <, <= or BETWEEN", node.at))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_converted_at_compile_time() {
        assert_eq!(integer_literal("2147483647"), Ok(Const::Int(i32::MAX)));
        assert_eq!(integer_literal("2147483648"), Ok(Const::Long(2_147_483_648)));
        assert_eq!(integer_literal("9223372036854775807"), Ok(Const::Long(i64::MAX)));
        assert!(integer_literal("9223372036854775808").is_err());
        assert_eq!(decimal_literal("1.5"), Ok(Const::Double(1.5)));
        assert_eq!(decimal_literal("4.9e-324"), Ok(Const::Double(f64::from_bits(1))));
        for bad in ["0.0", "0e0", ".0", "1e-400", "1e400"] {
            assert!(decimal_literal(bad).is_err(), "{bad}");
        }
        assert_eq!(&*decode_string("''''it''s"), "''it's");
    }

    #[test]
    fn chains_are_flat_and_negation_folds() {
        let Ok(Expr::Or(items)) = parse("a = '1' OR b = '2' OR c = '3' AND d = '4'") else { panic!() };
        assert_eq!(items.len(), 3);
        assert!(matches!(items[2], Expr::And(ref v) if v.len() == 2));
        let Ok(Expr::Order { right, .. }) = parse("a > - -5") else { panic!() };
        assert!(matches!(*right, Expr::Const(Const::Int(5))));
        let Ok(Expr::Order { right, .. }) = parse("a > -b") else { panic!() };
        assert!(matches!(*right, Expr::Const(Const::Null)));
    }
}

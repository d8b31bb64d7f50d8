//! Tokens of RocketMQ's selector grammar, made one at a time as the parser asks for them.
//!
//! The lexer is lazy on purpose: RocketMQ's generated parser never reads past the token after the
//! expression it parsed, so text after that token is not looked at, not even for a lexical error.

use core::fmt;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Tok<'s> {
    Not,
    And,
    Or,
    Between,
    In,
    True,
    False,
    Null,
    Is,
    Contains,
    StartsWith,
    EndsWith,
    /// An integer literal's digits, without its `l`/`L` suffix.
    Integer(&'s str),
    /// A decimal literal as written.
    Decimal(&'s str),
    /// The text between a string literal's quotes, with quotes still doubled.
    Str(&'s str),
    Ident(&'s str),
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    LParen,
    RParen,
    Comma,
    Plus,
    Minus,
    End,
}

impl fmt::Display for Tok<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Tok::Not => "NOT",
            Tok::And => "AND",
            Tok::Or => "OR",
            Tok::Between => "BETWEEN",
            Tok::In => "IN",
            Tok::True => "TRUE",
            Tok::False => "FALSE",
            Tok::Null => "NULL",
            Tok::Is => "IS",
            Tok::Contains => "CONTAINS",
            Tok::StartsWith => "STARTSWITH",
            Tok::EndsWith => "ENDSWITH",
            Tok::Integer(s) | Tok::Decimal(s) | Tok::Ident(s) => s,
            Tok::Str(s) => return write!(f, "'{s}'"),
            Tok::Eq => "=",
            Tok::Ne => "<>",
            Tok::Gt => ">",
            Tok::Ge => ">=",
            Tok::Lt => "<",
            Tok::Le => "<=",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::Comma => ",",
            Tok::Plus => "+",
            Tok::Minus => "-",
            Tok::End => "end of input",
        };
        f.write_str(text)
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Token<'s> {
    pub tok: Tok<'s>,
    /// Byte offset in the expression, for error messages.
    pub at: usize,
}

pub(crate) struct Lexer<'s> {
    src: &'s str,
    pos: usize,
}

const KEYWORDS: [(&str, Tok<'static>); 12] = [
    ("NOT", Tok::Not),
    ("AND", Tok::And),
    ("OR", Tok::Or),
    ("BETWEEN", Tok::Between),
    ("IN", Tok::In),
    ("TRUE", Tok::True),
    ("FALSE", Tok::False),
    ("NULL", Tok::Null),
    ("IS", Tok::Is),
    ("CONTAINS", Tok::Contains),
    ("STARTSWITH", Tok::StartsWith),
    ("ENDSWITH", Tok::EndsWith),
];

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b'$'
}

fn is_ident_part(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$'
}

impl<'s> Lexer<'s> {
    pub fn new(src: &'s str) -> Lexer<'s> {
        Lexer { src, pos: 0 }
    }

    fn byte(&self, at: usize) -> Option<u8> {
        self.src.as_bytes().get(at).copied()
    }

    /// Token boundaries are ASCII bytes, so the slice always exists; the fallback keeps it panic-free.
    fn text(&self, from: usize, to: usize) -> &'s str {
        self.src.get(from..to).unwrap_or_default()
    }

    fn digits_from(&self, mut at: usize) -> usize {
        while self.byte(at).is_some_and(|b| b.is_ascii_digit()) {
            at += 1;
        }
        at
    }

    /// End of an exponent (`e`, optional sign, digits) starting at `at`, if there is one.
    fn exponent_end(&self, at: usize) -> Option<usize> {
        if !matches!(self.byte(at), Some(b'e' | b'E')) {
            return None;
        }
        let mut digits = at + 1;
        if matches!(self.byte(digits), Some(b'+' | b'-')) {
            digits += 1;
        }
        let end = self.digits_from(digits);
        (end > digits).then_some(end)
    }

    /// Skips white space and comments. A `--` comment needs a line end: without one RocketMQ's
    /// lexer reads the dashes as two minus signs.
    fn skip_trivia(&mut self) -> Result<(), String> {
        loop {
            match (self.byte(self.pos), self.byte(self.pos + 1)) {
                (Some(b' ' | b'\t' | b'\n' | b'\r' | 0x0c), _) => self.pos += 1,
                (Some(b'-'), Some(b'-')) => {
                    let rest = self.text(self.pos + 2, self.src.len());
                    match rest.find(['\n', '\r']) {
                        Some(line_end) => self.pos += 2 + line_end + 1,
                        None => return Ok(()),
                    }
                }
                (Some(b'/'), Some(b'*')) => {
                    let rest = self.text(self.pos + 2, self.src.len());
                    match rest.find("*/") {
                        Some(close) => self.pos += 2 + close + 2,
                        None => return Err(format!("unterminated comment at offset {}", self.pos)),
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    pub fn next_token(&mut self) -> Result<Token<'s>, String> {
        self.skip_trivia()?;
        let at = self.pos;
        let Some(first) = self.byte(at) else { return Ok(Token { tok: Tok::End, at }) };
        let (tok, end) = match first {
            b'0'..=b'9' => self.number(at),
            b'.' if self.byte(at + 1).is_some_and(|b| b.is_ascii_digit()) => {
                let digits_end = self.digits_from(at + 1);
                let end = self.exponent_end(digits_end).unwrap_or(digits_end);
                (Tok::Decimal(self.text(at, end)), end)
            }
            b'\'' => self.string(at)?,
            b if is_ident_start(b) => {
                let mut end = at + 1;
                while self.byte(end).is_some_and(is_ident_part) {
                    end += 1;
                }
                let word = self.text(at, end);
                let keyword = KEYWORDS.iter().find(|(k, _)| k.eq_ignore_ascii_case(word));
                (keyword.map_or(Tok::Ident(word), |&(_, tok)| tok), end)
            }
            b'=' => (Tok::Eq, at + 1),
            b'<' => match self.byte(at + 1) {
                Some(b'>') => (Tok::Ne, at + 2),
                Some(b'=') => (Tok::Le, at + 2),
                _ => (Tok::Lt, at + 1),
            },
            b'>' => match self.byte(at + 1) {
                Some(b'=') => (Tok::Ge, at + 2),
                _ => (Tok::Gt, at + 1),
            },
            b'(' => (Tok::LParen, at + 1),
            b')' => (Tok::RParen, at + 1),
            b',' => (Tok::Comma, at + 1),
            b'+' => (Tok::Plus, at + 1),
            b'-' => (Tok::Minus, at + 1),
            _ => {
                let c = self.text(at, self.src.len()).chars().next().unwrap_or('?');
                return Err(format!("unexpected character '{c}' at offset {at}"));
            }
        };
        self.pos = end;
        Ok(Token { tok, at })
    }

    /// The longest number token at `at`, as RocketMQ's lexer picks it: a decimal when a `.` or an
    /// exponent follows the digits; otherwise an integer, where a leading `0` is a token of its
    /// own (`007` is three tokens) and only a non-zero integer takes an `l`/`L` suffix.
    fn number(&self, at: usize) -> (Tok<'s>, usize) {
        let digits_end = self.digits_from(at);
        let mut end = digits_end;
        let mut decimal = false;
        if self.byte(end) == Some(b'.') {
            end = self.digits_from(end + 1);
            decimal = true;
        }
        if let Some(exponent_end) = self.exponent_end(end) {
            end = exponent_end;
            decimal = true;
        }
        if decimal {
            return (Tok::Decimal(self.text(at, end)), end);
        }
        if self.byte(at) == Some(b'0') {
            return (Tok::Integer("0"), at + 1);
        }
        let end = if matches!(self.byte(digits_end), Some(b'l' | b'L')) { digits_end + 1 } else { digits_end };
        (Tok::Integer(self.text(at, digits_end)), end)
    }

    fn string(&self, at: usize) -> Result<(Tok<'s>, usize), String> {
        let mut i = at + 1;
        loop {
            match self.byte(i) {
                None => return Err(format!("unterminated string starting at offset {at}")),
                Some(b'\'') if self.byte(i + 1) == Some(b'\'') => i += 2,
                Some(b'\'') => return Ok((Tok::Str(self.text(at + 1, i)), i + 1)),
                Some(_) => i += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(src: &str) -> Result<Vec<Tok<'_>>, String> {
        let mut lexer = Lexer::new(src);
        let mut out = Vec::new();
        loop {
            let t = lexer.next_token()?.tok;
            if t == Tok::End {
                return Ok(out);
            }
            out.push(t);
        }
    }

    #[test]
    fn numbers_take_the_longest_rocketmq_token() {
        use Tok::*;
        assert_eq!(
            tokens("12 12L 12l 0 0L 007").unwrap(),
            [
                Integer("12"),
                Integer("12"),
                Integer("12"),
                Integer("0"),
                Integer("0"),
                Ident("L"),
                Integer("0"),
                Integer("0"),
                Integer("7")
            ]
        );
        assert_eq!(
            tokens("1.5 5. .5 5e3 5.E-3 00.5 5e 1.5.3").unwrap(),
            [
                Decimal("1.5"),
                Decimal("5."),
                Decimal(".5"),
                Decimal("5e3"),
                Decimal("5.E-3"),
                Decimal("00.5"),
                Integer("5"),
                Ident("e"),
                Decimal("1.5"),
                Decimal(".3")
            ]
        );
    }

    #[test]
    fn keywords_ignore_case_identifiers_do_not() {
        use Tok::*;
        assert_eq!(
            tokens("not AnD Or bEtWeEn In tRuE false NULL is Contains startsWith ENDSWITH").unwrap(),
            [Not, And, Or, Between, In, True, False, Null, Is, Contains, StartsWith, EndsWith]
        );
        assert_eq!(tokens("Notx $a _b1 a$2").unwrap(), [Ident("Notx"), Ident("$a"), Ident("_b1"), Ident("a$2")]);
    }

    #[test]
    fn strings_operators_and_comments() {
        use Tok::*;
        assert_eq!(tokens("'it''s' '' 'é'").unwrap(), [Str("it''s"), Str(""), Str("é")]);
        assert_eq!(
            tokens("= <> > >= < <= ( ) , + -").unwrap(),
            [Eq, Ne, Gt, Ge, Lt, Le, LParen, RParen, Comma, Plus, Minus]
        );
        assert_eq!(tokens("a /* b */ c -- d\ne").unwrap(), [Ident("a"), Ident("c"), Ident("e")]);
        assert_eq!(tokens("a --b").unwrap(), [Ident("a"), Minus, Minus, Ident("b")]);
        assert_eq!(tokens("a/**/b").unwrap(), [Ident("a"), Ident("b")]);
        for bad in ["'open", "a /* open", "a /*/", "#", "a != b", "é", ". 5", "a / b", "\"a\""] {
            assert!(tokens(bad).is_err(), "{bad:?}");
        }
    }
}

//! Tag subscriptions, with RocketMQ's rules: `*`, an empty or missing expression match every
//! message; otherwise the expression is split on `||`, each piece trimmed and empty pieces
//! dropped (nothing left is an error), and a message matches when its tag equals one piece exactly
//! (case-sensitive). A message without a tag matches only the match-all forms.
//!
//! ConsumeQueue records carry the tag's hash, so most non-matching messages are passed over
//! without reading them; the exact comparison settles hash collisions.

use std::collections::BTreeSet;

use crate::store::tag_hash;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagFilter {
    All,
    Tags { tags: BTreeSet<String>, hashes: BTreeSet<u64> },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("illegal tag expression {0:?}: no tag left after splitting on ||")]
pub struct IllegalTagExpression(pub String);

impl TagFilter {
    pub fn parse(expression: &str) -> Result<TagFilter, IllegalTagExpression> {
        let trimmed = expression.trim();
        if trimmed.is_empty() || trimmed == "*" {
            return Ok(TagFilter::All);
        }
        let tags: BTreeSet<String> =
            trimmed.split("||").map(str::trim).filter(|t| !t.is_empty()).map(str::to_string).collect();
        if tags.is_empty() {
            return Err(IllegalTagExpression(expression.to_string()));
        }
        let hashes = tags.iter().map(|t| tag_hash(t)).collect();
        Ok(TagFilter::Tags { tags, hashes })
    }

    /// False only if no message with this tag hash can match.
    pub fn may_match(&self, hash: u64) -> bool {
        match self {
            TagFilter::All => true,
            TagFilter::Tags { hashes, .. } => hashes.contains(&hash),
        }
    }

    /// `tag` is "" for a message without one.
    pub fn matches(&self, tag: &str) -> bool {
        match self {
            TagFilter::All => true,
            TagFilter::Tags { tags, .. } => !tag.is_empty() && tags.contains(tag),
        }
    }

    pub fn is_all(&self) -> bool {
        matches!(self, TagFilter::All)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RocketMQ's cases: the repository's copy, and the shared originals when checked out beside it.
    #[test]
    fn conformance_cases_from_rocketmq() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let mut cases = 0;
        for dir in ["testdata/conformance", "../shared/conformance"] {
            let Ok(text) = std::fs::read_to_string(format!("{root}/{dir}/tag_public.tsv")) else { continue };
            for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
                let cols: Vec<&str> = line.split('\t').collect();
                let (expr, tag, expected) = (cols[0], cols[1], cols[2]);
                let delivered = TagFilter::parse(expr).is_ok_and(|f| f.may_match(tag_hash(tag)) && f.matches(tag));
                assert_eq!(delivered, expected == "true", "{expr:?} on tag {tag:?}");
                cases += 1;
            }
        }
        assert!(cases >= 20, "read {cases} cases");
    }

    #[test]
    fn match_all_forms_and_errors() {
        for all in ["*", "", "  ", " * "] {
            assert!(TagFilter::parse(all).unwrap().matches(""), "{all:?} matches an untagged message");
        }
        for bad in ["||", " || || "] {
            assert!(TagFilter::parse(bad).is_err(), "{bad:?}");
        }
        let f = TagFilter::parse("a || || b").unwrap();
        assert!(f.matches("a") && f.matches("b") && !f.matches("A") && !f.matches(""));
    }
}

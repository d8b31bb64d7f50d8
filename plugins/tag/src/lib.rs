//! The built-in tag filter, with RocketMQ's rules: `*`, an empty or blank expression match every
//! message; otherwise the expression is split on `||`, each piece trimmed and empty pieces
//! dropped (nothing left is an error), and a message matches when its tag equals one piece
//! exactly (case-sensitive). A message without a tag matches only the match-all forms.
//!
//! The broker compares the ConsumeQueue record's tag hash before it reads a message, so this
//! plugin only settles hash collisions and the exact rule.

use rockraft_plugin_sdk::{Filter, Message, filter};

#[filter(name = "tag")]
pub enum TagFilter {
    All,
    /// Sorted, without duplicates.
    Tags(Vec<String>),
}

impl Filter for TagFilter {
    fn open(expression: &str) -> Result<Self, String> {
        let trimmed = expression.trim();
        if trimmed.is_empty() || trimmed == "*" {
            return Ok(TagFilter::All);
        }
        let mut tags: Vec<String> =
            trimmed.split("||").map(str::trim).filter(|t| !t.is_empty()).map(str::to_string).collect();
        if tags.is_empty() {
            return Err(format!("no tag left in {expression:?} after splitting on ||"));
        }
        tags.sort();
        tags.dedup();
        Ok(TagFilter::Tags(tags))
    }

    fn matches(&self, message: &Message<'_>) -> Result<bool, String> {
        Ok(match (self, message.tag()) {
            (TagFilter::All, _) => true,
            (TagFilter::Tags(tags), Some(tag)) => tags.binary_search_by(|t| t.as_str().cmp(tag)).is_ok(),
            (TagFilter::Tags(_), None) => false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rockraft_plugin_sdk::testing::TestMessage;

    #[test]
    fn rules() {
        let tagged = |t: &str| TestMessage::new("T").tag(t);
        for all in ["*", "", "  ", " * "] {
            assert_eq!(TestMessage::new("T").filter(&TagFilter::open(all).unwrap()), Ok(true), "{all:?}");
        }
        for bad in ["||", " || || "] {
            assert!(TagFilter::open(bad).is_err(), "{bad:?}");
        }
        let f = TagFilter::open("a || || b").unwrap();
        assert_eq!(tagged("a").filter(&f), Ok(true));
        assert_eq!(tagged("b").filter(&f), Ok(true));
        assert_eq!(tagged("A").filter(&f), Ok(false));
        assert_eq!(TestMessage::new("T").filter(&f), Ok(false));
    }
}

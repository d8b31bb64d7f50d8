//! A RockRaft transaction-checker plugin with a business rule: commit an order's half message
//! when the producer already marked it paid, roll it back when nobody resolved it in time, and
//! otherwise ask the producer.
//!
//! # Configuration
//!
//! Space-separated `key=value` pairs, each optional:
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `property` | `order_state` | the user property holding the order's state |
//! | `commit` | `paid` | the state that commits the message |
//! | `rollback_after_ms` | `600000` (10 minutes) | the age at which an unresolved message is rolled back |
//!
//! e.g. `property=order_state commit=paid rollback_after_ms=600000`. Values cannot contain
//! spaces. An unknown or repeated key, an empty value, or a `rollback_after_ms` that is not a
//! non-negative integer is refused when the topic is bound.
//!
//! # Decision
//!
//! For each unresolved half message, at each check:
//! 1. its property `property` equals `commit` (exactly, case-sensitive) → COMMIT;
//! 2. else, it is at least `rollback_after_ms` old (since it was stored) → ROLLBACK;
//! 3. else → ASK_PRODUCER (a producer of the topic answers with its own transaction checker).
//!
//! A half message's properties are the ones it was sent with: this rule suits producers that
//! sometimes know the outcome when they send (the order was paid before the event went out) and
//! otherwise leave it to their check-back, with a deadline.

use rockraft_plugin_sdk::{Decision, Message, TransactionChecker, transaction_checker};

/// The configuration keys, in the order the error messages list them.
const KEYS: &str = "property, commit, rollback_after_ms";

#[transaction_checker]
#[derive(Debug, PartialEq, Eq)]
pub struct OrderChecker {
    property: String,
    commit: String,
    rollback_after_ms: i64,
}

impl Default for OrderChecker {
    fn default() -> Self {
        OrderChecker { property: "order_state".to_string(), commit: "paid".to_string(), rollback_after_ms: 600_000 }
    }
}

impl TransactionChecker for OrderChecker {
    fn open(config: &str) -> Result<Self, String> {
        let mut c = OrderChecker::default();
        let mut seen: Vec<&str> = Vec::new();
        for pair in config.split_whitespace() {
            let (key, value) =
                pair.split_once('=').ok_or_else(|| format!("expected key=value, got {pair:?} (keys: {KEYS})"))?;
            if seen.contains(&key) {
                return Err(format!("{key} is given twice"));
            }
            seen.push(key);
            if value.is_empty() && matches!(key, "property" | "commit") {
                return Err(format!("{key} is empty"));
            }
            match key {
                "property" => c.property = value.to_string(),
                "commit" => c.commit = value.to_string(),
                "rollback_after_ms" => {
                    c.rollback_after_ms = value.parse().ok().filter(|ms: &i64| *ms >= 0).ok_or_else(|| {
                        format!("rollback_after_ms must be a whole number of milliseconds ≥ 0, got {value:?}")
                    })?;
                }
                other => return Err(format!("unknown key {other:?} (keys: {KEYS})")),
            }
        }
        Ok(c)
    }

    fn check(&self, message: &Message<'_>) -> Decision {
        if message.property(&self.property) == Some(self.commit.as_str()) {
            Decision::Commit
        } else if message.age_ms >= self.rollback_after_ms {
            Decision::Rollback
        } else {
            Decision::AskProducer
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rockraft_plugin_sdk::testing::TestMessage;

    fn half(age_ms: i64) -> TestMessage {
        TestMessage::new("Orders").key("order-17").age_ms(age_ms)
    }

    #[test]
    fn configuration() {
        assert_eq!(OrderChecker::open(""), Ok(OrderChecker::default()));
        assert_eq!(OrderChecker::open("  \n "), Ok(OrderChecker::default()));
        assert_eq!(
            OrderChecker::open(" property=state  commit=SETTLED\trollback_after_ms=0 "),
            Ok(OrderChecker { property: "state".into(), commit: "SETTLED".into(), rollback_after_ms: 0 })
        );
        assert_eq!(
            OrderChecker::open("commit=a=b"),
            Ok(OrderChecker { commit: "a=b".into(), ..OrderChecker::default() })
        );
    }

    #[test]
    fn bad_configuration_is_refused_with_a_reason() {
        for (config, reason) in [
            ("order_state", "expected key=value, got \"order_state\""),
            ("=paid", "unknown key \"\""),
            ("state=paid", "unknown key \"state\" (keys: property, commit, rollback_after_ms)"),
            ("Property=x", "unknown key \"Property\""),
            ("property=", "property is empty"),
            ("commit=", "commit is empty"),
            ("commit=paid commit=done", "commit is given twice"),
            ("rollback_after_ms=", "must be a whole number"),
            ("rollback_after_ms=-1", "must be a whole number"),
            ("rollback_after_ms=10m", "must be a whole number"),
            ("rollback_after_ms=1.5", "must be a whole number"),
            ("rollback_after_ms=99999999999999999999", "must be a whole number"),
        ] {
            let got = OrderChecker::open(config).expect_err(config);
            assert!(got.contains(reason), "{config:?}: {got:?} lacks {reason:?}");
        }
    }

    #[test]
    fn commits_paid_orders_whatever_their_age() {
        let c = OrderChecker::open("").unwrap();
        for age in [0, 599_999, 600_000, i64::MAX] {
            assert_eq!(half(age).property("order_state", "paid").check(&c), Decision::Commit, "age {age}");
        }
        // Other properties around it do not matter.
        let m = half(5).property("region", "eu").property("order_state", "paid").property("x", "");
        assert_eq!(m.check(&c), Decision::Commit);
    }

    #[test]
    fn asks_the_producer_until_the_deadline_then_rolls_back() {
        let c = OrderChecker::open("").unwrap();
        for m in [half(0), half(599_999).attempts(40), half(10).property("order_state", "created")] {
            assert_eq!(m.check(&c), Decision::AskProducer, "{m:?}");
        }
        for m in [half(600_000), half(600_001).property("order_state", "created"), half(i64::MAX)] {
            assert_eq!(m.check(&c), Decision::Rollback, "{m:?}");
        }
        // The comparison is exact: case, surrounding spaces and the property's name all count.
        for m in [
            half(10).property("order_state", "PAID"),
            half(10).property("order_state", " paid"),
            half(10).property("order_state", ""),
            half(10).property("Order_State", "paid"),
            half(10).tag("paid"),
        ] {
            assert_eq!(m.check(&c), Decision::AskProducer, "{m:?}");
        }
    }

    #[test]
    fn configured_rule() {
        let c = OrderChecker::open("property=state commit=SETTLED rollback_after_ms=1000").unwrap();
        assert_eq!(half(999).property("state", "SETTLED").check(&c), Decision::Commit);
        assert_eq!(half(999).property("order_state", "paid").check(&c), Decision::AskProducer);
        assert_eq!(half(1000).property("state", "OPEN").check(&c), Decision::Rollback);
        // rollback_after_ms=0: anything not committed is rolled back at its first check.
        let now = OrderChecker::open("rollback_after_ms=0").unwrap();
        assert_eq!(half(0).check(&now), Decision::Rollback);
        assert_eq!(half(0).property("order_state", "paid").check(&now), Decision::Commit);
    }
}

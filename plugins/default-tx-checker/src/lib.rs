//! The built-in transaction checker: ask a producer of the topic until the half message is too
//! old or was checked too often, then roll it back.
//!
//! Configuration (the broker passes its `[broker]` settings; keys optional):
//! `max_age_ms=14400000 max_checks=0` (0: no limit on checks).

use rockraft_plugin_sdk::{Decision, Message, TransactionChecker, transaction_checker};

#[transaction_checker(name = "default-tx-checker")]
pub struct DefaultChecker {
    max_age_ms: i64,
    max_checks: u32,
}

impl TransactionChecker for DefaultChecker {
    fn open(config: &str) -> Result<Self, String> {
        let mut c = DefaultChecker { max_age_ms: 4 * 3600 * 1000, max_checks: 0 };
        for pair in config.split_whitespace() {
            let (key, value) = pair.split_once('=').ok_or_else(|| format!("expected key=value, got {pair:?}"))?;
            match key {
                "max_age_ms" => c.max_age_ms = value.parse().map_err(|_| format!("bad max_age_ms {value:?}"))?,
                "max_checks" => c.max_checks = value.parse().map_err(|_| format!("bad max_checks {value:?}"))?,
                other => return Err(format!("unknown key {other:?} (max_age_ms, max_checks)")),
            }
        }
        Ok(c)
    }

    fn check(&self, message: &Message<'_>) -> Decision {
        let too_old = message.age_ms >= self.max_age_ms;
        let too_often = self.max_checks > 0 && message.attempts >= self.max_checks;
        if too_old || too_often { Decision::Rollback } else { Decision::AskProducer }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rockraft_plugin_sdk::testing::TestMessage;

    #[test]
    fn asks_until_too_old_or_checked_too_often() {
        let c = DefaultChecker::open("max_age_ms=1000 max_checks=3").unwrap();
        let m = |age, checks| TestMessage::new("T").age_ms(age).attempts(checks);
        assert_eq!(m(999, 2).check(&c), Decision::AskProducer);
        assert_eq!(m(1000, 0).check(&c), Decision::Rollback);
        assert_eq!(m(10, 3).check(&c), Decision::Rollback);
        let unlimited = DefaultChecker::open("max_age_ms=1000").unwrap();
        assert_eq!(m(10, 1_000_000).check(&unlimited), Decision::AskProducer);
        assert!(DefaultChecker::open("max_age=1").is_err());
    }
}

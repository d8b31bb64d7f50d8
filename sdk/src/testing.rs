//! Unit-testing a plugin natively: build a message, encode it as the broker would, and run the
//! plugin's logic on the parsed view.
//!
//! ```
//! use rockraft_plugin_sdk::testing::TestMessage;
//! let m = TestMessage::new("Orders").tag("paid").property("region", "eu");
//! m.with_view(|v| assert_eq!(v.property("region"), Some("eu")));
//! ```

use crate::view::{Batch, BatchWriter, Message, MessageData};
use crate::{Decision, Filter, TransactionChecker};

#[derive(Clone, Debug, Default)]
pub struct TestMessage {
    pub topic: String,
    pub tag: String,
    pub keys: Vec<String>,
    pub properties: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub attempts: u32,
    pub age_ms: i64,
}

impl TestMessage {
    pub fn new(topic: &str) -> TestMessage {
        TestMessage { topic: topic.to_string(), ..Default::default() }
    }
    pub fn tag(mut self, tag: &str) -> Self {
        self.tag = tag.to_string();
        self
    }
    pub fn key(mut self, key: &str) -> Self {
        self.keys.push(key.to_string());
        self
    }
    pub fn property(mut self, key: &str, value: &str) -> Self {
        self.properties.push((key.to_string(), value.to_string()));
        self
    }
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }
    /// Checks so far (checkers) or deliveries so far (filters).
    pub fn attempts(mut self, n: u32) -> Self {
        self.attempts = n;
        self
    }
    pub fn age_ms(mut self, age: i64) -> Self {
        self.age_ms = age;
        self
    }

    /// Runs `f` on the message as a plugin sees it (bodies included).
    pub fn with_view<R>(&self, f: impl FnOnce(&Message<'_>) -> R) -> R {
        let mut buf = Vec::new();
        let mut w = BatchWriter::new(&mut buf, 0, true);
        w.push(&MessageData {
            topic: &self.topic,
            tag: &self.tag,
            keys: &self.keys,
            properties: &self.properties,
            body: &self.body,
            attempts: self.attempts,
            age_ms: self.age_ms,
            ..Default::default()
        });
        let batch = Batch::parse(&buf).expect("the encoder's own output parses");
        let m = batch.messages().next().expect("one message").expect("the encoder's own output parses");
        f(&m)
    }

    pub fn filter<F: Filter>(&self, filter: &F) -> Result<bool, String> {
        self.with_view(|m| filter.matches(m))
    }

    pub fn check<C: TransactionChecker>(&self, checker: &C) -> Decision {
        self.with_view(|m| checker.check(m))
    }
}

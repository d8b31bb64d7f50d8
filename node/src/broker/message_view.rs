//! A stored message read in place, for the paths that look at many messages and keep few.
//!
//! Screening a queue through a filter reads the tag, keys and properties of every record it passes
//! over. Decoding each into an owned `StoredMessage` (a string per field, a map of properties)
//! cost more than running the filter; a view borrows from the entry's bytes and allocates
//! nothing. Only what a filter or a plan reads is exposed: a delivery still decodes the message.

use prost::encoding::{WireType, decode_key, decode_varint};

use crate::broker::BrokerError;

/// Field numbers of `StoredMessage` (proto/rockraft/v1/broker.proto).
const MESSAGE_ID: u32 = 1;
const TAG: u32 = 2;
const KEYS: u32 = 3;
const PROPERTIES: u32 = 4;
const BODY: u32 = 5;
const BORN_TIMESTAMP_MS: u32 = 6;
const MESSAGE_GROUP: u32 = 8;
/// Field numbers of a map entry.
const MAP_KEY: u32 = 1;
const MAP_VALUE: u32 = 2;

/// An encoded `StoredMessage`, checked once (wire format, UTF-8 of every string it exposes) so
/// its accessors never fail.
#[derive(Clone, Copy, Debug)]
pub struct MessageView<'a> {
    encoded: &'a [u8],
    pub message_id: &'a str,
    pub tag: &'a str,
    pub message_group: &'a str,
    pub body: &'a [u8],
    pub born_timestamp_ms: i64,
    key_count: usize,
    property_count: usize,
}

/// One field of an encoded message.
enum Value<'a> {
    Varint(u64),
    Delimited(&'a [u8]),
    /// A fixed-width field: nothing here reads one.
    Fixed,
}

/// Why bytes are not an encoded `StoredMessage`.
#[derive(Debug, thiserror::Error)]
enum Malformed {
    #[error(transparent)]
    Wire(#[from] prost::DecodeError),
    #[error("a field runs past the end")]
    PastEnd,
    #[error("groups are not used")]
    Group,
    #[error("a string is not UTF-8")]
    NotUtf8,
    #[error("field {0} has the wrong wire type")]
    WireType(u32),
}

/// The fields of an encoded message, in the order written.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn next_field(&mut self) -> Result<Option<(u32, Value<'a>)>, Malformed> {
        if self.0.is_empty() {
            return Ok(None);
        }
        let (number, wire) = decode_key(&mut self.0)?;
        let value = match wire {
            WireType::Varint => Value::Varint(decode_varint(&mut self.0)?),
            WireType::LengthDelimited => {
                let len = decode_varint(&mut self.0)?;
                let len = usize::try_from(len).ok().filter(|&n| n <= self.0.len()).ok_or(Malformed::PastEnd)?;
                let (value, rest) = self.0.split_at(len);
                self.0 = rest;
                Value::Delimited(value)
            }
            WireType::SixtyFourBit | WireType::ThirtyTwoBit => {
                let width = if wire == WireType::SixtyFourBit { 8 } else { 4 };
                self.0 = self.0.get(width..).ok_or(Malformed::PastEnd)?;
                Value::Fixed
            }
            WireType::StartGroup | WireType::EndGroup => return Err(Malformed::Group),
        };
        Ok(Some((number, value)))
    }

    /// The length-delimited fields numbered `wanted`, for a message already checked.
    fn delimited(encoded: &'a [u8], wanted: u32) -> impl Iterator<Item = &'a [u8]> + 'a {
        let mut fields = Fields(encoded);
        std::iter::from_fn(move || fields.next_field().ok().flatten()).filter_map(move |(number, value)| match value {
            Value::Delimited(bytes) if number == wanted => Some(bytes),
            _ => None,
        })
    }
}

fn text(bytes: &[u8]) -> Result<&str, Malformed> {
    std::str::from_utf8(bytes).map_err(|_| Malformed::NotUtf8)
}

/// A map entry's key and value.
fn map_entry(entry: &[u8]) -> Result<(&str, &str), Malformed> {
    let (mut key, mut value) = ("", "");
    let mut fields = Fields(entry);
    while let Some((number, field)) = fields.next_field()? {
        match (number, field) {
            (MAP_KEY, Value::Delimited(b)) => key = text(b)?,
            (MAP_VALUE, Value::Delimited(b)) => value = text(b)?,
            _ => {}
        }
    }
    Ok((key, value))
}

impl<'a> MessageView<'a> {
    /// Reads an encoded `StoredMessage`. As with decoding, a field written twice counts once, as
    /// its last value; fields this view does not expose are skipped.
    pub fn parse(encoded: &'a [u8]) -> Result<MessageView<'a>, BrokerError> {
        Self::parse_fields(encoded).map_err(|e| BrokerError::CorruptEntry(format!("stored message: {e}")))
    }

    fn parse_fields(encoded: &'a [u8]) -> Result<MessageView<'a>, Malformed> {
        let mut view = MessageView {
            encoded,
            message_id: "",
            tag: "",
            message_group: "",
            body: &[],
            born_timestamp_ms: 0,
            key_count: 0,
            property_count: 0,
        };
        let mut fields = Fields(encoded);
        while let Some((number, value)) = fields.next_field()? {
            match (number, value) {
                (MESSAGE_ID, Value::Delimited(b)) => view.message_id = text(b)?,
                (TAG, Value::Delimited(b)) => view.tag = text(b)?,
                (KEYS, Value::Delimited(b)) => {
                    text(b)?;
                    view.key_count += 1;
                }
                (PROPERTIES, Value::Delimited(b)) => {
                    map_entry(b)?;
                    view.property_count += 1;
                }
                (BODY, Value::Delimited(b)) => view.body = b,
                (BORN_TIMESTAMP_MS, Value::Varint(v)) => view.born_timestamp_ms = v as i64,
                (MESSAGE_GROUP, Value::Delimited(b)) => view.message_group = text(b)?,
                (MESSAGE_ID | TAG | KEYS | PROPERTIES | BODY | BORN_TIMESTAMP_MS | MESSAGE_GROUP, _) => {
                    return Err(Malformed::WireType(number));
                }
                _ => {}
            }
        }
        Ok(view)
    }

    pub fn keys(&self) -> impl ExactSizeIterator<Item = &'a str> + 'a {
        let keys = Fields::delimited(self.encoded, KEYS).map(|b| std::str::from_utf8(b).unwrap_or_default());
        Counted { inner: keys, left: self.key_count }
    }

    /// User properties in the order stored. A producer's properties are a map, so each key is
    /// there once.
    pub fn properties(&self) -> impl ExactSizeIterator<Item = (&'a str, &'a str)> + 'a {
        let entries = Fields::delimited(self.encoded, PROPERTIES).map(|b| map_entry(b).unwrap_or_default());
        Counted { inner: entries, left: self.property_count }
    }

    /// The property `name`, if set.
    pub fn property(&self, name: &str) -> Option<&'a str> {
        self.properties().find(|(k, _)| *k == name).map(|(_, v)| v)
    }
}

/// An iterator whose length was counted when the message was checked.
struct Counted<I> {
    inner: I,
    left: usize,
}

impl<I: Iterator> Iterator for Counted<I> {
    type Item = I::Item;

    fn next(&mut self) -> Option<I::Item> {
        let item = self.inner.next()?;
        self.left = self.left.saturating_sub(1);
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<I: Iterator> ExactSizeIterator for Counted<I> {}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use prost::Message;
    use rockraft_proto::rockraft::StoredMessage;

    use super::*;

    fn stored() -> StoredMessage {
        StoredMessage {
            message_id: "01ABC".into(),
            tag: "TagA".into(),
            keys: vec!["order-1".into(), "customer-42".into()],
            properties: [("region", "Hangzhou"), ("price", "42"), ("empty", "")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: Bytes::from_static(b"hello"),
            born_timestamp_ms: 1_700_000_000_123,
            born_host: "10.0.0.1".into(),
            message_group: "g1".into(),
            message_type: 2,
            delivery_timestamp_ms: -5,
            transaction_recovery_ms: 7,
            priority_plus_one: 4,
            lite_topic: "chat-7".into(),
            sender: "orders-app".into(),
        }
    }

    #[test]
    fn a_view_reads_what_decoding_reads() {
        let message = stored();
        let encoded = message.encode_to_vec();
        let view = MessageView::parse(&encoded).unwrap();
        assert_eq!(view.message_id, message.message_id);
        assert_eq!(view.tag, message.tag);
        assert_eq!(view.message_group, message.message_group);
        assert_eq!(view.body, &message.body[..]);
        assert_eq!(view.born_timestamp_ms, message.born_timestamp_ms);
        assert_eq!(view.keys().len(), 2);
        assert_eq!(view.keys().collect::<Vec<_>>(), message.keys);
        let properties = view.properties();
        assert_eq!(properties.len(), 3);
        let mut seen: Vec<(String, String)> = properties.map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut expected: Vec<(String, String)> = message.properties.clone().into_iter().collect();
        seen.sort();
        expected.sort();
        assert_eq!(seen, expected);
        assert_eq!(view.property("price"), Some("42"));
        assert_eq!(view.property("empty"), Some(""));
        assert_eq!(view.property("missing"), None);
    }

    #[test]
    fn an_empty_message_has_empty_fields() {
        let view = MessageView::parse(&[]).unwrap();
        assert_eq!((view.message_id, view.tag, view.body.len()), ("", "", 0));
        assert_eq!((view.keys().len(), view.properties().len()), (0, 0));
    }

    #[test]
    fn a_later_copy_of_a_field_wins_as_in_decoding() {
        let mut encoded = stored().encode_to_vec();
        encoded.extend(StoredMessage { tag: "TagB".into(), ..Default::default() }.encode_to_vec());
        let decoded = StoredMessage::decode(&encoded[..]).unwrap();
        assert_eq!(MessageView::parse(&encoded).unwrap().tag, decoded.tag);
    }

    #[test]
    fn a_damaged_message_is_an_error_never_a_panic() {
        let encoded = stored().encode_to_vec();
        for cut in 0..encoded.len() {
            let _ = MessageView::parse(&encoded[..cut]);
            let mut flipped = encoded.clone();
            flipped[cut] ^= 0xFF;
            if let Ok(view) = MessageView::parse(&flipped) {
                // Whatever was accepted reads without failing.
                let _ = (view.keys().count(), view.properties().count());
            }
        }
        // A string that is not UTF-8 is refused, as decoding refuses it.
        let bad = [0x12, 0x02, 0xC3, 0x28];
        assert!(StoredMessage::decode(&bad[..]).is_err());
        assert!(matches!(MessageView::parse(&bad), Err(BrokerError::CorruptEntry(_))));
        // A truncated length-delimited field.
        assert!(MessageView::parse(&[0x0A, 0x05, b'a']).is_err());
    }
}

//! The batch of message views the host hands a plugin in one call, and its encoder.
//!
//! Layout (version 1, little-endian):
//!
//! ```text
//! header   u16 view_version | u16 header_len | u32 count | i64 now_ms | u32 flags | u32 reserved
//! message  u32 record_len (bytes after this field)
//!          u16 fixed_len (bytes of fixed fields after this field)
//!            u64 queue_offset | i64 store_ms | i64 born_ms | u32 body_len | u32 attempts
//!            u32 queue_id | u32 flags | i64 age_ms
//!          str topic | str tag | u16 key_count, str × key_count
//!          u16 property_count, (str key, long_str value) × property_count
//!          long_str body (empty unless the batch header's BODIES flag is set)
//! str      u16 length, UTF-8 bytes        long_str  u32 length, bytes
//! ```
//!
//! Readers skip what they do not know: header bytes past `header_len`, fixed fields past
//! `fixed_len`, and record bytes past the body. New fields are added at those places without a
//! major ABI bump. Parsing borrows from the input: no allocation per message.

use core::fmt;

pub const VIEW_VERSION: u16 = 1;
const HEADER_LEN: u16 = 24;
const FIXED_LEN: u16 = 48;

/// Header flag: message bodies are included.
pub const FLAG_BODIES: u32 = 1;

/// A batch that does not follow the layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewError(pub &'static str);

impl fmt::Display for ViewError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed message batch: {}", self.0)
    }
}

impl std::error::Error for ViewError {}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ViewError> {
        if self.bytes.len() < n {
            return Err(ViewError("truncated"));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }
    fn u16(&mut self) -> Result<u16, ViewError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap_or_default()))
    }
    fn u32(&mut self) -> Result<u32, ViewError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap_or_default()))
    }
    fn u64(&mut self) -> Result<u64, ViewError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap_or_default()))
    }
    fn str(&mut self) -> Result<&'a str, ViewError> {
        core::str::from_utf8(self.short()?).map_err(|_| ViewError("a string is not UTF-8"))
    }
    /// A u16-length-prefixed byte string, not validated (skipping is cheaper than checking).
    fn short(&mut self) -> Result<&'a [u8], ViewError> {
        let n = self.u16()? as usize;
        self.take(n)
    }
    fn long(&mut self) -> Result<&'a [u8], ViewError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// Skips `n` strings, returning the bytes they span.
    fn strs(&mut self, n: usize) -> Result<&'a [u8], ViewError> {
        let start = self.bytes;
        for _ in 0..n {
            self.short()?;
        }
        Ok(&start[..start.len() - self.bytes.len()])
    }
}

/// One call's messages.
#[derive(Clone, Copy)]
pub struct Batch<'a> {
    now_ms: i64,
    count: u32,
    flags: u32,
    records: &'a [u8],
}

impl<'a> Batch<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<Batch<'a>, ViewError> {
        let mut r = Reader { bytes };
        let version = r.u16()?;
        if version != VIEW_VERSION {
            return Err(ViewError("unknown view version"));
        }
        let header_len = r.u16()? as usize;
        if header_len < HEADER_LEN as usize || header_len > bytes.len() {
            return Err(ViewError("bad header length"));
        }
        let count = r.u32()?;
        let now_ms = r.u64()? as i64;
        let flags = r.u32()?;
        Ok(Batch { now_ms, count, flags, records: &bytes[header_len..] })
    }

    /// The host's clock when it made the batch (plugins have no clock of their own).
    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether message bodies are included (a plugin asks for them in its manifest).
    pub fn has_bodies(&self) -> bool {
        self.flags & FLAG_BODIES != 0
    }

    /// The messages in order; an item is an error if its record is malformed, and the iteration
    /// stops after one (the records after it cannot be found).
    pub fn messages(&self) -> Messages<'a> {
        Messages { rest: self.records, left: self.count }
    }
}

pub struct Messages<'a> {
    rest: &'a [u8],
    left: u32,
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<Message<'a>, ViewError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let mut r = Reader { bytes: self.rest };
        let record = r.long();
        let parsed = record.and_then(Message::parse);
        match parsed {
            Ok(m) => {
                self.rest = r.bytes;
                Some(Ok(m))
            }
            Err(e) => {
                self.left = 0;
                Some(Err(e))
            }
        }
    }
}

/// One message as a plugin sees it. Strings borrow from the batch.
#[derive(Clone, Copy, Debug, Default)]
pub struct Message<'a> {
    pub queue_offset: u64,
    pub queue_id: u32,
    pub store_ms: i64,
    pub born_ms: i64,
    /// The body's length, also when the body itself is not included.
    pub body_len: u32,
    /// Deliveries so far (filters) or checks so far (transaction checkers).
    pub attempts: u32,
    /// For transaction checkers: how long ago the half message was stored.
    pub age_ms: i64,
    topic: &'a [u8],
    tag: &'a [u8],
    key_count: u16,
    keys: &'a [u8],
    property_count: u16,
    properties: &'a [u8],
    body: &'a [u8],
}

impl<'a> Message<'a> {
    fn parse(record: &'a [u8]) -> Result<Message<'a>, ViewError> {
        let mut r = Reader { bytes: record };
        let fixed_len = r.u16()? as usize;
        if fixed_len < FIXED_LEN as usize {
            return Err(ViewError("fixed part too short"));
        }
        let mut f = Reader { bytes: r.take(fixed_len)? };
        let queue_offset = f.u64()?;
        let store_ms = f.u64()? as i64;
        let born_ms = f.u64()? as i64;
        let body_len = f.u32()?;
        let attempts = f.u32()?;
        let queue_id = f.u32()?;
        let _flags = f.u32()?;
        let age_ms = f.u64()? as i64;
        // Strings are checked to be UTF-8 when read, not here: most plugins read few of them.
        let topic = r.short()?;
        let tag = r.short()?;
        let key_count = r.u16()?;
        let keys = r.strs(key_count as usize)?;
        let property_count = r.u16()?;
        let start = r.bytes;
        for _ in 0..property_count {
            r.short()?;
            r.long()?;
        }
        let properties = &start[..start.len() - r.bytes.len()];
        let body = r.long()?;
        Ok(Message {
            queue_offset,
            queue_id,
            store_ms,
            born_ms,
            body_len,
            attempts,
            age_ms,
            topic,
            tag,
            key_count,
            keys,
            property_count,
            properties,
            body,
        })
    }

    pub fn topic(&self) -> &'a str {
        core::str::from_utf8(self.topic).unwrap_or_default()
    }

    /// The message's tag; `None` if it has none.
    pub fn tag(&self) -> Option<&'a str> {
        if self.tag.is_empty() { None } else { core::str::from_utf8(self.tag).ok() }
    }

    pub fn keys(&self) -> impl Iterator<Item = &'a str> + 'a {
        let mut r = Reader { bytes: self.keys };
        (0..self.key_count).map_while(move |_| r.str().ok())
    }

    /// The user property `name`, if set. Keys are compared as bytes; only the value found is
    /// checked to be UTF-8 (filters look properties up per message, so this is the hot path).
    pub fn property(&self, name: &str) -> Option<&'a str> {
        let mut r = Reader { bytes: self.properties };
        for _ in 0..self.property_count {
            let key = r.short().ok()?;
            let value = r.long().ok()?;
            if key == name.as_bytes() {
                return core::str::from_utf8(value).ok();
            }
        }
        None
    }

    /// All user properties, in the order the producer set them.
    pub fn properties(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let mut r = Reader { bytes: self.properties };
        (0..self.property_count).map_while(move |_| {
            let key = r.str().ok()?;
            let value = core::str::from_utf8(r.long().ok()?).ok()?;
            Some((key, value))
        })
    }

    /// The body, when the plugin's manifest asks for bodies; `None` otherwise.
    pub fn body(&self) -> Option<&'a [u8]> {
        (self.body.len() == self.body_len as usize).then_some(self.body)
    }
}

/// A message to encode: what the host sends, and what plugin unit tests build.
#[derive(Clone, Debug, Default)]
pub struct MessageData<'a> {
    pub queue_offset: u64,
    pub queue_id: u32,
    pub store_ms: i64,
    pub born_ms: i64,
    pub attempts: u32,
    pub age_ms: i64,
    pub topic: &'a str,
    pub tag: &'a str,
    pub keys: &'a [String],
    pub properties: &'a [(String, String)],
    pub body: &'a [u8],
}

/// Encodes a batch into a reusable buffer.
pub struct BatchWriter<'b> {
    out: &'b mut Vec<u8>,
    count: u32,
    bodies: bool,
}

impl<'b> BatchWriter<'b> {
    pub fn new(out: &'b mut Vec<u8>, now_ms: i64, bodies: bool) -> BatchWriter<'b> {
        out.clear();
        out.extend_from_slice(&VIEW_VERSION.to_le_bytes());
        out.extend_from_slice(&HEADER_LEN.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&now_ms.to_le_bytes());
        out.extend_from_slice(&(if bodies { FLAG_BODIES } else { 0 }).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        BatchWriter { out, count: 0, bodies }
    }

    /// Strings longer than their length field allows are cut (the host bounds them far below).
    pub fn push(&mut self, m: &MessageData) {
        let keys = m.keys.iter().map(String::as_str);
        self.push_parts(m, keys, m.properties.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    }

    /// As [`push`](Self::push), with the keys and properties from wherever the caller keeps them
    /// (`m.keys` and `m.properties` are not read): the host writes them straight from the stored
    /// message.
    pub fn push_parts<'k, 'p>(
        &mut self,
        m: &MessageData,
        keys: impl ExactSizeIterator<Item = &'k str>,
        properties: impl ExactSizeIterator<Item = (&'p str, &'p str)>,
    ) {
        let start = self.out.len();
        let out = &mut *self.out;
        // The record length (patched below), then the fixed part, in one copy.
        let mut head = [0u8; 4 + 2 + FIXED_LEN as usize];
        let fields: [&[u8]; 9] = [
            &FIXED_LEN.to_le_bytes(),
            &m.queue_offset.to_le_bytes(),
            &m.store_ms.to_le_bytes(),
            &m.born_ms.to_le_bytes(),
            &(m.body.len().min(u32::MAX as usize) as u32).to_le_bytes(),
            &m.attempts.to_le_bytes(),
            &m.queue_id.to_le_bytes(),
            &0u32.to_le_bytes(),
            &m.age_ms.to_le_bytes(),
        ];
        let mut at = 4;
        for f in fields {
            head[at..at + f.len()].copy_from_slice(f);
            at += f.len();
        }
        let body = if self.bodies { m.body.len() } else { 0 };
        out.reserve(head.len() + 16 + m.topic.len() + m.tag.len() + properties.len() * 16 + body);
        out.extend_from_slice(&head);
        put_str(out, m.topic);
        put_str(out, m.tag);
        let key_count = keys.len().min(u16::MAX as usize);
        out.extend_from_slice(&(key_count as u16).to_le_bytes());
        for k in keys.take(key_count) {
            put_str(out, k);
        }
        let props = properties.len().min(u16::MAX as usize);
        out.extend_from_slice(&(props as u16).to_le_bytes());
        for (k, v) in properties.take(props) {
            put_str(out, k);
            put_long(out, v.as_bytes());
        }
        put_long(out, if self.bodies { m.body } else { &[] });
        let len = (out.len() - start - 4) as u32;
        out[start..start + 4].copy_from_slice(&len.to_le_bytes());
        self.count += 1;
        out[4..8].copy_from_slice(&self.count.to_le_bytes());
    }

    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

#[inline]
fn put_str(out: &mut Vec<u8>, s: &str) {
    let mut n = s.len().min(u16::MAX as usize);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    out.extend_from_slice(&(n as u16).to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..n]);
}

#[inline]
fn put_long(out: &mut Vec<u8>, b: &[u8]) {
    let n = b.len().min(u32::MAX as usize);
    out.extend_from_slice(&(n as u32).to_le_bytes());
    out.extend_from_slice(&b[..n]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample<'a>(keys: &'a [String], props: &'a [(String, String)]) -> MessageData<'a> {
        MessageData {
            queue_offset: 7,
            queue_id: 3,
            store_ms: 1_000,
            born_ms: 900,
            attempts: 2,
            age_ms: 5,
            topic: "Orders",
            tag: "paid",
            keys,
            properties: props,
            body: b"{\"amount\": 12}",
        }
    }

    #[test]
    fn round_trip_with_and_without_bodies() {
        let keys = vec!["k1".to_string(), "k2".to_string()];
        let props = vec![("region".to_string(), "eu".to_string()), ("a".to_string(), String::new())];
        for bodies in [false, true] {
            let mut buf = Vec::new();
            let mut w = BatchWriter::new(&mut buf, 42, bodies);
            w.push(&sample(&keys, &props));
            w.push(&MessageData { topic: "Other", ..Default::default() });
            let batch = Batch::parse(&buf).unwrap();
            assert_eq!((batch.len(), batch.now_ms(), batch.has_bodies()), (2, 42, bodies));
            let all: Vec<_> = batch.messages().collect::<Result<_, _>>().unwrap();
            let m = &all[0];
            assert_eq!(
                (m.queue_offset, m.queue_id, m.store_ms, m.born_ms, m.attempts, m.age_ms),
                (7, 3, 1000, 900, 2, 5)
            );
            assert_eq!((m.topic(), m.tag(), m.body_len), ("Orders", Some("paid"), 14));
            assert_eq!(m.keys().collect::<Vec<_>>(), ["k1", "k2"]);
            assert_eq!((m.property("region"), m.property("a"), m.property("b")), (Some("eu"), Some(""), None));
            assert_eq!(m.body(), bodies.then_some(&b"{\"amount\": 12}"[..]));
            assert_eq!((all[1].topic(), all[1].tag(), all[1].properties().count()), ("Other", None, 0));
        }
    }

    #[test]
    fn truncated_or_foreign_input_is_an_error_not_a_panic() {
        let mut buf = Vec::new();
        let mut w = BatchWriter::new(&mut buf, 1, false);
        w.push(&MessageData { topic: "T", tag: "x", ..Default::default() });
        for cut in 0..buf.len() {
            if let Ok(b) = Batch::parse(&buf[..cut]) {
                assert!(b.messages().any(|m| m.is_err()), "cut at {cut} parsed");
            }
        }
        let mut other = buf.clone();
        other[0] = 9;
        assert!(Batch::parse(&other).is_err());
    }

    #[test]
    fn unknown_trailing_fields_are_skipped() {
        // A later host may add fixed fields and trailing record bytes: version-1 readers skip them.
        let mut buf = Vec::new();
        let mut w = BatchWriter::new(&mut buf, 1, false);
        w.push(&MessageData { topic: "T", tag: "x", ..Default::default() });
        let mut longer = buf[..HEADER_LEN as usize].to_vec();
        let record = &buf[HEADER_LEN as usize + 4..];
        let mut rec = Vec::new();
        rec.extend_from_slice(&(FIXED_LEN + 8).to_le_bytes());
        rec.extend_from_slice(&record[2..2 + FIXED_LEN as usize]);
        rec.extend_from_slice(&[0xAA; 8]);
        rec.extend_from_slice(&record[2 + FIXED_LEN as usize..]);
        rec.extend_from_slice(&[0xBB; 5]);
        longer.extend_from_slice(&(rec.len() as u32).to_le_bytes());
        longer.extend_from_slice(&rec);
        let m = Batch::parse(&longer).unwrap().messages().next().unwrap().unwrap();
        assert_eq!((m.topic(), m.tag()), ("T", Some("x")));
    }
}

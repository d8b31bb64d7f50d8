//! The on-disk record: a fixed 40-byte header followed by the payload.
//!
//! ```text
//!  0  magic      u32  RECORD_MAGIC, or PAD_MAGIC for "the rest of this segment is unused"
//!  4  length     u32  payload bytes
//!  8  term       u64
//! 16  index      u64
//! 24  leader     u64  node id of the leader that proposed the entry
//! 32  kind       u8   payload kind (opaque to the store)
//! 33  reserved   [u8; 3], zero
//! 36  crc        u32  CRC32C of header bytes 0..36 followed by the payload
//! ```
//!
//! The CRC covers the header as well as the payload, so a flipped bit in the term or the index
//! is caught just like one in the body. All integers are little-endian.

use crate::store::StoreError;

pub const HEADER_LEN: usize = 40;
pub const RECORD_MAGIC: u32 = 0x5252_4543; // "RREC"
pub const PAD_MAGIC: u32 = 0x5252_5041; // "RRPA"

/// Record kinds: what the payload is. The Raft layer writes them; the broker's snapshot replay
/// reads them back without knowing Raft's types.
pub const KIND_BLANK: u8 = 1;
pub const KIND_COMMAND: u8 = 2;
pub const KIND_MEMBERSHIP: u8 = 3;
pub const KIND_MEMBERSHIP_PB: u8 = 4;

/// What the store keeps about an entry besides its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMeta {
    pub term: u64,
    pub index: u64,
    pub leader: u64,
    pub kind: u8,
}

/// A decoded header whose own fields are sane; the payload CRC is checked separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub meta: RecordMeta,
    pub length: u32,
    pub crc: u32,
}

/// What sits at a position in a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Record(Header),
    /// A pad marker, or zeroes: nothing more is stored in this segment.
    End,
}

pub fn encode_header(meta: &RecordMeta, payload: &[u8]) -> Result<[u8; HEADER_LEN], StoreError> {
    let length = u32::try_from(payload.len())
        .map_err(|_| StoreError::RecordTooLarge { len: payload.len() as u64, max: u32::MAX as u64 })?;
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
    h[4..8].copy_from_slice(&length.to_le_bytes());
    h[8..16].copy_from_slice(&meta.term.to_le_bytes());
    h[16..24].copy_from_slice(&meta.index.to_le_bytes());
    h[24..32].copy_from_slice(&meta.leader.to_le_bytes());
    h[32] = meta.kind;
    let crc = crc32c::crc32c_append(crc32c::crc32c(&h[0..36]), payload);
    h[36..40].copy_from_slice(&crc.to_le_bytes());
    Ok(h)
}

pub fn pad_header() -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&PAD_MAGIC.to_le_bytes());
    h
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// Reads the header at the start of `bytes`. `Err` means the bytes are neither a record, a pad
/// marker nor zeroes: a torn or corrupt write.
pub fn decode_header(bytes: &[u8]) -> Result<Slot, &'static str> {
    if bytes.len() < HEADER_LEN {
        // Too little room for a header: a writer never starts a record here.
        return Ok(Slot::End);
    }
    let h = &bytes[..HEADER_LEN];
    match u32_at(h, 0) {
        RECORD_MAGIC => {}
        PAD_MAGIC => return Ok(Slot::End),
        0 if h.iter().all(|&b| b == 0) => return Ok(Slot::End),
        _ => return Err("bad magic"),
    }
    if h[33..36] != [0, 0, 0] {
        return Err("reserved header bytes are not zero");
    }
    Ok(Slot::Record(Header {
        meta: RecordMeta { term: u64_at(h, 8), index: u64_at(h, 16), leader: u64_at(h, 24), kind: h[32] },
        length: u32_at(h, 4),
        crc: u32_at(h, 36),
    }))
}

/// True when `payload` is what `header_bytes` (the 40 raw header bytes) promises.
pub fn crc_matches(header_bytes: &[u8], payload: &[u8]) -> bool {
    let want = u32_at(header_bytes, 36);
    crc32c::crc32c_append(crc32c::crc32c(&header_bytes[0..36]), payload) == want
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record(meta: &RecordMeta, payload: &[u8]) -> Vec<u8> {
        let mut v = encode_header(meta, payload).unwrap().to_vec();
        v.extend_from_slice(payload);
        v
    }

    proptest! {
        #[test]
        fn header_round_trips(term: u64, index: u64, leader: u64, kind: u8,
                              payload in proptest::collection::vec(any::<u8>(), 0..512)) {
            let meta = RecordMeta { term, index, leader, kind };
            let bytes = record(&meta, &payload);
            let Slot::Record(h) = decode_header(&bytes).unwrap() else { panic!("not a record") };
            prop_assert_eq!(h.meta, meta);
            prop_assert_eq!(h.length as usize, payload.len());
            prop_assert!(crc_matches(&bytes[..HEADER_LEN], &bytes[HEADER_LEN..]));
        }

        #[test]
        fn any_flipped_byte_is_detected(payload in proptest::collection::vec(any::<u8>(), 1..256),
                                        at in any::<prop::sample::Index>(), bit in 0u8..8) {
            let meta = RecordMeta { term: 7, index: 42, leader: 3, kind: 2 };
            let mut bytes = record(&meta, &payload);
            let at = at.index(bytes.len());
            bytes[at] ^= 1 << bit;
            let intact = match decode_header(&bytes) {
                Ok(Slot::Record(h)) => {
                    h.length as usize == payload.len()
                        && crc_matches(&bytes[..HEADER_LEN], &bytes[HEADER_LEN..])
                }
                _ => false,
            };
            prop_assert!(!intact, "flip at byte {} went unnoticed", at);
        }
    }

    #[test]
    fn zeroes_and_pad_end_a_segment() {
        assert_eq!(decode_header(&[0u8; HEADER_LEN]), Ok(Slot::End));
        assert_eq!(decode_header(&pad_header()), Ok(Slot::End));
        assert_eq!(decode_header(&[0u8; 10]), Ok(Slot::End));
        assert!(decode_header(&[0xAB; HEADER_LEN]).is_err());
    }
}

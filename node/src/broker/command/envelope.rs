//! The header of an entry payload: which format wrote it and which kind of command it is.
//!
//! Formats 2 to 10 (this release writes 10): `0x52` ('R'), the format version, the kind, then the
//! command's protobuf body. Format 1 (earlier releases): the kind as a tag byte (1 to 9), then
//! the body (JSON for most kinds). Each earlier format is read with its meaning then:
//! - formats 1 and 2: a metadata command changed the data partition in the same step (see
//!   `Steps`);
//! - formats 1 to 3: a lite delivery was acked, changed or dropped by a lite command, read now
//!   as the consumption command or dead letter that does the same.
//!
//! The marker is never a tag of format 1, so the first byte tells the two apart; a later format
//! keeps the marker and raises the version byte, which this release then refuses instead of
//! misreading.

use super::DecodeError;

/// The first byte of every payload of format 2 on.
pub(crate) const MARKER: u8 = b'R';
/// The format this release writes: a pull consumer commits an offset (`ConsumeCommand.commit_offset`),
/// which an earlier release must refuse rather than skip. Format 9 on: a node records a repair of
/// its disk (`AdminCommand.record_repair`). Format 8
/// on: a placement names the data group it is for (`PlacementChange.holder`). Format 7 on: settings say whether leaders are balanced
/// (`SettingsChange.balance_leaders`). Format 6 on: a topic's configuration names the data group of each
/// queue (`TopicConfig.groups`); format 5 on: settings name the number of data groups; format 4
/// on: receipts name a queue or a lite topic (`Receipt.lite_id`).
pub const FORMAT: u8 = 10;
/// The first format whose metadata commands change only the metadata, and whose placement
/// entries (kind 10) carry the change to the partition.
pub const SEPARATE_FORMAT: u8 = 3;
/// The first format with the marker byte; read, never written.
pub const FIRST_MARKED_FORMAT: u8 = 2;
/// The format of earlier releases: a tag byte, then the body. Read, never written.
pub const LEGACY_FORMAT: u8 = 1;
/// Marker, format, kind.
pub(crate) const HEADER_LEN: usize = 3;

/// What an entry carries: one command family each. The byte values are the tags of format 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Send = 1,
    Admin = 2,
    Consume = 3,
    DeadLetter = 4,
    Timer = 5,
    Transaction = 6,
    Plugin = 7,
    Access = 8,
    Lite = 9,
    Placement = 10,
}

impl Kind {
    fn of(byte: u8) -> Option<Kind> {
        Some(match byte {
            1 => Kind::Send,
            2 => Kind::Admin,
            3 => Kind::Consume,
            4 => Kind::DeadLetter,
            5 => Kind::Timer,
            6 => Kind::Transaction,
            7 => Kind::Plugin,
            8 => Kind::Access,
            9 => Kind::Lite,
            10 => Kind::Placement,
            _ => return None,
        })
    }

    /// Whether commands of this kind carry the proposing leader's clock.
    pub(crate) fn carries_time(self) -> bool {
        match self {
            Kind::Send
            | Kind::Consume
            | Kind::DeadLetter
            | Kind::Timer
            | Kind::Transaction
            | Kind::Plugin
            | Kind::Lite => true,
            Kind::Admin | Kind::Access | Kind::Placement => false,
        }
    }
}

/// A payload's header, and where its body starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub format: u8,
    pub kind: Kind,
    pub body_at: usize,
}

/// The header of `payload`: a look at its first bytes, nothing decoded.
pub(crate) fn read(payload: &[u8]) -> Result<Header, DecodeError> {
    match payload {
        [] => Err(DecodeError::Empty),
        [MARKER, format, rest @ ..] => {
            if *format > FORMAT {
                return Err(DecodeError::UnknownFormat(*format));
            }
            if *format < FIRST_MARKED_FORMAT {
                // No release writes the marker before a format it did not introduce.
                return Err(DecodeError::NotACommand(MARKER));
            }
            let &[kind, ..] = rest else { return Err(DecodeError::Truncated) };
            let kind = Kind::of(kind).ok_or(DecodeError::UnknownKind { format: *format, kind })?;
            Ok(Header { format: *format, kind, body_at: HEADER_LEN })
        }
        [MARKER] => Err(DecodeError::Truncated),
        [tag, ..] => match Kind::of(*tag).filter(|k| *k != Kind::Placement) {
            Some(kind) => Ok(Header { format: LEGACY_FORMAT, kind, body_at: 1 }),
            None => Err(DecodeError::NotACommand(*tag)),
        },
    }
}

/// The header this release writes before a body of `kind`.
pub(crate) fn header(kind: Kind) -> [u8; HEADER_LEN] {
    [MARKER, FORMAT, kind as u8]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tag_of_the_first_format_is_a_known_kind_and_never_the_marker() {
        for tag in 1..=9u8 {
            assert_ne!(tag, MARKER);
            let h = read(&[tag, 0]).unwrap();
            assert_eq!((h.format, h.kind as u8, h.body_at), (LEGACY_FORMAT, tag, 1));
            let h = read(&header(h.kind)).unwrap();
            assert_eq!((h.format, h.kind as u8, h.body_at), (FORMAT, tag, HEADER_LEN));
        }
    }

    #[test]
    fn unknown_formats_and_kinds_are_told_apart_from_garbage() {
        assert_eq!(read(&[MARKER, FORMAT + 1, 1]), Err(DecodeError::UnknownFormat(FORMAT + 1)));
        assert_eq!(read(&[MARKER, FORMAT + 1]), Err(DecodeError::UnknownFormat(FORMAT + 1)));
        assert_eq!(read(&[MARKER, FORMAT, 42]), Err(DecodeError::UnknownKind { format: FORMAT, kind: 42 }));
        assert_eq!(read(&[MARKER, FORMAT]), Err(DecodeError::Truncated));
        assert_eq!(read(&[MARKER]), Err(DecodeError::Truncated));
        assert_eq!(read(&[MARKER, 1, 1]), Err(DecodeError::NotACommand(MARKER)));
        assert_eq!(read(&[Kind::Placement as u8, 0]), Err(DecodeError::NotACommand(10)));
        assert_eq!(read(&[MARKER, FIRST_MARKED_FORMAT, 2]).map(|h| h.format), Ok(FIRST_MARKED_FORMAT));
        assert_eq!(read(&[0]), Err(DecodeError::NotACommand(0)));
        assert_eq!(read(b"{}"), Err(DecodeError::NotACommand(b'{')));
        assert_eq!(read(&[]), Err(DecodeError::Empty));
    }
}

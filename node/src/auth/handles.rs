//! Unforgeable handles. Receipt handles, recall handles and transaction ids name a delivery, a
//! pending timer or a transactional half by numbers a client could guess. Every one handed to a
//! client is sealed with an HMAC under the cluster's handle key (replicated: every node seals and
//! checks alike), over the handle and what it belongs to (group and topic; topic; topic and
//! message id). A guessed, altered or borrowed handle does not open, and is refused as a stale one
//! is.
//!
//! The key is rotated through the log (`rockraft cluster rotate-handle-key`); handles sealed under
//! the key before it still open, so deliveries in flight survive one rotation.
//!
//! Sealed form: `<handle>~<key id, hex>.<first 16 bytes of HMAC-SHA256, hex>`.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::broker::access::{AccessTables, HandleKey};

/// The handle keys a node has applied: the newest seals, the newest two open.
#[derive(Clone, Default)]
pub struct HandleKeys {
    keys: Vec<(u32, HandleKey)>,
}

impl HandleKeys {
    pub fn of(tables: &AccessTables) -> HandleKeys {
        let mut keys: Vec<(u32, HandleKey)> = tables.handle_keys.iter().map(|(id, k)| (*id, k.clone())).collect();
        keys.sort_by_key(|(id, _)| std::cmp::Reverse(*id));
        keys.truncate(2);
        HandleKeys { keys }
    }

    fn mac(key: &HandleKey, id: u32, handle: &str, context: &[&str]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(key.bytes()).expect("HMAC takes a key of any length");
        mac.update(&id.to_be_bytes());
        // Each part with its length: no two different (handle, context) lists feed the same bytes.
        for part in std::iter::once(handle).chain(context.iter().copied()) {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        mac
    }

    /// `handle` sealed for `context`; unsealed while the cluster has no key yet (just after it
    /// was initialised).
    pub fn seal(&self, handle: &str, context: &[&str]) -> String {
        let Some((id, key)) = self.keys.first() else { return handle.to_string() };
        let tag = Self::mac(key, *id, handle, context).finalize().into_bytes();
        format!("{handle}~{id:x}.{}", hex::encode(&tag[..16]))
    }

    /// The handle inside `sealed`, if it was sealed for `context` under one of the keys.
    pub fn open<'a>(&self, sealed: &'a str, context: &[&str]) -> Option<&'a str> {
        let Some((handle, seal)) = sealed.split_once('~') else {
            // Unsealed handles only from a cluster that has never had a key.
            return self.keys.is_empty().then_some(sealed);
        };
        let (id, tag) = seal.split_once('.')?;
        let id = u32::from_str_radix(id, 16).ok()?;
        let tag = hex::decode(tag).ok().filter(|t| t.len() == 16)?;
        let (_, key) = self.keys.iter().find(|(k, _)| *k == id)?;
        Self::mac(key, id, handle, context).verify_truncated_left(&tag).ok()?;
        Some(handle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::access::AccessCommand;

    fn rotate(t: &mut AccessTables, byte: u8) {
        let key = hex::encode([byte; 32]);
        assert_eq!(t.apply(AccessCommand::RotateHandleKey { key: HandleKey::new(key) }), crate::broker::Reply::Applied);
    }

    #[test]
    fn a_sealed_handle_opens_only_for_its_own_context_and_unaltered() {
        let mut t = AccessTables::default();
        rotate(&mut t, 7);
        let keys = HandleKeys::of(&t);
        let sealed = keys.seal("r1.3.42.1234", &["readers", "Orders"]);
        assert_eq!(keys.open(&sealed, &["readers", "Orders"]), Some("r1.3.42.1234"));
        assert_eq!(keys.open(&sealed, &["thieves", "Orders"]), None, "another group's handle");
        assert_eq!(keys.open(&sealed, &["readers", "Other"]), None, "another topic's handle");
        assert_eq!(keys.open("r1.3.42.1234", &["readers", "Orders"]), None, "an unsealed guess");
        let altered = sealed.replacen("r1.3.42", "r1.3.43", 1);
        assert_eq!(keys.open(&altered, &["readers", "Orders"]), None, "an altered offset");
        // Every one-character change of the seal is refused.
        let at = sealed.find('~').unwrap();
        for i in at + 1..sealed.len() {
            let mut bytes = sealed.clone().into_bytes();
            bytes[i] = if bytes[i] == b'0' { b'1' } else { b'0' };
            let forged = String::from_utf8(bytes).unwrap();
            if forged != sealed {
                assert_eq!(keys.open(&forged, &["readers", "Orders"]), None, "{forged}");
            }
        }
        // Context parts are length-framed: moving a boundary changes the seal.
        assert_eq!(keys.open(&keys.seal("a", &["bc"]), &["ab", "c"]), None);
    }

    #[test]
    fn handles_survive_one_rotation_not_two() {
        let mut t = AccessTables::default();
        let unsealed = HandleKeys::of(&t).seal("T10", &["Pay", "m"]);
        assert_eq!(HandleKeys::of(&t).open(&unsealed, &["Pay", "m"]), Some("T10"), "no key yet");
        rotate(&mut t, 1);
        assert_eq!(HandleKeys::of(&t).open(&unsealed, &["Pay", "m"]), None, "once a key exists");
        let first = HandleKeys::of(&t).seal("T10", &["Pay", "m"]);
        rotate(&mut t, 2);
        assert_eq!(HandleKeys::of(&t).open(&first, &["Pay", "m"]), Some("T10"));
        let second = HandleKeys::of(&t).seal("T10", &["Pay", "m"]);
        assert_ne!(first, second);
        rotate(&mut t, 3);
        assert_eq!(HandleKeys::of(&t).open(&first, &["Pay", "m"]), None, "two rotations ago");
        assert_eq!(HandleKeys::of(&t).open(&second, &["Pay", "m"]), Some("T10"));
        assert_eq!(t.handle_keys.len(), 2, "older keys are dropped");
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_handles_never_open_and_never_panic(sealed in ".{0,120}") {
            let mut t = AccessTables::default();
            rotate(&mut t, 9);
            proptest::prop_assert_eq!(HandleKeys::of(&t).open(&sealed, &["g", "t"]), None);
        }
    }
}

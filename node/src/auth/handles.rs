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
//! There is no unsealed form: a node that has applied no key yet (a cluster initialised a moment
//! ago, or a node behind) has no [`HandleKeys`], so it can neither hand out nor accept a handle
//! (the proxy catches up with the leader, then answers a status the clients retry).
//!
//! Sealed form: `<handle>~<key id, hex>.<first 16 bytes of HMAC-SHA256, hex>`.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::broker::access::{AccessTables, HandleKey};

/// The handle keys a node has applied: the newest seals, the newest two open. Never empty.
#[derive(Clone)]
pub struct HandleKeys {
    keys: Vec<(u32, HandleKey)>,
}

impl HandleKeys {
    /// The keys of `tables`; `None` while the cluster has none.
    pub fn of(tables: &AccessTables) -> Option<HandleKeys> {
        let mut keys: Vec<(u32, HandleKey)> = tables.handle_keys.iter().map(|(id, k)| (*id, k.clone())).collect();
        keys.sort_by_key(|(id, _)| std::cmp::Reverse(*id));
        keys.truncate(2);
        (!keys.is_empty()).then_some(HandleKeys { keys })
    }

    /// The id of the newest key: what new handles are sealed under.
    pub fn newest(&self) -> u32 {
        self.keys[0].0
    }

    /// The id of the key `sealed` claims to be sealed under, if it has the sealed form: a node
    /// that has not applied that key yet catches up before it judges the handle.
    pub fn key_id(sealed: &str) -> Option<u32> {
        let (_, seal) = sealed.split_once('~')?;
        u32::from_str_radix(seal.split_once('.')?.0, 16).ok()
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

    /// `handle` sealed for `context` under the newest key.
    pub fn seal(&self, handle: &str, context: &[&str]) -> String {
        let (id, key) = &self.keys[0];
        let tag = Self::mac(key, *id, handle, context).finalize().into_bytes();
        format!("{handle}~{id:x}.{}", hex::encode(&tag[..16]))
    }

    /// The handle inside `sealed`, if it was sealed for `context` under one of the keys.
    pub fn open<'a>(&self, sealed: &'a str, context: &[&str]) -> Option<&'a str> {
        let (handle, seal) = sealed.split_once('~')?;
        let (id, tag) = seal.split_once('.')?;
        let id = u32::from_str_radix(id, 16).ok()?;
        let tag = hex::decode(tag).ok().filter(|t| t.len() == 16)?;
        let (_, key) = self.keys.iter().find(|(k, _)| *k == id)?;
        Self::mac(key, id, handle, context).verify_truncated_left(&tag).ok()?;
        Some(handle)
    }
}

#[cfg(test)]
pub(crate) mod tests {
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
        let keys = HandleKeys::of(&t).unwrap();
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
    fn without_a_key_nothing_is_sealed_or_opened_and_unsealed_handles_never_open() {
        let mut t = AccessTables::default();
        assert!(HandleKeys::of(&t).is_none(), "no keys, so nothing to seal or open with");
        rotate(&mut t, 1);
        let keys = HandleKeys::of(&t).unwrap();
        assert_eq!(keys.open("T10", &["Pay", "m"]), None, "the unsealed form of the handle");
        assert_eq!(keys.open("", &["Pay", "m"]), None);
        let sealed = keys.seal("T10", &["Pay", "m"]);
        assert_eq!(HandleKeys::key_id(&sealed), Some(keys.newest()));
        assert_eq!(HandleKeys::key_id("T10"), None);
    }

    #[test]
    fn handles_survive_one_rotation_not_two() {
        let mut t = AccessTables::default();
        let keys = |t: &AccessTables| HandleKeys::of(t).unwrap();
        rotate(&mut t, 1);
        let first = keys(&t).seal("T10", &["Pay", "m"]);
        rotate(&mut t, 2);
        assert_eq!(keys(&t).open(&first, &["Pay", "m"]), Some("T10"));
        let second = keys(&t).seal("T10", &["Pay", "m"]);
        assert_ne!(first, second);
        assert!(HandleKeys::key_id(&second) > HandleKeys::key_id(&first));
        rotate(&mut t, 3);
        assert_eq!(keys(&t).open(&first, &["Pay", "m"]), None, "two rotations ago");
        assert_eq!(keys(&t).open(&second, &["Pay", "m"]), Some("T10"));
        assert_eq!(t.handle_keys.len(), 2, "older keys are dropped");
    }

    /// For tests elsewhere: keys with one key in them.
    pub(crate) fn test_keys() -> HandleKeys {
        let mut t = AccessTables::default();
        rotate(&mut t, 5);
        HandleKeys::of(&t).unwrap()
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_handles_never_open_and_never_panic(sealed in ".{0,120}") {
            let mut t = AccessTables::default();
            rotate(&mut t, 9);
            proptest::prop_assert_eq!(HandleKeys::of(&t).unwrap().open(&sealed, &["g", "t"]), None);
        }
    }
}

//! Reads the little-endian fields of a journal record, front to back (the dedupe journal and the
//! timer wheel's files). Every read is checked: a short record gives `None`, never a panic.

pub(crate) struct Cursor<'a>(pub &'a [u8]);

impl Cursor<'_> {
    pub fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    /// A UTF-8 string after its `u32` length.
    pub fn text(&mut self) -> Option<String> {
        let len = self.u32()? as usize;
        String::from_utf8(self.take(len)?.to_vec()).ok()
    }
}

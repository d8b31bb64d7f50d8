//! Small values that must survive a crash the moment they are saved: the Raft vote, the committed
//! log id and the last purged log id. Kept in sled, apart from the log, as opaque bytes.

use std::path::Path;

use crate::store::StoreError;

#[derive(Clone)]
pub struct MetaStore {
    tree: sled::Tree,
    db: sled::Db,
}

impl MetaStore {
    pub fn open(dir: &Path) -> Result<MetaStore, StoreError> {
        let db = sled::Config::new().path(dir).mode(sled::Mode::LowSpace).open()?;
        let tree = db.open_tree("raft")?;
        Ok(MetaStore { tree, db })
    }

    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.tree.get(key)?.map(|v| v.to_vec()))
    }

    /// Stores `value` and returns once it is on disk.
    pub fn put_durable(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.tree.insert(key, value)?;
        self.db.flush()?;
        Ok(())
    }

    /// Stores `value`; it reaches the disk with the next durable write or sled's own flush.
    pub fn put(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.tree.insert(key, value)?;
        Ok(())
    }

    /// Removes `key` and returns once that is on disk.
    pub fn remove_durable(&self, key: &str) -> Result<(), StoreError> {
        self.tree.remove(key)?;
        self.db.flush()?;
        Ok(())
    }
}

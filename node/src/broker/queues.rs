//! The ConsumeQueues of every (topic, queue), opened on first use under `<dir>/<topic>/<queue>/`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use crate::store::{ConsumeQueue, StoreError};

pub struct Queues {
    dir: PathBuf,
    records_per_file: u64,
    open: RwLock<HashMap<(String, u32), Arc<ConsumeQueue>>>,
}

impl Queues {
    pub fn new(dir: PathBuf, records_per_file: u64) -> Queues {
        Queues { dir, records_per_file, open: RwLock::new(HashMap::new()) }
    }

    /// The queue, opened (and created) if needed. Topic names are validated before they get here.
    pub fn get(&self, topic: &str, queue: u32) -> Result<Arc<ConsumeQueue>, StoreError> {
        let key = (topic.to_string(), queue);
        if let Some(q) = self.open.read().expect("queues lock").get(&key) {
            return Ok(Arc::clone(q));
        }
        let mut open = self.open.write().expect("queues lock");
        if let Some(q) = open.get(&key) {
            return Ok(Arc::clone(q));
        }
        let q = Arc::new(ConsumeQueue::open(&self.dir.join(topic).join(queue.to_string()), self.records_per_file)?);
        open.insert(key, Arc::clone(&q));
        Ok(q)
    }

    /// Drops every queue of `topic`, files included.
    pub fn remove_topic(&self, topic: &str) -> Result<(), StoreError> {
        self.open.write().expect("queues lock").retain(|(t, _), _| t != topic);
        let dir = self.dir.join(topic);
        match std::fs::remove_dir_all(&dir) {
            // The removal must survive a crash as much as the files' creation did.
            Ok(()) => crate::store::sync_dir(&self.dir),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StoreError::Io { path: dir, source }),
        }
    }

    /// Syncs every open queue (before the metadata that covers them is flushed).
    pub fn sync(&self) -> Result<(), StoreError> {
        let open: Vec<Arc<ConsumeQueue>> = self.open.read().expect("queues lock").values().cloned().collect();
        open.iter().try_for_each(|q| q.sync())
    }
}

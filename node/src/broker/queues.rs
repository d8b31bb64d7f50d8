//! The ConsumeQueues of every (topic, queue), opened on first use under `<dir>/<topic>/<queue>/`.
//!
//! `<dir>/.format` names the record layout of every queue file (`store::CQ_FORMAT`; no file:
//! format 1, of earlier releases, rewritten in place when the node opens). A directory of a newer
//! format is refused. Topic names never start with a dot.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use crate::store::{CQ_FORMAT, ConsumeQueue, StoreError};

const FORMAT_FILE: &str = ".format";

pub struct Queues {
    dir: PathBuf,
    records_per_file: u64,
    open: RwLock<HashMap<(String, u32), Arc<ConsumeQueue>>>,
}

impl Queues {
    /// Opens the queues under `dir`, checking (and if need be upgrading) their record format.
    pub fn open(dir: PathBuf, records_per_file: u64) -> Result<Queues, StoreError> {
        crate::store::create_dir_durable(&dir)?;
        let marker = dir.join(FORMAT_FILE);
        let io = |e| StoreError::Io { path: marker.clone(), source: e };
        match std::fs::read_to_string(&marker) {
            Ok(text) => {
                let found: u32 = text.trim().parse().map_err(|_| StoreError::Format {
                    path: marker.clone(),
                    found: u32::MAX,
                    known: CQ_FORMAT,
                })?;
                if found > CQ_FORMAT {
                    return Err(StoreError::Format { path: marker, found, known: CQ_FORMAT });
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let rewritten = upgrade(&dir)?;
                if rewritten > 0 {
                    tracing::info!(dir = %dir.display(), records = rewritten, "consume queue records rewritten with checksums");
                }
                // Named only once every file is rewritten and synced.
                let staged = dir.join(".format.new");
                let file = std::fs::File::create(&staged).map_err(io)?;
                std::io::Write::write_all(&mut &file, format!("{CQ_FORMAT}\n").as_bytes()).map_err(io)?;
                file.sync_all().map_err(io)?;
                std::fs::rename(&staged, &marker).map_err(io)?;
                crate::store::sync_dir(&dir)?;
            }
            Err(e) => return Err(io(e)),
        }
        Ok(Queues { dir, records_per_file, open: RwLock::new(HashMap::new()) })
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

/// Rewrites every queue file under `dir` (`<topic>/<queue>/`) in this release's format.
fn upgrade(dir: &std::path::Path) -> Result<u64, StoreError> {
    let io = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| StoreError::Io { path, source }
    };
    let mut rewritten = 0;
    for topic in std::fs::read_dir(dir).map_err(io(dir))? {
        let topic = topic.map_err(io(dir))?.path();
        if !topic.is_dir() {
            continue;
        }
        for queue in std::fs::read_dir(&topic).map_err(io(&topic))? {
            let queue = queue.map_err(io(&topic))?.path();
            if queue.is_dir() {
                rewritten += crate::store::upgrade_format_1(&queue)?;
            }
        }
    }
    Ok(rewritten)
}

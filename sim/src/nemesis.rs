//! The faults of a run, drawn from its seed: one at a time, each on one node (a minority), from
//! the moment the cluster is ready until the fault period ends; then every link is repaired and
//! every node runs.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::hosts;
use crate::workload::{Shared, mix};

enum Fault {
    /// The node's links to the other nodes are cut (its clients still reach it).
    Partition,
    /// The node's links to the other nodes hold every message, then deliver them all at once:
    /// a node that stalls (a long pause, a congested switch) and comes back.
    Hold,
    /// The node's process dies; when it comes back, bytes of its log may have been flipped.
    Crash { flip: bool },
}

struct Active {
    node: usize,
    fault: Fault,
    until: Duration,
}

pub struct Nemesis {
    state: u64,
    period: Duration,
    root: PathBuf,
    started: Option<Duration>,
    next_at: Duration,
    active: Option<Active>,
    done: bool,
    /// What it did, with the simulated time.
    pub log: Vec<String>,
}

impl Nemesis {
    pub fn new(seed: u64, period: Duration, root: &Path) -> Nemesis {
        Nemesis {
            state: mix(seed ^ 0x006e_656d_6573_6973),
            period,
            root: root.to_path_buf(),
            started: None,
            next_at: Duration::ZERO,
            active: None,
            done: false,
            log: Vec::new(),
        }
    }

    pub fn finished(&self) -> bool {
        self.done
    }

    fn next(&mut self) -> u64 {
        self.state = mix(self.state);
        self.state
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from + 1))
    }

    /// Called before every step once the cluster is ready: ends the fault whose time is up,
    /// starts the next when one is due.
    pub fn act(&mut self, sim: &mut turmoil::Sim<'_>, shared: &Shared) {
        let now = sim.elapsed();
        let started = *self.started.get_or_insert(now);
        if self.active.as_ref().is_some_and(|a| now >= a.until) {
            let active = self.active.take().expect("checked");
            self.end(sim, shared, &active, now);
            self.next_at = now + self.millis(500, 3000);
        }
        if self.active.is_some() || self.done {
            return;
        }
        if now - started >= self.period {
            self.done = true;
            self.log.push(format!("{:>8} faults over", now.as_millis()));
            shared.healed.set(true);
            return;
        }
        if now < self.next_at {
            return;
        }
        let node = self.below(hosts::NODES.len() as u64) as usize;
        let (fault, length) = match self.below(3) {
            0 => (Fault::Partition, self.millis(1000, 6000)),
            1 => (Fault::Hold, self.millis(300, 3000)),
            _ => {
                let flip = self.below(2) == 0;
                (Fault::Crash { flip }, self.millis(500, 6000))
            }
        };
        let name = hosts::NODES[node];
        let others = hosts::NODES.iter().filter(|n| **n != name);
        let what = match fault {
            Fault::Partition => {
                others.for_each(|o| sim.partition(name, *o));
                "partitioned from the others"
            }
            Fault::Hold => {
                others.for_each(|o| sim.hold(name, *o));
                "held (its messages to and from the others wait)"
            }
            Fault::Crash { flip: false } => {
                sim.crash(name);
                "crashed"
            }
            Fault::Crash { flip: true } => {
                sim.crash(name);
                "crashed (its log will be damaged)"
            }
        };
        self.log.push(format!("{:>8} {name} {what} for {} ms", now.as_millis(), length.as_millis()));
        self.active = Some(Active { node, fault, until: now + length });
    }

    fn end(&mut self, sim: &mut turmoil::Sim<'_>, shared: &Shared, active: &Active, now: Duration) {
        let name = hosts::NODES[active.node];
        let others = hosts::NODES.iter().filter(|n| **n != name);
        let what = match active.fault {
            Fault::Partition => {
                others.for_each(|o| sim.repair(name, *o));
                "repaired".to_string()
            }
            Fault::Hold => {
                others.for_each(|o| sim.release(name, *o));
                "released".to_string()
            }
            Fault::Crash { flip } => {
                let flipped = match flip {
                    true => self.flip_bytes(&hosts::data_dir(&self.root, active.node + 1)),
                    false => Vec::new(),
                };
                if !flipped.is_empty() {
                    shared.damaged.borrow_mut().push(active.node + 1);
                }
                sim.bounce(name);
                match flipped.is_empty() {
                    true => "restarted".to_string(),
                    false => format!("restarted with bytes flipped at {}", flipped.join(", ")),
                }
            }
        };
        self.log.push(format!("{:>8} {name} {what}", now.as_millis()));
    }

    /// Flips single bits in the written part of up to three of the node's log segments, and
    /// one time in three in its data group's snapshot; says where (file name and offset).
    fn flip_bytes(&mut self, dir: &Path) -> Vec<String> {
        let files = hosts::segments(dir);
        let mut flipped = Vec::new();
        let snapshot = dir.join("groups/1/snapshot.json");
        if self.below(3) == 0
            && let Ok(len) = std::fs::metadata(&snapshot).map(|m| m.len())
            && len > 0
            && let Ok(file) = std::fs::OpenOptions::new().read(true).write(true).open(&snapshot)
        {
            let at = self.below(len);
            let mut byte = [0u8; 1];
            if file.read_exact_at(&mut byte, at).is_ok() && file.write_all_at(&[byte[0] ^ 0x10], at).is_ok() {
                flipped.push(format!("snapshot.json+{at}"));
            }
        }
        for _ in 0..3 {
            if files.is_empty() {
                break;
            }
            let path = &files[self.below(files.len() as u64) as usize];
            let Ok(end) = rockraft::store::segment_written_end(path) else { continue };
            if end <= 64 {
                continue;
            }
            let Ok(file) = std::fs::OpenOptions::new().read(true).write(true).open(path) else { continue };
            for _ in 0..1 + self.below(4) {
                let at = 64 + self.below(end - 64);
                let mut byte = [0u8; 1];
                if file.read_exact_at(&mut byte, at).is_ok() {
                    let bit = 1u8 << self.below(8);
                    if file.write_all_at(&[byte[0] ^ bit], at).is_ok() {
                        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                        flipped.push(format!("{name}+{at}"));
                    }
                }
            }
        }
        flipped
    }
}

//! The damage records of a repository, merged into one set (see [`crate::format::damage`] for
//! the record format and the rules), and writing them.

use crate::backend::{Backend, FileKind};
use crate::error::{Error, Result};
use crate::format::container::ContainerId;
use crate::format::damage::{DamageRecord, DamagedCopy};
use dedelta_core::ChunkId;
use std::collections::{BTreeSet, HashMap, HashSet};

/// Every damage record of a repository, merged.
#[derive(Clone, Debug, Default)]
pub struct DamageSet {
    /// Damaged copies, with the reason.
    copies: HashMap<(ContainerId, ChunkId), String>,
    /// Wholly damaged containers, with the reason.
    containers: HashMap<ContainerId, String>,
    /// The containers of each chunk's damaged copies, in order: a chunk may be recorded in
    /// several (stored again after its first copy was damaged, and that copy damaged too).
    by_chunk: HashMap<ChunkId, BTreeSet<ContainerId>>,
    /// Names of the record files this set was read from.
    pub record_names: Vec<String>,
    /// The latest `time` of those records (kept when the set is rewritten without a new
    /// finding).
    pub latest_time: String,
}

impl DamageSet {
    /// Reads every record. A record that cannot be parsed is skipped and named in the returned
    /// notices (it only costs the protection it gave; `check` records the damage again).
    pub fn load(backend: &dyn Backend) -> Result<(Self, Vec<String>)> {
        let mut set = DamageSet::default();
        let mut notices = Vec::new();
        for name in backend.list_names(FileKind::Damage)? {
            let what = format!("damage record {name}");
            match backend
                .get(FileKind::Damage, &name)
                .map_err(Error::from)
                .and_then(|b| DamageRecord::from_bytes(&b, &what))
            {
                Ok(rec) => {
                    set.add_record(&rec);
                    set.record_names.push(name);
                    if rec.time > set.latest_time {
                        set.latest_time = rec.time.clone();
                    }
                }
                Err(e) => notices.push(format!("{what} skipped: {e}")),
            }
        }
        Ok((set, notices))
    }

    /// A digest of which records this set holds (0 for none), so that a client's index can
    /// tell whether records appeared or went since it last applied them.
    pub fn digest(&self) -> u64 {
        if self.record_names.is_empty() {
            return 0;
        }
        let mut names = self.record_names.clone();
        names.sort();
        let hash = ChunkId::of(names.join("\n").as_bytes());
        u64::from_le_bytes(hash.0[..8].try_into().expect("8 bytes")).max(1)
    }

    fn add_record(&mut self, rec: &DamageRecord) {
        for c in &rec.copies {
            match c.chunk {
                None => {
                    self.containers.insert(c.container, c.reason.clone());
                }
                Some(chunk) => {
                    self.copies.insert((c.container, chunk), c.reason.clone());
                    self.by_chunk.entry(chunk).or_default().insert(c.container);
                }
            }
        }
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.copies.is_empty() && self.containers.is_empty()
    }

    /// Why the copy of `chunk` in `container` is recorded as damaged, if it is.
    pub fn reason(&self, container: &ContainerId, chunk: &ChunkId) -> Option<&str> {
        self.containers
            .get(container)
            .or_else(|| self.copies.get(&(*container, *chunk)))
            .map(String::as_str)
    }

    /// Why some stored copy of `chunk` was recorded as damaged, if one was.
    pub fn chunk_reason(&self, chunk: &ChunkId) -> Option<&str> {
        self.chunk_damage(chunk).map(|(_, r)| r)
    }

    /// The container of a recorded damaged copy of `chunk` (the first in order, if there are
    /// several), and why, if there is one.
    pub fn chunk_damage(&self, chunk: &ChunkId) -> Option<(ContainerId, &str)> {
        let c = *self.by_chunk.get(chunk)?.first()?;
        Some((c, self.copies.get(&(c, *chunk))?.as_str()))
    }

    /// The containers of every recorded damaged copy of `chunk`, in order.
    pub fn chunk_containers(&self, chunk: &ChunkId) -> Vec<ContainerId> {
        self.by_chunk
            .get(chunk)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Whether this one copy is recorded (not counting a record of its whole container).
    pub fn copy_recorded(&self, container: &ContainerId, chunk: &ChunkId) -> bool {
        self.copies.contains_key(&(*container, *chunk))
    }

    /// The chunks whose copies in `container` are recorded as damaged.
    pub fn chunks_in(&self, container: &ContainerId) -> Vec<ChunkId> {
        self.copies
            .keys()
            .filter(|(c, _)| c == container)
            .map(|(_, k)| *k)
            .collect()
    }

    /// Whether `container` is recorded as damaged whole.
    pub fn container_damaged(&self, container: &ContainerId) -> bool {
        self.containers.contains_key(container)
    }

    /// The containers recorded as damaged whole (their metadata could not be read, so which
    /// chunks they held is not known), in order.
    pub fn whole_containers(&self) -> Vec<ContainerId> {
        let mut v: Vec<ContainerId> = self.containers.keys().copied().collect();
        v.sort();
        v
    }

    /// Every container with a recorded damage.
    pub fn containers(&self) -> HashSet<ContainerId> {
        self.containers
            .keys()
            .copied()
            .chain(self.copies.keys().map(|(c, _)| *c))
            .collect()
    }

    /// The recorded copies, as a record (for rewriting the set).
    pub fn to_record(&self, time: String) -> DamageRecord {
        let mut copies: Vec<DamagedCopy> = self
            .containers
            .iter()
            .map(|(c, reason)| DamagedCopy {
                container: *c,
                chunk: None,
                reason: reason.clone(),
            })
            .chain(self.copies.iter().map(|((c, k), reason)| DamagedCopy {
                container: *c,
                chunk: Some(*k),
                reason: reason.clone(),
            }))
            .collect();
        copies.sort_by(|a, b| (&a.container, &a.chunk).cmp(&(&b.container, &b.chunk)));
        DamageRecord { time, copies }
    }

    /// Adds copies (for records written in this run).
    pub fn extend(&mut self, copies: &[DamagedCopy]) {
        self.add_record(&DamageRecord {
            time: String::new(),
            copies: copies.to_vec(),
        });
    }

    /// Forgets the record of one copy (it verifies again).
    pub fn forget_copy(&mut self, container: &ContainerId, chunk: &ChunkId) {
        self.copies.remove(&(*container, *chunk));
        self.rebuild_by_chunk();
    }

    fn rebuild_by_chunk(&mut self) {
        self.by_chunk.clear();
        for (c, k) in self.copies.keys() {
            self.by_chunk.entry(*k).or_default().insert(*c);
        }
    }

    /// Forgets everything recorded about `container` (it was deleted).
    pub fn forget_container(&mut self, container: &ContainerId) {
        self.containers.remove(container);
        self.copies.retain(|(c, _), _| c != container);
        self.rebuild_by_chunk();
    }
}

/// Writes a new record; returns its name.
pub fn write_record(backend: &dyn Backend, record: &DamageRecord) -> Result<String> {
    let bytes = record.to_bytes();
    let name = ChunkId::of(&bytes).to_hex();
    backend.put(FileKind::Damage, &name, &bytes)?;
    Ok(name)
}

/// Replaces the records `old_names` by one record holding `set` (nothing when it is empty):
/// the new record is durable before any old one is deleted.
pub fn rewrite(
    backend: &dyn Backend,
    set: &DamageSet,
    old_names: &[String],
    time: String,
) -> Result<()> {
    let new_name = if set.is_empty() {
        None
    } else {
        Some(write_record(backend, &set.to_record(time))?)
    };
    for name in old_names {
        if Some(name) != new_name.as_ref() {
            backend.delete(FileKind::Damage, name)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::format::damage::DamagedCopy;

    #[test]
    fn records_round_trip_merge_and_rewrite() {
        let b = MemoryBackend::default();
        let c1 = ContainerId([1; 32]);
        let c2 = ContainerId([2; 32]);
        let k = ChunkId([7; 32]);
        let rec = DamageRecord {
            time: "t".into(),
            copies: vec![
                DamagedCopy {
                    container: c1,
                    chunk: Some(k),
                    reason: "crc".into(),
                },
                DamagedCopy {
                    container: c2,
                    chunk: None,
                    reason: "metadata".into(),
                },
            ],
        };
        assert_eq!(DamageRecord::from_bytes(&rec.to_bytes(), "x").unwrap(), rec);
        let name = write_record(&b, &rec).unwrap();
        b.put(FileKind::Damage, "garbage", b"junk").unwrap();
        let (mut set, notices) = DamageSet::load(&b).unwrap();
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert_eq!(set.reason(&c1, &k), Some("crc"));
        assert_eq!(set.reason(&c2, &k), Some("metadata"));
        assert_eq!(set.reason(&c1, &ChunkId([8; 32])), None);
        set.forget_container(&c2);
        rewrite(&b, &set, &set.record_names.clone(), "t2".into()).unwrap();
        let (again, _) = DamageSet::load(&b).unwrap();
        assert!(!again.record_names.contains(&name));
        assert_eq!(again.reason(&c1, &k), Some("crc"));
        assert!(!again.container_damaged(&c2));
        set.forget_container(&c1);
        rewrite(&b, &set, &again.record_names, "t3".into()).unwrap();
        let (empty, _) = DamageSet::load(&b).unwrap();
        assert!(empty.is_empty() && empty.record_names.is_empty());
    }
}

//! The local container metadata cache: the metadata sections of the containers this client
//! wrote or read, one file per container, kept between commands where every request is a
//! round trip (an object store). A backup reads its parent's tree and delta bases through
//! their containers' metadata; on the 3-node Garage benchmark that cost two rounds of
//! requests (a suffix read, then the rest of a section larger than it) before the tree's
//! first region could be asked for, each round likely to stall 45 ms in the cluster. A
//! container is written once and never changes, so its metadata, once known, stays right
//! for as long as the container exists (and a stale file for a pruned container is only
//! never asked for).
//!
//! Like the other client caches it is never trusted beyond its checksums: a file is used
//! only if it decodes and its section matches its footer's CRC32C (the checks a reader of
//! the container makes), else it is ignored and the metadata read from the container. It is
//! bounded ([`META_CACHE_BYTES`]): past it, the least recently written files go, and a
//! process keeps at most that much of the metadata it reads. Nothing is
//! fsynced: a file lost in a crash costs a request. Format: see docs/format.md, "Local
//! container metadata cache".

use crate::format::container::{ContainerId, ContainerMeta, FOOTER_LEN};
use crate::format::index_file::IndexedContainer;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The cache's directory in a repository's cache directory.
pub const META_CACHE_DIR: &str = "metas";
/// The most bytes of metadata files kept (about 160 default containers of SQLAlchemy tars,
/// whose sections are ~400 KiB).
pub const META_CACHE_BYTES: u64 = 64 << 20;
/// A file's first bytes, then a u16 LE version.
const MAGIC: &[u8; 6] = b"DDMETA";
const VERSION: u16 = 1;
const HEAD_LEN: usize = MAGIC.len() + 2;

/// The metadata cache of one repository (see the module doc).
#[derive(Clone, Debug)]
pub struct MetaCache {
    dir: PathBuf,
}

impl MetaCache {
    /// The cache in the repository cache directory `repo_dir` (created when first written).
    pub fn new(repo_dir: &Path) -> Self {
        MetaCache {
            dir: repo_dir.join(META_CACHE_DIR),
        }
    }

    fn path(&self, id: &ContainerId) -> PathBuf {
        self.dir.join(id.to_hex())
    }

    /// The metadata of container `id`, if a file holds it and passes its checks.
    pub fn get(&self, id: &ContainerId) -> Option<ContainerMeta> {
        decode(*id, &std::fs::read(self.path(id)).ok()?)
    }

    /// Keeps `rec`, the footer and metadata section of a container this client just wrote
    /// (the next backup reads its parent's tree and bases there first). Best effort: a
    /// failure only costs a later request. The caller trims the cache after a batch.
    pub fn put_written(&self, rec: &IndexedContainer) {
        self.write(rec);
    }

    /// Keeps `rec`, a container's footer and metadata section just read and checked, while
    /// this process has kept fewer than [`META_CACHE_BYTES`] of them: a restore of a large
    /// repository reads far more metadata than the cache holds, and must not write it all
    /// to disk. The first call of the process trims the cache to its budget, so that the
    /// directory stays within twice it even for clients that only restore.
    pub fn put_read(&self, rec: &IndexedContainer) {
        static TRIMMED: AtomicBool = AtomicBool::new(false);
        static KEPT: AtomicU64 = AtomicU64::new(0);
        self.put_read_within(rec, (&TRIMMED, &KEPT), META_CACHE_BYTES);
    }

    /// [`Self::put_read`] with the process's state `(trimmed, kept)` and budget given.
    fn put_read_within(
        &self,
        rec: &IndexedContainer,
        (trimmed, kept): (&AtomicBool, &AtomicU64),
        budget: u64,
    ) {
        if !trimmed.swap(true, Ordering::Relaxed) {
            self.trim(budget);
        }
        let len = (HEAD_LEN + FOOTER_LEN + rec.section.len()) as u64;
        if kept.fetch_add(len, Ordering::Relaxed) + len > budget {
            return;
        }
        self.write(rec);
    }

    fn write(&self, rec: &IndexedContainer) {
        let path = self.path(&rec.id);
        if path.exists() {
            return;
        }
        let _ = std::fs::create_dir_all(&self.dir);
        let mut bytes = Vec::with_capacity(HEAD_LEN + FOOTER_LEN + rec.section.len());
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        bytes.extend_from_slice(&rec.footer);
        bytes.extend_from_slice(&rec.section);
        let tmp = self
            .dir
            .join(format!(".{}.tmp-{}", rec.id.to_hex(), std::process::id()));
        if std::fs::write(&tmp, &bytes).is_ok() && std::fs::rename(&tmp, &path).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }

    /// Removes the least recently written files until at most `budget` bytes are left.
    pub fn trim(&self, budget: u64) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((m.modified().ok()?, m.len(), e.path()))
            })
            .collect();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, len, path) in files {
            if total <= budget {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
    }
}

/// The metadata a cache file of container `id` holds, `None` unless every check passes
/// (never panics, whatever the bytes: fuzz target `meta_cache`).
pub fn decode(id: ContainerId, bytes: &[u8]) -> Option<ContainerMeta> {
    let rest = bytes.strip_prefix(MAGIC.as_slice())?;
    let version = u16::from_le_bytes(rest.get(..2)?.try_into().ok()?);
    if version != VERSION {
        return None;
    }
    let rest = &rest[2..];
    let footer: [u8; FOOTER_LEN] = rest.get(..FOOTER_LEN)?.try_into().ok()?;
    let rec = IndexedContainer {
        id,
        footer,
        section: rest[FOOTER_LEN..].to_vec(),
    };
    rec.meta(&format!("cached metadata of container {}", id.to_hex()))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::container::{ContainerBuilder, EntryKind, RegionBuilder};
    use dedelta_core::compress::Compression;
    use dedelta_core::ChunkId;

    /// A sealed container's id, record and metadata.
    fn container(seed: u8) -> (ContainerId, IndexedContainer, ContainerMeta) {
        let mut b = ContainerBuilder::with_version(crate::format::container::CONTAINER_VERSION);
        let mut reg = RegionBuilder::default();
        let data = vec![seed; 1000];
        reg.push(
            ChunkId::of(&data),
            EntryKind::Full,
            &data,
            data.len(),
            vec![1, 2],
        );
        b.add_region(reg.compress(Compression::zstd(3)));
        let (id, bytes, meta) = b.seal();
        let rec = IndexedContainer::from_container_tail(id, &bytes).unwrap();
        (id, rec, meta)
    }

    #[test]
    fn a_kept_record_comes_back_and_damage_is_ignored() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = MetaCache::new(tmp.path());
        let (id, rec, meta) = container(1);
        assert!(cache.get(&id).is_none());
        cache.put_written(&rec);
        assert_eq!(cache.get(&id), Some(meta));
        // Any byte changed, or the file cut short: not used.
        let path = cache.path(&id);
        let good = std::fs::read(&path).unwrap();
        for at in [0, HEAD_LEN, HEAD_LEN + 3, good.len() - 1] {
            let mut bad = good.clone();
            bad[at] ^= 1;
            std::fs::write(&path, &bad).unwrap();
            assert!(cache.get(&id).is_none(), "byte {at} changed");
        }
        for len in [0, 5, HEAD_LEN + 10, good.len() - 1] {
            std::fs::write(&path, &good[..len]).unwrap();
            assert!(cache.get(&id).is_none(), "cut to {len}");
        }
        // Another container's file under this name: its footer does not match.
        let (_, other, _) = container(2);
        cache.put_written(&other);
        std::fs::copy(cache.path(&other.id), &path).unwrap();
        assert_ne!(cache.get(&id), Some(container(1).2));
    }

    /// What a process reads is kept up to the budget only (a restore of a large repository
    /// reads far more metadata than the cache holds), and its first read trims the cache.
    #[test]
    fn metadata_read_is_kept_within_a_budget_per_process() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = MetaCache::new(tmp.path());
        let recs: Vec<_> = (0..6).map(container).collect();
        cache.put_written(&recs[0].1);
        cache.put_written(&recs[1].1);
        let one = std::fs::metadata(cache.path(&recs[0].0)).unwrap().len();
        let (trimmed, kept) = (AtomicBool::new(false), AtomicU64::new(0));
        for (_, rec, _) in &recs[2..] {
            cache.put_read_within(rec, (&trimmed, &kept), 2 * one);
        }
        let held: Vec<bool> = recs
            .iter()
            .map(|(id, _, _)| cache.get(id).is_some())
            .collect();
        // Two files fit: the written ones stay (the first trim found the cache within the
        // budget), the first two read are kept, the others not.
        assert_eq!(held, vec![true, true, true, true, false, false]);
    }

    #[test]
    fn trim_removes_the_oldest_files_first() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = MetaCache::new(tmp.path());
        let recs: Vec<_> = (0..4).map(container).collect();
        for (i, (_, rec, _)) in recs.iter().enumerate() {
            cache.put_written(rec);
            let t = std::time::SystemTime::UNIX_EPOCH
                + std::time::Duration::from_secs(1000 * (i as u64 + 1));
            let f = std::fs::File::options()
                .write(true)
                .open(cache.path(&rec.id))
                .unwrap();
            f.set_modified(t).unwrap();
        }
        let one = std::fs::metadata(cache.path(&recs[0].0)).unwrap().len();
        cache.trim(2 * one);
        let kept: Vec<bool> = recs
            .iter()
            .map(|(id, _, _)| cache.get(id).is_some())
            .collect();
        assert_eq!(kept, vec![false, false, true, true]);
    }
}

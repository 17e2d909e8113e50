//! Runs on: the dedup thread (the monitor), and the caller's thread (lists read and written).
//!
//! Dual-locality similarity tracking (LoopDelta §4.2). During a backup a reuse-ratio monitor
//! ([`ReuseMonitor`]) counts, per old container, the distinct data chunks (chunks stored in
//! full, the only ones that can be bases; deltas are not counted, as LoopDelta's containers
//! keep deltas apart from data chunks) the backup references in it: its duplicates (logical
//! locality: the chunks this backup shares with the last) and the bases of its deltas. The
//! reuse ratio of a container is that count over the container's data chunks (on Redis
//! dumps, where most chunks change in every version, counting every entry left the last
//! version's containers, mostly deltas, off the list and cost 10 % of the deltas); a
//! container whose ratio is above the dense threshold
//! (`delta.dense_threshold`, 0.3) holds many chunks of this backup's neighbourhood
//! (physical locality: the rest of the container was stored beside them) and goes on the
//! backup's dense container list, with every container the backup wrote (all of whose
//! chunks it references). The next backup of the same lineage (host and paths, as `forget`
//! groups snapshots) loads the listed containers whole when deduplication prefetches them
//! ([`super::prefetch`]). The list is stored beside the snapshot
//! ([`crate::format::dense`]); prune keeps the lists in step (§4.6, [`after_prune`]).

use super::prefetch::PrefetchedBases;
use crate::backend::{Backend, FileKind};
use crate::error::{Error, Result};
use crate::format::container::ContainerId;
use crate::format::dense::DenseList;
use crate::format::snapshot::SnapshotId;
use crate::repository::snapshots::SnapshotList;
use dedelta_core::ChunkId;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The reuse-ratio monitor of one backup (see the module doc).
pub struct ReuseMonitor {
    bases: Arc<PrefetchedBases>,
    /// Distinct chunks referenced per old container, and the order containers were first
    /// referenced in.
    referenced: HashMap<ContainerId, HashSet<ChunkId>>,
    order: Vec<ContainerId>,
}

impl ReuseMonitor {
    /// A monitor taking containers' entry counts from `bases` (every container the locality
    /// index loaded comes through it) and the containers of prefetched bases.
    pub fn new(bases: Arc<PrefetchedBases>) -> Self {
        ReuseMonitor {
            bases,
            referenced: HashMap::new(),
            order: Vec::new(),
        }
    }

    fn reference(&mut self, container: ContainerId, id: ChunkId) {
        let set = self.referenced.entry(container).or_insert_with(|| {
            self.order.push(container);
            HashSet::new()
        });
        set.insert(id);
    }

    /// The backup referenced duplicate `id`, stored in old `container` (counted if stored
    /// there in full). Which entries are full is asked at the end ([`Self::ratio`]): the
    /// container's metadata may come through the pool's lookups after the stream met the
    /// duplicate (a duplicate of an unchanged file is not looked up), and an answer taken
    /// then would depend on the threads' timing.
    pub fn duplicate(&mut self, container: ContainerId, id: ChunkId) {
        self.reference(container, id);
    }

    /// A delta of this backup was encoded against `base`: its container, if the base was
    /// prefetched (this backup's own new chunks are in containers it wrote), is referenced.
    pub fn delta_base(&mut self, base: ChunkId) {
        if let Some(c) = self.bases.container_of(&base) {
            self.reference(c, base);
        }
    }

    /// The reuse ratio of an old container (referenced data chunks over its data chunks), if
    /// its metadata came through the cache.
    pub fn ratio(&self, container: &ContainerId) -> Option<f64> {
        let n = self.bases.full_count(container)?;
        let refs = self
            .referenced
            .get(container)?
            .iter()
            .filter(|id| self.bases.stores_full(container, id))
            .count();
        Some(if n == 0 { 0.0 } else { refs as f64 / n as f64 })
    }

    /// Stores `list` beside its snapshot ([`save`]), then keeps a copy in the backup's client
    /// cache directory, if it has one, for the next backup of the lineage on this client.
    ///
    /// # Errors
    /// The backend cannot write it.
    pub fn save(&self, backend: &dyn Backend, list: &DenseList) -> Result<()> {
        save(backend, list)?;
        if let Some(dir) = self.bases.client_dir() {
            save_local(dir, list);
        }
        Ok(())
    }

    /// The dense container list: the old containers whose reuse ratio is above `threshold`
    /// (in the order first referenced), then `written` (the backup's own containers, whose
    /// ratio is 1), unless the threshold is 1.
    pub fn dense(&self, threshold: f64, written: &[ContainerId]) -> Vec<ContainerId> {
        let mut out: Vec<ContainerId> = self
            .order
            .iter()
            .filter(|c| self.ratio(c).is_some_and(|r| r > threshold))
            .copied()
            .collect();
        if threshold < 1.0 {
            let seen: HashSet<ContainerId> = out.iter().copied().collect();
            out.extend(written.iter().filter(|c| !seen.contains(c)));
        }
        out
    }
}

/// The dense container list of the newest snapshot of `host` and `paths` in `listed`, as a
/// lookup table (empty when there is none); a notice when a list exists but cannot be read
/// (it only costs this backup its prefetched bases). The list comes from `client_dir` (the
/// repository's client cache directory) when this client's backup that wrote it kept a copy
/// there ([`ReuseMonitor::save`]), else from the repository.
pub fn load_for_lineage(
    backend: &dyn Backend,
    listed: &SnapshotList,
    (host, paths): (&str, &[String]),
    client_dir: Option<&Path>,
) -> (HashSet<ContainerId>, Option<String>) {
    let Some((id, _)) = listed
        .snapshots
        .iter()
        .rev()
        .find(|(_, s)| s.host == host && s.paths == paths)
    else {
        return (HashSet::new(), None);
    };
    if let Some(list) = client_dir.and_then(|d| take_local(d, id)) {
        return (list.containers.into_iter().collect(), None);
    }
    match load(backend, id) {
        Ok(Some(list)) => (list.containers.into_iter().collect(), None),
        Ok(None) => (HashSet::new(), None),
        Err(e) => (
            HashSet::new(),
            Some(format!("{e}; no bases are prefetched this time")),
        ),
    }
}

/// The dense container list stored beside snapshot `id`, if any.
///
/// # Errors
/// It cannot be read or is damaged.
pub fn load(backend: &dyn Backend, id: &SnapshotId) -> Result<Option<DenseList>> {
    let name = id.to_hex();
    match backend.get(FileKind::Dense, &name) {
        Ok(bytes) => DenseList::from_bytes(&bytes, &name).map(Some),
        Err(e) => match Error::from(e) {
            Error::ObjectMissing { .. } => Ok(None),
            other => Err(other),
        },
    }
}

/// Stores `list` beside its snapshot (after the snapshot: see [`crate::format::dense`]).
///
/// # Errors
/// The backend cannot write it.
pub fn save(backend: &dyn Backend, list: &DenseList) -> Result<()> {
    backend.put(FileKind::Dense, &list.snapshot.to_hex(), &list.to_bytes())?;
    Ok(())
}

/// Where this client keeps the dense lists its backups wrote, in a repository's client cache
/// directory, until the next backup of the lineage reads them.
pub const LOCAL_LIST_DIR: &str = "dense-lists";

/// The copy of snapshot `id`'s list that this client kept in `client_dir`, taken (each list
/// is read by one next backup). Why a copy: the list is repository metadata this client
/// wrote, as its snapshot files are (which it reads from its snapshot cache), and reading it
/// back from the repository was one request a backup. Never trusted beyond its checksum
/// and name; a copy left stale by a prune names containers it removed, which no index
/// entry names any more, so they are never asked for.
fn take_local(client_dir: &Path, id: &SnapshotId) -> Option<DenseList> {
    let name = id.to_hex();
    let path = client_dir.join(LOCAL_LIST_DIR).join(&name);
    let bytes = std::fs::read(&path).ok()?;
    let _ = std::fs::remove_file(&path);
    DenseList::from_bytes(&bytes, &name)
        .ok()
        .filter(|l| l.snapshot == *id)
}

/// Keeps a copy of `list` in `client_dir` (temporary file renamed; failures ignored: the
/// next backup then reads the repository's).
fn save_local(client_dir: &Path, list: &DenseList) {
    let dir = client_dir.join(LOCAL_LIST_DIR);
    let name = list.snapshot.to_hex();
    let tmp = dir.join(format!("{name}.tmp-{}", std::process::id()));
    let ok = std::fs::create_dir_all(&dir).is_ok()
        && std::fs::write(&tmp, list.to_bytes()).is_ok()
        && std::fs::rename(&tmp, dir.join(&name)).is_ok();
    if !ok {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// After a prune (LoopDelta §4.6): the containers it deleted or rewrote (`removed`) leave
/// every dense container list, and the lists of snapshots that are gone (forgotten, or a
/// list left by a backup killed after writing it) or that cannot be read go. Returns the
/// lists rewritten and deleted.
///
/// # Errors
/// Listing, reading, writing or deleting a list fails.
pub fn after_prune(
    backend: &dyn Backend,
    removed: &HashSet<ContainerId>,
    snapshots: &HashSet<SnapshotId>,
) -> Result<(u64, u64)> {
    let (mut rewritten, mut deleted) = (0, 0);
    for (name, _) in backend.list(FileKind::Dense)? {
        let list = SnapshotId::from_hex(&name)
            .filter(|id| snapshots.contains(id))
            .and_then(|id| load(backend, &id).ok().flatten());
        let Some(mut list) = list else {
            backend.delete(FileKind::Dense, &name)?;
            deleted += 1;
            continue;
        };
        let before = list.containers.len();
        list.containers.retain(|c| !removed.contains(c));
        if list.containers.len() != before {
            save(backend, &list)?;
            rewritten += 1;
        }
    }
    Ok((rewritten, deleted))
}

/// The directory of [`LocalDenseContainers`] in a repository's client cache directory.
pub const LOCAL_DENSE_DIR: &str = "dense-containers";

/// Dense containers kept whole on the client's disk between backups: the `-local` variant
/// (`backup --keep-dense-local`), a dedelta deviation from LoopDelta §4.3, which reads a
/// dense container from the store whenever a backup first needs it (docs/eval/papers.md,
/// LoopDelta). On a series whose backups are a few containers each, the first version's
/// containers stay dense and serve most bases in every backup, and reading them whole each
/// time was most of `loopdelta`'s extra backup time; kept here, each dense container is read
/// from the repository once while it stays on the list, as restic keeps tree packs in its
/// cache. Reads from here are not repository I/O: the backup counts them apart
/// ([`super::prefetch::PrefetchCounts::local_loaded`]).
///
/// A container file never changes (its name is the hash of its bytes, checked on every
/// read here), so a copy is right for as long as it exists; a missing, unreadable or damaged
/// copy only costs the repository read. Kept: the containers of the dense list the backup
/// starts with, every other file is deleted then, so the directory holds at most one list's
/// containers. Not fsynced (a cache).
#[derive(Debug)]
pub struct LocalDenseContainers {
    dir: PathBuf,
}

impl LocalDenseContainers {
    /// The copies in `repo_cache_dir` (the repository's client cache directory), keeping
    /// those of `dense` only.
    ///
    /// # Errors
    /// The directory cannot be created or listed.
    pub fn open(repo_cache_dir: &Path, dense: &HashSet<ContainerId>) -> std::io::Result<Self> {
        let dir = repo_cache_dir.join(LOCAL_DENSE_DIR);
        std::fs::create_dir_all(&dir)?;
        for e in std::fs::read_dir(&dir)? {
            let e = e?;
            let keep = e
                .file_name()
                .to_str()
                .and_then(ContainerId::from_hex)
                .is_some_and(|id| dense.contains(&id));
            if !keep {
                let _ = std::fs::remove_file(e.path());
            }
        }
        Ok(LocalDenseContainers { dir })
    }

    /// Container `id`'s bytes, if a copy is kept and still hashes to its name.
    pub fn get(&self, id: &ContainerId) -> Option<Vec<u8>> {
        let bytes = std::fs::read(self.dir.join(id.to_hex())).ok()?;
        (ChunkId::of(&bytes).0 == id.0).then_some(bytes)
    }

    /// Keeps a copy of container `id`, just read from the repository (a temporary file
    /// renamed, so a reader never sees a partial copy; failures are ignored).
    pub fn put(&self, id: &ContainerId, bytes: &[u8]) {
        let name = id.to_hex();
        let tmp = self.dir.join(format!("{name}.tmp-{}", std::process::id()));
        if std::fs::write(&tmp, bytes).is_ok()
            && std::fs::rename(&tmp, self.dir.join(&name)).is_ok()
        {
            return;
        }
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::container::{ContainerMeta, EntryMeta};

    fn id(n: u8) -> ChunkId {
        ChunkId([n; 32])
    }

    fn entry(n: u8, kind: crate::format::container::EntryKind) -> EntryMeta {
        EntryMeta {
            id: id(n),
            kind,
            region: 0,
            offset: 0,
            stored_len: 1,
            original_len: 1,
            super_features: Vec::new(),
        }
    }

    /// The reuse ratio counts the distinct data chunks (full entries) referenced over the
    /// container's data chunks: a duplicate of a delta entry does not count, a chunk
    /// referenced twice counts once, and a delta base counts.
    #[test]
    fn reuse_ratio_counts_distinct_data_chunks() {
        use crate::format::container::EntryKind::{self, Full};
        let c = ContainerId([9; 32]);
        let bases = Arc::new(PrefetchedBases::new(HashSet::from([c]), 4));
        let meta = ContainerMeta {
            regions: Vec::new(),
            entries: vec![
                entry(1, Full),
                entry(2, Full),
                entry(3, Full),
                entry(4, Full),
                entry(5, EntryKind::delta(id(1))),
            ],
        };
        bases.record_full_for_test(c, &meta);
        let mut m = ReuseMonitor::new(bases.clone());
        m.duplicate(c, id(1));
        m.duplicate(c, id(1));
        m.duplicate(c, id(5));
        assert_eq!(m.ratio(&c), Some(0.25));
        assert!(m.dense(0.3, &[]).is_empty());
        m.duplicate(c, id(2));
        assert_eq!(m.ratio(&c), Some(0.5));
        let new = ContainerId([1; 32]);
        assert_eq!(m.dense(0.3, &[new]), vec![c, new]);
        assert_eq!(m.dense(1.0, &[new]), Vec::<ContainerId>::new());
        // A container whose metadata never came through the cache has no ratio.
        m.duplicate(ContainerId([2; 32]), id(7));
        assert_eq!(m.ratio(&ContainerId([2; 32])), None);
    }

    /// A kept copy is returned only while it hashes to its name; opening with a dense list
    /// deletes the copies of containers not on it.
    #[test]
    fn local_dense_containers_keep_only_the_list_and_check_names() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (b"container a".to_vec(), b"container b".to_vec());
        let (ia, ib) = (
            ContainerId(ChunkId::of(&a).0),
            ContainerId(ChunkId::of(&b).0),
        );
        let local = LocalDenseContainers::open(d.path(), &HashSet::new()).unwrap();
        local.put(&ia, &a);
        local.put(&ib, &b);
        assert_eq!(local.get(&ia), Some(a.clone()));
        // Damaged: not its name's bytes.
        std::fs::write(d.path().join(LOCAL_DENSE_DIR).join(ib.to_hex()), b"other").unwrap();
        assert_eq!(local.get(&ib), None);
        let local = LocalDenseContainers::open(d.path(), &HashSet::from([ia])).unwrap();
        assert_eq!(local.get(&ia), Some(a));
        let left: Vec<_> = std::fs::read_dir(d.path().join(LOCAL_DENSE_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from(ia.to_hex())]);
    }
}

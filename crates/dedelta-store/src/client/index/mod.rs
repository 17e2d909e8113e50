//! The chunk index: fingerprint -> (container, entry number), and super-feature -> a full
//! chunk that had it. A client-side cache of what container metadata lists, kept as a small
//! log-structured store of its own (issue 14: the redb index it replaces cost 147-280 bytes
//! per chunk on disk and a random B-tree rewrite per commit).
//!
//! Files, next to the manifest path `P` (`<cache>/<repo id>/chunks.idx`):
//! - `P`: the [`manifest`]: the run files that make up the index, the containers it has taken
//!   in (each with a range of *global entry numbers*), the damage digest and the completeness
//!   marker; replaced whole by temp file + rename at every change (no fsync: a cache, see
//!   [`manifest::Manifest::store`]);
//! - `P.<number>.run`: immutable [`run`] files, one per commit (a batch of containers),
//!   merged when there are too many and rewritten without dead chunks after a prune;
//! - `P.lock`: held (flock) while the index is open, so two processes never share it.
//!
//! A chunk's location is stored as its global entry number (5 bytes: the container's first
//! number plus the entry number), a super-feature as a 40-bit key (4 bytes in a run of more
//! than 16,384 keys, see [`run`]) naming a chunk entry of its run. A key is a truncated hash:
//! two super-features may share one, so a sketch hit is only a candidate base; the delta
//! stage encodes against it and keeps the delta only if it saves enough, so a false hit costs
//! a worse delta attempt, never wrong data.
//!
//! The index is a cache: containers are the source of truth. Entries are recorded only after
//! their container is durable (and a run file is durable before the manifest names it). A
//! manifest or run that is torn, fails a checksum or has another version is damage: every
//! call that meets it returns [`Error::IndexDamaged`], the manifest is deleted at once (this
//! process refuses further changes), and the next open starts from an empty, incomplete index
//! that is rebuilt. A rebuild commits one new manifest, so a rebuild killed half-way leaves the
//! previous index; run files no manifest names are deleted when the index is opened.
//!
//! Which chunk a super-feature names when several full chunks have it is the index's
//! [`SketchKeep`] ([`ChunkIndex::set_sketch_keep`], the repository config's `delta.sketch_keep`
//! or a backup's override). Keeping the oldest (FirstFit), a batch records no key an older run
//! holds and lookups ask the runs oldest first; keeping the newest (LoopDelta §3.1.3), every
//! batch records its keys, lookups ask the runs newest first and merges keep the newest live
//! entry. Either way one key is one entry per run; switching the choice on an existing index
//! applies to what is recorded and merged from then on (`repair index` rebuilds it whole).

mod bloom;
mod change;
mod files;
mod filter;
mod filter_file;
mod layout;
mod lock;
mod manifest;
mod private;
mod rebuild;
mod recent;
mod removal;
mod run;
mod sketch_cost;
mod view;

use crate::error::{Error, Result};
use crate::format::container::{ContainerId, ContainerMeta, EntryKind, EntryMeta};
use bloom::{mix64, FilterBudget};
use change::{add_batch, merge_runs, record_of, Change};
use dedelta_core::sketch::SketchKeep;
use dedelta_core::ChunkId;
pub use files::files_bytes;
use files::{remove_orphans, run_path};
use filter::index_digest;
pub use filter::FingerprintFilter;
pub use layout::LayoutMark;
use lock::hold_lock;
#[cfg(test)]
use lock::lock_path;
use manifest::{Manifest, RunRecord, Slot};
pub use private::PrivateIndex;
pub use rebuild::{DeltaCopy, Rebuild};
use run::Run;
pub use sketch_cost::{SketchLookups, DEFAULT_SKETCH_FILTER_BYTES};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use view::View;
pub use view::{IndexReader, Trust};

/// The file name the index had when it was a redb database: deleted when the index opens.
pub const LEGACY_FILE: &str = "chunks.redb";

/// Runs are merged when the newest ones together reach half the size of the one before
/// (each entry is rewritten about log2(n) times), and always when there are more than this.
const MAX_RUNS: usize = 12;

/// Runs are not merged past this many entries (4 M chunks, about 32 GB of 8 KiB chunks): a
/// merge holds 4 bytes per input entry, so this bounds a merge's memory to 16 MiB. Larger
/// runs stay side by side (each adds one Bloom filter test to a lookup).
const MAX_MERGE_ENTRIES: u64 = 4 << 20;

/// An index smaller than this is merged into one run after a writing command (cheap, and it
/// keeps lookups at one run) once the runs beside its largest hold [`COMPACT_SHARE`] of its
/// file bytes, or whatever they hold below [`COMPACT_ALWAYS_BYTES`].
const COMPACT_ALL_BYTES: u64 = 8 << 20;

/// The share (1 / this) of the largest run's bytes the others must reach before a small index
/// is merged whole: a backup that adds a few chunks to an index of 100k does not rewrite its
/// 6 MB (most of a one-byte backup's time, issue 20); the runs are merged every few.
const COMPACT_SHARE: u64 = 8;

/// An index below this is merged whole after every writing command, whatever its runs hold.
const COMPACT_ALWAYS_BYTES: u64 = 1 << 20;

/// The truncated key of super-feature `sf` at `position` in the sketch table: 40 bits.
///
/// Why 40: with K keys in the index, a new chunk's three lookups meet another chunk's key by
/// chance with probability about 3K / 2^bits, and each such false candidate costs a base read
/// from the repository and a delta attempt. At 32 bits that was 171-200 false candidates per
/// 51,000 new chunks in a 16 GB repository, growing linearly with it (about 7 % of new chunks
/// at 100 M keys); at 40 bits it is 256 times fewer. The extra byte costs nothing on disk in
/// runs of more than 16,384 keys, where the bucket number holds the top 8 bits (see [`run`]).
pub fn sketch_key(position: usize, sf: u64) -> u64 {
    mix64(sf ^ mix64(position as u64 + 1)) >> (64 - run::KEY_BITS)
}

/// Where a chunk is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkLocation {
    /// The container.
    pub container: ContainerId,
    /// The entry's position in the container metadata.
    pub entry: u32,
}

/// What the index's users share: where it is and whether damage was found.
#[derive(Debug)]
struct Shared {
    path: PathBuf,
    /// Set when damage was found: the manifest is gone and this process changes nothing more
    /// (a commit would name the damaged runs again).
    damaged: AtomicBool,
    /// What new readers see: the last committed view (here rather than in [`ChunkIndex`] so
    /// that a reader can catch up without a handle on the index, see [`IndexReader::refresh`]).
    view: RwLock<Arc<View>>,
    /// Whether super-feature keys keep the newest chunk ([`SketchKeep::Newest`]) rather than
    /// the oldest.
    keep_newest: AtomicBool,
    /// The global fingerprint filter, once a locality lookup asked for it
    /// ([`ChunkIndex::fingerprint_filter`]): kept up to date with every commit.
    filter: Mutex<Option<Arc<FingerprintFilter>>>,
    /// The memory the runs' super-feature filters may take (see [`FilterBudget`]).
    sketch_budget: Arc<FilterBudget>,
    /// What super-feature lookups cost.
    sketch_counts: Arc<run::SketchCounts>,
}

impl Shared {
    fn keep(&self) -> SketchKeep {
        if self.keep_newest.load(Ordering::Relaxed) {
            SketchKeep::Newest
        } else {
            SketchKeep::Oldest
        }
    }

    fn current(&self) -> Arc<View> {
        self.view.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Makes `view` what new readers see, its runs' super-feature filters held within the
    /// budget.
    fn install(&self, view: View) {
        for r in &view.runs {
            r.hold_sketch_filter_within(&self.sketch_budget);
        }
        *self.view.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(view);
    }

    fn sketch_lookups(&self, view: &View) -> SketchLookups {
        sketch_cost::lookups(&self.sketch_counts, &self.sketch_budget, view)
    }

    fn loaded_filter(&self) -> Option<Arc<FingerprintFilter>> {
        self.filter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn drop_filter(&self) {
        *self.filter.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Passes `r` on; damage deletes the manifest, so the next open rebuilds the index.
    fn guard<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(Error::IndexDamaged(_)) = &r {
            self.damaged.store(true, Ordering::SeqCst);
            // A cache: losing it costs a rebuild, keeping it would fail every command.
            let _ = std::fs::remove_file(&self.path);
            self.drop_filter();
        }
        r
    }
}

/// The persistent chunk index.
pub struct ChunkIndex {
    shared: Arc<Shared>,
    /// The committed manifest; held for the whole of a change (changes are serialised).
    state: Mutex<Manifest>,
    /// Held open with an exclusive flock while the index is open (shared by the handles of
    /// one process, see [`lock::hold_lock`]).
    _lock: Arc<std::fs::File>,
}

impl std::fmt::Debug for ChunkIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChunkIndex")
    }
}

impl ChunkIndex {
    /// Opens (creating if needed) the index whose manifest is `path`, deleting the redb file
    /// of earlier versions and run files no manifest names.
    ///
    /// # Errors
    /// [`Error::IndexDamaged`] if the manifest or a run is damaged, torn or of another
    /// version (the files are removed already: the caller opens again and rebuilds);
    /// [`Error::IndexInUse`] if another process has the index open (see [`PrivateIndex`]).
    pub fn open(path: &Path) -> Result<Self> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let lock_file = hold_lock(path)?;
        if path.file_name() != Some(std::ffi::OsStr::new(LEGACY_FILE)) {
            let _ = std::fs::remove_file(dir.join(LEGACY_FILE));
        }
        let damaged = |why: String| {
            let _ = std::fs::remove_file(path);
            remove_orphans(path, &HashSet::new());
            Error::IndexDamaged(format!("{}: {why}", path.display()))
        };
        let manifest = match std::fs::read(path) {
            Ok(bytes) => Manifest::decode(&bytes).map_err(damaged)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let m = Manifest::fresh(0);
                m.store(path)?;
                m
            }
            Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
        };
        let mut runs = Vec::with_capacity(manifest.runs.len());
        for rec in &manifest.runs {
            let run = match Run::open(&run_path(path, rec.seq), rec.seq) {
                Ok(r) => r,
                Err(Error::IndexDamaged(why)) => return Err(damaged(why)),
                Err(e) => return Err(e),
            };
            if record_of(&run) != *rec {
                return Err(damaged(format!("run {} is not the one recorded", rec.seq)));
            }
            runs.push(Arc::new(run));
        }
        remove_orphans(path, &manifest.runs.iter().map(|r| r.seq).collect());
        let shared = Arc::new(Shared {
            path: path.to_path_buf(),
            damaged: AtomicBool::new(false),
            view: RwLock::new(Arc::new(View::default())),
            keep_newest: AtomicBool::new(false),
            filter: Mutex::new(None),
            sketch_budget: Arc::new(FilterBudget::new(DEFAULT_SKETCH_FILTER_BYTES)),
            sketch_counts: Arc::default(),
        });
        shared.install(View::new(
            runs,
            manifest.slots.clone(),
            &manifest.superseded,
        ));
        Ok(ChunkIndex {
            shared,
            state: Mutex::new(manifest),
            _lock: lock_file,
        })
    }

    fn path(&self) -> &Path {
        &self.shared.path
    }

    fn current(&self) -> Arc<View> {
        self.shared.current()
    }

    /// Runs `f` on a copy of the committed state, then commits what it made: the manifest
    /// replaced durably, then the run files it made obsolete deleted. On an error nothing is
    /// committed (new run files are orphans, deleted at the next open).
    fn change(&self, f: impl FnOnce(&mut Change) -> Result<()>) -> Result<()> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if self.shared.damaged.load(Ordering::SeqCst) {
            return Err(Error::IndexDamaged(
                "the index was found damaged; it is rebuilt when next opened".into(),
            ));
        }
        let mut change = Change {
            manifest: state.clone(),
            runs: self.current().runs.clone(),
            obsolete: Vec::new(),
            keep: self.shared.keep(),
            filter: self.shared.loaded_filter(),
            drops_filter: false,
            sketch_counts: self.shared.sketch_counts.clone(),
        };
        let r = f(&mut change);
        self.shared.guard(r)?;
        change.manifest.runs = change.runs.iter().map(|r| record_of(r)).collect();
        change.manifest.tidy_superseded();
        // Before the manifest: a filter file written while this commit lands still names
        // the previous runs, and is rebuilt if the commit lands.
        if change.drops_filter {
            self.shared.drop_filter();
        }
        change.manifest.store(self.path())?;
        for p in &change.obsolete {
            let _ = std::fs::remove_file(p);
        }
        if let (Some(f), false) = (&change.filter, change.drops_filter) {
            f.set_digest(index_digest(&change.manifest.runs));
        }
        self.shared.install(View::new(
            change.runs,
            change.manifest.slots.clone(),
            &change.manifest.superseded,
        ));
        *state = change.manifest;
        Ok(())
    }

    /// Sets which chunk a super-feature names when several full chunks have it, for what is
    /// recorded, merged and looked up from now on (readers made before see it too). A fresh
    /// handle keeps the oldest.
    pub fn set_sketch_keep(&self, keep: SketchKeep) {
        self.shared
            .keep_newest
            .store(keep == SketchKeep::Newest, Ordering::Relaxed);
    }

    /// Which chunk a super-feature names ([`Self::set_sketch_keep`]).
    pub fn sketch_keep(&self) -> SketchKeep {
        self.shared.keep()
    }

    /// Replaces the index with a new, empty one (incomplete: the caller rebuilds it). For an
    /// index found damaged while open.
    pub fn reset(&self) -> Result<()> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = Manifest::fresh(state.next_seq);
        fresh.store(self.path())?;
        remove_orphans(self.path(), &HashSet::new());
        self.shared.drop_filter();
        *self.shared.view.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(View::default());
        *state = fresh;
        self.shared.damaged.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Whether the index holds every container's entries: set by [`Self::rebuild`], which is
    /// the only way an index becomes complete (a fresh one is not).
    pub fn is_complete(&self) -> Result<bool> {
        Ok(self
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .complete)
    }

    /// Merges all runs into one when the index is small (below [`COMPACT_ALL_BYTES`]) and the
    /// runs beside the largest are not too small a part of it (see [`COMPACT_SHARE`]):
    /// lookups then test one filter, and keys repeated across runs go. Larger indexes are
    /// merged as they grow (see [`MAX_RUNS`]). Returns the index's bytes before and after, if
    /// it merged.
    pub fn compact_if_worthwhile(&self) -> Result<Option<(u64, u64)>> {
        let view = self.current();
        let before = files_bytes(self.path());
        let largest = view.runs.iter().map(|r| r.file_len).max().unwrap_or(0);
        let rest: u64 = view.runs.iter().map(|r| r.file_len).sum::<u64>() - largest;
        let worthwhile = before <= COMPACT_ALWAYS_BYTES || rest * COMPACT_SHARE >= largest;
        if view.runs.len() < 2 || before > COMPACT_ALL_BYTES || !worthwhile {
            return Ok(None);
        }
        drop(view);
        self.change(|c| {
            let n = c.runs.len();
            merge_runs(self.path(), c, 0, n)
        })?;
        // The merge changed the runs, not what they hold: the filter follows them.
        self.save_filter()?;
        Ok(Some((before, files_bytes(self.path()))))
    }

    /// Reads every run whole, verifying every bucket's checksum, the order of entries, and
    /// that every entry names a container (slow: reads the whole index). `Ok(true)` if it is
    /// intact; [`Error::IndexDamaged`] if not (the index is then rebuilt).
    pub fn check_integrity(&self) -> Result<bool> {
        let view = self.current();
        let r = (|| {
            for run in &view.runs {
                let mut c = run.chunk_cursor();
                while let Some(e) = c.next()? {
                    if let run::Entry::Chunk(_, n) = e {
                        view.location(n, self.path())?;
                    }
                }
                let mut s = run.sketch_cursor();
                while s.next()?.is_some() {}
            }
            Ok(true)
        })();
        self.shared.guard(r)
    }

    /// Looks up a chunk.
    pub fn get(&self, id: &ChunkId) -> Result<Option<ChunkLocation>> {
        self.reader()?.get(id)
    }

    /// A consistent read view (of the index as last committed).
    pub fn reader(&self) -> Result<IndexReader> {
        Ok(IndexReader {
            view: self.current(),
            shared: self.shared.clone(),
        })
    }

    /// Records every entry of a durable container, and the super-features of its full
    /// entries (FirstFit: an existing super-feature keeps its chunk), in one durable commit.
    pub fn insert_container(&self, id: ContainerId, meta: &ContainerMeta) -> Result<()> {
        self.insert_containers([(id, meta)])
    }

    /// [`Self::insert_container`] for several containers in one commit (one run file): a
    /// backup indexes its containers in batches.
    pub fn insert_containers<'m>(
        &self,
        containers: impl IntoIterator<Item = (ContainerId, &'m ContainerMeta)>,
    ) -> Result<()> {
        let containers: Vec<(ContainerId, &ContainerMeta)> = containers.into_iter().collect();
        let known: Vec<(ContainerId, usize)> = containers
            .iter()
            .map(|(id, meta)| (*id, meta.entries.len()))
            .collect();
        // An inversed delta does not replace an indexed copy of its chunk (the full copy
        // stays the one deltas and reads use until prune decides, see
        // `crate::backup::inverse`).
        let reader = self.reader()?;
        let mut inversed_indexed = HashSet::new();
        for (_, meta) in &containers {
            for e in meta.entries.iter().filter(|e| e.kind.is_inversed()) {
                if reader.get(&e.id)?.is_some() {
                    inversed_indexed.insert(e.id);
                }
            }
        }
        drop(reader);
        self.take_in(
            containers,
            |_, _, e| !(e.kind.is_inversed() && inversed_indexed.contains(&e.id)),
            known,
        )
    }

    /// The containers the index has taken in.
    pub fn known_containers(&self) -> Result<HashSet<ContainerId>> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        Ok(state
            .slots
            .iter()
            .filter(|s| s.known)
            .map(|s| s.id)
            .collect())
    }

    /// Which copies the index names now (see [`LayoutMark`]).
    pub fn layout_mark(&self) -> LayoutMark {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .layout_mark()
    }

    /// Whether every chunk indexed at `mark` is still indexed at the same copy (see
    /// [`LayoutMark`]).
    pub fn layout_kept_since(&self, mark: &LayoutMark) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .layout_kept_since(mark)
    }

    /// The digest of the damage records this index has applied (0 if none was stored).
    pub fn damage_digest(&self) -> Result<u64> {
        Ok(self
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .damage_digest)
    }

    /// Takes in the entries of `added` containers that `keep` accepts and marks `known`
    /// containers as taken in, in one commit (see [`crate::repository::index_sync`]).
    pub fn take_in<'m>(
        &self,
        added: impl IntoIterator<Item = (ContainerId, &'m ContainerMeta)>,
        keep: impl Fn(&ContainerId, u32, &EntryMeta) -> bool,
        known: impl IntoIterator<Item = (ContainerId, usize)>,
    ) -> Result<()> {
        let view = self.current();
        self.change(|c| add_batch(self.path(), c, &view, added, keep, known))
    }

    /// Records that the index reflects the damage records whose digest is `digest` (after a
    /// command that wrote records has adjusted the index itself).
    pub fn set_damage_digest(&self, digest: u64) -> Result<()> {
        self.change(|c| {
            c.manifest.damage_digest = digest;
            Ok(())
        })
    }

    /// Number of indexed chunks (reads the whole index).
    pub fn len(&self) -> Result<u64> {
        let mut n = 0;
        self.for_each(|_, _| n += 1)?;
        Ok(n)
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.current().runs.is_empty())
    }

    /// Calls `f` for every indexed chunk (in id order, streaming the runs).
    pub fn for_each(&self, f: impl FnMut(ChunkId, ChunkLocation)) -> Result<()> {
        let view = self.current();
        let r = view.for_each(self.path(), f);
        self.shared.guard(r)
    }

    /// Sets the memory the runs' super-feature filters may take (see [`FilterBudget`];
    /// filters held already stay).
    pub fn set_sketch_filter_budget(&self, bytes: u64) {
        self.shared.sketch_budget.set_limit(bytes);
    }

    /// What super-feature lookups cost so far, and the filters they hold.
    pub fn sketch_lookups(&self) -> SketchLookups {
        self.shared.sketch_lookups(&self.current())
    }

    /// Bytes the index holds in memory outside the bounded super-feature filters (see
    /// [`Self::sketch_lookups`]): the runs' fingerprint filters and bucket directories (what
    /// a lookup needs without reading a file), and the fingerprint filter if loaded.
    pub fn memory_bytes(&self) -> usize {
        self.current()
            .runs
            .iter()
            .map(|r| r.memory_bytes())
            .sum::<usize>()
            + self.filter_memory_bytes()
    }

    /// Bytes of the fingerprint filter in memory (0 if it is not loaded).
    pub fn filter_memory_bytes(&self) -> usize {
        self.shared.loaded_filter().map_or(0, |f| f.memory_bytes())
    }

    /// The containers the last locality backup used, in the order it first used them, and
    /// those it wrote (see [`recent`]); none if it left no readable file.
    pub fn recent_containers(&self) -> Vec<ContainerId> {
        recent::load(&recent::recent_path(self.path()))
    }

    /// Records the containers a locality backup used and wrote, for the next one's hints.
    ///
    /// # Errors
    /// The file cannot be written (the next backup then goes without hints).
    pub fn set_recent_containers(&self, containers: &[ContainerId]) -> Result<()> {
        recent::store(&recent::recent_path(self.path()), containers)
    }

    /// Run files and their chunk entries, oldest first (for tests and measurements).
    pub fn runs(&self) -> Vec<(u64, u64)> {
        self.current()
            .runs
            .iter()
            .map(|r| (r.seq, r.chunks))
            .collect()
    }
}

/// Entry points for the fuzz targets: the decoders of the index's files.
#[doc(hidden)]
pub mod fuzzing;

#[cfg(test)]
mod memory_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod write_run_tests;

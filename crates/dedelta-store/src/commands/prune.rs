//! `prune`: mark and sweep, with delta bases kept alive.
//!
//! Mark: every chunk a remaining snapshot references (tree and file content), plus the base of
//! every live delta (one level, so one pass). A stored entry is live when its chunk is live
//! *and* the index points at it (other copies of the same chunk, left by interrupted backups,
//! are garbage). Plan: containers with no live entry are deleted; containers whose live
//! fraction (of entry bytes) is below `1 - max_unused` are rewritten: their live entries, full
//! or delta, are copied as they are into new containers. Sweep, in an order that a crash at any
//! point cannot turn into data loss:
//!
//! 1. new containers are written and durable, and indexed (the index now points at the copies);
//! 2. index entries (and sketches) of dead chunks are removed, so no backup can deduplicate
//!    against them any more;
//! 3. only then are old containers deleted.
//!
//! A prune killed anywhere leaves every snapshot restorable; the next prune finishes the job.
//! Prune reads only metadata of the containers it does not rewrite, and its memory is bounded by
//! the number of stored entries (the index size), not by the data size.

use crate::backend::FileKind;
use crate::commands::ls::walk_tree;
use crate::error::{Error, Result};
use crate::format::container::{ContainerId, EntryKind};
use crate::progress::Progress;
use crate::repository::lock::RepoLock;
use crate::repository::snapshots::list;
use crate::repository::{read_container_meta, ContainerWriter, IndexedRepository};
use dedelta_core::ChunkId;
use std::collections::{HashMap, HashSet};
use std::time::Instant;

/// Options of a prune.
#[derive(Clone, Debug)]
pub struct PruneOptions {
    /// Rewrite containers with more than this fraction of unused bytes (0.0 ..= 1.0).
    pub max_unused: f64,
    /// Only plan.
    pub dry_run: bool,
}

impl Default for PruneOptions {
    fn default() -> Self {
        PruneOptions {
            max_unused: 0.1,
            dry_run: false,
        }
    }
}

/// What prune will do (and, after it ran, did).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PrunePlan {
    /// Chunks referenced by snapshots.
    pub referenced_chunks: u64,
    /// Chunks kept only because a live delta needs them as base.
    pub bases_kept: u64,
    /// Chunks that are no longer needed.
    pub dead_chunks: u64,
    /// Containers to delete outright.
    pub delete: Vec<String>,
    /// Containers to rewrite (live entries copied forward).
    pub rewrite: Vec<String>,
    /// Containers kept as they are.
    pub keep: u64,
    /// Stored bytes before.
    pub bytes_before: u64,
    /// Bytes of the containers deleted or rewritten.
    pub bytes_removed: u64,
    /// Live entry bytes (raw) that will be copied.
    pub bytes_to_copy: u64,
}

/// What a prune did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PruneStats {
    /// The plan it executed.
    pub plan: PrunePlan,
    /// Containers written by the rewrite.
    pub containers_written: u64,
    /// Bytes those containers hold.
    pub bytes_written: u64,
    /// Net bytes freed.
    pub bytes_freed: i64,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// A container's name, size, and entries with whether the index points at each.
type ContainerEntries = (String, u64, Vec<(EntryInfo, bool)>);

struct EntryInfo {
    id: ChunkId,
    base: Option<ChunkId>,
    stored_len: u64,
}

/// Plans and (unless `dry_run`) executes a prune; the caller holds the exclusive lock.
pub fn prune(
    repo: &IndexedRepository,
    _lock: &RepoLock,
    opts: &PruneOptions,
    progress: &dyn Progress,
) -> Result<PruneStats> {
    let started = Instant::now();
    if !(0.0..=1.0).contains(&opts.max_unused) {
        return Err(Error::InvalidOption(
            "--max-unused must be within 0..=100 percent".into(),
        ));
    }
    let backend = repo.backend().clone();
    // Mark: references of every snapshot.
    progress.message("reading snapshots");
    let mut live: HashSet<ChunkId> = HashSet::new();
    let snapshots = list(backend.as_ref())?;
    // A snapshot that cannot be read cannot mark its chunks: pruning now would delete them.
    if let Some(bad) = snapshots.damaged().next() {
        return Err(Error::InvalidOption(format!(
            "snapshot {} is unreadable ({}); prune refuses to run, since it would delete the \
             data that snapshot needs. Remove it first with `dedelta forget {}` or \
             `dedelta repair snapshots --forget`",
            bad.name, bad.reason, bad.name
        )));
    }
    for (_, snap) in snapshots.snapshots {
        live.extend(snap.tree.chunk_ids()?);
        walk_tree(repo, &snap, |_, chunks| {
            live.extend(chunks.iter().map(|c| c.id));
            Ok(())
        })?;
    }
    let mut plan = PrunePlan {
        referenced_chunks: live.len() as u64,
        ..Default::default()
    };
    // Metadata of every container; the indexed copy of each chunk is the one that counts.
    progress.message("reading container metadata");
    let index = repo.index().reader()?;
    let containers = backend.list(FileKind::Container)?;
    let mut metas: Vec<ContainerEntries> = Vec::with_capacity(containers.len());
    for (name, size) in &containers {
        plan.bytes_before += size;
        let Some(cid) = ContainerId::from_hex(name) else {
            continue;
        };
        let meta = read_container_meta(backend.as_ref(), name).map_err(|e| {
            Error::corrupt(
                format!("container {name}"),
                format!("{e}; run `dedelta check` before pruning"),
            )
        })?;
        let mut entries = Vec::with_capacity(meta.entries.len());
        for (i, e) in meta.entries.iter().enumerate() {
            let indexed_here = index
                .get(&e.id)?
                .is_some_and(|l| l.container == cid && l.entry == i as u32);
            let base = match e.kind {
                EntryKind::Delta { base } => Some(base),
                EntryKind::Full => None,
            };
            entries.push((
                EntryInfo {
                    id: e.id,
                    base,
                    stored_len: u64::from(e.stored_len),
                },
                indexed_here,
            ));
        }
        metas.push((name.clone(), *size, entries));
    }
    // Bases of live deltas are live (deltas are one level deep: one pass).
    let mut bases = HashSet::new();
    for (_, _, entries) in &metas {
        for (e, indexed) in entries {
            if *indexed && live.contains(&e.id) {
                if let Some(b) = e.base {
                    if !live.contains(&b) {
                        bases.insert(b);
                    }
                }
            }
        }
    }
    plan.bases_kept = bases.len() as u64;
    live.extend(bases);
    // Every live chunk must be indexed: else the index is stale and sweeping could lose data.
    for id in &live {
        if index.get(id)?.is_none() {
            return Err(Error::ChunkMissing(format!(
                "{id} (needed by a snapshot or as a delta base; prune refuses to run)"
            )));
        }
    }
    // Plan per container.
    let mut dead: HashSet<ChunkId> = HashSet::new();
    let mut rewrite: HashSet<String> = HashSet::new();
    for (name, size, entries) in &metas {
        let total: u64 = entries.iter().map(|(e, _)| e.stored_len).sum();
        let mut live_bytes = 0;
        for (e, indexed) in entries {
            if *indexed && live.contains(&e.id) {
                live_bytes += e.stored_len;
            } else if *indexed {
                dead.insert(e.id);
            }
        }
        if live_bytes == 0 {
            plan.delete.push(name.clone());
            plan.bytes_removed += size;
        } else if (live_bytes as f64) < (1.0 - opts.max_unused) * total as f64 {
            plan.rewrite.push(name.clone());
            rewrite.insert(name.clone());
            plan.bytes_removed += size;
            plan.bytes_to_copy += live_bytes;
        } else {
            plan.keep += 1;
        }
    }
    plan.dead_chunks = dead.len() as u64;
    let mut stats = PruneStats::default();
    if opts.dry_run {
        stats.plan = plan;
        stats.seconds = started.elapsed().as_secs_f64();
        return Ok(stats);
    }
    // 1. Copy live entries of rewritten containers forward.
    progress.set_total(plan.bytes_to_copy);
    let mut writer = ContainerWriter::new(repo);
    for (name, _, _) in metas.iter().filter(|(n, _, _)| rewrite.contains(n)) {
        progress.message(&format!(
            "rewriting container {}",
            &name[..12.min(name.len())]
        ));
        let what = format!("container {name}");
        let cid = ContainerId::from_hex(name).ok_or_else(|| Error::corrupt(&what, "bad name"))?;
        let file = backend.get(FileKind::Container, name)?;
        if ChunkId::of(&file).0 != cid.0 {
            return Err(Error::corrupt(
                &what,
                "content does not match its name; run `dedelta check --read-data`",
            ));
        }
        let meta = crate::format::container::decode_container_meta(&file, &what)?;
        let mut raw_regions: HashMap<u32, Vec<u8>> = HashMap::new();
        for (i, e) in meta.entries.iter().enumerate() {
            let indexed = index
                .get(&e.id)?
                .is_some_and(|l| l.container == cid && l.entry == i as u32);
            if !indexed || !live.contains(&e.id) {
                continue;
            }
            if let std::collections::hash_map::Entry::Vacant(v) = raw_regions.entry(e.region) {
                let r = &meta.regions[e.region as usize];
                let stored = &file[r.offset as usize..(r.offset + r.stored_len) as usize];
                v.insert(crate::format::container::open_region(stored, r, &what)?);
            }
            let raw = &raw_regions[&e.region];
            let bytes = &raw[e.offset as usize..(e.offset + e.stored_len) as usize];
            if e.kind == EntryKind::Full && ChunkId::of(bytes) != e.id {
                return Err(Error::CorruptChunk {
                    container: name.clone(),
                    chunk: e.id.to_hex(),
                    reason: "content does not match its fingerprint; not copying it".into(),
                });
            }
            writer.push_entry(
                e.id,
                e.kind,
                bytes,
                e.original_len as usize,
                e.super_features.clone(),
            )?;
            progress.inc(bytes.len() as u64);
        }
    }
    writer.seal()?;
    stats.containers_written = writer.written.len() as u64;
    stats.bytes_written = writer.bytes_written;
    // Container names are content hashes: a copy can have the very name of a container this
    // prune is about to delete (an unindexed copy left by a killed prune). Never delete those.
    let written: HashSet<String> = writer.written.iter().map(|c| c.to_hex()).collect();
    // 2. Forget dead chunks in the index before any container disappears.
    repo.index().remove_chunks(&dead)?;
    // 3. Delete old containers.
    for name in plan.delete.iter().chain(plan.rewrite.iter()) {
        if !written.contains(name) {
            backend.delete(FileKind::Container, name)?;
        }
    }
    stats.bytes_freed = plan.bytes_removed as i64 - stats.bytes_written as i64;
    stats.plan = plan;
    stats.seconds = started.elapsed().as_secs_f64();
    Ok(stats)
}

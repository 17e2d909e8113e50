//! `repair snapshots`: rewrite snapshots that need lost chunks, keeping what is readable.
//!
//! For every snapshot, its tree is read as far as it can be; every file whose recipe names a
//! chunk that cannot be read (not indexed, in a damaged or missing container, recorded as
//! damaged, or a delta whose base is lost; judged from metadata, as `check` does) keeps only
//! its readable chunks, and its size becomes theirs. A snapshot with any such file, or whose
//! tree could be read only in part, is written anew: same time, host and paths, the tag
//! `repaired`, `original` naming the snapshot it replaces, `damaged_paths` listing the files
//! whose content is incomplete, and `tree_truncated` when the tree was cut short. With
//! `forget`, the originals are then deleted (new before old), and so are snapshot files whose
//! bytes are damaged. As in restic, this loses data for good: back the files up again first
//! if they still exist (a backup heals the snapshots by storing the lost chunks again).

use crate::backend::FileKind;
use crate::commands::check::{entry_pair, EntryIds, RefChecker};
use crate::error::{Error, Result};
use crate::format::container::{ContainerId, EntryKind};
use crate::format::snapshot::{Snapshot, SnapshotId, TreeRef};
use crate::format::tree::{ChunkRef, Node, NodeKind, TreeEncoder};
use crate::progress::Progress;
use crate::read::walk_tree;
use crate::repository::damage::DamageSet;
use crate::repository::lock::RepoLock;
use crate::repository::{read_container_meta, ContainerWriter, IndexedRepository};
use dedelta_core::chunker::{chunk_all, new_chunker};
use dedelta_core::ChunkId;
use std::collections::{HashMap, HashSet};

/// The tag a repaired snapshot carries.
pub const REPAIRED_TAG: &str = "repaired";

/// How to repair.
#[derive(Clone, Debug, Default)]
pub struct RepairSnapshotsOptions {
    /// Delete the originals of repaired snapshots, and damaged snapshot files.
    pub forget: bool,
    /// Only report what would be done.
    pub dry_run: bool,
}

/// One snapshot that needed repair.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RepairedSnapshot {
    /// The damaged snapshot.
    pub original: SnapshotId,
    /// The snapshot written in its place (none in a dry run).
    pub new: Option<SnapshotId>,
    /// Files whose content lost chunks.
    pub damaged_files: Vec<String>,
    /// Whether the tree could be read only in part.
    pub tree_truncated: bool,
}

/// What `repair snapshots` did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RepairSnapshotsStats {
    /// Snapshots rewritten (or that would be).
    pub repaired: Vec<RepairedSnapshot>,
    /// Snapshots that needed nothing.
    pub intact: u64,
    /// Damaged snapshot files deleted (or that would be, with `forget`).
    pub removed_unreadable: Vec<String>,
    /// Unreadable snapshot files left alone (I/O errors, newer versions, strays).
    pub left_unreadable: Vec<String>,
}

/// Repairs every snapshot. The caller holds the exclusive lock.
pub fn repair_snapshots(
    repo: &IndexedRepository,
    _lock: &RepoLock,
    opts: &RepairSnapshotsOptions,
    progress: &dyn Progress,
) -> Result<RepairSnapshotsStats> {
    let backend = repo.backend().clone();
    let mut stats = RepairSnapshotsStats::default();
    let (damage, _) = DamageSet::load(backend.as_ref())?;
    progress.message("reading container metadata");
    let mut entries: EntryIds = HashMap::new();
    for (name, _) in backend.list(FileKind::Container)? {
        let Some(cid) = ContainerId::from_hex(&name) else {
            continue;
        };
        if let Ok(meta) = read_container_meta(backend.as_ref(), &name) {
            entries.insert(cid, meta.entries.iter().map(entry_pair).collect());
        }
    }
    let index = repo.index().reader()?;
    let no_bad = HashMap::new();
    let refs = RefChecker {
        index: &index,
        entries: &entries,
        bad: &no_bad,
        recorded: &damage,
    };
    let mut usable: HashMap<ChunkId, bool> = HashMap::new();
    let mut is_usable = |id: &ChunkId| {
        *usable
            .entry(*id)
            .or_insert_with(|| refs.problem(id).is_none())
    };
    let listed = crate::repository::snapshots::list(backend.as_ref())?;
    for (sid, snap) in &listed.snapshots {
        progress.message(&format!("snapshot {}", sid.short()));
        let mut nodes: Vec<(Node, Vec<ChunkRef>)> = Vec::new();
        let tree_ok = snap.tree.chunks.iter().all(&mut is_usable);
        let walked = if tree_ok {
            walk_tree(repo, snap, |n, c| {
                nodes.push((n, c));
                Ok(())
            })
        } else {
            Err(Error::corrupt("tree stream", "a tree chunk is lost"))
        };
        let tree_truncated = walked.is_err();
        let mut damaged_files = Vec::new();
        for (node, chunks) in nodes.iter_mut() {
            if node.kind != NodeKind::File {
                continue;
            }
            let before = chunks.len();
            chunks.retain(|c| is_usable(&c.id));
            if chunks.len() != before {
                node.size = chunks.iter().map(|c| u64::from(c.len)).sum();
                damaged_files.push(node.path_lossy());
            }
        }
        if !tree_truncated && damaged_files.is_empty() {
            stats.intact += 1;
            continue;
        }
        let mut repaired = RepairedSnapshot {
            original: *sid,
            new: None,
            damaged_files,
            tree_truncated,
        };
        if !opts.dry_run {
            let tree = store_tree(repo, &nodes, &mut is_usable)?;
            let mut tags = snap.tags.clone();
            if !tags.iter().any(|t| t == REPAIRED_TAG) {
                tags.push(REPAIRED_TAG.into());
            }
            let mut damaged_paths = snap.damaged_paths.clone();
            damaged_paths.extend(repaired.damaged_files.iter().cloned());
            let new = Snapshot {
                tags,
                tree,
                // The first snapshot of the chain, as `tag` and `rewrite` (and restic) keep it.
                original: Some(snap.original.clone().unwrap_or_else(|| sid.to_hex())),
                damaged_paths,
                tree_truncated: snap.tree_truncated || tree_truncated,
                ..snap.clone()
            };
            let new_id = crate::repository::snapshots::save(backend.as_ref(), &new)?;
            repaired.new = Some(new_id);
            // A snapshot repaired before whose tree is stored again as it was is written
            // anew with the same content, so the same name: that file is the repaired one,
            // not an original to delete.
            if opts.forget && new_id != *sid {
                backend.delete(FileKind::Snapshot, &sid.to_hex())?;
            }
        }
        stats.repaired.push(repaired);
    }
    for bad in &listed.unreadable {
        if opts.forget && bad.content_damaged {
            if !opts.dry_run {
                backend.delete(FileKind::Snapshot, &bad.name)?;
            }
            stats.removed_unreadable.push(bad.name.clone());
        } else {
            stats.left_unreadable.push(bad.describe());
        }
    }
    Ok(stats)
}

/// Encodes `nodes` as a tree stream and stores it: chunks the index holds usable are reused,
/// the others are written in new containers (durable and indexed before the snapshot).
pub(crate) fn store_tree(
    repo: &IndexedRepository,
    nodes: &[(Node, Vec<ChunkRef>)],
    usable: &mut dyn FnMut(&ChunkId) -> bool,
) -> Result<TreeRef> {
    let mut enc = TreeEncoder::default();
    let mut buf = Vec::new();
    enc.begin(&mut buf);
    for (node, chunks) in nodes {
        if node.kind == NodeKind::File {
            enc.file_start(node, &mut buf);
            for c in chunks {
                enc.chunk(c, &mut buf);
            }
            enc.file_end(&mut buf);
        } else {
            enc.node(node, &mut buf);
        }
    }
    enc.end(&mut buf);
    let config = repo.config();
    let chunker = new_chunker(config.chunker.kind, config.chunker.params)
        .map_err(|e| Error::InvalidOption(e.to_string()))?;
    let mut writer = ContainerWriter::new(repo);
    let mut ids = Vec::new();
    let mut new: HashSet<ChunkId> = HashSet::new();
    for r in chunk_all(chunker.as_ref(), &buf) {
        let data = &buf[r];
        let id = repo.chunk_hasher().id(data);
        if !usable(&id) && new.insert(id) {
            writer.push_entry(id, EntryKind::Full, data, data.len(), Vec::new())?;
        }
        ids.push(id);
    }
    writer.seal()?;
    writer.publish_index_files()?;
    Ok(TreeRef {
        chunks: ids,
        len: buf.len() as u64,
    })
}

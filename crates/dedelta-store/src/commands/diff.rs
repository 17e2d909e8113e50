//! `diff`: what changed between two snapshots (restic's `diff`): nodes added (`+`), removed
//! (`-`), with changed content (`M`), changed kind (`T`) or changed metadata only (`U`); and
//! what each snapshot added to the repository.
//!
//! The first snapshot's nodes are held in memory by path (node and a hash of its recipe),
//! then the second's tree is streamed against them. Content is compared by recipe (the chunk
//! ids), so no file data is read. The repository side comes from what the snapshots recorded:
//! their backups' summaries (bytes added when each was written) and the containers each
//! referenced (their stored sizes listed from the repository).

use crate::backend::FileKind;
use crate::error::Result;
use crate::format::container::ContainerId;
use crate::format::snapshot::{Snapshot, SnapshotId};
use crate::format::tree::{ChunkRef, Node, NodeKind};
use crate::read::{walk_tree, Subtree};
use crate::repository::IndexedRepository;
use dedelta_core::ChunkId;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap, HashSet};

/// How a node changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Modifier {
    /// Only in the second snapshot.
    #[serde(rename = "+")]
    Added,
    /// Only in the first.
    #[serde(rename = "-")]
    Removed,
    /// A file whose content changed.
    #[serde(rename = "M")]
    Modified,
    /// The kind changed (a file became a directory, ...).
    #[serde(rename = "T")]
    TypeChanged,
    /// Only metadata changed (mode, owner, times, link target, attributes).
    #[serde(rename = "U")]
    Metadata,
}

impl Modifier {
    /// restic's one-letter code.
    pub fn code(self) -> char {
        match self {
            Modifier::Added => '+',
            Modifier::Removed => '-',
            Modifier::Modified => 'M',
            Modifier::TypeChanged => 'T',
            Modifier::Metadata => 'U',
        }
    }
}

/// One changed node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Change {
    /// Path with a leading `/` (lossily UTF-8).
    pub path: String,
    /// How it changed.
    pub modifier: Modifier,
}

/// Counts of one side: nodes only in it, and chunks only its recipes use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SideCounts {
    /// Regular files.
    pub files: u64,
    /// Directories.
    pub dirs: u64,
    /// Symlinks and special files.
    pub others: u64,
    /// Bytes of the files only on this side.
    pub file_bytes: u64,
    /// Distinct chunks (file content) only this side's recipes use.
    pub chunks: u64,
    /// Their bytes (before compression).
    pub chunk_bytes: u64,
}

/// What one snapshot added to the repository, from its records.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RepoSide {
    /// The snapshot (full hex id).
    pub snapshot: String,
    /// Bytes its backup added to the repository (containers written, compressed).
    pub bytes_added: u64,
    /// New chunks its backup stored.
    pub new_chunks: u64,
    /// New chunks it stored as deltas.
    pub delta_chunks: u64,
    /// Containers it referenced that the other snapshot did not (snapshots written before
    /// containers were recorded reference none).
    pub containers_only_here: u64,
    /// Stored bytes of those containers (those still in the repository).
    pub container_bytes_only_here: u64,
}

/// Everything `diff` found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DiffReport {
    /// The changed nodes, sorted by path.
    pub changes: Vec<Change>,
    /// Files whose content changed.
    pub changed_files: u64,
    /// Nodes whose metadata alone changed.
    pub metadata_changed: u64,
    /// What only the second snapshot has.
    pub added: SideCounts,
    /// What only the first had.
    pub removed: SideCounts,
    /// The first snapshot's additions to the repository.
    pub source: RepoSide,
    /// The second's.
    pub target: RepoSide,
}

/// A node of the first snapshot, kept for comparison.
struct Held {
    node: Node,
    recipe: ChunkId,
    seen: bool,
}

/// A recipe as one hash (equal hashes, equal content).
fn recipe_hash(chunks: &[ChunkRef]) -> ChunkId {
    let mut bytes = Vec::with_capacity(chunks.len() * 36);
    for c in chunks {
        bytes.extend_from_slice(&c.id.0);
        bytes.extend_from_slice(&c.len.to_le_bytes());
    }
    ChunkId::of(&bytes)
}

/// Whether the metadata of two nodes of the same kind and content differ.
fn metadata_differs(a: &Node, b: &Node) -> bool {
    (a.mode, a.mtime_secs, a.mtime_nanos, &a.target)
        != (b.mode, b.mtime_secs, b.mtime_nanos, &b.target)
        || (a.meta.uid, a.meta.gid, &a.meta.xattrs, a.meta.rdev)
            != (b.meta.uid, b.meta.gid, &b.meta.xattrs, b.meta.rdev)
}

fn count(side: &mut SideCounts, n: &Node) {
    match n.kind {
        NodeKind::File => {
            side.files += 1;
            side.file_bytes += n.size;
        }
        NodeKind::Dir => side.dirs += 1,
        _ => side.others += 1,
    }
}

fn path_of(n: &Node) -> String {
    format!("/{}", n.path_lossy())
}

/// Compares snapshot `a` (source) with `b` (target): the parts `subtrees` name (restic's
/// `diff A:SUB B:SUB`; nodes compared by their paths below them).
pub fn diff(
    repo: &IndexedRepository,
    a: &(SnapshotId, Snapshot),
    b: &(SnapshotId, Snapshot),
    subtrees: (&Subtree, &Subtree),
) -> Result<DiffReport> {
    let mut held: HashMap<Vec<u8>, Held> = HashMap::new();
    let mut order: Vec<Vec<u8>> = Vec::new();
    let mut chunks_a: HashMap<ChunkId, u32> = HashMap::new();
    walk_tree(repo, &a.1, |n, c| {
        let Some(n) = subtrees.0.view(n) else {
            return Ok(());
        };
        for r in &c {
            chunks_a.insert(r.id, r.len);
        }
        order.push(n.path.clone());
        let recipe = recipe_hash(&c);
        held.insert(
            n.path.clone(),
            Held {
                node: n,
                recipe,
                seen: false,
            },
        );
        Ok(())
    })?;
    let mut rep = DiffReport::default();
    let mut chunks_b: HashSet<ChunkId> = HashSet::new();
    walk_tree(repo, &b.1, |n, c| {
        let Some(n) = subtrees.1.view(n) else {
            return Ok(());
        };
        for r in &c {
            if chunks_b.insert(r.id) && !chunks_a.contains_key(&r.id) {
                rep.added.chunks += 1;
                rep.added.chunk_bytes += u64::from(r.len);
            }
        }
        let modifier = match held.get_mut(&n.path) {
            None => {
                count(&mut rep.added, &n);
                Some(Modifier::Added)
            }
            Some(h) => {
                h.seen = true;
                if h.node.kind != n.kind {
                    count(&mut rep.removed, &h.node);
                    count(&mut rep.added, &n);
                    Some(Modifier::TypeChanged)
                } else if n.kind == NodeKind::File && h.recipe != recipe_hash(&c) {
                    rep.changed_files += 1;
                    Some(Modifier::Modified)
                } else if metadata_differs(&h.node, &n) {
                    rep.metadata_changed += 1;
                    Some(Modifier::Metadata)
                } else {
                    None
                }
            }
        };
        if let Some(modifier) = modifier {
            rep.changes.push(Change {
                path: path_of(&n),
                modifier,
            });
        }
        Ok(())
    })?;
    for (id, len) in &chunks_a {
        if !chunks_b.contains(id) {
            rep.removed.chunks += 1;
            rep.removed.chunk_bytes += u64::from(*len);
        }
    }
    // Removed nodes, in the first tree's order, after the second's changes.
    for p in order {
        if let Some(h) = held.get(&p).filter(|h| !h.seen) {
            count(&mut rep.removed, &h.node);
            rep.changes.push(Change {
                path: path_of(&h.node),
                modifier: Modifier::Removed,
            });
        }
    }
    rep.changes.sort_by(|x, y| x.path.cmp(&y.path));
    let sizes: HashMap<String, u64> = repo
        .backend()
        .list(FileKind::Container)?
        .into_iter()
        .collect();
    rep.source = repo_side(a, &b.1.containers, &sizes);
    rep.target = repo_side(b, &a.1.containers, &sizes);
    Ok(rep)
}

/// What `s` recorded adding, and its containers that `other` does not reference.
fn repo_side(
    s: &(SnapshotId, Snapshot),
    other: &[ContainerId],
    sizes: &HashMap<String, u64>,
) -> RepoSide {
    let other: BTreeSet<&ContainerId> = other.iter().collect();
    let only: Vec<&ContainerId> =
        s.1.containers
            .iter()
            .filter(|c| !other.contains(c))
            .collect();
    RepoSide {
        snapshot: s.0.to_hex(),
        bytes_added: s.1.summary.bytes_added,
        new_chunks: s.1.summary.new_chunks,
        delta_chunks: s.1.summary.delta_chunks,
        containers_only_here: only.len() as u64,
        container_bytes_only_here: only.iter().filter_map(|c| sizes.get(&c.to_hex())).sum(),
    }
}

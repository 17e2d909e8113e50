//! `check`: verify that every snapshot can be restored.
//!
//! Without `read_data`: every container's metadata is read and verified, and every chunk that
//! every snapshot references (tree and file content) must be indexed, in a container that
//! exists and whose metadata lists it; a delta's base must be indexed too.
//! With `read_data`: every container is read whole; its name must be its hash, every region
//! must pass its CRC and decompress, and every chunk (deltas decoded against their bases) must
//! match its fingerprint. Damaged chunks are then traced to every snapshot and file that needs
//! them, including files whose deltas depend on a damaged base.

use crate::backend::FileKind;
use crate::commands::ls::walk_tree;
use crate::container::{self, ContainerId, EntryKind};
use crate::error::{Error, Result};
use crate::progress::Progress;
use crate::repository::{read_container_meta, IndexedRepository};
use crate::snapshot::load_all;
use dedelta_core::ChunkId;
use std::collections::{HashMap, HashSet};

/// One problem found.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// The snapshot affected (short id), if any.
    pub snapshot: Option<String>,
    /// The file affected, if any.
    pub path: Option<String>,
    /// What is wrong.
    pub message: String,
}

/// The result of a check.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CheckReport {
    /// Snapshots checked.
    pub snapshots: u64,
    /// Containers checked.
    pub containers: u64,
    /// Chunk references checked.
    pub references: u64,
    /// Stored chunks whose data was verified (`read_data`).
    pub chunks_read: u64,
    /// Problems, in the order found.
    pub problems: Vec<Problem>,
}

impl CheckReport {
    fn problem(&mut self, snapshot: Option<String>, path: Option<String>, message: String) {
        self.problems.push(Problem {
            snapshot,
            path,
            message,
        });
    }
}

/// Runs the check.
pub fn check(
    repo: &IndexedRepository,
    read_data: bool,
    progress: &dyn Progress,
) -> Result<CheckReport> {
    let mut report = CheckReport::default();
    let backend = repo.backend().clone();
    // 1. Container metadata.
    let containers = backend.list(FileKind::Container)?;
    let mut good_containers: HashSet<ContainerId> = HashSet::new();
    let mut entry_ids: HashMap<ContainerId, Vec<(ChunkId, Option<ChunkId>)>> = HashMap::new();
    for (name, _) in &containers {
        report.containers += 1;
        let Some(cid) = ContainerId::from_hex(name) else {
            report.problem(None, None, format!("stray file containers/{name}"));
            continue;
        };
        match read_container_meta(backend.as_ref(), name) {
            Ok(meta) => {
                good_containers.insert(cid);
                entry_ids.insert(
                    cid,
                    meta.entries
                        .iter()
                        .map(|e| match e.kind {
                            EntryKind::Full => (e.id, None),
                            EntryKind::Delta { base } => (e.id, Some(base)),
                        })
                        .collect(),
                );
            }
            Err(e) => report.problem(None, None, e.to_string()),
        }
    }
    // 2. With read_data: every stored chunk.
    let mut bad_chunks: HashMap<ChunkId, String> = HashMap::new();
    if read_data {
        let total: u64 = containers.iter().map(|(_, s)| s).sum();
        progress.set_total(total);
        let mut reader = repo.chunk_reader(64 << 20)?;
        let index_for_data = repo.index().reader()?;
        for (name, size) in &containers {
            let Some(cid) = ContainerId::from_hex(name) else {
                continue;
            };
            let what = format!("container {name}");
            let file = match backend.get(FileKind::Container, name) {
                Ok(f) => f,
                Err(e) => {
                    report.problem(None, None, format!("{what}: {e}"));
                    continue;
                }
            };
            progress.inc(*size);
            if ChunkId::of(&file).0 != cid.0 {
                report.problem(
                    None,
                    None,
                    format!("{what}: content does not match its name (damaged)"),
                );
            }
            let meta = match container::decode_container_meta(&file, &what) {
                Ok(m) => m,
                Err(e) => {
                    // Metadata problems were reported in step 1; mark its chunks bad.
                    if let Some(ids) = entry_ids.get(&cid) {
                        for (id, _) in ids {
                            bad_chunks.insert(*id, e.to_string());
                        }
                    }
                    continue;
                }
            };
            let mut regions = Vec::with_capacity(meta.regions.len());
            for r in &meta.regions {
                let stored = &file[r.offset as usize..(r.offset + r.stored_len) as usize];
                regions.push(container::open_region(stored, r, &what));
            }
            for (i, e) in meta.entries.iter().enumerate() {
                report.chunks_read += 1;
                // Only the copy the index points at is used; other copies (garbage a prune
                // has not removed yet, or left by an interrupted backup) cannot harm a restore.
                let indexed_here = index_for_data
                    .get(&e.id)?
                    .is_some_and(|l| l.container == cid && l.entry == i as u32);
                let verdict: std::result::Result<(), String> = match &regions[e.region as usize] {
                    Err(err) => Err(err.to_string()),
                    Ok(raw) => {
                        let b = &raw[e.offset as usize..(e.offset + e.stored_len) as usize];
                        match e.kind {
                            EntryKind::Full => {
                                if ChunkId::of(b) == e.id {
                                    Ok(())
                                } else {
                                    Err("content does not match its fingerprint".into())
                                }
                            }
                            EntryKind::Delta { base } => match reader.read_chunk(&base) {
                                Ok(base_bytes) => {
                                    let mut out = Vec::with_capacity(e.original_len as usize);
                                    match dedelta_core::delta::new_codec(
                                        dedelta_core::delta::DeltaKind::Ddelta,
                                    )
                                    .decode(
                                        &base_bytes,
                                        b,
                                        &mut out,
                                    ) {
                                        Err(err) => Err(err.to_string()),
                                        Ok(()) if ChunkId::of(&out) != e.id => {
                                            Err("content does not match its fingerprint".into())
                                        }
                                        Ok(()) => Ok(()),
                                    }
                                }
                                // A garbage delta whose base is gone too: nothing to verify.
                                Err(_) if !indexed_here => Ok(()),
                                Err(err) => {
                                    Err(format!("its delta base {base} is unusable: {err}"))
                                }
                            },
                        }
                    }
                };
                if verdict.is_err() && !indexed_here {
                    // Damage in an unused copy is not a problem for any snapshot.
                    continue;
                }
                if let Err(reason) = verdict {
                    report.problem(
                        None,
                        None,
                        format!("corrupt chunk {} in container {name}: {reason}", e.id),
                    );
                    bad_chunks.insert(e.id, reason);
                }
            }
        }
    }
    // 3. Every reference of every snapshot.
    let index = repo.index().reader()?;
    let snapshots = match load_all(backend.as_ref()) {
        Ok(s) => s,
        Err(e) => {
            report.problem(None, None, e.to_string());
            return Ok(report);
        }
    };
    let mut verified: HashMap<ChunkId, Option<String>> = HashMap::new();
    for (sid, snap) in &snapshots {
        report.snapshots += 1;
        let short = sid.short();
        let mut check_ref = |id: &ChunkId, report: &mut CheckReport| -> Option<String> {
            report.references += 1;
            if let Some(v) = verified.get(id) {
                return v.clone();
            }
            let v = reference_problem(id, &index, &good_containers, &entry_ids, &bad_chunks);
            verified.insert(*id, v.clone());
            v
        };
        let tree_ids = match snap.tree.chunk_ids() {
            Ok(t) => t,
            Err(e) => {
                report.problem(Some(short.clone()), None, e.to_string());
                continue;
            }
        };
        let mut tree_ok = true;
        for id in &tree_ids {
            if let Some(msg) = check_ref(id, &mut report) {
                report.problem(Some(short.clone()), None, format!("tree chunk {id}: {msg}"));
                tree_ok = false;
            }
        }
        if !tree_ok {
            continue;
        }
        let mut file_problems = Vec::new();
        let walked = walk_tree(repo, snap, |node, chunks| {
            for c in &chunks {
                if let Some(msg) = check_ref(&c.id, &mut report) {
                    file_problems.push((node.path_lossy(), format!("chunk {}: {msg}", c.id)));
                    break;
                }
            }
            Ok(())
        });
        for (path, msg) in file_problems {
            report.problem(Some(short.clone()), Some(path), msg);
        }
        if let Err(e) = walked {
            report.problem(Some(short.clone()), None, format!("tree unreadable: {e}"));
        }
    }
    Ok(report)
}

/// Why a referenced chunk cannot be read, or `None` if it can.
fn reference_problem(
    id: &ChunkId,
    index: &crate::index::IndexReader,
    good: &HashSet<ContainerId>,
    entries: &HashMap<ContainerId, Vec<(ChunkId, Option<ChunkId>)>>,
    bad: &HashMap<ChunkId, String>,
) -> Option<String> {
    location_problem(id, index, good, entries, bad, true)
}

fn location_problem(
    id: &ChunkId,
    index: &crate::index::IndexReader,
    good: &HashSet<ContainerId>,
    entries: &HashMap<ContainerId, Vec<(ChunkId, Option<ChunkId>)>>,
    bad: &HashMap<ChunkId, String>,
    allow_delta: bool,
) -> Option<String> {
    if let Some(reason) = bad.get(id) {
        return Some(format!("damaged: {reason}"));
    }
    let loc = match index.get(id) {
        Ok(Some(l)) => l,
        Ok(None) => return Some("missing from the index".into()),
        Err(e) => return Some(Error::to_string(&e)),
    };
    if !good.contains(&loc.container) {
        return Some(format!(
            "its container {} is missing or damaged",
            loc.container
        ));
    }
    match entries
        .get(&loc.container)
        .and_then(|v| v.get(loc.entry as usize))
    {
        Some((e, None)) if e == id => None,
        Some((e, Some(base))) if e == id => {
            if !allow_delta {
                return Some("a delta is used as a delta base".into());
            }
            location_problem(base, index, good, entries, bad, false)
                .map(|m| format!("its delta base {base} is unusable: {m}"))
        }
        _ => Some(format!(
            "index entry points at the wrong place in container {}",
            loc.container
        )),
    }
}

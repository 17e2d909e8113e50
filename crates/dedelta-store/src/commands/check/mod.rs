//! `check`: verify that every snapshot can be restored, and record what cannot.
//!
//! 1. The index files' own integrity (every bucket's CRC, order); a damaged index is discarded and
//!    rebuilt, since it is only a cache.
//! 2. Every container's metadata is read and verified.
//! 2. (b) Every index file must decode, and list each existing container's entries exactly
//!    (see [`index_files`]).
//! 3. The index is compared with the containers: every entry must name an existing container
//!    whose metadata lists that chunk at that position. An index that does not match is
//!    rebuilt (it is a cache); a container whose metadata is unreadable is damage.
//! 4. With `read_data`: every container (or a subset: [`DataSubset`]) is read whole; its name
//!    must be its hash, every region must pass its CRC and decompress, and every chunk (deltas
//!    decoded against their bases) must match its fingerprint.
//! 5. Deltas whose base is damaged or lost are damaged too.
//! 6. Damage is recorded (see [`crate::format::damage`]) and the damaged copies leave the index, so
//!    that the next backup stores those chunks again instead of deduplicating against them.
//! 7. Every reference of every snapshot (tree and file content) must be indexed in a readable
//!    container; a delta's base too; a file's recorded size must equal its chunks' lengths.
//!    Damaged chunks are traced to every snapshot and file that needs them.

mod index_files;
mod recorded;
mod subset;
mod verify;

pub use subset::{DataSubset, ReadData};

pub(crate) use verify::{entry_pair, verify_entries, RefChecker};

use crate::backend::FileKind;
use crate::error::{Error, Result};
use crate::format::container::{self, ContainerId};
use crate::format::damage::DamagedCopy;
use crate::progress::Progress;
use crate::read::walk_tree;
use crate::repository::damage::{self, DamageSet};
use crate::repository::lock::RepoLock;
use crate::repository::{read_container_meta, IndexedRepository};
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
    /// Damaged copies recorded by this check (they left the index; the next backup stores
    /// those chunks again).
    pub damage_recorded: Vec<DamagedCopy>,
    /// Things worth knowing that are not problems (an index rebuilt, damage recorded earlier).
    pub notices: Vec<String>,
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

/// What check knows about one container's entries: (chunk, base of a delta).
pub(crate) type EntryIds = HashMap<ContainerId, Vec<(ChunkId, Option<ChunkId>)>>;

/// Runs the check; `time` stamps a damage record. The caller holds a repository lock: the
/// CLI takes a shared one, so check runs beside backups and restores (docs/format.md,
/// "Locks"). Without one (`None`: a repository this process cannot write, such as read-only
/// media) the check writes nothing to the repository: the damage it finds is reported but not
/// recorded (only the client's own index may be rebuilt).
pub fn check(
    repo: &IndexedRepository,
    lock: Option<&RepoLock>,
    read_data: impl Into<ReadData>,
    time: &str,
    progress: &dyn Progress,
) -> Result<CheckReport> {
    let read = read_data.into();
    let read_data = read != ReadData::Metadata;
    let mut report = CheckReport::default();
    let backend = repo.backend().clone();
    // 1. The index file.
    progress.message("checking the index");
    match repo.index().check_integrity() {
        Ok(true) => {}
        Ok(false) => report
            .notices
            .push("the chunk index was damaged and repaired".into()),
        Err(Error::IndexDamaged(why)) => {
            repo.reset_index()?;
            report.notices.push(format!(
                "the chunk index was damaged ({why}); it was discarded and rebuilt"
            ));
        }
        Err(e) => return Err(e),
    }
    let (mut damage, skipped) = DamageSet::load(backend.as_ref())?;
    report.notices.extend(skipped);
    // 2. Container metadata.
    progress.message("reading container metadata");
    let containers = backend.list(FileKind::Container)?;
    let mut entry_ids: EntryIds = HashMap::new();
    let mut bad_meta: HashMap<ContainerId, String> = HashMap::new();
    for (name, _) in &containers {
        report.containers += 1;
        let Some(cid) = ContainerId::from_hex(name) else {
            report.problem(None, None, format!("stray file containers/{name}"));
            continue;
        };
        // A failed read is tried once more before it counts (see step 4).
        let meta = read_container_meta(backend.as_ref(), name).or_else(|first| {
            let again = read_container_meta(backend.as_ref(), name);
            if again.is_ok() {
                report.problem(
                    None,
                    None,
                    format!(
                        "container {name}: a metadata read failed ({first}) and a second read \
                         was intact: the storage may be unreliable"
                    ),
                );
            }
            again
        });
        match meta {
            Ok(meta) => {
                entry_ids.insert(cid, meta.entries.iter().map(entry_pair).collect());
            }
            Err(e) => {
                if !damage.container_damaged(&cid) {
                    report.problem(None, None, e.to_string());
                }
                bad_meta.insert(cid, e.to_string());
            }
        }
    }
    // 2b. The index files against the containers.
    progress.message("checking the index files");
    index_files::check_index_files(backend.as_ref(), &entry_ids, &bad_meta, &mut report)?;
    // 3. The index against the containers.
    let mut found: Vec<DamagedCopy> = Vec::new();
    let mut mismatched = 0u64;
    let mut damaged_whole: HashSet<ContainerId> = HashSet::new();
    repo.index().for_each(|id, loc| {
        if let Some(entries) = entry_ids.get(&loc.container) {
            if entries.get(loc.entry as usize).map(|e| e.0) != Some(id) {
                mismatched += 1;
            }
        } else if let Some(why) = bad_meta.get(&loc.container) {
            if damaged_whole.insert(loc.container) && !damage.container_damaged(&loc.container) {
                found.push(DamagedCopy {
                    container: loc.container,
                    chunk: None,
                    reason: why.clone(),
                });
            }
        } else {
            mismatched += 1; // names a container that does not exist
        }
    })?;
    if mismatched > 0 {
        let rebuilt = crate::commands::repair::rebuild_index(repo, &mut |_| {})?;
        for p in rebuilt.problems {
            report.problem(None, None, format!("index rebuild: {p}"));
        }
        report.notices.push(format!(
            "the chunk index did not match the containers ({mismatched} entries); it was rebuilt"
        ));
    }
    // 4. With read_data: every stored chunk.
    let mut bad_chunks: HashMap<ChunkId, String> = HashMap::new();
    // Recorded copies that verify again (the damage was a transient read error, or the
    // container was restored from elsewhere), and containers recorded whole that now do.
    let mut cleared: Vec<(ContainerId, ChunkId)> = Vec::new();
    let mut cleared_whole: Vec<ContainerId> = Vec::new();
    if read_data {
        // The containers read whole: all, or the subset asked for.
        let chosen: Option<HashSet<String>> = match read {
            ReadData::Subset(subset) => {
                let mut seed = [0u8; 8];
                getrandom::getrandom(&mut seed)
                    .map_err(|e| Error::InvalidOption(format!("no random numbers: {e}")))?;
                let chosen = subset.choose(&containers, u64::from_le_bytes(seed));
                report.notices.push(format!(
                    "read {} of {} containers (--read-data-subset {subset})",
                    chosen.len(),
                    containers.len()
                ));
                Some(chosen)
            }
            _ => None,
        };
        let reads = |name: &String| chosen.as_ref().is_none_or(|c| c.contains(name));
        let total: u64 = containers
            .iter()
            .filter(|(n, _)| reads(n))
            .map(|(_, s)| s)
            .sum();
        progress.set_total(total);
        let mut reader = crate::read::ChunkReader::new(repo, 64 << 20)?;
        let index = repo.index().reader()?;
        // Where a base recorded as damaged may be read straight from (the index does not name
        // recorded copies): its recorded copy, or a copy in a container recorded whole whose
        // metadata reads again (a full copy if it has one).
        let mut in_recorded_whole: HashMap<ChunkId, ContainerId> = HashMap::new();
        for (cid, entries) in &entry_ids {
            if damage.container_damaged(cid) {
                for (id, base) in entries {
                    if base.is_none() || !in_recorded_whole.contains_key(id) {
                        in_recorded_whole.insert(*id, *cid);
                    }
                }
            }
        }
        // Every recorded copy is tried: one may have healed while another stays damaged.
        let recorded_copy = |b: &ChunkId| {
            let mut at = damage.chunk_containers(b);
            at.extend(in_recorded_whole.get(b).filter(|c| !at.contains(c)));
            at
        };
        for (name, size) in &containers {
            let Some(cid) = ContainerId::from_hex(name) else {
                continue;
            };
            if !reads(name) {
                continue;
            }
            progress.inc(*size);
            if bad_meta.contains_key(&cid) {
                continue; // reported and recorded whole
            }
            let what = format!("container {name}");
            let mut file = match backend.get(FileKind::Container, name) {
                Ok(f) => f,
                Err(e) => {
                    report.problem(None, None, format!("{what}: {e}"));
                    continue;
                }
            };
            let mut name_mismatch = ChunkId::of(&file).0 != cid.0;
            if name_mismatch {
                // Containers are named by their hash: a mismatch is damage at rest or a bad
                // read. Read once more before recording anything, so that a transient error
                // does not take good data out of the index.
                if let Ok(again) = backend.get(FileKind::Container, name) {
                    if ChunkId::of(&again).0 == cid.0 {
                        report.problem(
                            None,
                            None,
                            format!(
                                "{what}: a read returned damaged data and a second read was \
                                 intact: the storage may be unreliable"
                            ),
                        );
                        name_mismatch = false;
                    }
                    file = again;
                }
            }
            let found_before = found.len();
            // A damaged header (no checksum, nothing the entries need) is reported by the
            // name check below; the entries are still located from the footer and verified.
            let meta = match container::decode_container_body(&file, &what) {
                Ok(m) => m,
                Err(e) => {
                    report.problem(None, None, e.to_string());
                    continue;
                }
            };
            // A base in another container is read through the index; a failed read is tried
            // once more (a damaged region is not cached, so the retry reads it again).
            let mut flaky: Vec<String> = Vec::new();
            let mut base = |b: &ChunkId| match reader.read_chunk(b) {
                Ok(bytes) => Ok(bytes),
                // A base recorded as damaged is out of the index (the reader says so, as
                // corruption naming the record); if its recorded copy reads whole now (down
                // its delta chain), the delta verifies too (and both records are cleared).
                Err(first) => {
                    if let Ok(bytes) = recorded::read_recorded_copy(
                        backend.as_ref(),
                        &mut reader,
                        &recorded_copy,
                        b,
                        0,
                    ) {
                        return Ok(bytes);
                    }
                    let again = reader.read_chunk(b);
                    if again.is_ok() {
                        flaky.push(format!(
                            "chunk {b}: a read failed ({first}) and a second read was intact: \
                             the storage may be unreliable"
                        ));
                    }
                    again
                }
            };
            // A container recorded whole whose metadata reads again is judged entry by entry:
            // its whole record is replaced by records of the entries that still fail.
            let recorded_whole = damage.container_damaged(&cid);
            if recorded_whole {
                cleared_whole.push(cid);
            }
            let hasher = repo.chunk_hasher();
            verify_entries(&file, &meta, &what, &hasher, &mut base, |i, e, verdict| {
                report.chunks_read += 1;
                if verdict.is_ok() && damage.reason(&cid, &e.id).is_some() {
                    cleared.push((cid, e.id));
                }
                if let (Err(reason), true) = (&verdict, recorded_whole) {
                    found.push(DamagedCopy {
                        container: cid,
                        chunk: Some(e.id),
                        reason: reason.clone(),
                    });
                    return Ok(());
                }
                // Only the copy the index points at is used now, so only its damage is a
                // problem; but every damaged copy is recorded: an index built afresh from the
                // containers (a rebuild, another client's) may name another copy of a chunk,
                // and must not name a damaged one (see step 6).
                let Err(reason) = verdict else {
                    return Ok(());
                };
                let indexed_here = index
                    .get(&e.id)?
                    .is_some_and(|l| l.container == cid && l.entry == i);
                if indexed_here {
                    report.problem(
                        None,
                        None,
                        format!("corrupt chunk {} in container {name}: {reason}", e.id),
                    );
                    bad_chunks.insert(e.id, reason.clone());
                }
                // Copies recorded already are dropped from `found` in step 6.
                found.push(DamagedCopy {
                    container: cid,
                    chunk: Some(e.id),
                    reason,
                });
                Ok(())
            })?;
            for msg in flaky {
                report.problem(None, None, msg);
            }
            // Damage somewhere in the container. If it touches no chunk a restore can use
            // (only garbage copies, or copies recorded earlier), it is not a problem for any
            // snapshot, but the container still fails its hash: `repair packs` rewrites it.
            // Records this pass clears do not count (a delta recorded with its base, say,
            // which verifies again): the damage would go unreported.
            let known = found.len() > found_before
                || damage
                    .chunks_in(&cid)
                    .iter()
                    .any(|k| !cleared.contains(&(cid, *k)));
            if name_mismatch && !known {
                report.problem(
                    None,
                    None,
                    format!(
                        "{what}: content does not match its name (damaged); `dedelta repair \
                         packs {name}` rewrites it"
                    ),
                );
            }
        }
    }
    // 5. Deltas whose base is damaged or lost are lost too.
    {
        let index = repo.index().reader()?;
        let usable_base = |b: &ChunkId| -> Result<bool> {
            if bad_chunks.contains_key(b) {
                return Ok(false);
            }
            Ok(index
                .get(b)?
                .is_some_and(|l| entry_ids.contains_key(&l.container)))
        };
        let mut lost = Vec::new();
        for (cid, entries) in &entry_ids {
            for (i, (id, base)) in entries.iter().enumerate() {
                let Some(base) = base else { continue };
                let indexed_here = index
                    .get(id)?
                    .is_some_and(|l| l.container == *cid && l.entry as usize == i);
                if indexed_here && !bad_chunks.contains_key(id) && !usable_base(base)? {
                    lost.push((*cid, *id, *base));
                }
            }
        }
        for (cid, id, base) in lost {
            let reason = format!("its delta base {base} is damaged or lost");
            bad_chunks.insert(id, reason.clone());
            found.push(DamagedCopy {
                container: cid,
                chunk: Some(id),
                reason,
            });
        }
    }
    // 6. Record the damage and take the damaged copies out of the index.
    // Whole containers were only added when not recorded yet; copies may be recorded already.
    found.retain(|c| match c.chunk {
        Some(k) => !damage.copy_recorded(&c.container, &k),
        None => true,
    });
    let old_records = damage.record_names.clone();
    for (cid, chunk) in &cleared {
        damage.forget_copy(cid, chunk);
    }
    for cid in &cleared_whole {
        damage.forget_container(cid);
    }
    let cleared_any = !cleared.is_empty() || !cleared_whole.is_empty();
    if lock.is_none() && (cleared_any || !found.is_empty()) {
        report.notices.push(format!(
            "the repository cannot be written here: {} damaged copies found and {} records \
             that verify again were not recorded; run check where it can be written",
            found.len(),
            cleared.len() + cleared_whole.len()
        ));
    } else if cleared_any {
        report.notices.push(format!(
            "{} stored copies recorded as damaged verify again (the damage was transient, or the \
             containers were restored); they are no longer recorded",
            cleared.len()
        ));
    }
    if lock.is_some() && !found.is_empty() {
        report.notices.push(format!(
            "recorded {} damaged stored copies: they left the index, so the next backup of \
             their files stores them again; `dedelta repair packs` salvages and removes the \
             damaged containers",
            found.len()
        ));
    }
    damage.extend(&found);
    let writable = lock.is_some();
    if writable && cleared_any {
        // The new record set is durable before the old records go; the index is then rebuilt
        // so that it names the copies that verify again and none of the damaged ones.
        damage::rewrite(backend.as_ref(), &damage, &old_records, time.to_string())?;
        let rebuilt = crate::commands::repair::rebuild_index(repo, &mut |_| {})?;
        for p in rebuilt.problems {
            report.problem(None, None, format!("index rebuild: {p}"));
        }
    } else if writable && !found.is_empty() {
        damage::write_record(
            backend.as_ref(),
            &crate::format::damage::DamageRecord {
                time: time.to_string(),
                copies: found.clone(),
            },
        )?;
        // The index is rebuilt rather than the damaged copies taken out of it: where a chunk
        // has another copy (a garbage one, or one stored again), an index built afresh names
        // it, and every client's index must agree with one built afresh, or another client's
        // backup deduplicates against a copy this client's index left out, and this client,
        // catching up with the containers added since, cannot restore that snapshot (see
        // prune's `leaving_the_index` for the same rule). Every damaged copy is recorded
        // (step 4), so the rebuild names none.
        let rebuilt = crate::commands::repair::rebuild_index(repo, &mut |_| {})?;
        for p in rebuilt.problems {
            report.problem(None, None, format!("index rebuild: {p}"));
        }
    }
    if found.is_empty() && !damage.is_empty() {
        report.notices.push(format!(
            "{} containers hold damage recorded earlier; `dedelta repair packs` salvages and \
             removes them",
            damage.containers().len()
        ));
    }
    report.damage_recorded = if writable { found } else { Vec::new() };
    // 7. Every reference of every snapshot.
    let index = repo.index().reader()?;
    let listed = crate::repository::snapshots::list(backend.as_ref())?;
    for bad in &listed.unreadable {
        report.problem(None, None, bad.describe());
    }
    let refs = RefChecker {
        index: &index,
        entries: &entry_ids,
        bad: &bad_chunks,
        recorded: &damage,
    };
    let mut verified: HashMap<ChunkId, Option<String>> = HashMap::new();
    for (sid, snap) in &listed.snapshots {
        report.snapshots += 1;
        let short = sid.short();
        let mut check_ref = |id: &ChunkId, report: &mut CheckReport| -> Option<String> {
            report.references += 1;
            if let Some(v) = verified.get(id) {
                return v.clone();
            }
            let v = refs.problem(id);
            verified.insert(*id, v.clone());
            v
        };
        let mut tree_ok = true;
        for id in &snap.tree.chunks {
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
                    return Ok(());
                }
            }
            let held: u64 = chunks.iter().map(|c| u64::from(c.len)).sum();
            if held != node.size {
                file_problems.push((
                    node.path_lossy(),
                    format!(
                        "recorded size {} but its chunks hold {held} bytes",
                        node.size
                    ),
                ));
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

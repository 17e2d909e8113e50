//! A change to the index being prepared ([`Change`]): the next manifest and the runs it
//! adds, written as batches of containers' entries, and the merge policy that keeps the runs
//! few (see docs/format.md, "The index").

use super::*;

pub(super) fn record_of(r: &Run) -> RunRecord {
    RunRecord {
        seq: r.seq,
        chunks: r.chunks,
        sketches: r.sketches,
        file_len: r.file_len,
        tail_crc: r.tail_crc,
    }
}

/// A change being prepared: the next manifest and runs, and the run files it makes obsolete.
pub(super) struct Change {
    pub(super) manifest: Manifest,
    pub(super) runs: Vec<Arc<Run>>,
    pub(super) obsolete: Vec<PathBuf>,
    /// Which chunk a super-feature keeps in what this change writes and merges.
    pub(super) keep: SketchKeep,
    /// The loaded fingerprint filter, which every chunk entry this change adds goes into.
    pub(super) filter: Option<Arc<FingerprintFilter>>,
    /// The change removes entries or replaces the index: the filter no longer matches it.
    pub(super) drops_filter: bool,
    /// Where its super-feature lookups are counted.
    pub(super) sketch_counts: Arc<run::SketchCounts>,
}

/// Adds the entries of `containers` that `keep` accepts as one new run (keeping the oldest
/// chunk per super-feature, FirstFit: a super-feature `view` holds already is not recorded
/// again), marks `known` as taken in, and merges runs if there are too many.
pub(super) fn add_batch<'m>(
    path: &Path,
    c: &mut Change,
    view: &View,
    containers: impl IntoIterator<Item = (ContainerId, &'m ContainerMeta)>,
    keep: impl Fn(&ContainerId, u32, &EntryMeta) -> bool,
    known: impl IntoIterator<Item = (ContainerId, usize)>,
) -> Result<()> {
    let mut slot_of = slots_by_id(&c.manifest);
    add_batch_with(path, c, &mut slot_of, view, containers, keep, known)
}

/// Where each container's slot is in the manifest.
pub(super) fn slots_by_id(m: &Manifest) -> HashMap<ContainerId, usize> {
    m.slots.iter().enumerate().map(|(i, s)| (s.id, i)).collect()
}

/// [`add_batch`] with the slots by id kept by the caller (a rebuild adds many batches).
pub(super) fn add_batch_with<'m>(
    path: &Path,
    c: &mut Change,
    slot_of: &mut HashMap<ContainerId, usize>,
    view: &View,
    containers: impl IntoIterator<Item = (ContainerId, &'m ContainerMeta)>,
    keep: impl Fn(&ContainerId, u32, &EntryMeta) -> bool,
    known: impl IntoIterator<Item = (ContainerId, usize)>,
) -> Result<()> {
    let m = &mut c.manifest;
    let mut chunks: Vec<([u8; 32], u64)> = Vec::new();
    let mut sketches: Vec<(u64, [u8; 32])> = Vec::new();
    for (id, meta) in containers {
        let first = slot(m, slot_of, id, meta.entries.len())?;
        for (i, e) in meta.entries.iter().enumerate() {
            if !keep(&id, i as u32, e) {
                if e.kind != EntryKind::Full {
                    if let Some(&s) = slot_of.get(&id) {
                        m.slots[s].deltas_left_out = true;
                    }
                }
                continue;
            }
            chunks.push((e.id.0, first + i as u64));
            if e.kind != EntryKind::Full {
                continue;
            }
            for (pos, sf) in e.super_features.iter().enumerate() {
                let key = sketch_key(pos, *sf);
                // Keeping the newest, every batch records its keys and lookups ask the
                // newest run first.
                if c.keep == SketchKeep::Newest || !view.has_sketch(key, &c.sketch_counts)? {
                    sketches.push((key, e.id.0));
                }
            }
        }
    }
    for (id, entries) in known {
        let i = match slot_of.get(&id) {
            Some(&i) => i,
            None => {
                slot(m, slot_of, id, entries)?;
                m.slots.len() - 1
            }
        };
        m.slots[i].known = true;
    }
    if chunks.is_empty() {
        return Ok(());
    }
    write_run(path, c, chunks, sketches)
}

/// Writes `chunks` (in the order recorded) and `sketches` as a new run of `c`, noting the
/// entries they supersede ([`Manifest::superseded`]) and adding the chunks to the loaded
/// fingerprint filter, then merges runs if there are too many.
pub(super) fn write_run(
    path: &Path,
    c: &mut Change,
    chunks: Vec<([u8; 32], u64)>,
    sketches: Vec<(u64, [u8; 32])>,
) -> Result<()> {
    let mut superseded = indexed_elsewhere(c, &chunks)?;
    if let Some(f) = &c.filter {
        for (id, _) in &chunks {
            f.insert(&ChunkId(*id));
        }
    }
    let seq = new_seq(path, &mut c.manifest);
    let run = run::write_batch_noting(
        &run_path(path, seq),
        seq,
        chunks,
        sketches,
        c.keep,
        &mut superseded,
    )?;
    c.manifest.note_superseded(superseded);
    if let Some(run) = run {
        c.runs.push(Arc::new(run));
        merge_as_needed(path, c)?;
    }
    Ok(())
}

/// The global entry numbers at which `c`'s runs name chunks of `chunks` other than the
/// numbers `chunks` gives them: copies the new entries supersede. The loaded fingerprint
/// filter, which holds every indexed chunk, spares the runs' lookups of the others (new
/// chunks, nearly all of a backup's); without it each run's own filter does.
fn indexed_elsewhere(c: &Change, chunks: &[([u8; 32], u64)]) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for (id, n) in chunks {
        let id = ChunkId(*id);
        if c.filter.as_ref().is_some_and(|f| !f.contains(&id)) {
            continue;
        }
        for run in c.runs.iter().rev() {
            if let Some(old) = run.get(&id)? {
                if old != *n {
                    out.push(old);
                }
                break;
            }
        }
    }
    Ok(out)
}

/// A number for a new run file: the manifest's next one that names no file (another handle
/// on the index in this process may have used it).
pub(super) fn new_seq(path: &Path, m: &mut Manifest) -> u64 {
    loop {
        let seq = m.next_seq;
        m.next_seq += 1;
        if !run_path(path, seq).exists() {
            return seq;
        }
    }
}

/// The first global entry number of container `id` with `entries` entries: its range if it
/// has one of that size, else a new one.
pub(super) fn slot(
    m: &mut Manifest,
    slot_of: &mut HashMap<ContainerId, usize>,
    id: ContainerId,
    entries: usize,
) -> Result<u64> {
    let entries = u32::try_from(entries)
        .map_err(|_| Error::Index(format!("container {} has too many entries", id.to_hex())))?;
    if let Some(&i) = slot_of.get(&id) {
        if m.slots[i].entries == entries {
            return Ok(m.slots[i].first);
        }
    }
    let first = m.next_entry;
    let next = first + u64::from(entries);
    if next > run::MAX_LOC {
        return Err(Error::Index(
            "the index has numbered 2^40 entries; `repair index` renumbers them".into(),
        ));
    }
    m.next_entry = next;
    m.slots.push(Slot {
        id,
        first,
        entries,
        known: false,
        trimmed: false,
        deltas_left_out: false,
    });
    slot_of.insert(id, m.slots.len() - 1);
    Ok(first)
}

/// Merges the newest runs while together they reach half the size of the run before them
/// (a binary counter: each entry is rewritten about log2 of the index's size times), and
/// the two smallest neighbours while there are more than [`MAX_RUNS`]; never past
/// [`MAX_MERGE_ENTRIES`].
pub(super) fn merge_as_needed(path: &Path, c: &mut Change) -> Result<()> {
    loop {
        let n = c.runs.len();
        if n < 2 {
            return Ok(());
        }
        let mut k = n - 1;
        let mut acc = c.runs[k].chunks;
        while k > 0 {
            let prev = c.runs[k - 1].chunks;
            if acc * 2 < prev || acc + prev > MAX_MERGE_ENTRIES {
                break;
            }
            acc += prev;
            k -= 1;
        }
        if k < n - 1 {
            merge_runs(path, c, k, n)?;
            continue;
        }
        if n <= MAX_RUNS {
            return Ok(());
        }
        let sum = |i: usize| c.runs[i - 1].chunks + c.runs[i].chunks;
        match (1..n)
            .filter(|&i| sum(i) <= MAX_MERGE_ENTRIES)
            .min_by_key(|&i| sum(i))
        {
            Some(i) => merge_runs(path, c, i - 1, i + 1)?,
            None => return Ok(()),
        }
    }
}

/// Replaces runs `from..to` with their merge.
pub(super) fn merge_runs(path: &Path, c: &mut Change, from: usize, to: usize) -> Result<()> {
    let seq = new_seq(path, &mut c.manifest);
    let inputs: Vec<&Run> = c.runs[from..to].iter().map(|r| r.as_ref()).collect();
    let merged = run::merge(&inputs, None, &run_path(path, seq), seq, c.keep)?;
    c.obsolete
        .extend(inputs.iter().map(|r| r.path().to_path_buf()));
    c.runs.splice(from..to, merged.map(Arc::new));
    Ok(())
}

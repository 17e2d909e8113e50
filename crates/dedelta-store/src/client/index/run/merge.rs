//! Building run files from entries: one batch ([`write_batch`]), or several runs merged into
//! one ([`merge`]), both through [`RunWriter`].

use super::{Cursor, Entry, Run, RunWriter};
use crate::error::Result;
use dedelta_core::sketch::SketchKeep;
use dedelta_core::ChunkId;
use std::collections::HashSet;
use std::path::Path;

/// [`write_batch_noting`] without noting what was replaced.
#[cfg(test)]
pub fn write_batch(
    path: &Path,
    seq: u64,
    chunks: Vec<([u8; 32], u64)>,
    sketches: Vec<(u64, [u8; 32])>,
    keep: SketchKeep,
) -> Result<Option<Run>> {
    write_batch_noting(path, seq, chunks, sketches, keep, &mut Vec::new())
}

/// Writes a run of one batch: `chunks` in the order they were recorded (a later entry for the
/// same id replaces an earlier one, whose number is added to `replaced` when the two differ)
/// and `sketches` (key, chunk id) in order (the first chunk recorded with a key keeps it,
/// FirstFit; the last with [`SketchKeep::Newest`]). Returns `None` when there is nothing to
/// write.
pub fn write_batch_noting(
    path: &Path,
    seq: u64,
    mut chunks: Vec<([u8; 32], u64)>,
    mut sketches: Vec<(u64, [u8; 32])>,
    keep: SketchKeep,
    replaced: &mut Vec<u64>,
) -> Result<Option<Run>> {
    // Stable sorts: among equal ids the last recorded is last, among equal keys the first
    // recorded is first.
    chunks.sort_by_key(|c| c.0);
    let mut kept: Vec<([u8; 32], u64)> = Vec::with_capacity(chunks.len());
    for c in chunks {
        match kept.last_mut() {
            Some(last) if last.0 == c.0 => {
                if last.1 != c.1 {
                    replaced.push(last.1);
                }
                *last = c;
            }
            _ => kept.push(c),
        }
    }
    if kept.is_empty() {
        return Ok(None);
    }
    if keep == SketchKeep::Newest {
        // The last recorded first, so that the stable sort and dedup keep it.
        sketches.reverse();
    }
    sketches.sort_by_key(|s| s.0);
    sketches.dedup_by_key(|s| s.0);
    let mut w = RunWriter::create(path, kept.len() as u64, sketches.len() as u64)?;
    for (id, loc) in &kept {
        w.push_chunk(id, *loc)?;
    }
    for (key, id) in &sketches {
        if let Ok(i) = kept.binary_search_by(|c| c.0.cmp(id)) {
            w.push_sketch(*key, i as u32)?;
        }
    }
    w.finish(seq).map(Some)
}

/// Merges `runs` (oldest first) into one run file at `path`: for a chunk in several runs the
/// newest entry wins, for a super-feature key the oldest whose chunk stays (FirstFit; the
/// newest with [`SketchKeep::Newest`]), and chunks in `dead` are left out with the keys that
/// name them. Holds 4 bytes per input entry in memory (where each entry went); returns `None`
/// if nothing is left.
pub fn merge(
    runs: &[&Run],
    dead: Option<&HashSet<ChunkId>>,
    path: &Path,
    seq: u64,
    keep: SketchKeep,
) -> Result<Option<Run>> {
    let max_chunks: u64 = runs.iter().map(|r| r.chunks).sum();
    let max_sketches: u64 = runs.iter().map(|r| r.sketches).sum();
    let mut w = RunWriter::create(path, max_chunks, max_sketches)?;
    // Where each input entry went (u32::MAX: left out).
    let mut moved: Vec<Vec<u32>> = runs
        .iter()
        .map(|r| vec![u32::MAX; r.chunks as usize])
        .collect();
    let mut cursors: Vec<Cursor<'_>> = runs.iter().map(|r| r.chunk_cursor()).collect();
    let mut heads: Vec<Option<([u8; 32], u64)>> = Vec::with_capacity(runs.len());
    let mut index: Vec<u32> = vec![0; runs.len()];
    for c in &mut cursors {
        heads.push(next_chunk(c)?);
    }
    while let Some(min) = heads.iter().flatten().map(|h| h.0).min() {
        let newest = heads
            .iter()
            .rposition(|h| h.is_some_and(|h| h.0 == min))
            .unwrap_or(0);
        let loc = heads[newest].map(|h| h.1).unwrap_or(0);
        let to = if dead.is_some_and(|d| d.contains(&ChunkId(min))) {
            u32::MAX
        } else {
            w.push_chunk(&min, loc)?
        };
        for r in 0..runs.len() {
            if heads[r].is_some_and(|h| h.0 == min) {
                moved[r][index[r] as usize] = to;
                index[r] += 1;
                heads[r] = next_chunk(&mut cursors[r])?;
            }
        }
    }
    if w.chunks() == 0 {
        drop(w);
        let _ = std::fs::remove_file(path);
        return Ok(None);
    }
    let mut cursors: Vec<Cursor<'_>> = runs.iter().map(|r| r.sketch_cursor()).collect();
    let mut heads: Vec<Option<(u64, u64)>> = Vec::with_capacity(runs.len());
    for c in &mut cursors {
        heads.push(next_sketch(c)?);
    }
    while let Some(min) = heads.iter().flatten().map(|h| h.0).min() {
        let mut chosen = None;
        for r in 0..runs.len() {
            if let Some((key, entry)) = heads[r].filter(|h| h.0 == min) {
                let to = moved[r][entry as usize];
                if to != u32::MAX && (chosen.is_none() || keep == SketchKeep::Newest) {
                    chosen = Some(to);
                }
                heads[r] = next_sketch(&mut cursors[r])?;
                debug_assert_eq!(key, min);
            }
        }
        if let Some(to) = chosen {
            w.push_sketch(min, to)?;
        }
    }
    // Not needed to finish the file: freed before the tail is written.
    drop(moved);
    w.finish(seq).map(Some)
}

fn next_chunk(c: &mut Cursor<'_>) -> Result<Option<([u8; 32], u64)>> {
    Ok(match c.next()? {
        Some(Entry::Chunk(id, loc)) => Some((id, loc)),
        _ => None,
    })
}

fn next_sketch(c: &mut Cursor<'_>) -> Result<Option<(u64, u64)>> {
    Ok(match c.next()? {
        Some(Entry::Sketch(key, entry)) => Some((key, entry)),
        _ => None,
    })
}

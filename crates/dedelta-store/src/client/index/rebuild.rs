//! Rebuilding the index in steps (`repair index`, a catch-up with many new containers): a
//! batch of containers becomes a run at once, and delta copies, which can be chosen only once
//! the copies they rest on are known, wait in a file beside the index.

use super::change::{add_batch_with, slots_by_id, write_run, Change};
use super::manifest::Manifest;
use super::run::Run;
use super::view::View;
use super::ChunkLocation;
use crate::error::{Error, Result};
use crate::format::config::MAX_DELTA_DEPTH;
use crate::format::container::{ContainerId, ContainerMeta, EntryMeta};
use dedelta_core::ChunkId;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

impl super::ChunkIndex {
    /// Replaces the whole index with the entries of `containers` that `keep` accepts and
    /// marks it complete, in one commit: a rebuild killed before it leaves the previous index
    /// as it was.
    ///
    /// `known` are the containers the index has taken in: those of `containers`, and those
    /// deliberately left out (recorded as damaged whole), so that a sync does not take them
    /// in again.
    pub fn rebuild<'m>(
        &self,
        containers: impl IntoIterator<Item = (ContainerId, &'m ContainerMeta)>,
        keep: impl Fn(&ContainerId, u32, &EntryMeta) -> bool,
        known: impl IntoIterator<Item = (ContainerId, usize)>,
        damage_digest: u64,
    ) -> Result<()> {
        self.rebuild_in_steps(damage_digest, |r| r.add(containers, keep, known))
    }

    /// Replaces the whole index with what `fill` adds to the [`Rebuild`] it is given, a batch
    /// of containers at a time, and marks it complete, in one commit (a rebuild killed before
    /// it leaves the previous index as it was). Memory is bounded by the batches `fill` makes
    /// and the merges of the runs they become (see [`super::MAX_MERGE_ENTRIES`]), not by the
    /// repository: each batch is a run file at once.
    pub fn rebuild_in_steps(
        &self,
        damage_digest: u64,
        fill: impl FnOnce(&mut Rebuild<'_>) -> Result<()>,
    ) -> Result<()> {
        let spill = spill_path(self.path());
        let r = self.change(|c| {
            // Replaced whole: the next locality backup rebuilds the filter from it.
            c.drops_filter = true;
            c.filter = None;
            c.obsolete
                .extend(c.runs.drain(..).map(|r| r.path().to_path_buf()));
            c.manifest = Manifest {
                complete: true,
                damage_digest,
                ..Manifest::fresh(c.manifest.next_seq)
            };
            let mut r = Rebuild {
                path: self.path(),
                change: c,
                slot_of: HashMap::new(),
                spill: None,
                spill_path: spill.clone(),
            };
            fill(&mut r)
        });
        let _ = std::fs::remove_file(&spill);
        r
    }

    /// Adds to the index what `fill` adds to the [`Rebuild`] it is given (a batch of
    /// containers at a time, as [`Self::rebuild_in_steps`] does, but keeping what the index
    /// holds), in one commit: a catch-up with many new containers in bounded memory.
    pub fn take_in_steps(&self, fill: impl FnOnce(&mut Rebuild<'_>) -> Result<()>) -> Result<()> {
        let spill = spill_path(self.path());
        let r = self.change(|c| {
            let slot_of = slots_by_id(&c.manifest);
            let mut r = Rebuild {
                path: self.path(),
                change: c,
                slot_of,
                spill: None,
                spill_path: spill.clone(),
            };
            fill(&mut r)
        });
        let _ = std::fs::remove_file(&spill);
        r
    }
}

/// Where a rebuild sets delta copies aside (see [`Rebuild::set_aside`]).
pub(super) fn spill_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".rebuild.tmp");
    path.with_file_name(name)
}

/// Where a round of [`Rebuild::take_in_set_aside`] writes the copies it did not take.
pub(super) fn spill_left_path(spill: &Path) -> PathBuf {
    let mut name = spill.as_os_str().to_os_string();
    name.push(".next");
    PathBuf::from(name)
}

/// A delta copy a rebuild sets aside until it knows every full copy (see
/// [`Rebuild::set_aside`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaCopy {
    /// The chunk.
    pub id: ChunkId,
    /// Its base.
    pub base: ChunkId,
    /// Where the copy is.
    pub at: ChunkLocation,
}

/// Bytes of a delta copy set aside: id, base, container id, entry number.
const DELTA_COPY_LEN: usize = 32 + 32 + 32 + 4;

/// Delta copies taken in per run by [`Rebuild::take_in_set_aside`]: 40 bytes each in memory.
const SET_ASIDE_BATCH: usize = 1 << 17;

/// A rebuild in progress (see [`super::ChunkIndex::rebuild_in_steps`]): batches of containers become
/// runs at once, and delta copies, which can be chosen only once every full copy is known,
/// wait in a file beside the index, not in memory.
pub struct Rebuild<'c> {
    pub(super) path: &'c Path,
    pub(super) change: &'c mut Change,
    pub(super) slot_of: HashMap<ContainerId, usize>,
    pub(super) spill: Option<std::io::BufWriter<std::fs::File>>,
    pub(super) spill_path: PathBuf,
}

impl Rebuild<'_> {
    /// Takes in the entries of `containers` that `keep` accepts (one run; FirstFit: a
    /// super-feature an earlier batch recorded keeps its chunk) and marks `known` as taken in.
    pub fn add<'m>(
        &mut self,
        containers: impl IntoIterator<Item = (ContainerId, &'m ContainerMeta)>,
        keep: impl Fn(&ContainerId, u32, &EntryMeta) -> bool,
        known: impl IntoIterator<Item = (ContainerId, usize)>,
    ) -> Result<()> {
        let view = View {
            runs: self.change.runs.clone(),
            ..View::default()
        };
        add_batch_with(
            self.path,
            self.change,
            &mut self.slot_of,
            &view,
            containers,
            keep,
            known,
        )
    }

    /// Sets a delta copy aside (in a file beside the index) for
    /// [`Self::take_in_set_aside`]. Its container must have been passed to [`Self::add`].
    pub fn set_aside(&mut self, copy: &DeltaCopy) -> Result<()> {
        let io = |e| Error::io(format!("writing {}", self.spill_path.display()), e);
        if self.spill.is_none() {
            let f = std::fs::File::create(&self.spill_path).map_err(io)?;
            self.spill = Some(std::io::BufWriter::with_capacity(1 << 20, f));
        }
        let Some(w) = self.spill.as_mut() else {
            return Ok(());
        };
        let mut rec = [0u8; DELTA_COPY_LEN];
        rec[..32].copy_from_slice(copy.id.as_bytes());
        rec[32..64].copy_from_slice(copy.base.as_bytes());
        rec[64..96].copy_from_slice(&copy.at.container.0);
        rec[96..].copy_from_slice(&copy.at.entry.to_le_bytes());
        std::io::Write::write_all(w, &rec).map_err(io)
    }

    /// Reads the delta copies set aside back, in the order they were set aside, and takes in
    /// those `choose` accepts; `choose` is given a lookup of the chunks taken in *before*
    /// this round (the full copies, when only they were added), which the copies taken in
    /// during a round never change. Rounds repeat over the copies not taken, so that a delta
    /// whose base is itself a delta copy is taken once its base is (a delta chain, one link
    /// per round), until a round takes none or [`MAX_DELTA_DEPTH`] rounds have run.
    pub fn take_in_set_aside(
        &mut self,
        mut choose: impl FnMut(&DeltaCopy, &dyn Fn(&ChunkId) -> Result<bool>) -> Result<bool>,
    ) -> Result<()> {
        let Some(w) = self.spill.take() else {
            return Ok(());
        };
        let spill_path = self.spill_path.clone();
        let io = |e| Error::io(format!("reading {}", spill_path.display()), e);
        let file = w.into_inner().map_err(|e| io(e.into_error()))?;
        drop(file);
        let left = spill_left_path(&spill_path);
        for _ in 0..MAX_DELTA_DEPTH {
            let (taken, kept) = self.take_in_round(&spill_path, &left, &mut choose)?;
            std::fs::rename(&left, &spill_path).map_err(io)?;
            if taken == 0 || kept == 0 {
                break;
            }
        }
        Ok(())
    }

    /// One round of [`Self::take_in_set_aside`]: reads the copies in `from`, takes in those
    /// `choose` accepts and writes the others to `left`; returns how many of each.
    fn take_in_round(
        &mut self,
        from: &Path,
        left: &Path,
        choose: &mut impl FnMut(&DeltaCopy, &dyn Fn(&ChunkId) -> Result<bool>) -> Result<bool>,
    ) -> Result<(u64, u64)> {
        let io = |e| Error::io(format!("reading {}", from.display()), e);
        let mut r =
            std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(from).map_err(io)?);
        let wio = |e| Error::io(format!("writing {}", left.display()), e);
        let mut w =
            std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(left).map_err(wio)?);
        let before: Vec<Arc<Run>> = self.change.runs.clone();
        let holds_before = |id: &ChunkId| -> Result<bool> {
            for run in before.iter().rev() {
                if run.get(id)?.is_some() {
                    return Ok(true);
                }
            }
            Ok(false)
        };
        let mut chosen: Vec<([u8; 32], u64)> = Vec::new();
        let (mut taken, mut kept) = (0, 0);
        let mut rec = [0u8; DELTA_COPY_LEN];
        loop {
            match std::io::Read::read_exact(&mut r, &mut rec) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(io(e)),
            }
            let mut id = [0u8; 32];
            let mut base = [0u8; 32];
            let mut container = [0u8; 32];
            id.copy_from_slice(&rec[..32]);
            base.copy_from_slice(&rec[32..64]);
            container.copy_from_slice(&rec[64..96]);
            let entry = u32::from_le_bytes([rec[96], rec[97], rec[98], rec[99]]);
            let copy = DeltaCopy {
                id: ChunkId(id),
                base: ChunkId(base),
                at: ChunkLocation {
                    container: ContainerId(container),
                    entry,
                },
            };
            if !choose(&copy, &holds_before)? {
                std::io::Write::write_all(&mut w, &rec).map_err(wio)?;
                kept += 1;
                continue;
            }
            let slot = self
                .slot_of
                .get(&copy.at.container)
                .map(|&i| &self.change.manifest.slots[i])
                .filter(|s| entry < s.entries)
                .ok_or_else(|| {
                    Error::Index(format!(
                        "a delta copy set aside names container {} that the rebuild did not add",
                        copy.at.container.to_hex()
                    ))
                })?;
            chosen.push((id, slot.first + u64::from(entry)));
            taken += 1;
            if chosen.len() >= SET_ASIDE_BATCH {
                self.write_copies(std::mem::take(&mut chosen))?;
            }
        }
        std::io::Write::flush(&mut w).map_err(wio)?;
        self.write_copies(chosen)?;
        Ok((taken, kept))
    }

    /// Writes chunk entries (no super-features: they are delta copies) as one run.
    fn write_copies(&mut self, chunks: Vec<([u8; 32], u64)>) -> Result<()> {
        if chunks.is_empty() {
            return Ok(());
        }
        write_run(self.path, self.change, chunks, Vec::new())
    }
}

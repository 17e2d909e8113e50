//! Runs on: the worker pool (the locality index's prefetches), the dedup thread
//! ([`DensePrefetcher::reached`]) and the caller's thread (the parent's tree, before the stream).
//!
//! How dense containers are read whole for the potential base chunk cache (see
//! [`super::PrefetchedBases`]).

use super::PrefetchedBases;
use crate::backend::{Backend, FileKind};
use crate::backup::fingerprint_index::MetaLoader;
use crate::error::{Error, Result};
use crate::format::container::{self, ContainerId, ContainerMeta, EntryKind};
use crate::repository::read_container_meta_tail;
use bytes::Bytes;
use dedelta_core::ChunkId;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Region cache of the reader of the parent tree's chunks and bases that no dense container
/// holds ([`DensePrefetcher::tree_chunks`]): a region or two.
const TREE_BASE_READ_BYTES: usize = 4 << 20;

/// The locality index's loader for LoopDelta: a dense container not cached yet is read
/// whole, in one request, and its full chunks land beside the cache until the dedup thread
/// reaches the container ([`Self::reached`]); any other container's metadata is read as
/// usual (one request). A dense container the backup read whole before ([`Self::preload`]:
/// the one holding the parent's tree) costs no request.
///
/// The pool's lookups run ahead of the dedup thread by as many blocks as are in flight, and
/// on several threads: chunks entering the cache when the pool read them made the bases a
/// delta was encoded against (and which containers were evicted) depend on thread timing.
/// The reads still overlap the dedup thread's work; only their taking effect waits for the
/// stream, at a fixed distance ahead of resemblance detection ([`crate::backup::lookahead`]).
pub struct DensePrefetcher {
    /// The cache it fills.
    pub bases: Arc<PrefetchedBases>,
}

impl DensePrefetcher {
    /// Reads container `id` whole: its metadata, and its full chunks into the cache (with
    /// `now`; else they land until the stream reaches the container); the deltas of the
    /// chunks in `tree` (the parent's tree, being read) are kept aside.
    fn load_whole(
        &self,
        backend: &dyn Backend,
        id: &ContainerId,
        tree: &HashSet<ChunkId>,
        now: bool,
    ) -> Result<ContainerMeta> {
        let name = id.to_hex();
        let what = format!("container {name}");
        let kept = self.bases.local.as_ref().and_then(|l| l.get(id));
        let file = match kept {
            Some(file) => {
                let mut g = self.bases.lock();
                g.counts.local_loaded += 1;
                g.counts.local_bytes += file.len() as u64;
                file
            }
            None => {
                let file = backend.get(FileKind::Container, &name)?;
                if let Some(l) = &self.bases.local {
                    l.put(id, &file);
                }
                file
            }
        };
        // The name is the hash of the bytes: a whole read is verified entirely (the bases
        // decoded below are then exactly what a restore decodes).
        if ChunkId::of(&file).0 != id.0 {
            return Err(Error::corrupt(&what, "content does not match its name"));
        }
        let meta = container::decode_container_meta(&file, &what)?;
        let mut raw: HashMap<u32, Vec<u8>> = HashMap::new();
        let mut chunks = Vec::new();
        let mut deltas = Vec::new();
        let wanted = |e: &&container::EntryMeta| match e.kind {
            EntryKind::Full => true,
            EntryKind::Delta { .. } => tree.contains(&e.id),
        };
        for e in meta.entries.iter().filter(wanted) {
            if let std::collections::hash_map::Entry::Vacant(v) = raw.entry(e.region) {
                let r = meta
                    .regions
                    .get(e.region as usize)
                    .ok_or_else(|| Error::corrupt(&what, "entry names no region"))?;
                let stored = file
                    .get(r.offset as usize..(r.offset as usize + r.stored_len as usize))
                    .ok_or_else(|| Error::corrupt(&what, "region outside the file"))?;
                v.insert(container::open_region(stored, r, &what)?);
            }
            let bytes = raw[&e.region]
                .get(e.offset as usize..e.offset as usize + e.stored_len as usize)
                .ok_or_else(|| Error::corrupt(&what, "entry outside its region"))?;
            let bytes = Bytes::copy_from_slice(bytes);
            match e.kind {
                EntryKind::Full => chunks.push((e.id, bytes, e.super_features.clone())),
                EntryKind::Delta { base, .. } => deltas.push((e.id, (base, bytes))),
            }
        }
        if now {
            self.bases.insert(*id, chunks);
        } else {
            self.bases.land(*id, chunks);
        }
        self.bases.lock().tree_deltas.extend(deltas);
        Ok(meta)
    }

    /// Reads dense container `id` whole now, if it is dense and not cached, keeping its
    /// metadata for when the locality index asks for it: the backup reads its parent's tree
    /// before deduplication starts, and the tree lies in a container of the last backup,
    /// which is dense (one request then instead of the metadata, the tree's region, and the
    /// whole container again later). Returns whether the container's chunks are cached.
    /// `tree`: the chunks of the parent's tree, whose deltas are kept aside.
    pub fn preload(
        &self,
        backend: &dyn Backend,
        id: &ContainerId,
        tree: &HashSet<ChunkId>,
    ) -> bool {
        if !self.bases.is_dense(id) {
            return false;
        }
        if self.bases.touch(id) {
            return true;
        }
        // Before the stream starts: the cache takes it now.
        match self.load_whole(backend, id, tree, true) {
            Ok(meta) => {
                self.bases.record_full(*id, &meta);
                self.bases.lock().preloaded.insert(*id, meta);
                true
            }
            Err(_) => false,
        }
    }

    /// The chunks of the tree `chunks` (in order), from dense containers as far as they hold
    /// them, read whole now if needed through `backend` ([`Self::preload`]): a chunk stored
    /// in full from the cache, a delta rebuilt from its delta (kept aside when its container
    /// was read) and its base, and checked against its fingerprint. A chunk or base no dense
    /// container holds is read alone from `repo` (its container's metadata and region, as
    /// reading the tree the usual way reads every chunk; counted in
    /// [`PrefetchCounts::tree_chunks_read_alone`]): with Capping, a tree chunk deduplicated
    /// against a container that is not dense made the backup read the whole tree the usual
    /// way. `None` if a chunk cannot be read or rebuilt, for the caller to read the tree as
    /// usual.
    pub fn tree_chunks(
        &self,
        repo: &crate::repository::IndexedRepository,
        backend: &dyn Backend,
        chunks: &[ChunkId],
    ) -> Option<Vec<Bytes>> {
        let index = repo.index().reader().ok()?;
        let hasher = repo.chunk_hasher();
        let mut reader = None;
        let mut read_alone = 0u64;
        let tree: HashSet<ChunkId> = chunks.iter().copied().collect();
        // A chunk's bytes, its container read whole if need be (`None`: not dense).
        let cached = |id: &ChunkId| -> Option<Bytes> {
            if let Some(b) = self.bases.peek(id) {
                return Some(b);
            }
            let at = index.get(id).ok()??;
            if !self.preload(backend, &at.container, &tree) {
                return None;
            }
            self.bases.peek(id)
        };
        // A chunk no dense container holds, read alone and checked.
        let mut alone = |id: &ChunkId| -> Option<Bytes> {
            if reader.is_none() {
                reader = crate::read::ChunkReader::new(repo, TREE_BASE_READ_BYTES).ok();
            }
            let raw = reader.as_mut()?.read_chunk(id).ok()?;
            read_alone += 1;
            (hasher.id(&raw) == *id).then(|| Bytes::from(raw))
        };
        let rebuilt = chunks
            .iter()
            .map(|id| {
                if let Some(b) = cached(id) {
                    return Some(b);
                }
                let kept = self.bases.lock().tree_deltas.get(id).cloned();
                let Some((base, delta)) = kept else {
                    return alone(id);
                };
                let base = match cached(&base) {
                    Some(b) => b,
                    None => alone(&base)?,
                };
                let mut raw = Vec::new();
                dedelta_core::delta::format::decode(&base, &delta, &mut raw).ok()?;
                (hasher.id(&raw) == *id).then(|| Bytes::from(raw))
            })
            .collect::<Option<Vec<Bytes>>>();
        let mut g = self.bases.lock();
        g.tree_deltas = HashMap::new();
        g.counts.parent_tree_cached = rebuilt.is_some();
        g.counts.tree_chunks_read_alone = read_alone;
        rebuilt
    }
}

impl MetaLoader for DensePrefetcher {
    fn load(&self, backend: &dyn Backend, id: &ContainerId) -> Result<ContainerMeta> {
        if let Some(meta) = self.bases.lock().preloaded.remove(id) {
            return Ok(meta);
        }
        let meta = if self.bases.is_dense(id) && !self.bases.holds_or_landed(id) {
            // A container that cannot be read whole is no base; its metadata may still be
            // readable (the lookup's answer stands either way).
            match self.load_whole(backend, id, &HashSet::new(), false) {
                Ok(meta) => meta,
                Err(_) => read_container_meta_tail(backend, &id.to_hex())?,
            }
        } else {
            read_container_meta_tail(backend, &id.to_hex())?
        };
        self.bases.record_full(*id, &meta);
        Ok(meta)
    }

    fn reached(&self, backend: &dyn Backend, id: &ContainerId) {
        DensePrefetcher::reached(self, backend, id);
    }
}

impl DensePrefetcher {
    /// The dedup thread met, in stream order, a duplicate stored in container `id`
    /// ([`PrefetchedBases::reached`]): a dense container the pool has not read whole (it
    /// found the container in the cache then, which the stream has evicted since, or its
    /// read is still under way) is read whole now, as the stream position needs it.
    pub fn reached(&self, backend: &dyn Backend, id: &ContainerId) {
        if self.bases.is_dense(id) && !self.bases.reached(id) {
            self.bases.lock().counts.loaded_at_stream += 1;
            // Unreadable: no bases from it (the duplicate stands).
            let _ = self.load_whole(backend, id, &HashSet::new(), true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::format::container::{ContainerBuilder, RegionBuilder};
    use dedelta_core::compress::Compression;

    /// A container in `backend` holding one full chunk (bytes `n`) with super-feature `n`.
    fn stored(backend: &MemoryBackend, n: u8) -> (ContainerId, ChunkId) {
        let data = vec![n; 64];
        let id = ChunkId::of(&data);
        let mut reg = RegionBuilder::default();
        reg.push(id, EntryKind::Full, &data, data.len(), vec![u64::from(n)]);
        let mut b = ContainerBuilder::new();
        b.add_region(reg.compress(Compression::None));
        let (cid, file, _) = b.seal();
        backend
            .put(FileKind::Container, &cid.to_hex(), &file)
            .unwrap();
        (cid, id)
    }

    /// What the dedup thread sees of the cache (one container) at each of two stream
    /// positions, the first and then the second container's duplicates, with the pool's
    /// reads of both containers done when `ahead`, else each just before its position.
    fn seen(ahead: bool) -> Vec<(bool, bool, Option<ChunkId>)> {
        let backend = MemoryBackend::default();
        let (c1, x1) = stored(&backend, 1);
        let (c2, x2) = stored(&backend, 2);
        let bases = Arc::new(PrefetchedBases::new(HashSet::from([c1, c2]), 1));
        let loader = DensePrefetcher {
            bases: bases.clone(),
        };
        let pool = |c: &ContainerId| loader.load(&backend, c).map(|_| ()).unwrap();
        let mut out = Vec::new();
        if ahead {
            // The pool looked up both positions' blocks before the dedup thread met either.
            pool(&c1);
            pool(&c2);
        }
        for c in [c1, c2] {
            if !ahead {
                pool(&c);
            }
            MetaLoader::reached(&loader, &backend, &c);
            out.push((
                bases.peek(&x1).is_some(),
                bases.peek(&x2).is_some(),
                bases.holder(0, 1),
            ));
        }
        out
    }

    /// The cache's contents at a stream position do not depend on how far the pool read
    /// ahead: a container the pool read whole enters the cache (and evicts another) when the
    /// stream reaches it. Before, the pool's read of the second container evicted the first
    /// before the dedup thread met the first's duplicates, so the bases offered there
    /// depended on thread timing.
    #[test]
    fn pool_reading_ahead_does_not_change_what_the_stream_sees() {
        let in_step = seen(false);
        assert!(in_step[0].0, "the first container's chunk is a base");
        assert_eq!(in_step[1], (false, true, None), "then the second's only");
        assert_eq!(seen(true), in_step);
    }

    /// A dense container that the stream reaches but the pool did not read whole (the cache
    /// held it when the pool looked, and the stream evicted it since) is read whole then.
    #[test]
    fn container_reached_but_not_landed_is_read_then() {
        let backend = MemoryBackend::default();
        let (c1, x1) = stored(&backend, 1);
        let bases = Arc::new(PrefetchedBases::new(HashSet::from([c1]), 1));
        let loader = DensePrefetcher {
            bases: bases.clone(),
        };
        assert!(bases.peek(&x1).is_none());
        MetaLoader::reached(&loader, &backend, &c1);
        assert!(bases.peek(&x1).is_some());
        assert_eq!(bases.counts().dense_loaded, 1);
    }
}

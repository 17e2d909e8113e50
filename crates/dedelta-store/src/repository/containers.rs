//! Writing containers ([`ContainerWriter`]: data durable before the index that points to it)
//! and reading their metadata back.
//!
//! A full container is stored on a thread of its own while the next one fills ([`InFlight`]:
//! one at a time, so containers become durable in the order they were sealed); on an object
//! store each PUT is a round trip the writer no longer waits for. Its entries are indexed,
//! and its record gathered for the index file, only once the PUT has returned.

use super::*;
use crate::format::index_file::IndexedContainer;

/// Appends compressed regions to containers and stores each full container durably, then
/// indexes it (data before index: the crash-safety order). Shared by backup and prune.
pub struct ContainerWriter<'a> {
    repo: &'a IndexedRepository,
    builder: ContainerBuilder,
    /// The region being filled by [`Self::push_entry`] (backup fills regions itself, on its
    /// worker pool, and hands them over through [`Self::add_region`]).
    region: crate::format::container::RegionBuilder,
    container_size: usize,
    /// Containers written so far.
    pub written: Vec<ContainerId>,
    /// Bytes of those containers.
    pub bytes_written: u64,
    /// With [`Self::clearing_healed_records_of`]: the containers damage records name.
    recorded: Option<std::collections::HashSet<ContainerId>>,
    /// Containers written under the name of a container recorded as damaged, whose records
    /// were cleared.
    pub healed: Vec<ContainerId>,
    /// With [`Self::indexing_in_batches`]: containers written, durable, not indexed yet.
    pending: Option<Vec<(ContainerId, ContainerMeta)>>,
    /// With [`Self::returning_buffers`]: where the buffers of regions added go back.
    buffers: Option<crate::buffers::BufferPool>,
    /// The records of the containers written, for the index files (see [`index_files`]).
    index_files: index_files::IndexFilePublisher,
    /// The container being stored, if any.
    in_flight: Option<InFlight>,
}

/// Durable containers not indexed yet (see [`ContainerWriter::finish_unindexed`]).
#[derive(Debug, Default)]
#[must_use = "the containers are durable but not indexed"]
pub struct UnindexedContainers(Vec<(ContainerId, ContainerMeta)>);

impl UnindexedContainers {
    /// Takes the containers into the client's index.
    ///
    /// # Errors
    /// The index cannot be written (the next open's catch-up takes them in).
    pub fn index(self, repo: &IndexedRepository) -> Result<()> {
        index_batch(repo, &self.0)
    }
}

/// Takes a batch of durable containers into the client's index, in one commit (none for an
/// empty batch).
fn index_batch(repo: &IndexedRepository, batch: &[(ContainerId, ContainerMeta)]) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    repo.index()
        .insert_containers(batch.iter().map(|(id, meta)| (*id, meta)))
}

/// A sealed container whose PUT runs on its own thread.
struct InFlight {
    id: ContainerId,
    meta: ContainerMeta,
    /// Its record for the index file (taken out by [`ContainerWriter::finish`], which
    /// publishes it beside the PUT).
    record: Option<crate::format::index_file::IndexedContainer>,
    len: u64,
    /// Returns the container's buffer (for the next one) and the PUT's result.
    put: std::thread::JoinHandle<(Vec<u8>, Result<()>)>,
}

/// Containers a backup indexes in one commit (one run file of the index). A commit costs a
/// sorted write of the batch's entries and two fsyncs, whatever the index's size; 8 of 4 MiB
/// are 32 MiB of data, which the memory base cache's share for new chunks (32 MiB by
/// default) still holds while their chunks are not indexed: a chunk similar to one of them
/// finds its base in memory or, once indexed, in the repository.
const INDEX_BATCH: usize = 8;

impl<'a> ContainerWriter<'a> {
    /// A writer sealing containers at about the repository's container size.
    pub fn new(repo: &'a IndexedRepository) -> Self {
        ContainerWriter {
            repo,
            builder: ContainerBuilder::with_version(repo.config().container_version()),
            region: crate::format::container::RegionBuilder::default(),
            container_size: repo.config().container_size,
            written: Vec::new(),
            bytes_written: 0,
            recorded: None,
            healed: Vec::new(),
            pending: None,
            buffers: None,
            index_files: index_files::IndexFilePublisher::default(),
            in_flight: None,
        }
    }

    /// Makes the writer give the stored-bytes buffer of every region added with
    /// [`Self::add_region`] back to `pool` (backup's regions are compressed into buffers of
    /// that pool; see [`crate::buffers`]).
    pub fn returning_buffers(mut self, pool: crate::buffers::BufferPool) -> Self {
        self.buffers = Some(pool);
        self
    }

    /// Makes the writer index containers [`INDEX_BATCH`] at a time (each container is still
    /// durable before its entries are indexed); the caller calls [`Self::index_pending`]
    /// before anything that needs them indexed (a snapshot). One durable index commit per
    /// container made the index most of a backup of new data.
    pub fn indexing_in_batches(mut self) -> Self {
        self.pending = Some(Vec::new());
        self
    }

    /// Indexes every container written and not indexed yet.
    pub fn index_pending(&mut self) -> Result<()> {
        if let Some(pending) = self.pending.as_mut() {
            index_batch(self.repo, pending)?;
            pending.clear();
        }
        Ok(())
    }

    /// Writes the records of the containers written since the last index file as one index
    /// file (see [`index_files`]): a caller calls it once its containers are durable (after
    /// [`Self::seal`]), before anything that needs them covered. Returns the names of every
    /// index file this writer wrote.
    pub fn publish_index_files(&mut self) -> Result<&[String]> {
        self.index_files.publish(self.repo)?;
        Ok(&self.index_files.published)
    }

    /// A backup's end: stores the open container and, beside its PUT (not after it), the index
    /// file of the containers written since the last one, then indexes every container.
    /// Index files are hints (readers take a record only for a container listed; `check`
    /// notes a record of a missing one), so a crash between the two PUTs is safe either way
    /// round; what matters is that both are durable before the snapshot, which the caller
    /// writes after this returns. One round trip fewer on the backup's critical path.
    pub fn finish(&mut self) -> Result<()> {
        self.store_last()?;
        self.index_pending()
    }

    /// [`Self::finish`] but for the last batch's indexing, which it hands back: a backup
    /// indexes it beside the snapshot's PUT instead of before it. Every container is durable
    /// and covered by an index file when this returns, and those are what the snapshot needs
    /// (the client's index is a cache of them: a crash before the batch is indexed leaves
    /// durable containers that the next open's catch-up takes in, as after a crash between
    /// two batches).
    pub fn finish_unindexed(&mut self) -> Result<UnindexedContainers> {
        self.store_last()?;
        Ok(UnindexedContainers(
            self.pending
                .as_mut()
                .map(std::mem::take)
                .unwrap_or_default(),
        ))
    }

    /// Stores the open container and waits for every PUT (see [`Self::finish`]).
    fn store_last(&mut self) -> Result<()> {
        self.flush_region()?;
        self.seal_behind()?;
        let publish_beside = self.repo.writes_index_files();
        if publish_beside {
            if let Some(rec) = self.in_flight.as_mut().and_then(|f| f.record.take()) {
                self.index_files.push_record(rec);
            }
        }
        let published = if publish_beside {
            self.index_files.publish(self.repo)
        } else {
            Ok(())
        };
        let stored = self.wait_stored();
        published?;
        stored
    }

    /// Makes the writer clear the damage records of a container it writes again. Names are
    /// content hashes, so a container written under the name of one recorded as damaged (a
    /// backup that stores the damaged chunks again, in the same order, writes the very
    /// original) has replaced the damaged file with good bytes: its records are void, and
    /// left in place they would keep its (good, indexed) chunks from being used.
    /// `recorded` are the containers the records name (the caller has read them).
    pub fn clearing_healed_records_of(
        mut self,
        recorded: std::collections::HashSet<ContainerId>,
    ) -> Self {
        self.recorded = Some(recorded);
        self
    }

    /// Adds a region, first storing the open container if the region would overflow it.
    pub fn add_region(&mut self, region: crate::format::container::CompressedRegion) -> Result<()> {
        if !self.builder.is_empty()
            && self.builder.len() + region.stored.len() > self.container_size
        {
            self.seal_behind()?;
        }
        let stored = self.builder.add_region_returning(region);
        if let Some(pool) = &self.buffers {
            pool.give(stored);
        }
        Ok(())
    }

    /// Adds one entry (compressing its region on this thread when the region is full): for
    /// prune and repair, which copy entries one at a time.
    pub fn push_entry(
        &mut self,
        id: dedelta_core::ChunkId,
        kind: crate::format::container::EntryKind,
        bytes: &[u8],
        original_len: usize,
        super_features: Vec<u64>,
    ) -> Result<()> {
        self.region
            .push(id, kind, bytes, original_len, super_features);
        if self.region.raw.len() >= self.repo.config().region_size {
            self.flush_region()?;
        }
        Ok(())
    }

    fn flush_region(&mut self) -> Result<()> {
        if self.region.is_empty() {
            return Ok(());
        }
        let compression = self.repo.config().compression;
        let region = std::mem::take(&mut self.region).compress(compression);
        self.add_region(region)
    }

    /// Stores the open container (with the region being filled), if it holds anything, and
    /// indexes it (with [`Self::indexing_in_batches`], once its batch is full): durable when
    /// this returns.
    pub fn seal(&mut self) -> Result<()> {
        self.flush_region()?;
        self.seal_behind()?;
        self.wait_stored()
    }

    /// Seals the open container, if it holds anything, and starts its PUT on a thread of its
    /// own, once the one before is stored (see [`InFlight`]).
    fn seal_behind(&mut self) -> Result<()> {
        if self.builder.is_empty() {
            return Ok(());
        }
        let version = self.builder.version();
        let sealed = std::mem::replace(
            &mut self.builder,
            ContainerBuilder::reusing(version, Vec::new()),
        );
        let (id, bytes, meta) = sealed.seal();
        let spare = self.wait_stored_returning()?;
        // The next container is written into the buffer of the one stored before (see
        // crate::buffers).
        self.builder = ContainerBuilder::reusing(version, spare.unwrap_or_default());
        let record = if self.repo.writes_index_files() {
            crate::format::index_file::IndexedContainer::from_container_tail(id, &bytes)
        } else {
            None
        };
        let len = bytes.len() as u64;
        let backend = self.repo.backend().clone();
        let put = std::thread::Builder::new()
            .name("dedelta-put".into())
            .spawn(move || {
                let r = backend.put(FileKind::Container, &id.to_hex(), &bytes);
                (bytes, r.map_err(Error::from))
            })
            .map_err(|e| Error::io("starting a thread", e))?;
        self.in_flight = Some(InFlight {
            id,
            meta,
            record,
            len,
            put,
        });
        Ok(())
    }

    /// Waits for the container in flight, if any, to be stored, and indexes it.
    fn wait_stored(&mut self) -> Result<()> {
        self.wait_stored_returning().map(drop)
    }

    /// [`Self::wait_stored`], returning the stored container's buffer.
    fn wait_stored_returning(&mut self) -> Result<Option<Vec<u8>>> {
        let Some(f) = self.in_flight.take() else {
            return Ok(None);
        };
        let (bytes, stored) = f
            .put
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        stored?;
        self.stored(f.id, f.meta, f.record, f.len)?;
        Ok(Some(bytes))
    }

    /// What follows a container's PUT: its record gathered for the index file, its entries
    /// indexed (at once, or with its batch), a damage record it heals cleared.
    fn stored(
        &mut self,
        id: ContainerId,
        meta: ContainerMeta,
        record: Option<crate::format::index_file::IndexedContainer>,
        len_bytes: u64,
    ) -> Result<()> {
        if let Some(rec) = record {
            self.index_files.add_record(self.repo, rec)?;
        }
        match self.pending.as_mut() {
            Some(pending) => pending.push((id, meta)),
            None => self.repo.index().insert_container(id, &meta)?,
        }
        if self
            .pending
            .as_ref()
            .is_some_and(|p| p.len() >= INDEX_BATCH)
        {
            self.index_pending()?;
        }
        self.written.push(id);
        self.bytes_written += len_bytes;
        if self.recorded.as_mut().is_some_and(|r| r.remove(&id)) {
            // The container is durable and indexed before its records go.
            self.index_pending()?;
            let backend = self.repo.backend().as_ref();
            let (mut set, _) = damage::DamageSet::load(backend)?;
            let old = set.record_names.clone();
            set.forget_container(&id);
            let time = set.latest_time.clone();
            damage::rewrite(backend, &set, &old, time)?;
            self.repo.index_applies_damage_records()?;
            self.healed.push(id);
        }
        Ok(())
    }
}

impl Drop for ContainerWriter<'_> {
    /// A writer dropped on an error path still waits for its PUT, so that nothing is written
    /// after the operation has returned (and released its lock).
    fn drop(&mut self) {
        if let Some(f) = self.in_flight.take() {
            let _ = f.put.join();
        }
    }
}

/// Bytes [`read_container_meta_tail`] reads from a container's end, hoping for its footer and whole
/// metadata section in one request: at first 64 KiB (a 4 MiB container of 11 KiB chunks
/// compressed 2x has about 700 entries, 46 KB at 66 bytes each), then the largest section met
/// so far, up to [`MAX_META_TAIL`].
static META_TAIL_BYTES: AtomicUsize = AtomicUsize::new(64 << 10);
/// The most [`META_TAIL_BYTES`] grows to.
const MAX_META_TAIL: usize = 4 << 20;

/// Reads and checks the metadata of the container named `name`, with its footer, in one
/// request (a suffix read of the container's last [`META_TAIL_BYTES`]) when they fit, else
/// two, where [`read_container_meta`] takes three (the length, the footer, the section). For
/// the reads on the way of a backup or restore (the locality index's prefetches, restore's
/// locator, the stream sketch index). The suffix holds region bytes it does not use, so
/// `check`, prune and the repairs, which must report every damaged byte they read, read
/// exactly the footer and the section with [`read_container_meta`].
pub fn read_container_meta_tail(backend: &dyn Backend, name: &str) -> Result<ContainerMeta> {
    read_container_record_tail(backend, name).map(|(meta, _)| meta)
}

/// [`read_container_meta_tail`], with the footer and metadata section it read as an index
/// file records them (for the local metadata cache, [`crate::client::meta_cache`]).
pub fn read_container_record_tail(
    backend: &dyn Backend,
    name: &str,
) -> Result<(ContainerMeta, IndexedContainer)> {
    let what = format!("container {name}");
    let id =
        ContainerId::from_hex(name).ok_or_else(|| Error::corrupt(&what, "not a container name"))?;
    let guess = META_TAIL_BYTES.load(Ordering::Relaxed);
    let tail = backend.get_tail(FileKind::Container, name, guess)?;
    if tail.len() < container::HEADER_LEN + FOOTER_LEN {
        return Err(Error::corrupt(what, "file too short"));
    }
    let footer_bytes = &tail[tail.len() - FOOTER_LEN..];
    // A container shorter than the read is all here; a longer one is as long as its footer
    // says, which must be at least the bytes just read.
    let len = if tail.len() < guess {
        tail.len() as u64
    } else {
        container::footer_implied_len(footer_bytes)
            .filter(|&l| l >= guess as u64)
            .ok_or_else(|| Error::corrupt(&what, "footer points outside the container"))?
    };
    let footer = container::decode_footer(footer_bytes, len, &what)?;
    let meta_len = footer.meta_len as usize;
    let end = tail.len() - FOOTER_LEN;
    let section = match end.checked_sub(meta_len) {
        Some(start) => tail[start..end].to_vec(),
        None => {
            let want = (meta_len + FOOTER_LEN)
                .next_multiple_of(4096)
                .min(MAX_META_TAIL);
            META_TAIL_BYTES.fetch_max(want, Ordering::Relaxed);
            backend.get_range(
                FileKind::Container,
                name,
                footer.meta_offset as i64,
                meta_len,
            )?
        }
    };
    let meta = container::decode_meta(&section, &footer, &what)?;
    let record = IndexedContainer {
        id,
        footer: footer_bytes.try_into().expect("FOOTER_LEN bytes"),
        section,
    };
    Ok((meta, record))
}

/// Reads and checks the metadata of the container named `name`: its length, its footer and
/// its metadata section, three requests that read no byte they do not check.
pub fn read_container_meta(backend: &dyn Backend, name: &str) -> Result<ContainerMeta> {
    let what = format!("container {name}");
    let size = backend.size(FileKind::Container, name)?;
    if size < (container::HEADER_LEN + FOOTER_LEN) as u64 {
        return Err(Error::corrupt(what, "file too short"));
    }
    let footer_bytes =
        backend.get_range(FileKind::Container, name, -(FOOTER_LEN as i64), FOOTER_LEN)?;
    let footer = container::decode_footer(&footer_bytes, size, &what)?;
    let meta = backend.get_range(
        FileKind::Container,
        name,
        footer.meta_offset as i64,
        footer.meta_len as usize,
    )?;
    container::decode_meta(&meta, &footer, &what)
}

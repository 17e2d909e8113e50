//! Runs on: the writer thread.
//!
//! Appends the compressed regions, in stream order, to containers; each full container is
//! stored durably (on a thread of its own, while the next one fills) and then indexed
//! ([`ContainerWriter`]): data before index, the crash-safety order. Containers are indexed
//! in batches; the last batch is handed back, and the backup indexes it beside the
//! snapshot's write ([`ContainerWriter::finish_unindexed`]: the client's index is a cache of
//! the durable containers and index files, which the next open catches up with after a
//! crash).

use super::closed;
use super::metrics::StageTimes;
use crate::error::Result;
use crate::format::container::{CompressedRegion, ContainerId};
use crate::repository::{ContainerWriter, IndexedRepository, UnindexedContainers};
use crossbeam_channel::Receiver;
use std::time::Instant;

/// What the writer stored.
#[derive(Debug, Default)]
pub(super) struct WriterStats {
    /// Containers written, in order.
    pub containers: Vec<ContainerId>,
    /// Their bytes.
    pub bytes_written: u64,
    /// The last batch of containers, durable and not indexed yet.
    pub unindexed: UnindexedContainers,
}

/// Stores every region the dedup thread sends, until it closes the channel, clearing the
/// damage records of the containers `damaged` it writes again (the backup has just read the
/// records: a listing not made twice).
pub(super) fn run(
    repo: &IndexedRepository,
    regions: Receiver<Receiver<CompressedRegion>>,
    times: &StageTimes,
    buffers: crate::buffers::BufferPool,
    damaged: std::collections::HashSet<ContainerId>,
) -> Result<WriterStats> {
    let mut writer = ContainerWriter::new(repo)
        .clearing_healed_records_of(damaged)
        .indexing_in_batches()
        .returning_buffers(buffers);
    for rx in regions {
        let region = rx.recv().map_err(closed)?;
        let t = Instant::now();
        writer.add_region(region)?;
        StageTimes::add(&times.write, t);
    }
    let t = Instant::now();
    // The snapshot is written after this returns: its containers are durable and listed
    // in an index file for clients with an empty cache (written beside the last container's
    // PUT: see `ContainerWriter::finish`).
    let unindexed = writer.finish_unindexed()?;
    StageTimes::add(&times.write, t);
    Ok(WriterStats {
        containers: std::mem::take(&mut writer.written),
        bytes_written: writer.bytes_written,
        unindexed,
    })
}

//! Request metering: counts every request and the bytes it moved, per object kind and per
//! *purpose* (what the store wanted the bytes for), and passes the request on unchanged. What
//! an I/O accounting needs (how many container reads a restore made, how many of a backup's
//! were for delta bases) without touching the pipelines; on object storage, requests are what
//! is billed and what costs latency. [`crate::cost`] turns the counts into modelled time.
//!
//! # How a request gets its purpose
//!
//! The [`Backend`] trait knows only (kind, name), and stays so: a purpose is not part of the
//! request but of the *handle* it goes through. [`MeteredBackend::tagged`] makes a second
//! handle on the same backend and the same [`IoMeter`] that files everything it passes under
//! one [`Purpose`]; a reader that reads for one purpose (backup's base reads, a container's
//! metadata) is given such a handle. An untagged handle files a request by its kind
//! ([`Purpose::of_kind`]). Rejected: a purpose argument on every trait method (every backend
//! and wrapper would carry a parameter only the meter reads) and a thread-local "current
//! purpose" (restore reads on two threads, backup on a pool; a scope set on one thread would
//! silently miss the others).

use crate::{Backend, FileKind, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const KINDS: usize = FileKind::ALL.len();
const PURPOSES: usize = Purpose::ALL.len();
const DIRECTIONS: usize = Direction::ALL.len();

/// What the store reads or writes an object for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// A container's footer and metadata section (and the size query that finds the footer).
    ContainerMeta,
    /// Chunk data: regions read to restore or dump (tree streams included, and backup's read
    /// of its parent's tree), and containers written. The default of container requests, so
    /// also what check, prune and repair read and write.
    ChunkData,
    /// Regions read back by backup's delta stage to get a delta base.
    BaseRead,
    /// Reads ahead of need: a locality index loading a container's fingerprints before they
    /// are looked up, and (LoopDelta §4.3) a dense container's data with them.
    Prefetch,
    /// Keeping the client's chunk index in step with the repository: listing containers,
    /// reading index files and the metadata of containers they do not cover, damage records.
    /// The default of index files.
    Index,
    /// Snapshot files, and the dense container lists beside them. The default of those kinds.
    Snapshot,
    /// Everything else: the config, locks, damage records outside the index. The default of
    /// those kinds.
    Other,
}

impl Purpose {
    /// Every purpose, in [`Purpose::slot`] order.
    pub const ALL: [Purpose; 7] = [
        Purpose::ContainerMeta,
        Purpose::ChunkData,
        Purpose::BaseRead,
        Purpose::Prefetch,
        Purpose::Index,
        Purpose::Snapshot,
        Purpose::Other,
    ];

    /// This purpose's position in [`Purpose::ALL`].
    pub fn slot(self) -> usize {
        match self {
            Purpose::ContainerMeta => 0,
            Purpose::ChunkData => 1,
            Purpose::BaseRead => 2,
            Purpose::Prefetch => 3,
            Purpose::Index => 4,
            Purpose::Snapshot => 5,
            Purpose::Other => 6,
        }
    }

    /// The name in reports (`container_metadata`, `chunk_data`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Purpose::ContainerMeta => "container_metadata",
            Purpose::ChunkData => "chunk_data",
            Purpose::BaseRead => "base_reads",
            Purpose::Prefetch => "prefetch",
            Purpose::Index => "index",
            Purpose::Snapshot => "snapshots",
            Purpose::Other => "other",
        }
    }

    /// The purpose of a request of `kind` through an untagged handle.
    pub fn of_kind(kind: FileKind) -> Purpose {
        match kind {
            FileKind::Container => Purpose::ChunkData,
            FileKind::Snapshot | FileKind::Dense => Purpose::Snapshot,
            FileKind::Index => Purpose::Index,
            FileKind::Config | FileKind::Lock | FileKind::Damage | FileKind::Key => Purpose::Other,
        }
    }
}

/// Which way a request moves bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// `get`, `get_range`, `get_range_into`: bytes returned.
    Read,
    /// `put`, `create_new`: bytes written (none for a `create_new` that found the object).
    Write,
    /// `list`, `size`, `exists`, `delete`: no payload.
    Query,
}

impl Direction {
    /// Every direction, in [`Direction::slot`] order.
    pub const ALL: [Direction; 3] = [Direction::Read, Direction::Write, Direction::Query];

    /// This direction's position in [`Direction::ALL`].
    pub fn slot(self) -> usize {
        match self {
            Direction::Read => 0,
            Direction::Write => 1,
            Direction::Query => 2,
        }
    }

    /// The name in reports (`read`, `write`, `query`).
    pub fn name(self) -> &'static str {
        match self {
            Direction::Read => "read",
            Direction::Write => "write",
            Direction::Query => "query",
        }
    }
}

/// Requests and the bytes they moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Requests made (failed ones included: they cost a round trip too).
    pub requests: u64,
    /// Payload bytes moved by the requests that succeeded.
    pub bytes: u64,
}

impl Traffic {
    fn plus(self, o: Traffic) -> Traffic {
        Traffic {
            requests: self.requests + o.requests,
            bytes: self.bytes + o.bytes,
        }
    }
}

/// Requests and bytes by purpose and direction: a copy of an [`IoMeter`]'s counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoCounts {
    cells: [[Traffic; DIRECTIONS]; PURPOSES],
}

impl IoCounts {
    /// The traffic of one purpose in one direction.
    pub fn get(&self, purpose: Purpose, direction: Direction) -> Traffic {
        self.cells[purpose.slot()][direction.slot()]
    }

    /// Adds `requests` requests moving `bytes` (for building counts by hand).
    pub fn add(&mut self, purpose: Purpose, direction: Direction, requests: u64, bytes: u64) {
        let c = &mut self.cells[purpose.slot()][direction.slot()];
        c.requests += requests;
        c.bytes += bytes;
    }

    /// The traffic of one purpose, all directions.
    pub fn purpose(&self, purpose: Purpose) -> Traffic {
        Direction::ALL
            .iter()
            .fold(Traffic::default(), |t, d| t.plus(self.get(purpose, *d)))
    }

    /// The traffic in one direction, all purposes.
    pub fn direction(&self, direction: Direction) -> Traffic {
        Purpose::ALL
            .iter()
            .fold(Traffic::default(), |t, p| t.plus(self.get(*p, direction)))
    }

    /// All traffic.
    pub fn total(&self) -> Traffic {
        Direction::ALL
            .iter()
            .fold(Traffic::default(), |t, d| t.plus(self.direction(*d)))
    }

    /// What was counted after `earlier`, a copy of the same meter taken before (counters
    /// only grow; a counter that did not is taken as 0).
    pub fn since(&self, earlier: &IoCounts) -> IoCounts {
        let mut out = IoCounts::default();
        for p in 0..PURPOSES {
            for d in 0..DIRECTIONS {
                let (a, b) = (self.cells[p][d], earlier.cells[p][d]);
                out.cells[p][d] = Traffic {
                    requests: a.requests.saturating_sub(b.requests),
                    bytes: a.bytes.saturating_sub(b.bytes),
                };
            }
        }
        out
    }
}

/// Counters of one object kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindCounts {
    /// Whole-object reads (`get`).
    pub gets: u64,
    /// Ranged reads (`get_range`, `get_range_into`).
    pub range_gets: u64,
    /// Bytes returned by reads of either kind.
    pub bytes_read: u64,
    /// Writes (`put`, `create_new`).
    pub puts: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Listings.
    pub lists: u64,
    /// Deletions.
    pub deletes: u64,
    /// Size and existence queries.
    pub stats: u64,
}

impl KindCounts {
    /// Requests of every type.
    pub fn requests(&self) -> u64 {
        self.gets + self.range_gets + self.puts + self.lists + self.deletes + self.stats
    }
}

#[derive(Default)]
struct AtomicCounts {
    gets: AtomicU64,
    range_gets: AtomicU64,
    bytes_read: AtomicU64,
    puts: AtomicU64,
    bytes_written: AtomicU64,
    lists: AtomicU64,
    deletes: AtomicU64,
    stats: AtomicU64,
}

impl AtomicCounts {
    fn load(&self) -> KindCounts {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        KindCounts {
            gets: l(&self.gets),
            range_gets: l(&self.range_gets),
            bytes_read: l(&self.bytes_read),
            puts: l(&self.puts),
            bytes_written: l(&self.bytes_written),
            lists: l(&self.lists),
            deletes: l(&self.deletes),
            stats: l(&self.stats),
        }
    }
}

#[derive(Default)]
struct AtomicTraffic {
    requests: AtomicU64,
    bytes: AtomicU64,
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// The counters every handle of one [`MeteredBackend`] adds to.
#[derive(Default)]
pub struct IoMeter {
    kinds: [AtomicCounts; KINDS],
    purposes: [[AtomicTraffic; DIRECTIONS]; PURPOSES],
}

impl IoMeter {
    /// The counters of `kind` so far.
    pub fn kind(&self, kind: FileKind) -> KindCounts {
        self.kinds[kind.slot()].load()
    }

    /// The counters by purpose and direction so far.
    pub fn counts(&self) -> IoCounts {
        let mut out = IoCounts::default();
        for (p, row) in self.purposes.iter().enumerate() {
            for (d, t) in row.iter().enumerate() {
                out.cells[p][d] = Traffic {
                    requests: t.requests.load(Ordering::Relaxed),
                    bytes: t.bytes.load(Ordering::Relaxed),
                };
            }
        }
        out
    }
}

impl std::fmt::Debug for IoMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoMeter")
            .field("total", &self.counts().total())
            .finish()
    }
}

/// A backend that counts what passes through it.
pub struct MeteredBackend {
    inner: Arc<dyn Backend>,
    meter: Arc<IoMeter>,
    /// The purpose every request is filed under; `None`: by its kind.
    purpose: Option<Purpose>,
}

impl MeteredBackend {
    /// Meters `inner` with fresh counters, filing each request by its kind.
    pub fn new(inner: Arc<dyn Backend>) -> Self {
        MeteredBackend {
            inner,
            meter: Arc::default(),
            purpose: None,
        }
    }

    /// Another handle on the same backend and counters that files every request under
    /// `purpose`, whatever its kind.
    pub fn tagged(&self, purpose: Purpose) -> MeteredBackend {
        MeteredBackend {
            inner: self.inner.clone(),
            meter: self.meter.clone(),
            purpose: Some(purpose),
        }
    }

    /// The backend metered, for requests that must not be counted.
    pub fn inner(&self) -> &Arc<dyn Backend> {
        &self.inner
    }

    /// The counters (shared by every handle made with [`Self::tagged`]).
    pub fn meter(&self) -> &Arc<IoMeter> {
        &self.meter
    }

    /// The counters of `kind` so far.
    pub fn counts(&self, kind: FileKind) -> KindCounts {
        self.meter.kind(kind)
    }

    fn of(&self, kind: FileKind) -> &AtomicCounts {
        &self.meter.kinds[kind.slot()]
    }

    /// Counts one request of `kind` in `direction`; returns where its bytes go.
    fn request(&self, kind: FileKind, direction: Direction) -> &AtomicU64 {
        let purpose = self.purpose.unwrap_or_else(|| Purpose::of_kind(kind));
        let t = &self.meter.purposes[purpose.slot()][direction.slot()];
        add(&t.requests, 1);
        &t.bytes
    }
}

impl std::fmt::Debug for MeteredBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MeteredBackend({}, {:?})", self.location(), self.purpose)
    }
}

impl Backend for MeteredBackend {
    fn get(&self, kind: FileKind, name: &str) -> Result<Vec<u8>> {
        let c = self.of(kind);
        add(&c.gets, 1);
        let bytes = self.request(kind, Direction::Read);
        let data = self.inner.get(kind, name)?;
        add(&c.bytes_read, data.len() as u64);
        add(bytes, data.len() as u64);
        Ok(data)
    }

    fn get_range(&self, kind: FileKind, name: &str, offset: i64, len: usize) -> Result<Vec<u8>> {
        let c = self.of(kind);
        add(&c.range_gets, 1);
        let bytes = self.request(kind, Direction::Read);
        let data = self.inner.get_range(kind, name, offset, len)?;
        add(&c.bytes_read, data.len() as u64);
        add(bytes, data.len() as u64);
        Ok(data)
    }

    fn get_tail(&self, kind: FileKind, name: &str, max_len: usize) -> Result<Vec<u8>> {
        let c = self.of(kind);
        add(&c.range_gets, 1);
        let bytes = self.request(kind, Direction::Read);
        let data = self.inner.get_tail(kind, name, max_len)?;
        add(&c.bytes_read, data.len() as u64);
        add(bytes, data.len() as u64);
        Ok(data)
    }

    fn get_range_into(
        &self,
        kind: FileKind,
        name: &str,
        offset: i64,
        len: usize,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        let c = self.of(kind);
        add(&c.range_gets, 1);
        let bytes = self.request(kind, Direction::Read);
        self.inner.get_range_into(kind, name, offset, len, buf)?;
        add(&c.bytes_read, buf.len() as u64);
        add(bytes, buf.len() as u64);
        Ok(())
    }

    fn put(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<()> {
        let c = self.of(kind);
        add(&c.puts, 1);
        let bytes = self.request(kind, Direction::Write);
        self.inner.put(kind, name, data)?;
        add(&c.bytes_written, data.len() as u64);
        add(bytes, data.len() as u64);
        Ok(())
    }

    fn create_new(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<bool> {
        let c = self.of(kind);
        add(&c.puts, 1);
        let bytes = self.request(kind, Direction::Write);
        let created = self.inner.create_new(kind, name, data)?;
        if created {
            add(&c.bytes_written, data.len() as u64);
            add(bytes, data.len() as u64);
        }
        Ok(created)
    }

    fn list(&self, kind: FileKind) -> Result<Vec<(String, u64)>> {
        add(&self.of(kind).lists, 1);
        self.request(kind, Direction::Query);
        self.inner.list(kind)
    }

    fn list_names(&self, kind: FileKind) -> Result<Vec<String>> {
        add(&self.of(kind).lists, 1);
        self.request(kind, Direction::Query);
        self.inner.list_names(kind)
    }

    fn delete(&self, kind: FileKind, name: &str) -> Result<()> {
        add(&self.of(kind).deletes, 1);
        self.request(kind, Direction::Query);
        self.inner.delete(kind, name)
    }

    fn size(&self, kind: FileKind, name: &str) -> Result<u64> {
        add(&self.of(kind).stats, 1);
        self.request(kind, Direction::Query);
        self.inner.size(kind, name)
    }

    fn exists(&self, kind: FileKind, name: &str) -> Result<bool> {
        add(&self.of(kind).stats, 1);
        self.request(kind, Direction::Query);
        self.inner.exists(kind, name)
    }

    fn location(&self) -> String {
        self.inner.location()
    }

    fn requests_are_round_trips(&self) -> bool {
        self.inner.requests_are_round_trips()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryBackend;

    #[test]
    fn counts_requests_and_bytes_per_kind() {
        let m = MeteredBackend::new(Arc::new(MemoryBackend::default()));
        m.put(FileKind::Container, "c", &[7; 100]).unwrap();
        m.get_range(FileKind::Container, "c", 10, 20).unwrap();
        let mut buf = Vec::new();
        m.get_range_into(FileKind::Container, "c", -5, 5, &mut buf)
            .unwrap();
        m.get(FileKind::Container, "c").unwrap();
        assert!(m.get(FileKind::Snapshot, "nope").is_err());
        assert!(m.create_new(FileKind::Lock, "l", b"x").unwrap());
        assert!(!m.create_new(FileKind::Lock, "l", b"y").unwrap());
        m.list(FileKind::Container).unwrap();
        m.delete(FileKind::Lock, "l").unwrap();
        let c = m.counts(FileKind::Container);
        assert_eq!(
            c,
            KindCounts {
                gets: 1,
                range_gets: 2,
                bytes_read: 125,
                puts: 1,
                bytes_written: 100,
                lists: 1,
                deletes: 0,
                stats: 0,
            }
        );
        assert_eq!(m.counts(FileKind::Snapshot).gets, 1);
        let l = m.counts(FileKind::Lock);
        assert_eq!((l.puts, l.bytes_written, l.deletes), (2, 1, 1));
        assert_eq!(c.requests(), 5);
    }

    /// The same requests through an untagged and two tagged handles: each lands in its
    /// purpose and direction, exactly, and every handle sees the same counters.
    #[test]
    fn counts_requests_and_bytes_per_purpose_and_direction() {
        let m = MeteredBackend::new(Arc::new(MemoryBackend::default()));
        let meta = m.tagged(Purpose::ContainerMeta);
        let bases = m.tagged(Purpose::BaseRead);
        m.put(FileKind::Container, "c", &[1; 1000]).unwrap();
        m.put(FileKind::Snapshot, "s", &[2; 30]).unwrap();
        meta.size(FileKind::Container, "c").unwrap();
        meta.get_range(FileKind::Container, "c", -40, 40).unwrap();
        meta.get_range(FileKind::Container, "c", 900, 60).unwrap();
        let mut buf = Vec::new();
        bases
            .get_range_into(FileKind::Container, "c", 0, 300, &mut buf)
            .unwrap();
        m.get_range_into(FileKind::Container, "c", 300, 200, &mut buf)
            .unwrap();
        m.get(FileKind::Snapshot, "s").unwrap();
        assert!(bases.get(FileKind::Container, "gone").is_err());
        m.list(FileKind::Lock).unwrap();
        assert!(m.create_new(FileKind::Lock, "l", b"me").unwrap());

        let t = |requests, bytes| Traffic { requests, bytes };
        let c = meta.meter().counts();
        assert_eq!(c, bases.meter().counts());
        assert_eq!(c.get(Purpose::ContainerMeta, Direction::Read), t(2, 100));
        assert_eq!(c.get(Purpose::ContainerMeta, Direction::Query), t(1, 0));
        assert_eq!(c.get(Purpose::BaseRead, Direction::Read), t(2, 300));
        assert_eq!(c.get(Purpose::ChunkData, Direction::Read), t(1, 200));
        assert_eq!(c.get(Purpose::ChunkData, Direction::Write), t(1, 1000));
        assert_eq!(c.get(Purpose::Snapshot, Direction::Write), t(1, 30));
        assert_eq!(c.get(Purpose::Snapshot, Direction::Read), t(1, 30));
        assert_eq!(c.get(Purpose::Other, Direction::Query), t(1, 0));
        assert_eq!(c.get(Purpose::Other, Direction::Write), t(1, 2));
        assert_eq!(c.purpose(Purpose::Prefetch), t(0, 0));
        assert_eq!(c.purpose(Purpose::ContainerMeta), t(3, 100));
        assert_eq!(c.direction(Direction::Read), t(6, 630));
        assert_eq!(c.direction(Direction::Write), t(3, 1032));
        assert_eq!(c.direction(Direction::Query), t(2, 0));
        assert_eq!(c.total(), t(11, 1662));
        // Per kind, as before: the tagged handles' container requests are container requests.
        assert_eq!(m.counts(FileKind::Container).range_gets, 4);

        let before = c;
        meta.get_range(FileKind::Container, "c", 0, 10).unwrap();
        let after = m.meter().counts().since(&before);
        assert_eq!(after.total(), t(1, 10));
        assert_eq!(after.get(Purpose::ContainerMeta, Direction::Read), t(1, 10));
    }
}

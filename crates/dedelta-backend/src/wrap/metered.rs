//! Request metering: counts every request and the bytes it moved, per object kind, and passes
//! the request on unchanged. What an I/O accounting needs (how many container reads a restore
//! made, how many bytes a backup wrote) without touching the pipelines; on object storage,
//! requests are what is billed and what costs latency.

use crate::{Backend, FileKind, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const KINDS: usize = FileKind::ALL.len();

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

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// A backend that counts what passes through it.
pub struct MeteredBackend {
    inner: Arc<dyn Backend>,
    counts: [AtomicCounts; KINDS],
}

impl MeteredBackend {
    /// Meters `inner`.
    pub fn new(inner: Arc<dyn Backend>) -> Self {
        MeteredBackend {
            inner,
            counts: Default::default(),
        }
    }

    /// The counters of `kind` so far.
    pub fn counts(&self, kind: FileKind) -> KindCounts {
        self.counts[kind.slot()].load()
    }

    fn of(&self, kind: FileKind) -> &AtomicCounts {
        &self.counts[kind.slot()]
    }
}

impl Backend for MeteredBackend {
    fn get(&self, kind: FileKind, name: &str) -> Result<Vec<u8>> {
        let c = self.of(kind);
        add(&c.gets, 1);
        let data = self.inner.get(kind, name)?;
        add(&c.bytes_read, data.len() as u64);
        Ok(data)
    }

    fn get_range(&self, kind: FileKind, name: &str, offset: i64, len: usize) -> Result<Vec<u8>> {
        let c = self.of(kind);
        add(&c.range_gets, 1);
        let data = self.inner.get_range(kind, name, offset, len)?;
        add(&c.bytes_read, data.len() as u64);
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
        self.inner.get_range_into(kind, name, offset, len, buf)?;
        add(&c.bytes_read, buf.len() as u64);
        Ok(())
    }

    fn put(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<()> {
        let c = self.of(kind);
        add(&c.puts, 1);
        self.inner.put(kind, name, data)?;
        add(&c.bytes_written, data.len() as u64);
        Ok(())
    }

    fn create_new(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<bool> {
        let c = self.of(kind);
        add(&c.puts, 1);
        let created = self.inner.create_new(kind, name, data)?;
        if created {
            add(&c.bytes_written, data.len() as u64);
        }
        Ok(created)
    }

    fn list(&self, kind: FileKind) -> Result<Vec<(String, u64)>> {
        add(&self.of(kind).lists, 1);
        self.inner.list(kind)
    }

    fn delete(&self, kind: FileKind, name: &str) -> Result<()> {
        add(&self.of(kind).deletes, 1);
        self.inner.delete(kind, name)
    }

    fn size(&self, kind: FileKind, name: &str) -> Result<u64> {
        add(&self.of(kind).stats, 1);
        self.inner.size(kind, name)
    }

    fn exists(&self, kind: FileKind, name: &str) -> Result<bool> {
        add(&self.of(kind).stats, 1);
        self.inner.exists(kind, name)
    }

    fn location(&self) -> String {
        self.inner.location()
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
}

//! Modelled I/O time: what a command's metered requests ([`IoCounts`]) would have cost on a
//! slower store than the one it ran on. A benchmark on a fast SSD or the page cache hides the
//! price of a request; these models put it back, so that a change that saves bytes but
//! doubles requests (or the reverse) shows as such.
//!
//! Both models are serial: every request waits for the one before, and nothing overlaps with
//! computation. That is how restore's locator reads (one thread, one region at a time) and an
//! upper bound for backup, whose container writes overlap with chunking. They count what the
//! store asked for, not what a file system cache or an SSD would absorb: they are a way to
//! compare configurations, not a prediction of wall time.
//!
//! - [`DiskModel`]: a rotating disk. Each read or write pays one positioning (seek and
//!   rotation) plus its bytes at the sequential rate; size, existence and listing queries are
//!   free, as the file system answers them from its metadata caches. Defaults: 8 ms (a
//!   7,200 rpm disk's average seek, about 4 ms, plus half a turn, 4.2 ms) and 150 MB/s (its
//!   sequential rate, between the outer and inner tracks).
//! - [`ObjectStoreModel`]: an object store (S3 and the like). Every request, queries
//!   included (HEAD, LIST, DELETE are round trips too), pays one latency plus its bytes at one
//!   connection's bandwidth. Defaults: 30 ms (first-byte latency of a request from the same
//!   region, at the favourable end: the tail is several times that) and 80 MB/s (one
//!   connection's throughput).
//!
//! MB here are 10^6 bytes.

use crate::wrap::metered::{Direction, IoCounts};

/// A rotating disk: a seek per read or write, plus transfer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DiskModel {
    /// Seconds to position for one read or write.
    pub seek_seconds: f64,
    /// Sequential transfer rate, bytes per second.
    pub bytes_per_second: f64,
}

impl Default for DiskModel {
    fn default() -> Self {
        DiskModel {
            seek_seconds: 0.008,
            bytes_per_second: 150e6,
        }
    }
}

impl DiskModel {
    /// Modelled seconds of `counts`: (reads + writes) × seek + their bytes / rate.
    pub fn seconds(&self, counts: &IoCounts) -> f64 {
        let r = counts.direction(Direction::Read);
        let w = counts.direction(Direction::Write);
        (r.requests + w.requests) as f64 * self.seek_seconds
            + (r.bytes + w.bytes) as f64 / self.bytes_per_second
    }
}

/// An object store: a latency per request, plus transfer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ObjectStoreModel {
    /// Seconds of one request's round trip before its first byte.
    pub request_seconds: f64,
    /// Transfer rate of one connection, bytes per second.
    pub bytes_per_second: f64,
}

impl Default for ObjectStoreModel {
    fn default() -> Self {
        ObjectStoreModel {
            request_seconds: 0.030,
            bytes_per_second: 80e6,
        }
    }
}

impl ObjectStoreModel {
    /// Modelled seconds of `counts`: every request × latency + all bytes / rate.
    pub fn seconds(&self, counts: &IoCounts) -> f64 {
        let t = counts.total();
        t.requests as f64 * self.request_seconds + t.bytes as f64 / self.bytes_per_second
    }
}

/// Both models, as a report uses them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct IoModels {
    /// The disk model.
    pub disk: DiskModel,
    /// The object-store model.
    pub object_store: ObjectStoreModel,
}

/// Modelled seconds under each model.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ModelledSeconds {
    /// Under [`IoModels::disk`].
    pub disk: f64,
    /// Under [`IoModels::object_store`].
    pub object_store: f64,
}

impl IoModels {
    /// The modelled seconds of `counts` under both models.
    pub fn seconds(&self, counts: &IoCounts) -> ModelledSeconds {
        ModelledSeconds {
            disk: self.disk.seconds(counts),
            object_store: self.object_store.seconds(counts),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wrap::metered::Purpose;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    /// By hand: 10 metadata reads of 3 KB, 4 region reads of 1.5 MB, 2 container writes of
    /// 4 MB, 5 size queries and a listing.
    #[test]
    fn modelled_seconds_match_hand_arithmetic() {
        let mut c = IoCounts::default();
        c.add(Purpose::ContainerMeta, Direction::Read, 10, 30_000);
        c.add(Purpose::ChunkData, Direction::Read, 4, 6_000_000);
        c.add(Purpose::ChunkData, Direction::Write, 2, 8_000_000);
        c.add(Purpose::ContainerMeta, Direction::Query, 5, 0);
        c.add(Purpose::Index, Direction::Query, 1, 0);
        let m = IoModels::default().seconds(&c);
        // Disk: 16 reads and writes × 8 ms = 0.128 s; 14.03 MB / 150 MB/s = 0.093533… s.
        assert!(close(m.disk, 0.128 + 14.03 / 150.0), "{}", m.disk);
        // Object store: 22 requests × 30 ms = 0.66 s; 14.03 MB / 80 MB/s = 0.175375 s.
        assert!(close(m.object_store, 0.66 + 0.175375), "{}", m.object_store);

        let slow = IoModels {
            disk: DiskModel {
                seek_seconds: 0.5,
                bytes_per_second: 1e6,
            },
            object_store: ObjectStoreModel {
                request_seconds: 1.0,
                bytes_per_second: 2e6,
            },
        };
        let m = slow.seconds(&c);
        assert!(close(m.disk, 16.0 * 0.5 + 14.03), "{}", m.disk);
        assert!(close(m.object_store, 22.0 + 7.015), "{}", m.object_store);
        assert_eq!(
            IoModels::default().seconds(&IoCounts::default()),
            ModelledSeconds::default()
        );
    }
}

//! Reused byte buffers for the backup pipeline's large, short-lived allocations: 1 MiB read
//! blocks, raw and compressed regions (256 KiB by default), containers (4 MiB).
//!
//! Why: allocated afresh each time, on one thread and freed on another, these either came
//! from glibc's per-thread heaps, which kept the freed space (34 MB of a backup's 144 MB peak
//! RSS on 500 MB of new data), or, with the mmap threshold fixed below their size (see the
//! CLI's `alloc_tuning`), were mapped and unmapped each time, whose page faults and zeroing
//! cost 0.5 s of system time per 500 MB (a quarter of the backup). A pool hands the same
//! buffers round: they are mapped once, and freed space is never left behind.

use std::sync::{Arc, Mutex};

/// Free buffers a pool keeps at most (more are freed): the buffers in flight come back, and
/// the pipeline's channels bound how many there are.
const MAX_FREE: usize = 64;

/// A pool of free byte buffers, shared by the threads of one pipeline (cheap to clone).
#[derive(Clone, Debug, Default)]
pub struct BufferPool(Arc<Mutex<Vec<Vec<u8>>>>);

impl BufferPool {
    /// An empty buffer with room for at least `capacity` bytes: a free one if there is one
    /// large enough, else a new one.
    pub fn take(&self, capacity: usize) -> Vec<u8> {
        let free = self.0.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match free {
            Some(mut b) if b.capacity() >= capacity => {
                b.clear();
                b
            }
            _ => Vec::with_capacity(capacity),
        }
    }

    /// Returns a buffer for later use (its contents are dropped when it is taken again).
    pub fn give(&self, buf: Vec<u8>) {
        if buf.capacity() == 0 {
            return;
        }
        let mut free = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if free.len() < MAX_FREE {
            free.push(buf);
        }
    }

    /// Free buffers held (for tests).
    pub fn free(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// A new empty buffer of `capacity` bytes whose first `touched` bytes' pages are already
/// mapped (`madvise(MADV_POPULATE_WRITE)` on Linux; elsewhere, or where the kernel refuses, a
/// plain allocation).
///
/// Why: a large buffer is mapped afresh (see the CLI's `alloc_tuning`) and its first write
/// touches every page, each a page fault; a restore decompresses every region it reads into
/// such a buffer, and those faults were 13 % of a dump's CPU (prettier). One call maps them
/// all without the per-page trap. Only the bytes about to be written are mapped: a region's
/// buffer has a quarter of headroom for the regions it may hold later, and mapping that too
/// zeroed a fifth more pages than the region used.
pub fn populated(capacity: usize, touched: usize) -> Vec<u8> {
    let buf: Vec<u8> = Vec::with_capacity(capacity);
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let touched = touched.min(capacity);
        let start = buf.as_ptr() as usize;
        let (from, to) = (start.div_ceil(PAGE) * PAGE, (start + touched) / PAGE * PAGE);
        if touched >= 64 * PAGE && to > from {
            // The range lies within the allocation just made, which nothing else uses.
            populate(from, to - from);
        }
    }
    buf
}

/// Maps in the pages of the `len` bytes at address `start` (page-aligned, within a private
/// anonymous mapping or allocation that nothing reads or writes meanwhile) in one call,
/// without a trap per page (`madvise(MADV_POPULATE_WRITE)`); a kernel older than 5.14
/// refuses, and the pages then fault in as they are touched.
#[cfg(target_os = "linux")]
pub(crate) fn populate(start: usize, len: usize) {
    /// Linux 5.14's `MADV_POPULATE_WRITE`, absent from older libc crates.
    const MADV_POPULATE_WRITE: libc::c_int = 23;
    if len == 0 {
        return;
    }
    // SAFETY: the caller's range is page-aligned and unused by anything else; populating
    // only maps its pages, whose contents stay zero (and unread).
    unsafe {
        libc::madvise(start as *mut libc::c_void, len, MADV_POPULATE_WRITE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_empty_and_large_enough() {
        let pool = BufferPool::default();
        let mut b = pool.take(100);
        b.extend_from_slice(&[7; 100]);
        let ptr = b.as_ptr();
        pool.give(b);
        assert_eq!(pool.free(), 1);
        let again = pool.take(50);
        assert!(again.is_empty() && again.capacity() >= 100);
        assert_eq!(again.as_ptr(), ptr, "the same buffer");
        pool.give(again);
        // Too small for the request: a new one.
        assert!(pool.take(1000).capacity() >= 1000);
        for _ in 0..2 * MAX_FREE {
            pool.give(vec![0; 1]);
        }
        assert_eq!(pool.free(), MAX_FREE);
    }

    /// A populated buffer has the capacity asked for, empty, whatever part of it is mapped
    /// ahead (none, some, more than the capacity).
    #[test]
    fn populated_buffers_are_empty_with_their_capacity() {
        for (capacity, touched) in [
            (0, 0),
            (100, 100),
            (1 << 20, 800 << 10),
            (300 << 10, 1 << 30),
        ] {
            let mut b = populated(capacity, touched);
            assert!(b.is_empty() && b.capacity() >= capacity);
            b.resize(capacity, 7);
            assert!(b.iter().all(|&x| x == 7));
        }
    }
}

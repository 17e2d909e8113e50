//! How the process's allocator is set up, before any thread starts.
//!
//! Why: glibc's malloc raises its mmap threshold each time a large block that was mapped is
//! freed (up to 32 MiB); from then on, large temporary buffers (an index merge's tables, a
//! rebuild's batches, the pipeline's buffers when they are not reused) come from per-thread
//! heaps, which keep the freed space: before the pipeline reused its buffers
//! (`dedelta_store::buffers`), peak RSS on 500 MB of new data was 144 MB for 104 MB of live
//! heap (heaptrack). A fixed threshold (which also fixes the trim threshold) turns the raise
//! off, so that a buffer of 128 KiB or more is returned to the system when freed. With the
//! pipeline's buffers reused it costs no speed (system time 0.35 s per 500 MB either way);
//! without reuse it did (each 1 MiB block and 256 KiB region mapped anew: +0.5 s). Another
//! global allocator (jemalloc, mimalloc) was tried too: 98-112 MB, no better than glibc's.
//!
//! The store library does not do this: it is process-wide state, which belongs to the binary.

/// Allocations at least this large are mapped on their own and returned to the system when
/// freed: glibc's default before the dynamic raise.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD_BYTES: libc::c_int = 128 << 10;

/// Fixes glibc's mmap threshold (see the module documentation). Does nothing elsewhere.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes malloc's parameters; it is called first thing in main,
    // before any other thread exists. A refusal (return 0) leaves the defaults, which work.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
    }
}

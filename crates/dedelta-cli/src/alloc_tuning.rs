//! How the process's allocator is set up, before any thread starts.
//!
//! Why: glibc's malloc raises its mmap threshold each time a large block that was mmapped is
//! freed (up to 32 MiB), after which 1 MiB read blocks, 256 KiB regions and their compressed
//! copies come from per-thread heap arenas instead. A backup allocates those on one thread and
//! frees them on another, so the arenas keep the freed space: on 500 MB of new data, peak RSS
//! was 144 MB for 104 MB of live heap (heaptrack). A fixed threshold (which also fixes the trim
//! threshold) turns the dynamic raise off: large blocks are mapped and unmapped as they come
//! and go, and peak RSS is the live heap plus a few MB (111 MB, at the same speed; see
//! docs/benchmarks.md, "Peak memory"). The alternative, another global allocator (jemalloc,
//! mimalloc), would add a C dependency for the same effect.
//!
//! The store library does not do this: it is process-wide state, which belongs to the binary.

/// Allocations at least this large are mapped on their own and returned to the system when
/// freed: glibc's default before the dynamic raise, and below the pipeline's 256 KiB regions.
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

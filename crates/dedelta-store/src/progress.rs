//! Progress reporting is a trait the caller implements; the library ships a no-op.

/// Receives progress of long operations. Called from pipeline threads: implementations must be
/// cheap and thread-safe.
pub trait Progress: Send + Sync {
    /// The total amount of work in bytes, when known.
    fn set_total(&self, _bytes: u64) {}
    /// `bytes` more were processed.
    fn inc(&self, _bytes: u64) {}
    /// A short message (current file, phase).
    fn message(&self, _msg: &str) {}
    /// A non-fatal problem (an unreadable source file).
    fn warn(&self, _msg: &str) {}
    /// One entry is done: `action` is what happened to it (backup: `new`, `modified`,
    /// `unchanged`; restore: `restored`, `unchanged`, `deleted`), `path` where it is, `bytes`
    /// its size (for `-v` listings and restic's `verbose_status` messages).
    fn item(&self, _action: &str, _path: &str, _bytes: u64) {}
}

/// Reports nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {}

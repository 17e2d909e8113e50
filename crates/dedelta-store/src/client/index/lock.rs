//! The index's lock file, and its sharing within one process: a second handle on the same
//! index in one process shares the lock (as a redb database allowed), another process is
//! refused.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The lock file of the index whose manifest is `path`.
pub(super) fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    path.with_file_name(name)
}

/// The index lock files this process holds, by path: a second handle on the same index in
/// one process shares the lock (as a redb database allowed), another process is refused.
static HELD_LOCKS: Mutex<Vec<(PathBuf, std::sync::Weak<std::fs::File>)>> = Mutex::new(Vec::new());

/// Takes (or shares, within this process) the exclusive lock of the index at `path`.
pub(super) fn hold_lock(path: &Path) -> Result<Arc<std::fs::File>> {
    let lock = lock_path(path);
    let mut held = HELD_LOCKS.lock().unwrap_or_else(|e| e.into_inner());
    held.retain(|(_, w)| w.strong_count() > 0);
    if let Some(f) = held
        .iter()
        .find(|(p, _)| *p == lock)
        .and_then(|(_, w)| w.upgrade())
    {
        return Ok(f);
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock)
        .map_err(|e| Error::io(format!("opening {}", lock.display()), e))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
        .map_err(|_| Error::IndexInUse(path.display().to_string()))?;
    let file = Arc::new(file);
    held.push((lock, Arc::downgrade(&file)));
    Ok(file)
}

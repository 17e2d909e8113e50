//! The exclusive repository lock.
//!
//! A writer (backup, repair, later prune) creates `locks/exclusive` atomically, holding its pid,
//! host, start time and command. A second writer finds the file and fails with
//! [`Error::Locked`] (exit code 11). A lock left by a process that no longer runs on this host
//! is stale and is removed. Readers take no lock: everything they read is write-once.

use crate::backend::{Backend, FileKind};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Name of the exclusive lock object.
pub const EXCLUSIVE_LOCK: &str = "exclusive";

/// Who holds a lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    /// Process id.
    pub pid: u32,
    /// Host name.
    pub host: String,
    /// When it was taken (RFC 3339).
    pub time: String,
    /// What the holder runs.
    pub command: String,
}

/// A held exclusive lock, released on drop.
#[derive(Debug)]
pub struct RepoLock {
    backend: Arc<dyn Backend>,
    released: bool,
}

impl std::fmt::Debug for dyn Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Backend({})", self.location())
    }
}

/// Whether a process with `pid` runs on this machine.
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 only checks for the process's existence and our permission.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

impl RepoLock {
    /// Takes the exclusive lock for `me`, removing a stale lock of a dead process on this host.
    pub fn acquire(backend: Arc<dyn Backend>, me: &LockInfo) -> Result<Self> {
        // Serializing a struct of strings cannot fail.
        let body = serde_json::to_vec(me).expect("lock info serializes");
        for _attempt in 0..3 {
            if backend.create_new(FileKind::Lock, EXCLUSIVE_LOCK, &body)? {
                return Ok(RepoLock {
                    backend,
                    released: false,
                });
            }
            let holder: Option<LockInfo> = backend
                .get(FileKind::Lock, EXCLUSIVE_LOCK)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            match holder {
                Some(h) if h.host == me.host && !process_alive(h.pid) => {
                    backend.delete(FileKind::Lock, EXCLUSIVE_LOCK)?;
                }
                Some(h) => {
                    return Err(Error::Locked {
                        pid: h.pid,
                        host: h.host,
                        time: h.time,
                        command: h.command,
                        path: format!("{}/locks/{EXCLUSIVE_LOCK}", backend.location()),
                    })
                }
                // Unreadable: being written right now, or garbage; retry briefly.
                None => std::thread::sleep(std::time::Duration::from_millis(50)),
            }
        }
        Err(Error::Locked {
            pid: 0,
            host: "?".into(),
            time: "?".into(),
            command: "unreadable lock file".into(),
            path: format!("{}/locks/{EXCLUSIVE_LOCK}", backend.location()),
        })
    }

    /// Releases the lock now, reporting errors (drop ignores them).
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        self.backend.delete(FileKind::Lock, EXCLUSIVE_LOCK)
    }
}

impl Drop for RepoLock {
    fn drop(&mut self) {
        if !self.released {
            let _ = self.backend.delete(FileKind::Lock, EXCLUSIVE_LOCK);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;

    fn info(pid: u32) -> LockInfo {
        LockInfo {
            pid,
            host: "h".into(),
            time: "t".into(),
            command: "backup".into(),
        }
    }

    #[test]
    fn second_writer_is_refused_and_stale_lock_removed() {
        let b: Arc<dyn Backend> = Arc::new(MemoryBackend::default());
        let me = info(std::process::id());
        let l = RepoLock::acquire(b.clone(), &me).unwrap();
        assert!(matches!(
            RepoLock::acquire(b.clone(), &me),
            Err(Error::Locked { .. })
        ));
        l.release().unwrap();
        // A lock of a dead pid on our host is stale.
        let dead = info(u32::MAX - 7);
        b.create_new(
            FileKind::Lock,
            EXCLUSIVE_LOCK,
            &serde_json::to_vec(&dead).unwrap(),
        )
        .unwrap();
        let l = RepoLock::acquire(b.clone(), &me).unwrap();
        drop(l);
        assert!(!b.exists(FileKind::Lock, EXCLUSIVE_LOCK).unwrap());
    }
}

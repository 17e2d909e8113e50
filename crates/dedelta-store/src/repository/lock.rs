//! The exclusive repository lock.
//!
//! A writer (backup, check, repair, forget, prune) creates `locks/exclusive` atomically (the
//! object appears whole or not at all), holding its pid, host, start time and command. A second
//! writer finds the file and fails with [`Error::Locked`] (exit code 11). A lock is stale, and
//! removed, when its holder no longer runs on this host (a zombie counts as gone) or when it
//! cannot be read at all: since locks are created atomically, an unreadable one is garbage,
//! not a lock being written. Readers take no lock: everything they read is write-once.

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

/// Whether a process with `pid` runs on this machine. A zombie (exited, not yet reaped by
/// its parent) does not run: `kill(pid, 0)` succeeds for it, so its state is read from /proc.
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks for the process's existence and our permission.
    let r = unsafe { libc::kill(pid, 0) };
    let exists = r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    exists && !is_zombie(pid)
}

/// Whether /proc says `pid` is a zombie (`Z`) or dead (`X`); false where /proc is unavailable.
fn is_zombie(pid: libc::pid_t) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may contain spaces.
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        .is_some_and(|state| state == "Z" || state == "X")
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
            let holder = match backend
                .get(FileKind::Lock, EXCLUSIVE_LOCK)
                .map_err(Error::from)
            {
                Ok(b) => serde_json::from_slice::<LockInfo>(&b).ok(),
                // Released between our attempt and this read: try again.
                Err(Error::ObjectMissing { .. }) => continue,
                Err(e) => return Err(e),
            };
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
                // Locks are created whole: an unreadable one is garbage (left by an older
                // version or damaged), never a lock being written.
                None => backend.delete(FileKind::Lock, EXCLUSIVE_LOCK)?,
            }
        }
        Err(Error::Locked {
            pid: 0,
            host: "?".into(),
            time: "?".into(),
            command: "a lock that reappeared three times while being removed".into(),
            path: format!("{}/locks/{EXCLUSIVE_LOCK}", backend.location()),
        })
    }

    /// Releases the lock now, reporting errors (drop ignores them).
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        Ok(self.backend.delete(FileKind::Lock, EXCLUSIVE_LOCK)?)
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

    /// Issue 12: a disk filling up while the lock was written left an empty lock file that
    /// blocked the repository forever ("locked by pid 0").
    #[test]
    fn unreadable_lock_is_stale() {
        let b: Arc<dyn Backend> = Arc::new(MemoryBackend::default());
        for garbage in [&b""[..], b"{\"pid\": 1", b"\xff\xfe"] {
            b.put(FileKind::Lock, EXCLUSIVE_LOCK, garbage).unwrap();
            let l = RepoLock::acquire(b.clone(), &info(std::process::id())).unwrap();
            l.release().unwrap();
        }
    }

    /// Issue 12: a zombie lock holder counted as alive.
    #[test]
    fn zombie_holder_is_not_alive() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Let it exit without reaping it: it stays a zombie until `wait`.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !is_zombie(pid as libc::pid_t) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            is_zombie(pid as libc::pid_t),
            "child did not become a zombie"
        );
        assert!(!process_alive(pid));
        let b: Arc<dyn Backend> = Arc::new(MemoryBackend::default());
        b.put(
            FileKind::Lock,
            EXCLUSIVE_LOCK,
            &serde_json::to_vec(&info(pid)).unwrap(),
        )
        .unwrap();
        let l = RepoLock::acquire(b.clone(), &info(std::process::id())).unwrap();
        l.release().unwrap();
        child.wait().unwrap();
        assert!(process_alive(std::process::id()));
    }
}

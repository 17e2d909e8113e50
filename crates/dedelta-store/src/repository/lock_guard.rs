//! The write guard: a [`Backend`] wrapper under everything a repository writes that refuses
//! to write once the repository's lock is lost (see [`super::lock`]), so that a command whose
//! lock others may already count as stale stops before it writes another container, index
//! entry or snapshot, or deletes anything. Lock objects themselves are written around it.
//! It notes every write it passes on in the lock's [`LockHealth::writes`] (an exclusive lock's
//! release waits on them, see [`super::lock::settle`]), and answers the open's catch-up
//! listings made in the lock's round ([`WriteGuard::serve_listings`]).

use super::lock::LockHealth;
use crate::backend::{Backend, BackendError, FileKind, Result};
use std::sync::{Arc, Mutex, RwLock};

/// Refuses writes while the lock it watches is lost; passes everything else on.
#[derive(Debug)]
pub struct WriteGuard {
    inner: Arc<dyn Backend>,
    held: RwLock<Option<Arc<LockHealth>>>,
    /// Listings made before they were asked for, each answered once (see
    /// [`Self::serve_listings`]).
    served: Mutex<Vec<(FileKind, Vec<String>)>>,
}

impl WriteGuard {
    /// Guards `inner`; no lock watched yet (writes pass).
    pub fn new(inner: Arc<dyn Backend>) -> Self {
        WriteGuard {
            inner,
            held: RwLock::new(None),
            served: Mutex::new(Vec::new()),
        }
    }

    /// The backend under the guard (for the lock's own objects).
    pub fn inner(&self) -> &Arc<dyn Backend> {
        &self.inner
    }

    /// Watches `health` from now on.
    pub fn watch(&self, health: Arc<LockHealth>) {
        *self.held.write().unwrap_or_else(|e| e.into_inner()) = Some(health);
    }

    /// The next [`Backend::list_names`] of each kind in `listings` answers with its names
    /// instead of a request, until the first write: the open's catch-up listings, made in
    /// the lock's round and valid once the lock is confirmed (`repository/catch_up_listings.rs`).
    pub fn serve_listings(&self, listings: Vec<(FileKind, Vec<String>)>) {
        self.served
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(listings);
    }

    /// The lock whose [`LockHealth::writes`] a write of `kind` is noted in (none for lock
    /// objects, or when no lock is watched).
    fn watched(&self, kind: FileKind) -> Option<Arc<LockHealth>> {
        if kind == FileKind::Lock {
            return None;
        }
        self.held.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Runs `write` if the lock allows it, noted as a write in flight under that lock. The
    /// write is noted *before* the lock is checked: whoever marks the lock lost and then
    /// waits for the writes in flight ([`super::lock::interrupt`]) waits for every write that
    /// passed the check.
    fn write<T>(&self, kind: FileKind, write: impl FnOnce(&dyn Backend) -> Result<T>) -> Result<T> {
        let health = self.watched(kind);
        let _writing = health.as_ref().map(|h| h.writes().start());
        if let Some(h) = &health {
            h.check()
                .map_err(|e| BackendError::Refused(e.to_string()))?;
        }
        // A listing made before this process wrote would miss its own writes: no longer served.
        self.served
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        write(self.inner.as_ref())
    }
}

impl Backend for WriteGuard {
    fn get(&self, kind: FileKind, name: &str) -> Result<Vec<u8>> {
        self.inner.get(kind, name)
    }

    fn get_range(&self, kind: FileKind, name: &str, offset: i64, len: usize) -> Result<Vec<u8>> {
        self.inner.get_range(kind, name, offset, len)
    }

    fn get_tail(&self, kind: FileKind, name: &str, max_len: usize) -> Result<Vec<u8>> {
        self.inner.get_tail(kind, name, max_len)
    }

    fn get_range_into(
        &self,
        kind: FileKind,
        name: &str,
        offset: i64,
        len: usize,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        self.inner.get_range_into(kind, name, offset, len, buf)
    }

    fn put(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<()> {
        self.write(kind, |b| b.put(kind, name, data))
    }

    fn create_new(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<bool> {
        self.write(kind, |b| b.create_new(kind, name, data))
    }

    fn list(&self, kind: FileKind) -> Result<Vec<(String, u64)>> {
        self.inner.list(kind)
    }

    fn list_names(&self, kind: FileKind) -> Result<Vec<String>> {
        let mut served = self.served.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = served.iter().position(|(k, _)| *k == kind) {
            return Ok(served.swap_remove(i).1);
        }
        drop(served);
        self.inner.list_names(kind)
    }

    fn delete(&self, kind: FileKind, name: &str) -> Result<()> {
        self.write(kind, |b| b.delete(kind, name))
    }

    fn size(&self, kind: FileKind, name: &str) -> Result<u64> {
        self.inner.size(kind, name)
    }

    fn exists(&self, kind: FileKind, name: &str) -> Result<bool> {
        self.inner.exists(kind, name)
    }

    fn location(&self) -> String {
        self.inner.location()
    }

    fn requests_are_round_trips(&self) -> bool {
        self.inner.requests_are_round_trips()
    }
}

//! The write guard: a [`Backend`] wrapper under everything a repository writes that refuses
//! to write once the repository's lock is lost (see [`super::lock`]), so that a command whose
//! lock others may already count as stale stops before it writes another container, index
//! entry or snapshot, or deletes anything. Lock objects themselves are written around it.

use super::lock::LockHealth;
use crate::backend::{Backend, BackendError, FileKind, Result};
use std::sync::{Arc, RwLock};

/// Refuses writes while the lock it watches is lost; passes everything else on.
#[derive(Debug)]
pub struct WriteGuard {
    inner: Arc<dyn Backend>,
    held: RwLock<Option<Arc<LockHealth>>>,
}

impl WriteGuard {
    /// Guards `inner`; no lock watched yet (writes pass).
    pub fn new(inner: Arc<dyn Backend>) -> Self {
        WriteGuard {
            inner,
            held: RwLock::new(None),
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

    fn may_write(&self, kind: FileKind) -> Result<()> {
        if kind == FileKind::Lock {
            return Ok(());
        }
        let held = self.held.read().unwrap_or_else(|e| e.into_inner());
        match held.as_ref().map(|h| h.check()) {
            Some(Err(e)) => Err(BackendError::Refused(e.to_string())),
            _ => Ok(()),
        }
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
        self.may_write(kind)?;
        self.inner.put(kind, name, data)
    }

    fn create_new(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<bool> {
        self.may_write(kind)?;
        self.inner.create_new(kind, name, data)
    }

    fn list(&self, kind: FileKind) -> Result<Vec<(String, u64)>> {
        self.inner.list(kind)
    }

    fn list_names(&self, kind: FileKind) -> Result<Vec<String>> {
        self.inner.list_names(kind)
    }

    fn delete(&self, kind: FileKind, name: &str) -> Result<()> {
        self.may_write(kind)?;
        self.inner.delete(kind, name)
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

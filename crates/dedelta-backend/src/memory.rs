//! An in-memory backend for tests.

use crate::{Backend, BackendError as Error, FileKind, Result};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Objects held in a map; for tests of the pipelines without a file system.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    objects: Mutex<BTreeMap<(u8, String), Vec<u8>>>,
}

fn key(kind: FileKind, name: &str) -> (u8, String) {
    (kind as u8, name.to_string())
}

fn missing(kind: FileKind, name: &str) -> Error {
    kind.missing(name)
}

fn out_of_range(kind: FileKind, name: &str) -> Error {
    Error::io(
        format!("reading {}/{name}", kind.dir()),
        std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
    )
}

impl MemoryBackend {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<(u8, String), Vec<u8>>> {
        // A poisoned map only means another test thread panicked; the data is still usable.
        self.objects.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Backend for MemoryBackend {
    fn get(&self, kind: FileKind, name: &str) -> Result<Vec<u8>> {
        self.map()
            .get(&key(kind, name))
            .cloned()
            .ok_or_else(|| missing(kind, name))
    }

    fn get_range(&self, kind: FileKind, name: &str, offset: i64, len: usize) -> Result<Vec<u8>> {
        let data = self.get(kind, name)?;
        let start = if offset < 0 {
            data.len().checked_sub(offset.unsigned_abs() as usize)
        } else {
            Some(offset as usize)
        };
        start
            .and_then(|s| data.get(s..s.checked_add(len)?))
            .map(|s| s.to_vec())
            .ok_or_else(|| out_of_range(kind, name))
    }

    fn get_tail(&self, kind: FileKind, name: &str, max_len: usize) -> Result<Vec<u8>> {
        let data = self.get(kind, name)?;
        Ok(data[data.len().saturating_sub(max_len)..].to_vec())
    }

    fn put(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<()> {
        self.map().insert(key(kind, name), data.to_vec());
        Ok(())
    }

    fn create_new(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<bool> {
        let mut m = self.map();
        if m.contains_key(&key(kind, name)) {
            return Ok(false);
        }
        m.insert(key(kind, name), data.to_vec());
        Ok(true)
    }

    fn list(&self, kind: FileKind) -> Result<Vec<(String, u64)>> {
        Ok(self
            .map()
            .iter()
            .filter(|((k, _), _)| *k == kind as u8)
            .map(|((_, n), v)| (n.clone(), v.len() as u64))
            .collect())
    }

    fn delete(&self, kind: FileKind, name: &str) -> Result<()> {
        self.map().remove(&key(kind, name));
        Ok(())
    }

    fn size(&self, kind: FileKind, name: &str) -> Result<u64> {
        Ok(self.get(kind, name)?.len() as u64)
    }

    fn exists(&self, kind: FileKind, name: &str) -> Result<bool> {
        Ok(self.map().contains_key(&key(kind, name)))
    }

    fn location(&self) -> String {
        "memory".into()
    }
}

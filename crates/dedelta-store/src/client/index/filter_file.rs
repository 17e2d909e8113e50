//! The index's global fingerprint filter (see [`super::filter`]) as the index keeps it: loaded
//! from the file beside the manifest when it still fits the index, else rebuilt from the
//! runs, and written back when it changed.

use super::filter::{filter_path, index_digest, FingerprintFilter};
use super::ChunkIndex;
use crate::error::Result;
use std::sync::Arc;

impl ChunkIndex {
    /// The global fingerprint filter (see [`super::filter`]): the one loaded, else the file beside
    /// the manifest if it was made for the index as it is and has one stage, else
    /// one rebuilt from the index (reading it whole). From then on every chunk the index
    /// takes in is added to it, until a removal or rebuild drops it. Returns it and whether
    /// it was rebuilt, with the reason.
    ///
    /// # Errors
    /// Reading the index to rebuild it ([`crate::error::Error::IndexDamaged`] and I/O errors); a filter
    /// file that cannot be read is rebuilt, not an error.
    pub fn fingerprint_filter(&self) -> Result<(Arc<FingerprintFilter>, Option<String>)> {
        // Held throughout: no commit lands between reading the digest and the filter.
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = self.shared.loaded_filter() {
            return Ok((f, None));
        }
        let digest = index_digest(&state.runs);
        let path = filter_path(self.path());
        let why = match std::fs::read(&path) {
            Ok(bytes) => match FingerprintFilter::decode(&bytes) {
                Ok(f) if f.digest() != digest => {
                    "it was made for another state of the index".to_string()
                }
                Ok(f) if f.stage_count() > 1 => {
                    "it grew past the capacity it was built with".to_string()
                }
                Ok(f) => {
                    let f = Arc::new(f);
                    *self.shared.filter.lock().unwrap_or_else(|e| e.into_inner()) = Some(f.clone());
                    return Ok((f, None));
                }
                Err(why) => why,
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => "it is missing".to_string(),
            Err(e) => e.to_string(),
        };
        let view = self.current();
        let chunks: u64 = view.runs.iter().map(|r| r.chunks).sum();
        let f = FingerprintFilter::with_capacity_for(chunks, digest);
        let r = view.for_each(self.path(), |id, _| f.insert(&id));
        self.shared.guard(r)?;
        let f = Arc::new(f);
        *self.shared.filter.lock().unwrap_or_else(|e| e.into_inner()) = Some(f.clone());
        drop(state);
        self.save_filter()?;
        Ok((f, Some(format!("fingerprint filter rebuilt: {why}"))))
    }

    /// Writes the loaded fingerprint filter beside the manifest if it changed since it was
    /// read or written (see [`super::filter`]); nothing if none is loaded.
    pub fn save_filter(&self) -> Result<()> {
        let _state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match self.shared.loaded_filter() {
            Some(f) if f.is_dirty() => f.store(&filter_path(self.path())),
            _ => Ok(()),
        }
    }
}

//! Runs on: a thread of its own, started by the dedup thread at the backup's end.
//!
//! The handle of the local base cache's save, which the backup waits on last.

/// The local base cache being written on a thread of its own (see
/// [`super::bases::BaseFetcher::save_local_cache`]). Dropping it waits for the thread: a
/// backup that failed must not leave it writing while the next backup of the same process
/// opens the cache.
pub struct LocalCacheSave(SaveState);

enum SaveState {
    /// Nothing to write (no local cache), or done with this outcome.
    Done(Option<String>),
    /// Being written.
    Running(std::thread::JoinHandle<Option<String>>),
}

impl LocalCacheSave {
    /// Runs `save` (which returns why the cache could not be written, if so) on a thread
    /// of its own.
    pub fn spawn(save: impl FnOnce() -> Option<String> + Send + 'static) -> Self {
        let spawned = std::thread::Builder::new()
            .name("dedelta-base-cache".into())
            .spawn(save);
        match spawned {
            Ok(handle) => LocalCacheSave(SaveState::Running(handle)),
            Err(e) => LocalCacheSave::done(Some(format!("local base cache not saved: {e}"))),
        }
    }

    /// No save: nothing to write, or one that ended with this outcome.
    pub fn done(why: Option<String>) -> Self {
        LocalCacheSave(SaveState::Done(why))
    }

    /// Waits for the save; returns why the cache could not be written, if so.
    pub fn wait(mut self) -> Option<String> {
        match std::mem::replace(&mut self.0, SaveState::Done(None)) {
            SaveState::Done(why) => why,
            SaveState::Running(h) => h
                .join()
                .unwrap_or_else(|_| Some("local base cache not saved: its thread panicked".into())),
        }
    }
}

impl Drop for LocalCacheSave {
    fn drop(&mut self) {
        if let SaveState::Running(h) = std::mem::replace(&mut self.0, SaveState::Done(None)) {
            let _ = h.join();
        }
    }
}

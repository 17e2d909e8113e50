//! Runs on: a thread of its own, started by the dedup thread at the backup's end.
//!
//! The handle of the local base cache's save, which the backup waits on last.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// The local base cache being written on a thread of its own (see
/// [`super::bases::BaseFetcher::save_local_cache`]). Dropping it waits for the thread: a
/// backup that failed must not leave it writing while the next backup of the same process
/// opens the cache.
pub struct LocalCacheSave {
    state: SaveState,
    /// Told when the backup's snapshot is committed ([`Self::committed`]); dropped unsent
    /// when it is not.
    commit: Option<SyncSender<()>>,
}

enum SaveState {
    /// Nothing to write (no local cache), or done with this outcome.
    Done(Option<String>),
    /// Being written.
    Running(std::thread::JoinHandle<Option<String>>),
}

/// What the save asks before it records delta depths: whether the backup committed its
/// snapshot (and so its containers and index entries).
pub struct CommitGate(Receiver<()>);

impl CommitGate {
    /// Waits until the backup has committed (`true`) or ended without committing (`false`).
    pub fn committed(self) -> bool {
        self.0.recv().is_ok()
    }
}

impl LocalCacheSave {
    /// Runs `save` (which returns why the cache could not be written, if so) on a thread
    /// of its own, with the gate that [`Self::committed`] opens.
    pub fn spawn(save: impl FnOnce(CommitGate) -> Option<String> + Send + 'static) -> Self {
        let (tx, rx) = sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name("dedelta-base-cache".into())
            .spawn(move || save(CommitGate(rx)));
        match spawned {
            Ok(handle) => LocalCacheSave {
                state: SaveState::Running(handle),
                commit: Some(tx),
            },
            Err(e) => LocalCacheSave::done(Some(format!("local base cache not saved: {e}"))),
        }
    }

    /// No save: nothing to write, or one that ended with this outcome.
    pub fn done(why: Option<String>) -> Self {
        LocalCacheSave {
            state: SaveState::Done(why),
            commit: None,
        }
    }

    /// Tells the save that the backup's snapshot is committed.
    pub fn committed(&mut self) {
        if let Some(tx) = self.commit.take() {
            let _ = tx.send(());
        }
    }

    /// Waits for the save; returns why the cache could not be written, if so.
    pub fn wait(mut self) -> Option<String> {
        // Unsent, the gate tells the save that the backup did not commit.
        self.commit = None;
        match std::mem::replace(&mut self.state, SaveState::Done(None)) {
            SaveState::Done(why) => why,
            SaveState::Running(h) => h
                .join()
                .unwrap_or_else(|_| Some("local base cache not saved: its thread panicked".into())),
        }
    }
}

impl Drop for LocalCacheSave {
    fn drop(&mut self) {
        self.commit = None;
        if let SaveState::Running(h) = std::mem::replace(&mut self.state, SaveState::Done(None)) {
            let _ = h.join();
        }
    }
}

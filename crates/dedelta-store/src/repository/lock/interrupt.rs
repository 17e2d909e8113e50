//! Stopping on Ctrl-C: the locks this process holds, so that an interrupted command stops
//! writing and leaves none behind. Without it, a `backup` killed by Ctrl-C left its lock, and
//! other hosts' `prune` waited for it to go stale (30 minutes by default; on the same host a
//! lock whose process is gone is stale at once).
//!
//! [`interrupt`] marks every held lock lost, so the write guard refuses any write that has not
//! started (a write counts as started before the guard checks the lock: see
//! `lock_guard.rs`), waits for the writes in flight to end (as a release would, see
//! [`super::settle`]), then deletes the lock objects. What the command wrote before is what a
//! crash leaves: containers no snapshot references, which the next `prune` removes.

use super::refresh::LockHealth;
use crate::backend::{Backend, FileKind};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A lock object this process wrote and has not deleted.
struct Held {
    backend: Arc<dyn Backend>,
    /// Once confirmed: what the write guard checks.
    health: Option<Arc<LockHealth>>,
    /// How long after the last write its deletion waits.
    settle: Duration,
}

static HELD: Mutex<BTreeMap<String, Held>> = Mutex::new(BTreeMap::new());

fn held_locks() -> std::sync::MutexGuard<'static, BTreeMap<String, Held>> {
    HELD.lock().unwrap_or_else(|e| e.into_inner())
}

/// The lock object `name` was written (`health` once it is confirmed).
pub(super) fn note_held(
    name: &str,
    backend: &Arc<dyn Backend>,
    health: Option<&Arc<LockHealth>>,
    settle: Duration,
) {
    held_locks().insert(
        name.to_string(),
        Held {
            backend: backend.clone(),
            health: health.cloned(),
            settle,
        },
    );
}

/// The lock object `name` is deleted (or about to be, by its holder).
pub(super) fn note_released(name: &str) {
    held_locks().remove(name);
}

/// Stops every write under this process's locks, waits for those in flight, and deletes the
/// locks; returns how many were deleted. For a signal handler's thread, which then ends the
/// process: the command's own threads get refusals for their next writes meanwhile.
pub fn interrupt() -> usize {
    let held = std::mem::take(&mut *held_locks());
    for h in held.values() {
        if let Some(health) = &h.health {
            health.interrupt();
        }
    }
    let mut deleted = 0;
    for (name, h) in held {
        if let Some(health) = &h.health {
            health.writes().settle(h.settle);
        }
        if h.backend.delete(FileKind::Lock, &name).is_ok() {
            deleted += 1;
        }
    }
    deleted
}

//! The open's catch-up listings sent in the lock's round: on an object store a shared
//! locker lists the containers, the damage records, the snapshots and the index files in the
//! same round trip as its lock's write and listing (and the config's read), instead of one
//! round after them.
//!
//! A listing is kept only when it was sent at most [`SETTLE`] before the answer of the
//! listing that confirmed the lock ([`RepoLock::confirmed_at`]); else the catch-up lists
//! again, after the lock. Why that suffices: an exclusive operation (prune, forget, repair)
//! on an object store deletes its lock only once [`SETTLE`] has passed since its last write
//! was acknowledged ([`super::lock::settle`]). If the confirming listing did not see such a
//! lock, its deletion came before that listing was answered, so the operation's last write
//! was acknowledged more than [`SETTLE`] before that answer: before these listings were sent.
//! They see every one of its writes, never half of it. An exclusive operation that started
//! later sees this lock and backs off (docs/format.md, "Locks"). On a Garage cluster this
//! takes a round trip (2-45 ms) off every shared open: backup, restore, ls, dump, check.

use super::lock::{boot_clock, RepoLock, SETTLE};
use crate::backend::{Backend, FileKind};
use std::time::Duration;

/// What the catch-up lists: the containers and damage records (the index's catch-up), the
/// snapshots (backup's parent, the snapshot restore, dump or ls name) and the index files
/// (which a client with an empty cache rebuilds its index from).
const KINDS: [FileKind; 4] = [
    FileKind::Container,
    FileKind::Damage,
    FileKind::Snapshot,
    FileKind::Index,
];

/// The catch-up's listings made in the lock's round, with when each was sent.
#[derive(Debug, Default)]
pub(super) struct CatchUpListings(Vec<(FileKind, Vec<String>, Duration)>);

impl CatchUpListings {
    /// Lists [`KINDS`] on `raw`, all at once. A listing that fails is left out (the catch-up
    /// lists again and reports its error then).
    pub(super) fn list(raw: &dyn Backend) -> Self {
        let listed = std::thread::scope(|s| {
            let threads: Vec<_> = KINDS
                .iter()
                .map(|&kind| {
                    s.spawn(move || {
                        let sent = boot_clock();
                        raw.list_names(kind).ok().map(|names| (kind, names, sent))
                    })
                })
                .collect();
            threads
                .into_iter()
                .filter_map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        CatchUpListings(listed)
    }

    /// The listings that count for `lock` (see the module doc).
    pub(super) fn valid_for(self, lock: &RepoLock) -> Vec<(FileKind, Vec<String>)> {
        let confirmed = lock.confirmed_at();
        self.0
            .into_iter()
            .filter(|(_, _, sent)| confirmed.saturating_sub(*sent) <= SETTLE)
            .map(|(kind, names, _)| (kind, names))
            .collect()
    }
}

//! Runs on: the worker pool, inside the locality index's lookups.
//!
//! Hints for the locality fingerprint index from the last backup (logical locality, LoopDelta
//! §4.2; Meister et al.'s block locality cache uses the previous backup's recipe alike): the
//! containers it used, in the order it first used them, after the containers it wrote. A
//! backup is mostly its predecessor again, so when the cache misses a chunk that the global
//! filter lets through, the container the stream needs next is most likely the next one the
//! last backup used: prefetching it spares the on-disk index lookup that would have named it
//! (the cache starts empty in every process, so without hints every old container a backup
//! references costs a lookup, 52 per dump on the 30-dump Redis series). A hinted container
//! is taken in like any prefetched one, so a chunk found in it is found exactly as after an
//! index lookup; a hint that does not hold the chunk is a metadata read ahead of need at
//! worst, and after [`GIVE_UP`] such in a row (data unlike the last backup's) hints stop.

use crate::format::container::ContainerId;
use std::collections::HashSet;
use std::sync::Mutex;

/// Hinted containers tried per lookup the cache missed, before the on-disk index.
pub const TRIES_PER_MISS: usize = 2;
/// Hinted containers that held no sought chunk, in a row, after which hints stop.
pub const GIVE_UP: u32 = 16;

/// The last backup's containers as hints, and the order this backup uses containers in.
#[derive(Debug, Default)]
pub struct RecentContainers {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    hints: Vec<ContainerId>,
    /// The containers in `hints`.
    hinted: HashSet<ContainerId>,
    /// The first hint not tried yet.
    next: usize,
    failed_in_a_row: u32,
    given_up: bool,
    /// Containers that answered a lookup of this backup, in first-use order.
    used: Vec<ContainerId>,
    seen: HashSet<ContainerId>,
}

impl RecentContainers {
    /// Hints `hints` (the last backup's containers, in the order to try them; repeats are
    /// tried once).
    pub fn new(hints: Vec<ContainerId>) -> Self {
        let mut hinted = HashSet::new();
        let hints = hints.into_iter().filter(|c| hinted.insert(*c)).collect();
        RecentContainers {
            state: Mutex::new(State {
                hints,
                hinted,
                ..State::default()
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next hinted container for which `cached` is false, unless hints have stopped.
    pub fn next(&self, cached: impl Fn(&ContainerId) -> bool) -> Option<ContainerId> {
        let mut s = self.state();
        if s.given_up {
            return None;
        }
        while let Some(&c) = s.hints.get(s.next) {
            s.next += 1;
            if !cached(&c) {
                return Some(c);
            }
        }
        None
    }

    /// Whether the hinted container tried last held the chunk sought.
    pub fn tried(&self, held: bool) {
        let mut s = self.state();
        if held {
            s.failed_in_a_row = 0;
        } else {
            s.failed_in_a_row += 1;
            s.given_up |= s.failed_in_a_row >= GIVE_UP;
        }
    }

    /// The on-disk index found a sought chunk in container `c` (after the hints tried did
    /// not hold it): if `c` is one of the hints, the misses so far do not count against them
    /// (a backup that uses its predecessor's containers out of step still follows it). The
    /// next hint stays: jumping on to the one after `c` skipped hints the stream still
    /// needed (on the 30-dump Redis series, 630 on-disk lookups instead of 456).
    pub fn found_by_index(&self, c: ContainerId) {
        let mut s = self.state();
        if s.hinted.contains(&c) {
            s.failed_in_a_row = 0;
        }
    }

    /// Records that container `c` answered a lookup. The first answer of a hinted container
    /// counts as a hint that held a sought chunk, however it was found: a hint prefetched for
    /// another chunk's miss is usually found by a later lookup in the cache (the containers
    /// the last backup wrote, tried first, hold chunks the stream needs further on).
    pub fn used(&self, c: ContainerId) {
        let mut s = self.state();
        if s.seen.insert(c) {
            s.used.push(c);
            if s.hinted.contains(&c) {
                s.failed_in_a_row = 0;
            }
        }
    }

    /// The containers that answered this backup's lookups, in first-use order.
    pub fn used_order(&self) -> Vec<ContainerId> {
        self.state().used.clone()
    }

    /// Whether hints have stopped.
    #[cfg(test)]
    pub fn given_up(&self) -> bool {
        self.state().given_up
    }
}

/// The hints for the next backup: the containers `written` by this one (the next backup
/// references what this one changed, all along its stream), then those it `used`.
pub fn hints_for_next(written: &[ContainerId], used: &[ContainerId]) -> Vec<ContainerId> {
    let mut seen = HashSet::new();
    written
        .iter()
        .chain(used)
        .copied()
        .filter(|c| seen.insert(*c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(n: u8) -> ContainerId {
        ContainerId([n; 32])
    }

    #[test]
    fn hints_come_in_order_skipping_cached_and_repeated_ones() {
        let r = RecentContainers::new(vec![c(1), c(2), c(1), c(3), c(4)]);
        assert_eq!(r.next(|_| false), Some(c(1)));
        assert_eq!(r.next(|x| *x == c(2)), Some(c(3)));
        assert_eq!(r.next(|_| false), Some(c(4)));
        assert_eq!(r.next(|_| false), None);
    }

    #[test]
    fn hints_stop_after_too_many_misses_in_a_row() {
        let r = RecentContainers::new((0..=GIVE_UP as u8 + 5).map(c).collect());
        for i in 0..GIVE_UP - 1 {
            assert!(r.next(|_| false).is_some(), "{i}");
            r.tried(false);
        }
        r.tried(true); // a hit resets the count
        for _ in 0..GIVE_UP - 1 {
            r.next(|_| false);
            r.tried(false);
        }
        assert!(!r.given_up());
        r.next(|_| false);
        r.tried(false);
        assert!(r.given_up());
        assert_eq!(r.next(|_| false), None);
    }

    #[test]
    fn a_hint_the_index_names_forgives_the_misses() {
        let r = RecentContainers::new((0..40).map(c).collect());
        for _ in 0..GIVE_UP - 1 {
            r.next(|_| false);
            r.tried(false);
        }
        // Found in hint 30: the misses are forgiven, the next hint stays.
        r.found_by_index(c(30));
        assert_eq!(r.next(|_| false), Some(c(GIVE_UP as u8 - 1)));
        r.tried(false);
        assert!(!r.given_up());
        // A container that is no hint forgives nothing.
        for _ in 0..GIVE_UP - 2 {
            r.next(|_| false);
            r.tried(false);
        }
        r.found_by_index(c(99));
        r.next(|_| false);
        r.tried(false);
        assert!(r.given_up());
    }

    /// A hinted container's first use (a cache hit on it after it was prefetched for another
    /// chunk's miss) forgives the misses: it was not a wasted read.
    #[test]
    fn a_hint_used_later_forgives_the_misses() {
        let r = RecentContainers::new((0..40).map(c).collect());
        for _ in 0..GIVE_UP - 1 {
            r.next(|_| false);
            r.tried(false);
        }
        r.used(c(3));
        for _ in 0..GIVE_UP - 1 {
            r.next(|_| false);
            r.tried(false);
        }
        assert!(!r.given_up());
        // Used again: no second pardon.
        r.used(c(3));
        r.next(|_| false);
        r.tried(false);
        assert!(r.given_up());
    }

    #[test]
    fn records_first_use_order_and_the_next_hints_put_written_first() {
        let r = RecentContainers::new(Vec::new());
        for x in [5, 3, 5, 7, 3] {
            r.used(c(x));
        }
        assert_eq!(r.used_order(), vec![c(5), c(3), c(7)]);
        assert_eq!(
            hints_for_next(&[c(9), c(3)], &r.used_order()),
            vec![c(9), c(3), c(5), c(7)]
        );
    }
}

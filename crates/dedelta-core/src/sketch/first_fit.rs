//! FirstFit: choosing a delta base by super-features, the policy Finesse (Zhang et al.,
//! FAST'19) and the store use.
//!
//! A chunk has M super-features, and a candidate base is any earlier chunk that shares one of
//! them in the same position. Several candidates may match, on different positions or on the
//! same one. FirstFit takes the first that fits: super-feature positions are tried in order
//! (SF 0, then SF 1, ...), and at a position the chunk that was *first* indexed with that value
//! wins. So the index is a map from (position, super-feature value) to one chunk, filled with
//! keep-the-first inserts, and a lookup is at most M hash probes.
//!
//! The alternative rejected: BestFit, which takes the candidate sharing the most
//! super-features. It must keep every chunk under every key (a multimap, where FirstFit
//! keeps one chunk per distinct key) and count matches per lookup; and a persisted table would have to answer "all
//! chunks with this key" instead of one. Keeping the first chunk also means that a base, once
//! chosen, keeps being chosen, so later versions delta against the same stored chunk.
//!
//! [`FirstFitIndex`] is that map, generic over the chunk id (a [`ChunkId`](crate::ChunkId) in
//! the repository, an index into a chunk list in benchmarks). It holds what one process
//! learned. [`FirstFitIndex::lookup_with_backing`] puts it in front of a persisted table (the
//! repository's sketches of earlier backups): positions still come first, and at one position
//! this index is asked before the table. So a super-feature known to both resolves to this
//! index's chunk, a memory hit that spares the table's disk read; the order across positions,
//! which decides which super-feature pairs the chunk, is that of FirstFit.
//!
//! Which chunk a super-feature keeps is a choice ([`SketchKeep`]): Finesse's FirstFit keeps
//! the oldest (the first inserted), LoopDelta's Greedy index (§3.1.3) replaces it with the
//! newest, so that a chunk that drifted from its first copy and was stored in full becomes
//! the base of the next versions. Positions are tried in order either way.

use super::SuperFeatures;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::convert::Infallible;

/// Which chunk a (position, super-feature) keeps when several full chunks have it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SketchKeep {
    /// The first chunk inserted with it (Finesse's FirstFit; what repositories did before the
    /// choice existed).
    #[default]
    Oldest,
    /// The last chunk inserted with it replaces the earlier one (LoopDelta §3.1.3).
    Newest,
}

impl SketchKeep {
    /// The name used in the config and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            SketchKeep::Oldest => "oldest",
            SketchKeep::Newest => "newest",
        }
    }

    /// Parses a name.
    pub fn from_name(s: &str) -> Option<Self> {
        [SketchKeep::Oldest, SketchKeep::Newest]
            .into_iter()
            .find(|k| k.name() == s)
    }
}

/// FirstFit base choice: for each (super-feature position, value), the first id inserted
/// with it (or the last, when made [`FirstFitIndex::keeping`] [`SketchKeep::Newest`]). See
/// the [module docs](self).
#[derive(Clone, Debug)]
pub struct FirstFitIndex<Id> {
    first: HashMap<(usize, u64), Id>,
    keep: SketchKeep,
}

impl<Id> Default for FirstFitIndex<Id> {
    fn default() -> Self {
        FirstFitIndex {
            first: HashMap::new(),
            keep: SketchKeep::Oldest,
        }
    }
}

impl<Id: Clone> FirstFitIndex<Id> {
    /// An empty index keeping the oldest chunk per super-feature.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty index keeping the chunk `keep` says per super-feature.
    pub fn keeping(keep: SketchKeep) -> Self {
        FirstFitIndex {
            first: HashMap::new(),
            keep,
        }
    }

    /// Records the super-features of chunk `id`. A (position, value) already known keeps the
    /// id it had ([`SketchKeep::Oldest`]: the first chunk with a super-feature stays its
    /// base) or takes `id` ([`SketchKeep::Newest`]).
    pub fn insert(&mut self, id: Id, sfs: &SuperFeatures) {
        for (position, sf) in sfs.0.iter().enumerate() {
            match self.keep {
                SketchKeep::Oldest => {
                    self.first
                        .entry((position, *sf))
                        .or_insert_with(|| id.clone());
                }
                SketchKeep::Newest => {
                    self.first.insert((position, *sf), id.clone());
                }
            }
        }
    }

    /// The FirstFit base for `sfs`: the id stored under the first position whose value is
    /// known (the first id inserted with it), or `None` when no super-feature is known.
    pub fn lookup(&self, sfs: &SuperFeatures) -> Option<Id>
    where
        Id: PartialEq,
    {
        let never = |_, _| Ok::<_, Infallible>(None);
        match self.lookup_with_backing(sfs, never) {
            Ok(found) => found,
            Err(infallible) => match infallible {},
        }
    }

    /// FirstFit over this index in front of a backing one: at each position in order, this
    /// index is asked first, then `backing(position, value)`; the first hit wins. `backing` is
    /// not called for a position this index answers, nor after a hit.
    ///
    /// # Errors
    ///
    /// The first error `backing` returns, as is (the lookup stops there).
    pub fn lookup_with_backing<E>(
        &self,
        sfs: &SuperFeatures,
        backing: impl FnMut(usize, u64) -> Result<Option<Id>, E>,
    ) -> Result<Option<Id>, E>
    where
        Id: PartialEq,
    {
        Ok(self.matches_with_backing(sfs, 1, backing)?.pop())
    }

    /// Up to `limit` distinct candidates, in FirstFit order: at each position in order, the
    /// id this index holds, else `backing(position, value)`'s. The first is
    /// [`Self::lookup_with_backing`]'s answer; the others are what a best-of-N base choice
    /// (beyond the papers) also tries. `backing` is not called for a position this index
    /// answers, nor once `limit` ids are found.
    ///
    /// # Errors
    ///
    /// The first error `backing` returns, as is (the lookup stops there).
    pub fn matches_with_backing<E>(
        &self,
        sfs: &SuperFeatures,
        limit: usize,
        mut backing: impl FnMut(usize, u64) -> Result<Option<Id>, E>,
    ) -> Result<Vec<Id>, E>
    where
        Id: PartialEq,
    {
        let mut out: Vec<Id> = Vec::new();
        for (position, sf) in sfs.0.iter().enumerate() {
            if out.len() >= limit {
                break;
            }
            let found = match self.first.get(&(position, *sf)) {
                Some(id) => Some(id.clone()),
                None => backing(position, *sf)?,
            };
            if let Some(id) = found {
                if !out.contains(&id) {
                    out.push(id);
                }
            }
        }
        Ok(out)
    }

    /// The id recorded first with super-feature `sf` at `position`, if any.
    pub fn get(&self, position: usize, sf: u64) -> Option<&Id> {
        self.first.get(&(position, sf))
    }

    /// Distinct (position, value) keys held.
    pub fn len(&self) -> usize {
        self.first.len()
    }

    /// Whether nothing was inserted (or only empty sketches).
    pub fn is_empty(&self) -> bool {
        self.first.is_empty()
    }
}

impl<Id: Clone> Extend<(Id, SuperFeatures)> for FirstFitIndex<Id> {
    /// Inserts in iteration order, so an earlier item wins a shared super-feature.
    fn extend<T: IntoIterator<Item = (Id, SuperFeatures)>>(&mut self, items: T) {
        for (id, sfs) in items {
            self.insert(id, &sfs);
        }
    }
}

impl<Id: Clone> FromIterator<(Id, SuperFeatures)> for FirstFitIndex<Id> {
    /// An index of the items, inserted in iteration order.
    fn from_iter<T: IntoIterator<Item = (Id, SuperFeatures)>>(items: T) -> Self {
        let mut index = Self::new();
        index.extend(items);
        index
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sf(values: &[u64]) -> SuperFeatures {
        SuperFeatures(values.to_vec())
    }

    #[test]
    fn empty_index_finds_nothing() {
        let index = FirstFitIndex::<u32>::new();
        assert!(index.is_empty());
        assert_eq!(index.lookup(&sf(&[1, 2, 3])), None);
        assert_eq!(index.lookup(&sf(&[])), None);
    }

    #[test]
    fn first_insert_wins_a_key() {
        let mut index = FirstFitIndex::new();
        index.insert("a", &sf(&[1, 2, 3]));
        index.insert("b", &sf(&[1, 5, 6]));
        assert_eq!(index.len(), 5);
        assert_eq!(index.lookup(&sf(&[1, 0, 0])), Some("a"));
        assert_eq!(index.lookup(&sf(&[0, 5, 0])), Some("b"));
    }

    #[test]
    fn newest_insert_replaces_a_key_when_kept_newest() {
        let mut index = FirstFitIndex::keeping(SketchKeep::Newest);
        index.insert("a", &sf(&[1, 2, 3]));
        index.insert("b", &sf(&[1, 5, 6]));
        assert_eq!(index.lookup(&sf(&[1, 0, 0])), Some("b"));
        assert_eq!(index.lookup(&sf(&[0, 2, 0])), Some("a"));
        assert_eq!(
            SketchKeep::from_name("newest").map(SketchKeep::name),
            Some("newest")
        );
        assert_eq!(SketchKeep::default(), SketchKeep::Oldest);
    }

    #[test]
    fn earlier_position_wins_over_earlier_insert() {
        let mut index = FirstFitIndex::new();
        index.insert(1, &sf(&[10, 20, 30]));
        index.insert(2, &sf(&[11, 21, 31]));
        // Matches chunk 1 at SF 2 and chunk 2 at SF 0: SF 0 is tried first.
        assert_eq!(index.lookup(&sf(&[11, 0, 30])), Some(2));
        assert_eq!(index.lookup(&sf(&[0, 20, 31])), Some(1));
    }

    #[test]
    fn values_only_match_in_their_position() {
        let index: FirstFitIndex<u8> = [(7, sf(&[1, 2, 3]))].into_iter().collect();
        assert_eq!(index.lookup(&sf(&[2, 3, 1])), None);
        assert_eq!(index.lookup(&sf(&[9, 9, 3])), Some(7));
        // A shorter or longer sketch is compared position by position.
        assert_eq!(index.lookup(&sf(&[1])), Some(7));
        assert_eq!(index.lookup(&sf(&[0, 0, 0, 3])), None);
    }

    #[test]
    fn backing_is_asked_after_this_index_at_each_position() {
        let mut index = FirstFitIndex::new();
        index.insert('o', &sf(&[10, 20, 30]));
        let mut asked = Vec::new();
        let found = index.lookup_with_backing(&sf(&[1, 2, 30]), |pos, v| {
            asked.push((pos, v));
            Ok::<_, ()>((v == 2).then_some('b'))
        });
        // SF 0 misses both; at SF 1 the backing table hits before this index's SF 2.
        assert_eq!(found, Ok(Some('b')));
        assert_eq!(asked, [(0, 1), (1, 2)]);

        asked.clear();
        let found = index.lookup_with_backing(&sf(&[10, 2, 3]), |pos, v| {
            asked.push((pos, v));
            Ok::<_, ()>(Some('b'))
        });
        assert_eq!(found, Ok(Some('o')));
        assert!(
            asked.is_empty(),
            "a hit here is never looked up in the backing table"
        );
    }

    #[test]
    fn backing_error_stops_the_lookup() {
        let index = FirstFitIndex::<u8>::new();
        let mut calls = 0;
        let found = index.lookup_with_backing(&sf(&[1, 2, 3]), |pos, _| {
            calls += 1;
            if pos == 1 {
                Err("disk")
            } else {
                Ok(None)
            }
        });
        assert_eq!(found, Err("disk"));
        assert_eq!(calls, 2);
    }

    /// The definition, read literally: for each position in order, scan the chunks of each
    /// source in turn (this index's, then the backing table's), in insertion order, for one
    /// with the same value there.
    fn first_fit_by_scan(
        sources: &[&[(usize, SuperFeatures)]],
        query: &SuperFeatures,
    ) -> Option<usize> {
        query.0.iter().enumerate().find_map(|(pos, v)| {
            sources.iter().find_map(|chunks| {
                chunks
                    .iter()
                    .find(|(_, s)| s.0.get(pos) == Some(v))
                    .map(|(id, _)| *id)
            })
        })
    }

    fn sketches() -> impl Strategy<Value = Vec<SuperFeatures>> {
        // Values from a small range, so that keys collide often.
        prop::collection::vec(
            prop::collection::vec(0u64..6, 0..4).prop_map(SuperFeatures),
            0..12,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// The index, alone and in front of a backing one, agrees with a linear scan.
        #[test]
        fn agrees_with_a_scan(chunks in sketches(), queries in sketches(), split in 0usize..12) {
            let chunks: Vec<(usize, SuperFeatures)> = chunks.into_iter().enumerate().collect();
            let whole: FirstFitIndex<usize> = chunks.iter().cloned().collect();
            let (back_chunks, front_chunks) = chunks.split_at(split.min(chunks.len()));
            let front: FirstFitIndex<usize> = front_chunks.iter().cloned().collect();
            let back: FirstFitIndex<usize> = back_chunks.iter().cloned().collect();
            for q in &queries {
                prop_assert_eq!(whole.lookup(q), first_fit_by_scan(&[&chunks], q));
                let combined = front.lookup_with_backing(q, |pos, v| {
                    Ok::<_, Infallible>(back.first.get(&(pos, v)).copied())
                });
                prop_assert_eq!(
                    combined,
                    Ok(first_fit_by_scan(&[front_chunks, back_chunks], q))
                );
            }
        }
    }

    #[test]
    fn matches_are_distinct_in_position_order_up_to_the_limit() {
        let index: FirstFitIndex<&str> = [("a", sf(&[1, 2, 3])), ("b", sf(&[4, 5, 6]))]
            .into_iter()
            .collect();
        // Position 0 -> a, 1 -> b (from the backing table), 2 -> a again (counted once).
        let backing = |p: usize, v: u64| Ok::<_, ()>(((p, v) == (1, 9)).then_some("b"));
        let all = index
            .matches_with_backing(&sf(&[1, 9, 3]), 8, backing)
            .unwrap();
        assert_eq!(all, vec!["a", "b"]);
        let first = index
            .matches_with_backing(&sf(&[1, 9, 3]), 1, backing)
            .unwrap();
        assert_eq!(first, vec!["a"]);
        assert_eq!(
            index.lookup_with_backing(&sf(&[1, 9, 3]), backing),
            Ok(Some("a"))
        );
    }
}

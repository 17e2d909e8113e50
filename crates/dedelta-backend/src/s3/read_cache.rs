//! The bytes of containers read from an object store, kept in memory in aligned blocks, and
//! their sizes: what a local repository gets from the page cache.
//!
//! Why: each read from an object store is a round trip, and a process reads the same bytes
//! more than once. Backup reads its parent's tree and the containers' metadata on one
//! thread and the same metadata and regions again in its dedup stage; a restore's cache of
//! decompressed regions lets go of regions that later chunks need again (on the Garage
//! benchmark, 67 of a restore's 170 ranged reads were made when a chunk was fetched, most of
//! them bytes read before). Containers are written once under their name (a rewrite is a
//! new name), so their bytes can be kept; the few compressed MB a restore of a GB reads
//! stay here, and the decompressed regions are opened again from memory.
//!
//! A read is rounded out to whole blocks of [`BLOCK`] bytes (the S3 backend's smallest
//! ranged read, `MIN_RANGED_READ`), the blocks held are taken from here, and the span
//! from the first block missing to the last is read in one request. A short block is kept
//! only as an object's last. Memory is bounded by a byte budget (least recently used blocks
//! go first). This process's own writes and deletes of an object drop what is held of it.

use crate::Result;
use bytes::Bytes;
use lru::LruCache;
use std::collections::HashMap;
use std::sync::Mutex;

/// The block size: reads are aligned to it and widened to whole blocks.
pub(super) const BLOCK: u64 = super::MIN_RANGED_READ as u64;

/// Container bytes held in blocks, and object sizes learned from reads (see the module doc).
pub(super) struct ReadCache {
    state: Mutex<State>,
    budget: usize,
}

struct State {
    /// (object name, block index) -> the block's bytes (a whole block but for an object's
    /// last).
    blocks: LruCache<(String, u64), Bytes>,
    /// Object sizes, from the responses of reads.
    sizes: HashMap<String, u64>,
    bytes: usize,
}

/// What one ranged request returned: `bytes` from offset `start` of an object of `size`
/// bytes.
pub(super) struct Fetched {
    pub(super) bytes: Bytes,
    pub(super) start: u64,
    pub(super) size: u64,
}

impl ReadCache {
    /// A cache of at most `budget` bytes (0 keeps nothing; sizes are still kept).
    pub(super) fn new(budget: usize) -> Self {
        ReadCache {
            state: Mutex::new(State {
                blocks: LruCache::unbounded(),
                sizes: HashMap::new(),
                bytes: 0,
            }),
            budget,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is consistent between statements: a panic elsewhere leaves it usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The size of `name`, if a read has told it.
    pub(super) fn size(&self, name: &str) -> Option<u64> {
        self.state().sizes.get(name).copied()
    }

    /// Drops what is held of `name` (written or deleted by this process).
    pub(super) fn forget(&self, name: &str) {
        let mut st = self.state();
        st.sizes.remove(name);
        let keys: Vec<(String, u64)> = st
            .blocks
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            if let Some(b) = st.blocks.pop(&k) {
                st.bytes -= b.len();
            }
        }
    }

    /// `len` bytes at `start` of `name`, from the blocks held and, for those missing, one
    /// request `fetch(from, to)` of the byte range `from..to` (block-aligned; the server
    /// clips it at the object's end). `None` if the object is shorter than `start + len`.
    #[cfg(test)]
    pub(super) fn read(
        &self,
        name: &str,
        start: u64,
        len: usize,
        fetch: impl FnOnce(u64, u64) -> Result<Fetched>,
    ) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self
            .read_into(name, start, len, fetch, &mut out)?
            .then_some(out))
    }

    /// [`Self::read`] into `out` (replacing its contents, reusing its memory: a restore reads
    /// every region through one buffer, where a new one per read was mapped, faulted in page
    /// by page and unmapped again, most of a restore's system time). `false` if the object is
    /// shorter than `start + len` (`out`'s contents are then unspecified).
    pub(super) fn read_into(
        &self,
        name: &str,
        start: u64,
        len: usize,
        fetch: impl FnOnce(u64, u64) -> Result<Fetched>,
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        out.clear();
        if len == 0 {
            return Ok(true);
        }
        let end = start + len as u64;
        let (first, last) = (start / BLOCK, (end - 1) / BLOCK);
        let mut have: Vec<Option<Bytes>> = {
            let mut st = self.state();
            (first..=last)
                .map(|b| st.blocks.get(&(name.to_string(), b)).cloned())
                .collect()
        };
        let missing = |have: &[Option<Bytes>]| have.iter().position(Option::is_none);
        if let Some(m0) = missing(&have) {
            let m1 = have.iter().rposition(Option::is_none).unwrap_or(m0);
            let (b0, b1) = (first + m0 as u64, first + m1 as u64);
            let got = fetch(b0 * BLOCK, (b1 + 1) * BLOCK)?;
            for (b, block) in self.keep(name, &got) {
                if (first..=last).contains(&b) {
                    have[(b - first) as usize] = Some(block);
                }
            }
        }
        out.reserve(len);
        for (i, block) in have.iter().enumerate() {
            let Some(block) = block else {
                return Ok(false);
            };
            let at = (first + i as u64) * BLOCK;
            let from = start.saturating_sub(at) as usize;
            let to = ((end - at) as usize).min(block.len());
            if from > to {
                return Ok(false);
            }
            out.extend_from_slice(&block[from..to]);
        }
        Ok(out.len() == len)
    }

    /// Keeps the whole blocks of `got` (and its short last block at the object's end),
    /// returns them with their indices, and records the object's size.
    pub(super) fn keep(&self, name: &str, got: &Fetched) -> Vec<(u64, Bytes)> {
        let mut blocks = Vec::new();
        let got_end = got.start + got.bytes.len() as u64;
        let mut b = got.start.div_ceil(BLOCK);
        while b * BLOCK < got_end {
            let (from, to) = (b * BLOCK, ((b + 1) * BLOCK).min(got_end));
            if to - from == BLOCK || to == got.size {
                let bytes = got
                    .bytes
                    .slice((from - got.start) as usize..(to - got.start) as usize);
                blocks.push((b, bytes));
            }
            b += 1;
        }
        let mut st = self.state();
        st.sizes.insert(name.to_string(), got.size);
        for (b, bytes) in &blocks {
            if bytes.len() > self.budget {
                continue;
            }
            st.bytes += bytes.len();
            if let Some(old) = st.blocks.put((name.to_string(), *b), bytes.clone()) {
                st.bytes -= old.len();
            }
        }
        while st.bytes > self.budget {
            match st.blocks.pop_lru() {
                Some((_, old)) => st.bytes -= old.len(),
                None => break,
            }
        }
        blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// An object of `n` bytes whose byte i is i mod 251, and a fetch from it that records
    /// the ranges asked for.
    fn object(n: u64) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8).collect()
    }

    fn fetcher<'a>(
        obj: &'a [u8],
        asked: &'a RefCell<Vec<(u64, u64)>>,
    ) -> impl Fn(u64, u64) -> Result<Fetched> + 'a {
        move |from, to| {
            asked.borrow_mut().push((from, to));
            let to = to.min(obj.len() as u64);
            Ok(Fetched {
                bytes: Bytes::copy_from_slice(&obj[from as usize..to as usize]),
                start: from,
                size: obj.len() as u64,
            })
        }
    }

    /// A second read of the same bytes makes no request; a read overlapping held blocks asks
    /// only for the blocks missing; the bytes are always the object's.
    #[test]
    fn reads_again_from_memory_and_asks_only_for_what_is_missing() {
        let obj = object(5 * BLOCK + 1000);
        let asked = RefCell::new(Vec::new());
        let cache = ReadCache::new(usize::MAX);
        let read = |start: u64, len: usize| {
            cache
                .read("c", start, len, fetcher(&obj, &asked))
                .unwrap()
                .unwrap()
        };
        let s = (BLOCK + 10) as usize;
        assert_eq!(read(BLOCK + 10, 100), obj[s..s + 100]);
        assert_eq!(*asked.borrow(), vec![(BLOCK, 2 * BLOCK)]);
        assert_eq!(read(BLOCK + 500, 1000), obj[s + 490..s + 1490]);
        assert_eq!(asked.borrow().len(), 1, "held bytes were asked for again");
        // Blocks 0 to 3: 1 is held, 0..=3 are asked for in one request (one round trip).
        assert_eq!(
            read(5, (4 * BLOCK - 10) as usize),
            obj[5..(4 * BLOCK - 5) as usize]
        );
        assert_eq!(asked.borrow()[1], (0, 4 * BLOCK));
        // The object's short last block is kept; its size is learned.
        let tail = (5 * BLOCK) as usize;
        assert_eq!(read(5 * BLOCK, 1000), obj[tail..]);
        assert_eq!(read(5 * BLOCK + 1, 999), obj[tail + 1..]);
        assert_eq!(asked.borrow().len(), 3);
        assert_eq!(cache.size("c"), Some(obj.len() as u64));
        // Past the end: no bytes to give.
        assert_eq!(
            cache
                .read("c", 5 * BLOCK, 1001, fetcher(&obj, &asked))
                .unwrap(),
            None
        );
    }

    /// The budget bounds the bytes held (least recently used blocks go), and `forget` drops
    /// an object's blocks and size.
    #[test]
    fn bounded_and_forgets_what_is_rewritten() {
        let obj = object(8 * BLOCK);
        let asked = RefCell::new(Vec::new());
        let cache = ReadCache::new(2 * BLOCK as usize);
        for b in 0..4 {
            cache
                .read("c", b * BLOCK, 10, fetcher(&obj, &asked))
                .unwrap();
        }
        assert_eq!(cache.state().bytes, 2 * BLOCK as usize);
        cache
            .read("c", 3 * BLOCK, 10, fetcher(&obj, &asked))
            .unwrap();
        assert_eq!(asked.borrow().len(), 4, "the newest block was let go");
        cache.read("c", 0, 10, fetcher(&obj, &asked)).unwrap();
        assert_eq!(asked.borrow().len(), 5, "the oldest block was kept");
        cache.forget("c");
        assert_eq!(cache.size("c"), None);
        cache
            .read("c", 3 * BLOCK, 10, fetcher(&obj, &asked))
            .unwrap();
        assert_eq!(asked.borrow().len(), 6);
        // A budget of nothing keeps nothing, and still reads right.
        let none = ReadCache::new(0);
        assert_eq!(
            none.read("c", 7, 9, fetcher(&obj, &asked))
                .unwrap()
                .unwrap(),
            obj[7..16]
        );
        assert_eq!(none.state().bytes, 0);
    }

    /// A suffix read's bytes (not block-aligned at their start) are kept from their first
    /// whole block on.
    #[test]
    fn keeps_the_whole_blocks_of_an_unaligned_read() {
        let obj = object(3 * BLOCK + 77);
        let asked = RefCell::new(Vec::new());
        let cache = ReadCache::new(usize::MAX);
        let start = BLOCK + 5;
        let got = Fetched {
            bytes: Bytes::copy_from_slice(&obj[start as usize..]),
            start,
            size: obj.len() as u64,
        };
        let kept: Vec<u64> = cache.keep("c", &got).into_iter().map(|(b, _)| b).collect();
        assert_eq!(kept, vec![2, 3]);
        let at = (2 * BLOCK) as usize;
        assert_eq!(
            cache
                .read("c", 2 * BLOCK, obj.len() - at, fetcher(&obj, &asked))
                .unwrap()
                .unwrap(),
            obj[at..]
        );
        assert!(asked.borrow().is_empty());
    }
}

//! A Bloom filter per run, so that looking up a chunk or super-feature that a run does not
//! hold (the common case when backing up new data) costs no read of the run file.

/// A blocked Bloom filter: each key sets and tests `k` bits of one 512-bit block (one cache
/// line), so a lookup costs one memory access, not `k`. `h1` picks the block, 9-bit slices
/// of `h2` the bits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bloom {
    /// Probes per key.
    k: u8,
    /// A multiple of [`BLOCK_WORDS`].
    words: Vec<u64>,
}

/// Most probes per key (7 slices of 9 bits fit in `h2`).
const MAX_PROBES: u8 = 7;

/// Words of a block (512 bits).
const BLOCK_WORDS: usize = 8;

impl Bloom {
    /// An empty filter sized for `keys` keys at `bits_per_key` bits each, probing `k` bits.
    pub fn new(keys: u64, bits_per_key: u64, k: u8) -> Self {
        let bits = keys.saturating_mul(bits_per_key).max(512);
        let blocks = usize::try_from(bits.div_ceil(512)).unwrap_or(usize::MAX >> 10);
        Bloom {
            k: k.clamp(1, MAX_PROBES),
            words: vec![0; blocks * BLOCK_WORDS],
        }
    }

    /// The first word of `h1`'s block.
    fn block(&self, h1: u64) -> usize {
        let blocks = (self.words.len() / BLOCK_WORDS) as u128;
        ((u128::from(h1) * blocks) >> 64) as usize * BLOCK_WORDS
    }

    /// Adds the key hashed to (`h1`, `h2`).
    pub fn insert(&mut self, h1: u64, h2: u64) {
        let b = self.block(h1);
        for i in 0..u32::from(self.k) {
            let bit = ((h2 >> (9 * i)) & 511) as usize;
            self.words[b + bit / 64] |= 1 << (bit % 64);
        }
    }

    /// Whether the key hashed to (`h1`, `h2`) may have been added (never false for one that
    /// was).
    pub fn contains(&self, h1: u64, h2: u64) -> bool {
        let b = self.block(h1);
        let block = &self.words[b..b + BLOCK_WORDS];
        (0..u32::from(self.k)).all(|i| {
            let bit = ((h2 >> (9 * i)) & 511) as usize;
            block[bit / 64] & (1 << (bit % 64)) != 0
        })
    }

    /// Bytes [`Self::encode`] appends.
    #[cfg(test)]
    pub fn encoded_len(&self) -> usize {
        1 + 8 + self.words.len() * 8
    }

    /// Appends the filter: probes (u8), words (u64 LE), the words.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.k);
        out.extend_from_slice(&(self.words.len() as u64).to_le_bytes());
        for w in &self.words {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }

    /// Decodes a filter from the front of `bytes`; returns it and the bytes it used, or `None`
    /// if they do not hold one.
    pub fn decode(bytes: &[u8]) -> Option<(Self, usize)> {
        let k = *bytes.first()?;
        if !(1..=MAX_PROBES).contains(&k) {
            return None;
        }
        let n = u64::from_le_bytes(bytes.get(1..9)?.try_into().ok()?);
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n >= 1 && n % BLOCK_WORDS == 0)?;
        let end = n.checked_mul(8)?.checked_add(9)?;
        let body = bytes.get(9..end)?;
        let words = body
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
            .collect();
        Some((Bloom { k, words }, end))
    }

    /// Bytes the filter holds in memory.
    pub fn memory_bytes(&self) -> usize {
        self.words.len() * 8
    }
}

/// A run's filter, read from its file the first time a lookup asks it, not when the run is
/// opened: a locality backup's lookups reach the runs only after the global fingerprint
/// filter said "maybe", and only the full sketch index asks the super-feature filters, so an
/// index that held every run's filters in memory held up to 4.7 bytes per chunk for nothing
/// (issue 16: at most 4 bytes per chunk outside the bounded caches).
///
/// A filter given a [`FilterBudget`] (the runs' super-feature filters) is read only while the
/// budget has room for it; until then every key is a "maybe" and the lookup reads the run's
/// bucket, which answers exactly: a filter left out costs reads, never an answer.
#[derive(Debug)]
pub struct LazyBloom {
    /// Where the encoded filter lies in the file.
    at: u64,
    /// Its encoded length.
    len: usize,
    /// CRC-32C of the encoded bytes, taken when the tail was verified: bytes read later must
    /// be the same.
    crc: u32,
    /// `None` once reading it failed: every key is then a "maybe" (the bucket read that
    /// follows verifies its own checksum, so a lost filter costs reads, never a wrong answer).
    bloom: std::sync::OnceLock<Option<Bloom>>,
    /// The budget it is held within, once the index gave it one.
    budget: std::sync::OnceLock<std::sync::Arc<FilterBudget>>,
    /// Held while a budgeted filter is reserved and read: one reservation per filter.
    loading: std::sync::Mutex<()>,
}

impl LazyBloom {
    /// The filter whose encoding is `encoded`, found at byte `at` of the file; not held.
    pub fn unloaded(at: u64, encoded: &[u8]) -> Self {
        LazyBloom {
            at,
            len: encoded.len(),
            crc: crc32c::crc32c(encoded),
            bloom: std::sync::OnceLock::new(),
            budget: std::sync::OnceLock::new(),
            loading: std::sync::Mutex::new(()),
        }
    }

    /// Reads the filter from `file`: `None` if it cannot be read or is not what the tail
    /// verified.
    fn read(&self, file: &std::fs::File) -> Option<Bloom> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; self.len];
        file.read_exact_at(&mut buf, self.at).ok()?;
        if crc32c::crc32c(&buf) != self.crc {
            return None;
        }
        Bloom::decode(&buf)
            .filter(|(_, n)| *n == self.len)
            .map(|(b, _)| b)
    }

    /// Holds the filter within `budget` from now on (the first budget given stays).
    pub fn hold_within(&self, budget: &std::sync::Arc<FilterBudget>) {
        let _ = self.budget.set(budget.clone());
    }

    /// The filter, read from `file` if it is not held yet and its budget (if any) has room;
    /// `None` if it is not held.
    fn get(&self, file: &std::fs::File) -> Option<&Bloom> {
        if let Some(held) = self.bloom.get() {
            return held.as_ref();
        }
        let Some(budget) = self.budget.get() else {
            return self.bloom.get_or_init(|| self.read(file)).as_ref();
        };
        let _loading = self.loading.lock().unwrap_or_else(|e| e.into_inner());
        if self.bloom.get().is_none() {
            if !budget.reserve(self.len as u64) {
                return None;
            }
            if self.bloom.get_or_init(|| self.read(file)).is_none() {
                budget.release(self.len as u64);
            }
        }
        self.bloom.get().and_then(Option::as_ref)
    }

    /// Whether the key hashed to (`h1`, `h2`) may be in the run (reading the filter from
    /// `file` the first time): `None` when no filter is held (its budget had no room, or it
    /// could not be read), so that the caller reads the run's bucket.
    pub fn test(&self, file: &std::fs::File, h1: u64, h2: u64) -> Option<bool> {
        self.get(file).map(|b| b.contains(h1, h2))
    }

    /// Whether the key hashed to (`h1`, `h2`) may be in the run (see [`Self::test`]; no
    /// filter held is a "maybe").
    pub fn contains(&self, file: &std::fs::File, h1: u64, h2: u64) -> bool {
        self.test(file, h1, h2).unwrap_or(true)
    }

    /// Where the encoded filter lies in the file, and its length.
    #[cfg(test)]
    pub fn span(&self) -> (u64, usize) {
        (self.at, self.len)
    }

    /// Bytes it holds in memory: 0 until a lookup asked it.
    pub fn memory_bytes(&self) -> usize {
        self.bloom
            .get()
            .and_then(Option::as_ref)
            .map_or(0, Bloom::memory_bytes)
    }
}

impl Drop for LazyBloom {
    fn drop(&mut self) {
        if let (Some(budget), Some(Some(_))) = (self.budget.get(), self.bloom.get()) {
            budget.release(self.len as u64);
        }
    }
}

/// The memory the runs' super-feature filters may take together (issue 16: a bounded cache,
/// like the fingerprint cache, rather than RAM that grows with the repository). The full
/// sketch index asks every run for each of a new chunk's three keys, at about 9 bits a key
/// (3.4 bytes per full chunk); within the budget a run's filter is read at its first lookup
/// and held while the run lives (every lookup asks every run, so evicting one to read
/// another would read filters in turn forever); past it, that run's lookups read its bucket
/// (one random read a key, the answer unchanged). Filters are taken first come, first
/// held; a merged or pruned run's filter gives its room back when the run is let go of.
#[derive(Debug)]
pub struct FilterBudget {
    limit: std::sync::atomic::AtomicU64,
    held: std::sync::atomic::AtomicU64,
}

impl FilterBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Self {
        FilterBudget {
            limit: std::sync::atomic::AtomicU64::new(limit),
            held: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Sets the limit (filters held already stay).
    pub fn set_limit(&self, limit: u64) {
        self.limit
            .store(limit, std::sync::atomic::Ordering::Relaxed);
    }

    /// The limit.
    pub fn limit(&self) -> u64 {
        self.limit.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Encoded bytes of the filters held.
    #[cfg(test)]
    pub fn held(&self) -> u64 {
        self.held.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Takes `bytes` if they fit under the limit.
    fn reserve(&self, bytes: u64) -> bool {
        use std::sync::atomic::Ordering;
        self.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                h.checked_add(bytes).filter(|&n| n <= self.limit())
            })
            .is_ok()
    }

    fn release(&self, bytes: u64) {
        self.held
            .fetch_sub(bytes, std::sync::atomic::Ordering::Relaxed);
    }
}

/// SplitMix64's finaliser: spreads a 64-bit value's bits (for keys that are not already
/// uniform hashes).
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_every_key_and_rejects_most_others() {
        let mut b = Bloom::new(10_000, 8, 5);
        for i in 0..10_000u64 {
            b.insert(mix64(i), mix64(i ^ 0xabc));
        }
        for i in 0..10_000u64 {
            assert!(b.contains(mix64(i), mix64(i ^ 0xabc)));
        }
        let false_hits = (10_000..110_000u64)
            .filter(|&i| b.contains(mix64(i), mix64(i ^ 0xabc)))
            .count();
        // 8 bits per key, 5 probes in a 512-bit block: about 2.5 %.
        assert!(false_hits < 4_000, "{false_hits} of 100000");
        let mut bytes = vec![7];
        b.encode(&mut bytes);
        assert_eq!(bytes.len(), 1 + b.encoded_len());
        assert_eq!(Bloom::decode(&bytes[1..]), Some((b, bytes.len() - 1)));
    }

    /// A budgeted filter is read only while the budget has room; until then it answers
    /// "not held" (the caller reads the bucket), and dropping it gives its room back.
    #[test]
    fn a_budget_holds_filters_while_it_has_room() {
        use std::io::Write;
        let mut b = Bloom::new(1_000, 9, 6);
        for i in 0..1_000u64 {
            b.insert(mix64(i), mix64(i ^ 1));
        }
        let mut bytes = Vec::new();
        b.encode(&mut bytes);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&bytes)
            .unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let len = bytes.len() as u64;
        let budget = std::sync::Arc::new(FilterBudget::new(len + len / 2));
        let first = LazyBloom::unloaded(0, &bytes);
        first.hold_within(&budget);
        let second = LazyBloom::unloaded(0, &bytes);
        second.hold_within(&budget);
        assert_eq!(first.test(&file, mix64(5), mix64(5 ^ 1)), Some(true));
        assert_eq!(budget.held(), len);
        // No room for the second: "not held", and a "maybe" for `contains`.
        assert_eq!(second.test(&file, mix64(5), mix64(5 ^ 1)), None);
        assert!(second.contains(&file, mix64(5_000), mix64(5_000 ^ 1)));
        assert_eq!(second.memory_bytes(), 0);
        drop(first);
        assert_eq!(budget.held(), 0);
        // Room again: the second is read now, and never gives a false negative.
        for i in 0..1_000u64 {
            assert_eq!(second.test(&file, mix64(i), mix64(i ^ 1)), Some(true));
        }
        assert_eq!(budget.held(), len);
        assert_eq!(second.memory_bytes(), b.memory_bytes());
        // A lower limit keeps what is held and refuses what is not.
        budget.set_limit(0);
        let third = LazyBloom::unloaded(0, &bytes);
        third.hold_within(&budget);
        assert_eq!(third.test(&file, mix64(1), mix64(1 ^ 1)), None);
        assert_eq!(second.test(&file, mix64(1), mix64(1 ^ 1)), Some(true));
    }

    #[test]
    fn malformed_filters_are_refused() {
        assert_eq!(Bloom::decode(&[]), None);
        assert_eq!(Bloom::decode(&[0, 1, 0, 0, 0, 0, 0, 0, 0]), None);
        let mut b = Vec::new();
        Bloom::new(1, 8, 5).encode(&mut b);
        assert!(Bloom::decode(&b[..b.len() - 1]).is_none());
        b[1] = 0xff; // a word count far past the end
        assert!(Bloom::decode(&b).is_none());
    }
}

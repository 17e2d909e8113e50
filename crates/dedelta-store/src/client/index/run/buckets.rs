//! A run area's bucket directory: where each bucket of entries starts, and its CRC-32C.

use super::MAX_BUCKET_BITS;

/// The bucket directory of one area: where each bucket starts and its CRC.
#[derive(Debug)]
pub(super) struct Buckets {
    pub(super) bits: u8,
    /// First entry of each bucket, and the entry count at the end.
    pub(super) starts: Vec<u32>,
    pub(super) crcs: Vec<u32>,
}

impl Buckets {
    pub(super) fn new(bits: u8) -> Self {
        let n = 1usize << bits;
        Buckets {
            bits,
            starts: vec![0; n + 1],
            crcs: vec![0; n],
        }
    }

    pub(super) fn range(&self, b: usize) -> (u64, u64) {
        (u64::from(self.starts[b]), u64::from(self.starts[b + 1]))
    }

    /// The bucket holding entry `i` (`i` below the entry count).
    pub(super) fn of_entry(&self, i: u64) -> usize {
        self.starts.partition_point(|&s| u64::from(s) <= i) - 1
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        for s in &self.starts {
            out.extend_from_slice(&s.to_le_bytes());
        }
        for c in &self.crcs {
            out.extend_from_slice(&c.to_le_bytes());
        }
    }

    pub(super) fn decode(bytes: &[u8], bits: u8, entries: u64) -> Option<(Self, usize)> {
        if bits > MAX_BUCKET_BITS {
            return None;
        }
        let n = 1usize << bits;
        let len = (2 * n + 1) * 4;
        let body = bytes.get(..len)?;
        let mut words = body
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
        let starts: Vec<u32> = words.by_ref().take(n + 1).collect();
        let crcs: Vec<u32> = words.collect();
        let sorted = starts.first() == Some(&0) && starts.windows(2).all(|w| w[0] <= w[1]);
        if !sorted || starts.last().map(|&s| u64::from(s)) != Some(entries) {
            return None;
        }
        Some((Buckets { bits, starts, crcs }, len))
    }
}

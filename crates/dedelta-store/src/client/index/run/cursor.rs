//! Reading one area of a run in order ([`Cursor`]), for merges and rebuilds.

use super::*;

/// One entry read by a [`Cursor`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A chunk: id, global entry number.
    Chunk([u8; 32], u64),
    /// A super-feature key and the chunk entry of the run it names.
    Sketch(u64, u64),
}

/// Reads one area of a run in order, a few hundred KiB at a time, verifying every bucket's
/// CRC and that entries increase.
pub struct Cursor<'r> {
    run: &'r Run,
    sketch: bool,
    next_bucket: usize,
    buf: Vec<u8>,
    at: usize,
    last: Option<Entry>,
    /// Entries read so far, and the bucket the next one is in (a key's top bits are its
    /// bucket's number).
    read: u64,
    bucket: usize,
}

impl<'r> Cursor<'r> {
    pub(super) fn new(run: &'r Run, sketch: bool) -> Self {
        Cursor {
            run,
            sketch,
            next_bucket: 0,
            buf: Vec::new(),
            at: 0,
            last: None,
            read: 0,
            bucket: 0,
        }
    }

    fn entry_len(&self) -> usize {
        if self.sketch {
            self.run.sketch_entry_len()
        } else {
            CHUNK_ENTRY
        }
    }

    /// The next entry, or `None` at the end.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Entry>> {
        let len = self.entry_len();
        if self.at >= self.buf.len() {
            let buckets = if self.sketch {
                &self.run.sketch_buckets
            } else {
                &self.run.chunk_buckets
            };
            let n = buckets.crcs.len();
            if self.next_bucket >= n {
                return Ok(None);
            }
            let first = self.next_bucket;
            let mut end = first + 1;
            let start = u64::from(buckets.starts[first]);
            while end < n
                && (u64::from(buckets.starts[end]) - start) * (len as u64) < READ_AHEAD as u64
            {
                end += 1;
            }
            let mut buf = std::mem::take(&mut self.buf);
            self.run.read_buckets(self.sketch, first, end, &mut buf)?;
            self.buf = buf;
            self.next_bucket = end;
            self.at = 0;
            if self.buf.is_empty() {
                return self.next();
            }
        }
        let e = &self.buf[self.at..self.at + len];
        self.at += len;
        let entry = if self.sketch {
            let buckets = &self.run.sketch_buckets;
            while u64::from(buckets.starts[self.bucket + 1]) <= self.read {
                self.bucket += 1;
            }
            let k = key_len(buckets.bits);
            let entry = decode_ref(&e[k..]);
            if entry >= self.run.chunks {
                return Err(damaged(
                    &self.run.path,
                    "a super-feature names no chunk entry",
                ));
            }
            Entry::Sketch(decode_key(e, self.bucket, buckets.bits), entry)
        } else {
            let mut id = [0u8; 32];
            id.copy_from_slice(&e[..32]);
            Entry::Chunk(id, decode_loc(&e[32..]))
        };
        let ordered = match (self.last, entry) {
            (None, _) => true,
            (Some(Entry::Chunk(a, _)), Entry::Chunk(b, _)) => a < b,
            (Some(Entry::Sketch(a, _)), Entry::Sketch(b, _)) => a < b,
            _ => false,
        };
        if !ordered {
            return Err(damaged(&self.run.path, "entries out of order"));
        }
        self.read += 1;
        self.last = Some(entry);
        Ok(Some(entry))
    }
}

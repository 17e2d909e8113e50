//! Writing run files ([`RunWriter`]): entries in sorted order, bucketed and CRC'd as they
//! come, the tail and trailer at the end.

use super::*;

/// Counts entries into buckets as they are written in order, and CRCs each bucket.
struct BucketWriter {
    buckets: Buckets,
    current: usize,
    crc: u32,
    count: u64,
}

impl BucketWriter {
    fn new(bits: u8) -> Self {
        BucketWriter {
            buckets: Buckets::new(bits),
            current: 0,
            crc: 0,
            count: 0,
        }
    }

    fn close_until(&mut self, bucket: usize) {
        while self.current < bucket {
            self.buckets.crcs[self.current] = self.crc;
            self.crc = 0;
            self.current += 1;
            self.buckets.starts[self.current] = self.count as u32;
        }
    }

    fn push(&mut self, bucket: usize, bytes: &[u8]) {
        self.close_until(bucket);
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.count += 1;
    }

    fn finish(mut self) -> Buckets {
        let n = self.buckets.crcs.len();
        self.close_until(n);
        self.buckets
    }
}

/// Writes a run file from entries given in sorted order. The file is complete (and durable)
/// only when [`RunWriter::finish`] returns; until a manifest names it, it is an orphan that
/// the next open deletes.
pub struct RunWriter {
    path: PathBuf,
    out: std::io::BufWriter<File>,
    chunks: BucketWriter,
    sketches: Option<BucketWriter>,
    chunk_bloom: Bloom,
    sketch_bloom: Bloom,
    sketch_bits: u8,
    ref_width: u8,
    last_id: Option<[u8; 32]>,
    last_key: Option<u64>,
    max_chunks: u64,
}

impl RunWriter {
    /// Starts a run file at `path` for at most `max_chunks` chunk entries and `max_sketches`
    /// super-feature keys (the buckets and filters are sized for them).
    pub fn create(path: &Path, max_chunks: u64, max_sketches: u64) -> Result<Self> {
        if max_chunks > u64::from(u32::MAX) || max_sketches > u64::from(u32::MAX) {
            return Err(Error::Index(format!(
                "an index run of {max_chunks} chunks and {max_sketches} super-features is \
                 larger than a run can be"
            )));
        }
        // Never over an existing file: another handle on this index may be reading it.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(io(path))?;
        let mut out = std::io::BufWriter::with_capacity(READ_AHEAD, file);
        out.write_all(&HEADER).map_err(io(path))?;
        Ok(RunWriter {
            path: path.to_path_buf(),
            out,
            chunks: BucketWriter::new(bucket_bits(max_chunks)),
            sketches: None,
            chunk_bloom: Bloom::new(max_chunks, CHUNK_BLOOM.0, CHUNK_BLOOM.1),
            sketch_bloom: Bloom::new(max_sketches, SKETCH_BLOOM.0, SKETCH_BLOOM.1),
            sketch_bits: sketch_bucket_bits(max_sketches),
            ref_width: ref_width(max_chunks),
            last_id: None,
            last_key: None,
            max_chunks,
        })
    }

    /// Chunk entries written so far.
    pub fn chunks(&self) -> u64 {
        self.chunks.count
    }

    /// Appends a chunk entry (ids strictly increasing, before any sketch); returns its number
    /// in the run.
    pub fn push_chunk(&mut self, id: &[u8; 32], loc: u64) -> Result<u32> {
        let ordered = self.last_id.is_none_or(|last| last < *id);
        if !ordered || self.sketches.is_some() || self.chunks.count >= self.max_chunks {
            return Err(Error::Index("index run written out of order".into()));
        }
        let mut e = [0u8; CHUNK_ENTRY];
        e[..32].copy_from_slice(id);
        e[32..].copy_from_slice(&loc.to_le_bytes()[..LOC_LEN]);
        self.out.write_all(&e).map_err(io(&self.path))?;
        self.chunks
            .push(chunk_bucket(id, self.chunks.buckets.bits), &e);
        let (h1, h2) = chunk_hashes(id);
        self.chunk_bloom.insert(h1, h2);
        self.last_id = Some(*id);
        Ok((self.chunks.count - 1) as u32)
    }

    /// Appends a super-feature key (keys strictly increasing, after every chunk, at most
    /// [`MAX_KEY`]) naming the chunk entry `entry` of this run.
    pub fn push_sketch(&mut self, key: u64, entry: u32) -> Result<()> {
        let ordered = self.last_key.is_none_or(|last| last < key);
        if !ordered || u64::from(entry) >= self.chunks.count || key > MAX_KEY {
            return Err(Error::Index("index run written out of order".into()));
        }
        let bits = self.sketch_bits;
        let (k, w) = (key_len(bits), usize::from(self.ref_width));
        let mut e = [0u8; 9];
        e[..k].copy_from_slice(&key.to_le_bytes()[..k]);
        e[k..k + 4].copy_from_slice(&entry.to_le_bytes());
        self.out.write_all(&e[..k + w]).map_err(io(&self.path))?;
        let sketches = self.sketches.get_or_insert_with(|| BucketWriter::new(bits));
        sketches.push(key_bucket(key, bits), &e[..k + w]);
        let (h1, h2) = sketch_hashes(key);
        self.sketch_bloom.insert(h1, h2);
        self.last_key = Some(key);
        Ok(())
    }

    /// Writes the tail and trailer, makes the file durable and returns it as run `seq`.
    ///
    /// The tail is written piece by piece and the run keeps the writer's bucket directories
    /// (its filters are let go of, and read back when a lookup asks them): encoding the tail
    /// whole and reading it back (as [`Run::open`] does) held three copies of the filters at
    /// once, 35 MB at the end of a merge of 1.5 M chunks.
    pub fn finish(self, seq: u64) -> Result<Run> {
        let RunWriter {
            path,
            mut out,
            chunks,
            sketches,
            chunk_bloom,
            sketch_bloom,
            sketch_bits,
            ref_width,
            ..
        } = self;
        let chunk_count = chunks.count;
        let sketches = sketches.unwrap_or_else(|| BucketWriter::new(sketch_bits));
        let sketch_count = sketches.count;
        let (chunks, sketches) = (chunks.finish(), sketches.finish());
        let tail_offset = HEADER.len() as u64
            + chunk_count * CHUNK_ENTRY as u64
            + sketch_count * (key_len(sketches.bits) + usize::from(ref_width)) as u64;
        let mut tail_crc = 0u32;
        let mut tail_len = 0u64;
        // Appends a piece of the tail; returns it as a filter not held (see [`LazyBloom`]).
        let mut put = |piece: &[u8]| -> Result<LazyBloom> {
            let lazy = LazyBloom::unloaded(tail_offset + tail_len, piece);
            tail_crc = crc32c::crc32c_append(tail_crc, piece);
            tail_len += piece.len() as u64;
            out.write_all(piece).map_err(io(&path))?;
            Ok(lazy)
        };
        let mut piece = Vec::new();
        piece.extend_from_slice(&chunk_count.to_le_bytes());
        piece.extend_from_slice(&sketch_count.to_le_bytes());
        piece.extend_from_slice(&[chunks.bits, sketches.bits, ref_width]);
        chunks.encode(&mut piece);
        sketches.encode(&mut piece);
        put(&piece)?;
        piece.clear();
        chunk_bloom.encode(&mut piece);
        let chunk_bloom = put(&piece)?;
        piece.clear();
        sketch_bloom.encode(&mut piece);
        let sketch_bloom = put(&piece)?;
        drop(piece);
        let mut trailer = Vec::with_capacity(TRAILER_LEN);
        trailer.extend_from_slice(&tail_offset.to_le_bytes());
        trailer.extend_from_slice(&tail_len.to_le_bytes());
        trailer.extend_from_slice(&tail_crc.to_le_bytes());
        trailer.extend_from_slice(&END_MAGIC);
        out.write_all(&trailer).map_err(io(&path))?;
        let file = out.into_inner().map_err(|e| io(&path)(e.into_error()))?;
        file.sync_all().map_err(io(&path))?;
        drop(file);
        let file = File::open(&path).map_err(io(&path))?;
        Ok(Run {
            seq,
            path,
            file,
            chunks: chunk_count,
            sketches: sketch_count,
            file_len: tail_offset + tail_len + TRAILER_LEN as u64,
            tail_crc,
            ref_width,
            chunk_buckets: chunks,
            sketch_buckets: sketches,
            chunk_bloom,
            sketch_bloom,
            tail_offset,
            resident: OnceLock::new(),
            bucket_reads: std::sync::atomic::AtomicU32::new(0),
        })
    }
}

//! Runs on: the dedup thread.
//!
//! Encodes the snapshot's tree stream as the walk goes (see [`crate::format::tree`]) and stores
//! it through the chunk store like file data (cut with the same chunker, deduplicated, delta
//! encoded, compressed), a few chunks at a time, so no snapshot needs its whole tree in memory.
//!
//! Delta bases: a new version changes references here and there in nearly every tree chunk,
//! so tree chunks are rarely duplicates, but each is mostly a chunk of the parent snapshot's
//! tree. Which one is found by anchors: a record whose path, or a reference whose chunk, is in
//! the parent's tree lies at a known offset there; each new tree chunk's candidate bases are the
//! parent tree chunks its anchors fall in, most anchors first (a vote, so that a chunk
//! referenced twice, or records added before it, do not lead it astray). The sketch index
//! then adds its candidates as for file data. A file's record is written when the file ends: its size is then the bytes
//! actually read (a file that shrinks or grows while it is read must not be recorded with its
//! old size). The price is that one file's recipe is held until its end (36 bytes per chunk,
//! about 0.4% of the file's size), as restore holds it too.

use super::dedup::DedupStage;
use crate::client::tree_cache::TREE_CACHE_MAX_BYTES;
use crate::error::{Error, Result};
use crate::format::snapshot::TreeRef;
use crate::format::tree::{ChunkRef, Node, NodeKind, TreeEncoder};
use bytes::Bytes;
use dedelta_core::chunker::{cut_buffer, Chunker, Cuts};
use dedelta_core::ChunkId;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};

/// Most parent tree chunks offered as bases for one tree chunk.
const MAX_TREE_HINTS: usize = 3;

/// Where things lie in the parent snapshot's tree stream.
pub(super) struct ParentTree {
    /// The parent's tree chunks and the stream offset where each ends.
    chunks: Vec<(ChunkId, u64)>,
    /// Offset of each record, by a hash of its path.
    records: HashMap<u64, u64>,
    /// Offset of each reference (its first), by the first 8 bytes of its chunk id.
    refs: HashMap<u64, u64>,
    hasher: RandomState,
}

/// The first 8 bytes of a chunk id (ids are uniform hashes): a compact key for hints, where a
/// collision only costs a poorer hint.
fn id_key(id: &ChunkId) -> u64 {
    let mut k = [0u8; 8];
    k.copy_from_slice(&id.as_bytes()[..8]);
    u64::from_le_bytes(k)
}

/// Builds a [`ParentTree`] from the parent's nodes, in stored order: they are encoded again
/// to learn the offsets (the encoding is deterministic).
pub(super) struct ParentTreeBuilder {
    tree: ParentTree,
    encoder: TreeEncoder,
    scratch: Vec<u8>,
    offset: u64,
}

impl ParentTreeBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        let mut encoder = TreeEncoder::default();
        let mut scratch = Vec::new();
        encoder.begin(&mut scratch);
        ParentTreeBuilder {
            tree: ParentTree {
                chunks: Vec::new(),
                records: HashMap::new(),
                refs: HashMap::new(),
                hasher: RandomState::new(),
            },
            encoder,
            offset: scratch.len() as u64,
            scratch,
        }
    }

    /// The parent's next node.
    pub fn node(&mut self, node: &Node, chunks: &[ChunkRef]) {
        let key = self.tree.hasher.hash_one(&node.path);
        self.tree.records.entry(key).or_insert(self.offset);
        self.scratch.clear();
        if node.kind == NodeKind::File {
            self.encoder.file_start(node, &mut self.scratch);
            for c in chunks {
                let at = self.offset + self.scratch.len() as u64;
                self.tree.refs.entry(id_key(&c.id)).or_insert(at);
                self.encoder.chunk(c, &mut self.scratch);
            }
            self.encoder.file_end(&mut self.scratch);
        } else {
            self.encoder.node(node, &mut self.scratch);
        }
        self.offset += self.scratch.len() as u64;
    }

    /// The tree, given its chunks and their lengths; `None` if they do not hold the stream
    /// as encoded again (offsets would mislead).
    pub fn finish(mut self, ids: &[ChunkId], lens: &[u32]) -> Option<ParentTree> {
        let total: u64 = lens.iter().map(|l| u64::from(*l)).sum();
        if ids.len() != lens.len() || total != self.offset + 1 {
            return None;
        }
        let mut end = 0;
        for (id, len) in ids.iter().zip(lens) {
            end += u64::from(*len);
            self.tree.chunks.push((*id, end));
        }
        Some(self.tree)
    }
}

impl ParentTree {
    /// The index of the parent tree chunk holding stream offset `at`.
    fn chunk_at(&self, at: u64) -> Option<usize> {
        let i = self.chunks.partition_point(|(_, end)| *end <= at);
        (i < self.chunks.len()).then_some(i)
    }
}

/// The tree stream being written.
pub(super) struct TreeWriter<'c> {
    encoder: TreeEncoder,
    buf: Vec<u8>,
    chunks: Vec<ChunkId>,
    len: u64,
    chunker: &'c dyn Chunker,
    open_file: Option<(Node, Vec<ChunkRef>)>,
    parent: Option<ParentTree>,
    /// (offset in this stream, offset in the parent's) of the records and references of the
    /// buffer found in the parent's tree, in order.
    anchors: VecDeque<(u64, u64)>,
    /// How chunk ids are computed (keyed in an encrypted repository).
    hasher: dedelta_core::ChunkHasher,
    /// The stream's chunks, for the local tree cache (`None` once past
    /// [`TREE_CACHE_MAX_BYTES`], or when not asked for: [`Self::keeping_chunks`]).
    kept: Option<(Vec<Bytes>, usize)>,
}

/// A finished tree: the snapshot's reference to it and, when kept, its chunks.
pub(super) struct FinishedTree {
    pub tree: TreeRef,
    pub chunks: Option<Vec<Bytes>>,
}

impl<'c> TreeWriter<'c> {
    /// Computes the stream's chunk ids with `hasher` (the repository's).
    pub fn hashing_with(mut self, hasher: dedelta_core::ChunkHasher) -> Self {
        self.hasher = hasher;
        self
    }

    /// Keeps the stream's chunks for [`FinishedTree::chunks`] while they hold at most
    /// [`TREE_CACHE_MAX_BYTES`] (the next backup's parent tree, from the local tree cache).
    pub fn keeping_chunks(mut self) -> Self {
        self.kept = Some((Vec::new(), 0));
        self
    }

    /// A writer that cuts the stream with `chunker`, with delta base hints from the parent
    /// snapshot's tree when there is one.
    pub fn new(chunker: &'c dyn Chunker, parent: Option<ParentTree>) -> Self {
        let mut w = TreeWriter {
            encoder: TreeEncoder::default(),
            buf: Vec::new(),
            chunks: Vec::new(),
            len: 0,
            chunker,
            open_file: None,
            // The headers match.
            anchors: VecDeque::from([(0, 0)]),
            parent,
            hasher: dedelta_core::ChunkHasher::Plain,
            kept: None,
        };
        w.encoder.begin(&mut w.buf);
        w
    }

    /// The stream offset the next byte will have.
    fn offset(&self) -> u64 {
        self.len + self.buf.len() as u64
    }

    /// Records an anchor at the next byte if `parent_offset` is known.
    fn anchor(&mut self, parent_offset: Option<u64>) {
        if let Some(p) = parent_offset {
            let at = self.offset();
            self.anchors.push_back((at, p));
        }
    }

    /// A directory or symlink.
    pub fn node(&mut self, node: &Node) {
        let p = self.parent_record(&node.path);
        self.anchor(p);
        self.encoder.node(node, &mut self.buf);
    }

    /// Where the record of `path` lies in the parent's tree.
    fn parent_record(&self, path: &[u8]) -> Option<u64> {
        let parent = self.parent.as_ref()?;
        parent.records.get(&parent.hasher.hash_one(path)).copied()
    }

    /// A file begins.
    pub fn file_start(&mut self, node: Node) {
        self.open_file = Some((node, Vec::new()));
    }

    /// The next chunk of the open file.
    pub fn file_chunk(&mut self, chunk: ChunkRef) -> Result<()> {
        match self.open_file.as_mut() {
            Some((_, recipe)) => {
                recipe.push(chunk);
                Ok(())
            }
            None => Err(Error::Pipeline("file data outside a file".into())),
        }
    }

    /// The open file ends: its record is encoded with the size its chunks hold.
    pub fn file_end(&mut self) -> Result<()> {
        let Some((mut node, recipe)) = self.open_file.take() else {
            return Err(Error::Pipeline("file end outside a file".into()));
        };
        node.size = recipe.iter().map(|c| u64::from(c.len)).sum();
        let p = self.parent_record(&node.path);
        self.anchor(p);
        self.encoder.file_start(&node, &mut self.buf);
        for c in &recipe {
            let p = self
                .parent
                .as_ref()
                .and_then(|t| t.refs.get(&id_key(&c.id)).copied());
            self.anchor(p);
            self.encoder.chunk(c, &mut self.buf);
        }
        self.encoder.file_end(&mut self.buf);
        Ok(())
    }

    /// Stores the complete chunks of the encoded stream once a few have gathered.
    pub fn maybe_drain(&mut self, dedup: &mut DedupStage<'_>) -> Result<()> {
        if self.buf.len() >= 4 * self.chunker.max_size() {
            self.drain(dedup, false)?;
        }
        Ok(())
    }

    /// Ends the stream, stores the rest, and returns the snapshot's reference to it.
    pub fn finish(mut self, dedup: &mut DedupStage<'_>) -> Result<FinishedTree> {
        self.encoder.end(&mut self.buf);
        self.drain(dedup, true)?;
        Ok(FinishedTree {
            tree: TreeRef {
                chunks: self.chunks,
                len: self.len,
            },
            chunks: self.kept.map(|(chunks, _)| chunks),
        })
    }

    /// Stores the chunks that can be cut now; with `all`, the rest too.
    fn drain(&mut self, dedup: &mut DedupStage<'_>, all: bool) -> Result<()> {
        let Cuts {
            ranges,
            consumed_bytes,
        } = self.cut(all);
        for r in ranges {
            let chunk = Bytes::copy_from_slice(&self.buf[r]);
            let id = self.hasher.id(&chunk);
            let hints = self.hints(self.len, chunk.len() as u64);
            self.len += chunk.len() as u64;
            if let Some((kept, bytes)) = self.kept.as_mut() {
                *bytes += chunk.len();
                if *bytes <= TREE_CACHE_MAX_BYTES {
                    kept.push(chunk.clone());
                } else {
                    self.kept = None;
                }
            }
            dedup.add_tree(id, chunk, hints)?;
            self.chunks.push(id);
        }
        self.buf.drain(..consumed_bytes);
        dedup.end_block(!all)
    }

    /// Cuts the buffer as [`cut_buffer`] does, except that where the parent's tree has a
    /// chunk boundary, found through the anchors, the stream is cut at the same place
    /// (within the chunker's size bounds): a new tree chunk then covers what one parent tree
    /// chunk covered, and its delta against that chunk holds only the changed references.
    /// Content-defined cuts alone move whenever a changed reference lies just before one,
    /// and the part of a chunk beyond its base's end is stored literally (measured: deltas of
    /// 33% of a tree chunk's size where 17% of its references changed).
    fn cut(&self, all: bool) -> Cuts {
        let aligned = self.aligned_cuts();
        if aligned.is_empty() {
            return cut_buffer(self.chunker, &self.buf, all);
        }
        let params = self.chunker.params();
        let (min, max) = (params.min_size.max(1), self.chunker.max_size());
        let mut ranges = Vec::new();
        let mut pos = 0;
        let mut next = 0;
        let n = self.buf.len();
        while pos < n && (all || n - pos >= max) {
            let start = self.len + pos as u64;
            while next < aligned.len() && aligned[next] < start + min as u64 {
                next += 1;
            }
            let len = match aligned.get(next) {
                Some(&c) if c <= start + max as u64 && c <= self.len + n as u64 => {
                    (c - start) as usize
                }
                _ => {
                    let end = (pos + max).min(n);
                    self.chunker
                        .next_chunk_len(&self.buf[pos..end])
                        .clamp(1, end - pos)
                }
            };
            ranges.push(pos..pos + len);
            pos += len;
        }
        Cuts {
            ranges,
            consumed_bytes: pos,
        }
    }

    /// Offsets of this stream (after the buffer's start, ascending) that correspond to the
    /// parent tree's chunk boundaries: between two consecutive anchors, a boundary `e` of the
    /// parent lies `e - p` bytes after the first anchor `(at, p)`, as long as that is before
    /// the second anchor (else the bytes there were removed: the cut goes at the second).
    fn aligned_cuts(&self) -> Vec<u64> {
        let Some(parent) = self.parent.as_ref() else {
            return Vec::new();
        };
        let (buf_start, buf_end) = (self.len, self.offset());
        let mut cuts: Vec<u64> = Vec::new();
        let mut push = |x: u64| {
            if x > buf_start && x < buf_end && cuts.last().is_none_or(|l| *l < x) {
                cuts.push(x);
            }
        };
        let n = self.anchors.len();
        for k in 0..n {
            let (at, p) = self.anchors[k];
            let (next_at, next_p) = match self.anchors.get(k + 1) {
                Some(&a) => (a.0, Some(a.1)),
                None => (buf_end, None),
            };
            if next_p.is_some_and(|q| q <= p) {
                continue; // the parent's order jumps back here: no alignment
            }
            let first = parent.chunks.partition_point(|(_, end)| *end <= p);
            for &(_, e) in &parent.chunks[first..] {
                if next_p.is_some_and(|q| e > q) {
                    break;
                }
                let x = at + (e - p);
                if x >= next_at {
                    if next_p.is_some() {
                        push(next_at);
                    }
                    break;
                }
                push(x);
            }
        }
        cuts
    }

    /// The parent tree chunks to try as bases for the chunk at `[start, start + len)` of this
    /// stream: those its anchors fall in, by votes; without an anchor inside, the one the
    /// last anchor before it points to. Anchors before the chunk's end are used up.
    fn hints(&mut self, start: u64, len: u64) -> Vec<ChunkId> {
        let Some(parent) = self.parent.as_ref() else {
            return Vec::new();
        };
        let end = start + len;
        // Keep the last anchor at or before `start` (the fallback), drop older ones.
        while self.anchors.len() >= 2 && self.anchors[1].0 <= start {
            self.anchors.pop_front();
        }
        let mut landed: Vec<usize> = self
            .anchors
            .iter()
            .filter(|(at, _)| (start..end).contains(at))
            .filter_map(|&(_, p)| parent.chunk_at(p))
            .collect();
        if landed.is_empty() {
            if let Some(&(at, p)) = self.anchors.front() {
                landed.extend(parent.chunk_at(p + start.saturating_sub(at)));
            }
        }
        let mut votes: Vec<(usize, u32)> = Vec::new();
        for i in landed {
            match votes.iter_mut().find(|(c, _)| *c == i) {
                Some((_, n)) => *n += 1,
                None => votes.push((i, 1)),
            }
        }
        // Anchors inside this chunk are used; the last one stays as the next fallback.
        while self.anchors.len() >= 2 && self.anchors[1].0 < end {
            self.anchors.pop_front();
        }
        votes.sort_by_key(|v| std::cmp::Reverse(v.1));
        votes
            .iter()
            .take(MAX_TREE_HINTS)
            .map(|(i, _)| parent.chunks[*i].0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dedelta_core::chunker::{new_chunker, ChunkerKind, ChunkerParams};

    fn chunker() -> Box<dyn Chunker> {
        let params = ChunkerParams {
            min_size: 512,
            avg_size: 2048,
            max_size: 8192,
        };
        new_chunker(ChunkerKind::FastCdc, params).unwrap()
    }

    /// A file record named `name` with `n` references numbered from `seed`.
    fn file(name: &str, n: u64, seed: u64) -> (Node, Vec<ChunkRef>) {
        let node = Node {
            path: name.as_bytes().to_vec(),
            kind: NodeKind::File,
            mode: 0o100644,
            mtime_secs: 0,
            mtime_nanos: 0,
            size: 0,
            target: Vec::new(),
            meta: Default::default(),
        };
        let refs = (0..n)
            .map(|i| ChunkRef {
                id: ChunkId::of(&(seed + i).to_le_bytes()),
                len: 4096 + (i as u32 % 3),
            })
            .collect();
        (node, refs)
    }

    /// Encodes `files` with `parent` as hints; returns the writer with its stream buffered.
    fn write<'c>(
        chunker: &'c dyn Chunker,
        files: &[(Node, Vec<ChunkRef>)],
        parent: Option<ParentTree>,
    ) -> TreeWriter<'c> {
        let mut w = TreeWriter::new(chunker, parent);
        for (node, refs) in files {
            w.file_start(node.clone());
            for r in refs {
                w.file_chunk(*r).unwrap();
            }
            w.file_end().unwrap();
        }
        w.encoder.end(&mut w.buf);
        w
    }

    /// The parent's tree as backup learns it: its nodes, and its chunks as cut.
    fn parent_of(files: &[(Node, Vec<ChunkRef>)], chunker: &dyn Chunker) -> (ParentTree, Vec<u64>) {
        let w = write(chunker, files, None);
        let cuts = cut_buffer(chunker, &w.buf, true);
        let mut b = ParentTreeBuilder::new();
        for (node, refs) in files {
            let mut node = node.clone();
            node.size = refs.iter().map(|c| u64::from(c.len)).sum();
            b.node(&node, refs);
        }
        let ids: Vec<ChunkId> = cuts
            .ranges
            .iter()
            .map(|r| ChunkId::of(&w.buf[r.clone()]))
            .collect();
        let lens: Vec<u32> = cuts.ranges.iter().map(|r| r.len() as u32).collect();
        let ends = cuts.ranges.iter().map(|r| r.end as u64).collect();
        (b.finish(&ids, &lens).expect("offsets match"), ends)
    }

    fn ends(w: &TreeWriter<'_>) -> Vec<u64> {
        w.cut(true).ranges.iter().map(|r| r.end as u64).collect()
    }

    /// Replaced references leave the cuts where the parent's were; a record inserted in front
    /// moves them all by its length; each chunk's first hint is the parent chunk it matches.
    #[test]
    fn cuts_follow_the_parents_and_hints_name_its_chunks() {
        let chunker = chunker();
        let old = vec![file("a", 600, 0), file("b", 400, 10_000)];
        let (parent, parent_ends) = parent_of(&old, chunker.as_ref());
        assert!(parent_ends.len() > 8, "{parent_ends:?}");
        let mut new = old.clone();
        for i in (0..600).step_by(6) {
            new[0].1[i].id = ChunkId::of(format!("changed {i}").as_bytes());
        }
        let mut w = write(chunker.as_ref(), &new, Some(parent));
        // The content-defined cuts of the changed stream differ; these follow the parent.
        assert_ne!(
            cut_buffer(chunker.as_ref(), &w.buf, true)
                .ranges
                .iter()
                .map(|r| r.end as u64)
                .collect::<Vec<_>>(),
            parent_ends
        );
        assert_eq!(ends(&w), parent_ends);
        let parent_ids: Vec<ChunkId> = w
            .parent
            .as_ref()
            .unwrap()
            .chunks
            .iter()
            .map(|c| c.0)
            .collect();
        let mut start = 0;
        for (i, end) in parent_ends.iter().enumerate() {
            let hints = w.hints(start, end - start);
            assert_eq!(hints.first(), Some(&parent_ids[i]), "chunk {i}");
            start = *end;
        }

        let (parent, parent_ends) = parent_of(&old, chunker.as_ref());
        let mut inserted = vec![file("0", 50, 90_000)];
        inserted.extend(new);
        let w = write(chunker.as_ref(), &inserted, Some(parent));
        let front = write(chunker.as_ref(), &inserted[..1], None).buf.len() as u64 - 1 - 5;
        let shifted: Vec<u64> = parent_ends.iter().map(|e| e + front).collect();
        let got = ends(&w);
        let kept = shifted.iter().filter(|e| got.contains(e)).count();
        assert!(kept + 1 >= shifted.len(), "{got:?} against {shifted:?}");
    }
}

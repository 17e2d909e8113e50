//! Restore's two writing threads: the decoding thread (the caller's) takes the reader's events
//! in batches, decodes and verifies their chunks, and hands each batch with its bytes to the
//! target's thread, which writes each file under a temporary name until it is complete and
//! makes the directories, links and special files.
//!
//! Why two: writing a tree to the target costs the kernel about as much as decoding it
//! (creating, filling, renaming and closing each file; tmpfs allocating its pages). On one
//! thread, restoring the 20 unpacked SQLAlchemy versions (1.2 GB, 23,269 files) held 78 % of
//! the restore's CPU time there, and bounded it. The bytes are copied once, into the batch's
//! buffer, as the files' write buffers copied them before; deltas are rebuilt straight into
//! it ([`PipelinedDecoder::decode_batch_into`]).

use super::*;
use crate::buffers::BufferPool;

/// Batches on their way to the target's thread at most: the decoding thread runs this far
/// ahead.
const BATCHES_AHEAD: usize = 4;

/// A batch's buffer holds at least this much (a batch holds about 512 KiB of chunks, see
/// [`receive_batch`]), so that the pool's buffers fit every batch.
const BATCH_BUFFER_BYTES: usize = 1 << 20;

/// What the target's thread does, in tree order.
enum Op {
    /// An event other than a chunk's data (boxed: most operations are data).
    Event(Box<Event>),
    /// The next chunk of the current file: these bytes of the batch's buffer.
    Data(std::ops::Range<usize>),
    /// The next chunk of the current file could not be decoded or verified.
    Failed(Error),
}

/// A batch of operations and the bytes their chunks' data lie in.
struct OpBatch {
    ops: Vec<Op>,
    bytes: Vec<u8>,
}

/// The file being written, if any.
enum Current {
    /// Between files.
    Idle,
    /// Writing this file under a temporary name.
    Writing(Box<PendingFile>, Box<Node>, u64),
    /// The current file failed on this side and is already reported; its events are dropped.
    Skipping,
}

/// The decoding thread (the caller's): decodes and verifies, and hands the results to the
/// target's thread, a scoped thread of `scope`, whose record of what was restored and what
/// failed it returns.
///
/// Events come in batches ([`receive_batch`]): the batch's chunks are decoded and verified
/// together ([`PipelinedDecoder::decode_batch`], hashing shared with a helper thread), then
/// its events go over in order.
pub(super) fn write_events<'scope, 'env>(
    rx: &crossbeam_channel::Receiver<Event>,
    target: Target,
    hasher: dedelta_core::ChunkHasher,
    progress: &'scope dyn Progress,
    scope: &'scope std::thread::Scope<'scope, 'env>,
) -> RestoreStats {
    let (to_target, ops) = crossbeam_channel::bounded::<OpBatch>(BATCHES_AHEAD);
    let buffers = BufferPool::default();
    let theirs = buffers.clone();
    let writing = std::thread::Builder::new()
        .name("dedelta-restore-target".into())
        .spawn_scoped(scope, move || write_ops(ops, target, progress, theirs));
    let writing = match writing {
        Ok(w) => w,
        Err(e) => {
            // Nothing can be written: every file of the snapshot is an error of the restore.
            let mut stats = RestoreStats::default();
            fail(
                &mut stats,
                b"",
                format!("starting the restore's writing thread: {e}"),
            );
            return stats;
        }
    };
    let mut decoder = PipelinedDecoder::new(hasher);
    let (mut batch, mut events, mut chunks) = (Vec::new(), Vec::new(), Vec::new());
    let data_bytes = |ev: &Event| match ev {
        Event::Data(f) => f.len(),
        _ => 0,
    };
    while receive_batch(rx, &mut batch, data_bytes) {
        // Chunks apart from the other events, so that those can be handed over (moved) while
        // the decoded chunks borrow theirs.
        let mut total = 0;
        for ev in batch.drain(..) {
            match ev {
                Event::Data(f) => {
                    total += f.len();
                    chunks.push(f);
                    events.push(None);
                }
                ev => events.push(Some(ev)),
            }
        }
        let refs: Vec<&FetchedChunk> = chunks.iter().collect();
        let mut out = OpBatch {
            ops: Vec::with_capacity(events.len()),
            bytes: buffers.take(total.max(BATCH_BUFFER_BYTES)),
        };
        let mut decoded = decoder.decode_batch_into(&refs, &mut out.bytes).into_iter();
        for ev in events.drain(..) {
            match ev {
                Some(ev) => out.ops.push(Op::Event(Box::new(ev))),
                None => match decoded.next() {
                    Some(Ok(range)) => out.ops.push(Op::Data(range)),
                    Some(Err(e)) => out.ops.push(Op::Failed(e)),
                    None => {}
                },
            }
        }
        drop(refs);
        chunks.clear();
        if to_target.send(out).is_err() {
            // The target's thread is gone (it panicked): its join says so.
            break;
        }
    }
    drop(to_target);
    let mut stats = writing
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    stats.reads = decoder.stats();
    stats
}

/// The target's thread: makes the nodes and writes the files the batches describe, recording
/// what fails, then sets the directories' metadata.
fn write_ops(
    ops: crossbeam_channel::Receiver<OpBatch>,
    target: Target,
    progress: &dyn Progress,
    buffers: BufferPool,
) -> RestoreStats {
    let mut w = Writer {
        stats: RestoreStats::default(),
        target,
        dirs: Vec::new(),
        current: Current::Idle,
        progress,
    };
    for batch in ops.iter() {
        let OpBatch { ops, bytes } = batch;
        // Neighbouring chunks of a file lie side by side in `bytes`: written in one piece.
        let mut data: Option<std::ops::Range<usize>> = None;
        for op in ops {
            if let (Op::Data(next), Some(d)) = (&op, data.as_mut()) {
                if d.end == next.start {
                    d.end = next.end;
                    continue;
                }
            }
            if let Some(d) = data.take() {
                w.data(Ok(&bytes[d]));
            }
            match op {
                Op::Data(range) => data = Some(range),
                Op::Event(ev) => w.event(*ev),
                Op::Failed(e) => w.data(Err(e)),
            }
        }
        if let Some(d) = data {
            w.data(Ok(&bytes[d]));
        }
        buffers.give(bytes);
    }
    let Writer {
        mut stats,
        mut target,
        dirs,
        mut current,
        ..
    } = w;
    // The reader stopped mid-file (an unreadable tree, reported by the caller).
    abandon(&mut target, &mut current, false);
    for node in dirs.iter().rev() {
        if let Err(e) = target.set_dir_meta(node) {
            fail(&mut stats, &node.path, e.to_string());
        }
    }
    stats.warnings = target.meta.warnings();
    stats
}

/// The writing side's state.
struct Writer<'p> {
    stats: RestoreStats,
    target: Target,
    /// Directories made, whose modes and times are set last.
    dirs: Vec<Node>,
    current: Current,
    progress: &'p dyn Progress,
}

impl Writer<'_> {
    /// Handles an event other than a chunk's data.
    fn event(&mut self, ev: Event) {
        let (stats, target) = (&mut self.stats, &mut self.target);
        match ev {
            Event::Node(node) => {
                let done = match node.kind {
                    NodeKind::Dir => target.make_dir(&node.path).map(|()| stats.dirs += 1),
                    NodeKind::Symlink => target.make_symlink(&node).map(|()| stats.symlinks += 1),
                    _ => target
                        .make_special(&node)
                        .map(|()| stats.special_files += 1),
                };
                match done {
                    Ok(()) if node.kind == NodeKind::Dir => self.dirs.push(node),
                    Ok(()) => {}
                    Err(e) => fail(stats, &node.path, e.to_string()),
                }
            }
            Event::HardLink(node, first) => match target.hard_link(&node, &first) {
                Ok(()) => stats.hard_links += 1,
                Err(e) => fail(stats, &node.path, e.to_string()),
            },
            Event::FileStart(node) => {
                self.current = match target.create_file(&node) {
                    Ok(f) => Current::Writing(Box::new(f), Box::new(node), 0),
                    Err(e) => {
                        fail(stats, &node.path, e.to_string());
                        Current::Skipping
                    }
                }
            }
            // Handled by `data`, decoded.
            Event::Data(_) => {}
            Event::FileEnd => {
                if let Current::Writing(f, node, written) =
                    std::mem::replace(&mut self.current, Current::Idle)
                {
                    match target.commit_file(*f, &node) {
                        Ok(()) => {
                            stats.files += 1;
                            stats.bytes_written += written;
                            let path = format!("/{}", node.path_lossy());
                            self.progress.item("restored", &path, written);
                        }
                        Err(e) => fail(stats, &node.path, e.to_string()),
                    }
                }
            }
            Event::FileFailed(e) => {
                if let Current::Writing(_, node, _) = &self.current {
                    fail(stats, &node.path, e.to_string());
                }
                abandon(target, &mut self.current, false);
            }
            Event::Refused(node, e) => fail(stats, &node.path, e.to_string()),
            Event::Unchanged(node) => {
                stats.files_unchanged += 1;
                self.progress.inc(node.size);
                let path = format!("/{}", node.path_lossy());
                self.progress.item("unchanged", &path, node.size);
            }
        }
    }

    /// The next chunk of the current file, decoded and verified (or why not).
    fn data(&mut self, data: Result<&[u8]>) {
        let Current::Writing(f, node, written) = &mut self.current else {
            return;
        };
        let done = match data {
            Ok(data) => f
                .write(data)
                .map(|()| data.len())
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match done {
            Ok(n) => {
                *written += n as u64;
                self.progress.inc(n as u64);
            }
            Err(e) => {
                fail(&mut self.stats, &node.path, e);
                abandon(&mut self.target, &mut self.current, true);
            }
        }
    }
}

/// Records that the node at `path` could not be restored.
fn fail(stats: &mut RestoreStats, path: &[u8], message: String) {
    stats.errors.push(NodeError {
        path: path.to_vec(),
        message,
    });
}

/// Removes the current file's temporary file; with `skip`, drops the rest of its events.
fn abandon(target: &mut Target, current: &mut Current, skip: bool) {
    let next = if skip {
        Current::Skipping
    } else {
        Current::Idle
    };
    if let Current::Writing(f, _, _) = std::mem::replace(current, next) {
        target.discard_file(*f);
    }
}

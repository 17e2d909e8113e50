//! Restore's writing threads: the decoding thread (the caller's) takes the reader's events
//! in batches, decodes and verifies their chunks, makes the directories, and hands each file
//! with its bytes to one of the target's threads, which writes it unnamed until it is
//! complete and makes the links and special files.
//!
//! Why apart: writing a tree to the target costs the kernel about as much as decoding it
//! (creating, filling, linking and closing each file; tmpfs allocating its pages). On one
//! thread, restoring the 20 unpacked SQLAlchemy versions (1.2 GB, 23,269 files) held 78 % of
//! the restore's CPU time there, and bounded it.
//!
//! Why [`WRITERS`] target threads: with one, that thread was busy 85-90 % of the same
//! restore, and the decoding and reading threads filled the two cores only in part (81 % of
//! both busy): the writes bounded the restore. Files are independent once their directory
//! exists, so each file goes whole to the target thread with the fewest bytes queued, in
//! order; directories are made here, in tree order, before any later node is handed over
//! (a file's directory exists before its writer gets it); a hard link goes to the thread
//! that wrote the file it links to, after it; directories' modes and times are set once
//! every thread is done. Errors keep tree order (each is recorded with its event's place).
//!
//! The bytes are copied once, into the batch's buffer, as the files' write buffers copied
//! them before; deltas are rebuilt straight into it
//! ([`PipelinedDecoder::decode_batch_into`]). A batch's buffer is shared by the threads its
//! files went to, and back in the pool once the last is done with it.

use super::*;
use crate::buffers::BufferPool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Target threads at most (fewer on one core).
const WRITERS: usize = 2;

/// Batches on their way to each target thread at most: the decoding thread runs this far
/// ahead. Deeper than one thread needed (4): a large file keeps its writer's queue full while
/// the other drains its own.
const BATCHES_AHEAD: usize = 8;

/// A batch's buffer holds at least this much (a batch holds about 512 KiB of chunks, see
/// [`receive_batch`]), so that the pool's buffers fit every batch.
const BATCH_BUFFER_BYTES: usize = 1 << 20;

/// What a target thread does, in tree order.
enum Op {
    /// An event other than a chunk's data (boxed: most operations are data), and its place
    /// in tree order.
    Event(u64, Box<Event>),
    /// The next chunk of the current file: these bytes of the batch's buffer.
    Data(std::ops::Range<usize>),
    /// The next chunk of the current file could not be decoded or verified.
    Failed(Error),
}

/// A batch of operations and the bytes their chunks' data lie in.
struct OpBatch {
    ops: Vec<Op>,
    bytes: Arc<Vec<u8>>,
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

/// A target thread, seen from the decoding thread.
struct WriterThread<'scope, 'p> {
    ops: crossbeam_channel::Sender<OpBatch>,
    /// Bytes handed over and not yet written.
    queued: Arc<AtomicU64>,
    /// The place in tree order of the last event it handled.
    done: Arc<AtomicU64>,
    thread: std::thread::ScopedJoinHandle<'scope, Writer<'p>>,
}

/// Which target thread gets what.
#[derive(Default)]
struct Routes {
    /// The current file's.
    file: usize,
    /// The current file's path.
    file_path: Vec<u8>,
    /// Nodes handed to a target thread and maybe not made yet, by path: the thread, and the
    /// node's place in tree order. A node at such a path or below it goes to the same thread,
    /// after it, and a hard link to such a file waits for it, so that the target sees every
    /// node in tree order, as one thread would make them (a crafted snapshot can hold a file
    /// and then a directory or file below or at its path). Pruned of what is done.
    in_flight: HashMap<Vec<u8>, (usize, u64)>,
    /// Events so far (each one's place in tree order).
    events: u64,
}

impl Routes {
    /// The thread of the node in flight at `path` or above it, if any.
    fn above_or_at(&self, path: &[u8]) -> Option<usize> {
        if self.in_flight.is_empty() {
            return None;
        }
        let prefixes = path
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'/')
            .map(|(i, _)| &path[..i]);
        prefixes
            .chain(std::iter::once(path))
            .find_map(|p| self.in_flight.get(p).map(|(w, _)| *w))
    }

    /// Forgets the nodes their threads have made (those up to each one's `done`), once
    /// there are many.
    fn prune(&mut self, writers: &[WriterThread<'_, '_>]) {
        if self.in_flight.len() >= PRUNE_IN_FLIGHT {
            self.in_flight
                .retain(|_, (w, at)| *at > writers[*w].done.load(Ordering::Acquire));
        }
    }
}

/// Nodes in flight from which [`Routes::prune`] looks for those done.
const PRUNE_IN_FLIGHT: usize = 4096;

/// The decoding thread (the caller's): decodes and verifies, makes the directories, and hands
/// the files to the target threads, scoped threads of `scope`; returns the record of what
/// was restored and what failed.
///
/// Events come in batches ([`receive_batch`]): the batch's chunks are decoded and verified
/// together ([`PipelinedDecoder::decode_batch_into`], hashing shared with a helper thread),
/// then its events go over in order.
pub(super) fn write_events<'scope, 'env>(
    rx: &crossbeam_channel::Receiver<Event>,
    target: Target,
    mut decoder: PipelinedDecoder,
    progress: &'scope dyn Progress,
    scope: &'scope std::thread::Scope<'scope, 'env>,
) -> RestoreStats {
    let buffers = BufferPool::default();
    // This thread's own: directories, and the events that write nothing.
    let mut here = Writer::new(target, progress);
    let count = std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, WRITERS));
    let mut writers = Vec::with_capacity(count);
    for w in 0..count {
        match spawn_writer(&here.target, w, progress, &buffers, scope) {
            Ok(t) => writers.push(t),
            // Fewer threads write it all.
            Err(_) if !writers.is_empty() => break,
            Err(e) => {
                // Nothing can be written: every file of the snapshot is an error of the
                // restore.
                fail(
                    &mut here.stats,
                    b"",
                    format!("starting the restore's writing thread: {e}"),
                );
                return here.stats;
            }
        }
    }
    let mut routes = Routes::default();
    let (mut batch, mut events, mut chunks) = (Vec::new(), Vec::new(), Vec::new());
    let data_bytes = |ev: &Event| match ev {
        Event::Data(f) => f.len(),
        _ => 0,
    };
    'batches: while receive_batch(rx, &mut batch, data_bytes) {
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
        let mut bytes = buffers.take(total.max(BATCH_BUFFER_BYTES));
        let mut decoded = decoder.decode_batch_into(&refs, &mut bytes).into_iter();
        drop(refs);
        let bytes = Arc::new(bytes);
        let mut ops: Vec<Vec<Op>> = writers.iter().map(|_| Vec::new()).collect();
        let mut adding = vec![0u64; writers.len()];
        for ev in events.drain(..) {
            let Some(ev) = ev else {
                let op = match decoded.next() {
                    Some(Ok(range)) => {
                        adding[routes.file] += range.len() as u64;
                        Op::Data(range)
                    }
                    Some(Err(e)) => Op::Failed(e),
                    None => continue,
                };
                ops[routes.file].push(op);
                continue;
            };
            routes.events += 1;
            let at = routes.events;
            let least_busy = |adding: &[u64]| {
                (0..writers.len())
                    .min_by_key(|&w| writers[w].queued.load(Ordering::Relaxed) + adding[w])
                    .unwrap_or(0)
            };
            let to = match &ev {
                Event::FileEnd | Event::FileFailed(_) | Event::Data(_) => Some(routes.file),
                Event::Refused(..) | Event::Unchanged(_) => None,
                // Made here, in tree order, unless something at or above them is in flight.
                Event::Node(node) => routes.above_or_at(&node.path),
                Event::FileStart(node) => {
                    routes.file = routes
                        .above_or_at(&node.path)
                        .unwrap_or_else(|| least_busy(&adding));
                    Some(routes.file)
                }
                Event::HardLink(node, first) => {
                    let first = routes.in_flight.get(first).copied();
                    let w = routes.above_or_at(&node.path);
                    match (first, w) {
                        (Some((f, _)), None) => Some(f),
                        (Some((f, first_at)), Some(w)) if f != w => {
                            // Rare (a crafted snapshot): the file linked to is made first.
                            let batch = std::mem::take(&mut ops[f]);
                            let sent = hand_over(&writers[f], batch, &bytes, adding[f]);
                            adding[f] = 0;
                            if sent.is_err() {
                                break 'batches;
                            }
                            wait_done(&writers[f], first_at);
                            Some(w)
                        }
                        (_, w) => Some(w.unwrap_or_else(|| least_busy(&adding))),
                    }
                }
            };
            match to {
                Some(w) => {
                    // In flight until handled; a file, until its end is.
                    match &ev {
                        Event::Node(n) | Event::HardLink(n, _) => {
                            routes.in_flight.insert(n.path.clone(), (w, at));
                        }
                        Event::FileStart(n) => routes.file_path.clone_from(&n.path),
                        Event::FileEnd | Event::FileFailed(_) => {
                            let path = std::mem::take(&mut routes.file_path);
                            routes.in_flight.insert(path, (w, at));
                        }
                        _ => {}
                    }
                    ops[w].push(Op::Event(at, Box::new(ev)));
                }
                None => {
                    here.at = at;
                    here.event(ev);
                    here.note_errors();
                }
            }
        }
        chunks.clear();
        for ((w, ops), adding) in writers.iter().zip(ops).zip(adding) {
            if hand_over(w, ops, &bytes, adding).is_err() {
                // A target thread is gone (it panicked): its join says so.
                break 'batches;
            }
        }
        if let Some(b) = Arc::into_inner(bytes) {
            buffers.give(b);
        }
        routes.prune(&writers);
    }
    let (handles, senders): (Vec<_>, Vec<_>) =
        writers.into_iter().map(|w| (w.thread, w.ops)).unzip();
    drop(senders);
    let mut errors: Vec<(u64, NodeError)> = here.take_errors();
    for handle in handles {
        let mut w = handle
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        errors.extend(w.take_errors());
        here.stats.add_counts(&w.stats);
        here.target.meta.merge(&w.target.meta);
        here.dirs.append(&mut w.dirs);
    }
    // Stable: events of one place keep their order.
    errors.sort_by_key(|(at, _)| *at);
    let Writer {
        mut stats,
        mut target,
        mut dirs,
        ..
    } = here;
    stats.errors = errors.into_iter().map(|(_, e)| e).collect();
    // Deepest first: tree order, reversed.
    dirs.sort_by_key(|(at, _)| *at);
    for (_, node) in dirs.iter().rev() {
        if let Err(e) = target.set_dir_meta(node) {
            fail(&mut stats, &node.path, e.to_string());
        }
    }
    stats.warnings = target.meta.warnings();
    stats.reads = decoder.stats();
    stats
}

/// Starts target thread `w` (from 0), writing through its own handles on `target`'s directory.
fn spawn_writer<'scope, 'env, 'p: 'scope>(
    target: &Target,
    w: usize,
    progress: &'p dyn Progress,
    buffers: &BufferPool,
    scope: &'scope std::thread::Scope<'scope, 'env>,
) -> std::io::Result<WriterThread<'scope, 'p>> {
    let (tx, rx) = crossbeam_channel::bounded::<OpBatch>(BATCHES_AHEAD);
    let (queued, done) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let writer = Writer::new(target.for_writer(w + 1)?, progress);
    let (theirs, their_queue, their_done) = (buffers.clone(), queued.clone(), done.clone());
    let thread = std::thread::Builder::new()
        .name("dedelta-restore-target".into())
        .spawn_scoped(scope, move || {
            write_ops(rx, writer, theirs, their_queue, their_done)
        })?;
    Ok(WriterThread {
        ops: tx,
        queued,
        done,
        thread,
    })
}

/// Sends target thread `w` the operations `ops` on `bytes`, `adding` bytes to write; an
/// error if it is gone.
fn hand_over(
    w: &WriterThread<'_, '_>,
    ops: Vec<Op>,
    bytes: &Arc<Vec<u8>>,
    adding: u64,
) -> std::result::Result<(), ()> {
    if ops.is_empty() {
        return Ok(());
    }
    w.queued.fetch_add(adding, Ordering::Relaxed);
    let bytes = bytes.clone();
    w.ops.send(OpBatch { ops, bytes }).map_err(|_| ())
}

/// Waits until target thread `w` has handled the event at place `at` (or is gone).
fn wait_done(w: &WriterThread<'_, '_>, at: u64) {
    while w.done.load(Ordering::Acquire) < at && !w.thread.is_finished() {
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
}

/// A target thread: makes the nodes and writes the files the batches describe, recording
/// what fails.
fn write_ops<'p>(
    ops: crossbeam_channel::Receiver<OpBatch>,
    mut w: Writer<'p>,
    buffers: BufferPool,
    queued: Arc<AtomicU64>,
    done: Arc<AtomicU64>,
) -> Writer<'p> {
    for batch in ops.iter() {
        let OpBatch { ops, bytes } = batch;
        let mut written = 0;
        let mut write = |w: &mut Writer<'_>, d: std::ops::Range<usize>| {
            written += d.len() as u64;
            w.data(Ok(&bytes[d]));
            w.note_errors();
        };
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
                write(&mut w, d);
            }
            match op {
                Op::Data(range) => data = Some(range),
                Op::Event(at, ev) => {
                    w.at = at;
                    w.event(*ev);
                }
                Op::Failed(e) => w.data(Err(e)),
            }
            w.note_errors();
        }
        if let Some(d) = data {
            write(&mut w, d);
        }
        queued.fetch_sub(written, Ordering::Relaxed);
        done.store(w.at, Ordering::Release);
        if let Some(b) = Arc::into_inner(bytes) {
            buffers.give(b);
        }
    }
    // The reader stopped mid-file (an unreadable tree, reported by the caller).
    abandon(&mut w.target, &mut w.current, false);
    w.note_errors();
    w
}

/// The writing side's state (of a target thread, or the decoding thread's own).
struct Writer<'p> {
    stats: RestoreStats,
    target: Target,
    /// Directories made, and their places in tree order: their modes and times are set last.
    dirs: Vec<(u64, Node)>,
    current: Current,
    progress: &'p dyn Progress,
    /// The place in tree order of the event being handled (the current file's start while
    /// its data is written).
    at: u64,
    /// The place of each error of `stats.errors`.
    error_places: Vec<u64>,
}

impl<'p> Writer<'p> {
    fn new(target: Target, progress: &'p dyn Progress) -> Self {
        Writer {
            stats: RestoreStats::default(),
            target,
            dirs: Vec::new(),
            current: Current::Idle,
            progress,
            at: 0,
            error_places: Vec::new(),
        }
    }

    /// Records the place of the errors recorded since the last call.
    fn note_errors(&mut self) {
        let new = self
            .stats
            .errors
            .len()
            .saturating_sub(self.error_places.len());
        self.error_places.extend(std::iter::repeat_n(self.at, new));
    }

    /// The errors so far with their places, taken out.
    fn take_errors(&mut self) -> Vec<(u64, NodeError)> {
        self.note_errors();
        let places = std::mem::take(&mut self.error_places);
        places
            .into_iter()
            .zip(std::mem::take(&mut self.stats.errors))
            .collect()
    }

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
                    Ok(()) if node.kind == NodeKind::Dir => self.dirs.push((self.at, node)),
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

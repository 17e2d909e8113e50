//! Restore's writing thread (the caller's): takes the reader's events in batches, decodes and
//! verifies their chunks, and writes each file under a temporary name until it is complete.

use super::*;

/// The file being written, if any.
enum Current<'scope, 'env> {
    /// Between files.
    Idle,
    /// Writing this file under a temporary name.
    Writing(Box<PendingFile<'scope, 'env>>, Box<Node>, u64),
    /// The current file failed on this side and is already reported; its events are dropped.
    Skipping,
}

/// The writing thread (the caller's): decodes, verifies and writes, recording what fails.
///
/// Events come in batches ([`receive_batch`]): the batch's chunks are decoded and verified
/// together ([`PipelinedDecoder::decode_batch`], hashing shared with a helper thread), then
/// its events are handled in order.
pub(super) fn write_events<'scope, 'env>(
    rx: &crossbeam_channel::Receiver<Event>,
    target: Target,
    hasher: dedelta_core::ChunkHasher,
    progress: &dyn Progress,
    scope: &'scope std::thread::Scope<'scope, 'env>,
) -> RestoreStats {
    let mut decoder = PipelinedDecoder::new(hasher);
    let mut w = Writer {
        stats: RestoreStats::default(),
        target,
        dirs: Vec::new(),
        current: Current::Idle,
        progress,
        scope,
    };
    let (mut batch, mut events, mut chunks) = (Vec::new(), Vec::new(), Vec::new());
    let data_bytes = |ev: &Event| match ev {
        Event::Data(f) => f.len(),
        _ => 0,
    };
    while receive_batch(rx, &mut batch, data_bytes) {
        // Chunks apart from the other events, so that those can be handled (moved) while the
        // decoded chunks borrow theirs.
        for ev in batch.drain(..) {
            match ev {
                Event::Data(f) => {
                    chunks.push(f);
                    events.push(None);
                }
                ev => events.push(Some(ev)),
            }
        }
        let refs: Vec<&FetchedChunk> = chunks.iter().collect();
        let mut decoded = decoder.decode_batch(&refs).into_iter();
        for ev in events.drain(..) {
            match ev {
                Some(ev) => w.event(ev),
                None => {
                    if let Some(data) = decoded.next() {
                        w.data(data);
                    }
                }
            }
        }
        drop(decoded);
        chunks.clear();
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
    stats.reads = decoder.stats();
    for node in dirs.iter().rev() {
        if let Err(e) = target.set_dir_meta(node) {
            fail(&mut stats, &node.path, e.to_string());
        }
    }
    stats.warnings = target.meta.warnings();
    stats
}

/// The writing side's state.
struct Writer<'p, 'scope, 'env> {
    stats: RestoreStats,
    target: Target,
    /// Directories made, whose modes and times are set last.
    dirs: Vec<Node>,
    current: Current<'scope, 'env>,
    progress: &'p dyn Progress,
    /// Where large files' writes behind run (see [`Target::create_file`]).
    scope: &'scope std::thread::Scope<'scope, 'env>,
}

impl Writer<'_, '_, '_> {
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
                self.current = match target.create_file(&node, self.scope) {
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
fn abandon(target: &mut Target, current: &mut Current<'_, '_>, skip: bool) {
    let next = if skip {
        Current::Skipping
    } else {
        Current::Idle
    };
    if let Current::Writing(f, _, _) = std::mem::replace(current, next) {
        target.discard_file(*f);
    }
}

//! Runs on: a scoped thread of its own, beside a dump's decoding thread (the caller, which
//! hands it the verified bytes); restore's target thread, itself behind the decoding, uses it
//! without a thread ([`WriteBehind::on_this_thread`]), for its buffering and holes.
//!
//! Output written behind the thread that produces it: bytes gathered into buffers of
//! [`BUFFER_BYTES`], which a thread writes while the caller decodes and verifies the next
//! chunks.
//!
//! Why: writing a restored file (into the page cache, a pipe, tmpfs) costs the kernel about
//! as much as decoding it. Restoring a 1.24 GB file to tmpfs, the decoding thread held 73 % of
//! the dump's CPU time, 0.7 s of it in `write`, and bounded the dump (1.29-1.32 s; written
//! behind: 0.88-0.97 s). The bytes are copied into the buffer as a `BufWriter` copied them.
//! The thread starts at the first full buffer: an output shorter than one buffer is written
//! by `finish` on the caller's thread, and starts none.
//!
//! A restore writes files on a thread of its own (`commands/restore/write.rs`), so there the
//! writes are already behind the decoding.

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use std::io::{self, Seek, SeekFrom, Write};
use std::thread::{Scope, ScopedJoinHandle};

/// Bytes gathered before a write.
pub(crate) const BUFFER_BYTES: usize = 1 << 20;
/// Without a writing thread ([`WriteBehind::on_this_thread`]), a piece at least this long
/// that finds the buffer empty is written as it is, not copied: restore's target thread hands
/// over a file's bytes of a whole batch at once (a buffer of 1 MiB per file was a `mmap`, its
/// page faults and a `munmap`).
const WRITE_THROUGH_BYTES: usize = 32 << 10;
/// Buffers on their way to the writing thread at most: the caller runs this far ahead.
const BUFFERS_AHEAD: usize = 2;

/// Where written-behind bytes go: a writer that can also leave a hole.
pub(crate) trait Sink: Write + Send {
    /// Moves `n` bytes forward without writing them (a hole of a sparse file).
    fn skip(&mut self, n: u64) -> io::Result<()>;
}

impl Sink for std::fs::File {
    fn skip(&mut self, n: u64) -> io::Result<()> {
        let n = i64::try_from(n).map_err(|_| io::Error::other("a hole too large to seek"))?;
        self.seek(SeekFrom::Current(n)).map(drop)
    }
}

impl Sink for &mut (dyn Write + Send) {
    fn skip(&mut self, _n: u64) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "holes need a seekable output",
        ))
    }
}

/// What the writing thread is handed, in order.
enum Piece {
    Bytes(Vec<u8>),
    Skip(u64),
}

/// The writing thread: it gives the output back, with the outcome of its writes.
struct Behind<'scope, W> {
    pieces: Sender<Piece>,
    /// Buffers written, back for reuse.
    free: Receiver<Vec<u8>>,
    handle: ScopedJoinHandle<'scope, (W, io::Result<()>)>,
}

/// An output written behind its caller (see the module doc).
pub(crate) struct WriteBehind<'scope, 'env, W: Sink + 'scope> {
    /// Where the writing thread starts; `None`: every write on the caller's thread.
    scope: Option<&'scope Scope<'scope, 'env>>,
    /// The buffer being filled.
    buf: Vec<u8>,
    /// The output, while no thread writes it.
    out: Option<W>,
    /// The first buffer's capacity: the output's expected length, up to [`BUFFER_BYTES`].
    first: usize,
    behind: Option<Behind<'scope, W>>,
    /// The first failed write, given again to every later call.
    failed: Option<(io::ErrorKind, String)>,
}

impl<W: Sink + 'static> WriteBehind<'static, 'static, W> {
    /// Writes to `out` on the caller's thread only, gathering `expected` bytes (up to
    /// [`BUFFER_BYTES`]) a write: for a caller that is itself behind the decoding (restore's
    /// target thread).
    pub(crate) fn on_this_thread(out: W, expected: u64) -> Self {
        Self::unstarted(None, out, expected)
    }
}

impl<'scope, 'env, W: Sink + 'scope> WriteBehind<'scope, 'env, W> {
    /// Writes to `out` behind the caller, from a thread of `scope` started at the first full
    /// buffer. `expected` bytes are expected in all: a short output's buffer is no larger than
    /// the output (restoring a tree of small files, a buffer of 1 MiB each was a `mmap` and a
    /// `munmap` per file).
    pub(crate) fn new(scope: &'scope Scope<'scope, 'env>, out: W, expected: u64) -> Self {
        Self::unstarted(Some(scope), out, expected)
    }

    /// A writer that has written nothing.
    fn unstarted(scope: Option<&'scope Scope<'scope, 'env>>, out: W, expected: u64) -> Self {
        WriteBehind {
            scope,
            buf: Vec::new(),
            out: Some(out),
            first: usize::try_from(expected).map_or(BUFFER_BYTES, |e| e.min(BUFFER_BYTES)),
            behind: None,
            failed: None,
        }
    }

    /// Appends `data`. An error is the output's (a write behind that failed).
    pub(crate) fn write(&mut self, data: &[u8]) -> io::Result<()> {
        self.check()?;
        if self.scope.is_none() && self.buf.is_empty() && data.len() >= WRITE_THROUGH_BYTES {
            // Written as it is: a copy into the buffer would gain no fewer writes.
            let out = self.out.as_mut().ok_or_else(gone)?;
            let done = out.write_all(data);
            return done.map_err(|e| self.fail(e));
        }
        if self.buf.capacity() == 0 {
            self.buf.reserve_exact(self.first);
        }
        self.buf.extend_from_slice(data);
        if self.buf.len() >= BUFFER_BYTES {
            self.send(None)?;
        }
        Ok(())
    }

    /// Leaves a hole of `n` bytes after what was written.
    pub(crate) fn skip(&mut self, n: u64) -> io::Result<()> {
        self.check()?;
        self.send(Some(n))
    }

    /// The first failure again, if a write failed.
    fn check(&self) -> io::Result<()> {
        match &self.failed {
            Some((kind, msg)) => Err(io::Error::new(*kind, msg.clone())),
            None => Ok(()),
        }
    }

    /// Remembers `e` as the output's failure.
    fn fail(&mut self, e: io::Error) -> io::Error {
        self.failed = Some((e.kind(), e.to_string()));
        e
    }

    /// Hands the buffer (and then a hole of `skip` bytes) on: to the writing thread (started
    /// if need be), or without a scope to the output on this thread.
    fn send(&mut self, skip: Option<u64>) -> io::Result<()> {
        let Some(scope) = self.scope else {
            return self.write_here(skip);
        };
        if self.behind.is_none() {
            let out = self.out.take().ok_or_else(gone)?;
            self.behind = Some(start(scope, out));
        }
        if !self.buf.is_empty() {
            let free = &self.behind.as_ref().expect("started above").free;
            let next = match free.try_recv() {
                Ok(mut b) => {
                    b.clear();
                    b
                }
                Err(_) => Vec::with_capacity(BUFFER_BYTES),
            };
            let full = std::mem::replace(&mut self.buf, next);
            self.hand_over(Piece::Bytes(full))?;
        }
        match skip {
            Some(n) => self.hand_over(Piece::Skip(n)),
            None => Ok(()),
        }
    }

    /// Writes the buffer (and then a hole of `skip` bytes) on this thread, where no writing
    /// thread was started (`out` is here).
    fn write_here(&mut self, skip: Option<u64>) -> io::Result<()> {
        let out = self.out.as_mut().ok_or_else(gone)?;
        let done = out
            .write_all(&self.buf)
            .and_then(|()| skip.map_or(Ok(()), |n| out.skip(n)));
        self.buf.clear();
        done.map_err(|e| self.fail(e))
    }

    /// Gives `piece` to the writing thread; if the thread stopped at a failed write, its
    /// error.
    fn hand_over(&mut self, piece: Piece) -> io::Result<()> {
        let behind = self.behind.as_ref().expect("started before");
        if behind.pieces.send(piece).is_ok() {
            return Ok(());
        }
        let (out, outcome) = self.join();
        self.out = out;
        let e = outcome.err().unwrap_or_else(gone);
        Err(self.fail(e))
    }

    /// Waits for the writing thread; its output back and the outcome of its writes.
    fn join(&mut self) -> (Option<W>, io::Result<()>) {
        let Some(Behind { pieces, handle, .. }) = self.behind.take() else {
            return (self.out.take(), Ok(()));
        };
        drop(pieces);
        match handle.join() {
            Ok((out, outcome)) => (Some(out), outcome),
            Err(_) => (None, Err(io::Error::other("the writing thread panicked"))),
        }
    }

    /// Writes what is left and waits for it: the output back (unless a panic lost it) and
    /// the outcome of every write.
    pub(crate) fn finish(mut self) -> (Option<W>, io::Result<()>) {
        let sent = self.check().and_then(|()| {
            if self.buf.is_empty() {
                Ok(())
            } else if self.behind.is_none() {
                // Nothing left to write beside: no thread for the last (or only) buffer.
                self.write_here(None)
            } else {
                self.send(None)
            }
        });
        let (mut out, outcome) = self.join();
        let flushed = match out.as_mut() {
            Some(o) => o.flush(),
            None => Ok(()),
        };
        (out, sent.and(outcome).and(flushed))
    }
}

/// The output given to a thread that failed or panicked before.
fn gone() -> io::Error {
    io::Error::other("the output was lost with its writing thread")
}

/// Starts the thread writing `out`.
fn start<'scope, 'env, W: Sink + 'scope>(
    scope: &'scope Scope<'scope, 'env>,
    mut out: W,
) -> Behind<'scope, W> {
    let (pieces, to_write) = bounded::<Piece>(BUFFERS_AHEAD);
    let (give_back, free) = unbounded::<Vec<u8>>();
    let handle = scope.spawn(move || {
        for piece in to_write {
            let done = match piece {
                Piece::Bytes(b) => {
                    let done = out.write_all(&b);
                    let _ = give_back.send(b);
                    done
                }
                Piece::Skip(n) => out.skip(n),
            };
            if let Err(e) = done {
                return (out, Err(e));
            }
        }
        (out, Ok(()))
    });
    Behind {
        pieces,
        free,
        handle,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Takes that many bytes, then fails.
    struct FailsAfter(usize, Vec<u8>);

    impl Write for FailsAfter {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            if b.len() > self.0 {
                return Err(io::Error::new(io::ErrorKind::BrokenPipe, "went away"));
            }
            self.0 -= b.len();
            self.1.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Sink for FailsAfter {
        fn skip(&mut self, n: u64) -> io::Result<()> {
            self.1.resize(self.1.len() + n as usize, 0);
            Ok(())
        }
    }

    fn bytes(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 4096) as u8).collect()
    }

    /// Bytes and holes come out in order, behind the caller or on its thread, through any
    /// number of buffers.
    #[test]
    fn bytes_and_holes_come_out_in_order() {
        let data = bytes(5 * BUFFER_BYTES + 12_345);
        for behind in [true, false] {
            let (out, outcome) = std::thread::scope(|s| {
                let out = FailsAfter(usize::MAX, Vec::new());
                let mut w = match behind {
                    true => WriteBehind::new(s, out, 1000),
                    false => WriteBehind::unstarted(None, out, 1000),
                };
                for (i, piece) in data.chunks(100_000).enumerate() {
                    w.write(piece).unwrap();
                    if i % 7 == 3 {
                        w.skip(5_000).unwrap();
                    }
                }
                w.finish()
            });
            outcome.unwrap();
            let mut want = Vec::new();
            for (i, piece) in data.chunks(100_000).enumerate() {
                want.extend_from_slice(piece);
                if i % 7 == 3 {
                    want.resize(want.len() + 5_000, 0);
                }
            }
            assert!(out.unwrap().1 == want, "behind: {behind}");
        }
    }

    /// Without a scope (restore's target thread) every buffer is written on the caller's
    /// thread, bytes and holes in order, and no thread starts.
    #[test]
    fn on_this_thread_no_thread_starts() {
        let data = bytes(3 * BUFFER_BYTES + 777);
        let mut w = WriteBehind::on_this_thread(FailsAfter(usize::MAX, Vec::new()), u64::MAX);
        let mut want = Vec::new();
        for (i, piece) in data.chunks(100_000).enumerate() {
            w.write(piece).unwrap();
            want.extend_from_slice(piece);
            if i == 5 {
                w.skip(4_096).unwrap();
                want.resize(want.len() + 4_096, 0);
            }
            assert!(w.behind.is_none(), "a thread started");
        }
        let (out, outcome) = w.finish();
        outcome.unwrap();
        assert!(out.unwrap().1 == want);
    }

    /// Without a thread, a long piece that finds the buffer empty is written as it is (no
    /// buffer is allocated for it), and short ones around it keep their order.
    #[test]
    fn a_long_piece_is_written_through() {
        let data = bytes(3 * WRITE_THROUGH_BYTES);
        let mut w = WriteBehind::on_this_thread(FailsAfter(usize::MAX, Vec::new()), u64::MAX);
        w.write(&data[..2 * WRITE_THROUGH_BYTES]).unwrap();
        assert_eq!(w.buf.capacity(), 0, "copied into a buffer");
        w.write(&data[2 * WRITE_THROUGH_BYTES..2 * WRITE_THROUGH_BYTES + 10])
            .unwrap();
        w.write(&data[2 * WRITE_THROUGH_BYTES + 10..]).unwrap();
        let (out, outcome) = w.finish();
        outcome.unwrap();
        assert!(out.unwrap().1 == data);
    }

    /// An output shorter than a buffer (a small dump) starts no thread: its only buffer is
    /// written on the caller's thread when it finishes, not handed to a thread started for
    /// it. Longer ones are written behind.
    #[test]
    fn a_short_output_starts_no_thread() {
        /// Records which threads wrote.
        struct Writers(Vec<std::thread::ThreadId>);
        impl Write for Writers {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                self.0.push(std::thread::current().id());
                Ok(b.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        impl Sink for Writers {
            fn skip(&mut self, _n: u64) -> io::Result<()> {
                Ok(())
            }
        }
        let caller = std::thread::current().id();
        for (len, here) in [(5_000, true), (BUFFER_BYTES + 1, false)] {
            let (out, outcome) = std::thread::scope(|s| {
                let mut w = WriteBehind::new(s, Writers(Vec::new()), len as u64);
                w.write(&bytes(len)).unwrap();
                w.finish()
            });
            outcome.unwrap();
            let writers = out.unwrap().0;
            assert!(!writers.is_empty());
            assert_eq!(writers.iter().all(|t| *t == caller), here, "{len} bytes");
        }
    }

    /// A short output's buffer is no larger than the output: no buffer of 1 MiB (a `mmap`
    /// and a `munmap`) per small file of a tree restored.
    #[test]
    fn a_short_output_gets_a_short_buffer() {
        std::thread::scope(|s| {
            let mut w = WriteBehind::new(s, FailsAfter(usize::MAX, Vec::new()), 5_000);
            w.write(&bytes(3_000)).unwrap();
            assert!(w.buf.capacity() < 8_192, "{}", w.buf.capacity());
            w.write(&bytes(3_000)).unwrap();
            let (out, outcome) = w.finish();
            outcome.unwrap();
            assert_eq!(out.unwrap().1.len(), 6_000);
        });
    }

    /// A write that fails behind the caller is the error of a later write or of `finish`,
    /// and nothing hangs.
    #[test]
    fn a_failed_write_behind_is_reported() {
        std::thread::scope(|s| {
            let mut w = WriteBehind::new(s, FailsAfter(3 * BUFFER_BYTES / 2, Vec::new()), u64::MAX);
            let data = bytes(BUFFER_BYTES / 4);
            let failed = (0..64).find_map(|_| w.write(&data).err());
            let e = failed.unwrap_or_else(|| w.finish().1.unwrap_err());
            assert_eq!(e.kind(), io::ErrorKind::BrokenPipe, "{e}");
        });
    }
}

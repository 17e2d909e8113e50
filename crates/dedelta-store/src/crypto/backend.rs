//! [`SealedBackend`]: a backend around a backend that seals every object on the way in and
//! opens (authenticates, decrypts) it on the way out, ranged reads included, so that the rest
//! of the store reads and writes plaintext and never knows.
//!
//! A container read whole (`get`) is the one exception to "authenticated or refused": its
//! segments that fail authentication come back as zeros, because every reader of a whole
//! container checks it against its name (a content hash) and then entry by entry, which is
//! how `check` and `repair packs` tell the damaged chunks from the intact ones.
//!
//! Locks and key files pass through plain (a lock says who holds it, for `unlock`; a key file
//! is sealed under its password). Sizes (`size`, `list`) are the plaintext's, so that offsets
//! in container footers hold. A ranged read needs the object's trailer (its length and nonce
//! prefix): a suffix read brings it along, else it is read once (a 32-byte suffix read) and
//! kept in a cache shared by every handle of the repository.

use crate::backend::{Backend, BackendError, FileKind, Result};
use crate::crypto::{random_bytes, MasterKey};
use crate::format::sealed::{
    self, ObjectName, SealError, Trailer, SEGMENT_LEN, TAG_LEN, TRAILER_LEN,
};
use lru::LruCache;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

/// Trailers kept for ranged reads: 64 Ki objects, about 8 MiB.
const TRAILER_CACHE: usize = 1 << 16;

type TrailerCache = Mutex<LruCache<(FileKind, String), Trailer>>;

/// The largest window buffer a thread keeps between reads (4 MiB, a container).
const MAX_WINDOW_KEPT: usize = 4 << 20;

std::thread_local! {
    /// Each thread's buffer for the sealed bytes of a range read ([`SealedBackend::get_range_into`]).
    static WINDOW: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Seals the objects of an encrypted repository (see the module doc).
pub struct SealedBackend {
    inner: Arc<dyn Backend>,
    cipher: Arc<sealed::SegmentCipher>,
    trailers: Arc<TrailerCache>,
}

/// The error of an object that fails to open: an I/O error of kind `InvalidData` whose cause
/// is the [`SealError`], which the store reports as damage of the object named.
fn seal_error(kind: FileKind, name: &str, e: SealError) -> BackendError {
    BackendError::io(
        format!("{} {name}", kind.noun()),
        std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    )
}

fn is_plain(kind: FileKind) -> bool {
    matches!(kind, FileKind::Lock | FileKind::Key)
}

impl SealedBackend {
    /// Seals objects of `inner` with `key`'s data key.
    pub fn new(inner: Arc<dyn Backend>, key: &MasterKey) -> Self {
        SealedBackend {
            inner,
            cipher: Arc::new(sealed::cipher(&key.data)),
            trailers: Arc::new(Mutex::new(LruCache::new(
                NonZeroUsize::new(TRAILER_CACHE).expect("non-zero"),
            ))),
        }
    }

    /// The same keys and trailer cache around another handle of the same storage (a metered
    /// handle tagged with a purpose).
    pub fn rewrap(&self, inner: Arc<dyn Backend>) -> Self {
        SealedBackend {
            inner,
            cipher: self.cipher.clone(),
            trailers: self.trailers.clone(),
        }
    }

    /// The backend under the seal.
    pub fn inner(&self) -> &Arc<dyn Backend> {
        &self.inner
    }

    /// Opens `bytes`, object `name` of `kind` as read from the inner backend: what [`Backend::get`]
    /// returns for it (the open of a repository reads its config before it has the key, and
    /// opens those bytes once it has, rather than reading them again).
    pub fn open_object(&self, kind: FileKind, name: &str, bytes: Vec<u8>) -> Result<Vec<u8>> {
        if is_plain(kind) {
            return Ok(bytes);
        }
        let obj = ObjectName {
            kind: kind.dir(),
            name,
        };
        if kind == FileKind::Container {
            // Whole-container readers check the bytes against the container's name and then
            // entry by entry: a damaged segment reaches them as zeros, and costs only the
            // chunks in it, as a damaged byte does in a plain repository.
            return sealed::open_salvaging(&self.cipher, obj, &bytes)
                .map(|(plain, _)| plain)
                .map_err(|e| seal_error(kind, name, e));
        }
        sealed::open(&self.cipher, obj, &bytes).map_err(|e| seal_error(kind, name, e))
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, LruCache<(FileKind, String), Trailer>> {
        // A poisoned cache only means a thread panicked while inserting: it is intact.
        self.trailers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn remember(&self, kind: FileKind, name: &str, t: Trailer) {
        if kind == FileKind::Container {
            self.cache().put((kind, name.to_string()), t);
        }
    }

    /// The trailer of an object: cached, else read (`fresh` skips the cache).
    fn trailer(&self, kind: FileKind, name: &str, fresh: bool) -> Result<Trailer> {
        if !fresh {
            if let Some(t) = self.cache().get(&(kind, name.to_string())) {
                return Ok(*t);
            }
        }
        let bytes = self.inner.get_tail(kind, name, TRAILER_LEN)?;
        let t = Trailer::parse(&bytes).map_err(|e| seal_error(kind, name, e))?;
        self.remember(kind, name, t);
        Ok(t)
    }

    fn seal(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<Vec<u8>> {
        let prefix = random_bytes::<16>().map_err(|e| BackendError::Refused(e.to_string()))?;
        let mut out = Vec::new();
        let obj = ObjectName {
            kind: kind.dir(),
            name,
        };
        sealed::seal_into(&self.cipher, prefix, obj, data, &mut out);
        self.remember(
            kind,
            name,
            Trailer {
                nonce_prefix: prefix,
                plain_len: data.len() as u64,
            },
        );
        Ok(out)
    }

    /// Reads plaintext `offset .. offset + len` with trailer `t` into `buf`.
    fn read_range(
        &self,
        kind: FileKind,
        name: &str,
        t: &Trailer,
        offset: u64,
        len: usize,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        let Some((at, n, first)) = sealed::sealed_span(t.plain_len, offset, len as u64) else {
            return Err(BackendError::io(
                format!("reading {len} bytes at {offset} of {} {name}", kind.noun()),
                std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            ));
        };
        let obj = ObjectName {
            kind: kind.dir(),
            name,
        };
        // The sealed bytes go to this thread's window buffer and are decrypted there; only
        // the plaintext asked for is copied out. Opened into `buf` and shifted down to the
        // range asked for instead, each region read was copied twice, into fresh memory.
        WINDOW.with(|w| {
            let mut window = w.take();
            self.inner
                .get_range_into(kind, name, at as i64, n as usize, &mut window)?;
            buf.clear();
            buf.reserve(len);
            let mut skip = (offset - first * SEGMENT_LEN as u64) as usize;
            let opened =
                sealed::open_window_in_place(&self.cipher, t, obj, first, &mut window, |plain| {
                    let from = skip.min(plain.len());
                    skip -= from;
                    let want = (len - buf.len()).min(plain.len() - from);
                    buf.extend_from_slice(&plain[from..from + want]);
                });
            if window.capacity() <= MAX_WINDOW_KEPT {
                w.replace(window);
            }
            opened.map_err(|e| seal_error(kind, name, e))
        })
    }
}

impl Backend for SealedBackend {
    fn get(&self, kind: FileKind, name: &str) -> Result<Vec<u8>> {
        let bytes = self.inner.get(kind, name)?;
        self.open_object(kind, name, bytes)
    }

    fn get_range(&self, kind: FileKind, name: &str, offset: i64, len: usize) -> Result<Vec<u8>> {
        let mut buf = Vec::new();
        self.get_range_into(kind, name, offset, len, &mut buf)?;
        Ok(buf)
    }

    fn get_range_into(
        &self,
        kind: FileKind,
        name: &str,
        offset: i64,
        len: usize,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        if is_plain(kind) {
            return self.inner.get_range_into(kind, name, offset, len, buf);
        }
        let t = self.trailer(kind, name, false)?;
        let abs = |t: &Trailer| {
            if offset < 0 {
                t.plain_len.checked_sub(offset.unsigned_abs())
            } else {
                Some(offset as u64)
            }
        };
        let Some(at) = abs(&t) else {
            return Err(BackendError::io(
                format!("seeking to {offset} in {} {name}", kind.noun()),
                std::io::Error::from(std::io::ErrorKind::InvalidInput),
            ));
        };
        match self.read_range(kind, name, &t, at, len, buf) {
            // A cached trailer may be stale (the object was written again, by another
            // client): read it again, once.
            Err(BackendError::Io { .. }) if self.cache().contains(&(kind, name.to_string())) => {
                self.cache().pop(&(kind, name.to_string()));
                let t = self.trailer(kind, name, true)?;
                let at = abs(&t).ok_or_else(|| {
                    BackendError::io(
                        format!("seeking to {offset} in {} {name}", kind.noun()),
                        std::io::Error::from(std::io::ErrorKind::InvalidInput),
                    )
                })?;
                self.read_range(kind, name, &t, at, len, buf)
            }
            r => r,
        }
    }

    fn get_tail(&self, kind: FileKind, name: &str, max_len: usize) -> Result<Vec<u8>> {
        if is_plain(kind) {
            return self.inner.get_tail(kind, name, max_len);
        }
        // Enough sealed bytes for `max_len` plaintext bytes wherever segments start.
        let want = max_len + SEGMENT_LEN + (max_len / SEGMENT_LEN + 2) * TAG_LEN + TRAILER_LEN;
        let w = self.inner.get_tail(kind, name, want)?;
        let bad = |why: &str| seal_error(kind, name, SealError::Malformed(why.into()));
        let t = Trailer::parse(&w).map_err(|e| seal_error(kind, name, e))?;
        let total = sealed::sealed_len(t.plain_len);
        if w.len() as u64 > total || (w.len() < want && w.len() as u64 != total) {
            return Err(bad("its length differs from its trailer's"));
        }
        self.remember(kind, name, t);
        let w_start = total - w.len() as u64;
        let k = (max_len as u64).min(t.plain_len);
        let (at, n, first) =
            sealed::sealed_span(t.plain_len, t.plain_len - k, k).expect("inside the object");
        let Some(window) = at
            .checked_sub(w_start)
            .and_then(|s| w.get(s as usize..(s + n) as usize))
        else {
            return Err(bad("the suffix read is too short"));
        };
        let mut out = Vec::with_capacity(n as usize);
        let obj = ObjectName {
            kind: kind.dir(),
            name,
        };
        sealed::open_window(&self.cipher, &t, obj, first, window, &mut out)
            .map_err(|e| seal_error(kind, name, e))?;
        let skip = (t.plain_len - k - first * SEGMENT_LEN as u64) as usize;
        out.drain(..skip);
        Ok(out)
    }

    fn put(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<()> {
        if is_plain(kind) {
            return self.inner.put(kind, name, data);
        }
        let sealed = self.seal(kind, name, data)?;
        self.inner.put(kind, name, &sealed)
    }

    fn create_new(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<bool> {
        if is_plain(kind) {
            return self.inner.create_new(kind, name, data);
        }
        let sealed = self.seal(kind, name, data)?;
        let created = self.inner.create_new(kind, name, &sealed)?;
        if !created {
            self.cache().pop(&(kind, name.to_string()));
        }
        Ok(created)
    }

    fn list(&self, kind: FileKind) -> Result<Vec<(String, u64)>> {
        let mut l = self.inner.list(kind)?;
        if !is_plain(kind) {
            for (_, size) in l.iter_mut() {
                // An object that is not sealed keeps its size; reading it fails.
                *size = sealed::plain_len_of(*size).unwrap_or(*size);
            }
        }
        Ok(l)
    }

    fn list_names(&self, kind: FileKind) -> Result<Vec<String>> {
        // Names are the same sealed or not.
        self.inner.list_names(kind)
    }

    fn delete(&self, kind: FileKind, name: &str) -> Result<()> {
        self.cache().pop(&(kind, name.to_string()));
        self.inner.delete(kind, name)
    }

    fn size(&self, kind: FileKind, name: &str) -> Result<u64> {
        let s = self.inner.size(kind, name)?;
        if is_plain(kind) {
            return Ok(s);
        }
        sealed::plain_len_of(s).ok_or_else(|| {
            seal_error(
                kind,
                name,
                SealError::Malformed(format!("no plaintext seals to {s} bytes")),
            )
        })
    }

    fn exists(&self, kind: FileKind, name: &str) -> Result<bool> {
        self.inner.exists(kind, name)
    }

    fn location(&self) -> String {
        self.inner.location()
    }

    fn requests_are_round_trips(&self) -> bool {
        self.inner.requests_are_round_trips()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;

    fn key() -> MasterKey {
        MasterKey {
            data: [1; 32],
            id: [2; 32],
        }
    }

    /// Every kind of read returns what a plain backend would, and the bytes stored are not
    /// the plaintext.
    #[test]
    fn reads_match_a_plain_backend() {
        let mem: Arc<dyn Backend> = Arc::new(MemoryBackend::default());
        let s = SealedBackend::new(mem.clone(), &key());
        let data: Vec<u8> = (0..70_000u32).map(|i| (i % 253) as u8).collect();
        s.put(FileKind::Container, "c1", &data).unwrap();
        assert_ne!(
            mem.get(FileKind::Container, "c1").unwrap()[..100],
            data[..100]
        );
        assert_eq!(s.get(FileKind::Container, "c1").unwrap(), data);
        assert_eq!(s.size(FileKind::Container, "c1").unwrap(), 70_000);
        assert_eq!(s.list(FileKind::Container).unwrap()[0].1, 70_000);
        for max in [1, 100, 16_384, 40_000, 100_000] {
            let t = s.get_tail(FileKind::Container, "c1", max).unwrap();
            assert_eq!(t, data[70_000 - max.min(70_000)..], "{max}");
        }
        // A fresh handle (cold trailer cache) and a warm one.
        for b in [
            SealedBackend::new(mem.clone(), &key()),
            s.rewrap(mem.clone()),
        ] {
            for (off, len) in [
                (0i64, 10usize),
                (16_380, 10),
                (69_990, 10),
                (-10, 10),
                (5, 0),
            ] {
                let at = if off < 0 { 70_000 + off } else { off } as usize;
                let got = b.get_range(FileKind::Container, "c1", off, len).unwrap();
                assert_eq!(got, data[at..at + len], "{off} {len}");
            }
            assert!(b.get_range(FileKind::Container, "c1", 69_995, 10).is_err());
        }
        s.put(FileKind::Lock, "l", b"plain").unwrap();
        assert_eq!(mem.get(FileKind::Lock, "l").unwrap(), b"plain");
    }

    /// A changed byte is an `InvalidData` error naming the object, which the store turns
    /// into [`crate::Error::Corrupt`].
    #[test]
    fn a_changed_byte_is_reported_as_damage() {
        let mem: Arc<dyn Backend> = Arc::new(MemoryBackend::default());
        let s = SealedBackend::new(mem.clone(), &key());
        s.put(FileKind::Snapshot, "s1", b"snapshot bytes").unwrap();
        let mut raw = mem.get(FileKind::Snapshot, "s1").unwrap();
        raw[3] ^= 0x40;
        mem.put(FileKind::Snapshot, "s1", &raw).unwrap();
        let e: crate::Error = s.get(FileKind::Snapshot, "s1").unwrap_err().into();
        assert!(matches!(e, crate::Error::Corrupt { .. }), "{e}");
        assert!(e.to_string().contains("snapshot s1"), "{e}");
        // Another object's bytes under this name fail too.
        s.put(FileKind::Snapshot, "s2", b"other").unwrap();
        let other = mem.get(FileKind::Snapshot, "s2").unwrap();
        mem.put(FileKind::Snapshot, "s1", &other).unwrap();
        assert!(s.get(FileKind::Snapshot, "s1").is_err());
    }
}

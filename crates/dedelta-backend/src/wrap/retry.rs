//! Retries: a [`Backend`] wrapper that repeats a request that failed for a reason that may
//! pass (a connection reset, a timeout, a server's 5xx, an upload whose ETag did not match),
//! waiting longer each time, with jitter.
//!
//! The wait before retry `n` (from 0) is drawn uniformly from `[0, min(max_delay, base·2^n)]`
//! ("full jitter"): clients that failed together (a server restarting under many backups)
//! do not come back together. A request is retried only when repeating it is harmless: every
//! [`Backend`] operation is (a `put` overwrites with the same bytes, a `delete` of a missing
//! object succeeds), except that a `create_new` whose first attempt succeeded without the
//! answer arriving reports `false` on its retry; callers do not rely on `create_new` for
//! exclusion (see the S3 backend).
//!
//! Not retried: a missing object, a refused request, and I/O errors that repeating cannot
//! change (permission denied, unsupported, a short read of an object shorter than asked).

use crate::{Backend, BackendError as Error, FileKind, Result};
use std::hash::{BuildHasher, Hasher};
use std::io::ErrorKind;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How many times and how long to retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (1 = no retry).
    pub attempts: u32,
    /// The first wait's upper bound; it doubles on every retry.
    pub base_delay: Duration,
    /// The largest wait's upper bound.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// 8 attempts, waits of up to 0.2 s doubling to 10 s: about 30 s of trying in all, enough
    /// for a server restart or a node of a cluster failing over.
    fn default() -> Self {
        RetryPolicy {
            attempts: 8,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// The upper bound of the wait before retry `n` (from 0).
    pub fn bound(&self, n: u32) -> Duration {
        let factor = 1u32.checked_shl(n.min(30)).unwrap_or(u32::MAX);
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }

    /// A wait drawn uniformly from `[0, bound(n)]`.
    pub fn jittered(&self, n: u32) -> Duration {
        let bound = self.bound(n).as_nanos() as u64;
        if bound == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(random_u64() % (bound + 1))
    }
}

/// A random number from the standard library's per-map hash keys (no RNG crate for jitter).
fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    h.finish()
}

/// Whether an error may pass if the request is made again.
pub fn is_transient(e: &Error) -> bool {
    match e {
        Error::Io { cause, .. } => !matches!(
            cause.kind(),
            ErrorKind::NotFound
                | ErrorKind::PermissionDenied
                | ErrorKind::Unsupported
                | ErrorKind::InvalidInput
                | ErrorKind::AlreadyExists
                | ErrorKind::UnexpectedEof
                | ErrorKind::StorageFull
        ),
        _ => false,
    }
}

/// A backend that retries transient failures of the one it wraps.
#[derive(Debug)]
pub struct RetryBackend {
    inner: Arc<dyn Backend>,
    policy: RetryPolicy,
    retries: AtomicU64,
}

impl RetryBackend {
    /// Wraps `inner`, retrying by `policy`.
    pub fn new(inner: Arc<dyn Backend>, policy: RetryPolicy) -> Self {
        RetryBackend {
            inner,
            policy,
            retries: AtomicU64::new(0),
        }
    }

    /// Retries made so far (requests repeated after a transient failure).
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    fn run<T>(&self, mut op: impl FnMut(&dyn Backend) -> Result<T>) -> Result<T> {
        let mut n = 0;
        loop {
            match op(self.inner.as_ref()) {
                Err(e) if is_transient(&e) && n + 1 < self.policy.attempts => {
                    std::thread::sleep(self.policy.jittered(n));
                    self.retries.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
                Err(e) if n > 0 => return Err(gave_up(e, n + 1)),
                other => return other,
            }
        }
    }
}

/// Says in the error how many attempts were made.
fn gave_up(e: Error, attempts: u32) -> Error {
    match e {
        Error::Io { context, cause } if is_transient_kind(cause.kind()) => Error::Io {
            context: format!("{context} (after {attempts} attempts)"),
            cause,
        },
        other => other,
    }
}

fn is_transient_kind(k: ErrorKind) -> bool {
    is_transient(&Error::io("", std::io::Error::from(k)))
}

impl Backend for RetryBackend {
    fn get(&self, kind: FileKind, name: &str) -> Result<Vec<u8>> {
        self.run(|b| b.get(kind, name))
    }

    fn get_range(&self, kind: FileKind, name: &str, offset: i64, len: usize) -> Result<Vec<u8>> {
        self.run(|b| b.get_range(kind, name, offset, len))
    }

    fn get_tail(&self, kind: FileKind, name: &str, max_len: usize) -> Result<Vec<u8>> {
        self.run(|b| b.get_tail(kind, name, max_len))
    }

    fn get_range_into(
        &self,
        kind: FileKind,
        name: &str,
        offset: i64,
        len: usize,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        self.run(|b| b.get_range_into(kind, name, offset, len, buf))
    }

    fn put(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<()> {
        self.run(|b| b.put(kind, name, data))
    }

    fn create_new(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<bool> {
        self.run(|b| b.create_new(kind, name, data))
    }

    fn list(&self, kind: FileKind) -> Result<Vec<(String, u64)>> {
        self.run(|b| b.list(kind))
    }

    fn list_names(&self, kind: FileKind) -> Result<Vec<String>> {
        self.run(|b| b.list_names(kind))
    }

    fn delete(&self, kind: FileKind, name: &str) -> Result<()> {
        self.run(|b| b.delete(kind, name))
    }

    fn size(&self, kind: FileKind, name: &str) -> Result<u64> {
        self.run(|b| b.size(kind, name))
    }

    fn exists(&self, kind: FileKind, name: &str) -> Result<bool> {
        self.run(|b| b.exists(kind, name))
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
    use crate::memory::MemoryBackend;
    use std::sync::atomic::AtomicU32;

    /// Fails the first `fail` requests with `kind`, then passes them on.
    #[derive(Debug)]
    struct Flaky {
        inner: MemoryBackend,
        fail: AtomicU32,
        kind: ErrorKind,
        calls: AtomicU32,
    }

    impl Flaky {
        fn new(fail: u32, kind: ErrorKind) -> Arc<Self> {
            Arc::new(Flaky {
                inner: MemoryBackend::default(),
                fail: AtomicU32::new(fail),
                kind,
                calls: AtomicU32::new(0),
            })
        }

        fn gate(&self) -> Result<()> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            let left = self.fail.load(Ordering::Relaxed);
            if left > 0 {
                self.fail.store(left - 1, Ordering::Relaxed);
                return Err(Error::io(
                    "flaky",
                    std::io::Error::new(self.kind, "injected"),
                ));
            }
            Ok(())
        }
    }

    impl Backend for Flaky {
        fn get(&self, kind: FileKind, name: &str) -> Result<Vec<u8>> {
            self.gate()?;
            self.inner.get(kind, name)
        }
        fn get_range(&self, k: FileKind, n: &str, o: i64, l: usize) -> Result<Vec<u8>> {
            self.gate()?;
            self.inner.get_range(k, n, o, l)
        }
        fn put(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<()> {
            self.gate()?;
            self.inner.put(kind, name, data)
        }
        fn create_new(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<bool> {
            self.gate()?;
            self.inner.create_new(kind, name, data)
        }
        fn list(&self, kind: FileKind) -> Result<Vec<(String, u64)>> {
            self.gate()?;
            self.inner.list(kind)
        }
        fn delete(&self, kind: FileKind, name: &str) -> Result<()> {
            self.gate()?;
            self.inner.delete(kind, name)
        }
        fn size(&self, kind: FileKind, name: &str) -> Result<u64> {
            self.gate()?;
            self.inner.size(kind, name)
        }
        fn exists(&self, kind: FileKind, name: &str) -> Result<bool> {
            self.gate()?;
            self.inner.exists(kind, name)
        }
        fn location(&self) -> String {
            "flaky".into()
        }
    }

    fn fast(attempts: u32) -> RetryPolicy {
        RetryPolicy {
            attempts,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(4),
        }
    }

    #[test]
    fn transient_failures_are_retried_until_they_pass() {
        let flaky = Flaky::new(3, ErrorKind::ConnectionReset);
        let b = RetryBackend::new(flaky.clone(), fast(5));
        b.put(FileKind::Snapshot, "s", b"data").unwrap();
        assert_eq!(b.retries(), 3);
        assert_eq!(b.get(FileKind::Snapshot, "s").unwrap(), b"data");
        assert_eq!(flaky.calls.load(Ordering::Relaxed), 5);
    }

    #[test]
    fn gives_up_after_the_attempts_and_says_so() {
        let flaky = Flaky::new(10, ErrorKind::TimedOut);
        let b = RetryBackend::new(flaky.clone(), fast(3));
        let e = b.list(FileKind::Snapshot).unwrap_err();
        assert!(e.to_string().contains("after 3 attempts"), "{e}");
        assert_eq!(flaky.calls.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn permanent_failures_and_missing_objects_are_not_retried() {
        let flaky = Flaky::new(1, ErrorKind::PermissionDenied);
        let b = RetryBackend::new(flaky.clone(), fast(5));
        assert!(b.get(FileKind::Snapshot, "s").is_err());
        assert!(matches!(
            b.get(FileKind::Snapshot, "s"),
            Err(Error::Missing { .. })
        ));
        assert_eq!(flaky.calls.load(Ordering::Relaxed), 2);
        assert_eq!(b.retries(), 0);
    }

    #[test]
    fn waits_grow_to_the_cap_with_jitter_below_the_bound() {
        let p = RetryPolicy {
            attempts: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        };
        assert_eq!(p.bound(0), Duration::from_millis(100));
        assert_eq!(p.bound(2), Duration::from_millis(400));
        assert_eq!(p.bound(5), Duration::from_secs(1));
        assert_eq!(p.bound(40), Duration::from_secs(1));
        let waits: Vec<_> = (0..50).map(|_| p.jittered(3)).collect();
        assert!(waits.iter().all(|w| *w <= Duration::from_millis(800)));
        // Jitter: not all the same.
        assert!(waits.iter().any(|w| *w != waits[0]));
    }
}

//! Fault injection: a [`Backend`] wrapper that crashes, runs out of space, and returns short
//! or damaged reads, at points a test chooses.
//!
//! (Over 500 lines on purpose: one wrapper whose fault model, counters and log belong
//! together; about 200 lines are its own tests.)
//!
//! Why a wrapper: the crash-safety argument of docs/format.md is about the order of backend
//! writes (containers, then index entries, then the snapshot; prune's copies before its
//! deletes). Killing a process after a sleep hits that order only by luck, and a test that
//! passes with one timing says nothing about the others. Numbering the writes instead makes
//! every crash point reachable and every failure replayable: run a command once with no
//! fault to count its writes, then once per write index N with a crash at N (redb's
//! `fuzz_redb` and crash-consistency tests do the same one layer down). The alternative,
//! a backend keeping separate "durable" and "live" images, was rejected: every [`Backend`]
//! write is already durable when it returns, so "the writes before N" is the durable image.
//!
//! What a fault means:
//!
//! - **Crash at write N** ([`FaultPlan::crash_at`]): writes are `put`, `create_new` and
//!   `delete`, numbered from 0 in the order they reach the wrapper since the last
//!   [`FaultBackend::arm`]. Write N fails and so does every later call of any kind (the
//!   process does nothing more). [`CrashEffect`] says whether write N itself happened.
//!   The client chunk index is not behind the backend: the wrapped command stops at the failed
//!   write, so index changes after it do not happen either, as after a real kill.
//! - **No space at write N** ([`FaultPlan::no_space_at`]): write N fails with
//!   [`std::io::ErrorKind::StorageFull`] and does nothing; later writes succeed (a transient
//!   disk-full).
//! - **Read faults** ([`ReadFault`]): the bytes a read returns (`get`, `get_range`,
//!   `get_range_into`) are cut short or have one byte flipped. Reads are numbered per
//!   [`FileKind`]. The stored object is untouched: for damage at rest use
//!   [`FaultBackend::damage`].
//!
//! Not modelled: a disk that loses writes it acknowledged (lying fsync), torn `put`s (the
//! [`Backend`] contract makes them atomic), and crashes inside the client index's own commit.
//!
//! Everything is deterministic: no clock, no global RNG; a seeded byte position is derived
//! from the seed and the read's number. Counters are atomics and the plan sits behind a
//! mutex, so the wrapper can be shared by backup's pipeline threads.

use crate::{Backend, BackendError as Error, FileKind, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Number of [`FileKind`]s, the length of the per-kind counters.
const KINDS: usize = FileKind::ALL.len();

/// Every [`FileKind`], in counter order.
pub const ALL_KINDS: [FileKind; KINDS] = FileKind::ALL;

fn slot(kind: FileKind) -> usize {
    kind.slot()
}

/// What a crash leaves of the write it interrupts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CrashEffect {
    /// The write never happened: the crash came just before it.
    Lost,
    /// The write completed and is durable, but the caller never learns it: the crash came
    /// just after it, before the next step (for a container `put`, before its index entries).
    Durable,
    /// A `create_new` left an empty object (a local file created but not yet written, which
    /// [`crate::local::LocalBackend::create_new`] can leave). A `put` or `delete` is atomic,
    /// so for them this is [`CrashEffect::Lost`].
    Torn,
}

/// Which byte of a read to damage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BytePosition {
    /// This offset, modulo the length read.
    At(u64),
    /// An offset derived from the seed and the read's number, modulo the length read; the
    /// same seed damages the same bytes on every run.
    Seeded(u64),
}

/// How a read is damaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReadDamage {
    /// The read returns this many bytes fewer than asked (at least one fewer, never below
    /// zero): a short read that a correct reader must notice.
    Short {
        /// Bytes cut from the end.
        missing_bytes: usize,
    },
    /// One byte is XORed with `mask` (a zero mask counts as 1, so a byte always changes).
    Flip {
        /// Which byte.
        position: BytePosition,
        /// The bits to flip.
        mask: u8,
    },
}

/// A damaged read: which reads, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReadFault {
    /// Reads of this kind only.
    pub kind: FileKind,
    /// Only the read with this number (from 0, counted per kind since the last
    /// [`FaultBackend::arm`]); `None` for every read of the kind.
    pub nth: Option<u64>,
    /// What happens to the bytes.
    pub damage: ReadDamage,
}

/// The faults to inject; the default injects none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// Crash at this write index, leaving that write as the effect says.
    pub crash_at: Option<(u64, CrashEffect)>,
    /// Fail only this write index with [`std::io::ErrorKind::StorageFull`].
    pub no_space_at: Option<u64>,
    /// Damaged reads.
    pub read_faults: Vec<ReadFault>,
}

impl FaultPlan {
    /// A plan injecting nothing (for a dry run that counts operations).
    pub fn none() -> Self {
        FaultPlan::default()
    }

    /// A crash at write `n` with `effect`.
    pub fn crash(n: u64, effect: CrashEffect) -> Self {
        FaultPlan {
            crash_at: Some((n, effect)),
            ..FaultPlan::default()
        }
    }

    /// A transient disk-full at write `n`.
    pub fn no_space(n: u64) -> Self {
        FaultPlan {
            no_space_at: Some(n),
            ..FaultPlan::default()
        }
    }

    /// This plan plus a read fault.
    pub fn with_read_fault(mut self, fault: ReadFault) -> Self {
        self.read_faults.push(fault);
        self
    }
}

/// Why an injected operation failed. It is the cause inside [`Error::Io`](crate::BackendError::Io), so that a test
/// can tell an injected failure from a real one with [`FaultBackend::injected`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InjectedFault {
    /// The process "crashed" at this write; nothing after it happens.
    #[error("injected crash at write {write}: the process does nothing more")]
    Crash {
        /// The write index of the crash.
        write: u64,
    },
    /// A transient disk-full.
    #[error("no space left on device (injected at write {write})")]
    NoSpace {
        /// The write index that failed.
        write: u64,
    },
}

/// One injected fault, for messages and for tests that need to know what was hit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Injection {
    /// The object's kind.
    pub kind: FileKind,
    /// The object's name.
    pub name: String,
    /// The write index (crash, no space) or the read's number within its kind.
    pub index: u64,
    /// What was done.
    pub detail: InjectionDetail,
}

/// What an [`Injection`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectionDetail {
    /// A crash, leaving the write as this says.
    Crash(CrashEffect),
    /// A transient disk-full.
    NoSpace,
    /// A read of `len_bytes` cut to `kept_bytes`.
    Short {
        /// Bytes the read returned from the inner backend.
        len_bytes: usize,
        /// Bytes handed on.
        kept_bytes: usize,
    },
    /// A read of `len_bytes` with the byte at `offset` (within the read) flipped.
    Flip {
        /// Bytes read.
        len_bytes: usize,
        /// The damaged byte.
        offset: usize,
    },
}

/// Counts of operations that reached the wrapper since the last [`FaultBackend::arm`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    writes: [u64; KINDS],
    reads: [u64; KINDS],
}

impl FaultCounts {
    /// Writes (`put`, `create_new`, `delete`) of `kind`.
    pub fn writes(&self, kind: FileKind) -> u64 {
        self.writes[slot(kind)]
    }

    /// Reads (`get`, `get_range`, `get_range_into`) of `kind`.
    pub fn reads(&self, kind: FileKind) -> u64 {
        self.reads[slot(kind)]
    }

    /// Writes of every kind: the crash indexes of a command are `0..total_writes()`.
    pub fn total_writes(&self) -> u64 {
        self.writes.iter().sum()
    }
}

/// A write, as the wrapper performs it on the inner backend.
enum Write<'a> {
    Put(&'a [u8]),
    CreateNew(&'a [u8]),
    Delete,
}

/// A [`Backend`] that forwards to another and injects the faults of its [`FaultPlan`].
#[derive(Debug)]
pub struct FaultBackend {
    inner: Arc<dyn Backend>,
    plan: Mutex<FaultPlan>,
    /// Writes numbered so far (the next write's index).
    writes: AtomicU64,
    writes_by_kind: [AtomicU64; KINDS],
    reads_by_kind: [AtomicU64; KINDS],
    crashed: AtomicBool,
    injected: AtomicU64,
    /// The numbered writes since the last arm, in order.
    log: Mutex<Vec<(FileKind, String)>>,
    /// The faults injected since the last arm.
    injections: Mutex<Vec<Injection>>,
    /// Run once write `.0` is performed (see [`FaultBackend::after_write`]).
    hook: Mutex<Option<(u64, WriteHook)>>,
}

/// What [`FaultBackend::after_write`] runs.
struct WriteHook(Box<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for WriteHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriteHook")
    }
}

impl FaultBackend {
    /// Wraps `inner`, injecting nothing until [`FaultBackend::arm`] is called.
    pub fn new(inner: Arc<dyn Backend>) -> Self {
        FaultBackend {
            inner,
            plan: Mutex::new(FaultPlan::none()),
            writes: AtomicU64::new(0),
            writes_by_kind: Default::default(),
            reads_by_kind: Default::default(),
            crashed: AtomicBool::new(false),
            injected: AtomicU64::new(0),
            log: Mutex::new(Vec::new()),
            injections: Mutex::new(Vec::new()),
            hook: Mutex::new(None),
        }
    }

    /// Runs `hook` on the writing thread once write `n` (counted as the plan counts them) is
    /// performed, before the write returns: what a signal arriving just then does (a test
    /// marks the command's lock lost, as Ctrl-C does). Cleared by [`FaultBackend::arm`]; set
    /// it after arming.
    pub fn after_write(&self, n: u64, hook: impl Fn() + Send + Sync + 'static) {
        *self.hook.lock().unwrap_or_else(|e| e.into_inner()) = Some((n, WriteHook(Box::new(hook))));
    }

    /// The wrapped backend (reads and writes through it are neither counted nor faulted).
    pub fn inner(&self) -> &Arc<dyn Backend> {
        &self.inner
    }

    fn plan(&self) -> MutexGuard<'_, FaultPlan> {
        // The plan is replaced whole, never left half-written: a poisoned lock (a panicking
        // test thread) still holds a usable plan.
        self.plan.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the plan and starts counting from zero; clears a crash (the "process" is
    /// restarted). Call it between commands, not while one runs.
    pub fn arm(&self, plan: FaultPlan) {
        *self.plan() = plan;
        self.writes.store(0, Ordering::SeqCst);
        for c in self.writes_by_kind.iter().chain(&self.reads_by_kind) {
            c.store(0, Ordering::SeqCst);
        }
        self.crashed.store(false, Ordering::SeqCst);
        self.log().clear();
        self.injections().clear();
        *self.hook.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn injections(&self) -> MutexGuard<'_, Vec<Injection>> {
        // Entries are pushed whole: a poisoned list is still a valid list.
        self.injections.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The faults injected since the last [`FaultBackend::arm`], in order.
    pub fn injection_log(&self) -> Vec<Injection> {
        self.injections().clone()
    }

    fn record(&self, kind: FileKind, name: &str, index: u64, detail: InjectionDetail) {
        self.injected.fetch_add(1, Ordering::SeqCst);
        self.injections().push(Injection {
            kind,
            name: name.to_string(),
            index,
            detail,
        });
    }

    fn log(&self) -> MutexGuard<'_, Vec<(FileKind, String)>> {
        // Entries are pushed whole: a poisoned log is still a valid log.
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The kind and name of every numbered write since the last [`FaultBackend::arm`], by
    /// write index: what a crash at index N interrupts (`write_log()[N]`).
    pub fn write_log(&self) -> Vec<(FileKind, String)> {
        self.log().clone()
    }

    /// [`FaultBackend::arm`] with no faults: after a crash, the restart.
    pub fn disarm(&self) {
        self.arm(FaultPlan::none());
    }

    /// Operations counted since the last [`FaultBackend::arm`].
    pub fn counts(&self) -> FaultCounts {
        let load = |a: &[AtomicU64; KINDS]| {
            let mut out = [0; KINDS];
            for (o, c) in out.iter_mut().zip(a) {
                *o = c.load(Ordering::SeqCst);
            }
            out
        };
        FaultCounts {
            writes: load(&self.writes_by_kind),
            reads: load(&self.reads_by_kind),
        }
    }

    /// Whether the planned crash has happened.
    pub fn crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    /// Faults injected since the wrapper was made (crashes, disk-fulls, damaged reads; not
    /// the calls refused after a crash).
    pub fn faults_injected(&self) -> u64 {
        self.injected.load(Ordering::SeqCst)
    }

    /// The injected fault behind an I/O error (the cause of an error a command returned),
    /// if it is one.
    pub fn injected(cause: &std::io::Error) -> Option<InjectedFault> {
        cause
            .get_ref()
            .and_then(|c| c.downcast_ref::<InjectedFault>())
            .copied()
    }

    /// Damage at rest: XORs the byte at `offset` (modulo the object's length) of a stored
    /// object with `mask` (zero counts as 1), through the inner backend, so it is neither
    /// counted nor faulted. Returns the object's bytes from before, so a test can heal it.
    ///
    /// # Errors
    /// The inner backend's errors; [`Error::Refused`] for an empty object.
    pub fn damage(&self, kind: FileKind, name: &str, offset: u64, mask: u8) -> Result<Vec<u8>> {
        let before = self.inner.get(kind, name)?;
        if before.is_empty() {
            return Err(Error::Refused(format!(
                "cannot damage the empty {} {name}",
                kind.noun()
            )));
        }
        let mut after = before.clone();
        let i = (offset % after.len() as u64) as usize;
        after[i] ^= mask.max(1);
        self.inner.put(kind, name, &after)?;
        Ok(before)
    }

    fn fail(&self, kind: FileKind, name: &str, fault: InjectedFault) -> Error {
        let io_kind = match fault {
            InjectedFault::NoSpace { .. } => std::io::ErrorKind::StorageFull,
            InjectedFault::Crash { .. } => std::io::ErrorKind::Other,
        };
        Error::io(
            format!("{} {name}", kind.noun()),
            std::io::Error::new(io_kind, fault),
        )
    }

    /// The error of every call after the crash.
    fn after_crash(&self, kind: FileKind, name: &str) -> Error {
        let write = self.plan().crash_at.map_or(0, |(n, _)| n);
        self.fail(kind, name, InjectedFault::Crash { write })
    }

    fn write(&self, kind: FileKind, name: &str, op: Write<'_>) -> Result<bool> {
        if self.crashed() {
            return Err(self.after_crash(kind, name));
        }
        let n = {
            // Numbered under the log's lock, so that the log is in write-index order.
            let mut log = self.log();
            log.push((kind, name.to_string()));
            self.writes.fetch_add(1, Ordering::SeqCst)
        };
        self.writes_by_kind[slot(kind)].fetch_add(1, Ordering::SeqCst);
        let (crash_at, no_space_at) = {
            let p = self.plan();
            (p.crash_at, p.no_space_at)
        };
        match crash_at {
            // A later write that raced past the crashing one still finds the process dead.
            Some((c, _)) if n > c => return Err(self.after_crash(kind, name)),
            Some((c, effect)) if n == c => {
                self.crashed.store(true, Ordering::SeqCst);
                self.record(kind, name, n, InjectionDetail::Crash(effect));
                match (effect, op) {
                    (CrashEffect::Durable, op) => {
                        self.perform(kind, name, op)?;
                    }
                    (CrashEffect::Torn, Write::CreateNew(_)) => {
                        self.inner.create_new(kind, name, &[])?;
                    }
                    _ => {}
                }
                return Err(self.fail(kind, name, InjectedFault::Crash { write: n }));
            }
            _ => {}
        }
        if no_space_at == Some(n) {
            self.record(kind, name, n, InjectionDetail::NoSpace);
            return Err(self.fail(kind, name, InjectedFault::NoSpace { write: n }));
        }
        let done = self.perform(kind, name, op);
        if let Some((at, hook)) = self.hook.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            if *at == n {
                (hook.0)();
            }
        }
        done
    }

    fn perform(&self, kind: FileKind, name: &str, op: Write<'_>) -> Result<bool> {
        match op {
            Write::Put(data) => self.inner.put(kind, name, data).map(|()| true),
            Write::CreateNew(data) => self.inner.create_new(kind, name, data),
            Write::Delete => self.inner.delete(kind, name).map(|()| true),
        }
    }

    /// Counts a read and damages `buf` as the plan says.
    fn after_read(&self, kind: FileKind, name: &str, buf: &mut Vec<u8>) {
        let n = self.reads_by_kind[slot(kind)].fetch_add(1, Ordering::SeqCst);
        let faults: Vec<ReadFault> = self
            .plan()
            .read_faults
            .iter()
            .filter(|f| f.kind == kind && f.nth.is_none_or(|k| k == n))
            .copied()
            .collect();
        for f in faults {
            let len_bytes = buf.len();
            if len_bytes == 0 {
                continue;
            }
            let detail = match f.damage {
                ReadDamage::Short { missing_bytes } => {
                    buf.truncate(len_bytes.saturating_sub(missing_bytes.max(1)));
                    InjectionDetail::Short {
                        len_bytes,
                        kept_bytes: buf.len(),
                    }
                }
                ReadDamage::Flip { position, mask } => {
                    let at = match position {
                        BytePosition::At(p) => p,
                        BytePosition::Seeded(seed) => splitmix64(seed ^ splitmix64(n)),
                    };
                    let offset = (at % len_bytes as u64) as usize;
                    buf[offset] ^= mask.max(1);
                    InjectionDetail::Flip { len_bytes, offset }
                }
            };
            self.record(kind, name, n, detail);
        }
    }

    fn check_alive(&self, kind: FileKind, name: &str) -> Result<()> {
        if self.crashed() {
            Err(self.after_crash(kind, name))
        } else {
            Ok(())
        }
    }
}

/// SplitMix64: a bijective mix, enough to spread seeded positions.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Backend for FaultBackend {
    fn get(&self, kind: FileKind, name: &str) -> Result<Vec<u8>> {
        self.check_alive(kind, name)?;
        let mut buf = self.inner.get(kind, name)?;
        self.after_read(kind, name, &mut buf);
        Ok(buf)
    }

    fn get_range(&self, kind: FileKind, name: &str, offset: i64, len: usize) -> Result<Vec<u8>> {
        self.check_alive(kind, name)?;
        let mut buf = self.inner.get_range(kind, name, offset, len)?;
        self.after_read(kind, name, &mut buf);
        Ok(buf)
    }

    fn get_tail(&self, kind: FileKind, name: &str, max_len: usize) -> Result<Vec<u8>> {
        self.check_alive(kind, name)?;
        let mut buf = self.inner.get_tail(kind, name, max_len)?;
        self.after_read(kind, name, &mut buf);
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
        self.check_alive(kind, name)?;
        self.inner.get_range_into(kind, name, offset, len, buf)?;
        self.after_read(kind, name, buf);
        Ok(())
    }

    fn put(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<()> {
        self.write(kind, name, Write::Put(data)).map(|_| ())
    }

    fn create_new(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<bool> {
        self.write(kind, name, Write::CreateNew(data))
    }

    fn list(&self, kind: FileKind) -> Result<Vec<(String, u64)>> {
        self.check_alive(kind, kind.dir())?;
        self.inner.list(kind)
    }

    fn list_names(&self, kind: FileKind) -> Result<Vec<String>> {
        self.check_alive(kind, kind.dir())?;
        self.inner.list_names(kind)
    }

    fn delete(&self, kind: FileKind, name: &str) -> Result<()> {
        self.write(kind, name, Write::Delete).map(|_| ())
    }

    fn size(&self, kind: FileKind, name: &str) -> Result<u64> {
        self.check_alive(kind, name)?;
        self.inner.size(kind, name)
    }

    fn exists(&self, kind: FileKind, name: &str) -> Result<bool> {
        self.check_alive(kind, name)?;
        self.inner.exists(kind, name)
    }

    fn location(&self) -> String {
        // Unchanged: callers build paths from it (the lock error names the lock file).
        self.inner.location()
    }

    fn requests_are_round_trips(&self) -> bool {
        self.inner.requests_are_round_trips()
    }
}

#[cfg(test)]
mod tests;

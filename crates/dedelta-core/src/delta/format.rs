//! The delta instruction format shared by every codec, its writer and its one decoder.
//!
//! A delta rebuilds a *target* from a *base* with two instructions, as in Ddelta §3.4:
//! `Copy(offset, len)` takes bytes from the base and `Insert(len, bytes)` carries literal
//! bytes. Byte by byte (all integers are unsigned LEB128 varints, [`crate::varint`]):
//!
//! ```text
//! delta       := version:u8  target_len:varint  instruction*
//! instruction := head:varint  (bytes[len] if head is an Insert | offset:varint if a Copy)
//! head        := len << 1 | kind          kind 0 = Insert, 1 = Copy; len >= 1
//! offset      := zigzag(copy_start - end_of_previous_copy)   (the first copy counts from 0)
//! ```
//!
//! Copy offsets are relative to the end of the previous copy, zigzag-coded: the copies of a
//! similar pair mostly walk forward through the base, so a relative offset takes one byte
//! where an absolute one takes two or three. The alternative rejected: absolute offsets, which
//! are simpler to read by eye but cost about one byte per copy on 8 KiB chunks.
//!
//! Encoder rules (the decoder does not rely on them): adjacent Inserts are merged, a Copy that
//! continues the previous one in both target and base is merged into it, and a Copy shorter
//! than [`MIN_COPY_LEN`] that cannot be merged is written as literal bytes.
//!
//! A delta whose first byte is [`ZSTD_FORMAT_VERSION`] (2) is instead a zstd frame with the
//! base as prefix ([`super::zstd_ref`]); [`decode`] reads both.
//!
//! Decoder rules: the version must be [`FORMAT_VERSION`] (or 2, above); the declared target length must be at
//! most [`MAX_TARGET_LEN`]; every instruction has `len >= 1`, fits the declared length and, for
//! a Copy, lies inside the base; the instructions must produce exactly the declared length and
//! end exactly at the end of the delta. Anything else is a [`DeltaError`]: the decoder never
//! panics, never reads out of bounds, and reserves memory only up to what the rest of the
//! delta can actually produce.
//!
//! docs/format.md ("Delta instructions") describes the same format with byte tables and a worked example; the
//! test `doc_example_bytes` below pins that example.

use super::zstd_ref::ZSTD_FORMAT_VERSION;
use super::DeltaError;
use crate::varint;

/// The format version, the delta's first byte. Any other value is refused.
pub const FORMAT_VERSION: u8 = 1;

/// The largest target a delta may describe: 64 MiB, four times the largest chunk any
/// chunker accepts (16 MiB). It bounds what a hostile header can make the decoder reserve.
pub const MAX_TARGET_LEN: usize = 64 << 20;

/// Copies shorter than this (that do not extend the previous copy) are written as literal
/// bytes: a Copy costs a head, an offset and usually a second Insert head, about four bytes.
pub const MIN_COPY_LEN: usize = 4;

/// Instruction kind bit (the low bit of the head) of an Insert.
pub const KIND_INSERT: u64 = 0;
/// Instruction kind bit (the low bit of the head) of a Copy.
pub const KIND_COPY: u64 = 1;

/// One decoded instruction, for inspection and tests; [`decode`] does not build these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Instruction<'a> {
    /// Copy `len` bytes of the base starting at `offset` (absolute, already resolved).
    Copy {
        /// Absolute base offset.
        offset: usize,
        /// Number of bytes, at least 1.
        len: usize,
    },
    /// Append these literal bytes (at least 1).
    Insert(&'a [u8]),
}

/// Reads a varint, with a fast path for the common one-byte case.
#[inline(always)]
fn read_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    if let Some(&b) = buf.get(*pos) {
        if b < 0x80 {
            *pos += 1;
            return Some(u64::from(b));
        }
    }
    varint::get(buf, pos)
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

fn out_of_base(at: usize, offset: Option<i64>, len: usize, base_len: usize) -> DeltaError {
    DeltaError::CopyOutOfBase {
        at,
        offset: offset.unwrap_or(i64::MIN),
        len,
        base_len,
    }
}

/// Parses the header; returns the declared target length and the offset of the first
/// instruction.
fn read_header(delta: &[u8]) -> Result<(usize, usize), DeltaError> {
    let version = *delta.first().ok_or(DeltaError::Malformed("empty delta"))?;
    if version != FORMAT_VERSION && version != ZSTD_FORMAT_VERSION {
        return Err(DeltaError::UnsupportedVersion { version });
    }
    let mut pos = 1;
    let declared = read_varint(delta, &mut pos).ok_or(DeltaError::BadInstruction {
        at: 1,
        reason: "truncated or overlong target length",
    })?;
    if declared > MAX_TARGET_LEN as u64 {
        return Err(DeltaError::TargetTooLong {
            declared,
            max: MAX_TARGET_LEN,
        });
    }
    // Cannot truncate: declared <= MAX_TARGET_LEN, which fits every usize we build for.
    Ok((declared as usize, pos))
}

/// The target length a delta declares, without decoding it.
///
/// # Errors
/// [`DeltaError`] if the header is malformed.
pub fn target_len(delta: &[u8]) -> Result<usize, DeltaError> {
    read_header(delta).map(|(len, _)| len)
}

/// Rebuilds the target from `base` and `delta`, appending it to `out`.
///
/// Shared by every codec. On error `out` is truncated back to its length on entry.
///
/// # Errors
/// [`DeltaError`] for a delta that is malformed or does not fit `base`.
pub fn decode(base: &[u8], delta: &[u8], out: &mut Vec<u8>) -> Result<(), DeltaError> {
    let start = out.len();
    let result = decode_into(base, delta, out);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

fn decode_into(base: &[u8], delta: &[u8], out: &mut Vec<u8>) -> Result<(), DeltaError> {
    let (target_len, mut pos) = read_header(delta)?;
    if delta[0] == ZSTD_FORMAT_VERSION {
        return super::zstd_ref::decode_frame(base, target_len, &delta[pos..], out);
    }
    // An Insert yields at most the bytes it carries and a Copy (two bytes at least) at most
    // the whole base, so the rest of the delta bounds the output whatever the header claims.
    let rest = delta.len() - pos;
    let producible = rest.saturating_mul(base.len().max(1));
    out.reserve(target_len.min(producible));

    let mut remaining = target_len;
    let mut prev_copy_end: usize = 0;
    while pos < delta.len() {
        let at = pos;
        let bad = |reason| DeltaError::BadInstruction { at, reason };
        let head = read_varint(delta, &mut pos).ok_or(bad("truncated or overlong head"))?;
        let len64 = head >> 1;
        if len64 == 0 {
            return Err(bad("zero-length instruction"));
        }
        if len64 > remaining as u64 {
            return Err(bad("instruction runs past the declared target length"));
        }
        // Cannot truncate: len64 <= remaining, a usize.
        let len = len64 as usize;
        if head & 1 == KIND_INSERT {
            let bytes = delta
                .get(pos..pos + len)
                .ok_or(bad("insert runs past the end of the delta"))?;
            out.extend_from_slice(bytes);
            pos += len;
        } else {
            let z = read_varint(delta, &mut pos).ok_or(bad("truncated or overlong offset"))?;
            // prev_copy_end <= base.len() <= isize::MAX, so it fits an i64.
            let offset = (prev_copy_end as i64).checked_add(unzigzag(z));
            let start = offset.and_then(|o| usize::try_from(o).ok());
            let end = start.and_then(|s| s.checked_add(len));
            let (Some(start), Some(end)) = (start, end) else {
                return Err(out_of_base(at, offset, len, base.len()));
            };
            let src = base
                .get(start..end)
                .ok_or_else(|| out_of_base(at, offset, len, base.len()))?;
            out.extend_from_slice(src);
            prev_copy_end = end;
        }
        remaining -= len;
    }
    if remaining != 0 {
        return Err(DeltaError::WrongLength {
            declared: target_len,
            produced: target_len - remaining,
        });
    }
    Ok(())
}

/// Parses a delta into its instructions, checking them as [`decode`] does (for tests and
/// inspection tools; it allocates one `Vec` entry per instruction).
///
/// # Errors
/// [`DeltaError`] as [`decode`], except that it does not check the total length against the
/// base's content (it does check offsets against `base_len`).
pub fn instructions(base_len: usize, delta: &[u8]) -> Result<Vec<Instruction<'_>>, DeltaError> {
    let (target_len, mut pos) = read_header(delta)?;
    if delta[0] == ZSTD_FORMAT_VERSION {
        return Err(DeltaError::UnsupportedVersion {
            version: ZSTD_FORMAT_VERSION,
        });
    }
    let mut remaining = target_len;
    let mut prev_copy_end: usize = 0;
    let mut list = Vec::new();
    while pos < delta.len() {
        let at = pos;
        let bad = |reason| DeltaError::BadInstruction { at, reason };
        let head = read_varint(delta, &mut pos).ok_or(bad("truncated or overlong head"))?;
        let len64 = head >> 1;
        if len64 == 0 || len64 > remaining as u64 {
            return Err(bad("bad instruction length"));
        }
        let len = len64 as usize;
        if head & 1 == KIND_INSERT {
            let bytes = delta
                .get(pos..pos + len)
                .ok_or(bad("insert runs past the end of the delta"))?;
            list.push(Instruction::Insert(bytes));
            pos += len;
        } else {
            let z = read_varint(delta, &mut pos).ok_or(bad("truncated or overlong offset"))?;
            let offset = (prev_copy_end as i64).checked_add(unzigzag(z));
            let start = offset
                .and_then(|o| usize::try_from(o).ok())
                .filter(|&o| o.checked_add(len).is_some_and(|e| e <= base_len))
                .ok_or_else(|| out_of_base(at, offset, len, base_len))?;
            list.push(Instruction::Copy { offset: start, len });
            prev_copy_end = start + len;
        }
        remaining -= len;
    }
    if remaining != 0 {
        return Err(DeltaError::WrongLength {
            declared: target_len,
            produced: target_len - remaining,
        });
    }
    Ok(list)
}

/// What the writer holds back so that it can merge it with the next instruction.
#[derive(Clone, Copy, Debug)]
enum Pending {
    /// Literal target bytes from `start` to the writer's cursor (possibly empty).
    Insert { start: usize },
    /// A copy of `len` base bytes from `base`, ending at the writer's cursor.
    Copy { base: usize, len: usize },
}

/// Writes a delta for `target`: codecs report the matches they find in target order and the
/// writer fills the gaps with Inserts, merges what can be merged and drops copies too short to
/// pay for themselves.
pub(crate) struct Writer<'a> {
    out: &'a mut Vec<u8>,
    target: &'a [u8],
    /// Target bytes before the cursor are covered by written instructions or `pending`.
    cursor: usize,
    pending: Pending,
    prev_copy_end: usize,
}

/// Writes a delta of one Insert carrying the whole target: valid for any base, the fallback of
/// a codec that cannot encode.
///
/// # Panics
/// If `target` is longer than [`MAX_TARGET_LEN`].
pub(crate) fn write_literal(target: &[u8], out: &mut Vec<u8>) {
    Writer::new(out, target).finish();
}

/// Writes a delta of one Copy: `target` is the first `target.len()` bytes of the base.
///
/// # Panics
/// If `target` is longer than [`MAX_TARGET_LEN`].
pub(crate) fn write_copy_of_prefix(target: &[u8], out: &mut Vec<u8>) {
    let mut w = Writer::new(out, target);
    w.copy(0, 0, target.len());
    w.finish();
}

impl<'a> Writer<'a> {
    /// Starts a delta for `target` in `out` (writes the header).
    ///
    /// # Panics
    /// If `target` is longer than [`MAX_TARGET_LEN`]: no decoder would accept the delta.
    pub(crate) fn new(out: &'a mut Vec<u8>, target: &'a [u8]) -> Self {
        assert!(
            target.len() <= MAX_TARGET_LEN,
            "delta target of {} bytes exceeds the format's {} byte limit",
            target.len(),
            MAX_TARGET_LEN
        );
        out.push(FORMAT_VERSION);
        varint::put(out, target.len() as u64);
        Writer {
            out,
            target,
            cursor: 0,
            pending: Pending::Insert { start: 0 },
            prev_copy_end: 0,
        }
    }

    /// Target bytes before this position are already described.
    #[inline]
    pub(crate) fn cursor(&self) -> usize {
        self.cursor
    }

    /// Reports that `target[t..t + len] == base[b..b + len]`. Requires `t >= self.cursor()`;
    /// the bytes between the cursor and `t` become literal bytes.
    #[inline]
    pub(crate) fn copy(&mut self, t: usize, b: usize, len: usize) {
        debug_assert!(
            t >= self.cursor,
            "copy at {t} behind cursor {}",
            self.cursor
        );
        debug_assert!(t + len <= self.target.len());
        if len == 0 {
            return;
        }
        if t > self.cursor {
            self.start_insert();
            self.cursor = t;
        }
        match &mut self.pending {
            Pending::Copy { base, len: plen } if *base + *plen == b => *plen += len,
            _ if len < MIN_COPY_LEN => self.start_insert(),
            _ => {
                self.flush();
                self.pending = Pending::Copy { base: b, len };
            }
        }
        self.cursor = t + len;
    }

    /// Makes the bytes from the cursor on part of a pending Insert.
    #[inline]
    fn start_insert(&mut self) {
        if let Pending::Copy { .. } = self.pending {
            self.flush();
            self.pending = Pending::Insert { start: self.cursor };
        }
    }

    /// Writes the pending instruction (an empty Insert writes nothing).
    fn flush(&mut self) {
        match self.pending {
            Pending::Insert { start } => {
                let len = self.cursor - start;
                if len > 0 {
                    varint::put(self.out, (len as u64) << 1 | KIND_INSERT);
                    self.out.extend_from_slice(&self.target[start..self.cursor]);
                }
            }
            Pending::Copy { base, len } => {
                varint::put(self.out, (len as u64) << 1 | KIND_COPY);
                varint::put(self.out, zigzag(base as i64 - self.prev_copy_end as i64));
                self.prev_copy_end = base + len;
            }
        }
    }

    /// Writes the rest of the target as literal bytes and the last instruction.
    pub(crate) fn finish(mut self) {
        if self.cursor < self.target.len() {
            self.start_insert();
            self.cursor = self.target.len();
        }
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn zigzag_round_trip() {
        for v in [0i64, 1, -1, 63, -64, 64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
    }

    /// The worked example of docs/format.md ("Delta instructions"), byte for byte.
    #[test]
    fn doc_example_bytes() {
        let base = b"The quick brown fox jumps over the lazy dog";
        let target = b"The quick red fox jumps over the lazy dog!";
        let mut out = Vec::new();
        let mut w = Writer::new(&mut out, target);
        w.copy(0, 0, 10); // "The quick "
        w.copy(13, 15, 28); // " fox jumps over the lazy dog"
        w.finish();
        let expected: Vec<u8> = [
            &[0x01, 42][..],           // version 1, target length 42
            &[0x15, 0x00],             // Copy len 10, offset 0 - 0
            &[0x06, b'r', b'e', b'd'], // Insert len 3 "red"
            &[0x39, 0x0a],             // Copy len 28, offset 15 - 10 = +5
            &[0x02, b'!'],             // Insert len 1 "!"
        ]
        .concat();
        assert_eq!(out, expected);
        let mut rebuilt = Vec::new();
        decode(base, &out, &mut rebuilt).unwrap();
        assert_eq!(rebuilt, target);
    }

    #[test]
    fn writer_merges_and_drops_short_copies() {
        let base: Vec<u8> = (0..100u8).collect();
        let mut target = base.clone();
        target[50] = 0xff;
        let mut out = Vec::new();
        let mut w = Writer::new(&mut out, &target);
        w.copy(0, 0, 20);
        w.copy(20, 20, 30); // contiguous: merged
        w.copy(51, 51, 2); // short and not contiguous: literal
        w.copy(53, 53, 47); // contiguous in base with the dropped one, but not with a copy
        w.finish();
        let list = instructions(base.len(), &out).unwrap();
        assert_eq!(
            list,
            vec![
                Instruction::Copy { offset: 0, len: 50 },
                Instruction::Insert(&target[50..53]),
                Instruction::Copy {
                    offset: 53,
                    len: 47
                },
            ]
        );
    }

    #[test]
    fn empty_target_is_header_only() {
        let mut out = Vec::new();
        Writer::new(&mut out, b"").finish();
        assert_eq!(out, [FORMAT_VERSION, 0]);
        let mut rebuilt = vec![7];
        decode(b"base", &out, &mut rebuilt).unwrap();
        assert_eq!(rebuilt, [7]);
    }

    #[test]
    fn rejects_malformed() {
        let base = b"0123456789";
        let cases: &[(&[u8], &str)] = &[
            (&[], "empty"),
            (&[3, 0], "version"),
            (&[2, 5], "zstd: no frame"),
            (&[2, 5, 1, 2, 3, 4, 5, 6, 7, 8], "zstd: not a frame"),
            (
                &[2, 0xff, 0xff, 0xff, 0x0f, 0x28, 0xb5],
                "zstd: more than the frame can produce",
            ),
            (&[1], "no length"),
            (&[1, 0x80], "truncated length"),
            (&[1, 1], "short output"),
            (&[1, 1, 0x00], "zero-length insert"),
            (&[1, 1, 0x04, b'a', b'b'], "insert past declared length"),
            (&[1, 2, 0x04, b'a'], "insert past delta end"),
            (&[1, 4, 0x09, 0x14], "copy past base end"),
            (&[1, 4, 0x09, 0x01], "negative offset"),
            (&[1, 4, 0x09], "missing offset"),
            (&[1, 1, 0x02, b'a', 0x02], "trailing instruction"),
            (&[1, 0xff, 0xff, 0xff, 0xff, 0x0f], "huge target"),
        ];
        for (delta, what) in cases {
            let mut out = vec![9, 9];
            assert!(decode(base, delta, &mut out).is_err(), "{what}");
            assert_eq!(out, [9, 9], "{what}: out restored");
        }
    }

    #[test]
    fn copy_bounds_are_checked_at_the_edge() {
        let base = b"0123456789";
        // Copy len 4 at offset 6 ends exactly at the base end: fine.
        let mut out = Vec::new();
        decode(base, &[1, 4, 0x09, 12], &mut out).unwrap();
        assert_eq!(out, b"6789");
        // At offset 7 it does not fit.
        assert!(matches!(
            decode(base, &[1, 4, 0x09, 14], &mut Vec::new()),
            Err(DeltaError::CopyOutOfBase { .. })
        ));
    }

    proptest! {
        #[test]
        fn decode_never_panics(
            base in proptest::collection::vec(any::<u8>(), 0..64),
            delta in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut out = Vec::new();
            let _ = decode(&base, &delta, &mut out);
            let _ = instructions(base.len(), &delta);
        }

        /// Deltas that start with a valid header and small instructions, so that the fuzzing
        /// reaches the instruction checks rather than stopping at the version byte.
        #[test]
        fn decode_never_panics_structured(
            base in proptest::collection::vec(any::<u8>(), 0..64),
            target_len in 0u64..200,
            body in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut delta = vec![FORMAT_VERSION];
            varint::put(&mut delta, target_len);
            delta.extend_from_slice(&body);
            let mut out = Vec::new();
            match decode(&base, &delta, &mut out) {
                Ok(()) => {
                    prop_assert_eq!(out.len() as u64, target_len);
                    let list = instructions(base.len(), &delta);
                    prop_assert!(list.is_ok());
                }
                Err(_) => {
                    prop_assert!(out.is_empty());
                    prop_assert!(instructions(base.len(), &delta).is_err());
                }
            }
        }
    }
}

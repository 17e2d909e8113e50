//! Sealed objects: how an encrypted repository stores every object (but locks and key files),
//! so that any byte range of the plaintext can be read and authenticated on its own.
//!
//! The plaintext (P bytes) is cut into segments of [`SEGMENT_LEN`] bytes (the last one
//! shorter; an empty object has one empty segment), each encrypted with XChaCha20-Poly1305,
//! then a fixed trailer:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | len(segment 0) + 16 | segment 0 ciphertext, then its Poly1305 tag |
//! | ... | ... | segment 1, 2, ... the same way |
//! | C - 32 | 16 | nonce prefix: 16 random bytes, new for every object written |
//! | C - 16 | 8 | plaintext length P, u64 LE |
//! | C - 8 | 1 | log2 of the segment length (14: 16 KiB) |
//! | C - 7 | 1 | sealed-object version (1) |
//! | C - 6 | 2 | reserved, 0 |
//! | C - 4 | 4 | magic `DDSE` |
//!
//! Segment `i` is encrypted under the repository's data key with the 24-byte nonce
//! `prefix ‖ i` (u64 LE) and the associated data `trailer ‖ kind ‖ 0x00 ‖ name` (the object's
//! folder, such as `containers`, and its name). So a segment authenticates its position, the
//! object's length (truncation or extension fails), and which object it belongs to (an object
//! copied over another fails). The trailer is at the end so that a suffix read (a container's
//! metadata) brings it along.
//!
//! Decoders reject malformed input with [`SealError`], never panic (fuzz target
//! `sealed_object`).
//!
//! XChaCha20-Poly1305 is computed as its definition builds it (draft-irtf-cfrg-xchacha): a
//! subkey HChaCha20(key, nonce prefix) per object (RustCrypto's `chacha20`), then
//! ChaCha20-Poly1305 of each segment under that subkey with the nonce `0u32 ‖ i` (`ring`,
//! whose assembly seals and opens 16 KiB segments at 2.6 GB/s on this project's machine
//! against 1.1 GB/s for RustCrypto's `XChaCha20Poly1305`, which derived the subkey again for
//! every segment). The bytes are the same (test `the_segments_are_xchacha20_poly1305`).

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305};

/// Magic at the very end of a sealed object.
pub const SEALED_MAGIC: &[u8; 4] = b"DDSE";
/// The sealed-object version this build writes and reads.
pub const SEALED_VERSION: u8 = 1;
/// log2 of [`SEGMENT_LEN`].
pub const SEGMENT_LOG2: u8 = 14;
/// Plaintext bytes per segment: 16 KiB keeps the tags at 0.1 % of the data and a ranged read
/// at most 16 KiB longer at each end than asked.
pub const SEGMENT_LEN: usize = 1 << SEGMENT_LOG2;
/// Poly1305 tag bytes per segment.
pub const TAG_LEN: usize = 16;
/// Bytes of the trailer.
pub const TRAILER_LEN: usize = 32;
/// Bytes of the nonce prefix.
pub const NONCE_PREFIX_LEN: usize = 16;

/// Why a sealed object (or a part of one) could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// Too short, wrong magic, unknown version or segment length, lengths that disagree.
    #[error("not a sealed object ({0})")]
    Malformed(String),
    /// A segment failed authentication: the bytes were changed, or belong to another object
    /// or repository.
    #[error(
        "authentication failed in segment {0} (damaged, tampered with, or not this repository's)"
    )]
    Authentication(u64),
}

/// The parsed trailer of a sealed object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trailer {
    /// The object's nonce prefix.
    pub nonce_prefix: [u8; NONCE_PREFIX_LEN],
    /// Plaintext length.
    pub plain_len: u64,
}

impl Trailer {
    /// The encoded trailer.
    pub fn to_bytes(&self) -> [u8; TRAILER_LEN] {
        let mut t = [0u8; TRAILER_LEN];
        t[..16].copy_from_slice(&self.nonce_prefix);
        t[16..24].copy_from_slice(&self.plain_len.to_le_bytes());
        t[24] = SEGMENT_LOG2;
        t[25] = SEALED_VERSION;
        t[28..].copy_from_slice(SEALED_MAGIC);
        t
    }

    /// Parses the last [`TRAILER_LEN`] bytes of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, SealError> {
        let Some(start) = bytes.len().checked_sub(TRAILER_LEN) else {
            return Err(SealError::Malformed("shorter than its trailer".into()));
        };
        let t = &bytes[start..];
        if &t[28..] != SEALED_MAGIC {
            return Err(SealError::Malformed("no DDSE magic".into()));
        }
        if t[25] != SEALED_VERSION {
            return Err(SealError::Malformed(format!(
                "sealed-object version {} (this build reads {SEALED_VERSION})",
                t[25]
            )));
        }
        if t[24] != SEGMENT_LOG2 || t[26..28] != [0, 0] {
            return Err(SealError::Malformed(
                "unknown segment length or flags".into(),
            ));
        }
        let plain_len = u64::from_le_bytes(t[16..24].try_into().expect("8 bytes"));
        if plain_len > 1 << 48 {
            return Err(SealError::Malformed("implausible length".into()));
        }
        let mut nonce_prefix = [0u8; NONCE_PREFIX_LEN];
        nonce_prefix.copy_from_slice(&t[..16]);
        Ok(Trailer {
            nonce_prefix,
            plain_len,
        })
    }
}

/// Whether `bytes` end like a sealed object (for telling a sealed config from a plain one).
pub fn looks_sealed(bytes: &[u8]) -> bool {
    bytes.ends_with(SEALED_MAGIC)
}

/// Segments of a `plain_len`-byte object (an empty one has one empty segment).
pub fn segment_count(plain_len: u64) -> u64 {
    plain_len.div_ceil(SEGMENT_LEN as u64).max(1)
}

/// Sealed size of a `plain_len`-byte object.
pub fn sealed_len(plain_len: u64) -> u64 {
    plain_len + segment_count(plain_len) * TAG_LEN as u64 + TRAILER_LEN as u64
}

/// Plaintext size of a `sealed`-byte object, if some plaintext length seals to it.
pub fn plain_len_of(sealed: u64) -> Option<u64> {
    let body = sealed.checked_sub(TRAILER_LEN as u64)?;
    let n = body.div_ceil((SEGMENT_LEN + TAG_LEN) as u64).max(1);
    let p = body.checked_sub(n * TAG_LEN as u64)?;
    (sealed_len(p) == sealed).then_some(p)
}

/// Offset of segment `i`'s ciphertext in the sealed object.
pub fn segment_offset(i: u64) -> u64 {
    i * (SEGMENT_LEN + TAG_LEN) as u64
}

/// The sealed byte range (offset, length) holding plaintext `offset .. offset + len` of a
/// `plain_len`-byte object, and the first segment in it. `None` if the range is outside the
/// object.
pub fn sealed_span(plain_len: u64, offset: u64, len: u64) -> Option<(u64, u64, u64)> {
    let end = offset.checked_add(len)?;
    if end > plain_len {
        return None;
    }
    let first = offset / SEGMENT_LEN as u64;
    let last = if len == 0 {
        first
    } else {
        (end - 1) / SEGMENT_LEN as u64
    }
    .min(segment_count(plain_len) - 1);
    let start = segment_offset(first);
    let last_plain = (plain_len - last * SEGMENT_LEN as u64).min(SEGMENT_LEN as u64);
    let stop = segment_offset(last) + last_plain + TAG_LEN as u64;
    Some((start, stop - start, first))
}

/// What a segment's associated data binds besides the trailer: the object's folder and name.
#[derive(Clone, Copy, Debug)]
pub struct ObjectName<'a> {
    /// The object's folder (`containers`, `snapshots`, `` for the config, ...).
    pub kind: &'a str,
    /// The object's name.
    pub name: &'a str,
}

fn aad(trailer: &[u8; TRAILER_LEN], obj: ObjectName<'_>) -> Vec<u8> {
    let mut a = Vec::with_capacity(TRAILER_LEN + obj.kind.len() + 1 + obj.name.len());
    a.extend_from_slice(trailer);
    a.extend_from_slice(obj.kind.as_bytes());
    a.push(0);
    a.extend_from_slice(obj.name.as_bytes());
    a
}

/// The data key, which seals and opens segments ([`seal_into`], [`open_window`], ...).
pub struct SegmentCipher {
    key: zeroize::Zeroizing<[u8; 32]>,
}

impl std::fmt::Debug for SegmentCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SegmentCipher(..)")
    }
}

impl SegmentCipher {
    /// The key of the object whose nonce prefix is `prefix`: HChaCha20 of the data key.
    fn object_key(&self, prefix: &[u8; NONCE_PREFIX_LEN]) -> LessSafeKey {
        let mut sub = zeroize::Zeroizing::new([0u8; 32]);
        let mut derived = chacha20::hchacha::<chacha20::cipher::consts::U10>(
            chacha20::Key::from_slice(self.key.as_ref()),
            prefix.into(),
        );
        sub.copy_from_slice(&derived);
        zeroize::Zeroize::zeroize(derived.as_mut_slice());
        // A 32-byte key is all CHACHA20_POLY1305 asks for.
        LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, sub.as_ref()).expect("32-byte key"))
    }
}

/// Segment `i`'s nonce under its object's key: the last 8 bytes of the 24-byte XChaCha20
/// nonce `prefix ‖ i`, after 4 zero bytes.
fn nonce(i: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&i.to_le_bytes());
    Nonce::assume_unique_for_key(n)
}

/// Opens segment `i` in place (`text` then its `tag`); false if it fails authentication.
fn open_segment(key: &LessSafeKey, aad: &[u8], i: u64, text: &mut [u8], tag: &[u8]) -> bool {
    let Ok(tag) = ring::aead::Tag::try_from(tag) else {
        return false;
    };
    key.open_in_place_separate_tag(nonce(i), Aad::from(aad), tag, text, 0..)
        .is_ok()
}

/// The data key's cipher.
pub fn cipher(key: &[u8; 32]) -> SegmentCipher {
    SegmentCipher {
        key: zeroize::Zeroizing::new(*key),
    }
}

/// Seals `plain` as object `obj` with the nonce prefix `nonce_prefix` (random, new for every
/// object: see [`crate::crypto::random_bytes`]), appending to `out`.
pub fn seal_into(
    cipher: &SegmentCipher,
    nonce_prefix: [u8; NONCE_PREFIX_LEN],
    obj: ObjectName<'_>,
    plain: &[u8],
    out: &mut Vec<u8>,
) {
    let trailer = Trailer {
        nonce_prefix,
        plain_len: plain.len() as u64,
    }
    .to_bytes();
    let aad = aad(&trailer, obj);
    out.reserve(sealed_len(plain.len() as u64) as usize);
    let mut chunks: Vec<&[u8]> = plain.chunks(SEGMENT_LEN).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    let key = cipher.object_key(&nonce_prefix);
    for (i, seg) in chunks.into_iter().enumerate() {
        let at = out.len();
        out.extend_from_slice(seg);
        let tag = key
            .seal_in_place_separate_tag(nonce(i as u64), Aad::from(&aad[..]), &mut out[at..])
            // Only fails for a segment longer than 256 GiB.
            .expect("segment encrypts");
        out.extend_from_slice(tag.as_ref());
    }
    out.extend_from_slice(&trailer);
}

/// Where segments `first ..` lie in a window of `window_len` sealed bytes that starts at
/// segment `first` and ends with a segment (or with the last segment and the trailer): each
/// segment's number, offset in the window and plaintext length, in order. Yields an error, and
/// then stops, when the window ends inside a segment or runs past the object's last one.
fn window_segments(
    trailer: &Trailer,
    first: u64,
    window_len: usize,
) -> impl Iterator<Item = Result<(u64, usize, usize), SealError>> {
    let n = segment_count(trailer.plain_len);
    let plain_len = trailer.plain_len;
    let (mut at, mut i, mut done) = (0usize, first, false);
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        if i >= n {
            done = true;
            return Some(Err(SealError::Malformed("segment past the end".into())));
        }
        let len = (plain_len - i * SEGMENT_LEN as u64).min(SEGMENT_LEN as u64) as usize;
        if at + len + TAG_LEN > window_len {
            done = true;
            return Some(Err(SealError::Malformed("a segment is cut short".into())));
        }
        let segment = (i, at, len);
        at += len + TAG_LEN;
        i += 1;
        let rest = window_len - at;
        done = rest == 0 || (i == n && rest == TRAILER_LEN);
        Some(Ok(segment))
    })
}

/// Opens segments `first ..` of object `obj` whose trailer is `trailer`, from `window`: the
/// sealed bytes from segment `first`'s start through the end of a segment (the trailer may
/// follow and is ignored). Appends the plaintext to `out`.
pub fn open_window(
    cipher: &SegmentCipher,
    trailer: &Trailer,
    obj: ObjectName<'_>,
    first: u64,
    window: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), SealError> {
    let aad = aad(&trailer.to_bytes(), obj);
    let key = cipher.object_key(&trailer.nonce_prefix);
    for segment in window_segments(trailer, first, window.len()) {
        let (i, at, len) = segment?;
        let start = out.len();
        out.extend_from_slice(&window[at..at + len]);
        let tag = &window[at + len..at + len + TAG_LEN];
        if !open_segment(&key, &aad, i, &mut out[start..], tag) {
            out.truncate(start);
            return Err(SealError::Authentication(i));
        }
    }
    Ok(())
}

/// [`open_window`] decrypting in place in `window` (no copy of the sealed bytes): calls
/// `plain` with each segment's plaintext, in order, once it is authenticated. A segment that
/// fails stops the walk with its error (the segments before it were handed out).
pub fn open_window_in_place(
    cipher: &SegmentCipher,
    trailer: &Trailer,
    obj: ObjectName<'_>,
    first: u64,
    window: &mut [u8],
    mut plain: impl FnMut(&[u8]),
) -> Result<(), SealError> {
    let aad = aad(&trailer.to_bytes(), obj);
    let key = cipher.object_key(&trailer.nonce_prefix);
    for segment in window_segments(trailer, first, window.len()) {
        let (i, at, len) = segment?;
        let (text, tag) = window[at..at + len + TAG_LEN].split_at_mut(len);
        if !open_segment(&key, &aad, i, text, tag) {
            return Err(SealError::Authentication(i));
        }
        plain(text);
    }
    Ok(())
}

/// Opens a whole sealed object, putting zeros in place of the segments that fail
/// authentication; returns the plaintext and those segments' numbers. For containers read
/// whole, whose readers check the bytes against the container's name and then entry by entry
/// (as they find damage in a plain repository), so that one damaged segment costs only the
/// chunks in it. Errors only for a malformed trailer or length.
pub fn open_salvaging(
    cipher: &SegmentCipher,
    obj: ObjectName<'_>,
    sealed: &[u8],
) -> Result<(Vec<u8>, Vec<u64>), SealError> {
    let trailer = Trailer::parse(sealed)?;
    if sealed_len(trailer.plain_len) != sealed.len() as u64 {
        return Err(SealError::Malformed(format!(
            "{} bytes where its trailer implies {}",
            sealed.len(),
            sealed_len(trailer.plain_len)
        )));
    }
    let mut out = Vec::with_capacity(trailer.plain_len as usize);
    let mut damaged = Vec::new();
    for i in 0..segment_count(trailer.plain_len) {
        let at = segment_offset(i) as usize;
        let plain = (trailer.plain_len - i * SEGMENT_LEN as u64).min(SEGMENT_LEN as u64) as usize;
        let window = &sealed[at..at + plain + TAG_LEN];
        if open_window(cipher, &trailer, obj, i, window, &mut out).is_err() {
            out.resize(out.len() + plain, 0);
            damaged.push(i);
        }
    }
    Ok((out, damaged))
}

/// Opens a whole sealed object.
pub fn open(
    cipher: &SegmentCipher,
    obj: ObjectName<'_>,
    sealed: &[u8],
) -> Result<Vec<u8>, SealError> {
    let trailer = Trailer::parse(sealed)?;
    if sealed_len(trailer.plain_len) != sealed.len() as u64 {
        return Err(SealError::Malformed(format!(
            "{} bytes where its trailer implies {}",
            sealed.len(),
            sealed_len(trailer.plain_len)
        )));
    }
    let mut out = Vec::with_capacity(trailer.plain_len as usize);
    open_window(cipher, &trailer, obj, 0, sealed, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The segments are XChaCha20-Poly1305 with the 24-byte nonce `prefix ‖ i`, byte for
    /// byte as RustCrypto's `XChaCha20Poly1305` seals them (the cipher sealed objects were
    /// written with until 2026-11-29), both ways.
    #[test]
    fn the_segments_are_xchacha20_poly1305() {
        use chacha20poly1305::aead::{AeadInPlace, KeyInit};
        use chacha20poly1305::{Key, Tag, XChaCha20Poly1305, XNonce};
        let key = [0x42u8; 32];
        let prefix = [0x17u8; NONCE_PREFIX_LEN];
        let plain: Vec<u8> = (0..SEGMENT_LEN * 2 + 1000)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let mut ours = Vec::new();
        seal_into(&cipher(&key), prefix, OBJ, &plain, &mut ours);
        let reference = XChaCha20Poly1305::new(Key::from_slice(&key));
        let trailer = Trailer::parse(&ours).unwrap();
        let aad = aad(&trailer.to_bytes(), OBJ);
        let mut theirs = Vec::new();
        for (i, seg) in plain.chunks(SEGMENT_LEN).enumerate() {
            let mut n = [0u8; 24];
            n[..16].copy_from_slice(&prefix);
            n[16..].copy_from_slice(&(i as u64).to_le_bytes());
            let mut text = seg.to_vec();
            let tag: Tag = reference
                .encrypt_in_place_detached(&XNonce::from(n), &aad, &mut text)
                .unwrap();
            theirs.extend_from_slice(&text);
            theirs.extend_from_slice(&tag);
        }
        theirs.extend_from_slice(&trailer.to_bytes());
        assert_eq!(ours, theirs, "the same sealed bytes");
        assert_eq!(open(&cipher(&key), OBJ, &theirs).unwrap(), plain);
    }

    const OBJ: ObjectName<'static> = ObjectName {
        kind: "containers",
        name: "abc",
    };

    fn sealed(plain: &[u8]) -> (SegmentCipher, Vec<u8>) {
        let c = cipher(&[7; 32]);
        let mut out = Vec::new();
        seal_into(&c, [9; 16], OBJ, plain, &mut out);
        (c, out)
    }

    #[test]
    fn lengths_invert() {
        for p in [0u64, 1, 16383, 16384, 16385, 100_000, 1 << 22] {
            assert_eq!(plain_len_of(sealed_len(p)), Some(p), "{p}");
        }
        assert_eq!(plain_len_of(10), None);
        // A length no plaintext seals to.
        assert_eq!(plain_len_of(sealed_len(16384) + 1), None);
    }

    #[test]
    fn round_trip_and_ranges() {
        let plain: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let (c, s) = sealed(&plain);
        assert_eq!(s.len() as u64, sealed_len(plain.len() as u64));
        assert_eq!(open(&c, OBJ, &s).unwrap(), plain);
        let t = Trailer::parse(&s).unwrap();
        for (off, len) in [
            (0u64, 1u64),
            (16383, 2),
            (50_000, 49_999),
            (99_999, 1),
            (5, 0),
        ] {
            let (so, sl, first) = sealed_span(t.plain_len, off, len).unwrap();
            let mut out = Vec::new();
            open_window(
                &c,
                &t,
                OBJ,
                first,
                &s[so as usize..(so + sl) as usize],
                &mut out,
            )
            .unwrap();
            let skip = (off - first * SEGMENT_LEN as u64) as usize;
            assert_eq!(
                &out[skip..skip + len as usize],
                &plain[off as usize..(off + len) as usize]
            );
            // In place: the same plaintext, segment by segment.
            let mut window = s[so as usize..(so + sl) as usize].to_vec();
            let mut in_place = Vec::new();
            open_window_in_place(&c, &t, OBJ, first, &mut window, |p| {
                in_place.extend_from_slice(p)
            })
            .unwrap();
            assert_eq!(in_place, out);
            window[3] ^= 1;
            assert_eq!(
                open_window_in_place(&c, &t, OBJ, first, &mut window, |_| {}),
                Err(SealError::Authentication(first))
            );
        }
        assert!(sealed_span(t.plain_len, 99_999, 2).is_none());
        let (c, e) = sealed(b"");
        assert_eq!(open(&c, OBJ, &e).unwrap(), b"");
    }

    #[test]
    fn every_flipped_byte_and_other_names_fail() {
        let plain = vec![3u8; 40_000];
        let (c, s) = sealed(&plain);
        for i in (0..s.len()).step_by(97).chain([s.len() - 1, s.len() - 20]) {
            let mut bad = s.clone();
            bad[i] ^= 1;
            assert!(open(&c, OBJ, &bad).is_err(), "byte {i}");
        }
        let other = ObjectName {
            kind: "snapshots",
            name: "abc",
        };
        assert_eq!(open(&c, other, &s), Err(SealError::Authentication(0)));
        assert!(open(&cipher(&[8; 32]), OBJ, &s).is_err());
        // Salvaging keeps the other segments and zeroes the damaged one.
        let mut bad = s.clone();
        bad[segment_offset(1) as usize + 5] ^= 1;
        let (got, damaged) = open_salvaging(&c, OBJ, &bad).unwrap();
        assert_eq!(damaged, vec![1]);
        assert_eq!(got[..SEGMENT_LEN], plain[..SEGMENT_LEN]);
        assert!(got[SEGMENT_LEN..2 * SEGMENT_LEN].iter().all(|&b| b == 0));
        assert_eq!(got[2 * SEGMENT_LEN..], plain[2 * SEGMENT_LEN..]);
        // Truncated by a segment, with the trailer put back.
        let mut cut = s[..segment_offset(1) as usize].to_vec();
        cut.extend_from_slice(&s[s.len() - TRAILER_LEN..]);
        assert!(open(&c, OBJ, &cut).is_err());
    }
}

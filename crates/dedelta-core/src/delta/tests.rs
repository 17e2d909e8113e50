//! Tests every codec through the public API: round trips on random, similar and edge inputs,
//! delta sizes on similar inputs, and a decoder that survives hostile bytes.

use super::format::{self, Instruction};
use super::{new_codec, DeltaCodec, DeltaKind};
use proptest::prelude::*;

fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Text-like data: words from a small vocabulary, so that short repeats abound as in source
/// code (the hard case for string matching: many false candidates).
fn text(len: usize, seed: u64) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "self", "def ", "return", " = ", "None", "import", "class ", "(", ")", ":\n    ", "if ",
        "else", "for ", " in ", "session", "query", ", ", "\n", "    ", "table",
    ];
    let r = noise(len, seed);
    let mut out = Vec::with_capacity(len + 16);
    let mut i = 0;
    while out.len() < len {
        out.extend_from_slice(WORDS[usize::from(r[i % r.len()]) % WORDS.len()].as_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

/// One edit of a similar pair.
#[derive(Clone, Debug)]
enum Edit {
    /// Overwrite bytes at a position (fraction of the length).
    Replace(f64, Vec<u8>),
    /// Insert bytes.
    Insert(f64, Vec<u8>),
    /// Delete a run.
    Delete(f64, usize),
}

fn apply(base: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut t = base.to_vec();
    for e in edits {
        let at = |f: f64, len: usize| ((f * len as f64) as usize).min(len);
        match e {
            Edit::Replace(f, bytes) => {
                let p = at(*f, t.len());
                for (i, &b) in bytes.iter().enumerate() {
                    if let Some(x) = t.get_mut(p + i) {
                        *x = b;
                    }
                }
            }
            Edit::Insert(f, bytes) => {
                let p = at(*f, t.len());
                t.splice(p..p, bytes.iter().copied());
            }
            Edit::Delete(f, n) => {
                let p = at(*f, t.len());
                let end = (p + n).min(t.len());
                t.drain(p..end);
            }
        }
    }
    t
}

fn edit_strategy() -> impl Strategy<Value = Edit> {
    let bytes = proptest::collection::vec(any::<u8>(), 1..40);
    prop_oneof![
        (0.0..1.0f64, bytes.clone()).prop_map(|(f, b)| Edit::Replace(f, b)),
        (0.0..1.0f64, bytes).prop_map(|(f, b)| Edit::Insert(f, b)),
        (0.0..1.0f64, 1usize..200).prop_map(|(f, n)| Edit::Delete(f, n)),
    ]
}

fn codecs() -> Vec<Box<dyn DeltaCodec>> {
    DeltaKind::ALL.into_iter().map(new_codec).collect()
}

fn round_trip(codec: &dyn DeltaCodec, base: &[u8], target: &[u8]) -> Vec<u8> {
    let mut delta = vec![0xAA]; // encode appends: keep a prefix to check that
    codec.encode(base, target, &mut delta);
    assert_eq!(delta[0], 0xAA, "{}: encode must append", codec.name());
    let delta = delta.split_off(1);
    let mut rebuilt = vec![0x55];
    codec
        .decode(base, &delta, &mut rebuilt)
        .unwrap_or_else(|e| panic!("{}: {e}", codec.name()));
    assert_eq!(rebuilt[0], 0x55, "{}: decode must append", codec.name());
    assert!(
        rebuilt[1..] == *target,
        "{}: round trip differs (base {} B, target {} B)",
        codec.name(),
        base.len(),
        target.len()
    );
    check_canonical(codec, base, &delta);
    delta
}

/// The writer's merging rules hold: no two Inserts in a row, no Copy continuing the previous
/// one in the base, no Copy shorter than the minimum unless it extends nothing (impossible).
fn check_canonical(codec: &dyn DeltaCodec, base: &[u8], delta: &[u8]) {
    if delta.first() == Some(&super::zstd_ref::ZSTD_FORMAT_VERSION) {
        return; // a zstd frame, not instructions
    }
    let list = format::instructions(base.len(), delta).expect("valid");
    for pair in list.windows(2) {
        match pair {
            [Instruction::Insert(_), Instruction::Insert(_)] => {
                panic!("{}: adjacent inserts", codec.name())
            }
            [Instruction::Copy { offset: a, len }, Instruction::Copy { offset: b, .. }] => {
                assert_ne!(a + len, *b, "{}: mergeable copies", codec.name())
            }
            _ => {}
        }
    }
    for i in &list {
        if let Instruction::Copy { len, .. } = i {
            assert!(*len >= format::MIN_COPY_LEN, "{}: short copy", codec.name());
        }
    }
}

#[test]
fn names_match_kinds() {
    for kind in DeltaKind::ALL {
        assert_eq!(new_codec(kind).name(), kind.name());
        assert_eq!(DeltaKind::from_name(kind.name()), Some(kind));
    }
}

#[test]
fn edge_cases_round_trip() {
    let big = noise(64 * 1024, 1);
    let mut big_edit = big.clone();
    big_edit[40_000] ^= 1;
    let cases: Vec<(&str, Vec<u8>, Vec<u8>)> = vec![
        ("both empty", vec![], vec![]),
        ("empty target", noise(100, 2), vec![]),
        ("empty base", vec![], noise(100, 3)),
        ("identical", noise(5000, 4), noise(5000, 4)),
        ("unrelated", noise(5000, 5), noise(5000, 6)),
        ("one byte", vec![7], vec![7]),
        ("one byte differs", vec![7], vec![8]),
        ("one byte vs long", vec![7], noise(300, 7)),
        ("long vs one byte", noise(300, 8), vec![9]),
        ("zeros", vec![0; 10_000], vec![0; 12_000]),
        ("zeros vs ones", vec![0; 10_000], vec![1; 10_000]),
        ("64 KiB identical", big.clone(), big.clone()),
        ("64 KiB one flip", big.clone(), big_edit),
        (
            "target is base twice",
            noise(3000, 9),
            noise(3000, 9).repeat(2),
        ),
        (
            "shifted by one",
            noise(4000, 10)[1..].to_vec(),
            noise(4000, 10),
        ),
        ("short", b"abcdefgh".to_vec(), b"abcdefgX".to_vec()),
    ];
    for codec in codecs() {
        for (what, base, target) in &cases {
            let delta = round_trip(codec.as_ref(), base, target);
            assert_eq!(format::target_len(&delta), Ok(target.len()), "{what}");
        }
    }
}

#[test]
fn identical_and_prefix_are_one_copy() {
    let base = noise(8192, 12);
    for codec in codecs() {
        // A zstd frame has its own headers (frame, block, sequence section).
        let most = if codec.name() == "zstd" { 24 } else { 8 };
        let delta = round_trip(codec.as_ref(), &base, &base);
        assert!(
            delta.len() <= most,
            "{}: {} bytes",
            codec.name(),
            delta.len()
        );
        let delta = round_trip(codec.as_ref(), &base, &base[..5000]);
        assert!(
            delta.len() <= most,
            "{}: {} bytes",
            codec.name(),
            delta.len()
        );
    }
}

/// The acceptance check: a one-edit 8 KiB chunk deltas to under 10% of its size.
#[test]
fn one_edit_8k_is_small() {
    for (kind, base) in [("noise", noise(8192, 13)), ("text", text(8192, 13))] {
        for edit in [
            Edit::Replace(0.5, b"EDITED".to_vec()),
            Edit::Insert(0.3, b"inserted".to_vec()),
            Edit::Delete(0.7, 20),
        ] {
            let target = apply(&base, std::slice::from_ref(&edit));
            for codec in codecs() {
                let delta = round_trip(codec.as_ref(), &base, &target);
                assert!(
                    delta.len() < target.len() / 10,
                    "{} on {kind} with {edit:?}: {} bytes",
                    codec.name(),
                    delta.len()
                );
            }
        }
    }
}

/// Scattered edits still give small deltas, and Ddelta/Edelta stay near the baseline.
#[test]
fn scattered_edits_are_small() {
    let base = text(8192, 14);
    let edits: Vec<Edit> = (0..8)
        .map(|i| Edit::Replace(0.05 + 0.12 * f64::from(i), b"##".to_vec()))
        .collect();
    let target = apply(&base, &edits);
    let sizes: Vec<usize> = codecs()
        .iter()
        .map(|c| round_trip(c.as_ref(), &base, &target).len())
        .collect();
    for s in &sizes {
        assert!(*s < 300, "{sizes:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_pairs_round_trip(
        base in proptest::collection::vec(any::<u8>(), 0..600),
        target in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        for codec in codecs() {
            round_trip(codec.as_ref(), &base, &target);
        }
    }

    /// Small alphabets make many false fingerprint and window candidates.
    #[test]
    fn small_alphabet_pairs_round_trip(
        base in proptest::collection::vec(0u8..3, 0..2000),
        target in proptest::collection::vec(0u8..3, 0..2000),
    ) {
        for codec in codecs() {
            round_trip(codec.as_ref(), &base, &target);
        }
    }

    #[test]
    fn similar_pairs_round_trip(
        seed in any::<u64>(),
        len in 0usize..20_000,
        textual in any::<bool>(),
        edits in proptest::collection::vec(edit_strategy(), 0..12),
    ) {
        let base = if textual { text(len, seed) } else { noise(len, seed) };
        let target = apply(&base, &edits);
        for codec in codecs() {
            let delta = round_trip(codec.as_ref(), &base, &target);
            // Each edit costs at most its bytes plus a few instruction heads; allow the
            // string codecs a string or two of lost context per edit.
            let edit_bytes: usize = edits.iter().map(|e| match e {
                Edit::Replace(_, b) | Edit::Insert(_, b) => b.len(),
                Edit::Delete(..) => 0,
            }).sum();
            let bound = 16 + edit_bytes + 300 * edits.len();
            prop_assert!(delta.len() <= bound.max(target.len() / 10 + 16) || delta.len() <= target.len() + 8,
                "{}: {} bytes for {} edits", codec.name(), delta.len(), edits.len());
        }
    }

    #[test]
    fn decode_never_panics_on_random_deltas(
        base in proptest::collection::vec(any::<u8>(), 0..256),
        delta in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        for codec in codecs() {
            let mut out = Vec::new();
            if codec.decode(&base, &delta, &mut out).is_err() {
                prop_assert!(out.is_empty());
            }
        }
    }

    /// Mutated valid deltas reach deep into the decoder: flip, truncate or extend them.
    #[test]
    fn decode_never_panics_on_mutated_deltas(
        seed in any::<u64>(),
        edits in proptest::collection::vec(edit_strategy(), 1..6),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
        other_base in any::<bool>(),
    ) {
        let base = text(3000, seed);
        let target = apply(&base, &edits);
        for codec in codecs() {
            let mut delta = Vec::new();
            codec.encode(&base, &target, &mut delta);
            let mut mutated = delta.clone();
            for (i, v) in &flips {
                let i = i.index(mutated.len());
                mutated[i] ^= v | 1;
            }
            let decode_base = if other_base { &base[..base.len() / 2] } else { &base[..] };
            let mut out = Vec::new();
            let _ = codec.decode(decode_base, &mutated, &mut out);
            let truncated = &delta[..cut.index(delta.len())];
            let mut out = Vec::new();
            prop_assert!(codec.decode(&base, truncated, &mut out).is_err());
            let mut longer = delta.clone();
            longer.push(0x02);
            longer.push(b'x');
            prop_assert!(codec.decode(&base, &longer, &mut Vec::new()).is_err());
        }
    }
}

//! Entry points for the fuzz targets: the decoders of the index's files.

use super::*;

/// Decodes `bytes` as a manifest; one that decodes encodes back to the same bytes (an older
/// version's to a current manifest that decodes to the same), and gives a reader's view
/// (its superseded entries placed in their containers) without a panic.
pub fn manifest(bytes: &[u8]) {
    if let Ok(m) = Manifest::decode(bytes) {
        let view = View::new(Vec::new(), m.slots.clone(), &m.superseded);
        let placed: usize = view.superseded.values().map(Vec::len).sum();
        assert!(placed <= m.superseded.len());
        let again = m.encode();
        if bytes.get(8..12) == Some(&manifest::VERSION.to_le_bytes()[..]) {
            assert_eq!(again, bytes);
        }
        assert_eq!(Manifest::decode(&again), Ok(m));
    }
}

/// Decodes a locality backup's hints file; one that decodes encodes back to the same
/// bytes.
pub fn recent(bytes: &[u8]) {
    if let Some(ids) = super::recent::decode(bytes) {
        assert_eq!(super::recent::encode(&ids), bytes);
    }
}

/// Decodes `bytes` as a fingerprint filter file; one that decodes encodes back to the
/// same bytes, and tests run without a panic.
pub fn filter(bytes: &[u8]) {
    if let Ok(f) = FingerprintFilter::decode(bytes) {
        assert_eq!(f.encode(), bytes);
        let _ = f.contains(&ChunkId([0x5a; 32]));
        f.insert(&ChunkId([0xa5; 32]));
        assert!(f.contains(&ChunkId([0xa5; 32])));
    }
}

/// Opens the file at `path` as a run and, if it opens, reads every entry and looks some
/// up: malformed bytes give errors, never a panic.
pub fn run(path: &Path) {
    let Ok(run) = Run::open(path, 0) else { return };
    let mut ids = Vec::new();
    let mut c = run.chunk_cursor();
    while let Ok(Some(run::Entry::Chunk(id, _))) = c.next() {
        ids.push(id);
    }
    let mut s = run.sketch_cursor();
    let mut keys = Vec::new();
    while let Ok(Some(run::Entry::Sketch(key, _))) = s.next() {
        keys.push(key);
    }
    for id in ids.iter().take(64) {
        let _ = run.get(&ChunkId(*id));
    }
    let _ = run.get(&ChunkId([0xa5; 32]));
    for key in keys.iter().take(64).copied().chain([0, run::MAX_KEY]) {
        let _ = run.sketch(key);
    }
}

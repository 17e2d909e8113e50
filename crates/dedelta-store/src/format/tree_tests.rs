//! Tests of the tree stream encoding.

use super::*;
use proptest::prelude::*;

fn node(path: &str, kind: NodeKind) -> Node {
    Node {
        path: path.as_bytes().to_vec(),
        kind,
        mode: 0o100644,
        mtime_secs: -5,
        mtime_nanos: 999,
        size: if kind == NodeKind::File { 10 } else { 0 },
        target: if kind == NodeKind::Symlink {
            b"../x".to_vec()
        } else {
            vec![]
        },
        meta: NodeMeta::default(),
    }
}

#[test]
fn round_trip() {
    let mut enc = TreeEncoder::default();
    let mut out = Vec::new();
    enc.begin(&mut out);
    enc.node(&node("a", NodeKind::Dir), &mut out);
    enc.file_start(&node("a/b.txt", NodeKind::File), &mut out);
    let r = ChunkRef {
        id: ChunkId::of(b"x"),
        len: 10,
    };
    enc.chunk(&r, &mut out);
    enc.file_end(&mut out);
    enc.node(&node("a/c", NodeKind::Symlink), &mut out);
    enc.end(&mut out);
    let mut dec = TreeDecoder::new(&out[..]);
    assert_eq!(
        dec.next_node().unwrap().unwrap().0,
        node("a", NodeKind::Dir)
    );
    let (n, c) = dec.next_node().unwrap().unwrap();
    assert_eq!(n, node("a/b.txt", NodeKind::File));
    assert_eq!(c, vec![r]);
    assert_eq!(
        dec.next_node().unwrap().unwrap().0,
        node("a/c", NodeKind::Symlink)
    );
    assert!(dec.next_node().unwrap().is_none());
}

/// The three records of [`layout_matches_the_doc`] with their version 2 fields set.
fn doc_nodes() -> (Node, Node, Node) {
    let dir = Node {
        path: b"a".to_vec(),
        kind: NodeKind::Dir,
        mode: 0o40755,
        mtime_secs: 5,
        mtime_nanos: 0,
        size: 0,
        target: vec![],
        meta: NodeMeta::default(),
    };
    let file = Node {
        path: b"a/b".to_vec(),
        kind: NodeKind::File,
        mode: 0o100644,
        mtime_secs: -1,
        mtime_nanos: 300,
        size: 200,
        target: vec![],
        meta: NodeMeta {
            uid: 1000,
            gid: 100,
            user: "me".into(),
            group: "us".into(),
            atime: Timestamp { secs: 7, nanos: 1 },
            ctime: Timestamp { secs: 8, nanos: 2 },
            dev: 3,
            ino: 300,
            nlink: 2,
            rdev: 0,
            flags: FLAG_SPARSE,
            xattrs: vec![(b"user.k".to_vec(), b"v".to_vec())],
        },
    };
    let link = Node {
        path: b"a/c".to_vec(),
        kind: NodeKind::Symlink,
        mode: 0o120777,
        mtime_secs: 0,
        mtime_nanos: 0,
        size: 0,
        target: b"b".to_vec(),
        meta: NodeMeta::default(),
    };
    (dir, file, link)
}

/// The byte table of docs/format.md ("Tree stream"), on a three-record stream.
#[test]
fn layout_matches_the_doc() {
    let id = ChunkId([0xab; 32]);
    let (dir, file, link) = doc_nodes();
    let mut enc = TreeEncoder::default();
    let mut out = Vec::new();
    enc.begin(&mut out);
    enc.node(&dir, &mut out);
    enc.file_start(&file, &mut out);
    enc.chunk(&ChunkRef { id, len: 200 }, &mut out);
    enc.file_end(&mut out);
    enc.node(&link, &mut out);
    enc.end(&mut out);
    // No owner, times, inode or attributes: 13 zero varints.
    let none = [0u8; 13];
    let expected: Vec<u8> = [
        &b"DDTR\x02"[..],
        // directory "a": tag, shared 0, suffix "a", mode 0o40755, mtime 5 (zigzag 10), 0 ns
        &[1, 0, 1, b'a', 0xed, 0x83, 0x01, 10, 0],
        &none,
        // file "a/b": shared 1, suffix "/b", mode 0o100644, mtime -1 (zigzag 1), 300 ns
        &[2, 1, 2, b'/', b'b', 0xa4, 0x83, 0x02, 1, 0xac, 0x02],
        // flags 1 (sparse), uid 1000, gid 100, user "me", group "us"
        &[1, 0xe8, 0x07, 100, 2, b'm', b'e', 2, b'u', b's'],
        // atime 7 s (zigzag 14) 1 ns, ctime 8 s (zigzag 16) 2 ns, dev 3, ino 300, nlink 2
        &[14, 1, 16, 2, 3, 0xac, 0x02, 2],
        // one attribute: "user.k" = "v"
        &[1, 6, b'u', b's', b'e', b'r', b'.', b'k', 1, b'v'],
        // size 200, one chunk of 200 bytes, then 0
        &[0xc8, 0x01, 0xc8, 0x01],
        &[0xab; 32],
        &[0],
        // symlink "a/c": shared 2, suffix "c", mode 0o120777, mtime 0, 0 ns, ..., target "b"
        &[3, 2, 1, b'c', 0xff, 0xc3, 0x02, 0, 0],
        &none,
        &[1, b'b'],
        // end
        &[0],
    ]
    .concat();
    assert_eq!(out, expected);
    let mut dec = TreeDecoder::new(&out[..]);
    assert_eq!(dec.next_node().unwrap().unwrap().0, dir);
    assert_eq!(
        dec.next_node().unwrap().unwrap(),
        (file, vec![ChunkRef { id, len: 200 }])
    );
    assert_eq!(dec.next_node().unwrap().unwrap().0, link);
    assert!(dec.next_node().unwrap().is_none());
}

/// A version 1 stream (as every repository before tree version 2 holds) still reads, its
/// nodes without the version 2 fields.
#[test]
fn version_1_streams_still_read() {
    let id = ChunkId([0xab; 32]);
    let v1: Vec<u8> = [
        &b"DDTR\x01"[..],
        &[1, 0, 1, b'a', 0xed, 0x83, 0x01, 10, 0],
        &[
            2, 1, 2, b'/', b'b', 0xa4, 0x83, 0x02, 1, 0xac, 0x02, 0xc8, 0x01, 0xc8, 0x01,
        ],
        &[0xab; 32],
        &[0],
        &[3, 2, 1, b'c', 0xff, 0xc3, 0x02, 0, 0, 1, b'b'],
        &[0],
    ]
    .concat();
    let (dir, mut file, link) = doc_nodes();
    file.meta = NodeMeta::default();
    let mut dec = TreeDecoder::new(&v1[..]);
    assert_eq!(dec.next_node().unwrap().unwrap().0, dir);
    assert_eq!(
        dec.next_node().unwrap().unwrap(),
        (file, vec![ChunkRef { id, len: 200 }])
    );
    assert_eq!(dec.next_node().unwrap().unwrap().0, link);
    assert!(dec.next_node().unwrap().is_none());
    // The special-file tags are version 2's.
    let fifo_in_v1 = b"DDTR\x01\x04\x00\x01a\x00\x00\x00\x00";
    assert!(TreeDecoder::new(&fifo_in_v1[..]).next_node().is_err());
}

/// Every kind round-trips with its metadata, a device with its number.
#[test]
fn special_files_round_trip() {
    let mut out = Vec::new();
    let mut enc = TreeEncoder::default();
    enc.begin(&mut out);
    let mut nodes = Vec::new();
    for (i, kind) in [
        NodeKind::Fifo,
        NodeKind::Socket,
        NodeKind::CharDevice,
        NodeKind::BlockDevice,
    ]
    .into_iter()
    .enumerate()
    {
        let mut n = node(&format!("d/{i}\u{e9}"), kind);
        n.path.push(0xff); // not UTF-8
        n.meta.uid = 7;
        n.meta.rdev = if kind.is_device() { 0x0801 } else { 0 };
        n.meta.xattrs = vec![(b"system.posix_acl_access".to_vec(), vec![2, 0, 0, 0])];
        enc.node(&n, &mut out);
        nodes.push(n);
    }
    enc.end(&mut out);
    let mut dec = TreeDecoder::new(&out[..]);
    for n in nodes {
        assert_eq!(dec.next_node().unwrap().unwrap().0, n);
    }
    assert!(dec.next_node().unwrap().is_none());
}

/// Nothing may follow the end tag.
#[test]
fn bytes_after_the_end_are_refused() {
    let mut out = Vec::new();
    let mut enc = TreeEncoder::default();
    enc.begin(&mut out);
    enc.end(&mut out);
    assert!(TreeDecoder::new(&out[..]).next_node().unwrap().is_none());
    out.push(0);
    let err = TreeDecoder::new(&out[..]).next_node().unwrap_err();
    assert!(err.to_string().contains("end record"), "{err}");
}

/// Header, tags and bounds the document lists as invalid.
#[test]
fn invalid_streams_are_refused() {
    let cases: &[(&[u8], &str)] = &[
        (b"DDTR\x03\x00", "version 3"),
        (b"DDTX\x01\x00", "magic"),
        (b"DDTR\x01\x04", "tag 4"),
        (b"DDTR\x02\x08", "tag 8"),
        (
            b"DDTR\x01\x01\x01\x00",
            "shared prefix longer than the previous path",
        ),
        // directory "a", nanoseconds 10^9
        (
            b"DDTR\x01\x01\x00\x01a\x00\x00\x80\x94\xeb\xdc\x03",
            "nanoseconds",
        ),
        // suffix longer than 64 KiB
        (b"DDTR\x01\x01\x00\x81\x80\x04", "suffix length"),
        // 11-byte varint for the mode
        (
            b"DDTR\x01\x01\x00\x01a\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00",
            "overlong varint",
        ),
    ];
    for (bytes, what) in cases {
        let mut dec = TreeDecoder::new(*bytes);
        let mut failed = false;
        for _ in 0..4 {
            match dec.next_node() {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        assert!(failed, "{what} accepted");
    }
}

proptest! {
    #[test]
    fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut data = b"DDTR\x02".to_vec();
        data.extend_from_slice(&bytes);
        let mut dec = TreeDecoder::new(&data[..]);
        for _ in 0..50 {
            match dec.next_node() { Ok(Some(_)) => {}, _ => break }
        }
    }
}

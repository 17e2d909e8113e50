//! Database-snapshot series: RDB dumps of a real Redis server under a seeded workload.
//!
//! Version 0 is an application's cache and session store (sessions and users as hashes,
//! cached pages as strings, counters, activity feeds as lists, tag sets, leaderboards as
//! sorted sets; sessions and pages carry an expiry). Each later version updates a fraction of
//! the keys, inserts new ones and deletes some (as `allkeys-random` eviction would: any kind),
//! then `SAVE` writes `dump.rdb`, which is copied as the next version: the file a backup of a
//! Redis server picks up between runs.
//!
//! The server is a real `redis-server` (`scripts/install-peers.sh`), one per series, started
//! with no TCP port (a Unix socket in a private temporary directory), no automatic saves and no
//! AOF, so only our `SAVE`s write the dump, and shut down by a guard on every path, errors
//! included. Commands are generated here, deterministically from the seed ([`Workload`]), and
//! sent pipelined in RESP over the socket. Choice: the plain socket rather than a client crate
//! or `redis-cli --pipe`, to add no dependency and to read every reply (an error reply fails
//! the series; `DBSIZE` is checked against the workload's own count after each version).
//!
//! The workload is deterministic; the dump's bytes are not quite: the server seeds its hash
//! tables at random on start (so the key order inside an RDB differs from one generation to
//! the next, while it stays the same across the versions of one series, written by one
//! server, until the key table doubles, which the series here do not reach: it holds 2^18
//! keys) and the RDB header records the save time and memory use. A generated series is
//! kept in the data directory, so reports made from it see the same bytes.
//!
//! `rdbcompression` is explicit ([`RedisParams::rdb_compression`]). Redis' default is `yes`,
//! so it is what a backup of a server left at its defaults sees: every string of more than 20
//! bytes, including the listpack blob that holds a small hash, list, set or sorted set, is
//! LZF-compressed on its own. An unchanged value compresses to the same bytes, so the dumps
//! stay similar key by key, but a changed value's compressed form differs from the change to
//! its end, which leaves a delta codec less to match than in an uncompressed dump, and LZF
//! output compresses poorly (docs/benchmarks.md §6: the first dump is stored in 31.9 MB with
//! LZF, 25.0 MB without; the whole series in 89.7 and 64.6 MB). `redis` is the default,
//! `redis-nolzf` the same series with `rdbcompression no`, `redis-long` the default with 30
//! versions (for what depends on the length of a series, such as base re-anchoring).

use crate::error::{EvalError, IoContext, Result};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod workload;

use workload::cmd;
pub use workload::{Cmd, Workload};

/// The parameters of a Redis series.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RedisParams {
    /// Seed of every random choice.
    pub seed: u64,
    /// Versions (dumps).
    pub versions: usize,
    /// Keys of version 0.
    pub keys: usize,
    /// Fraction of keys updated per version.
    pub update: f64,
    /// Keys inserted per version, as a fraction of the keys.
    pub insert: f64,
    /// Fraction of keys deleted per version.
    pub delete: f64,
    /// `rdbcompression`: LZF compression of strings in the dump (Redis' default is `yes`).
    pub rdb_compression: bool,
}

impl RedisParams {
    /// 10 dumps of a 200 000-key store (57-61 MB each with LZF, 74-79 MB without), 3 % of
    /// the keys updated, 1 % inserted and 0.5 % deleted per version, `rdbcompression yes`.
    pub fn standard(seed: u64) -> Self {
        RedisParams {
            seed,
            versions: 10,
            keys: 200_000,
            update: 0.03,
            insert: 0.01,
            delete: 0.005,
            rdb_compression: true,
        }
    }

    /// A small series for tests: 4 dumps of 3 000 keys.
    pub fn small(seed: u64) -> Self {
        RedisParams {
            versions: 4,
            keys: 3_000,
            ..RedisParams::standard(seed)
        }
    }

    /// A name that identifies the series (a directory name in the data cache).
    pub fn dir_name(&self) -> String {
        format!(
            "redis-s{}-v{}-k{}-u{}-i{}-d{}-{}",
            self.seed,
            self.versions,
            self.keys,
            self.update,
            self.insert,
            self.delete,
            if self.rdb_compression { "lzf" } else { "nolzf" }
        )
    }
}

/// Appends `cmd` in RESP (an array of bulk strings) to `out`.
pub fn resp(cmd: &Cmd, out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", cmd.len()).as_bytes());
    for a in cmd {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// A server's reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+...`
    Status(String),
    /// `-...`: the command failed.
    Error(String),
    /// `:n`
    Int(i64),
    /// `$n` (`None`: `$-1`).
    Bulk(Option<Vec<u8>>),
    /// `*n` (`None`: `*-1`).
    Array(Option<Vec<Reply>>),
}

/// Replies nest at most this deep (ours are never nested; a deeper one is refused).
const MAX_REPLY_DEPTH: usize = 8;
/// Largest bulk reply accepted (ours are short; a larger length is a broken stream).
const MAX_BULK_BYTES: usize = 64 << 20;

fn bad_reply(reason: impl Into<String>) -> EvalError {
    EvalError::Tool {
        tool: "redis-server".into(),
        reason: format!("malformed reply: {}", reason.into()),
    }
}

/// Reads one reply (RESP2).
///
/// # Errors
/// The stream ends or breaks, or is not RESP.
pub fn read_reply(r: &mut impl BufRead) -> Result<Reply> {
    read_reply_at(r, 0)
}

fn read_reply_at(r: &mut impl BufRead, depth: usize) -> Result<Reply> {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line)
        .ctx(|| "reading from redis-server".into())?;
    if !line.ends_with(b"\r\n") || line.len() < 3 {
        return Err(bad_reply(format!(
            "line {:?}",
            String::from_utf8_lossy(&line)
        )));
    }
    let body = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
    let len = |body: &str| -> Result<Option<usize>> {
        match body.parse::<i64>() {
            Ok(-1) => Ok(None),
            Ok(n) if n >= 0 && n as usize <= MAX_BULK_BYTES => Ok(Some(n as usize)),
            _ => Err(bad_reply(format!("length {body:?}"))),
        }
    };
    match line[0] {
        b'+' => Ok(Reply::Status(body)),
        b'-' => Ok(Reply::Error(body)),
        b':' => body
            .parse()
            .map(Reply::Int)
            .map_err(|_| bad_reply(format!("integer {body:?}"))),
        b'$' => match len(&body)? {
            None => Ok(Reply::Bulk(None)),
            Some(n) => {
                let mut buf = vec![0u8; n + 2];
                r.read_exact(&mut buf)
                    .ctx(|| "reading from redis-server".into())?;
                if !buf.ends_with(b"\r\n") {
                    return Err(bad_reply("bulk string without CRLF"));
                }
                buf.truncate(n);
                Ok(Reply::Bulk(Some(buf)))
            }
        },
        b'*' => match len(&body)? {
            None => Ok(Reply::Array(None)),
            Some(_) if depth >= MAX_REPLY_DEPTH => Err(bad_reply("nested too deep")),
            Some(n) => {
                let items = (0..n)
                    .map(|_| read_reply_at(r, depth + 1))
                    .collect::<Result<Vec<_>>>()?;
                Ok(Reply::Array(Some(items)))
            }
        },
        other => Err(bad_reply(format!("type byte {other:#04x}"))),
    }
}

/// A connection to the server.
struct Conn {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

/// Commands sent before their replies are read: large enough to hide the round trips, small
/// enough that neither side buffers much.
const PIPELINE: usize = 4096;

impl Conn {
    fn open(socket: &Path) -> std::io::Result<Self> {
        let s = UnixStream::connect(socket)?;
        // SAVE of a large store takes seconds; a server that hangs must not hang the eval.
        s.set_read_timeout(Some(Duration::from_secs(600)))?;
        Ok(Conn {
            writer: s.try_clone()?,
            reader: BufReader::with_capacity(1 << 16, s),
        })
    }

    /// Sends `cmds` pipelined; fails on the first error reply.
    fn run(&mut self, cmds: &[Cmd]) -> Result<Vec<Reply>> {
        let mut replies = Vec::with_capacity(cmds.len());
        let mut buf = Vec::new();
        for batch in cmds.chunks(PIPELINE) {
            buf.clear();
            for c in batch {
                resp(c, &mut buf);
            }
            self.writer
                .write_all(&buf)
                .ctx(|| "writing to redis-server".into())?;
            for c in batch {
                match read_reply(&mut self.reader)? {
                    Reply::Error(e) => {
                        return Err(EvalError::Tool {
                            tool: "redis-server".into(),
                            reason: format!("{} {}: {e}", c[0], c.get(1).map_or("", |s| s)),
                        })
                    }
                    r => replies.push(r),
                }
            }
        }
        Ok(replies)
    }

    fn call(&mut self, c: &[&str]) -> Result<Reply> {
        let mut r = self.run(&[cmd(c)])?;
        r.pop().ok_or_else(|| bad_reply("no reply"))
    }
}

/// A `redis-server` of our own; shut down (and its directories removed) when dropped.
struct Server {
    child: Child,
    /// Holds the dump and the log.
    work_dir: PathBuf,
    /// Holds the socket (a short path: a Unix socket's path has at most 107 bytes).
    socket_dir: PathBuf,
    socket: PathBuf,
}

/// Distinguishes the socket directories of servers started by one process.
static SERVERS: AtomicU64 = AtomicU64::new(0);

impl Server {
    /// Starts a server that dumps into `work_dir` (created empty).
    fn start(work_dir: &Path, rdb_compression: bool) -> Result<Self> {
        if work_dir.exists() {
            std::fs::remove_dir_all(work_dir).ctx(|| format!("clearing {}", work_dir.display()))?;
        }
        std::fs::create_dir_all(work_dir).ctx(|| format!("creating {}", work_dir.display()))?;
        let socket_dir = std::env::temp_dir().join(format!(
            "dedelta-redis-{}-{}",
            std::process::id(),
            SERVERS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&socket_dir);
        std::fs::create_dir_all(&socket_dir)
            .ctx(|| format!("creating {}", socket_dir.display()))?;
        let socket = socket_dir.join("redis.sock");
        let abs_work =
            std::path::absolute(work_dir).ctx(|| format!("resolving {}", work_dir.display()))?;
        let spawned = Command::new("redis-server")
            .args(["--port", "0", "--bind", "127.0.0.1"])
            .arg("--unixsocket")
            .arg(&socket)
            .args(["--unixsocketperm", "700"])
            .arg("--dir")
            .arg(&abs_work)
            .args([
                "--dbfilename",
                "dump.rdb",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args([
                "--rdbcompression",
                if rdb_compression { "yes" } else { "no" },
            ])
            .args(["--daemonize", "no", "--databases", "1"])
            .arg("--logfile")
            .arg(abs_work.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match spawned {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&socket_dir);
                return Err(EvalError::Tool {
                    tool: "redis-server".into(),
                    reason: format!(
                        "cannot start it ({e}); install it with scripts/install-peers.sh \
                         (Debian package redis-server)"
                    ),
                });
            }
        };
        // From here on, the guard shuts the server down on every path.
        let mut server = Server {
            child,
            work_dir: abs_work,
            socket_dir,
            socket,
        };
        server.wait_ready()?;
        Ok(server)
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.work_dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().rev().take(5).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }

    fn wait_ready(&mut self) -> Result<()> {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(EvalError::Tool {
                    tool: "redis-server".into(),
                    reason: format!("exited at start ({status}): {}", self.log_tail()),
                });
            }
            if let Ok(mut c) = Conn::open(&self.socket) {
                if c.call(&["PING"])? == Reply::Status("PONG".into()) {
                    return Ok(());
                }
            }
            if started.elapsed() > Duration::from_secs(20) {
                return Err(EvalError::Tool {
                    tool: "redis-server".into(),
                    reason: format!("not ready after 20 s: {}", self.log_tail()),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn connect(&self) -> Result<Conn> {
        Conn::open(&self.socket).ctx(|| format!("connecting to {}", self.socket.display()))
    }

    /// The dump file `SAVE` writes.
    fn dump(&self) -> PathBuf {
        self.work_dir.join("dump.rdb")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SHUTDOWN NOSAVE closes the connection instead of replying; then wait a little for
        // the process, and kill it if it did not go.
        if let Ok(mut c) = Conn::open(&self.socket) {
            let mut buf = Vec::new();
            resp(&cmd(&["SHUTDOWN", "NOSAVE"]), &mut buf);
            let _ = c.writer.write_all(&buf);
            let _ = read_reply(&mut c.reader);
        }
        let started = Instant::now();
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if started.elapsed() > Duration::from_secs(10) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        let _ = std::fs::remove_dir_all(&self.socket_dir);
        let _ = std::fs::remove_dir_all(&self.work_dir);
    }
}

/// Writes the versions as `DIR/v000.rdb`, `DIR/v001.rdb`, ...; returns their paths.
///
/// # Errors
/// `redis-server` is missing or fails (an error reply, a key count that differs from the
/// workload's), or a file cannot be written.
pub fn generate(dir: &Path, p: &RedisParams) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).ctx(|| format!("creating {}", dir.display()))?;
    let server = Server::start(&dir.join(".redis-work"), p.rdb_compression)?;
    let mut conn = server.connect()?;
    let mut workload = Workload::new(p);
    let mut paths = Vec::new();
    for v in 0..p.versions {
        let cmds = workload.next_version();
        conn.run(&cmds)?;
        let keys = conn.call(&["DBSIZE"])?;
        if keys != Reply::Int(workload.live_keys() as i64) {
            return Err(EvalError::Tool {
                tool: "redis-server".into(),
                reason: format!(
                    "version {v}: DBSIZE {keys:?}, the workload expects {}",
                    workload.live_keys()
                ),
            });
        }
        conn.call(&["SAVE"])?;
        let path = dir.join(format!("v{v:03}.rdb"));
        std::fs::copy(server.dump(), &path)
            .ctx(|| format!("copying {}", server.dump().display()))?;
        paths.push(path);
    }
    drop(conn);
    drop(server);
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn series(p: &RedisParams, versions: usize) -> Vec<Vec<Cmd>> {
        let mut w = Workload::new(p);
        (0..versions).map(|_| w.next_version()).collect()
    }

    #[test]
    fn same_seed_same_commands_other_seed_others() {
        let p = RedisParams::small(7);
        assert_eq!(series(&p, 4), series(&p, 4));
        assert_ne!(series(&p, 4), series(&RedisParams::small(8), 4));
        // The LZF choice changes the server's setting, not the commands.
        let nolzf = RedisParams {
            rdb_compression: false,
            ..p.clone()
        };
        assert_eq!(series(&p, 2), series(&nolzf, 2));
        assert_ne!(p.dir_name(), nolzf.dir_name());
    }

    /// Replays the commands on a model of the key space: the workload's counts hold, a
    /// deleted key was live, an inserted key is new, an update touches a live key.
    #[test]
    fn versions_update_insert_and_delete_as_configured() {
        let p = RedisParams::small(3);
        let mut w = Workload::new(&p);
        let v0 = w.next_version();
        let mut live: HashSet<String> = HashSet::new();
        let creates = ["HSET", "SET", "RPUSH", "SADD", "ZADD"];
        for c in &v0 {
            if creates.contains(&c[0].as_str()) {
                assert!(live.insert(c[1].clone()), "{} created twice", c[1]);
            }
        }
        assert_eq!((live.len(), w.live_keys()), (p.keys, p.keys));
        let mut ever: HashSet<String> = live.clone();
        for _ in 1..p.versions {
            let n = live.len();
            let cmds = w.next_version();
            let deletes: Vec<&Cmd> = cmds.iter().filter(|c| c[0] == "DEL").collect();
            assert_eq!(deletes.len(), (n as f64 * p.delete) as usize);
            let mut updated = 0;
            let mut inserted = 0;
            let mut deleted_now = HashSet::new();
            for c in &cmds {
                let key = &c[1];
                match c[0].as_str() {
                    "DEL" => {
                        assert!(live.remove(key), "{key} deleted but not live");
                        deleted_now.insert(key.clone());
                    }
                    _ if !live.contains(key) => {
                        assert!(creates.contains(&c[0].as_str()), "{c:?} on a missing key");
                        assert!(ever.insert(key.clone()), "{key} reused");
                        live.insert(key.clone());
                        inserted += 1;
                    }
                    "EXPIREAT" | "LTRIM" | "HINCRBY" => {}
                    _ => {
                        // Updates come before deletes and inserts.
                        assert!(
                            deleted_now.is_empty() && inserted == 0,
                            "{c:?} out of order"
                        );
                        updated += 1;
                    }
                }
            }
            assert_eq!(updated, (n as f64 * p.update) as usize);
            assert_eq!(inserted, (n as f64 * p.insert) as usize);
            assert_eq!(live.len(), w.live_keys());
        }
    }

    /// Pages keep their words across updates and change their numbers.
    #[test]
    fn a_page_update_rerenders_the_same_template() {
        let mut w = Workload::new(&RedisParams::small(1));
        let a = w.page_text(42);
        let b = w.page_text(42);
        assert_ne!(a, b);
        let strip = |s: &str| {
            s.split("<b>")
                .map(|p| p.split_once("</b>").map_or(p, |x| x.1).to_string())
                .collect::<String>()
        };
        assert_eq!(strip(&a), strip(&b));
    }

    #[test]
    fn resp_encoding() {
        let mut out = Vec::new();
        resp(&cmd(&["SET", "k", ""]), &mut out);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    }

    #[test]
    fn replies_parse_and_malformed_ones_are_errors() {
        let mut input: &[u8] =
            b"+OK\r\n-ERR no\r\n:42\r\n$3\r\nfoo\r\n$-1\r\n*2\r\n:1\r\n$1\r\nx\r\n";
        assert_eq!(read_reply(&mut input).unwrap(), Reply::Status("OK".into()));
        assert_eq!(
            read_reply(&mut input).unwrap(),
            Reply::Error("ERR no".into())
        );
        assert_eq!(read_reply(&mut input).unwrap(), Reply::Int(42));
        assert_eq!(
            read_reply(&mut input).unwrap(),
            Reply::Bulk(Some(b"foo".to_vec()))
        );
        assert_eq!(read_reply(&mut input).unwrap(), Reply::Bulk(None));
        assert_eq!(
            read_reply(&mut input).unwrap(),
            Reply::Array(Some(vec![Reply::Int(1), Reply::Bulk(Some(b"x".to_vec()))]))
        );
        let nested = "*1\r\n".repeat(MAX_REPLY_DEPTH + 1) + ":1\r\n";
        for bad in [
            &b""[..],
            b"+OK\n",
            b"?x\r\n",
            b":x\r\n",
            b"$5\r\nab\r\n",
            b"$3\r\nabcde",
            b"$-2\r\n",
            b"$99999999999\r\n",
            nested.as_bytes(),
        ] {
            let mut r = bad;
            assert!(
                read_reply(&mut r).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}

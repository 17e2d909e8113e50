//! The S3 backend: a repository in a bucket of any S3-compatible object store (AWS, Garage,
//! MinIO, moto), through the `object_store` crate.
//!
//! Layout under the repository's key prefix: the same as a local repository's
//! (`config`, `containers/<2 hex>/<64 hex>`, `snapshots/<64 hex>`, `locks/<name>`, ...), so
//! that a bucket copied to a disk is a local repository and the reverse.
//!
//! [`Backend`] is synchronous; requests run on a small tokio runtime the backend owns, and
//! each caller thread blocks on its request (`Runtime::block_on` may be called from many
//! threads at once). At most [`S3Config::connections`] requests are in flight
//! (`object_store`'s `LimitStore`), whichever threads make them.
//!
//! Integrity end to end: an S3 PUT is atomic (the object appears whole or not at all), and
//! the ETag it returns is, for a plain PUT, the MD5 of the bytes the server stored, and for a
//! multipart upload the MD5 of the parts' MD5s followed by `-N`: both are compared with the
//! MD5 computed here, and a mismatch is an error (the retry wrapper writes again). A read
//! checks it got the number of bytes it asked for; what the bytes are is checked above, by
//! the checksums every repository object carries. Retries are not done here (the client's
//! own retries are off): [`crate::wrap::retry::RetryBackend`] wraps this backend.
//!
//! Conditional writes: [`Backend::create_new`] uses `If-None-Match: *`, which some servers
//! (Garage) ignore, so nothing relies on it for mutual exclusion: locks are written, then
//! listed, and conflicts resolved (see dedelta-store's `repository/lock.rs`).

pub mod config;
mod connect;
mod read_cache;
pub mod test_server;
mod trace;

pub use config::{Credentials, S3Config};

use crate::{Backend, BackendError as Error, FileKind, Result};
use bytes::Bytes;
use futures::TryStreamExt;
use md5::{Digest, Md5};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::limit::LimitStore;
use object_store::path::Path as ObjPath;
use object_store::{
    ClientOptions, GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMode, PutOptions,
    PutPayload, RetryConfig,
};
use read_cache::{Fetched, ReadCache};
use std::io::ErrorKind;
use std::time::Duration;
use trace::Trace;

/// How long connecting to the endpoint may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request may take, its body included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// A repository in an S3 bucket.
pub struct S3Backend {
    store: LimitStore<AmazonS3>,
    runtime: tokio::runtime::Runtime,
    config: S3Config,
    /// `DEDELTA_S3_TRACE`'s request trace, if set.
    trace: Option<Trace>,
    /// Containers' bytes and sizes read so far ([`read_cache`]).
    cache: ReadCache,
}

impl std::fmt::Debug for S3Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "S3Backend({})", self.config.url())
    }
}

impl S3Backend {
    /// A backend for `config`, authenticated with `credentials`. Makes no request.
    ///
    /// # Errors
    /// [`Error::Io`] if the client or its runtime cannot be built (a malformed endpoint).
    pub fn new(config: S3Config, credentials: &Credentials) -> Result<Self> {
        let setup = |e: &dyn std::fmt::Display| {
            Error::io(
                format!("setting up the S3 client for {}", config.url()),
                std::io::Error::other(e.to_string()),
            )
        };
        let options = ClientOptions::new()
            .with_allow_http(config.endpoint.starts_with("http://"))
            .with_pool_max_idle_per_host(config.connections.max(1))
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_timeout(REQUEST_TIMEOUT);
        let plain_http = config.endpoint.starts_with("http://");
        let mut b = AmazonS3Builder::new()
            .with_endpoint(&config.endpoint)
            .with_bucket_name(&config.bucket)
            .with_virtual_hosted_style_request(false)
            .with_client_options(options)
            // The retry wrapper retries whole backend calls, with jitter.
            .with_retry(RetryConfig {
                max_retries: 0,
                ..RetryConfig::default()
            });
        if plain_http {
            b = b.with_http_connector(connect::QuickAckConnector {
                idle_per_host: config.connections.max(1),
                connect_timeout: CONNECT_TIMEOUT,
                timeout: REQUEST_TIMEOUT,
            });
        }
        if let Some(r) = &credentials.region {
            b = b.with_region(r);
        }
        if let Some(k) = &credentials.access_key_id {
            b = b.with_access_key_id(k);
        }
        if let Some(s) = &credentials.secret_access_key {
            b = b.with_secret_access_key(s);
        }
        if let Some(t) = &credentials.session_token {
            b = b.with_token(t);
        }
        if credentials.access_key_id.is_none() {
            // A public bucket: anonymous requests.
            b = b.with_skip_signature(true);
        }
        let s3 = b.build().map_err(|e| setup(&e))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("dedelta-s3")
            .enable_all()
            .build()
            .map_err(|e| setup(&e))?;
        Ok(S3Backend {
            cache: ReadCache::new(config.read_cache_bytes),
            store: LimitStore::new(s3, config.connections.max(1)),
            runtime,
            config,
            trace: Trace::from_env(),
        })
    }

    /// The settings this backend was built with.
    pub fn config(&self) -> &S3Config {
        &self.config
    }

    /// The key of an object: `<prefix>/<kind dir>/[<shard>/]<name>`.
    fn key(&self, kind: FileKind, name: &str) -> ObjPath {
        let mut k = self.prefix_path(kind);
        match kind {
            FileKind::Config => k.push_str("config"),
            FileKind::Container => {
                k.push_str(name.get(..2).unwrap_or("00"));
                k.push('/');
                k.push_str(name);
            }
            _ => k.push_str(name),
        }
        ObjPath::from(k)
    }

    /// `<prefix>/<kind dir>/`, the listing prefix of a kind (`<prefix>/` for the config).
    fn prefix_path(&self, kind: FileKind) -> String {
        let mut k = String::new();
        if !self.config.prefix.is_empty() {
            k.push_str(&self.config.prefix);
            k.push('/');
        }
        if !kind.dir().is_empty() {
            k.push_str(kind.dir());
            k.push('/');
        }
        k
    }

    fn err(&self, what: &str, kind: FileKind, name: &str, e: object_store::Error) -> Error {
        use object_store::Error as E;
        let io_kind = match &e {
            E::NotFound { .. } => return kind.missing(name),
            E::PermissionDenied { .. } | E::Unauthenticated { .. } => ErrorKind::PermissionDenied,
            E::NotSupported { .. } | E::NotImplemented { .. } | E::InvalidPath { .. } => {
                ErrorKind::Unsupported
            }
            E::AlreadyExists { .. } => ErrorKind::AlreadyExists,
            _ => ErrorKind::Other,
        };
        Error::io(
            format!("{what} {}/{name} at {}", kind.dir(), self.config.url()),
            std::io::Error::new(io_kind, e.to_string()),
        )
    }

    fn short_read(&self, kind: FileKind, name: &str, want: usize, got: usize) -> Error {
        Error::io(
            format!("reading {}/{name} at {}", kind.dir(), self.config.url()),
            std::io::Error::new(
                ErrorKind::UnexpectedEof,
                format!("asked for {want} bytes, got {got}"),
            ),
        )
    }

    /// Runs request `f`, traced when `DEDELTA_S3_TRACE` is set (see [`trace`]); `bytes` says
    /// how many bytes its result moved.
    fn traced<T>(
        &self,
        op: &str,
        kind: FileKind,
        name: &str,
        f: impl FnOnce() -> Result<T>,
        bytes: impl FnOnce(&T) -> usize,
    ) -> Result<T> {
        let Some(trace) = &self.trace else {
            return f();
        };
        let started = Trace::start();
        let out = f();
        let n = out.as_ref().map_or(0, bytes);
        trace.end(started, op, kind.dir(), name, n);
        out
    }

    /// Reads `range` of an object (all of it for `None`): the bytes, where they start, and
    /// the object's size.
    fn get_opts(&self, kind: FileKind, name: &str, range: Option<GetRange>) -> Result<Fetched> {
        let op = match &range {
            None => "get",
            Some(GetRange::Suffix(_)) => "tail",
            Some(_) => "range",
        };
        let get = || self.get_now(kind, name, range);
        self.traced(op, kind, name, get, |f: &Fetched| f.bytes.len())
    }

    fn get_now(&self, kind: FileKind, name: &str, range: Option<GetRange>) -> Result<Fetched> {
        let key = self.key(kind, name);
        let opts = GetOptions {
            range,
            ..GetOptions::default()
        };
        self.runtime
            .block_on(async {
                let r = self.store.get_opts(&key, opts).await?;
                let (start, size) = (r.range.start, r.meta.size);
                let bytes = r.bytes().await?;
                Ok(Fetched { bytes, start, size })
            })
            .map_err(|e| self.err("reading", kind, name, e))
    }

    /// `len` bytes at `at` of container `name`, through the read cache, into `out`
    /// (replacing its contents): one request for the blocks it lacks, none if it holds them
    /// all.
    fn get_container_range_into(
        &self,
        name: &str,
        at: u64,
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let kind = FileKind::Container;
        let fetch = |from: u64, to: u64| {
            let ask = (to - from).max(MIN_RANGED_READ as u64);
            self.get_opts(kind, name, Some(GetRange::Bounded(from..from + ask)))
        };
        if self.cache.read_into(name, at, len, fetch, out)? {
            return Ok(());
        }
        let size = self.cache.size(name).unwrap_or(0);
        Err(self.short_read(kind, name, len, size.saturating_sub(at) as usize))
    }

    /// [`Self::get_container_range_into`] into a new buffer.
    fn get_container_range(&self, name: &str, at: u64, len: usize) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.get_container_range_into(name, at, len, &mut out)?;
        Ok(out)
    }

    /// Where a container read at `offset` starts (a negative `offset` counts from the end,
    /// known when a read has told the container's size), or `None`.
    fn container_offset(&self, name: &str, offset: i64) -> Option<u64> {
        match u64::try_from(offset) {
            Ok(at) => Some(at),
            Err(_) => self
                .cache
                .size(name)
                .and_then(|size| size.checked_sub(offset.unsigned_abs())),
        }
    }

    /// Reads `ask` bytes from the end of an object (fewer if it is shorter); a container's
    /// are kept in the read cache.
    fn get_suffix(&self, kind: FileKind, name: &str, ask: u64) -> Result<Bytes> {
        let got = self.get_opts(kind, name, Some(GetRange::Suffix(ask)))?;
        if kind == FileKind::Container {
            self.cache.keep(name, &got);
        }
        Ok(got.bytes)
    }

    /// Uploads `data` in one PUT, or in parts from [`S3Config::multipart_threshold`] on,
    /// and checks the returned ETag against the MD5 of what was sent.
    fn upload(&self, kind: FileKind, name: &str, data: &[u8], mode: PutMode) -> Result<()> {
        let put = || self.upload_now(kind, name, data, mode);
        self.traced("put", kind, name, put, |_| data.len())
    }

    fn upload_now(&self, kind: FileKind, name: &str, data: &[u8], mode: PutMode) -> Result<()> {
        let key = self.key(kind, name);
        let multipart = data.len() >= self.config.multipart_threshold && mode == PutMode::Overwrite;
        let (etag, expected) = if multipart {
            let parts: Vec<&[u8]> = data.chunks(self.config.part_size.max(1)).collect();
            let mut md5s = Vec::with_capacity(parts.len() * 16);
            for p in &parts {
                md5s.extend_from_slice(&Md5::digest(p));
            }
            let expected = format!("{}-{}", hex(&Md5::digest(&md5s)), parts.len());
            let res = self.runtime.block_on(async {
                let mut up = self.store.put_multipart(&key).await?;
                let sends: Vec<_> = parts
                    .iter()
                    .map(|p| up.put_part(PutPayload::from(Bytes::copy_from_slice(p))))
                    .collect();
                let sent = futures::future::try_join_all(sends).await;
                match sent {
                    Ok(_) => up.complete().await,
                    Err(e) => {
                        let _ = up.abort().await;
                        Err(e)
                    }
                }
            });
            (res, expected)
        } else {
            let expected = hex(&Md5::digest(data));
            let payload = PutPayload::from(Bytes::copy_from_slice(data));
            let opts = PutOptions {
                mode,
                ..PutOptions::default()
            };
            let res = self
                .runtime
                .block_on(self.store.put_opts(&key, payload, opts));
            (res, expected)
        };
        let etag = etag.map_err(|e| self.err("writing", kind, name, e))?.e_tag;
        // Servers that encrypt objects return an ETag that is not an MD5: only a value of
        // the MD5's shape is compared.
        if let Some(got) = etag.map(|t| t.trim_matches('"').to_ascii_lowercase()) {
            let md5_shaped = got.len() >= 32 && got[..32].bytes().all(|b| b.is_ascii_hexdigit());
            if md5_shaped && got != expected {
                return Err(Error::io(
                    format!("writing {}/{name} at {}", kind.dir(), self.config.url()),
                    std::io::Error::new(
                        ErrorKind::InvalidData,
                        format!("the server stored other bytes (ETag {got}, MD5 sent {expected})"),
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The size of an object, asked of the server.
    fn head(&self, kind: FileKind, name: &str) -> Result<u64> {
        self.traced("head", kind, name, || self.size_now(kind, name), |_| 0)
    }

    fn list_now(&self, kind: FileKind) -> Result<Vec<(String, u64)>> {
        let prefix = ObjPath::from(self.prefix_path(kind));
        let metas: Vec<_> = self
            .runtime
            .block_on(self.store.list(Some(&prefix)).try_collect())
            .map_err(|e| self.err("listing", kind, "", e))?;
        let mut out: Vec<(String, u64)> = metas
            .into_iter()
            .filter_map(|m| {
                // The config is the only object of its kind, directly under the prefix.
                let rel = m.location.as_ref().strip_prefix(prefix.as_ref())?;
                let rel = rel.trim_start_matches('/');
                let name = match kind {
                    FileKind::Config => (rel == "config").then_some(rel)?,
                    FileKind::Container => rel.rsplit('/').next()?,
                    _ => (!rel.contains('/')).then_some(rel)?,
                };
                Some((name.to_string(), m.size))
            })
            .collect();
        out.sort();
        Ok(out)
    }

    fn delete_now(&self, kind: FileKind, name: &str) -> Result<()> {
        let key = self.key(kind, name);
        match self.runtime.block_on(self.store.delete(&key)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err("deleting", kind, name, e)),
        }
    }

    fn size_now(&self, kind: FileKind, name: &str) -> Result<u64> {
        let key = self.key(kind, name);
        self.runtime
            .block_on(self.store.head(&key))
            .map(|m| m.size)
            .map_err(|e| self.err("reading the size of", kind, name, e))
    }
}

/// A ranged read asks for at least this many bytes and keeps what was asked for. A request
/// costs a round trip whatever its size, and a response that fits in one TCP segment after
/// its headers can wait out the reader's delayed ACK (about 40 ms on Linux) when the server
/// leaves Nagle's algorithm on, as Garage 2.5 does: on loopback (64 KiB segments) a 16 KiB
/// GET took 44 ms and a 1 MiB one 4 ms. 128 KiB spans at least two segments there, so the
/// reader acknowledges at once; on a real network it costs about a millisecond more.
pub const MIN_RANGED_READ: usize = 128 << 10;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Backend for S3Backend {
    fn get(&self, kind: FileKind, name: &str) -> Result<Vec<u8>> {
        Ok(self.get_opts(kind, name, None)?.bytes.to_vec())
    }

    fn get_range(&self, kind: FileKind, name: &str, offset: i64, len: usize) -> Result<Vec<u8>> {
        if len == 0 {
            // S3 refuses an empty range; the object must still exist.
            self.size(kind, name)?;
            return Ok(Vec::new());
        }
        if kind == FileKind::Container {
            // A suffix of a container whose size is known is an ordinary range.
            if let Some(at) = self.container_offset(name, offset) {
                return self.get_container_range(name, at, len);
            }
        }
        // Widened to MIN_RANGED_READ (see there); the server clips a range past the end.
        let ask = len.max(MIN_RANGED_READ) as u64;
        let got;
        let start = if offset < 0 {
            let back = offset.unsigned_abs();
            got = self.get_suffix(kind, name, back.max(ask))?;
            // The object's last `back` bytes start this far into what came.
            (got.len() as u64).checked_sub(back)
        } else {
            let at = offset as u64;
            got = self
                .get_opts(kind, name, Some(GetRange::Bounded(at..at + ask)))?
                .bytes;
            Some(0)
        };
        match start.map(|s| s as usize) {
            Some(s) if got.len() >= s + len => Ok(got[s..s + len].to_vec()),
            _ => Err(self.short_read(kind, name, len, got.len())),
        }
    }

    /// Container data (restore's regions, backup's bases) is copied from the read cache into
    /// `buf`, whose memory is reused.
    fn get_range_into(
        &self,
        kind: FileKind,
        name: &str,
        offset: i64,
        len: usize,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        if kind == FileKind::Container && len > 0 {
            if let Some(at) = self.container_offset(name, offset) {
                return self.get_container_range_into(name, at, len, buf);
            }
        }
        *buf = self.get_range(kind, name, offset, len)?;
        Ok(())
    }

    fn get_tail(&self, kind: FileKind, name: &str, max_len: usize) -> Result<Vec<u8>> {
        if max_len == 0 {
            self.size(kind, name)?;
            return Ok(Vec::new());
        }
        if kind == FileKind::Container {
            if let Some(size) = self.cache.size(name) {
                let len = (max_len as u64).min(size);
                return self.get_container_range(name, size - len, len as usize);
            }
        }
        let ask = max_len.max(MIN_RANGED_READ);
        let got = self.get_suffix(kind, name, ask as u64)?;
        if got.len() > ask {
            return Err(self.short_read(kind, name, max_len, got.len()));
        }
        Ok(got[got.len().saturating_sub(max_len)..].to_vec())
    }

    fn put(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<()> {
        let put = self.upload(kind, name, data, PutMode::Overwrite);
        if kind == FileKind::Container {
            self.cache.forget(name);
        }
        put
    }

    fn create_new(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<bool> {
        match self.upload(kind, name, data, PutMode::Create) {
            Ok(()) => Ok(true),
            Err(Error::Io { cause, .. }) if cause.kind() == ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn list(&self, kind: FileKind) -> Result<Vec<(String, u64)>> {
        self.traced("list", kind, "", || self.list_now(kind), Vec::len)
    }

    fn delete(&self, kind: FileKind, name: &str) -> Result<()> {
        let deleted = self.traced("delete", kind, name, || self.delete_now(kind, name), |_| 0);
        if kind == FileKind::Container {
            self.cache.forget(name);
        }
        deleted
    }

    /// A container's size is read once: a container is never rewritten under its name.
    fn size(&self, kind: FileKind, name: &str) -> Result<u64> {
        if kind == FileKind::Container {
            if let Some(size) = self.cache.size(name) {
                return Ok(size);
            }
        }
        self.head(kind, name)
    }

    /// Asks the server every time (another client may have deleted the object).
    fn exists(&self, kind: FileKind, name: &str) -> Result<bool> {
        match self.head(kind, name) {
            Ok(_) => Ok(true),
            Err(Error::Missing { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn location(&self) -> String {
        self.config.url()
    }

    fn requests_are_round_trips(&self) -> bool {
        true
    }
}

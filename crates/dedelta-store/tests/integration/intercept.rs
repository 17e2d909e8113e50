//! A backend that passes every request on to another, except what a test intercepts: the one
//! forwarding wrapper the tests' probes are built from (counting reads, delaying them, failing
//! them, lagging listings), so that each probe states only what it changes.

use dedelta_store::backend::{Backend, FileKind, Result as BackendResult};
use std::ops::Deref;

/// What a test changes about the requests passing through an [`Intercept`]; every method
/// passes the request on unchanged unless a test overrides it.
pub(crate) trait Hooks: Send + Sync {
    /// Around a read of container data (`get_range_into`: regions, as restore and backup's
    /// base reads ask for them; metadata comes with `get_range` and `get_tail`). `read` does
    /// the read.
    fn container_data_read(
        &self,
        _name: &str,
        _len: usize,
        read: &mut dyn FnMut() -> BackendResult<()>,
    ) -> BackendResult<()> {
        read()
    }

    /// Around a read of a whole object (`get`: snapshots, index files, locks). `read` does it.
    fn whole_read(
        &self,
        _kind: FileKind,
        _name: &str,
        read: &mut dyn FnMut() -> BackendResult<Vec<u8>>,
    ) -> BackendResult<Vec<u8>> {
        read()
    }

    /// Around a write (`put`) or a `delete`. `write` does it.
    fn write(
        &self,
        _kind: FileKind,
        _name: &str,
        write: &mut dyn FnMut() -> BackendResult<()>,
    ) -> BackendResult<()> {
        write()
    }

    /// Before every request, whatever it is (`op`: `get`, `get_range`, `get_tail`, `put`,
    /// `create_new`, `list`, `delete`, `size`, `exists`), for probes that follow them all:
    /// the token given is passed to [`Self::ended`] when the request returns.
    fn started(&self, _op: &'static str, _kind: FileKind, _name: &str) -> usize {
        0
    }

    /// After every request [`Self::started`] saw, once it has returned.
    fn ended(&self, _token: usize) {}

    /// Whether the requests stand for an object store's round trips
    /// (`Backend::requests_are_round_trips`, which the open's concurrency follows): probes
    /// that count what goes out at once say so; others answer as the inner backend does.
    fn round_trips(&self) -> bool {
        false
    }

    /// Around a listing (`list`, and `list_names`, which is answered from it). `list` does it.
    fn listing(
        &self,
        _kind: FileKind,
        list: &mut dyn FnMut() -> BackendResult<Vec<(String, u64)>>,
    ) -> BackendResult<Vec<(String, u64)>> {
        list()
    }
}

/// `inner` seen through `hooks`. Dereferences to the hooks, so a test reads its probe's
/// counters directly.
pub(crate) struct Intercept<B, H> {
    pub(crate) inner: B,
    pub(crate) hooks: H,
}

impl<B, H> Deref for Intercept<B, H> {
    type Target = H;

    fn deref(&self) -> &H {
        &self.hooks
    }
}

impl<B, H: Hooks> Intercept<B, H> {
    /// `f`, between [`Hooks::started`] and [`Hooks::ended`].
    fn seen<T>(&self, op: &'static str, kind: FileKind, name: &str, f: impl FnOnce() -> T) -> T {
        let token = self.hooks.started(op, kind, name);
        let out = f();
        self.hooks.ended(token);
        out
    }
}

impl<B: Deref<Target = dyn Backend> + Send + Sync, H: Hooks> Backend for Intercept<B, H> {
    fn get(&self, kind: FileKind, name: &str) -> BackendResult<Vec<u8>> {
        self.seen("get", kind, name, || {
            self.hooks
                .whole_read(kind, name, &mut || self.inner.get(kind, name))
        })
    }
    fn get_range(
        &self,
        kind: FileKind,
        name: &str,
        off: i64,
        len: usize,
    ) -> BackendResult<Vec<u8>> {
        self.seen("get_range", kind, name, || {
            self.inner.get_range(kind, name, off, len)
        })
    }
    fn get_tail(&self, kind: FileKind, name: &str, max_len: usize) -> BackendResult<Vec<u8>> {
        self.seen("get_tail", kind, name, || {
            self.inner.get_tail(kind, name, max_len)
        })
    }
    fn get_range_into(
        &self,
        kind: FileKind,
        name: &str,
        off: i64,
        len: usize,
        buf: &mut Vec<u8>,
    ) -> BackendResult<()> {
        self.seen("get_range", kind, name, || {
            if kind != FileKind::Container {
                return self.inner.get_range_into(kind, name, off, len, buf);
            }
            self.hooks.container_data_read(name, len, &mut || {
                self.inner.get_range_into(kind, name, off, len, buf)
            })
        })
    }
    fn put(&self, kind: FileKind, name: &str, data: &[u8]) -> BackendResult<()> {
        self.seen("put", kind, name, || {
            self.hooks
                .write(kind, name, &mut || self.inner.put(kind, name, data))
        })
    }
    fn create_new(&self, kind: FileKind, name: &str, data: &[u8]) -> BackendResult<bool> {
        self.seen("create_new", kind, name, || {
            self.inner.create_new(kind, name, data)
        })
    }
    fn list(&self, kind: FileKind) -> BackendResult<Vec<(String, u64)>> {
        self.seen("list", kind, "", || {
            self.hooks.listing(kind, &mut || self.inner.list(kind))
        })
    }
    fn delete(&self, kind: FileKind, name: &str) -> BackendResult<()> {
        self.seen("delete", kind, name, || {
            self.hooks
                .write(kind, name, &mut || self.inner.delete(kind, name))
        })
    }
    fn size(&self, kind: FileKind, name: &str) -> BackendResult<u64> {
        self.seen("size", kind, name, || self.inner.size(kind, name))
    }
    fn exists(&self, kind: FileKind, name: &str) -> BackendResult<bool> {
        self.seen("exists", kind, name, || self.inner.exists(kind, name))
    }
    fn location(&self) -> String {
        self.inner.location()
    }

    fn requests_are_round_trips(&self) -> bool {
        self.hooks.round_trips() || self.inner.requests_are_round_trips()
    }
}

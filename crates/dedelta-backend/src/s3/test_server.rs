//! A throwaway S3 server for tests: `moto_server` (PyPI `moto[server]`, which
//! `scripts/test.sh` installs) on a free port of 127.0.0.1, stopped on drop.
//!
//! Tests that need it call [`MotoServer::start`] and skip, saying why, when it is
//! unavailable; with `DEDELTA_REQUIRE_S3=1` (set by CI's script) they fail instead, so that a
//! CI run never passes by skipping.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Credentials, S3Config};

/// A running moto server.
#[derive(Debug)]
pub struct MotoServer {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
}

/// The program to run: `$DEDELTA_MOTO_SERVER`, else `moto_server` from `PATH`.
fn program() -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("DEDELTA_MOTO_SERVER").filter(|p| !p.is_empty()) {
        return Some(p.into());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("moto_server"))
        .find(|p| p.is_file())
}

/// A port nobody listens on now.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Whether a test that needs an S3 server must fail rather than skip without one.
pub fn required() -> bool {
    std::env::var_os("DEDELTA_REQUIRE_S3").is_some_and(|v| v == "1")
}

/// Starts moto, or explains why not: `Err(reason)` means skip, unless [`required`], in
/// which case this panics with the reason.
pub fn moto_or_skip() -> Option<MotoServer> {
    match MotoServer::start() {
        Ok(s) => Some(s),
        Err(why) if required() => panic!("DEDELTA_REQUIRE_S3=1 but {why}"),
        Err(why) => {
            eprintln!("skipping: {why} (install it with `pip install 'moto[server]'`, as scripts/test.sh does)");
            None
        }
    }
}

impl MotoServer {
    /// Starts `moto_server` on a free port and waits (up to 30 s) until it answers.
    pub fn start() -> Result<MotoServer, String> {
        let prog = program().ok_or("moto_server is not installed")?;
        let port = free_port().map_err(|e| format!("no free port: {e}"))?;
        let child = Command::new(&prog)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{} could not be started: {e}", prog.display()))?;
        let mut server = MotoServer {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if server.request("GET", "/").is_ok() {
                return Ok(server);
            }
            if let Ok(Some(st)) = server.child.try_wait() {
                return Err(format!("{} exited at start ({st})", prog.display()));
            }
            if Instant::now() > deadline {
                return Err(format!("{} did not answer within 30 s", prog.display()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends a bodiless request (moto does not check signatures) and returns the status.
    fn request(&self, method: &str, path: &str) -> std::io::Result<u16> {
        let addr = self.endpoint.trim_start_matches("http://");
        let mut s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )?;
        let mut resp = String::new();
        s.read_to_string(&mut resp)?;
        resp.split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad HTTP answer: {resp:.80}")))
    }

    /// Creates a bucket.
    pub fn create_bucket(&self, bucket: &str) -> std::io::Result<()> {
        match self.request("PUT", &format!("/{bucket}"))? {
            200..=299 => Ok(()),
            s => Err(std::io::Error::other(format!(
                "creating bucket {bucket}: HTTP {s}"
            ))),
        }
    }

    /// A new bucket and the repository URL of `prefix` in it (`s3:http://.../BUCKET/PREFIX`).
    pub fn new_repo_url(&self, bucket: &str, prefix: &str) -> std::io::Result<String> {
        self.create_bucket(bucket)?;
        Ok(format!("s3:{}/{bucket}/{prefix}", self.endpoint))
    }

    /// A config for `bucket`/`prefix` on this server.
    pub fn config(&self, bucket: &str, prefix: &str) -> S3Config {
        S3Config::parse(&format!("s3:{}/{bucket}/{prefix}", self.endpoint))
            .expect("an s3 url")
            .expect("a valid url")
    }

    /// Credentials moto accepts (any).
    pub fn credentials() -> Credentials {
        Credentials {
            access_key_id: Some("test".into()),
            secret_access_key: Some("test".into()),
            session_token: None,
            region: Some("us-east-1".into()),
        }
    }

    /// Environment variables for a child process to use those credentials.
    pub fn env() -> [(&'static str, &'static str); 3] {
        [
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_REGION", "us-east-1"),
        ]
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

//! Where an S3 repository is and how to reach it: the `s3:` repository URL and the
//! credentials from the standard AWS environment variables or profile files.

use crate::{BackendError as Error, Result};
use std::path::PathBuf;

/// The prefix of a repository URL that names an S3 repository.
pub const SCHEME: &str = "s3:";

/// An S3 repository's address and client settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Config {
    /// `http://HOST:PORT` or `https://HOST[:PORT]`: the endpoint, without a path.
    pub endpoint: String,
    /// The bucket.
    pub bucket: String,
    /// The key prefix of the repository inside the bucket (no leading or trailing `/`; may be
    /// empty).
    pub prefix: String,
    /// Requests in flight at most (`--connections`).
    pub connections: usize,
    /// Objects of this size or more are uploaded in parts (multipart upload).
    pub multipart_threshold: usize,
    /// The size of each part of a multipart upload (S3's minimum is 5 MiB, but for the last).
    pub part_size: usize,
    /// Bytes of containers read that are kept in memory to be read again without a request
    /// (see the S3 backend's `read_cache`).
    pub read_cache_bytes: usize,
}

/// [`S3Config::read_cache_bytes`] by default: the stored bytes of some 30 containers, a
/// restore's whole working set on the benchmark (1.2 GB restored from 40 MB stored).
pub const DEFAULT_READ_CACHE_BYTES: usize = 128 << 20;

/// Requests in flight by default: enough to keep a link busy with containers of a few MiB,
/// few enough not to thrash a small server.
pub const DEFAULT_CONNECTIONS: usize = 8;

impl S3Config {
    /// Parses `s3:http://HOST:PORT/BUCKET/PREFIX` (or `https://`, or no scheme for https, as
    /// restic's `s3:s3.amazonaws.com/BUCKET/PREFIX`); `None` if `url` is not an S3 URL.
    ///
    /// # Errors
    /// [`Error::Refused`] for an S3 URL without a host or a bucket.
    pub fn parse(url: &str) -> Option<Result<Self>> {
        let rest = url.strip_prefix(SCHEME)?;
        Some(Self::parse_after_scheme(rest, url))
    }

    fn parse_after_scheme(rest: &str, url: &str) -> Result<Self> {
        let (scheme, hostpath) = match rest.split_once("://") {
            Some((s @ ("http" | "https"), r)) => (s, r),
            Some((s, _)) => {
                return Err(Error::Refused(format!(
                    "{url}: unknown scheme {s:?} (use s3:http://HOST:PORT/BUCKET/PREFIX or s3:https://...)"
                )))
            }
            None => ("https", rest),
        };
        let mut parts = hostpath.splitn(3, '/');
        let host = parts.next().unwrap_or_default();
        let bucket = parts.next().unwrap_or_default();
        let prefix = parts.next().unwrap_or_default().trim_matches('/');
        if host.is_empty() || bucket.is_empty() {
            return Err(Error::Refused(format!(
                "{url}: an S3 repository is s3:http://HOST:PORT/BUCKET/PREFIX (host and bucket required)"
            )));
        }
        Ok(S3Config {
            endpoint: format!("{scheme}://{host}"),
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            connections: DEFAULT_CONNECTIONS,
            multipart_threshold: 16 << 20,
            part_size: 8 << 20,
            read_cache_bytes: DEFAULT_READ_CACHE_BYTES,
        })
    }

    /// The URL this config was parsed from (for messages).
    pub fn url(&self) -> String {
        let mut u = format!("{SCHEME}{}/{}", self.endpoint, self.bucket);
        if !self.prefix.is_empty() {
            u.push('/');
            u.push_str(&self.prefix);
        }
        u
    }
}

/// Credentials and region for S3 requests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    /// `aws_access_key_id`.
    pub access_key_id: Option<String>,
    /// `aws_secret_access_key`.
    pub secret_access_key: Option<String>,
    /// `aws_session_token` (temporary credentials).
    pub session_token: Option<String>,
    /// The region requests are signed for.
    pub region: Option<String>,
}

impl Credentials {
    /// From the standard sources, first found first: `AWS_ACCESS_KEY_ID` /
    /// `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN`, else the profile `AWS_PROFILE` (or
    /// `default`) of `AWS_SHARED_CREDENTIALS_FILE` (or `~/.aws/credentials`); the region from
    /// `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region` in the credentials file or
    /// in `AWS_CONFIG_FILE` (or `~/.aws/config`), else `us-east-1`.
    pub fn from_environment() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let profile = var("AWS_PROFILE").unwrap_or_else(|| "default".into());
        let home = var("HOME").map(PathBuf::from);
        let file = |env: &str, name: &str| {
            var(env)
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(".aws").join(name)))
                .and_then(|p| std::fs::read_to_string(p).ok())
                .unwrap_or_default()
        };
        let creds_file = file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
        let config_file = file("AWS_CONFIG_FILE", "config");
        let from_creds = |k: &str| ini_value(&creds_file, &profile, k);
        // In the config file, a profile other than the default is `[profile NAME]`.
        let config_section = if profile == "default" {
            profile.clone()
        } else {
            format!("profile {profile}")
        };
        let from_config = |k: &str| ini_value(&config_file, &config_section, k);
        let mut c = Credentials::default();
        if let (Some(id), Some(secret)) = (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
            c.access_key_id = Some(id);
            c.secret_access_key = Some(secret);
            c.session_token = var("AWS_SESSION_TOKEN");
        } else {
            c.access_key_id = from_creds("aws_access_key_id");
            c.secret_access_key = from_creds("aws_secret_access_key");
            c.session_token = from_creds("aws_session_token");
        }
        c.region = var("AWS_REGION")
            .or_else(|| var("AWS_DEFAULT_REGION"))
            .or_else(|| from_creds("region"))
            .or_else(|| from_config("region"))
            .or_else(|| Some("us-east-1".into()));
        c
    }
}

/// The value of `key` in section `[section]` of an INI text (AWS profile files: `key = value`
/// lines, `#` and `;` comments).
pub fn ini_value(text: &str, section: &str, key: &str) -> Option<String> {
    let mut in_section = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_section = name.trim() == section;
            continue;
        }
        if in_section {
            if let Some((k, v)) = line.split_once('=') {
                if k.trim() == key {
                    return Some(v.trim().to_string());
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_repository_urls() {
        let c = S3Config::parse("s3:http://127.0.0.1:9000/bkt/some/prefix/")
            .unwrap()
            .unwrap();
        assert_eq!(c.endpoint, "http://127.0.0.1:9000");
        assert_eq!(c.bucket, "bkt");
        assert_eq!(c.prefix, "some/prefix");
        assert_eq!(c.url(), "s3:http://127.0.0.1:9000/bkt/some/prefix");
        let c = S3Config::parse("s3:s3.amazonaws.com/bkt").unwrap().unwrap();
        assert_eq!(c.endpoint, "https://s3.amazonaws.com");
        assert_eq!(c.prefix, "");
        assert!(S3Config::parse("/tmp/repo").is_none());
        for bad in ["s3:http://host", "s3:ftp://h/b", "s3:", "s3:http:///b"] {
            assert!(S3Config::parse(bad).unwrap().is_err(), "{bad}");
        }
    }

    #[test]
    fn reads_profile_files() {
        let text = "# comment\n[default]\naws_access_key_id = A\n\n[other]\naws_access_key_id=B\nregion = eu-west-1\n";
        assert_eq!(
            ini_value(text, "default", "aws_access_key_id").as_deref(),
            Some("A")
        );
        assert_eq!(
            ini_value(text, "other", "aws_access_key_id").as_deref(),
            Some("B")
        );
        assert_eq!(
            ini_value(text, "other", "region").as_deref(),
            Some("eu-west-1")
        );
        assert_eq!(ini_value(text, "default", "region"), None);
        assert_eq!(ini_value(text, "missing", "aws_access_key_id"), None);
    }
}

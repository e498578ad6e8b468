//! Lua scripts: embedded once, run by EVALSHA, falling back to EVAL when the
//! server's script cache is empty (NOSCRIPT after a restart, failover or
//! `SCRIPT FLUSH`). EVAL also caches the script, so the next EVALSHA hits.

use std::time::Duration;

use fred::types::{FromValue, Key, Value};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::redis::link::{Link, ScriptCall};

/// One script of `lua/`, with its helper files in front (see [`SCRIPTS`]).
pub(crate) struct LuaScript {
    pub(crate) name: &'static str,
    src: &'static str,
    sha: String,
}

impl LuaScript {
    /// The script `SCRIPTS[index]`, composed.
    pub(crate) fn composed(index: usize) -> LuaScript {
        let src = COMPOSED[index].as_str();
        LuaScript {
            name: SCRIPTS[index].name,
            src,
            sha: fred::util::sha1_hash(src),
        }
    }

    /// Runs the script once: no re-send after a reconnect (for scripts
    /// whose second run would change the outcome, e.g. counting down a
    /// re-entrant hold). `key` names the lock in errors.
    ///
    /// The EVAL fallback only follows a NOSCRIPT reply and the re-send only
    /// a cluster refusal while a slot moves (MOVED/ASK after a migration or
    /// a failover, TRYAGAIN mid-migration): each means the script did not
    /// run, so it ran at most once. Refusals are retried for up to 2 s.
    pub(crate) async fn run<R: FromValue>(
        &self,
        link: &dyn Link,
        key: &str,
        keys: Vec<Key>,
        args: Vec<Value>,
    ) -> Result<R> {
        self.run_with(link, key, keys, args, 1).await
    }

    /// Runs a script whose second run changes nothing that matters (owner-
    /// and token-checked releases, renewals, reads, an acquisition that a
    /// repeat only re-enters), with up to 3 sends.
    ///
    /// What the attempts change, as fred 10.1 behaves: with one attempt
    /// ([`LuaScript::run`]) a script in flight when the connection drops is
    /// **not** sent again after the reconnect; it fails with an IO error
    /// (outcome unknown, compensated by the caller; shown through the fault
    /// proxy by `tests/lock/faults.rs::a_force_unlock_whose_reply_is_lost_never_runs_twice`).
    /// With more attempts it **may** be sent again and run twice (the
    /// conformance matrix's endings saw an acquisition reset after it ran
    /// come back granted), and fred re-sends after a cluster redirection.
    /// So only scripts whose second run changes nothing that matters come
    /// here; scripts that must never run twice (force-unlock deletes whoever
    /// holds the lock, a semaphore acquisition counts permits) use
    /// [`LuaScript::run`].
    pub(crate) async fn run_idempotent<R: FromValue>(
        &self,
        link: &dyn Link,
        key: &str,
        keys: Vec<Key>,
        args: Vec<Value>,
    ) -> Result<R> {
        self.run_with(link, key, keys, args, 3).await
    }

    /// Runs the script with at most `attempts` sends (see [`LuaScript::run`]
    /// and [`LuaScript::run_idempotent`]).
    pub(crate) async fn run_with<R: FromValue>(
        &self,
        link: &dyn Link,
        key: &str,
        keys: Vec<Key>,
        args: Vec<Value>,
        attempts: u32,
    ) -> Result<R> {
        self.run_refused_for(link, key, keys, args, attempts, REFUSED_RETRY_FOR)
            .await
    }

    /// [`LuaScript::run_with`] that returns a refusal while the slot moves
    /// at once (the caller has a way that the cluster does not refuse).
    pub(crate) async fn run_unless_refused<R: FromValue>(
        &self,
        link: &dyn Link,
        key: &str,
        keys: Vec<Key>,
        args: Vec<Value>,
        attempts: u32,
    ) -> Result<R> {
        self.run_refused_for(link, key, keys, args, attempts, Duration::ZERO)
            .await
    }

    async fn run_refused_for<R: FromValue>(
        &self,
        link: &dyn Link,
        key: &str,
        keys: Vec<Key>,
        args: Vec<Value>,
        attempts: u32,
        refusals_for: Duration,
    ) -> Result<R> {
        let mut refused_since = None;
        let mut pause = Duration::from_millis(5);
        loop {
            let send = |body| {
                link.script(ScriptCall {
                    sha: &self.sha,
                    body,
                    keys: keys.clone(),
                    args: args.clone(),
                    attempts,
                })
            };
            let result = match send(None).await {
                Err(e) if e.details().starts_with("NOSCRIPT") => {
                    tracing::debug!(script = self.name, "NOSCRIPT, sending the script body");
                    send(Some(self.src)).await
                }
                other => other,
            }
            .and_then(R::from_value);
            match result {
                Err(e) if crate::error::refused_unrun(&e) => {
                    // The slot is moving: the script did not run. Send it
                    // again (fred has refreshed its slot map after MOVED)
                    // until the slot settles or REFUSED_RETRY_FOR passes.
                    let since = *refused_since.get_or_insert_with(Instant::now);
                    if since.elapsed() + pause > refusals_for {
                        return Err(Error::from_script(self.name, key, e));
                    }
                    tracing::debug!(script = self.name, error = %e, "refused while the slot moves, sending again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                other => return other.map_err(|e| Error::from_script(self.name, key, e)),
            }
        }
    }
}

/// How long a script the cluster refuses while its slot moves is sent again.
const REFUSED_RETRY_FOR: Duration = Duration::from_secs(2);

/// Longest lease or wait bound accepted, to catch unit mistakes.
const MAX_LEASE: Duration = Duration::from_secs(366 * 24 * 3600);
/// A fencing token as a script argument; `None` is `''` (no token). An
/// integer goes out as the same bulk string of decimal digits a string
/// would, without building one (two allocations per argument: the string,
/// and fred's shared copy of it).
pub(crate) fn token_arg(token: Option<u64>) -> Value {
    match token.map(|t| (t, i64::try_from(t))) {
        None => Value::String("".into()),
        Some((_, Ok(t))) => Value::Integer(t),
        Some((t, Err(_))) => Value::String(t.to_string().into()),
    }
}

/// `d` in whole milliseconds for Lua, rounded up; zero and absurd values are
/// [`Error::InvalidArgument`].
pub(crate) fn checked_ms(what: &str, d: Duration) -> Result<i64> {
    if d.is_zero() {
        return Err(Error::InvalidArgument(format!("{what} must not be zero")));
    }
    if d > MAX_LEASE {
        return Err(Error::InvalidArgument(format!(
            "{what} of {d:?} is longer than a year (366 days); is the unit right?"
        )));
    }
    Ok(i64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(i64::MAX))
}

/// A helper file of `lua/lib/`: functions that scripts share, put in
/// front of the scripts that call them (or, `restart_guard.lua`, a check
/// that runs first).
pub(crate) struct Helper {
    /// Its path under `lua/`.
    pub(crate) name: &'static str,
    src: &'static str,
}

/// One script of `lua/` and the helper files it is made of.
pub(crate) struct ScriptFile {
    /// Its file name in `lua/`.
    pub(crate) name: &'static str,
    pub(crate) body: &'static str,
    /// In the order of [`HELPERS`].
    helpers: &'static [&'static Helper],
}

macro_rules! helper {
    ($file:literal) => {
        &Helper {
            name: concat!("lib/", $file),
            src: include_str!(concat!("../../lua/lib/", $file)),
        }
    };
}

macro_rules! script_file {
    ($file:literal, [$($helper:ident),*]) => {
        ScriptFile {
            name: $file,
            body: include_str!(concat!("../../lua/", $file)),
            helpers: &[$($helper),*],
        }
    };
}

const RESTART_GUARD: &Helper = helper!("restart_guard.lua");
const COMMON: &Helper = helper!("common.lua");
const TOKENS: &Helper = helper!("tokens.lua");
const LOCK: &Helper = helper!("lock.lua");
const SEMAPHORE: &Helper = helper!("semaphore.lua");
const SEMAPHORE_QUEUE: &Helper = helper!("semaphore_queue.lua");
const RW_QUEUE: &Helper = helper!("rw_queue.lua");
const LATCH: &Helper = helper!("latch.lua");

/// Every helper file, in the order they are put in front of a script: each
/// calls only functions of the files before it.
const HELPERS: &[&Helper] = &[
    RESTART_GUARD,
    COMMON,
    TOKENS,
    LOCK,
    SEMAPHORE,
    SEMAPHORE_QUEUE,
    RW_QUEUE,
    LATCH,
];

/// Every script of `lua/` and the helper files of `lua/lib/` it is made of:
/// those whose functions it calls (or that they call), and the restart
/// guard for the acquisitions that take its arguments. The one place that
/// says so: the library's scripts ([`lua_script!`]) and the workspace's
/// tests, simulator and benchmarks
/// ([`__private::script_source`](crate::__private::script_source)) compose
/// them from it. The unit tests below check it against what each script
/// calls.
pub(crate) const SCRIPTS: &[ScriptFile] = &[
    script_file!(
        "fair_lock_acquire.lua",
        [RESTART_GUARD, COMMON, TOKENS, LOCK]
    ),
    script_file!("fair_lock_force_unlock.lua", [COMMON, TOKENS, LOCK]),
    script_file!("fair_lock_leave.lua", [COMMON, TOKENS, LOCK]),
    script_file!("fenced_write.lua", [COMMON]),
    script_file!("inspect.lua", [COMMON]),
    script_file!("latch_count_down.lua", [COMMON, LATCH]),
    script_file!("latch_read.lua", [COMMON, LATCH]),
    script_file!("latch_set_count.lua", [COMMON, LATCH]),
    script_file!("lock_abandon.lua", [COMMON, TOKENS, LOCK]),
    script_file!("lock_acquire.lua", [RESTART_GUARD, COMMON, TOKENS, LOCK]),
    script_file!("lock_advance_fence.lua", [COMMON, TOKENS]),
    script_file!("lock_check.lua", []),
    script_file!("lock_force_unlock.lua", [COMMON, TOKENS]),
    script_file!("lock_hand_off.lua", [COMMON]),
    script_file!("lock_publish_identity.lua", [COMMON]),
    script_file!("lock_release.lua", [COMMON, TOKENS, LOCK]),
    script_file!("lock_renew.lua", []),
    script_file!(
        "rw_lock_acquire.lua",
        [RESTART_GUARD, COMMON, TOKENS, RW_QUEUE]
    ),
    script_file!("rw_lock_check.lua", [COMMON]),
    script_file!("rw_lock_force_unlock.lua", [COMMON, TOKENS, RW_QUEUE]),
    script_file!("rw_lock_release.lua", [COMMON, TOKENS, RW_QUEUE]),
    script_file!("rw_lock_renew.lua", []),
    script_file!(
        "semaphore_acquire.lua",
        [RESTART_GUARD, COMMON, TOKENS, SEMAPHORE, SEMAPHORE_QUEUE]
    ),
    script_file!("semaphore_add_permits.lua", [COMMON]),
    script_file!("semaphore_available.lua", [COMMON, SEMAPHORE]),
    script_file!("semaphore_check.lua", [COMMON]),
    script_file!("semaphore_force_release.lua", [COMMON]),
    script_file!(
        "semaphore_release.lua",
        [COMMON, TOKENS, SEMAPHORE, SEMAPHORE_QUEUE]
    ),
    script_file!("semaphore_renew.lua", [COMMON]),
    script_file!("semaphore_reset_permits.lua", [COMMON]),
    script_file!("semaphore_set_permits.lua", [COMMON]),
];

/// The index in [`SCRIPTS`] of the script `name`. Evaluated in a constant
/// ([`lua_script!`]): a name missing there fails the build, never a run.
#[allow(clippy::panic)]
pub(crate) const fn script_index(name: &str) -> usize {
    let mut i = 0;
    while i < SCRIPTS.len() {
        if same(SCRIPTS[i].name.as_bytes(), name.as_bytes()) {
            return i;
        }
        i += 1;
    }
    panic!("a script missing from SCRIPTS (crates/redisync/src/redis/script.rs)");
}

const fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Every script of [`SCRIPTS`] as it is sent, composed once.
static COMPOSED: std::sync::LazyLock<Vec<String>> =
    std::sync::LazyLock::new(|| SCRIPTS.iter().map(compose).collect());

/// The script's helper files and then its body, each after a line naming
/// its file: Lua's error line N, below the line P that names a file, is
/// line N - P of that file.
fn compose(script: &ScriptFile) -> String {
    let mut src = helpers_of(&[script]);
    push_part(&mut src, script.name, script.body);
    src
}

fn push_part(src: &mut String, name: &str, text: &str) {
    src.push_str("-- lua/");
    src.push_str(name);
    src.push('\n');
    src.push_str(text);
}

/// The helper files of `scripts`, each once, in the order of [`HELPERS`],
/// each after a line naming it. (Helpers are told by name: two uses of a
/// `const` reference need not share an address.)
fn helpers_of(scripts: &[&ScriptFile]) -> String {
    let mut src = String::new();
    for helper in HELPERS {
        if scripts
            .iter()
            .any(|s| s.helpers.iter().any(|h| h.name == helper.name))
        {
            push_part(&mut src, helper.name, helper.src);
        }
    }
    src
}

fn script_file(name: &str) -> Option<&'static ScriptFile> {
    SCRIPTS.iter().find(|s| s.name == name)
}

/// The script `name` of `lua/` as the library sends it, or `None` when
/// there is none of that name.
pub(crate) fn source(name: &str) -> Option<&'static str> {
    let i = SCRIPTS.iter().position(|s| s.name == name)?;
    Some(COMPOSED[i].as_str())
}

/// The helper files that the scripts `names` of `lua/` are made of, each
/// once and in the order the library puts them in front of a script; `None`
/// when one of `names` is no script.
pub(crate) fn helpers(names: &[&str]) -> Option<String> {
    let scripts = names
        .iter()
        .map(|name| script_file(name))
        .collect::<Option<Vec<_>>>()?;
    Some(helpers_of(&scripts))
}

/// A `static` script of `lua/`, with the helper files of `lua/lib/` that
/// [`SCRIPTS`] lists for it in front.
macro_rules! lua_script {
    ($static:ident, $file:literal) => {
        pub(crate) static $static: std::sync::LazyLock<$crate::redis::script::LuaScript> =
            std::sync::LazyLock::new(|| {
                const INDEX: usize = $crate::redis::script::script_index($file);
                $crate::redis::script::LuaScript::composed(INDEX)
            });
    };
}
pub(crate) use lua_script;

#[cfg(test)]
mod tests {
    use super::*;

    /// Tokens go out as integers (fred sends them as bulk strings of their
    /// digits, as the strings were), unless too large for one.
    #[test]
    fn token_args_are_integers_where_they_fit() {
        assert_eq!(token_arg(None), Value::String("".into()));
        assert_eq!(token_arg(Some(42)), Value::Integer(42));
        let huge = u64::MAX;
        assert_eq!(
            token_arg(Some(huge)),
            Value::String(huge.to_string().into())
        );
    }

    /// `text` with its comments and the insides of its strings blanked
    /// (same length: offsets stay valid).
    fn code_of(text: &str) -> Vec<u8> {
        let mut code = text.as_bytes().to_vec();
        let mut i = 0;
        while i < code.len() {
            match code[i] {
                b'-' if code.get(i + 1) == Some(&b'-') => {
                    while i < code.len() && code[i] != b'\n' {
                        code[i] = b' ';
                        i += 1;
                    }
                }
                quote @ (b'\'' | b'"') => {
                    i += 1;
                    while i < code.len() && code[i] != quote {
                        let escape = code[i] == b'\\';
                        code[i] = b' ';
                        i += 1;
                        if escape && i < code.len() {
                            code[i] = b' ';
                            i += 1;
                        }
                    }
                    i += 1;
                }
                _ => i += 1,
            }
        }
        code
    }

    fn is_word(b: u8) -> bool {
        b.is_ascii_alphanumeric() || b == b'_'
    }

    /// The functions `local function name(` defines in `text`, with their
    /// offsets.
    fn definitions(text: &str) -> Vec<(String, usize)> {
        let code = String::from_utf8(code_of(text)).unwrap();
        code.match_indices("local function ")
            .map(|(at, head)| {
                let name: String = code[at + head.len()..]
                    .bytes()
                    .take_while(|b| is_word(*b))
                    .map(char::from)
                    .collect();
                (name, at)
            })
            .collect()
    }

    /// The names `text` calls (`name(`, not `x.name(`, `x:name(` or a
    /// definition), with their offsets.
    fn calls(text: &str) -> Vec<(String, usize)> {
        let code = code_of(text);
        let mut found = Vec::new();
        let mut i = 0;
        while i < code.len() {
            if !is_word(code[i]) || (i > 0 && is_word(code[i - 1])) {
                i += 1;
                continue;
            }
            let start = i;
            while i < code.len() && is_word(code[i]) {
                i += 1;
            }
            let before = &code[..start];
            let member = before.last().is_some_and(|b| *b == b'.' || *b == b':');
            if code.get(i) == Some(&b'(') && !member && !before.ends_with(b"function ") {
                found.push((String::from_utf8(code[start..i].to_vec()).unwrap(), start));
            }
        }
        found
    }

    fn lua_files(dir: &str) -> std::collections::BTreeSet<String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "lua"))
            .map(|path| path.file_name().unwrap().to_str().unwrap().to_owned())
            .collect()
    }

    /// Every script of `lua/` is in SCRIPTS once, every helper file of
    /// `lua/lib/` in HELPERS once, and nothing else.
    #[test]
    fn every_script_and_helper_file_is_listed_once() {
        let scripts: Vec<String> = SCRIPTS.iter().map(|s| s.name.to_owned()).collect();
        let listed: std::collections::BTreeSet<String> = scripts.iter().cloned().collect();
        assert_eq!(listed.len(), scripts.len(), "a script listed twice");
        assert_eq!(listed, lua_files("lua"));
        let helpers: std::collections::BTreeSet<String> = HELPERS
            .iter()
            .map(|h| h.name["lib/".len()..].to_owned())
            .collect();
        assert_eq!(helpers.len(), HELPERS.len(), "a helper file listed twice");
        assert_eq!(helpers, lua_files("lua/lib"));
    }

    /// Each script has in front of it exactly the helper files it needs:
    /// every helper function that it or its helpers call is defined before
    /// the call (else Lua's "attempt to call a nil value" at run time), each
    /// helper file it has defines a function it needs, and the restart
    /// guard is there for the scripts whose header says they take its
    /// arguments. Helpers come in the order of HELPERS.
    #[test]
    fn each_script_has_the_helpers_it_calls_and_no_other() {
        use std::collections::{BTreeMap, BTreeSet};
        // Where each helper function is defined.
        let mut home: BTreeMap<String, &str> = BTreeMap::new();
        for helper in HELPERS {
            for (name, _) in definitions(helper.src) {
                let before = home.insert(name.clone(), helper.name);
                assert!(
                    before.is_none(),
                    "{name} defined twice, in {before:?} and {}",
                    helper.name
                );
            }
        }
        let guard = RESTART_GUARD;
        assert!(definitions(guard.src).is_empty() && guard.src.contains("'~restart-guard'"));
        for script in SCRIPTS {
            let name = script.name;
            let order: Vec<usize> = script
                .helpers
                .iter()
                .map(|h| HELPERS.iter().position(|x| x.name == h.name).unwrap())
                .collect();
            assert!(
                order.windows(2).all(|w| w[0] < w[1]),
                "{name}: helpers out of the order of HELPERS, or twice"
            );
            for (own, _) in definitions(script.body) {
                assert!(
                    !home.contains_key(&own),
                    "{name} defines {own}, a helper's name"
                );
            }
            let parts: Vec<(&str, &str)> = script
                .helpers
                .iter()
                .map(|h| (h.name, h.src))
                .chain([(name, script.body)])
                .collect();
            // (part, offset) of each helper function this script has.
            let mut defined: BTreeMap<String, (usize, usize)> = BTreeMap::new();
            for (k, (_, src)) in parts.iter().enumerate() {
                for (f, at) in definitions(src) {
                    if home.contains_key(&f) {
                        defined.insert(f, (k, at));
                    }
                }
            }
            // Who calls what, checked for order; then what the body needs.
            let mut callees: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            let mut needed: BTreeSet<String> = BTreeSet::new();
            for (k, (part, src)) in parts.iter().enumerate() {
                let defs = definitions(src);
                for (f, at) in calls(src) {
                    let Some(file) = home.get(&f) else { continue };
                    assert!(
                        defined.get(&f).is_some_and(|d| *d < (k, at)),
                        "{name}: lua/{part} calls {f} of lua/{file}, which is not in front of it (add it to the script's helpers in SCRIPTS)"
                    );
                    match defs.iter().rev().find(|(_, d)| *d < at) {
                        Some((caller, _)) if k < parts.len() - 1 => {
                            callees.entry(caller.clone()).or_default().insert(f);
                        }
                        _ => {
                            needed.insert(f);
                        }
                    }
                }
            }
            let mut todo: Vec<String> = needed.iter().cloned().collect();
            while let Some(f) = todo.pop() {
                for g in callees.get(&f).into_iter().flatten() {
                    if needed.insert(g.clone()) {
                        todo.push(g.clone());
                    }
                }
            }
            for helper in script.helpers {
                let functions = definitions(helper.src);
                if helper.name == guard.name {
                    continue;
                }
                assert!(
                    functions.iter().any(|(f, _)| needed.contains(f)),
                    "{name} has lua/{} in front of it but needs none of its functions",
                    helper.name
                );
            }
            let guarded = script.helpers.iter().any(|h| h.name == guard.name);
            assert_eq!(
                guarded,
                script.body.contains("lib/restart_guard.lua"),
                "{name}: the restart guard is in front of the scripts whose header names it, and only those"
            );
        }
    }

    /// The composed source names each file before its text, so that a Lua
    /// error's line can be traced to its file.
    #[test]
    fn a_composed_script_names_each_file_before_its_lines() {
        let src = source("latch_read.lua").unwrap();
        let lines: Vec<&str> = src.lines().collect();
        assert_eq!(lines[0], "-- lua/lib/common.lua");
        let body_at = lines
            .iter()
            .position(|l| *l == "-- lua/latch_read.lua")
            .unwrap();
        let body: Vec<&str> = include_str!("../../lua/latch_read.lua").lines().collect();
        assert_eq!(lines[body_at + 1..], body[..], "line N - P of the file");
        assert!(lines.contains(&"-- lua/lib/latch.lua"));
        assert!(
            !src.contains("hand_rw"),
            "a latch's script has no read-write hand-off"
        );
        let both = helpers(&["latch_count_down.lua", "latch_set_count.lua"]).unwrap();
        assert!(src.starts_with(&both), "each helper once, in order");
        assert_eq!(helpers(&["latch_count_down.lua", "no_such.lua"]), None);
        assert_eq!(source("no_such.lua"), None);
        assert_eq!(
            source("lock_check.lua").unwrap(),
            format!(
                "-- lua/lock_check.lua\n{}",
                include_str!("../../lua/lock_check.lua")
            )
        );
    }
}

//! The simulation in `cargo test`: fixed seeds of the torture workload on
//! simulated servers, checked by the torture test's checker; a seed
//! replayed gives the same history; and every public async method of the
//! library's primitives is called there, ending every way it can.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use redisync_sim::{simulate, SimConfig, SimOutcome};
use redisync_torture::{Coverage, Ending};

/// Seeds every `cargo test` runs (60 virtual seconds each, every fault).
/// 30033 showed two flows of one owner holding at once (a re-entry's undo
/// deleting the next flow's grant) before the re-entry kept the hold's
/// turns; a seed's history follows the code, so it guards that less
/// precisely as the code changes.
const SEEDS: [u64; 4] = [1, 2, 3, 30033];

/// The runs of [`SEEDS`], made once for the tests of this file (they run
/// in parallel threads: the second waits for the first's runs).
fn fixed_runs() -> &'static [SimOutcome] {
    static RUNS: OnceLock<Vec<SimOutcome>> = OnceLock::new();
    RUNS.get_or_init(|| {
        SEEDS
            .iter()
            .map(|&seed| simulate(&SimConfig::new(seed)).expect("the simulation runs"))
            .collect()
    })
}

#[test]
fn fixed_seeds_break_no_rule() {
    for outcome in fixed_runs() {
        let seed = outcome.seed;
        let violations: Vec<String> = outcome
            .report
            .violations
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            violations.is_empty(),
            "seed {seed} (replay: cargo run -p redisync-sim -- --seed {seed} --history FILE): {violations:#?}"
        );
        assert!(
            outcome.report.grants > 1000 && !outcome.schedule.is_empty(),
            "seed {seed} checked too little: {} grants, {} faults",
            outcome.report.grants,
            outcome.schedule.len()
        );
    }
}

#[test]
fn a_seed_replays_exactly() {
    // 20 virtual seconds: enough faults to diverge on, a third of the cost.
    let config = SimConfig {
        run_for: std::time::Duration::from_secs(20),
        ..SimConfig::new(7)
    };
    let first = simulate(&config).expect("the simulation runs");
    let again = simulate(&config).expect("the simulation runs");
    assert!(
        first.schedule.len() >= 3 && first.report.grants > 300,
        "seed 7 replayed too little: {} faults, {} grants",
        first.schedule.len(),
        first.report.grants
    );
    assert_eq!(first.lines.len(), again.lines.len());
    if let Some(i) = (0..first.lines.len()).find(|&i| first.lines[i] != again.lines[i]) {
        panic!(
            "seed 7 did not replay: line {i}\n  first: {}\n  again: {}",
            first.lines[i], again.lines[i]
        );
    }
    assert_eq!(first.digest, again.digest);
    assert_eq!(first.commands, again.commands);
    assert_eq!(first.coverage, again.coverage);
}

/// Operations (or one ending of one) the fixed seeds need not reach, each
/// with why. An entry whose method no longer exists fails the test. (The
/// signature rules out the rest: no `error` for a method that returns no
/// `Result`, no `reply` for one that returns `Result<Infallible>`.)
const EXEMPT: [(&str, Option<Ending>, &str); 3] = [
    (
        "ClientBuilder::connect",
        None,
        "set-up: the simulation connects its clients with connect_on",
    ),
    ("Client::connect", None, "set-up, as ClientBuilder::connect"),
    (
        "Client::shutdown",
        Some(Ending::Error),
        "never fails (release failures are logged; the leases end)",
    ),
];

#[test]
fn every_public_async_method_ends_every_way() {
    let methods = public_async_methods();
    let names: BTreeSet<&str> = methods.keys().map(String::as_str).collect();
    // The parse found the API (a broken parse would check nothing).
    for known in [
        "Lock::try_lock",
        "ReadLock::lock",
        "LockGuard::lost",
        "Client::list",
        "LeaderWatch::changed",
        "LeaderTerm::set_identity",
        "Fenced::write",
        "Lock::try_lock_with_min_token",
        "Client::server_uptime",
    ] {
        assert!(
            names.contains(known),
            "the source parse missed {known}: {names:?}"
        );
    }
    for (op, _, why) in EXEMPT {
        assert!(
            names.contains(op),
            "{op} is exempt ({why}) but no longer a public async method: drop its exemption"
        );
    }
    println!("{} public async methods: {names:?}", names.len());
    let mut coverage = Coverage::default();
    for outcome in fixed_runs() {
        coverage.merge(&outcome.coverage);
    }
    let mut missing = Vec::new();
    for (op, endings) in &methods {
        for &ending in endings {
            let exempt = EXEMPT
                .iter()
                .any(|(o, e, _)| o == op && e.is_none_or(|e| e == ending));
            if !exempt && coverage.count(op, ending) == 0 {
                missing.push(format!("{op} {ending}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "calls the torture workload never made on seeds {SEEDS:?} (operation, ending): {missing:#?}\ncoverage:\n{coverage}"
    );
}

/// `Type::method` for every `pub async fn` of a type `crates/redisync`
/// exports (`pub use` in its `lib.rs`, or a type of a public module such
/// as `redisync::leader`), read from its source: methods of
/// `impl Type {` blocks, of `impl $x {` blocks inside a `macro_rules!` for
/// each type the macro is invoked with (`name!(Type, ...)`), and the free
/// functions of a public module whose first parameter is `&Type` (the
/// hidden `redisync::__private`, whose functions take the handles); with
/// the endings its signature allows.
fn public_async_methods() -> BTreeMap<String, Vec<Ending>> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../redisync/src");
    let mut files = Vec::new();
    collect_rs(&src, &mut files);
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs reads");
    let exported = exported_names(&lib, |module| {
        std::fs::read_to_string(src.join(format!("{module}.rs"))).expect("a public module reads")
    });
    let modules = public_modules(&lib);
    let mut methods = BTreeMap::new();
    // Per macro: its methods; then its invocations.
    let mut by_macro: Vec<(String, Vec<Method>)> = Vec::new();
    let mut invocations: Vec<(String, String)> = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a source file reads");
        let in_public_module = file.parent() == Some(src.as_path())
            && file
                .file_stem()
                .and_then(|s| s.to_str())
                .is_some_and(|stem| modules.iter().any(|m| m == stem));
        let mut in_macro: Option<String> = None;
        let mut current: Option<String> = None;
        let lines: Vec<&str> = text.lines().collect();
        for (i, &line) in lines.iter().enumerate() {
            if let Some(rest) = line.strip_prefix("macro_rules! ") {
                in_macro = Some(rest.trim_end_matches([' ', '{']).to_owned());
                by_macro.push((in_macro.clone().unwrap_or_default(), Vec::new()));
                continue;
            }
            if line.starts_with('}') {
                // The end of a top-level item.
                in_macro = None;
                current = None;
                continue;
            }
            let trimmed = line.trim_start();
            if trimmed.starts_with("impl") {
                // A trait's impl has no inherent methods.
                current = impl_target(trimmed);
                continue;
            }
            if let Some(name) = trimmed
                .strip_prefix("pub async fn ")
                .and_then(|r| r.split(['(', '<']).next())
            {
                let method = (name.to_owned(), endings(&lines[i..]));
                match (&in_macro, &current) {
                    (Some(_), Some(ty)) if ty.starts_with('$') => {
                        if let Some(m) = by_macro.last_mut() {
                            m.1.push(method);
                        }
                    }
                    (_, Some(ty)) if exported.contains(ty) => {
                        methods.insert(format!("{ty}::{name}"), method.1);
                    }
                    (None, None) if in_public_module && line == trimmed => {
                        if let Some(ty) =
                            first_parameter_type(&lines[i..]).filter(|ty| exported.contains(ty))
                        {
                            methods.insert(format!("{ty}::{name}"), method.1);
                        }
                    }
                    _ => {}
                }
                continue;
            }
            if line == trimmed {
                if let Some((mac, args)) = line.split_once("!(") {
                    let ty = args.split([',', ')']).next().unwrap_or("").trim();
                    invocations.push((mac.to_owned(), ty.to_owned()));
                }
            }
        }
    }
    for (mac, ty) in invocations {
        if !exported.contains(&ty) {
            continue;
        }
        for (_, found) in by_macro.iter().filter(|(m, _)| *m == mac) {
            for (name, endings) in found {
                methods.insert(format!("{ty}::{name}"), endings.clone());
            }
        }
    }
    methods
}

/// A method's name and the endings its signature allows.
type Method = (String, Vec<Ending>);

/// The endings a method's signature (from its first line to its body's
/// brace) allows: `error` only when it returns a `Result`, `reply` unless
/// it returns `Result<Infallible>`.
fn endings(from: &[&str]) -> Vec<Ending> {
    let mut signature = String::new();
    for line in from {
        signature.push_str(line.trim());
        if line.trim_end().ends_with('{') || line.trim_start().starts_with("where") {
            break;
        }
    }
    let returns = signature
        .split_once("->")
        .map_or("", |(_, r)| r)
        .trim_start();
    let result = returns.starts_with("Result") || returns.contains("::Result<");
    let never_ok = returns.contains("Infallible");
    Ending::ALL
        .into_iter()
        .filter(|e| match e {
            Ending::Error => result,
            Ending::Reply => !never_ok,
            Ending::Timeout | Ending::Dropped => true,
        })
        .collect()
}

/// `Type` of `impl Type {` or `impl<...> Type {` (and `$x` in a macro);
/// `None` for a trait's impl (`impl Trait for Type`) and anything else.
fn impl_target(line: &str) -> Option<String> {
    let rest = line.strip_prefix("impl")?;
    let rest = if let Some(generic) = rest.strip_prefix('<') {
        generic.split_once('>')?.1
    } else {
        rest
    };
    let rest = rest.strip_prefix(' ')?.strip_suffix(" {")?;
    if rest.contains(" for ") {
        return None;
    }
    let ty = rest.split('<').next()?.trim();
    (!ty.is_empty()
        && ty
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '$'))
    .then(|| ty.to_owned())
}

/// The names `pub use module::{A, B};` and `pub use module::A;` of the
/// crate root export, and the types of its public modules (`pub mod
/// name;`, whose source `module(name)` reads): their top-level `pub
/// struct`, `pub enum`, `pub trait` and `pub type` items and their own
/// `pub use` names.
fn exported_names(lib: &str, module: impl Fn(&str) -> String) -> BTreeSet<String> {
    let mut names = use_names(lib);
    for name in public_modules(lib) {
        let text = module(&name);
        names.extend(use_names(&text));
        for line in text.lines() {
            let item = ["pub struct ", "pub enum ", "pub trait ", "pub type "]
                .iter()
                .find_map(|p| line.strip_prefix(p));
            if let Some(item) = item {
                let end = item
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(item.len());
                names.insert(item[..end].to_owned());
            }
        }
    }
    names
}

/// The modules `pub mod name;` of the crate root (whatever attributes
/// precede them: `#[doc(hidden)]`, a feature's `#[cfg]`).
fn public_modules(lib: &str) -> Vec<String> {
    lib.lines()
        .filter_map(|line| line.strip_prefix("pub mod ")?.strip_suffix(';'))
        .map(str::to_owned)
        .collect()
}

/// `Type` of a free function whose first parameter is `name: &Type`, from
/// its signature (its first line to its body's brace).
fn first_parameter_type(from: &[&str]) -> Option<String> {
    let mut signature = String::new();
    for line in from {
        signature.push_str(line.trim());
        if line.trim_end().ends_with('{') {
            break;
        }
    }
    let (_, params) = signature.split_once('(')?;
    let first = params.split([',', ')']).next()?;
    let ty = first.split_once(':')?.1.trim().strip_prefix('&')?;
    let end = ty
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(ty.len());
    (end > 0).then(|| ty[..end].to_owned())
}

/// The names of a file's top-level `pub use` items (rustfmt may break a
/// list over several lines).
fn use_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(start) = line.strip_prefix("pub use ") else {
            continue;
        };
        let mut path = start.to_owned();
        while !path.ends_with(';') {
            let Some(more) = lines.next() else { break };
            path.push_str(more.trim());
        }
        let path = path.trim_end_matches(';');
        let list = match path.split_once('{') {
            Some((_, list)) => list.trim_end_matches('}').to_owned(),
            None => path.rsplit("::").next().unwrap_or("").to_owned(),
        };
        names.extend(
            list.split(',')
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty()),
        );
    }
    names
}

fn collect_rs(dir: &std::path::Path, into: &mut Vec<std::path::PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("the library's source reads")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_rs(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The parse on a piece of source shaped like the library's.
#[test]
fn the_source_parse_reads_impls_and_macros() {
    assert_eq!(impl_target("impl Lock {"), Some("Lock".into()));
    assert_eq!(
        impl_target("impl<'a> RwRelease<'a> {"),
        Some("RwRelease".into())
    );
    assert_eq!(impl_target("impl $handle {"), Some("$handle".into()));
    assert_eq!(impl_target("impl Spec for Lock {"), None);
    assert_eq!(impl_target("impl std::fmt::Debug for Lock {"), None);
    let lib = "pub use lock::{Lock, LockGuard};\npub use keys::KEY_LAYOUT;\n\
               pub mod leader;\npub use leader::{\n    Leader,\n    Leadership,\n};\n";
    let names = exported_names(lib, |module| {
        assert_eq!(module, "leader");
        "pub struct LeaderWatch {\n    pub(crate) x: u8,\n}\npub(crate) struct Hidden;\n\
         pub enum LeaderStatus {}\n"
            .to_owned()
    });
    let expected = [
        "KEY_LAYOUT",
        "Leader",
        "LeaderStatus",
        "LeaderWatch",
        "Leadership",
        "Lock",
        "LockGuard",
    ];
    assert_eq!(names, expected.map(String::from).into());
    assert_eq!(
        first_parameter_type(&[
            "pub async fn server_uptime(client: &Client) -> Result<Duration> {"
        ]),
        Some("Client".into())
    );
    assert_eq!(
        first_parameter_type(&[
            "pub async fn try_lock_with_min_token(",
            "    lock: &Lock,",
            "    wait: Duration,",
            ") -> Result<Option<LockGuard>> {"
        ]),
        Some("Lock".into())
    );
    assert_eq!(
        first_parameter_type(&["pub async fn run_locked<G>(acquire: A) -> T {"]),
        None
    );
    let all = Ending::ALL.to_vec();
    assert_eq!(endings(&["pub async fn lost(&self) {"]).len(), 3);
    assert_eq!(
        endings(&[
            "pub async fn try_lock(",
            "    &self,",
            ") -> Result<Option<LockGuard>> {"
        ]),
        all
    );
    let run = endings(&["pub async fn run<F>(&self) -> Result<Infallible>", "where"]);
    assert!(!run.contains(&Ending::Reply) && run.contains(&Ending::Error));
}

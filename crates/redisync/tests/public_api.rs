//! The public names of `redisync` are the listed ones: what `src/lib.rs`
//! exports (its `pub use` names, its `pub mod` modules and the top-level
//! `pub` items of each) is compared with `tests/public_api.txt`, so a name
//! added to or removed from the API is a decision taken in a reviewed file,
//! not a side effect of a `pub`. Names only: a method, a field or a
//! signature is the compiler's and the semver checks' business.
//!
//! After an intended change, edit the listing, or write it afresh with
//! `REDISYNC_BLESS_API=1 cargo test -p redisync --test public_api`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const LISTING: &str = "tests/public_api.txt";

const HEADER: &str = "\
# The public names of crate `redisync`, checked by tests/public_api.rs
# against what src/lib.rs exports. A name added or removed is a decision:
# see API.md, \"For the 0.1 release\". One name a line: the crate root's,
# then each public module (`mod name`, with the attributes that hide it or
# gate it on a feature) and its names (`name::Item`).
";

#[test]
fn the_public_names_are_the_listed_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exported = exported(&root.join("src"));
    let listing_path = root.join(LISTING);
    if std::env::var_os("REDISYNC_BLESS_API").is_some() {
        std::fs::write(&listing_path, render(&exported)).expect("the listing writes");
        return;
    }
    let listing = std::fs::read_to_string(&listing_path).expect("the listing reads");
    let listed: BTreeSet<String> = listing
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let found: BTreeSet<String> = exported.iter().cloned().collect();
    let added: Vec<&String> = found.difference(&listed).collect();
    let removed: Vec<&String> = listed.difference(&found).collect();
    assert!(
        added.is_empty() && removed.is_empty(),
        "the public API of `redisync` is not the one listed in crates/redisync/{LISTING}: a \
         public name is a decision (API.md, \"For the 0.1 release\"; an auxiliary type goes in \
         its family's module, support for a sister crate in the hidden `__private`).\n\
         exported by src/ and not listed:{}\n\
         listed and no longer exported:{}\n\
         If the change is intended, update the listing in the same commit (by hand, or \
         `REDISYNC_BLESS_API=1 cargo test -p redisync --test public_api`).",
        lines('+', &added),
        lines('-', &removed),
    );
}

fn lines(sign: char, names: &[&String]) -> String {
    if names.is_empty() {
        return " none".into();
    }
    let mut out = String::new();
    for n in names {
        out.push_str("\n    ");
        out.push(sign);
        out.push(' ');
        out.push_str(n);
    }
    out
}

/// The listing file's text for `exported` (in its order).
fn render(exported: &[String]) -> String {
    let mut out = format!("{HEADER}\n");
    for name in exported {
        if name.starts_with("mod ") {
            out.push('\n');
        }
        out.push_str(name);
        out.push('\n');
    }
    out
}

/// What the crate under `src` exports: the root's names (sorted), then per
/// public module (in declaration order) its `mod` line and its names.
fn exported(src: &Path) -> Vec<String> {
    let lib = read(&src.join("lib.rs"));
    let mut root = items(&lib);
    // A re-exported module (`pub use redis::link;`) is a public module.
    for item in &mut root {
        if item
            .path
            .as_deref()
            .is_some_and(|p| module_file(src, p).exists())
        {
            item.kind = Kind::Mod;
        }
    }
    let mut names: Vec<String> = root
        .iter()
        .filter(|i| i.kind != Kind::Mod)
        .map(Item::line)
        .collect();
    names.sort_by_key(|n| (n.to_lowercase(), n.clone()));
    for module in root.iter().filter(|i| i.kind == Kind::Mod) {
        names.push(format!("mod {}", module.line()));
        let text = read(&module_file(
            src,
            module.path.as_deref().unwrap_or(&module.name),
        ));
        let mut inner: Vec<String> = items(&text)
            .iter()
            .map(|i| {
                assert!(
                    i.kind != Kind::Mod,
                    "a public module inside `{}`: teach tests/public_api.rs nested modules",
                    module.name
                );
                format!("{}::{}", module.name, i.line())
            })
            .collect();
        inner.sort_by_key(|n| (n.to_lowercase(), n.clone()));
        names.extend(inner);
    }
    for text in all_sources(src) {
        for name in exported_macros(&text) {
            names.push(format!("macro {name}"));
        }
    }
    names
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The file of the module `name` (a path such as `redis::link` too).
fn module_file(src: &Path, name: &str) -> PathBuf {
    let name = name.replace("::", "/");
    let flat = src.join(format!("{name}.rs"));
    if flat.exists() {
        flat
    } else {
        src.join(name).join("mod.rs")
    }
}

fn all_sources(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("src reads")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            out.extend(all_sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(read(&path));
        }
    }
    out
}

/// `#[macro_export]` macros (exported at the root from any module).
fn exported_macros(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() == "#[macro_export]" {
            let name = lines[i + 1..]
                .iter()
                .find_map(|l| l.trim().strip_prefix("macro_rules! "))
                .map(|r| r.trim_end_matches([' ', '{']).to_owned());
            out.extend(name);
        }
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Mod,
    Other,
}

/// One public name of a file, with the attributes that matter to its
/// visibility (`#[doc(hidden)]`, `#[cfg(..)]`).
#[derive(Debug)]
struct Item {
    kind: Kind,
    name: String,
    attributes: Vec<String>,
    /// A `pub use` of one path: the path (`redis::link`), which may name a
    /// module (then exported as a module of that name).
    path: Option<String>,
}

impl Item {
    fn line(&self) -> String {
        let mut line = self.name.clone();
        for a in &self.attributes {
            line.push(' ');
            line.push_str(a);
        }
        line
    }
}

/// The top-level (unindented) public items of a file: `pub use` names
/// (`A as B` exports `B`), `pub mod`, and `pub` structs, enums, unions,
/// traits, type aliases, functions, constants and statics. `pub(crate)`
/// and the like are not public.
fn items(text: &str) -> Vec<Item> {
    let mut out = Vec::new();
    let mut attributes: Vec<String> = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.starts_with("#[") {
            let mut attribute = line.trim().to_owned();
            let mut depth = brackets(line);
            while depth > 0 {
                let Some(more) = lines.next() else { break };
                depth += brackets(more);
                attribute.push(' ');
                attribute.push_str(more.trim());
            }
            if attribute.starts_with("#[doc(hidden)]") || attribute.starts_with("#[cfg(") {
                attributes.push(attribute);
            }
            continue;
        }
        if line.is_empty()
            || line.starts_with("//")
            || line.starts_with("#!")
            || line.starts_with(char::is_whitespace)
        {
            continue;
        }
        let taken = std::mem::take(&mut attributes);
        let Some(rest) = line.strip_prefix("pub ") else {
            continue;
        };
        if let Some(path) = rest.strip_prefix("use ") {
            let mut path = path.to_owned();
            while !path.trim_end().ends_with(';') {
                let Some(more) = lines.next() else { break };
                path.push_str(more.trim());
            }
            let single = path.trim().trim_end_matches(';').trim();
            let single = (!single.contains('{')).then(|| single.to_owned());
            for name in use_names(&path) {
                out.push(Item {
                    kind: Kind::Other,
                    name,
                    attributes: taken.clone(),
                    path: single.clone(),
                });
            }
            continue;
        }
        let mut rest = rest;
        for qualifier in ["async ", "const ", "unsafe ", "extern \"C\" "] {
            if let Some(r) = rest.strip_prefix(qualifier) {
                // `const fn`, `async unsafe fn`; a `const NAME` is an item.
                if r.starts_with("fn ") || r.starts_with("unsafe ") || r.starts_with("extern ") {
                    rest = r;
                }
            }
        }
        let Some((keyword, tail)) = rest.split_once(' ') else {
            continue;
        };
        let kind = match keyword {
            "mod" => Kind::Mod,
            "struct" | "enum" | "union" | "trait" | "type" | "fn" | "const" | "static" => {
                Kind::Other
            }
            _ => panic!("an unknown public item, teach tests/public_api.rs: {line}"),
        };
        let tail = tail.strip_prefix("mut ").unwrap_or(tail);
        let end = tail
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.push(Item {
            kind,
            name: tail[..end].to_owned(),
            attributes: taken,
            path: None,
        });
    }
    out
}

fn brackets(line: &str) -> i32 {
    line.chars()
        .map(|c| match c {
            '[' => 1,
            ']' => -1,
            _ => 0,
        })
        .sum()
}

/// The names a `use` path exports: `a::B;`, `a::{B, C as D};`.
fn use_names(path: &str) -> Vec<String> {
    let path = path.trim().trim_end_matches(';');
    assert!(
        !path.contains('*'),
        "a glob re-export exports whatever its module has: name the items ({path})"
    );
    let list = match path.split_once('{') {
        Some((_, list)) => list.trim_end_matches('}'),
        None => path.rsplit("::").next().unwrap_or(""),
    };
    list.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| n.rsplit(" as ").next().unwrap_or(n).trim().to_owned())
        .map(|n| n.rsplit("::").next().unwrap_or(&n).to_owned())
        .collect()
}

/// The parse on source shaped like the crate's.
#[test]
fn the_parse_reads_uses_modules_and_attributes() {
    let lib = "\
//! Docs.
#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::panic)
)]

// A comment.
#[doc(hidden)]
pub mod __private;
mod client;
#[cfg(feature = \"simulation\")]
#[doc(hidden)]
pub mod link;
#[cfg(not(feature = \"simulation\"))]
#[allow(unreachable_pub)]
mod link;
pub(crate) mod inner;
pub use client::{Client, ClientBuilder as Builder};
pub use guard::{
    run_locked, Guard,
    LostSignal,
};
pub use keys::KEY_LAYOUT;
#[must_use]
pub const fn limit() -> u32 {
    1
}
pub const LIMIT: u32 = 1;
pub(crate) fn hidden() {}
pub async fn run() {}
impl Client {
    pub fn id(&self) {}
}
";
    let lines: Vec<String> = items(lib).iter().map(Item::line).collect();
    assert_eq!(
        lines,
        [
            "__private #[doc(hidden)]",
            "link #[cfg(feature = \"simulation\")] #[doc(hidden)]",
            "Client",
            "Builder",
            "run_locked",
            "Guard",
            "LostSignal",
            "KEY_LAYOUT",
            "limit",
            "LIMIT",
            "run",
        ]
    );
    assert_eq!(
        items(lib)
            .iter()
            .filter(|i| i.kind == Kind::Mod)
            .map(|i| i.name.as_str())
            .collect::<Vec<_>>(),
        ["__private", "link"]
    );
    assert_eq!(
        exported_macros("#[macro_export]\nmacro_rules! lua {\n}\nmacro_rules! inner {\n}\n"),
        ["lua"]
    );
}

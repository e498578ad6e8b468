//! Redis key and channel names of a lock, and owner ids.
//!
//! Every key and the channel of one lock share one hash tag, so a lock's
//! scripts and its SPUBLISH stay in one cluster slot.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// The hash tag Redis Cluster uses for `key`: the bytes between the first `{`
/// and the first `}` after it, when that is not empty.
pub(crate) fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = &key[open + 1..];
    let close = rest.find('}')?;
    (close > 0).then(|| &rest[..close])
}

/// The key of the lock named `name`; other keys of the lock append a suffix.
///
/// - A name with its own hash tag keeps it (`orders:{42}` ->
///   `redisync:=orders:{42}`), so users can co-locate locks in one slot.
/// - Otherwise the name becomes the tag (`orders:42` -> `redisync:{orders:42}`).
/// - A tag-less name that starts with `}` would make an empty tag when
///   wrapped; it is hex-encoded (`}x` -> `redisync:#{7d78}`).
///
/// The character after `redisync:` tells the three forms apart, so distinct
/// names never share a key.
pub(crate) fn lock_key(name: &str) -> String {
    if hash_tag(name).is_some() {
        format!("redisync:={name}")
    } else if !name.starts_with('}') {
        format!("redisync:{{{name}}}")
    } else {
        let mut key = String::from("redisync:#{");
        for b in name.bytes() {
            let _ = write!(key, "{b:02x}");
        }
        key.push('}');
        key
    }
}

/// The part of an owner id after the client uuid: the tokio task id, or a
/// per-thread id when not called from inside a task.
///
/// Owner ids rely on tokio task ids being unique for the life of the process;
/// tokio only promises uniqueness among running tasks, but allocates them from
/// a 64-bit counter that is never reused. Outside a task (in `block_on`, e.g.
/// the body of `#[tokio::main]`) each OS thread gets its own id, so two
/// `block_on` calls on one thread count as one owner.
pub(crate) fn task_tag() -> String {
    match tokio::task::try_id() {
        Some(id) => id.to_string(),
        None => THREAD_TAG.with(Clone::clone),
    }
}

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_TAG: String = format!("thread-{}", NEXT_THREAD.fetch_add(1, Ordering::Relaxed));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot_tag(key: &str) -> &str {
        hash_tag(key).unwrap_or(key)
    }

    #[test]
    fn derived_keys_share_the_tag() {
        for name in [
            "orders:42",
            "a{b}c",
            "{}x",
            "a{",
            "{{a}}",
            "}x",
            "}",
            "a}b",
            "{",
            "x{}",
        ] {
            let key = lock_key(name);
            let ch = format!("{key}:ch");
            let fence = format!("{key}:fence");
            assert!(hash_tag(&key).is_some(), "{name} -> {key} has no tag");
            assert_eq!(slot_tag(&key), slot_tag(&ch), "{name}");
            assert_eq!(slot_tag(&key), slot_tag(&fence), "{name}");
        }
    }

    #[test]
    fn distinct_names_get_distinct_keys() {
        let names = ["x", "{x}", "}x", "7d78", "{}x", "=x", "#x"];
        let keys: std::collections::HashSet<_> = names.iter().map(|n| lock_key(n)).collect();
        assert_eq!(keys.len(), names.len());
    }

    #[test]
    fn user_tags_are_kept() {
        assert_eq!(hash_tag(&lock_key("orders:{42}")), Some("42"));
        assert_eq!(lock_key("orders:42"), "redisync:{orders:42}");
    }

    #[test]
    fn thread_fallback_is_stable_per_thread() {
        let a = task_tag();
        assert_eq!(a, task_tag());
        let b = std::thread::spawn(task_tag).join().unwrap();
        assert_ne!(a, b);
        assert!(a.starts_with("thread-"));
    }
}

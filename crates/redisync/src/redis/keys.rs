//! Redis key and channel names of every primitive (the key layout, format
//! [`KEY_LAYOUT`]).
//!
//! Every key and the channel of one primitive share one hash tag, so its
//! scripts and its SPUBLISH stay in one cluster slot.

use std::fmt::Write as _;

/// The hash tag Redis Cluster uses for `key`: the bytes between the first `{`
/// and the first `}` after it, when that is not empty.
pub(crate) fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = &key[open + 1..];
    let close = rest.find('}')?;
    (close > 0).then(|| &rest[..close])
}

/// Version of the key layout, part of every key and channel
/// (`redisync:v1:<kind>:<role>:<encoded name>`): clients of another layout
/// never read these keys as their own. It changes with any change of what a
/// key holds; clients of two layouts do not exclude each other, so upgrade
/// all clients of one lock together.
pub const KEY_LAYOUT: &str = "v1";

/// Fixed, brace-free start of every key: the hash tag always comes from the
/// encoded name, which ends the key.
const PREFIX: &str = "redisync:v1:";

/// The kind of primitive a key belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Lock,
    Fair,
    Rw,
    Semaphore,
    Latch,
}

impl Kind {
    /// Every kind, in the order the inspector reports them.
    pub(crate) const ALL: [Kind; 5] = [
        Kind::Lock,
        Kind::Fair,
        Kind::Rw,
        Kind::Semaphore,
        Kind::Latch,
    ];

    /// The kind's name for people: the inspector's and the metrics' `kind`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Fair => "fair",
            Kind::Rw => "rw",
            Kind::Semaphore => "semaphore",
            Kind::Latch => "latch",
        }
    }

    pub(crate) fn tag(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Fair => "fair",
            Kind::Rw => "rw",
            Kind::Semaphore => "sem",
            Kind::Latch => "latch",
        }
    }
}

/// What a key of a primitive holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The main hash: holders, counts, tokens (permits for a semaphore, the
    /// count for a latch).
    Hold,
    /// The fencing counter.
    Fence,
    /// The wake-up channel (not a key: never listed among a script's KEYS).
    Channel,
    /// Lock, fair lock, read-write lock, semaphore: the queue of waiters.
    Queue,
    /// Read-write lock: the readers' lease ends.
    Readers,
    /// Semaphore: the acquisitions' lease ends.
    Leases,
    /// Count-down latch: what outlives a phase (the count-downs counted
    /// lately, the phases that opened).
    Record,
    /// Count-down latch: when each field of the record may be forgotten
    /// (a zset), so that the record is trimmed as it goes.
    Forget,
}

impl Role {
    pub(crate) fn tag(self) -> &'static str {
        match self {
            Role::Hold => "hold",
            Role::Fence => "fence",
            Role::Channel => "ch",
            Role::Queue => "queue",
            Role::Readers => "readers",
            Role::Leases => "leases",
            Role::Record => "record",
            Role::Forget => "forget",
        }
    }

    const ALL: [Role; 8] = [
        Role::Hold,
        Role::Fence,
        Role::Channel,
        Role::Queue,
        Role::Readers,
        Role::Leases,
        Role::Record,
        Role::Forget,
    ];
}

/// The key (or channel) of one role of the primitive `kind` named `name`:
/// `redisync:v1:<kind>:<role>:<encoded name>`.
///
/// Kind and role are fixed words without `:`, and the encoded name comes
/// last, so distinct (kind, role, name) never share a key, whatever the name
/// looks like (a name spelled like another primitive's key included). The
/// prefix has no braces, so the hash tag is the encoded name's and every key
/// of one name sits in one cluster slot:
/// - a name with its own hash tag keeps it (`orders:{42}` -> `=orders:{42}`),
///   so users can co-locate locks with their data;
/// - otherwise the name becomes the tag (`orders:42` -> `{orders:42}`);
/// - a tag-less name that starts with `}` would make an empty tag when
///   wrapped; it is hex-encoded (`}x` -> `#{7d78}`).
///
/// The first character of the encoded name tells the three forms apart.
pub(crate) fn key(kind: Kind, role: Role, name: &str) -> String {
    let mut key = format!("{PREFIX}{}:{}:", kind.tag(), role.tag());
    if hash_tag(name).is_some() {
        key.push('=');
        key.push_str(name);
    } else if !name.starts_with('}') {
        key.push('{');
        key.push_str(name);
        key.push('}');
    } else {
        key.push_str("#{");
        for b in name.bytes() {
            let _ = write!(key, "{b:02x}");
        }
        key.push('}');
    }
    key
}

/// The key of another role of the same primitive and name as `key` (a key
/// or channel made by [`key`]); `None` for a string of another layout.
pub(crate) fn sibling(key: &str, role: Role) -> Option<String> {
    let rest = key.strip_prefix(PREFIX)?;
    let (kind, rest) = rest.split_once(':')?;
    let (_, name) = rest.split_once(':')?;
    Some(format!("{PREFIX}{kind}:{}:{name}", role.tag()))
}

/// The SCAN pattern of every hold key of the layout (one per primitive
/// that exists in Redis).
pub(crate) const HOLD_PATTERN: &str = "redisync:v1:*:hold:*";

/// The kind, role and name a key made by [`key`] belongs to; `None` for any
/// other string (another layout, a key not written by redisync).
pub(crate) fn parse(key: &str) -> Option<(Kind, Role, String)> {
    let rest = key.strip_prefix(PREFIX)?;
    let (kind, rest) = rest.split_once(':')?;
    let (role, encoded) = rest.split_once(':')?;
    let kind = Kind::ALL.into_iter().find(|k| k.tag() == kind)?;
    let role = Role::ALL.into_iter().find(|r| r.tag() == role)?;
    let name = if let Some(name) = encoded.strip_prefix('=') {
        hash_tag(name).is_some().then(|| name.to_owned())?
    } else if let Some(hex) = encoded.strip_prefix("#{") {
        let hex = hex.strip_suffix('}')?;
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()?;
        String::from_utf8(bytes)
            .ok()
            .filter(|n| n.starts_with('}'))?
    } else {
        let name = encoded.strip_prefix('{')?.strip_suffix('}')?;
        (hash_tag(name).is_none() && !name.starts_with('}')).then(|| name.to_owned())?
    };
    // Only the canonical spelling of a name is ours.
    (self::key(kind, role, &name) == key).then_some((kind, role, name))
}

/// [`sibling`] as a Redis key, for a key made by [`key`] (which always has
/// siblings; anything else maps to itself).
pub(crate) fn sibling_key(key: &str, role: Role) -> fred::types::Key {
    debug_assert!(sibling(key, role).is_some(), "{key} is not of the layout");
    fred::types::Key::from(sibling(key, role).unwrap_or_else(|| key.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot_tag(key: &str) -> &str {
        hash_tag(key).unwrap_or(key)
    }

    const NAMES: [&str; 11] = [
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
        "redisync:v1:lock:hold:{x}",
    ];
    const KINDS: [Kind; 5] = Kind::ALL;
    const ROLES: [Role; 8] = Role::ALL;

    #[test]
    fn every_key_of_a_name_shares_one_tag() {
        for name in NAMES {
            for kind in KINDS {
                let hold = key(kind, Role::Hold, name);
                assert!(hash_tag(&hold).is_some(), "{name} -> {hold} has no tag");
                for role in ROLES {
                    let other = key(kind, role, name);
                    assert_eq!(slot_tag(&hold), slot_tag(&other), "{name}");
                }
            }
        }
    }

    #[test]
    fn distinct_kind_role_name_never_share_a_key() {
        // Names spelled like other keys of the layout, or of the old one.
        let mut names: Vec<String> = NAMES.iter().map(|n| (*n).to_owned()).collect();
        for kind in KINDS {
            for role in ROLES {
                let k = key(kind, role, "x");
                names.push(k.strip_prefix("redisync:").unwrap().to_owned());
                names.push(k.clone());
                names.push(format!("{}}}", k.trim_end_matches('}')));
                names.push(format!("x}}:{}", role.tag()));
            }
        }
        names.extend(["x", "{x}", "7d78", "=x", "#x", "x}:rw", "x}:fair"].map(String::from));
        names.sort();
        names.dedup();
        let mut seen = std::collections::HashMap::new();
        for name in &names {
            for kind in KINDS {
                for role in ROLES {
                    let k = key(kind, role, name);
                    if let Some(prev) = seen.insert(k.clone(), (kind, role, name.clone())) {
                        panic!("{k} for both {prev:?} and {:?}", (kind, role, name));
                    }
                }
            }
        }
    }

    #[test]
    fn siblings_follow_the_layout() {
        for name in NAMES {
            let ch = key(Kind::Fair, Role::Channel, name);
            assert_eq!(
                sibling(&ch, Role::Hold).as_deref(),
                Some(key(Kind::Fair, Role::Hold, name).as_str())
            );
            let hold = key(Kind::Semaphore, Role::Hold, name);
            assert_eq!(
                sibling(&hold, Role::Leases).as_deref(),
                Some(key(Kind::Semaphore, Role::Leases, name).as_str())
            );
        }
        assert_eq!(sibling("redisync:{x}:ch", Role::Hold), None);
    }

    #[test]
    fn keys_parse_back_to_their_kind_role_and_name() {
        for name in NAMES {
            for kind in KINDS {
                for role in ROLES {
                    let k = key(kind, role, name);
                    assert_eq!(parse(&k), Some((kind, role, name.to_owned())), "{k}");
                }
            }
        }
        for other in [
            "orders:42",
            "redisync:v1:lock:hold:orders",
            "redisync:v1:lock:hold:{a{b}c}",
            "redisync:v1:lock:hold:=abc",
            "redisync:v1:lock:hold:#{zz}",
            "redisync:v1:lock:hold:#{6162}",
            "redisync:v1:nope:hold:{x}",
            "redisync:v1:lock:nope:{x}",
            "redisync:v0:lock:hold:{x}",
        ] {
            assert_eq!(parse(other), None, "{other}");
        }
    }

    #[test]
    fn layout_examples() {
        assert_eq!(
            key(Kind::Lock, Role::Hold, "orders:42"),
            "redisync:v1:lock:hold:{orders:42}"
        );
        assert_eq!(
            key(Kind::Fair, Role::Queue, "orders:{42}"),
            "redisync:v1:fair:queue:=orders:{42}"
        );
        assert_eq!(
            key(Kind::Rw, Role::Fence, "}x"),
            "redisync:v1:rw:fence:#{7d78}"
        );
        assert_eq!(
            hash_tag(&key(Kind::Lock, Role::Hold, "orders:{42}")),
            Some("42")
        );
        assert_eq!(PREFIX, format!("redisync:{KEY_LAYOUT}:"));
    }
}

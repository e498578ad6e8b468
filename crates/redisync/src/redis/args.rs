//! Script arguments: one struct per script's `ARGV`, its fields declared in
//! the order of the script's header, so that order is written once (a test
//! checks it against the header's `-- ARGV[n]  <field>: ...` lines).
//!
//! Every builder is declared in the one [`script_args!`] table below, not
//! beside the primitive that runs its script: a table the macro sees whole
//! gives the test every builder, so none is left unchecked, and a script
//! several kinds send (a force-unlock) has one builder.
//!
//! Optional trailing groups (a carried release, the restart guard's
//! arguments) are `Option`s of another builder; a group that is there
//! comes after the fixed fields and the earlier groups, those that are not
//! there sent as '' so it lands where the header says.

use std::sync::Arc;

use fred::types::{Key, Value};

use crate::redis::script::token_arg;

/// How a field goes out as one script argument.
pub(crate) trait ArgValue {
    fn into_arg(self) -> Value;
}

impl ArgValue for Value {
    fn into_arg(self) -> Value {
        self
    }
}

impl ArgValue for i64 {
    fn into_arg(self) -> Value {
        Value::Integer(self)
    }
}

impl ArgValue for &str {
    fn into_arg(self) -> Value {
        Value::String(self.into())
    }
}

impl ArgValue for String {
    fn into_arg(self) -> Value {
        Value::String(self.into())
    }
}

impl ArgValue for Arc<str> {
    fn into_arg(self) -> Value {
        Value::String(self.as_ref().into())
    }
}

/// A channel (an argument, not a key: see the scripts' headers).
impl ArgValue for Key {
    fn into_arg(self) -> Value {
        Value::from(self)
    }
}

/// `None` is '' (the scripts' "none").
impl<T: ArgValue> ArgValue for Option<T> {
    fn into_arg(self) -> Value {
        self.map_or_else(empty, ArgValue::into_arg)
    }
}

/// A fencing token as [`token_arg`] sends it ('' for none).
pub(crate) struct Token(pub(crate) Option<u64>);

impl ArgValue for Token {
    fn into_arg(self) -> Value {
        token_arg(self.0)
    }
}

/// A number as the string of its decimal digits.
pub(crate) struct Digits(pub(crate) u64);

impl ArgValue for Digits {
    fn into_arg(self) -> Value {
        Value::String(self.0.to_string().into())
    }
}

/// A flag the script reads as '1' (true) or '' (false).
pub(crate) struct OneOrEmpty(pub(crate) bool);

impl ArgValue for OneOrEmpty {
    fn into_arg(self) -> Value {
        Value::String(if self.0 { "1" } else { "" }.into())
    }
}

/// A flag the script reads as '1' (true) or '0' (false).
pub(crate) struct OneOrZero(pub(crate) bool);

impl ArgValue for OneOrZero {
    fn into_arg(self) -> Value {
        Value::String(if self.0 { "1" } else { "0" }.into())
    }
}

fn empty() -> Value {
    Value::String("".into())
}

/// A script's arguments, or a group of them.
pub(crate) trait ScriptArgs {
    /// The fixed fields' names, in `ARGV` order.
    const ARGV: &'static [&'static str];
    /// Appends the arguments, in `ARGV` order.
    fn push_to(self, args: &mut Vec<Value>);

    /// The arguments, in `ARGV` order.
    fn into_values(self) -> Vec<Value>
    where
        Self: Sized,
    {
        let mut args = Vec::with_capacity(Self::ARGV.len());
        self.push_to(&mut args);
        args
    }
}

/// Declares each script's argument struct (`Name for ["script.lua", ...]
/// { field: Type, ... }`, then optional groups `+ optional { group: Group,
/// ... }`, a group being a struct declared with no script and no groups of
/// its own) and, for the tests, the table of every builder and its scripts.
macro_rules! script_args {
    ($(
        $(#[$meta:meta])*
        $name:ident $(<$lt:lifetime>)? for [$($script:literal),*] {
            $($field:ident: $ty:ty,)+
        }
        $(+ optional { $($group:ident: $gty:ty,)+ })?
    )+) => {
        $(
            $(#[$meta])*
            pub(crate) struct $name $(<$lt>)? {
                $(pub(crate) $field: $ty,)+
                $($(pub(crate) $group: Option<$gty>,)+)?
            }

            impl $(<$lt>)? ScriptArgs for $name $(<$lt>)? {
                const ARGV: &'static [&'static str] = &[$(stringify!($field)),+];

                fn push_to(self, args: &mut Vec<Value>) {
                    #[allow(unused_variables)]
                    let start = args.len();
                    $(args.push(ArgValue::into_arg(self.$field));)+
                    $(
                        // Where the next group starts: the groups before it
                        // that are not there are sent as ''.
                        let mut at = start + Self::ARGV.len();
                        $(
                            if let Some(group) = self.$group {
                                args.resize(at, empty());
                                group.push_to(args);
                            }
                            at += <$gty as ScriptArgs>::ARGV.len();
                        )+
                        let _ = at;
                    )?
                }
            }

            impl $(<$lt>)? $name $(<$lt>)? {
                /// Every field's name in `ARGV` order, a group's as
                /// `<group>.<field>`.
                #[cfg(test)]
                fn all_argv() -> Vec<String> {
                    #[allow(unused_mut)]
                    let mut names: Vec<String> =
                        Self::ARGV.iter().map(|n| (*n).to_owned()).collect();
                    $($(
                        names.extend(
                            <$gty as ScriptArgs>::ARGV
                                .iter()
                                .map(|n| format!("{}.{n}", stringify!($group))),
                        );
                    )+)?
                    names
                }
            }
        )+

        /// Every builder: its scripts (none for a group) and its `ARGV`.
        #[cfg(test)]
        const BUILDERS: &[(&str, &[&str], fn() -> Vec<String>)] =
            &[$((stringify!($name), &[$($script),*], $name::all_argv),)+];
    };
}

script_args! {
    /// The restart guard's arguments (`lib/restart_guard.lua`), last of a
    /// guarded acquisition's.
    RestartGuardArgs for [] {
        marker: &'static str,
        bound: i64,
        saved: String,
    }

    /// A dropped guard's final release, carried by the next acquisition
    /// (`release_lock` in `lib/lock.lua`).
    CarriedRelease for [] {
        owner: Arc<str>,
        token: Digits,
        publish: &'static str,
        channel: Key,
    }

    /// Every kind's force-unlock (the lock's and the semaphore's do not
    /// read the TTL: one call site sends them all).
    ForceUnlock for [
        "lock_force_unlock.lua",
        "fair_lock_force_unlock.lua",
        "rw_lock_force_unlock.lua",
        "semaphore_force_release.lua"
    ] {
        publish: &'static str,
        channel: Key,
        fence_ttl_ms: i64,
    }

    LockAcquire<'a> for ["lock_acquire.lua"] {
        owner: &'a str,
        lease_ms: i64,
        keep: Token,
        fence_ttl_ms: i64,
        floor: Token,
        wait: Value,
        expect_busy: OneOrEmpty,
        number: Digits,
        next_number: Digits,
    } + optional {
        release: CarriedRelease,
        restart_guard: RestartGuardArgs,
    }

    LockRelease for ["lock_release.lua"] {
        owner: Arc<str>,
        token: Digits,
        last: OneOrZero,
        publish: &'static str,
        channel: Key,
        fence_ttl_ms: i64,
    }

    LockAbandon<'a> for ["lock_abandon.lua"] {
        owner: &'a str,
        keep: Token,
        publish: &'static str,
        channel: Key,
        fence_ttl_ms: i64,
    }

    LockHandOff<'a> for ["lock_hand_off.lua"] {
        owner: &'a str,
        new_owner: &'a str,
        token: Digits,
        what: &'static str,
    }

    LockPublishIdentity<'a> for ["lock_publish_identity.lua"] {
        owner: Arc<str>,
        token: Digits,
        identity: &'a str,
        publish: &'static str,
        channel: Key,
    }

    LockAdvanceFence for ["lock_advance_fence.lua"] {
        minimum: Digits,
        fence_ttl_ms: i64,
    }

    FairLockAcquire<'a> for ["fair_lock_acquire.lua"] {
        owner: &'a str,
        lease_ms: i64,
        keep: Token,
        fence_ttl_ms: i64,
        queue_lease_ms: i64,
        wait: Value,
        number: Digits,
        next_number: Digits,
        publish: &'static str,
        channel: Key,
        expect_busy: OneOrEmpty,
        expire_gt: OneOrEmpty,
    } + optional {
        restart_guard: RestartGuardArgs,
    }

    FairLockLeave<'a> for ["fair_lock_leave.lua"] {
        owner: &'a str,
        keep: Option<Digits>,
        publish: &'static str,
        channel: Key,
        fence_ttl_ms: i64,
    }

    RwLockAcquire<'a> for ["rw_lock_acquire.lua"] {
        owner: &'a str,
        lease_ms: i64,
        side: &'static str,
        keep: Token,
        fence_ttl_ms: i64,
        wait: Value,
        queue_lease_ms: i64,
        number: Digits,
        next_number: Digits,
        publish: &'static str,
        channel: Key,
        expire_gt: OneOrEmpty,
    } + optional {
        restart_guard: RestartGuardArgs,
    }

    RwLockRelease<'a> for ["rw_lock_release.lua"] {
        owner: &'a str,
        token: Token,
        last: OneOrZero,
        side: &'static str,
        publish: &'static str,
        channel: Key,
        mode: &'static str,
        fence_ttl_ms: i64,
    }

    LatchSetCount for ["latch_set_count.lua"] {
        count: i64,
        ttl_ms: i64,
        id: String,
    }

    LatchCountDown<'a> for ["latch_count_down.lua"] {
        id: &'a str,
        publish: &'static str,
        channel: Key,
        record_for_ms: i64,
        member: &'a str,
    }

    LatchRead<'a> for ["latch_read.lua"] {
        phase: &'a str,
    }

    FencedWriteArgs<'a> for ["fenced_write.lua"] {
        token: Digits,
        mode: &'a str,
    } + optional {
        value: FencedBytes,
    }

    /// A fenced write's value (a claim has none).
    FencedBytes for [] {
        bytes: Value,
    }

    Inspect for ["inspect.lua"] {
        most_entries: i64,
    }

    SemaphoreAcquire<'a> for ["semaphore_acquire.lua"] {
        permit_id: &'a str,
        lease_ms: i64,
        declared: Option<i64>,
        wait: Value,
        number: Digits,
        next_number: Digits,
        publish: &'static str,
        channel: Key,
        queue_keep_ms: i64,
    } + optional {
        restart_guard: RestartGuardArgs,
    }

    SemaphoreRelease<'a> for ["semaphore_release.lua"] {
        permit_id: &'a str,
        publish: &'static str,
        channel: Key,
        leave: OneOrEmpty,
        releaser: Option<String>,
    }

    /// A first total, or any total.
    SemaphorePermits for ["semaphore_set_permits.lua", "semaphore_reset_permits.lua"] {
        permits: i64,
        publish: &'static str,
        channel: Key,
    }

    SemaphoreAddPermits for ["semaphore_add_permits.lua"] {
        delta: i64,
        max_total: i64,
        publish: &'static str,
        channel: Key,
    }

    SemaphoreAvailable for ["semaphore_available.lua"] {
        publish: &'static str,
        channel: Key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::script::SCRIPTS;

    /// The `-- ARGV[n]  <name>: ...` lines of a script's header: (n, name).
    fn header_argv(script: &str, body: &str) -> Vec<(usize, String)> {
        body.lines()
            .filter_map(|line| line.strip_prefix("-- ARGV["))
            .map(|rest| {
                let (n, text) = rest
                    .split_once(']')
                    .unwrap_or_else(|| panic!("{script}: no ] in -- ARGV[{rest}"));
                let n = n
                    .parse()
                    .unwrap_or_else(|_| panic!("{script}: ARGV[{n}] is not one index"));
                let name = text
                    .trim_start()
                    .split_once(':')
                    .map(|(name, _)| name)
                    .filter(|name| {
                        name.bytes()
                            .all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'.')
                    })
                    .unwrap_or_else(|| {
                        panic!("{script}: ARGV[{n}] names no field (`-- ARGV[{n}]  <field>: ...`)")
                    });
                (n, name.to_owned())
            })
            .collect()
    }

    /// The scripts whose `ARGV` has no builder: batches whose arguments
    /// repeat per hold (`ARGV[2i]`, ...), built by each kind's `hold_args`
    /// behind the lease the renewal puts first.
    const BATCHES: &[&str] = &[
        "lock_renew.lua",
        "lock_check.lua",
        "rw_lock_renew.lua",
        "rw_lock_check.lua",
        "semaphore_renew.lua",
        "semaphore_check.lua",
    ];

    /// A new script needs a builder (or a place among the batches).
    #[test]
    fn every_script_has_a_builder_but_the_batches() {
        let built: std::collections::BTreeSet<&str> = BUILDERS
            .iter()
            .flat_map(|(_, scripts, _)| scripts.iter().copied())
            .collect();
        for script in SCRIPTS {
            assert_ne!(
                built.contains(script.name),
                BATCHES.contains(&script.name),
                "{}: a builder in script_args!, or a batch",
                script.name
            );
        }
    }

    /// A group has no groups of its own: its fields are all its arguments.
    #[test]
    fn groups_are_flat() {
        for (name, scripts, argv) in BUILDERS {
            if scripts.is_empty() {
                assert!(argv().iter().all(|n| !n.contains('.')), "{name}");
            }
        }
    }

    /// Each builder's fields are its scripts' header lines, in order: a
    /// header changed without its builder (or the other way round) fails.
    #[test]
    fn each_builder_is_its_scripts_header() {
        let mut seen = std::collections::BTreeSet::new();
        for (name, scripts, argv) in BUILDERS {
            let argv = argv();
            for script in *scripts {
                assert!(seen.insert(*script), "{script} has two builders ({name})");
                let body = SCRIPTS
                    .iter()
                    .find(|s| s.name == *script)
                    .unwrap_or_else(|| panic!("{name}: no script {script}"))
                    .body;
                let header = header_argv(script, body);
                let indices: Vec<usize> = header.iter().map(|(n, _)| *n).collect();
                assert_eq!(
                    indices,
                    (1..=header.len()).collect::<Vec<_>>(),
                    "{script}: the header's ARGV[n] are not 1..=n in order"
                );
                let names: Vec<&str> = header.iter().map(|(_, n)| n.as_str()).collect();
                assert_eq!(names, argv, "{script}: header and {name} differ");
            }
        }
    }

    /// A missing group is padded only when a later one is there.
    #[test]
    fn missing_groups_are_padded_only_before_a_present_one() {
        let acquire = |release: bool, guard: bool| {
            LockAcquire {
                owner: "o",
                lease_ms: 1,
                keep: Token(None),
                fence_ttl_ms: 2,
                floor: Token(None),
                wait: empty(),
                expect_busy: OneOrEmpty(false),
                number: Digits(3),
                next_number: Digits(4),
                release: release.then(|| CarriedRelease {
                    owner: Arc::from("r"),
                    token: Digits(5),
                    publish: "publish",
                    channel: Key::from("c"),
                }),
                restart_guard: guard.then(|| RestartGuardArgs {
                    marker: "~restart-guard",
                    bound: 6,
                    saved: String::new(),
                }),
            }
            .into_values()
            .len()
        };
        assert_eq!(acquire(false, false), 9);
        assert_eq!(acquire(true, false), 13);
        assert_eq!(acquire(false, true), 16);
        assert_eq!(acquire(true, true), 16);
    }

    fn s(text: &str) -> Value {
        Value::String(text.into())
    }

    // The fixed inputs of the tests below, each of which compares a builder
    // with the hand-built vector it replaced (copied as it was).
    const PUBLISH: &str = "spublish";
    const FENCE_TTL_MS: i64 = 60_000;
    const TOKEN: u64 = 42;

    fn channel() -> Key {
        Key::from("{x}:ch")
    }

    fn owner() -> Arc<str> {
        Arc::from("uuid:7")
    }

    #[test]
    fn lock_acquire_sends_what_it_did() {
        let (channel, owner, token) = (channel(), owner(), TOKEN);
        let (publish, fence_ttl_ms) = (PUBLISH, FENCE_TTL_MS);
        let guard = crate::redis::restart::RestartGuard::new(std::time::Duration::from_secs(9));
        for (keep, floor, carried, guarded) in [
            (None, None, false, false),
            (Some(5), Some(u64::MAX), true, false),
            (Some(5), None, false, true),
            (None, Some(3), true, true),
        ] {
            let (holder, lease_ms, expect_busy, number, next_number) =
                ("uuid:1", 30_000, true, 8_u64, 9_u64);
            let wait_mode = s("2");
            let mut old = vec![
                Value::String(holder.into()),
                Value::Integer(lease_ms),
                token_arg(keep),
                Value::Integer(fence_ttl_ms),
                token_arg(floor),
                wait_mode.clone(),
                Value::String(if expect_busy { "1" } else { "" }.into()),
                Value::String(number.to_string().into()),
                Value::String(next_number.to_string().into()),
            ];
            if carried {
                old.extend([
                    Value::String(owner.as_ref().into()),
                    Value::String(token.to_string().into()),
                    Value::String(publish.into()),
                    Value::from(channel.clone()),
                ]);
            }
            if guarded {
                if old.len() < 13 {
                    old.resize(13, Value::String("".into()));
                }
                old.extend(guard.script_args().into_values());
            }
            let new = LockAcquire {
                owner: holder,
                lease_ms,
                keep: Token(keep),
                fence_ttl_ms,
                floor: Token(floor),
                wait: wait_mode,
                expect_busy: OneOrEmpty(expect_busy),
                number: Digits(number),
                next_number: Digits(next_number),
                release: carried.then(|| CarriedRelease {
                    owner: owner.clone(),
                    token: Digits(token),
                    publish,
                    channel: channel.clone(),
                }),
                restart_guard: guarded.then(|| guard.script_args()),
            };
            assert_eq!(new.into_values(), old);
        }
    }

    #[test]
    fn lock_release_sends_what_it_did() {
        let (channel, owner, token) = (channel(), owner(), TOKEN);
        let (publish, fence_ttl_ms) = (PUBLISH, FENCE_TTL_MS);
        for last in [false, true] {
            let old = vec![
                Value::String(owner.as_ref().into()),
                Value::String(token.to_string().into()),
                Value::String(if last { "1" } else { "0" }.into()),
                Value::String(publish.into()),
                Value::from(channel.clone()),
                Value::Integer(fence_ttl_ms),
            ];
            let new = LockRelease {
                owner: owner.clone(),
                token: Digits(token),
                last: OneOrZero(last),
                publish,
                channel: channel.clone(),
                fence_ttl_ms,
            };
            assert_eq!(new.into_values(), old);
        }
    }

    #[test]
    fn lock_abandon_sends_what_it_did() {
        let (channel, publish, fence_ttl_ms) = (channel(), PUBLISH, FENCE_TTL_MS);
        for keep in [None, Some(TOKEN)] {
            let holder = "uuid:3";
            let old = vec![
                Value::String(holder.into()),
                token_arg(keep),
                Value::String(publish.into()),
                Value::from(channel.clone()),
                Value::Integer(fence_ttl_ms),
            ];
            let new = LockAbandon {
                owner: holder,
                keep: Token(keep),
                publish,
                channel: channel.clone(),
                fence_ttl_ms,
            };
            assert_eq!(new.into_values(), old);
        }
    }

    #[test]
    fn lock_hand_off_publish_identity_and_advance_fence_send_what_they_did() {
        let (channel, owner, token, publish) = (channel(), owner(), TOKEN, PUBLISH);
        let (from, to, what) = ("uuid:1", "uuid:h1", "fair lock");
        let old = vec![
            Value::String(from.into()),
            Value::String(to.into()),
            Value::String(token.to_string().into()),
            Value::String(what.into()),
        ];
        let new = LockHandOff {
            owner: from,
            new_owner: to,
            token: Digits(token),
            what,
        };
        assert_eq!(new.into_values(), old);

        let identity = "node-a";
        let old = vec![
            Value::String(owner.as_ref().into()),
            Value::String(token.to_string().into()),
            Value::String(identity.into()),
            Value::String(publish.into()),
            Value::from(channel.clone()),
        ];
        let new = LockPublishIdentity {
            owner: owner.clone(),
            token: Digits(token),
            identity,
            publish,
            channel: channel.clone(),
        };
        assert_eq!(new.into_values(), old);

        let old = vec![
            Value::String(token.to_string().into()),
            Value::Integer(FENCE_TTL_MS),
        ];
        let new = LockAdvanceFence {
            minimum: Digits(token),
            fence_ttl_ms: FENCE_TTL_MS,
        };
        assert_eq!(new.into_values(), old);
    }

    #[test]
    fn fair_lock_acquire_sends_what_it_did() {
        let (channel, publish, fence_ttl_ms) = (channel(), PUBLISH, FENCE_TTL_MS);
        let guard = crate::redis::restart::RestartGuard::new(std::time::Duration::from_secs(9));
        for (keep, expect_busy, expire_gt, guarded) in
            [(None, false, true, false), (Some(TOKEN), true, false, true)]
        {
            let (holder, lease_ms, queue_lease_ms, number, next_number) =
                ("uuid:1", 30_000, 5_000, 8_u64, 9_u64);
            let wait_mode = s("1");
            let mut old = vec![
                Value::String(holder.into()),
                Value::Integer(lease_ms),
                token_arg(keep),
                Value::Integer(fence_ttl_ms),
                Value::Integer(queue_lease_ms),
                wait_mode.clone(),
                Value::String(number.to_string().into()),
                Value::String(next_number.to_string().into()),
                Value::String(publish.into()),
                Value::from(channel.clone()),
                Value::String(if expect_busy { "1" } else { "" }.into()),
                Value::String(if expire_gt { "1" } else { "" }.into()),
            ];
            if guarded {
                old.extend(guard.script_args().into_values());
            }
            let new = FairLockAcquire {
                owner: holder,
                lease_ms,
                keep: Token(keep),
                fence_ttl_ms,
                queue_lease_ms,
                wait: wait_mode,
                number: Digits(number),
                next_number: Digits(next_number),
                publish,
                channel: channel.clone(),
                expect_busy: OneOrEmpty(expect_busy),
                expire_gt: OneOrEmpty(expire_gt),
                restart_guard: guarded.then(|| guard.script_args()),
            };
            assert_eq!(new.into_values(), old);
        }
    }

    #[test]
    fn fair_lock_leave_sends_what_it_did() {
        let (channel, publish, fence_ttl_ms) = (channel(), PUBLISH, FENCE_TTL_MS);
        for keep in [None, Some(TOKEN)] {
            let owner = "uuid:4";
            let keep_digits = keep.map(|t| t.to_string()).unwrap_or_default();
            let old = vec![
                Value::String(owner.into()),
                Value::String(keep_digits.into()),
                Value::String(publish.into()),
                Value::from(channel.clone()),
                Value::Integer(fence_ttl_ms),
            ];
            let new = FairLockLeave {
                owner,
                keep: keep.map(Digits),
                publish,
                channel: channel.clone(),
                fence_ttl_ms,
            };
            assert_eq!(new.into_values(), old);
        }
    }

    #[test]
    fn rw_lock_acquire_sends_what_it_did() {
        let (channel, publish, fence_ttl_ms) = (channel(), PUBLISH, FENCE_TTL_MS);
        let guard = crate::redis::restart::RestartGuard::new(std::time::Duration::from_secs(9));
        for (side, keep, expire_gt, guarded) in
            [("r", None, false, false), ("w", Some(TOKEN), true, true)]
        {
            let (holder, lease_ms, queue_lease_ms, number, next_number) =
                ("uuid:1", 30_000, 60_000, 8_u64, 9_u64);
            let wait_mode = s("");
            let mut old = vec![
                Value::String(holder.into()),
                Value::Integer(lease_ms),
                Value::String(side.into()),
                token_arg(keep),
                Value::Integer(fence_ttl_ms),
                wait_mode.clone(),
                Value::Integer(queue_lease_ms),
                Value::String(number.to_string().into()),
                Value::String(next_number.to_string().into()),
                Value::String(publish.into()),
                Value::from(channel.clone()),
                Value::String(if expire_gt { "1" } else { "" }.into()),
            ];
            if guarded {
                old.extend(guard.script_args().into_values());
            }
            let new = RwLockAcquire {
                owner: holder,
                lease_ms,
                side,
                keep: Token(keep),
                fence_ttl_ms,
                wait: wait_mode,
                queue_lease_ms,
                number: Digits(number),
                next_number: Digits(next_number),
                publish,
                channel: channel.clone(),
                expire_gt: OneOrEmpty(expire_gt),
                restart_guard: guarded.then(|| guard.script_args()),
            };
            assert_eq!(new.into_values(), old);
        }
    }

    #[test]
    fn rw_lock_release_sends_what_it_did() {
        let (channel, publish, fence_ttl_ms) = (channel(), PUBLISH, FENCE_TTL_MS);
        for (token, last, side, exactly) in
            [(Some(TOKEN), false, "r", true), (None, true, "w", false)]
        {
            let owner = "uuid:2";
            let old = vec![
                Value::String(owner.into()),
                token_arg(token),
                Value::String(if last { "1" } else { "0" }.into()),
                Value::String(side.into()),
                Value::String(publish.into()),
                Value::from(channel.clone()),
                Value::String(if exactly { "=" } else { "!" }.into()),
                Value::Integer(fence_ttl_ms),
            ];
            let new = RwLockRelease {
                owner,
                token: Token(token),
                last: OneOrZero(last),
                side,
                publish,
                channel: channel.clone(),
                mode: if exactly { "=" } else { "!" },
                fence_ttl_ms,
            };
            assert_eq!(new.into_values(), old);
        }
    }

    #[test]
    fn semaphore_acquire_sends_what_it_did() {
        let channel = channel();
        let guard = crate::redis::restart::RestartGuard::new(std::time::Duration::from_secs(9));
        for (declared, guarded) in [(None, false), (Some(5_u32), true)] {
            let (holder, lease_ms, number, next_number, keep_ms) =
                ("uuid:1:2:x", 30_000, 8_u64, 9_u64, 61_000);
            let wait_mode = s("1");
            let mut old = vec![
                Value::String(holder.into()),
                Value::Integer(lease_ms),
                declared.map_or(Value::String("".into()), |n| Value::Integer(n.into())),
                wait_mode.clone(),
                Value::String(number.to_string().into()),
                Value::String(next_number.to_string().into()),
                Value::String(PUBLISH.into()),
                Value::from(channel.clone()),
                Value::Integer(keep_ms),
            ];
            if guarded {
                old.extend(guard.script_args().into_values());
            }
            let new = SemaphoreAcquire {
                permit_id: holder,
                lease_ms,
                declared: declared.map(i64::from),
                wait: wait_mode,
                number: Digits(number),
                next_number: Digits(next_number),
                publish: PUBLISH,
                channel: channel.clone(),
                queue_keep_ms: keep_ms,
                restart_guard: guarded.then(|| guard.script_args()),
            };
            assert_eq!(new.into_values(), old);
        }
    }

    #[test]
    fn semaphore_release_and_totals_send_what_they_did() {
        let channel = channel();
        for (leave, releaser) in [(false, None), (true, Some(uuid::Uuid::from_u128(7)))] {
            let id = "uuid:1:2:x";
            let old = vec![
                Value::String(id.into()),
                Value::String(PUBLISH.into()),
                Value::from(channel.clone()),
                Value::String(if leave { "1" } else { "" }.into()),
                Value::String(releaser.map(|u| u.to_string()).unwrap_or_default().into()),
            ];
            let new = SemaphoreRelease {
                permit_id: id,
                publish: PUBLISH,
                channel: channel.clone(),
                leave: OneOrEmpty(leave),
                releaser: releaser.map(|u| u.to_string()),
            };
            assert_eq!(new.into_values(), old);
        }

        let permits = 3_u32;
        let old = vec![
            Value::Integer(i64::from(permits)),
            Value::String(PUBLISH.into()),
            Value::from(channel.clone()),
        ];
        let new = SemaphorePermits {
            permits: i64::from(permits),
            publish: PUBLISH,
            channel: channel.clone(),
        };
        assert_eq!(new.into_values(), old);

        let delta = -2;
        let old = vec![
            Value::Integer(delta),
            Value::Integer(i64::from(u32::MAX)),
            Value::String(PUBLISH.into()),
            Value::from(channel.clone()),
        ];
        let new = SemaphoreAddPermits {
            delta,
            max_total: i64::from(u32::MAX),
            publish: PUBLISH,
            channel: channel.clone(),
        };
        assert_eq!(new.into_values(), old);

        let old = vec![Value::String(PUBLISH.into()), Value::from(channel.clone())];
        let new = SemaphoreAvailable {
            publish: PUBLISH,
            channel: channel.clone(),
        };
        assert_eq!(new.into_values(), old);
    }

    #[test]
    fn force_unlock_sends_what_it_did() {
        let channel = channel();
        let old = vec![
            Value::String(PUBLISH.into()),
            Value::from(channel.clone()),
            Value::Integer(FENCE_TTL_MS),
        ];
        let new = ForceUnlock {
            publish: PUBLISH,
            channel,
            fence_ttl_ms: FENCE_TTL_MS,
        };
        assert_eq!(new.into_values(), old);
    }

    #[test]
    fn latch_scripts_send_what_they_did() {
        let channel = channel();
        let (count, ttl_ms, id) = (u64::MAX, 5_000, "6b1c0f54-setting".to_owned());
        let old = vec![
            Value::Integer(i64::try_from(count).unwrap_or(i64::MAX)),
            Value::Integer(ttl_ms),
            Value::from(id.clone()),
        ];
        let new = LatchSetCount {
            count: i64::try_from(count).unwrap_or(i64::MAX),
            ttl_ms,
            id,
        };
        assert_eq!(new.into_values(), old);

        let (id, record_for_ms) = ("6b1c0f54-count-down".to_owned(), 86_400_000);
        for member in ["", "worker-3"] {
            let old = vec![
                Value::from(id.as_str()),
                Value::from(PUBLISH),
                Value::from(channel.clone()),
                Value::Integer(record_for_ms),
                Value::from(member),
            ];
            let new = LatchCountDown {
                id: &id,
                publish: PUBLISH,
                channel: channel.clone(),
                record_for_ms,
                member,
            };
            assert_eq!(new.into_values(), old);
        }

        for mine in [None, Some("6b1c0f54-setting")] {
            let old = vec![Value::from(mine.unwrap_or(""))];
            let new = LatchRead {
                phase: mine.unwrap_or(""),
            };
            assert_eq!(new.into_values(), old);
        }
    }

    #[test]
    fn fenced_write_sends_what_it_did() {
        for (mode, value) in [
            ("write", Some(Value::Bytes(b"v".to_vec().into()))),
            ("claim", None),
        ] {
            let token = TOKEN;
            let mut old = vec![
                Value::String(token.to_string().into()),
                Value::String(mode.into()),
            ];
            old.extend(value.clone());
            let new = FencedWriteArgs {
                token: Digits(token),
                mode,
                value: value.map(|bytes| FencedBytes { bytes }),
            };
            assert_eq!(new.into_values(), old);
        }
    }

    #[test]
    fn inspect_sends_what_it_did() {
        let most = 1000_usize;
        let old = vec![Value::from(i64::try_from(most).unwrap_or(1000))];
        let new = Inspect {
            most_entries: i64::try_from(most).unwrap_or(1000),
        };
        assert_eq!(new.into_values(), old);
    }
}

//! What a lock looks like in Redis right now, as the handles' `inspect`
//! ([`Lock::inspect`](crate::Lock::inspect) and the others),
//! [`Client::inspect`] and [`Client::list`] return it: holders, waiters,
//! leases, tokens and permits, read in one script so the picture is of one
//! instant. For operators (the `redisync` command-line tool) and for code.
//!
//! - [`Inspection`]: one name of one kind at one instant.
//! - [`Holder`]: one owner holding it, with its hold count, token and lease.
//! - [`Waiter`]: one owner queued for it in Redis.
//! - [`HoldMode`]: how a holder holds or a waiter waits (exclusive, read,
//!   write, permits).
//! - [`LockKind`]: which primitive a name is used as.
//! - [`Permits`]: a [`Semaphore`](crate::Semaphore)'s permits, set up and
//!   in use.

// Read by `lua/inspect.lua`, one script per name and kind.

use std::collections::HashMap;
use std::time::Duration;

use fred::types::{Key, Value};
use futures::{StreamExt, TryStreamExt};
use uuid::Uuid;

use crate::client::Client;
use crate::engine::client_inner::ClientInner;
use crate::engine::guard_core::send_parked_release;
use crate::engine::Named;
use crate::error::{Error, Result};
use crate::redis::args::{Inspect, ScriptArgs};
use crate::redis::keys::{self, Kind, Role};
use crate::redis::script::lua_script;

lua_script!(INSPECT, "inspect.lua");

/// Most queue entries, readers or permits read per key: an inspection of a
/// larger one says how many were left out.
const MOST_ENTRIES: usize = 1000;

/// How many names [`Client::list`] inspects at once.
const LIST_CONCURRENCY: usize = 16;

/// The kind of primitive a name is used as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum LockKind {
    /// [`Lock`](crate::Lock).
    Lock,
    /// [`FairLock`](crate::FairLock).
    FairLock,
    /// [`RwLock`](crate::RwLock).
    RwLock,
    /// [`Semaphore`](crate::Semaphore).
    Semaphore,
    /// [`CountDownLatch`](crate::CountDownLatch).
    Latch,
}

impl LockKind {
    /// Every kind.
    pub const ALL: [LockKind; 5] = [
        LockKind::Lock,
        LockKind::FairLock,
        LockKind::RwLock,
        LockKind::Semaphore,
        LockKind::Latch,
    ];

    /// The short name used by the command-line tool and in keys: `lock`,
    /// `fair`, `rw`, `semaphore`, `latch`.
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Lock => Kind::Lock,
            LockKind::FairLock => Kind::Fair,
            LockKind::RwLock => Kind::Rw,
            LockKind::Semaphore => Kind::Semaphore,
            LockKind::Latch => Kind::Latch,
        }
        .label()
    }

    fn of(kind: Kind) -> LockKind {
        match kind {
            Kind::Lock => LockKind::Lock,
            Kind::Fair => LockKind::FairLock,
            Kind::Rw => LockKind::RwLock,
            Kind::Semaphore => LockKind::Semaphore,
            Kind::Latch => LockKind::Latch,
        }
    }
}

impl std::fmt::Display for LockKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl std::str::FromStr for LockKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<LockKind> {
        LockKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "unknown kind {s:?}: one of lock, fair, rw, semaphore, latch"
                ))
            })
    }
}

/// How a holder holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HoldMode {
    /// A [`Lock`](crate::Lock) or [`FairLock`](crate::FairLock) hold.
    Exclusive,
    /// The read side of an [`RwLock`](crate::RwLock).
    Read,
    /// The write side of an [`RwLock`](crate::RwLock).
    Write,
    /// This many permits of a [`Semaphore`](crate::Semaphore).
    Permits(u32),
}

/// One holder of a lock, as Redis records it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The owner id, `"<client uuid>:<owner tag>"` (the tag names the task
    /// or [`Owner`](crate::Owner) scope).
    pub owner: String,
    /// The client the owner belongs to (compare with [`Client::id`]).
    pub client_id: Option<Uuid>,
    /// How it holds.
    pub mode: HoldMode,
    /// Re-entrant holds (each guard releases one); 1 for permits.
    pub holds: u32,
    /// The fencing token of the hold (not recorded for permits).
    pub token: Option<u64>,
    /// Time left on its lease: `None` when the key has no TTL (not written
    /// by redisync), zero for a lease that ended and whose permits or read
    /// hold the next acquisition reclaims.
    pub lease_left: Option<Duration>,
}

impl Holder {
    /// Whether its lease still runs (a lease that ended reads as zero).
    pub fn is_live(&self) -> bool {
        self.lease_left != Some(Duration::ZERO)
    }
}

/// An owner waiting in Redis: in a [`FairLock`](crate::FairLock)'s queue,
/// or a writer waiting on an [`RwLock`](crate::RwLock).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// The owner id, as [`Holder::owner`].
    pub owner: String,
    /// The client the owner belongs to.
    pub client_id: Option<Uuid>,
    /// What it waits for: [`HoldMode::Exclusive`] or [`HoldMode::Write`].
    pub mode: HoldMode,
    /// Time until its place expires unless it asks again (every attempt of
    /// a live waiter refreshes it; a crashed waiter's runs out).
    pub expires_in: Duration,
}

/// A semaphore's permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Permits {
    /// The permits it was set up with.
    pub total: u32,
    /// The permits held under a live lease.
    pub in_use: u32,
}

/// One name of one kind, as Redis holds it at one instant; see
/// [`Lock::inspect`](crate::Lock::inspect), [`Client::inspect`] and
/// [`Client::list`].
///
/// Clients waiting for a [`Lock`](crate::Lock) or a
/// [`Semaphore`](crate::Semaphore) are listed (one entry per client: its
/// first waiting task); tasks waiting behind it in its client are not.
/// [`contended`](Inspection::contended) tells that a task of another client
/// asked while it was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Inspection {
    /// The kind.
    pub kind: LockKind,
    /// The name, as given to [`Client::lock`] and the others.
    pub name: String,
    /// Whether Redis holds anything of it: a hold, a queue, a semaphore's
    /// set-up. A free lock has left at most its fencing counter.
    pub exists: bool,
    /// Who holds it.
    pub holders: Vec<Holder>,
    /// Who waits for it in Redis, first in line first.
    pub waiters: Vec<Waiter>,
    /// Time left on the lock's key (the longest lease in it): `None` when
    /// free, or when the key has no TTL.
    pub lease_left: Option<Duration>,
    /// The fencing token of the exclusive hold (a lock's, a writer's).
    pub token: Option<u64>,
    /// The newest fencing token issued for the name (`None` once its counter
    /// expired: the next token still comes after it, see
    /// [`ClientBuilder::fence_ttl`](crate::ClientBuilder::fence_ttl)).
    pub last_token: Option<u64>,
    /// A semaphore's permits.
    pub permits: Option<Permits>,
    /// A count-down latch's count left (0: open).
    pub count: Option<u64>,
    /// A task of another client than the holder's asked while it was
    /// taken; for a lock handed to a queued client, others may still be
    /// queued behind it (its release looks at the queue).
    pub contended: bool,
    /// What the holder published about itself: a leader's identity (see
    /// [`Leader`](crate::Leader)).
    pub identity: Option<String>,
    /// Entries left out of `holders` and `waiters` (more than a thousand).
    pub left_out: u64,
}

impl Inspection {
    /// Whether anybody holds it under a live lease: a semaphore permit or a
    /// read hold whose lease ended (a crashed holder's, left until the next
    /// acquisition reclaims it) does not count.
    pub fn is_held(&self) -> bool {
        self.holders.iter().any(Holder::is_live)
    }

    /// The holds `owner` has in `mode`.
    pub(crate) fn holds_of(&self, owner: &str, mode: HoldMode) -> u32 {
        self.holders
            .iter()
            .filter(|h| h.owner == owner && h.mode == mode)
            .map(|h| h.holds)
            .sum()
    }

    /// Whether somebody holds it in `mode` under a live lease.
    pub(crate) fn is_held_as(&self, mode: HoldMode) -> bool {
        self.holders.iter().any(|h| h.mode == mode && h.is_live())
    }

    /// The handles' `remaining_lease`: `None` when nobody holds it,
    /// `Duration::MAX` for a key without TTL (not written by redisync).
    pub(crate) fn remaining_lease(&self) -> Option<Duration> {
        self.is_held()
            .then(|| self.lease_left.unwrap_or(Duration::MAX))
    }
}

impl Client {
    /// Every primitive named `name` that Redis holds something of (a hold, a
    /// queue, a semaphore, or just the fencing counter of a lock released
    /// lately), read in one script. Empty when there is none.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty name, and when no redisync
    /// key of that name exists but a Redis key spelled `name` does (a key
    /// is not a lock name; [`Client::list`] shows the names);
    /// [`Error::WrongType`] when a key of the name holds something redisync
    /// did not write; [`Error::Redis`] when Redis fails.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
    /// for found in client.inspect("orders:42").await? {
    ///     for h in &found.holders {
    ///         println!("{} held by {} ({} holds, token {:?})", found.kind, h.owner, h.holds, h.token);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, name: &str) -> Result<Vec<Inspection>> {
        self.inner.check_usable(name, "lock")?;
        let found: Vec<Inspection> = read(&self.inner, name, &Kind::ALL)
            .await?
            .into_iter()
            .filter(|i| i.exists || i.last_token.is_some())
            .collect();
        if found.is_empty() {
            let exists = crate::redis::link::Command {
                name: "EXISTS",
                route: Some(name),
                args: vec![name.into()],
            };
            let plain: Option<String> = self
                .inner
                .link()
                .call::<i64>(exists)
                .await
                .ok()
                .filter(|n| *n > 0)
                .map(|_| name.to_owned());
            if let Some(key) = plain {
                return Err(Error::NotALock { key });
            }
        }
        Ok(found)
    }

    /// Every primitive whose name matches the glob `pattern` (`*` any
    /// characters, `?` one, `\` escapes; `*` for all) and that Redis holds
    /// something of, sorted by name and kind: a SCAN of the keyspace (every
    /// primary of a cluster), then one inspection per name.
    ///
    /// # Errors
    /// [`Error::WrongType`] when a key of a matching name holds something
    /// redisync did not write; [`Error::Redis`] when Redis fails.
    pub async fn list(&self, pattern: &str) -> Result<Vec<Inspection>> {
        self.inner.check_open()?;
        let keys: Vec<Key> = self
            .inner
            .link()
            .scan(keys::HOLD_PATTERN)
            .await
            .map_err(Error::redis)?;
        let mut names: Vec<(String, Kind)> = keys
            .iter()
            .filter_map(|k| keys::parse(k.as_str()?))
            .filter(|(_, _, name)| glob_match(pattern, name))
            .map(|(kind, _, name)| (name, kind))
            .collect();
        names.sort_by_key(|(name, kind)| (name.clone(), LockKind::of(*kind)));
        names.dedup();
        let found: Vec<Vec<Inspection>> = futures::stream::iter(names)
            .map(|(name, kind): (String, Kind)| {
                let client = &self.inner;
                async move { read(client, &name, &[kind]).await }
            })
            .buffered(LIST_CONCURRENCY)
            .try_collect()
            .await?;
        Ok(found.into_iter().flatten().filter(|i| i.exists).collect())
    }
}

/// What Redis holds of a handle's name now (its `inspect`); `what` names
/// it in errors.
pub(crate) async fn inspect_handle(named: &Named, what: &str) -> Result<Inspection> {
    // A dropped guard's release parked for our next attempt goes first.
    send_parked_release(&named.client, &named.key, &named.channel);
    inspect_kind(named.client_inner(), &named.name, named.kind, what).await
}

/// The inspection of `name` as `kind`.
pub(crate) async fn inspect_kind(
    client: &ClientInner,
    name: &str,
    kind: Kind,
    what: &str,
) -> Result<Inspection> {
    client.check_usable(name, what)?;
    let mut found = read(client, name, &[kind]).await?;
    found.pop().ok_or_else(|| Error::Script {
        name: INSPECT.name,
        message: "no reply for the kind".into(),
    })
}

/// The key roles of a kind, and the Redis type of each.
fn roles(kind: Kind) -> &'static [(Role, &'static str)] {
    match kind {
        // The same keys; a fair lock's queue entries carry deadlines.
        Kind::Lock | Kind::Fair => &[
            (Role::Hold, "hash"),
            (Role::Fence, "string"),
            (Role::Queue, "list"),
        ],
        Kind::Rw => &[
            (Role::Hold, "hash"),
            (Role::Fence, "string"),
            (Role::Readers, "zset"),
            (Role::Queue, "list"),
        ],
        Kind::Semaphore => &[
            (Role::Hold, "hash"),
            (Role::Leases, "zset"),
            (Role::Queue, "list"),
        ],
        Kind::Latch => &[(Role::Hold, "hash")],
    }
}

/// Reads the keys of `name` for every kind of `kinds` in one script (they
/// share the name's hash tag, so one slot) and decodes them per kind.
async fn read(client: &ClientInner, name: &str, kinds: &[Kind]) -> Result<Vec<Inspection>> {
    let mut wanted = Vec::new();
    for &kind in kinds {
        for &(role, _) in roles(kind) {
            wanted.push(Key::from(keys::key(kind, role, name)));
        }
    }
    let first = keys::key(kinds[0], Role::Hold, name);
    let reply: Value = INSPECT
        .run_idempotent(
            client.link(),
            &first,
            wanted.clone(),
            Inspect {
                most_entries: i64::try_from(MOST_ENTRIES).unwrap_or(1000),
            }
            .into_values(),
        )
        .await?;
    let bad = |message: String| Error::Script {
        name: INSPECT.name,
        message,
    };
    let Value::Array(values) = reply else {
        return Err(bad(format!("unexpected reply {reply:?}")));
    };
    let mut values = values.into_iter();
    let now = values
        .next()
        .and_then(|v| v.as_i64())
        .ok_or_else(|| bad("no server time".into()))?;
    let mut raw = values.map(RawKey::from_value);
    let mut out = Vec::with_capacity(kinds.len());
    for &kind in kinds {
        let mut snapshot = Vec::new();
        for &(role, want) in roles(kind) {
            let key = keys::key(kind, role, name);
            let got = raw
                .next()
                .flatten()
                .ok_or_else(|| bad(format!("unreadable entry for {key}")))?;
            if got.kind != "none" && got.kind != want {
                return Err(Error::WrongType { key });
            }
            snapshot.push((role, got));
        }
        out.push(
            decode(LockKind::of(kind), name, now, &snapshot).map_err(|role| Error::WrongType {
                key: keys::key(kind, role, name),
            })?,
        );
    }
    Ok(out)
}

/// One key as `inspect.lua` read it.
#[derive(Debug, Clone, Default, PartialEq)]
struct RawKey {
    /// TYPE's answer.
    kind: String,
    pttl: i64,
    size: u64,
    entries: Vec<String>,
}

impl RawKey {
    fn from_value(v: Value) -> Option<RawKey> {
        let Value::Array(parts) = v else { return None };
        let [kind, pttl, size, entries] = <[Value; 4]>::try_from(parts).ok()?;
        let entries = match entries {
            Value::Array(e) => e
                .into_iter()
                .map(|v| v.as_string())
                .collect::<Option<Vec<_>>>()?,
            _ => Vec::new(),
        };
        Some(RawKey {
            kind: kind.as_string()?,
            pttl: pttl.as_i64()?,
            size: u64::try_from(size.as_i64()?).ok()?,
            entries,
        })
    }

    fn exists(&self) -> bool {
        self.kind != "none"
    }

    /// The TTL: `None` when missing or without one.
    fn ttl(&self) -> Option<Duration> {
        u64::try_from(self.pttl).ok().map(Duration::from_millis)
    }

    /// Field/value or member/score pairs.
    fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries
            .chunks_exact(2)
            .map(|p| (p[0].as_str(), p[1].as_str()))
    }

    /// Members with their score as milliseconds left after `now`.
    fn ends(&self, now: i64) -> impl Iterator<Item = (&str, Duration)> {
        self.pairs()
            .map(move |(member, score)| (member, ms_after(score, now)))
    }

    /// Entries of a zset or list not returned.
    fn left_out(&self) -> u64 {
        let returned = if self.kind == "zset" {
            self.entries.len() / 2
        } else {
            self.entries.len()
        };
        self.size.saturating_sub(returned as u64)
    }
}

/// `score` (server ms) minus `now`, zero when passed.
fn ms_after(score: &str, now: i64) -> Duration {
    #[allow(clippy::cast_possible_truncation)]
    let end = score.parse::<f64>().map_or(0, |f| f as i64);
    Duration::from_millis(u64::try_from(end.saturating_sub(now)).unwrap_or(0))
}

fn client_of(owner: &str) -> Option<Uuid> {
    owner.get(..36).and_then(|u| Uuid::parse_str(u).ok())
}

/// A key's content that is not ours: the role of the key.
type Bad = std::result::Result<(), Role>;

fn number(role: Role, s: &str) -> std::result::Result<u64, Role> {
    s.parse().map_err(|_| role)
}

fn count(role: Role, s: &str) -> std::result::Result<u32, Role> {
    s.parse().map_err(|_| role)
}

/// The state of one name of one kind from its keys (in the order of
/// [`roles`]); `Err(role)` names a key whose content is not ours.
fn decode(
    kind: LockKind,
    name: &str,
    now: i64,
    keys: &[(Role, RawKey)],
) -> std::result::Result<Inspection, Role> {
    let get = |role: Role| -> RawKey {
        keys.iter()
            .find(|(r, _)| *r == role)
            .map(|(_, k)| k.clone())
            .unwrap_or_default()
    };
    let hold = get(Role::Hold);
    let fence = get(Role::Fence);
    let mut out = Inspection {
        kind,
        name: name.to_owned(),
        exists: hold.exists(),
        holders: Vec::new(),
        waiters: Vec::new(),
        lease_left: hold.ttl(),
        token: None,
        last_token: match fence.entries.first() {
            Some(v) if fence.exists() => Some(number(Role::Fence, v)?),
            _ => None,
        },
        permits: None,
        count: None,
        contended: false,
        identity: None,
        left_out: 0,
    };
    match kind {
        LockKind::Lock => {
            exclusive(&mut out, &hold)?;
            lock_queue(&mut out, &get(Role::Queue));
        }
        LockKind::FairLock => {
            exclusive(&mut out, &hold)?;
            fair_queue(&mut out, &get(Role::Queue), now);
        }
        LockKind::RwLock => {
            read_write(&mut out, &hold, &get(Role::Readers), &get(Role::Queue), now)?;
        }
        LockKind::Semaphore => {
            permits(&mut out, &hold, &get(Role::Leases), now)?;
            semaphore_queue(&mut out, &get(Role::Queue));
        }
        LockKind::Latch => latch(&mut out, &hold)?,
    }
    Ok(out)
}

/// The hash of a lock or fair lock: owner -> count, `~t` the token, `~w`
/// another client asked.
fn exclusive(out: &mut Inspection, hold: &RawKey) -> Bad {
    for (field, value) in hold.pairs() {
        match field {
            "~t" => out.token = Some(number(Role::Hold, value)?),
            "~w" => out.contended = true,
            "~i" => out.identity = Some(value.to_owned()),
            // Marks of a later layout version: not holders.
            _ if field.starts_with('~') => {}
            _ => out.holders.push(Holder {
                owner: field.to_owned(),
                client_id: client_of(field),
                mode: HoldMode::Exclusive,
                holds: count(Role::Hold, value)?,
                token: None,
                lease_left: hold.ttl(),
            }),
        }
    }
    for h in &mut out.holders {
        h.token = out.token;
    }
    Ok(())
}

/// A count-down latch's hash: `n` the count left (see
/// `lua/latch_set_count.lua`).
fn latch(out: &mut Inspection, hold: &RawKey) -> Bad {
    for (field, value) in hold.pairs() {
        if field == "n" {
            out.count = Some(number(Role::Hold, value)?);
        }
    }
    if hold.exists() && out.count.is_none() {
        return Err(Role::Hold);
    }
    Ok(())
}

/// A fair lock's queue (head first), entries "@<queue deadline> <lease
/// ms> <number> <token floor> <owner id>", the deadline in server ms; a
/// waiter whose deadline passed is skipped by the next hand-off.
fn fair_queue(out: &mut Inspection, queue: &RawKey, now: i64) {
    deadline_queue(out, queue, now, |_| HoldMode::Exclusive);
}

/// A queue whose entries carry their waiter's deadline:
/// `@<deadline ms> <lease ms> <number> <mode> <owner>`, `mode` read by
/// `mode_of`.
fn deadline_queue(
    out: &mut Inspection,
    queue: &RawKey,
    now: i64,
    mode_of: impl Fn(&str) -> HoldMode,
) {
    out.exists |= queue.exists();
    out.left_out += queue.left_out();
    for entry in &queue.entries {
        let mut fields = entry.splitn(5, ' ');
        let deadline = fields
            .next()
            .and_then(|d| d.strip_prefix('@'))
            .and_then(|d| d.parse::<i64>().ok());
        let (Some(deadline), Some(mode), Some(owner)) = (deadline, fields.nth(2), fields.next())
        else {
            continue;
        };
        out.waiters.push(Waiter {
            owner: owner.to_owned(),
            client_id: client_of(owner),
            mode: mode_of(mode),
            expires_in: Duration::from_millis(u64::try_from(deadline - now).unwrap_or(0)),
        });
    }
}

/// A plain lock's queue of waiting clients (oldest first), entries
/// "<lease ms> <number> <token floor> <owner id>"; a place lasts as long as
/// the queue key (each waiter looks again within a quarter of its lease).
fn lock_queue(out: &mut Inspection, queue: &RawKey) {
    hand_off_queue(out, queue, 4, |owner| (owner, HoldMode::Exclusive));
}

/// A semaphore's queue of waiting clients (oldest first), entries
/// "<lease ms> <number> <permit id>", the id `<owner>:<n>#<permits>`.
fn semaphore_queue(out: &mut Inspection, queue: &RawKey) {
    hand_off_queue(out, queue, 3, |id| {
        let (owner, rest) = id.rsplit_once(':').unwrap_or((id, ""));
        let permits = rest
            .rsplit_once('#')
            .and_then(|(_, n)| n.parse().ok())
            .unwrap_or(0);
        (owner, HoldMode::Permits(permits))
    });
}

/// The waiters of a hand-off queue whose entries end with the waiter's id
/// as their `fields`-th space-separated field; `owner` tells whose it is
/// and what it asks.
fn hand_off_queue(
    out: &mut Inspection,
    queue: &RawKey,
    fields: usize,
    owner: impl Fn(&str) -> (&str, HoldMode),
) {
    out.exists |= queue.exists();
    out.left_out += queue.left_out();
    let expires_in = queue.ttl().unwrap_or_default();
    for entry in &queue.entries {
        let Some(id) = entry.splitn(fields, ' ').nth(fields - 1) else {
            continue;
        };
        let (owner, mode) = owner(id);
        out.waiters.push(Waiter {
            owner: owner.to_owned(),
            client_id: client_of(owner),
            mode,
            expires_in,
        });
    }
}

/// A read-write lock: `w:<owner>` / `r:<owner>` holds, `~t` the writer's
/// token, `t:<owner>` a reader's; the readers' lease ends; the queue of
/// waiting clients, entries `@<deadline> <lease> <number> <r|w> <owner>`.
fn read_write(
    out: &mut Inspection,
    hold: &RawKey,
    readers: &RawKey,
    queue: &RawKey,
    now: i64,
) -> Bad {
    let mut reader_tokens = HashMap::new();
    for (field, value) in hold.pairs() {
        if field == "~t" {
            out.token = Some(number(Role::Hold, value)?);
        } else if let Some(owner) = field.strip_prefix("t:") {
            reader_tokens.insert(owner, number(Role::Hold, value)?);
        }
    }
    let reader_leases: HashMap<&str, Duration> = readers.ends(now).collect();
    for (field, value) in hold.pairs() {
        let (owner, mode) = if let Some(o) = field.strip_prefix("w:") {
            (o, HoldMode::Write)
        } else if let Some(o) = field.strip_prefix("r:") {
            (o, HoldMode::Read)
        } else {
            continue;
        };
        let (token, lease_left) = if mode == HoldMode::Write {
            (out.token, hold.ttl())
        } else {
            (
                reader_tokens.get(owner).copied(),
                reader_leases.get(owner).copied(),
            )
        };
        out.holders.push(Holder {
            owner: owner.to_owned(),
            client_id: client_of(owner),
            mode,
            holds: count(Role::Hold, value)?,
            token,
            lease_left,
        });
    }
    if !out.holders.iter().any(|h| h.mode == HoldMode::Write) {
        out.token = None;
    }
    out.left_out = readers.left_out();
    deadline_queue(out, queue, now, |side| match side {
        "r" => HoldMode::Read,
        "w" => HoldMode::Write,
        _ => HoldMode::Exclusive,
    });
    Ok(())
}

/// A semaphore: `~permits`, `~used`, `~t` the last token, `~w` waiters of
/// other clients, `~q` a queue; the lease of every acquisition (id `<owner>:<n>#<permits>`).
fn permits(out: &mut Inspection, hold: &RawKey, leases: &RawKey, now: i64) -> Bad {
    let mut total = None;
    let mut used = 0u32;
    for (field, value) in hold.pairs() {
        match field {
            "~permits" => total = Some(count(Role::Hold, value)?),
            "~used" => used = count(Role::Hold, value)?,
            "~t" => out.last_token = Some(number(Role::Hold, value)?),
            "~w" | "~q" => out.contended = true,
            _ => {}
        }
    }
    let mut expired = 0u32;
    for (id, lease_left) in leases.ends(now) {
        let (owner, rest) = id.rsplit_once(':').unwrap_or((id, ""));
        let permits = rest
            .rsplit_once('#')
            .and_then(|(_, n)| n.parse().ok())
            .unwrap_or(0);
        if lease_left.is_zero() {
            expired = expired.saturating_add(permits);
        }
        out.holders.push(Holder {
            owner: owner.to_owned(),
            client_id: client_of(owner),
            mode: HoldMode::Permits(permits),
            holds: 1,
            token: None,
            lease_left: Some(lease_left),
        });
    }
    out.permits = total.map(|total| Permits {
        total,
        in_use: used.saturating_sub(expired),
    });
    out.lease_left = leases.ttl().or(hold.ttl());
    out.left_out = leases.left_out();
    Ok(())
}

/// Whether `name` matches the glob `pattern`: `*` any run of characters,
/// `?` one character, `\` takes the next character literally.
fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Classic two-pointer match with one backtrack point (the last `*`).
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        let literal = |pi: usize| -> Option<(char, usize)> {
            match p.get(pi) {
                Some('\\') => p.get(pi + 1).map(|c| (*c, 2)),
                Some(c) => Some((*c, 1)),
                None => None,
            }
        };
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
                continue;
            }
            Some('?') => {
                pi += 1;
                ni += 1;
                continue;
            }
            _ => {}
        }
        if let Some((c, width)) = literal(pi) {
            if c == n[ni] {
                pi += width;
                ni += 1;
                continue;
            }
        }
        match star {
            Some((sp, sn)) => {
                pi = sp + 1;
                ni = sn + 1;
                star = Some((sp, sn + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(kind: &str, pttl: i64, entries: &[&str]) -> RawKey {
        RawKey {
            kind: kind.into(),
            pttl,
            size: match kind {
                "zset" | "hash" => entries.len() as u64 / 2,
                _ => entries.len() as u64,
            },
            entries: entries.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    const A: &str = "0b1e4a3c-5d6f-4a1b-8c9d-0e1f2a3b4c5d:task-7";
    const B: &str = "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a:task-9";

    #[test]
    fn a_lock_shows_its_holder_token_and_counter() {
        let keys = [
            (
                Role::Hold,
                raw("hash", 4000, &[A, "2", "~t", "17", "~w", "1"]),
            ),
            (Role::Fence, raw("string", 9000, &["17"])),
        ];
        let i = decode(LockKind::Lock, "orders:42", 0, &keys).unwrap();
        assert!(i.exists && i.is_held() && i.contended);
        assert_eq!(i.token, Some(17));
        assert_eq!(i.last_token, Some(17));
        assert_eq!(i.lease_left, Some(Duration::from_secs(4)));
        let h = &i.holders[0];
        assert_eq!((h.owner.as_str(), h.holds, h.token), (A, 2, Some(17)));
        assert_eq!(h.client_id.unwrap().to_string(), &A[..36]);
    }

    #[test]
    fn a_free_lock_keeps_only_its_counter() {
        let keys = [
            (Role::Hold, raw("none", -2, &[])),
            (Role::Fence, raw("string", 9000, &["5"])),
            (Role::Queue, raw("none", -2, &[])),
        ];
        let i = decode(LockKind::Lock, "x", 0, &keys).unwrap();
        assert!(!i.exists && !i.is_held());
        assert_eq!((i.lease_left, i.last_token), (None, Some(5)));
    }

    #[test]
    fn a_fair_lock_lists_its_queue_in_order_with_deadlines() {
        let (a, b) = (
            format!("@1100 30000 7 0 {A}"),
            format!("@1200 30000 8 0 {B}"),
        );
        let keys = [
            (Role::Hold, raw("hash", 500, &[A, "1", "~t", "3"])),
            (Role::Fence, raw("none", -2, &[])),
            (
                Role::Queue,
                raw("list", -1, &[&b, &a, "@900 30000 9 0 gone:1", "junk"]),
            ),
        ];
        let i = decode(LockKind::FairLock, "f", 1000, &keys).unwrap();
        let w: Vec<_> = i
            .waiters
            .iter()
            .map(|w| (w.owner.as_str(), w.expires_in.as_millis()))
            .collect();
        assert_eq!(w, [(B, 200), (A, 100), ("gone:1", 0)]);
    }

    #[test]
    fn an_rw_lock_shows_readers_with_their_leases_and_waiting_writers() {
        let keys = [
            (
                Role::Hold,
                raw(
                    "hash",
                    8000,
                    &[
                        "~mode",
                        "read",
                        &format!("r:{A}"),
                        "2",
                        &format!("t:{A}"),
                        "11",
                    ],
                ),
            ),
            (Role::Fence, raw("string", 1, &["11"])),
            (Role::Readers, raw("zset", 8000, &[A, "5000"])),
            (
                Role::Queue,
                raw(
                    "list",
                    5000,
                    &[
                        &format!("@1100 30000 7 w {B}"),
                        &format!("@1200 30000 8 r {A}"),
                    ],
                ),
            ),
        ];
        let i = decode(LockKind::RwLock, "rw", 1000, &keys).unwrap();
        assert_eq!(i.token, None);
        let h = &i.holders[0];
        assert_eq!(h.mode, HoldMode::Read);
        assert_eq!((h.holds, h.token), (2, Some(11)));
        assert_eq!(h.lease_left, Some(Duration::from_secs(4)));
        assert_eq!(i.waiters[0].mode, HoldMode::Write);
        assert_eq!(i.waiters[0].expires_in, Duration::from_millis(100));
        assert_eq!(
            (i.waiters[1].mode, i.waiters[1].owner.as_str()),
            (HoldMode::Read, A)
        );
    }

    #[test]
    fn a_semaphore_counts_live_permits_only() {
        let keys = [
            (
                Role::Hold,
                raw("hash", -1, &["~permits", "5", "~used", "3", "~t", "40"]),
            ),
            (
                Role::Leases,
                raw(
                    "zset",
                    9000,
                    &[&format!("{A}:1#1"), "900", &format!("{B}:2#2"), "3000"],
                ),
            ),
        ];
        let i = decode(LockKind::Semaphore, "s", 1000, &keys).unwrap();
        assert_eq!(
            i.permits,
            Some(Permits {
                total: 5,
                in_use: 2
            })
        );
        assert_eq!(i.last_token, Some(40));
        assert_eq!(i.holders[0].owner, A);
        assert_eq!(i.holders[0].lease_left, Some(Duration::ZERO));
        assert_eq!(i.holders[1].mode, HoldMode::Permits(2));
    }

    #[test]
    fn content_that_is_not_ours_names_its_key() {
        let keys = [
            (Role::Hold, raw("hash", -1, &["~t", "not a number"])),
            (Role::Fence, raw("none", -2, &[])),
        ];
        assert_eq!(decode(LockKind::Lock, "x", 0, &keys), Err(Role::Hold));
        let keys = [
            (Role::Hold, raw("none", -2, &[])),
            (Role::Fence, raw("string", -1, &["hello"])),
        ];
        assert_eq!(decode(LockKind::Lock, "x", 0, &keys), Err(Role::Fence));
    }

    #[test]
    fn globs_match_like_redis_keys() {
        for (p, n, want) in [
            ("*", "anything", true),
            ("*", "", true),
            ("orders:*", "orders:42", true),
            ("orders:*", "order:42", false),
            ("o?ders:4*", "orders:42", true),
            ("*:42", "orders:42", true),
            ("*:4", "orders:42", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("a\\*", "a*", true),
            ("a\\*", "ab", false),
            ("", "", true),
            ("", "a", false),
        ] {
            assert_eq!(glob_match(p, n), want, "{p} {n}");
        }
    }
}

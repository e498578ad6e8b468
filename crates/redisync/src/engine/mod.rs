//! The engine every primitive runs on, as tokio's `Mutex`, `RwLock` and
//! `Semaphore` run on one batch semaphore: the acquisition state machine
//! ([`acquire`]), the undo of an acquisition whose outcome is unknown
//! ([`undo`]) and the guard core ([`held`]). A primitive is a [`Spec`]: its
//! scripts, its key roles, its re-entry rule and its gate policy. The rules
//! that keep holders exclusive and tokens rising live here, once.
//!
//! Every kind wakes its waiters by hand-off: a waiting client joins the
//! name's queue in Redis; a release hands the hold to the oldest entries
//! that can take it and its message carries the token, so only those
//! waiters wake, holding it (O(1) commands per acquisition however many
//! clients wait).
//!
//! # Unknown outcomes
//!
//! A call that changes who holds something ends one of four ways: a reply,
//! an error reply (the script wrote nothing), never sent (dropped before
//! its first send, or refused locally), or an outcome that is unknown (the
//! command timeout, a reset connection, the future dropped after the send,
//! a NOSCRIPT fallback cut between its two sends). An unknown outcome is
//! read as **ran** where that is the safe reading (nobody's hold is assumed
//! and no guard of ours says held on the strength of it) and as **not ran**
//! where that is the live reading (what may be left in Redis is undone or
//! sent again), one rule per call:
//!
//! | call | unknown outcome read as | so |
//! |---|---|---|
//! | acquire (every kind; a re-entry) | ran | the guard is never returned; an undo ([`undo`]) releases the grant or queue entry that may exist, before this owner's next attempt on the name. A *waiting* acquisition (time left, the client open) rides it out ([`AcquireRetry`](crate::AcquireRetry)): the undo runs inline, retried with back-off while Redis is unreachable, and only once it succeeded is the next attempt sent (`acquire::ride_out`). A re-entry in doubt is sent again instead (its reply settles both: at most one more count in Redis, which the owner's last release drops with the field; a fresh grant is replaced by the next and given back; `acquire::reenter`) |
//! | the replica `WAIT` after a grant; a hold handed to a waiter, while its renewal and `WAIT` (replica sync) or the server's age (restart guard) are read | ran, and not synced | a blip there leaves a grant whose replicas are unknown: as an acquire in doubt, the guard is never returned, the hold leaves the slot without a release ([`guard_core::GuardCore::forget`]), and a waiting acquisition undoes it inline before its next attempt (never a release in the background under the holder id that attempt uses). A grant another flow of the owner re-entered meanwhile is theirs too: never undone, it is synced again once Redis is back (a renewal, then `WAIT`: `acquire::resync_shared`). Any other failure (too few acknowledgements) releases the guard and is the call's error, as before |
//! | release, unlock, `resign`, a dropped guard | ran locally, not ran in Redis | the hold leaves the slot at once (no local waiter can re-enter it); the release is sent again in the background while the lease lasts |
//! | extend, a watchdog renewal | not ran | the local lease estimate keeps its old end (a longer lease left in Redis only outlives our belief) |
//! | `hand_off` | either | the hold keeps its old owner's turn (no flow of that owner contends) until its end, and its final release sends the hand-off again first (idempotent), so a field left under the old id is freed with it ([`guard_core::GuardCore::hand_off`]) |
//! | force-unlock, force-release | ran | this client's holds of the name are lost from the call's start, and so is every hold won by a command sent before the call ended (`LocalHolds::forced_in_doubt`) |
//! | an `RwLock` downgrade (a writer takes the read side) | as acquire | the read guard is never returned; its undo keeps the write hold |
//! | `CountDownLatch::count_down` | not ran | sent again with the same id, counted once, for up to 10 s; then the error says it may have counted |
//! | `CountDownLatch::wait` (a read; so is its subscription) | not ran | looked at again while the wait lasts, as an acquisition rides a blip out ([`AcquireRetry`](crate::AcquireRetry)); its deadline passing in the outage is the error, not "timed out" |
//!
//! Why a retried acquisition never holds twice, without an attempt id: the
//! attempt sent again is the same holder id, and before it is sent the undo
//! of the one in doubt has *succeeded* (not merely been queued in the
//! background), so the script sees either nothing of ours (the first
//! attempt never ran, or its grant or queue entry was removed) and grants
//! or queues once, or a hand-off that came after the undo (a new queue
//! entry's, under the fresh entry number the retry takes). Neither a second
//! grant nor a stale field to replace can exist: an attempt id would tell
//! the script "this one ran already", and the undo makes that question
//! moot. If the undo cannot get through before the deadline, the call
//! fails as before and the undo goes on in the background (settled before
//! the owner's next attempt). No timer decides anything: each pause ends
//! at the deadline at the latest, and the clock is read again after it.
//!
//! Every kind runs these paths; `tests/conformance.rs` runs each ending
//! for each kind.

use std::future::Future;
use std::sync::atomic::AtomicI64;
use std::sync::Arc;
use std::time::Duration;

use fred::types::{Key, Value};
use tokio::time::Instant;

use crate::engine::client_inner::ClientInner;
use crate::engine::hold::{Hold, HoldOps};
use crate::engine::slot::Slot;
use crate::error::Result;
use crate::metrics::Labels;
use crate::redis::args::{ForceUnlock, RestartGuardArgs, ScriptArgs};
use crate::redis::keys::{self, Kind, Role};
use crate::redis::restart::RestartGuard;
use crate::redis::script::LuaScript;

pub(crate) mod acquire;
pub(crate) mod client_inner;
pub(crate) mod guard_core;
pub(crate) mod hold;
pub(crate) mod hub;
pub(crate) mod slot;
pub(crate) mod undo;
pub(crate) mod watchdog;

/// How the local FIFO queue (the slot's gate) orders this client's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// The turn is kept while the hold lives and passed on as its release
    /// is queued (exclusive locks): N local waiters cost one Redis contender.
    WhileHeld,
    /// The turn is kept while contending and given up at the grant (shared
    /// holds: an `RwLock` side, semaphore permits).
    UntilGranted,
    /// No turn: every waiter contends on its own (a fair lock's place is in
    /// Redis's queue); the turn only orders a pending undo.
    None,
    /// No turn at all, not even to settle a pending undo: this owner holds
    /// what local waiters wait for (an `RwLock` downgrade).
    Bypass,
}

/// One acquisition attempt, as the engine asks a primitive to run it.
#[derive(Clone, Copy)]
pub(crate) struct Try<'a, A> {
    /// The local hold id (the owner id, or a per-acquisition id).
    pub(crate) holder: &'a str,
    pub(crate) lease_ms: i64,
    /// The token of the hold a re-entry counts up (`None`: a fresh one).
    pub(crate) keep: Option<u64>,
    /// Whether a busy attempt may wait in a queue in Redis (no for a zero
    /// wait and for a re-entry).
    pub(crate) enqueue: bool,
    /// An earlier attempt of this acquisition left a queue entry.
    pub(crate) queued: bool,
    /// The number of this acquisition's queue entry (it names the entry
    /// and the hand-off message; see the hand-off in the [module docs](self)).
    pub(crate) number: u64,
    /// The number a new entry takes when the queued one is gone (it may
    /// have been handed over and have expired meanwhile: a late message for
    /// it must not count for the new one).
    pub(crate) next_number: u64,
    /// The client's last look found the name held by another client (or
    /// its release handed it over): a hint for the script's read order.
    pub(crate) expect_busy: bool,
    pub(crate) ask: A,
    /// A dropped guard's final release for the script to run first (see
    /// [`HoldOps::folds_release`](crate::engine::hold::HoldOps)), and where the
    /// script's answer for it goes.
    pub(crate) release: Option<(&'a Hold, &'a AtomicI64)>,
}

impl<A> Try<'_, A> {
    /// How a script of a hand-off queue is asked to wait, as its argument:
    /// '' not at all (one try), '1' by joining the queue when busy, '2'
    /// queued already by an earlier attempt (join again only if the entry
    /// is gone).
    pub(crate) fn wait_mode(&self) -> Value {
        Value::String(
            match (self.enqueue, self.queued) {
                (false, _) => "",
                (true, false) => "1",
                (true, true) => "2",
            }
            .into(),
        )
    }
}

/// What an attempt's script answered.
pub(crate) enum Reply {
    /// Acquired (or re-entered) with this fencing token. `exhausted`: the
    /// grant took what was left (a semaphore's last permit); nothing is
    /// free again before a release wakes us (broadcast), or this bound (the
    /// earliest lease end) at the latest.
    Granted {
        token: u64,
        exhausted: Option<Instant>,
    },
    /// Not now: retry at `until` at the latest (the server's bound: the
    /// holder's lease, a queue deadline), or on a wake-up. `queued`: the
    /// attempt left a queue entry that must be undone if the wait ends.
    Busy {
        until: Instant,
        queued: bool,
        /// The queue entry was gone and the attempt queued a new one, under
        /// [`Try::next_number`]: a hand-off of the old entry is stale.
        renumbered: bool,
    },
}

impl Reply {
    /// Granted with the token a script answered.
    pub(crate) fn granted(token: i64) -> Reply {
        Reply::Granted {
            token: u64::try_from(token).unwrap_or(0),
            exhausted: None,
        }
    }

    /// A busy reply with a wait bound of `ms` milliseconds from now (negative:
    /// none given; `fallback` then).
    pub(crate) fn busy_for(ms: i64, fallback: Duration) -> Reply {
        Reply::Busy {
            until: Reply::bound(ms, fallback),
            queued: false,
            renumbered: false,
        }
    }

    /// The instant `ms` milliseconds from now (negative: `fallback` from now).
    pub(crate) fn bound(ms: i64, fallback: Duration) -> Instant {
        let now = Instant::now();
        match u64::try_from(ms) {
            Ok(ms) => now + Duration::from_millis(ms.saturating_add(1)),
            Err(_) => now + fallback,
        }
    }
}

/// One name of one kind on one client: what every handle carries, and the
/// keys every kind has (its other keys come from [`Named::role`]).
#[derive(Clone)]
pub(crate) struct Named {
    pub(crate) client: Arc<ClientInner>,
    pub(crate) name: Arc<str>,
    pub(crate) kind: Kind,
    /// Whether acquisitions through this handle belong to the running
    /// [`Owner`](crate::Owner) (re-entrant) or each to itself.
    pub(crate) reentrant: bool,
    /// The hold key, as a string: also the key of the client's local slot.
    pub(crate) key: Arc<str>,
    /// The hold key.
    pub(crate) hold: Key,
    pub(crate) fence: Key,
    /// The release channel (a script argument, not a key).
    pub(crate) channel: Key,
    /// The labels of this name's metrics.
    pub(crate) labels: Labels,
    /// A restart guard of this handle's own (a Redlock node's), checked by
    /// its acquisitions' scripts in place of the client's (see
    /// [`Named::restart_guard`]).
    pub(crate) own_restart_guard: Option<Arc<RestartGuard>>,
}

impl Named {
    pub(crate) fn new(client: Arc<ClientInner>, kind: Kind, name: &str) -> Named {
        let key = keys::key(kind, Role::Hold, name);
        let labels = Labels::new(
            kind.label(),
            client.settings.metrics_lock_names.then_some(name),
        )
        .counting_losses(client.connection.clone());
        Named {
            labels,
            client,
            kind,
            reentrant: true,
            hold: Key::from(key.as_str()),
            fence: Key::from(keys::key(kind, Role::Fence, name)),
            channel: Key::from(keys::key(kind, Role::Channel, name)),
            key: Arc::from(key),
            name: Arc::from(name),
            own_restart_guard: None,
        }
    }

    /// The same name, for a handle whose every acquisition is its own owner.
    pub(crate) fn non_reentrant(&self) -> Named {
        Named {
            reentrant: false,
            ..self.clone()
        }
    }

    /// The same name, for a handle whose acquisitions' scripts check
    /// `guard` (a Redlock node's; see [`Named::restart_guard`]).
    pub(crate) fn with_restart_guard(&self, guard: Arc<RestartGuard>) -> Named {
        Named {
            own_restart_guard: Some(guard),
            ..self.clone()
        }
    }

    /// The restart guard an acquisition's script checks (the server's
    /// `LASTSAVE`, see `lua/lib/restart_guard.lua`) and that judges the server again
    /// when the script refuses: the handle's own (a Redlock node's, whose
    /// uptime the Redlock reads itself on each new connection), else the
    /// client's (which the engine also consults before each attempt on a
    /// new connection and for a handed hold).
    pub(crate) fn restart_guard(&self) -> Option<&RestartGuard> {
        self.own_restart_guard
            .as_deref()
            .or(self.client.restart_guard.as_ref())
    }

    /// The restart guard's arguments (see [`Named::restart_guard`]) for a
    /// guarded acquisition's script; `None` without a guard.
    pub(crate) fn restart_guard_args(&self) -> Option<RestartGuardArgs> {
        self.restart_guard().map(RestartGuard::script_args)
    }

    /// The owner id an acquisition through this handle runs as.
    pub(crate) fn owner_id(&self) -> Arc<str> {
        let client = self.client_inner();
        if self.reentrant {
            client.owner_id()
        } else {
            client.acquisition_owner_id()
        }
    }

    /// The key of `role` for this name.
    pub(crate) fn role(&self, role: Role) -> Key {
        Key::from(keys::key(self.kind, role, &self.name))
    }

    pub(crate) fn client_inner(&self) -> &ClientInner {
        &self.client
    }

    /// Runs a force-unlock `script` over `keys` (its arguments: the publish
    /// command, the channel and the fencing counter's TTL): deletes the name
    /// whoever holds it.
    /// `Ok(true)` if it was held.
    ///
    /// This client's holds of the name are lost from the call on, however
    /// it ends: once sent, the script may run in Redis (a reply lost, a
    /// timeout, the call dropped), and lost is the safe reading. The script
    /// answers the last fencing token issued: every local hold up to it was
    /// granted before the script ran and is lost, including one whose
    /// grant's reply is still on its way (the slot keeps the bound for holds
    /// made after this). A hold granted after it (a waiter the force-unlock
    /// woke) has a higher token and is not touched. Without the answer, every
    /// hold won by a command sent before the call ended is lost.
    pub(crate) async fn force_unlock(&self, script: &LuaScript, keys: Vec<Key>) -> Result<bool> {
        self.check_usable("lock")?;
        let client = self.client_inner();
        // The slot is this call's from its start (made if no task used the
        // name yet): an acquisition sent during the call joins it, and an
        // unknown outcome then reaches its hold too.
        let slot = client.hub.slot(&self.key, &self.channel);
        for hold in slot.holds.all() {
            // reintroduce: force-unlock-in-doubt-keeps-guards
            hold.mark_lost("force-unlocked");
        }
        // reintroduce: force-in-doubt-without-a-slot
        let mut in_doubt = ForceInDoubt(Some(slot));
        let (deleted, last): (i64, i64) = script
            .run(
                client.link(),
                &self.key,
                keys,
                ForceUnlock {
                    publish: client.hub.publish_command(),
                    channel: self.channel.clone(),
                    // For a script that hands the lock on (a fair lock's).
                    fence_ttl_ms: client.settings.fence_ttl_ms(),
                }
                .into_values(),
            )
            .await?;
        // `last` covers every hold granted before the script (the counter or
        // the server time), but for a token advanced past the clock whose
        // counter expired since: the holds alive when it was sent are lost
        // (above), whatever their token.
        if let Some(slot) = in_doubt.0.take() {
            // reintroduce: force-unlock-misses-grant-in-flight
            slot.holds.forced_through(u64::try_from(last).unwrap_or(0));
        }
        Ok(deleted == 1)
    }

    /// Whether a command may run for this name, a `what` ("lock",
    /// "semaphore"): the client is open and the name is not empty.
    pub(crate) fn check_usable(&self, what: &str) -> Result<()> {
        self.client.check_usable(&self.name, what)
    }
}

impl std::fmt::Debug for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Named")
            .field("name", &self.name)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// A force-unlock in flight: dropped before its reply (an error, the call
/// dropped), its outcome is unknown (see `LocalHolds::forced_in_doubt`).
struct ForceInDoubt(Option<crate::engine::hub::SlotRef>);

impl Drop for ForceInDoubt {
    fn drop(&mut self) {
        if let Some(slot) = &self.0 {
            // reintroduce: force-unlock-in-doubt-keeps-guards
            slot.holds.forced_in_doubt();
        }
    }
}

/// A primitive as the engine sees it: a handle on one name plus its rules.
/// Cheap to clone (background undos keep one).
pub(crate) trait Spec: Clone + Send + Sync + 'static {
    /// What one acquisition asks for: nothing, a side, a number of permits.
    type Ask: Copy + Send + Sync + 'static;
    /// What the name is, in errors ("lock", "semaphore").
    const WHAT: &'static str;
    /// Re-entrant per owner: the owner's holder id is reused, a held owner
    /// counts up, and undos are ordered before the owner's next acquisition.
    /// Otherwise every acquisition has a fresh holder id (a semaphore).
    const REENTRANT: bool;

    fn named(&self) -> &Named;
    /// Whether this handle's acquisitions re-enter: the kind is re-entrant
    /// and the handle is not a `non_reentrant()` one.
    fn reentrant(&self) -> bool {
        Self::REENTRANT && self.named().reentrant
    }
    /// Checks of the ask and the handle before anything is sent.
    fn check(&self, _ask: Self::Ask) -> Result<()> {
        Ok(())
    }
    /// The local hold id of `owner` asking `ask`: the owner id itself
    /// unless a kind says otherwise.
    fn holder(&self, owner: &Arc<str>, _ask: Self::Ask) -> Arc<str> {
        owner.clone()
    }
    /// How holds of `ask` are renewed and released.
    fn hold_ops(&self, ask: Self::Ask) -> &'static HoldOps;
    /// The local queue's policy for `owner` asking `ask`, decided before
    /// the queue (an error refuses the acquisition at once).
    fn gate(&self, _slot: &Slot, _owner: &str, _ask: Self::Ask) -> Result<Gate>;
    /// For an ask the gate lets through as [`Gate::Bypass`]: the local hold
    /// id of the owner's hold that lets it (an `RwLock` downgrade's write
    /// hold). The new hold shares that hold's owner turn.
    fn bypassing_holder(&self, _owner: &str, _ask: Self::Ask) -> Option<String> {
        None
    }
    /// How long what an attempt with lease `lease` may leave lives at most.
    fn linger(&self, lease: Duration) -> Duration {
        lease
    }
    /// Runs the acquire script once.
    fn attempt(&self, t: Try<'_, Self::Ask>) -> impl Future<Output = Result<Reply>> + Send;
    /// Removes what an attempt of `holder` may have left (a grant, a queue
    /// entry), except the acquisition with token `keep`. Idempotent.
    fn undo(
        &self,
        slot: &Slot,
        holder: &str,
        keep: Option<u64>,
    ) -> impl Future<Output = Result<()>> + Send;
}

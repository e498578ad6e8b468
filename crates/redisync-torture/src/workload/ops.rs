//! Steps over the rest of the public API: semaphore administration and
//! force-release, fencing tokens, fenced values, count-down latches,
//! leaders' campaigns and watches, the query methods, and every call on a
//! client after its shutdown. Each call goes through [`Ctx::call`]
//! (awaited, cut by a timeout, or dropped after a few polls), so every
//! operation can end every way it can.

use std::time::Duration;

use redisync::__private;
use redisync::fenced::Fenced;
use redisync::{
    Client, CountDownLatch, Leader, Lock, LockGuard, ReadLock, RwLock, Semaphore, SemaphorePermit,
    WriteLock,
};
use tokio::time::Instant;

use super::{lock_id, micros, Count, Ctx, Guard, Handles, How, Kind, Target, WAIT};
use crate::coverage::{Ending, Recorded};
use crate::history::{now_us, Access, Force, Record, Step, Work};

/// The permits a semaphore's administration may set: every total it
/// declares or sets is at most this (rule (a) then holds its holders to
/// it, whatever the order of the changes).
pub(super) const ADMIN_PERMITS: u32 = 3;

/// A count-down latch's TTL for the latch whose waiters are checked: far
/// beyond a run, so only a restart loses it.
const LATCH_TTL: Duration = Duration::from_secs(600);

/// Tokens are microseconds of the server clock: a bound this far ahead is
/// ignored by `try_lock_with_min_token`.
const FAR_AHEAD: u64 = 1 << 62;

/// Above what `advance_fencing_token` accepts (2^52).
const TOO_LARGE: u64 = (1 << 52) + 1;

/// The handles the steps of this module use besides [`Handles`]' own.
pub(crate) struct More {
    pub(super) client: Client,
    pub(super) rw_locks: Vec<RwLock>,
    pub(super) fenced: Vec<Fenced>,
    /// A semaphore whose total the tasks change (plain handle).
    pub(super) admin: Semaphore,
    /// The same, declaring [`ADMIN_PERMITS`] (set up by its acquisitions
    /// after an empty restart).
    pub(super) admin_declared: Semaphore,
    /// The latch whose waiters are checked (see [`latch_waiter`]).
    pub(super) latch: CountDownLatch,
    /// A latch with short TTLs: waiters see it expire.
    pub(super) short_latch: CountDownLatch,
}

impl More {
    pub(super) fn new(main: &Client, names: [&'static str; 3], latch: &str) -> More {
        More {
            client: main.clone(),
            rw_locks: names.iter().map(|n| main.rw_lock(n)).collect(),
            fenced: names
                .iter()
                .map(|n| main.fenced(&format!("torture:fenced:{n}")))
                .collect(),
            admin: main.semaphore(&format!("{}:adm", names[0])),
            admin_declared: main
                .semaphore(&format!("{}:adm", names[0]))
                .with_permits(ADMIN_PERMITS),
            latch: main.count_down_latch(latch),
            short_latch: main.count_down_latch(&format!("{latch}:short")),
        }
    }
}

impl Ctx {
    /// A call cut by the workload's deadline `wait` when it would be
    /// awaited: for methods that wait without a bound (`lock`, `campaign`,
    /// `wait`).
    fn bounded(how: How, wait: Duration) -> How {
        match how {
            How::Await => How::Timeout(wait),
            other => other,
        }
    }
}

/// The forms of acquisition besides `try_lock`/`try_acquire` (30 % of
/// acquisitions with a wait): `lock`, `lock_with_lease`,
/// `try_lock_with_min_token`, `acquire`, `acquire_with_lease`,
/// `try_acquire_with_lease`. The forms without a wait are cut by the
/// workload's deadline `wait` (a timeout, not a busy answer).
pub(super) async fn acquire_form(
    ctx: &mut Ctx,
    target: &Target,
    how: How,
    wait: Duration,
    lease: Option<Duration>,
) -> Option<Result<Option<Guard>, super::Failed>> {
    let bounded = Ctx::bounded(how, wait);
    let form = ctx.rng.below(3);
    // The lease asked for decides between `lock` (the watchdog's) and
    // `lock_with_lease`: the section believes in that lease.
    match (target, form, lease) {
        (Target::Lock(l), 2, _) => {
            let min = min_token(ctx, l.name());
            let asked = async {
                __private::try_lock_with_min_token(l, wait, lease, min)
                    .await
                    .map(|g| g.map(Guard::Lock))
                    .map_err(|e| super::Failed::of(&e))
            };
            ctx.call("Lock::try_lock_with_min_token", how, asked).await
        }
        (Target::Lock(l), _, None) => {
            ctx.call("Lock::lock", bounded, guard(l.lock(), Guard::Lock))
                .await
        }
        (Target::Lock(l), _, Some(d)) => {
            let asked = guard(l.lock_with_lease(d), Guard::Lock);
            ctx.call("Lock::lock_with_lease", bounded, asked).await
        }
        (Target::Fair(l), _, Some(d)) => {
            let asked = guard(l.lock_with_lease(d), Guard::Fair);
            ctx.call("FairLock::lock_with_lease", bounded, asked).await
        }
        (Target::Fair(l), _, None) => {
            ctx.call("FairLock::lock", bounded, guard(l.lock(), Guard::Fair))
                .await
        }
        (Target::Read(l), _, Some(d)) => {
            let asked = guard(l.lock_with_lease(d), Guard::Rw);
            ctx.call("ReadLock::lock_with_lease", bounded, asked).await
        }
        (Target::Read(l), _, None) => {
            ctx.call("ReadLock::lock", bounded, guard(l.lock(), Guard::Rw))
                .await
        }
        (Target::Write(l), _, Some(d)) => {
            let asked = guard(l.lock_with_lease(d), Guard::Rw);
            ctx.call("WriteLock::lock_with_lease", bounded, asked).await
        }
        (Target::Write(l), _, None) => {
            ctx.call("WriteLock::lock", bounded, guard(l.lock(), Guard::Rw))
                .await
        }
        (Target::Semaphore(s, n), 0, _) | (Target::Semaphore(s, n), _, None) => {
            let asked = guard(s.acquire(*n), Guard::Semaphore);
            ctx.call("Semaphore::acquire", bounded, asked).await
        }
        (Target::Semaphore(s, n), 1, Some(d)) => {
            let asked = guard(s.acquire_with_lease(*n, d), Guard::Semaphore);
            ctx.call("Semaphore::acquire_with_lease", bounded, asked)
                .await
        }
        (Target::Semaphore(s, n), _, Some(d)) => {
            let asked = async {
                s.try_acquire_with_lease(*n, wait, d)
                    .await
                    .map(|g| g.map(Guard::Semaphore))
                    .map_err(|e| super::Failed::of(&e))
            };
            ctx.call("Semaphore::try_acquire_with_lease", how, asked)
                .await
        }
        (Target::Multi(_) | Target::Redlock(_), _, _) => {
            let op = target.op();
            ctx.call(op, how, target.acquire(wait, lease)).await
        }
    }
}

/// A method that waits without a bound, as `try_lock` answers.
async fn guard<G>(
    asked: impl std::future::Future<Output = redisync::Result<G>>,
    into: impl FnOnce(G) -> Guard,
) -> Result<Option<Guard>, super::Failed> {
    asked
        .await
        .map(|g| Some(into(g)))
        .map_err(|e| super::Failed::of(&e))
}

/// A lower bound for a token of the `Lock` `name`: none, just above the
/// newest token this process saw of it (at most a millisecond), or far
/// ahead (ignored). Not further, nor from another lock (another server's
/// clock): a bound up to a second ahead of the server's clock is honoured,
/// and a token ahead of the clock is undercut by the clock's tokens after
/// a restart that lost the counter (the limit, in docs/guarantees.md, of a
/// clock that steps back around a data loss).
fn min_token(ctx: &mut Ctx, name: &str) -> u64 {
    match ctx.rng.below(3) {
        0 => 0,
        1 => ctx.stats.newest_token(&lock_id(Kind::Lock, name)) + 1 + ctx.rng.below(1000),
        _ => FAR_AHEAD,
    }
}

/// `advance_fencing_token` of a `Lock` name: to just above the newest
/// token this process saw of it (see [`min_token`]), or above what it
/// accepts (an error). The counter it returns is at least what was asked.
pub(super) async fn advance(ctx: &mut Ctx, name: &str, lock: &Lock) {
    let to = if ctx.chance(10) {
        TOO_LARGE
    } else {
        ctx.stats.newest_token(&lock_id(Kind::Lock, name)) + 1 + ctx.rng.below(1000)
    };
    let how = ctx.how(30);
    let advanced = __private::advance_fencing_token(lock, to);
    match ctx.call("Lock::advance_fencing_token", how, advanced).await {
        Some(Ok(counter)) if to != TOO_LARGE && counter < to => ctx.stats.violation(&format!(
            "{}: advance_fencing_token({to}) of {name:?} answered {counter}, below what it was asked",
            ctx.client
        )),
        Some(Ok(_)) if to == TOO_LARGE => ctx.stats.violation(&format!(
            "{}: advance_fencing_token({to}) of {name:?} was accepted above 2^52",
            ctx.client
        )),
        _ => {}
    }
}

/// Force-unlocks a `FairLock` or a read-write lock (whoever holds it) and
/// records it as [`Force`] (the checker excuses its holders while they may
/// not know).
pub(super) async fn force_other(ctx: &mut Ctx, kind: Kind, name: &str, h: &Handles, i: usize) {
    ctx.stats.forcing(&lock_id(kind, name));
    let asked_us = now_us();
    let how = ctx.how(50);
    let result = match kind {
        Kind::FairLock => {
            let forced = h.fair[i].force_unlock();
            ctx.call("FairLock::force_unlock", how, forced).await
        }
        _ if ctx.chance(50) => {
            let forced = h.rw[i].0.force_unlock();
            ctx.call("ReadLock::force_unlock", how, forced).await
        }
        _ => {
            let forced = h.rw[i].1.force_unlock();
            ctx.call("WriteLock::force_unlock", how, forced).await
        }
    };
    let _ = ctx.sink.send(Record::Force(Force {
        lock: lock_id(kind, name),
        client: ctx.client.clone(),
        asked_us,
        done_us: now_us(),
        ok: matches!(result, Some(Ok(_))),
    }));
}

/// The query methods of the primitives and the client (10 % of sections
/// ask one while they hold, and some steps between sections): whatever
/// they answer, they must answer.
pub(super) async fn query(ctx: &mut Ctx, h: &Handles, i: usize) {
    let how = ctx.how(40);
    let m = &h.more;
    let name = h.names[i];
    match ctx.rng.below(32) {
        0 => drop(
            ctx.call("Lock::is_locked", how, h.locks[i].is_locked())
                .await,
        ),
        1 => {
            let asked = h.locks[i].is_held_by_current_task();
            drop(ctx.call("Lock::is_held_by_current_task", how, asked).await);
        }
        2 => drop(
            ctx.call("Lock::hold_count", how, h.locks[i].hold_count())
                .await,
        ),
        3 => {
            let asked = h.locks[i].remaining_lease();
            drop(ctx.call("Lock::remaining_lease", how, asked).await);
        }
        4 => drop(ctx.call("Lock::inspect", how, h.locks[i].inspect()).await),
        5 => drop(
            ctx.call("FairLock::is_locked", how, h.fair[i].is_locked())
                .await,
        ),
        6 => {
            let asked = h.fair[i].is_held_by_current_task();
            drop(
                ctx.call("FairLock::is_held_by_current_task", how, asked)
                    .await,
            );
        }
        7 => drop(
            ctx.call("FairLock::hold_count", how, h.fair[i].hold_count())
                .await,
        ),
        8 => {
            let asked = h.fair[i].remaining_lease();
            drop(ctx.call("FairLock::remaining_lease", how, asked).await);
        }
        9 => drop(
            ctx.call("FairLock::inspect", how, h.fair[i].inspect())
                .await,
        ),
        10 | 24..=26 => rw_query(ctx, how, &h.rw[i].0).await,
        11 | 27..=29 => rw_query_write(ctx, how, &h.rw[i].1).await,
        13 => {
            let asked = h.semaphores[i].available_permits();
            drop(ctx.call("Semaphore::available_permits", how, asked).await);
        }
        14 => drop(
            ctx.call("Semaphore::inspect", how, h.semaphores[i].inspect())
                .await,
        ),
        15 => drop(
            ctx.call("Client::inspect", how, m.client.inspect(name))
                .await,
        ),
        16 => drop(
            ctx.call("Client::list", how, m.client.list("torture:*"))
                .await,
        ),
        17 | 30 | 31 => {
            let asked = __private::server_uptime(&m.client);
            drop(ctx.call("Client::server_uptime", how, asked).await);
        }
        18 => drop(
            ctx.call("CountDownLatch::count", how, m.latch.count())
                .await,
        ),
        19 => drop(
            ctx.call("CountDownLatch::inspect", how, m.latch.inspect())
                .await,
        ),
        20 => {
            let l = &h.leaders[i % h.leaders.len()];
            if let Some(Ok(info)) = ctx.call("Leader::current", how, l.current()).await {
                term_existed(ctx, l.name(), info.as_ref());
            }
        }
        21 => {
            let asked = m.admin.available_permits();
            drop(ctx.call("Semaphore::available_permits", how, asked).await);
        }
        22 => drop(ctx.call("Fenced::read", how, m.fenced[i].read()).await),
        _ => drop(
            ctx.call("RwLock::inspect", how, m.rw_locks[i].inspect())
                .await,
        ),
    }
}

/// A query of the lock a section holds, through the handle it took it
/// with.
pub(super) async fn query_held(ctx: &mut Ctx, target: &Target) {
    let how = ctx.how(30);
    let m = ctx.rng.below(5);
    match target {
        Target::Lock(l) => match m {
            0 => drop(ctx.call("Lock::is_locked", how, l.is_locked()).await),
            1 => {
                let asked = l.is_held_by_current_task();
                drop(ctx.call("Lock::is_held_by_current_task", how, asked).await);
            }
            2 => drop(ctx.call("Lock::hold_count", how, l.hold_count()).await),
            3 => drop(
                ctx.call("Lock::remaining_lease", how, l.remaining_lease())
                    .await,
            ),
            _ => drop(ctx.call("Lock::inspect", how, l.inspect()).await),
        },
        Target::Fair(l) => match m {
            0 => drop(ctx.call("FairLock::is_locked", how, l.is_locked()).await),
            1 => {
                let asked = l.is_held_by_current_task();
                drop(
                    ctx.call("FairLock::is_held_by_current_task", how, asked)
                        .await,
                );
            }
            2 => drop(ctx.call("FairLock::hold_count", how, l.hold_count()).await),
            3 => {
                let asked = l.remaining_lease();
                drop(ctx.call("FairLock::remaining_lease", how, asked).await);
            }
            _ => drop(ctx.call("FairLock::inspect", how, l.inspect()).await),
        },
        Target::Read(l) => rw_query(ctx, how, l).await,
        Target::Write(l) => rw_query_write(ctx, how, l).await,
        Target::Semaphore(s, _) => {
            let asked = s.available_permits();
            drop(ctx.call("Semaphore::available_permits", how, asked).await);
        }
        Target::Multi(_) | Target::Redlock(_) => {}
    }
}

async fn rw_query(ctx: &mut Ctx, how: How, l: &ReadLock) {
    match ctx.rng.below(4) {
        0 => drop(ctx.call("ReadLock::is_locked", how, l.is_locked()).await),
        1 => {
            let asked = l.is_held_by_current_task();
            drop(
                ctx.call("ReadLock::is_held_by_current_task", how, asked)
                    .await,
            );
        }
        2 => drop(ctx.call("ReadLock::hold_count", how, l.hold_count()).await),
        _ => drop(
            ctx.call("ReadLock::remaining_lease", how, l.remaining_lease())
                .await,
        ),
    }
}

async fn rw_query_write(ctx: &mut Ctx, how: How, l: &WriteLock) {
    match ctx.rng.below(4) {
        0 => drop(ctx.call("WriteLock::is_locked", how, l.is_locked()).await),
        1 => {
            let asked = l.is_held_by_current_task();
            drop(
                ctx.call("WriteLock::is_held_by_current_task", how, asked)
                    .await,
            );
        }
        2 => drop(ctx.call("WriteLock::hold_count", how, l.hold_count()).await),
        _ => drop(
            ctx.call("WriteLock::remaining_lease", how, l.remaining_lease())
                .await,
        ),
    }
}

/// A fenced value written, claimed or read under the task's hold of a
/// `Lock` or `FairLock` (`g`, token `token`). A refusal must name a newer
/// token than the writer's: the script accepts its own token again.
pub(super) async fn fenced(ctx: &mut Ctx, f: &Fenced, g: &Guard) {
    let token = g.token();
    let how = ctx.how(40);
    let value = format!("{}@{token}", ctx.client);
    let refused = match (ctx.rng.below(5), g) {
        (0, Guard::Lock(g)) => {
            let w = f.write(g, &value);
            written(ctx.call("Fenced::write", how, w).await.as_ref())
        }
        (0, Guard::Fair(g)) => {
            let w = f.write(g, &value);
            written(ctx.call("Fenced::write", how, w).await.as_ref())
        }
        (0 | 1, _) => {
            let w = f.write_with_token(token, &value);
            written(ctx.call("Fenced::write_with_token", how, w).await.as_ref())
        }
        (2, Guard::Lock(g)) => claimed(ctx.call("Fenced::claim", how, f.claim(g)).await.as_ref()),
        (2, Guard::Fair(g)) => claimed(ctx.call("Fenced::claim", how, f.claim(g)).await.as_ref()),
        (2 | 3, _) => {
            let c = f.claim_with_token(token);
            claimed(ctx.call("Fenced::claim_with_token", how, c).await.as_ref())
        }
        _ => {
            drop(ctx.call("Fenced::read", how, f.read()).await);
            None
        }
    };
    if let Some(newest) = refused.filter(|&n| n <= token) {
        ctx.stats.violation(&format!(
            "{}: fenced value {:?} refused token {token} for an older or equal newest token {newest}",
            ctx.client,
            f.key()
        ));
    }
}

fn written(w: Option<&redisync::Result<redisync::fenced::FencedWrite>>) -> Option<u64> {
    match w {
        Some(Ok(redisync::fenced::FencedWrite::Stale { newest })) => Some(*newest),
        _ => None,
    }
}

fn claimed(c: Option<&redisync::Result<redisync::fenced::FencedClaim>>) -> Option<u64> {
    match c {
        Some(Ok(redisync::fenced::FencedClaim::Stale { newest })) => Some(*newest),
        _ => None,
    }
}

/// A step on the semaphore whose total the tasks change (25 % of the
/// semaphore family's steps): a section of one permit (taken through the
/// handle declaring the total, as after an empty restart), `set_permits`,
/// `try_set_permits`, `add_permits(-1)`, `force_release` by a task that
/// holds no permit, or a query. Totals stay at most [`ADMIN_PERMITS`]
/// (rule (a) holds every section to that); a total lowered below what is
/// in use leaves the holders their permits.
pub(super) async fn semaphore_admin(ctx: &mut Ctx, h: &Handles) {
    let m = &h.more;
    let how = ctx.how(30);
    let n = u32::try_from(1 + ctx.rng.below(u64::from(ADMIN_PERMITS))).unwrap_or(1);
    match ctx.rng.below(10) {
        0..=3 => admin_section(ctx, h).await,
        4 => drop(
            ctx.call("Semaphore::set_permits", how, m.admin.set_permits(n))
                .await,
        ),
        5 => {
            let set = m.admin.try_set_permits(n);
            drop(ctx.call("Semaphore::try_set_permits", how, set).await);
        }
        6 | 7 => drop(
            ctx.call("Semaphore::add_permits", how, m.admin.add_permits(-1))
                .await,
        ),
        8 => force_release(ctx, &m.admin, None).await,
        _ => drop(ctx.call("Semaphore::inspect", how, m.admin.inspect()).await),
    }
}

/// One permit of the administered semaphore, held a while; 20 % of the
/// time the holder force-releases it (through its own client: its permit
/// must say lost as soon as the call returns `Ok`).
async fn admin_section(ctx: &mut Ctx, h: &Handles) {
    let m = &h.more;
    let kind = Kind::Semaphore;
    let lease = ctx.lease();
    let requested_us = now_us();
    let target = Target::Semaphore(m.admin_declared.clone(), 1);
    let g = match super::acquire(ctx, kind, &target, lease).await {
        super::Got::Guard(g) => g,
        super::Got::Busy | super::Got::Cancelled => return,
        super::Got::Failed(f) => return super::failed(ctx, kind, &f).await,
    };
    let mut rec = ctx.open(
        kind,
        m.admin.name(),
        Access::Permits {
            held: 1,
            of: ADMIN_PERMITS,
        },
        g.token(),
        requested_us,
        // The watchdog's lease bounds a fixed one (`acquire` takes the
        // watchdog's whatever was planned).
        ctx.settings.lease,
    );
    let d = ctx.hold_time();
    let g = match (ctx.chance(25), g) {
        (true, Guard::Semaphore(permit)) => {
            return detached_section(ctx, &m.admin, rec, permit, d).await
        }
        (_, g) => g,
    };
    ctx.hold(&mut [&mut rec], d, &|_| !g.is_lost()).await;
    if ctx.chance(20) {
        force_release(ctx, &m.admin, Some(&g)).await;
        wait_lost(ctx, &g).await;
    }
    ctx.close(rec, || !g.is_lost());
    let how = super::let_go_how(ctx);
    super::let_go(ctx, kind, vec![g], how).await;
}

/// The rest of an admin section held by permit id: the permit leaves its
/// guard ([`SemaphorePermit::detach`]); the holder keeps it with
/// `extend_permit` and gives it back with `release_permit` (through
/// another handle: any handle of the name may). The section is valid
/// until the lease the guard had left at the detach, or the last
/// extension known to have run, ends by this client's clock (an extension
/// whose outcome is unknown counts as not run).
async fn detached_section(
    ctx: &mut Ctx,
    by: &Semaphore,
    mut rec: super::Rec,
    permit: SemaphorePermit,
    hold_for: Duration,
) {
    let mut valid_until = Instant::now() + redisync::Guard::validity(&permit);
    let id = permit.detach();
    let end = Instant::now() + hold_for;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        let until = valid_until;
        let chunk = left.min(
            until
                .saturating_duration_since(Instant::now())
                .div_f64(3.0)
                .max(Duration::from_millis(2)),
        );
        ctx.hold(&mut [&mut rec], chunk, &|_| Instant::now() < until)
            .await;
        if left.is_zero() {
            break;
        }
        let lease = ctx.extend_lease(Duration::MAX);
        let how = ctx.how(15);
        let sent_at = Instant::now();
        let asked = by.extend_permit(&id, lease);
        match ctx.call("Semaphore::extend_permit", how, asked).await {
            Some(Ok(())) => {
                valid_until = valid_until.max(sent_at + lease);
                rec.section.lease_us = rec.section.lease_us.max(micros(lease));
                ctx.stats.bump(Kind::Semaphore, Count::Extended);
            }
            // Gone (its lease ended): the holder carries on to its
            // planned end, as a guard's does, and the looks say lost.
            Some(Err(redisync::Error::NotHeld { .. })) => valid_until = sent_at,
            _ => {}
        }
    }
    let until = valid_until;
    ctx.close(rec, || Instant::now() < until);
    let how = ctx.how(30);
    // Any ending: one whose outcome is unknown leaves the permit to its
    // lease, which no section counts.
    drop(
        ctx.call("Semaphore::release_permit", how, by.release_permit(&id))
            .await,
    );
}

/// `force_release` of `s`, recorded as [`Force`]; `own`: a permit of this
/// client, which must say lost once the call returned `Ok`.
async fn force_release(ctx: &mut Ctx, s: &Semaphore, own: Option<&Guard>) {
    ctx.stats.forcing(&lock_id(Kind::Semaphore, s.name()));
    let asked_us = now_us();
    let how = ctx.how(30);
    let result = ctx
        .call("Semaphore::force_release", how, s.force_release())
        .await;
    let ok = matches!(result, Some(Ok(_)));
    let _ = ctx.sink.send(Record::Force(Force {
        lock: lock_id(Kind::Semaphore, s.name()),
        client: ctx.client.clone(),
        asked_us,
        done_us: now_us(),
        ok,
    }));
    if let (true, Some(g)) = (ok, own) {
        if !g.is_lost() {
            ctx.stats.violation(&format!(
                "{}: a permit of {:?} (token {}) still said held after this client's force_release returned",
                ctx.client,
                s.name(),
                g.token()
            ));
        }
    }
}

/// Waits a moment for `g` to say lost (mostly it does not: a timeout; at
/// once after a force or a lost lease), or drops the wait after a few
/// polls.
pub(super) async fn wait_lost(ctx: &mut Ctx, g: &Guard) {
    let Some(op) = g.lost_op() else {
        return;
    };
    let how = if ctx.chance(20) {
        How::Drop(1 + ctx.rng.below(6))
    } else {
        How::Timeout(super::LOOK_EVERY)
    };
    let _ = ctx.call(op, how, g.lost()).await;
}

/// `extend` of a semaphore permit while it is held (the section's lease
/// grows with it).
pub(super) async fn extend_permit(ctx: &mut Ctx, rec_lease_us: &mut u64, g: &Guard) {
    let ext = ctx.extend_lease(Duration::MAX);
    *rec_lease_us = (*rec_lease_us).max(micros(ext));
    if super::extend(ctx, g, ext).await {
        ctx.stats.bump(Kind::Semaphore, Count::Extended);
    }
}

/// A step of a latch task: set the count (15 %), count down (40 %), wait
/// and check the wait (30 %), read the count (8 %), or a latch with a
/// short TTL that its waiter sees expire (7 %).
pub(super) async fn latch(ctx: &mut Ctx, h: &Handles) {
    let m = &h.more;
    let roll = ctx.rng.below(100);
    if roll < 15 {
        let n = 1 + ctx.rng.below(3);
        let how = ctx.how(30);
        let set = m.latch.try_set_count(n, LATCH_TTL);
        drop(ctx.call("CountDownLatch::try_set_count", how, set).await);
    } else if roll < 55 {
        count_down(ctx, &m.latch).await;
    } else if roll < 85 {
        latch_waiter(ctx, h).await;
    } else if roll < 93 {
        let how = ctx.how(40);
        if ctx.chance(50) {
            drop(
                ctx.call("CountDownLatch::count", how, m.latch.count())
                    .await,
            );
        } else {
            drop(
                ctx.call("CountDownLatch::inspect", how, m.latch.inspect())
                    .await,
            );
        }
    } else {
        short_latch(ctx, &m.short_latch).await;
    }
    let pause = 5 + ctx.rng.below(40);
    tokio::time::sleep(Duration::from_millis(pause)).await;
}

/// The members that count down [`latch_waiter`]'s latch, and `plain`
/// for its count-downs without a member: the keys of their count-downs
/// (`<latch>#<member>`) in the stats.
const COUNTERS: [&str; 4] = ["plain", "m0", "m1", "m2"];

/// Counts `latch` down (half the time as one of three members, which
/// count once per phase), counted as started before it is sent and as
/// answered once it replied, for the latch and for its member (or
/// `plain`): what [`latch_waiter`] checks against.
async fn count_down(ctx: &mut Ctx, latch: &CountDownLatch) {
    let member = if ctx.chance(50) {
        match ctx.rng.below(3) {
            0 => COUNTERS[1],
            1 => COUNTERS[2],
            _ => COUNTERS[3],
        }
    } else {
        COUNTERS[0]
    };
    let by = format!("{}#{member}", latch.name());
    ctx.stats.count_down_started(latch.name());
    ctx.stats.count_down_started(&by);
    let how = ctx.how(30);
    let answered = if member == COUNTERS[0] {
        let counted = latch.count_down();
        let counted = ctx.call("CountDownLatch::count_down", how, counted);
        matches!(counted.await, Some(Ok(_)))
    } else {
        let counted = latch.count_down_as(member);
        let counted = ctx.call("CountDownLatch::count_down_as", how, counted);
        matches!(counted.await, Some(Ok(_)))
    };
    if answered {
        ctx.stats.count_down_answered(latch.name());
        ctx.stats.count_down_answered(&by);
    }
}

/// Reads the count `c` of the latch, waits for it (`wait` under the
/// workload's deadline, or `wait_timeout`), and, when it says open, checks
/// that at least `c` count-downs could have reached the latch since the
/// read: the plain ones started by now minus those answered before the
/// read (a count-down answered before the read counted before it), and
/// one per member with a count-down started by now and not answered
/// before the read (a member counts once per phase, however often it
/// counts down: the latch never opens with a member missing). A restart of
/// the server in between (its uptime went back) may lose the latch, which
/// then reads as open: no check.
async fn latch_waiter(ctx: &mut Ctx, h: &Handles) {
    let m = &h.more;
    let latch = &m.latch;
    let Some((up0, t0)) = uptime(ctx, &m.client).await else {
        return;
    };
    let by = COUNTERS.map(|k| format!("{}#{k}", latch.name()));
    let answered0 = by.clone().map(|k| ctx.stats.count_downs(&k).1);
    let counted = ctx.call("CountDownLatch::count", How::Await, latch.count());
    let Some(Ok(c)) = counted.await else {
        return;
    };
    let how = ctx.how(30);
    let opened = if ctx.chance(50) {
        let d = Duration::from_millis(50 + ctx.rng.below(1500));
        let waited = latch.wait_timeout(d);
        matches!(
            ctx.call("CountDownLatch::wait_timeout", how, waited).await,
            Some(Ok(true))
        )
    } else {
        let how = Ctx::bounded(how, WAIT);
        let waited = latch.wait();
        matches!(
            ctx.call("CountDownLatch::wait", how, waited).await,
            Some(Ok(()))
        )
    };
    if !opened || c == 0 {
        return;
    }
    let started = by.clone().map(|k| ctx.stats.count_downs(&k).0);
    let members = (1..COUNTERS.len())
        .filter(|&i| started[i] > answered0[i])
        .count() as u64;
    let could = started[0].saturating_sub(answered0[0]) + members;
    if could >= c {
        return;
    }
    if restarted(ctx, &m.client, up0, t0).await != Some(false) {
        return;
    }
    ctx.stats.violation(&format!(
        "{}: a waiter saw latch {:?} open after at most {could} count-downs (plain, or of distinct members) since it read a count of {c}",
        ctx.client,
        latch.name(),
    ));
}

/// The server's uptime, and when it was read (after its answer); `None`
/// when it failed or is too young to tell a restart by (whole seconds).
async fn uptime(ctx: &mut Ctx, client: &Client) -> Option<(Duration, Instant)> {
    let up = ctx.call(
        "Client::server_uptime",
        How::Await,
        __private::server_uptime(client),
    );
    match up.await {
        Some(Ok(up)) if up >= Duration::from_secs(2) => Some((up, Instant::now())),
        _ => None,
    }
}

/// Whether the server of `target` (a `Lock` or `FairLock`) may have lost
/// a hold a guard still believes in: it restarted within the longest lease
/// (or its uptime cannot be read).
pub(super) async fn lost_data(ctx: &mut Ctx, target: &Target) -> bool {
    let client = match target {
        Target::Lock(l) => l.client().clone(),
        Target::Fair(l) => l.client().clone(),
        _ => return true,
    };
    let up = ctx.call(
        "Client::server_uptime",
        How::Await,
        __private::server_uptime(&client),
    );
    !matches!(up.await, Some(Ok(up)) if up > ctx.settings.max_lease() + Duration::from_secs(1))
}

/// Whether the server restarted since it said `up0` at `t0`: its uptime
/// now (asked after this moment) is below `up0` plus the time since, less
/// a second of rounding. `None`: unknown.
async fn restarted(ctx: &mut Ctx, client: &Client, up0: Duration, t0: Instant) -> Option<bool> {
    let since = t0.elapsed();
    let up = ctx.call(
        "Client::server_uptime",
        How::Await,
        __private::server_uptime(client),
    );
    let Some(Ok(up1)) = up.await else {
        return None;
    };
    Some(up1 + Duration::from_secs(1) < up0 + since)
}

/// A latch set with a short TTL (0.3-0.9 s), waited for: mostly it
/// expires before anyone counts it down, and the waiter is told.
async fn short_latch(ctx: &mut Ctx, latch: &CountDownLatch) {
    let ttl = Duration::from_millis(300 + ctx.rng.below(600));
    let n = 1 + ctx.rng.below(2);
    let set = latch.try_set_count(n, ttl);
    drop(
        ctx.call("CountDownLatch::try_set_count", How::Await, set)
            .await,
    );
    if ctx.chance(30) {
        count_down(ctx, latch).await;
    }
    let how = Ctx::bounded(ctx.how(30), WAIT);
    drop(ctx.call("CountDownLatch::wait", how, latch.wait()).await);
}

/// A leader step besides `run` (half of them): a campaign (`campaign`
/// under the workload's deadline, or `try_campaign`) whose leadership
/// records steps as a job would (the checker derives its section: two
/// leaders at once are an (a) overlap), publishes another identity now and
/// then, waits a little for `lost`, and ends by `resign` or a drop; or a
/// watch of the election.
pub(super) async fn leader_step(ctx: &mut Ctx, name: &str, leader: &Leader, h: &Handles) {
    if ctx.chance(30) {
        return watch(ctx, leader, &h.more.client).await;
    }
    let kind = Kind::Leader;
    let how = ctx.how(30);
    let requested_us = now_us();
    let won = if ctx.chance(50) {
        let wait = Duration::from_millis(ctx.rng.below(1500));
        let asked = leader.try_campaign(wait);
        match ctx.call("Leader::try_campaign", how, asked).await {
            Some(Ok(won)) => won,
            Some(Err(e)) => return ctx.stats.error(kind, &e.to_string()),
            None => None,
        }
    } else {
        let how = Ctx::bounded(how, WAIT);
        match ctx.call("Leader::campaign", how, leader.campaign()).await {
            Some(Ok(won)) => Some(won),
            Some(Err(e)) => return ctx.stats.error(kind, &e.to_string()),
            None => None,
        }
    };
    let Some(lead) = won else {
        return;
    };
    ctx.stats.bump(kind, Count::Acquired);
    let mut work = Work {
        lock: lock_id(kind, name),
        kind,
        client: ctx.client.clone(),
        token: lead.token(),
        lease_us: micros(ctx.settings.lease),
        requested_us,
        steps: Vec::new(),
    };
    let until = Instant::now() + ctx.hold_time();
    // As `run` does: a step only while the lead is not known lost.
    while !lead.is_lost() {
        work.steps.push(Step {
            at_us: now_us(),
            left_us: None,
        });
        if Instant::now() >= until {
            break;
        }
        if ctx.chance(3) {
            let how = ctx.how(30);
            // Names its term: a watch must report it with that token.
            let identity = format!("{}@{}", ctx.client, work.token);
            let set = lead.set_identity(&identity);
            drop(ctx.call("Leadership::set_identity", how, set).await);
        }
        if ctx.chance(10) {
            let how = if ctx.chance(20) {
                How::Drop(1 + ctx.rng.below(6))
            } else {
                How::Timeout(super::LOOK_EVERY)
            };
            let _ = ctx.call("Leadership::lost", how, lead.lost()).await;
        } else {
            tokio::time::sleep(super::LOOK_EVERY).await;
        }
    }
    if !work.steps.is_empty() {
        let _ = ctx.sink.send(Record::Work(work));
    }
    if ctx.chance(60) {
        let how = ctx.how(30);
        drop(ctx.call("Leadership::resign", how, lead.resign()).await);
    }
}

/// A watch of an election for a while: the terms it reports never go
/// back (a token below one it reported before), unless the server
/// restarted meanwhile (an older snapshot brings an older term back), and
/// each is one that existed: an identity set by a leadership (it names
/// its token, see [`leader_step`]) comes with that token.
async fn watch(ctx: &mut Ctx, leader: &Leader, client: &Client) {
    let since = uptime(ctx, client).await;
    let how = ctx.how(30);
    let Some(Ok(mut w)) = ctx.call("Leader::watch", how, leader.watch()).await else {
        return;
    };
    term_existed(ctx, leader.name(), w.current().as_ref());
    let mut newest = w.current().and_then(|i| i.token);
    let mut went_back = None;
    for _ in 0..=ctx.rng.below(4) {
        let how = if ctx.chance(15) {
            How::Drop(1 + ctx.rng.below(6))
        } else {
            How::Timeout(Duration::from_millis(20 + ctx.rng.below(400)))
        };
        match ctx.call("LeaderWatch::changed", how, w.changed()).await {
            Some(Ok(info)) => {
                term_existed(ctx, leader.name(), info.as_ref());
                let token = info.and_then(|i| i.token);
                if let (Some(before), Some(now)) = (newest, token) {
                    if now < before {
                        went_back = went_back.or(Some((before, now)));
                    }
                }
                newest = newest.max(token);
            }
            Some(Err(_)) => break,
            None => {}
        }
    }
    let Some((before, now)) = went_back else {
        return;
    };
    let Some((up0, t0)) = since else {
        return;
    };
    if restarted(ctx, client, up0, t0).await == Some(false) {
        ctx.stats.violation(&format!(
            "{}: a watch of {:?} reported term {now} after term {before} (no restart between)",
            ctx.client,
            leader.name()
        ));
    }
}

/// The calls of a read-write lock's side (`$ty`) after shutdown.
macro_rules! side_calls {
    ($ty:literal, $l:expr, $d:expr) => {
        [
            (
                concat!($ty, "::lock"),
                Box::pin(shut($l.lock())) as Pending<'_>,
            ),
            (
                concat!($ty, "::lock_with_lease"),
                Box::pin(shut($l.lock_with_lease($d))),
            ),
            (
                concat!($ty, "::try_lock"),
                Box::pin(shut($l.try_lock($d, None))),
            ),
            (concat!($ty, "::is_locked"), Box::pin(shut($l.is_locked()))),
            (
                concat!($ty, "::is_held_by_current_task"),
                Box::pin(shut($l.is_held_by_current_task())),
            ),
            (
                concat!($ty, "::hold_count"),
                Box::pin(shut($l.hold_count())),
            ),
            (
                concat!($ty, "::remaining_lease"),
                Box::pin(shut($l.remaining_lease())),
            ),
            (
                concat!($ty, "::force_unlock"),
                Box::pin(shut($l.force_unlock())),
            ),
        ]
    };
}

/// A term reported by a watch or `Leader::current`: an identity that
/// names a token (`<client>@<token>`, set by [`leader_step`]) comes with
/// that token, or the report mixes two terms.
fn term_existed(ctx: &Ctx, election: &str, info: Option<&redisync::leader::LeaderInfo>) {
    let Some(info) = info else {
        return;
    };
    let named = info
        .identity
        .as_deref()
        .and_then(|i| i.rsplit_once('@'))
        .and_then(|(_, t)| t.parse::<u64>().ok());
    if let (Some(named), Some(token)) = (named, info.token) {
        if named != token {
            ctx.stats.violation(&format!(
                "{}: {election:?} reported a term that did not exist: identity {:?} (set by the leadership of token {named}) with token {token}",
                ctx.client, info.identity
            ));
        }
    }
}

/// Every call on a client after its `shutdown` returns
/// `Error::Shutdown` at once (within a second; `Leadership::lost` answers,
/// `Client::shutdown` again does nothing): the handles of the fresh
/// client, and its guards of every kind.
#[allow(clippy::too_many_lines, reason = "one list of every call")]
pub(super) async fn after_shutdown(ctx: &mut Ctx, client: &Client, held: Held) {
    let Held {
        lock: lock_guard,
        others,
        lead,
        watch,
        connection,
    } = held;
    let name = format!("torture:shutdown:{}", ctx.client);
    let lock = client.lock(&name);
    let fair = client.fair_lock(&name);
    let rw = client.rw_lock(&name);
    let sem = client.semaphore(&name).with_permits(1);
    let latch = client.count_down_latch(&name);
    let leader = client.leader(&name);
    let fenced = client.fenced(&name);
    let (read, write) = (rw.read(), rw.write());
    let d = Duration::from_millis(100);
    // Any id: a closed client refuses before it looks.
    let permit_id: redisync::PermitId = format!("1/{}:shut:1#1", client.id())
        .parse()
        .unwrap_or_else(|e| unreachable!("a well-formed permit id: {e}"));
    let mut calls: Vec<(&'static str, Pending<'_>)> = vec![
        ("Lock::lock", Box::pin(shut(lock.lock()))),
        (
            "Lock::lock_with_lease",
            Box::pin(shut(lock.lock_with_lease(d))),
        ),
        ("Lock::try_lock", Box::pin(shut(lock.try_lock(d, None)))),
        (
            "Lock::try_lock_with_min_token",
            Box::pin(shut(__private::try_lock_with_min_token(&lock, d, None, 1))),
        ),
        ("Lock::is_locked", Box::pin(shut(lock.is_locked()))),
        (
            "Lock::is_held_by_current_task",
            Box::pin(shut(lock.is_held_by_current_task())),
        ),
        ("Lock::hold_count", Box::pin(shut(lock.hold_count()))),
        (
            "Lock::remaining_lease",
            Box::pin(shut(lock.remaining_lease())),
        ),
        ("Lock::inspect", Box::pin(shut(lock.inspect()))),
        (
            "Lock::advance_fencing_token",
            Box::pin(shut(__private::advance_fencing_token(&lock, 1))),
        ),
        ("Lock::force_unlock", Box::pin(shut(lock.force_unlock()))),
        ("FairLock::lock", Box::pin(shut(fair.lock()))),
        (
            "FairLock::lock_with_lease",
            Box::pin(shut(fair.lock_with_lease(d))),
        ),
        ("FairLock::try_lock", Box::pin(shut(fair.try_lock(d, None)))),
        ("FairLock::is_locked", Box::pin(shut(fair.is_locked()))),
        (
            "FairLock::is_held_by_current_task",
            Box::pin(shut(fair.is_held_by_current_task())),
        ),
        ("FairLock::hold_count", Box::pin(shut(fair.hold_count()))),
        (
            "FairLock::remaining_lease",
            Box::pin(shut(fair.remaining_lease())),
        ),
        ("FairLock::inspect", Box::pin(shut(fair.inspect()))),
        (
            "FairLock::force_unlock",
            Box::pin(shut(fair.force_unlock())),
        ),
        ("RwLock::inspect", Box::pin(shut(rw.inspect()))),
        (
            "Semaphore::try_set_permits",
            Box::pin(shut(sem.try_set_permits(1))),
        ),
        ("Semaphore::set_permits", Box::pin(shut(sem.set_permits(1)))),
        ("Semaphore::add_permits", Box::pin(shut(sem.add_permits(1)))),
        ("Semaphore::acquire", Box::pin(shut(sem.acquire(1)))),
        (
            "Semaphore::try_acquire",
            Box::pin(shut(sem.try_acquire(1, d))),
        ),
        (
            "Semaphore::acquire_with_lease",
            Box::pin(shut(sem.acquire_with_lease(1, d))),
        ),
        (
            "Semaphore::try_acquire_with_lease",
            Box::pin(shut(sem.try_acquire_with_lease(1, d, d))),
        ),
        (
            "Semaphore::available_permits",
            Box::pin(shut(sem.available_permits())),
        ),
        ("Semaphore::inspect", Box::pin(shut(sem.inspect()))),
        (
            "Semaphore::force_release",
            Box::pin(shut(sem.force_release())),
        ),
        (
            "Semaphore::release_permit",
            Box::pin(shut(sem.release_permit(&permit_id))),
        ),
        (
            "Semaphore::extend_permit",
            Box::pin(shut(sem.extend_permit(&permit_id, d))),
        ),
        (
            "CountDownLatch::try_set_count",
            Box::pin(shut(latch.try_set_count(1, d))),
        ),
        (
            "CountDownLatch::count_down",
            Box::pin(shut(latch.count_down())),
        ),
        (
            "CountDownLatch::count_down_as",
            Box::pin(shut(latch.count_down_as("m0"))),
        ),
        ("CountDownLatch::count", Box::pin(shut(latch.count()))),
        ("CountDownLatch::wait", Box::pin(shut(latch.wait()))),
        (
            "CountDownLatch::wait_timeout",
            Box::pin(shut(latch.wait_timeout(d))),
        ),
        ("CountDownLatch::inspect", Box::pin(shut(latch.inspect()))),
        ("Leader::campaign", Box::pin(shut(leader.campaign()))),
        (
            "Leader::try_campaign",
            Box::pin(shut(leader.try_campaign(d))),
        ),
        ("Leader::current", Box::pin(shut(leader.current()))),
        ("Leader::watch", Box::pin(shut(leader.watch()))),
        (
            "Leader::run",
            Box::pin(shut(leader.run(d, |_| std::future::ready(())))),
        ),
        (
            "Leader::run_with_term",
            Box::pin(shut(leader.run_with_term(d, |_| std::future::ready(())))),
        ),
        (
            "Fenced::write_with_token",
            Box::pin(shut(fenced.write_with_token(1, "x"))),
        ),
        (
            "Fenced::claim_with_token",
            Box::pin(shut(fenced.claim_with_token(1))),
        ),
        ("Fenced::read", Box::pin(shut(fenced.read()))),
        ("Client::inspect", Box::pin(shut(client.inspect(&name)))),
        ("Client::list", Box::pin(shut(client.list("torture:*")))),
        (
            "Client::server_uptime",
            Box::pin(shut(__private::server_uptime(client))),
        ),
    ];
    calls.extend(side_calls!("ReadLock", read, d));
    calls.extend(side_calls!("WriteLock", write, d));
    if let Some(g) = &lock_guard {
        calls.push(("Fenced::write", Box::pin(shut(fenced.write(g, "x")))));
        calls.push(("Fenced::claim", Box::pin(shut(fenced.claim(g)))));
    }
    // Each in turn: a second one would find the first's refusal.
    for (op, pending) in calls {
        check_shut(ctx, op, pending).await;
    }
    let d = Duration::from_millis(500);
    if let Some(mut g) = lock_guard {
        check_shut(ctx, "LockGuard::extend", Box::pin(shut(g.extend(d)))).await;
        check_shut(ctx, "LockGuard::hand_off", Box::pin(shut(g.hand_off()))).await;
        check_shut(ctx, "LockGuard::unlock", Box::pin(shut(g.unlock()))).await;
    }
    for g in others {
        match g {
            Guard::Fair(mut g) => {
                check_shut(ctx, "FairLockGuard::extend", Box::pin(shut(g.extend(d)))).await;
                let handed = Box::pin(shut(g.hand_off()));
                check_shut(ctx, "FairLockGuard::hand_off", handed).await;
                check_shut(ctx, "FairLockGuard::unlock", Box::pin(shut(g.unlock()))).await;
            }
            Guard::Rw(g) => {
                check_shut(ctx, "RwLockGuard::extend", Box::pin(shut(g.extend(d)))).await;
                check_shut(ctx, "RwLockGuard::unlock", Box::pin(shut(g.unlock()))).await;
            }
            Guard::Semaphore(p) => {
                let extended = Box::pin(shut(p.extend(d)));
                check_shut(ctx, "SemaphorePermit::extend", extended).await;
                let released = Box::pin(shut(p.release()));
                check_shut(ctx, "SemaphorePermit::release", released).await;
            }
            _ => {}
        }
    }
    if let Some(lead) = lead {
        let lost = ctx.recorded("Leadership::lost", lead.lost());
        if tokio::time::timeout(Duration::from_secs(1), lost)
            .await
            .is_err()
        {
            ctx.stats.violation(&format!(
                "{}: Leadership::lost did not answer within 1 s of its client's shutdown",
                ctx.client
            ));
        }
        let set = Box::pin(shut(lead.set_identity("after")));
        check_shut(ctx, "Leadership::set_identity", set).await;
        check_shut(ctx, "Leadership::resign", Box::pin(shut(lead.resign()))).await;
    }
    if let Some(mut w) = watch {
        // A change seen before the shutdown is still told (the watch keeps
        // what it did not return); then `Error::Shutdown`.
        let mut told = Vec::new();
        let end = loop {
            let changed = Recorded::new(
                &ctx.stats.coverage,
                "LeaderWatch::changed",
                w.changed(),
                Ending::Timeout,
            );
            match tokio::time::timeout(Duration::from_secs(1), changed).await {
                Ok(Ok(info)) if told.len() < 2 => told.push(info),
                other => break other,
            }
        };
        if !matches!(end, Ok(Err(redisync::Error::Shutdown))) {
            ctx.stats.violation(&format!(
                "{}: LeaderWatch::changed after its client's shutdown answered {end:?} (after {told:?})",
                ctx.client
            ));
        }
    }
    if let Some(mut connection) = connection {
        // `Shutdown` at once, and again.
        for _ in 0..2 {
            let changed = Recorded::new(
                &ctx.stats.coverage,
                "ConnectionWatch::changed",
                connection.changed(),
                Ending::Timeout,
            );
            let end = tokio::time::timeout(Duration::from_secs(1), changed).await;
            if end != Ok(redisync::ConnectionState::Shutdown) {
                ctx.stats.violation(&format!(
                    "{}: ConnectionWatch::changed after its client's shutdown answered {end:?}, not Shutdown at once",
                    ctx.client
                ));
                break;
            }
        }
    }
    let again = ctx.recorded("Client::shutdown", client.shutdown());
    if !matches!(again.await, Ok(())) {
        ctx.stats.violation(&format!(
            "{}: a second Client::shutdown did not answer Ok",
            ctx.client
        ));
    }
}

/// What a fresh client held when it was shut down.
#[derive(Default)]
pub(super) struct Held {
    pub(super) lock: Option<LockGuard>,
    /// A fair-lock guard, read and write guards, a permit.
    pub(super) others: Vec<Guard>,
    pub(super) lead: Option<redisync::Leadership>,
    pub(super) watch: Option<redisync::leader::LeaderWatch>,
    /// The client's connection state, watched before its shutdown.
    pub(super) connection: Option<redisync::ConnectionWatch>,
}

impl Held {
    /// Takes, on `client`'s own names, one guard of each other kind, the
    /// lead of an election and a watch of it (each with a short wait:
    /// what a fault denies is left out).
    pub(super) async fn take(ctx: &mut Ctx, client: &Client) -> Held {
        let name = format!("torture:shutdown:{}", ctx.client);
        let wait = Duration::from_millis(300);
        let mut held = Held::default();
        let fair = client.fair_lock(&format!("{name}:f"));
        if let Ok(Some(g)) = ctx
            .recorded("FairLock::try_lock", fair.try_lock(wait, None))
            .await
        {
            held.others.push(Guard::Fair(g));
        }
        let rw = client.rw_lock(&format!("{name}:r"));
        let read = rw.read();
        if let Ok(Some(g)) = ctx
            .recorded("ReadLock::try_lock", read.try_lock(wait, None))
            .await
        {
            held.others.push(Guard::Rw(g));
        }
        let write = client.rw_lock(&format!("{name}:w")).write();
        if let Ok(Some(g)) = ctx
            .recorded("WriteLock::try_lock", write.try_lock(wait, None))
            .await
        {
            held.others.push(Guard::Rw(g));
        }
        let sem = client.semaphore(&format!("{name}:s")).with_permits(2);
        if let Ok(Some(p)) = ctx
            .recorded("Semaphore::try_acquire", sem.try_acquire(1, wait))
            .await
        {
            held.others.push(Guard::Semaphore(p));
        }
        let leader = client.leader(&format!("{name}:l"));
        if let Ok(Some(l)) = ctx
            .recorded("Leader::try_campaign", leader.try_campaign(wait))
            .await
        {
            held.lead = Some(l);
        }
        if let Ok(w) = ctx.recorded("Leader::watch", leader.watch()).await {
            held.watch = Some(w);
        }
        // The connection state, waited on while nothing changes: cut by a
        // timeout and by a drop (a fault meanwhile makes it a reply).
        let mut connection = client.connection_state();
        let cut = How::Timeout(Duration::from_millis(1));
        let _ = ctx
            .call("ConnectionWatch::changed", cut, connection.changed())
            .await;
        let dropped = How::Drop(1);
        let _ = ctx
            .call("ConnectionWatch::changed", dropped, connection.changed())
            .await;
        held.connection = Some(connection);
        held
    }
}

/// A call after shutdown, its result reduced to what the check needs:
/// `Ok` (a violation), `Err(None)` for `Error::Shutdown`, `Err(Some(_))`
/// for another error (a violation).
pub(super) type Pending<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Option<String>>> + Send + 'a>>;

async fn shut<T>(
    call: impl std::future::Future<Output = redisync::Result<T>>,
) -> Result<(), Option<String>> {
    match call.await {
        Ok(_) => Ok(()),
        Err(redisync::Error::Shutdown) => Err(None),
        Err(e) => Err(Some(e.to_string())),
    }
}

/// Checks one call after shutdown: `Error::Shutdown` within a second.
async fn check_shut(ctx: &mut Ctx, op: &'static str, pending: Pending<'_>) {
    let call = Recorded::new(&ctx.stats.coverage, op, pending, Ending::Timeout);
    let wrong = match tokio::time::timeout(Duration::from_secs(1), call).await {
        Ok(Err(None)) => return,
        Ok(Ok(())) => "Ok".to_owned(),
        Ok(Err(Some(e))) => e,
        Err(_) => "nothing within 1 s".to_owned(),
    };
    ctx.stats.violation(&format!(
        "{}: {op} after its client's shutdown answered {wrong}, not Error::Shutdown at once",
        ctx.client
    ));
}

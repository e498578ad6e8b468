//! Forced releases: `force_unlock` of a lock (by its own holder, whose
//! guards must then say lost, or by another client) and `force_release`
//! of a semaphore, each recorded for the checker.

use redisync::{Lock, Semaphore};

use super::{lock_id, Count, Ctx, Guard, Handles};
use crate::history::{now_us, Force, Kind, Record};

/// Force-unlocks the lock `guards` hold, through their own client: they
/// must say lost as soon as the call returns `Ok`.
pub(super) async fn force_own(ctx: &mut Ctx, name: &str, lock: &Lock, guards: &[Vec<Guard>]) {
    if !force(ctx, name, lock).await {
        return;
    }
    let held: Vec<u64> = guards
        .iter()
        .flatten()
        .filter(|g| !g.is_lost())
        .map(Guard::token)
        .collect();
    if !held.is_empty() {
        ctx.stats.violation(&format!(
            "{}: guards of {name:?} (tokens {held:?}) still said held after this client's force_unlock returned",
            ctx.client
        ));
    }
}

/// Force-unlocks `lock` and records it; whether the call returned `Ok`.
pub(super) async fn force(ctx: &mut Ctx, name: &str, lock: &Lock) -> bool {
    ctx.stats.forcing(&lock_id(Kind::Lock, name));
    let asked_us = now_us();
    let how = ctx.how(20);
    let result = ctx
        .call("Lock::force_unlock", how, lock.force_unlock())
        .await;
    let done_us = now_us();
    let _ = ctx.sink.send(Record::Force(Force {
        lock: lock_id(Kind::Lock, name),
        client: ctx.client.clone(),
        asked_us,
        done_us,
        ok: matches!(result, Some(Ok(_))),
    }));
    match result {
        Some(Ok(deleted)) => {
            if deleted {
                ctx.stats.bump(Kind::Lock, Count::Special);
            }
            true
        }
        Some(Err(e)) => {
            ctx.stats.error(Kind::Lock, &format!("force_unlock: {e}"));
            false
        }
        // Cut: it may run or not, as a lost reply.
        None => false,
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

/// `force_release` of `s`, recorded as [`Force`]; `own`: a permit of this
/// client, which must say lost once the call returned `Ok`.
pub(super) async fn force_release(ctx: &mut Ctx, s: &Semaphore, own: Option<&Guard>) {
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

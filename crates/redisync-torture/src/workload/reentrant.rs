//! A section of an exclusive kind (`Lock`, `FairLock`, the write side,
//! `Redlock`): nested re-entries, extensions, a hand-off and a second ask,
//! and two flows of one owner on one name.

use std::time::Duration;

use redisync::{ReadLock, WriteLock};

use super::{
    acquire, extend, failed, fenced, force_own, hold_all, let_go, let_go_how, lock_id, lost_data,
    micros, query_held, reader, release, wait_lost, Count, Ctx, Got, Guard, How, LetGo, Target,
    WAIT,
};
use crate::history::{now_us, Access, Kind};

/// What a flow of [`two_flows`] does.
#[derive(Clone)]
pub(super) enum Flow {
    /// [`reentrant`] on an exclusive kind.
    Reentrant(Kind, Target),
    /// [`reader`] on a read-write lock's sides.
    Reader((ReadLock, WriteLock)),
}

/// Two flows of one owner on one name: `join!` in one task, or a parent and
/// a spawned child run as the parent's owner (`Owner::current()` +
/// `Owner::scope`). When both ask at the same instant or both wait, they
/// take turns and never hold at once (the checker sees them as two
/// clients); nested calls within each flow still re-enter.
pub(super) async fn two_flows(ctx: &mut Ctx, name: &'static str, flow: Flow) {
    async fn run(ctx: &mut Ctx, name: &'static str, flow: &Flow) {
        match flow {
            Flow::Reentrant(kind, t) => reentrant(ctx, *kind, name, t, Again::Reenter).await,
            Flow::Reader((read, write)) => reader(ctx, name, read, write).await,
        }
    }
    let mut twin = ctx.twin();
    if ctx.chance(50) {
        tokio::join!(run(ctx, name, &flow), run(&mut twin, name, &flow));
        return;
    }
    let child_flow = flow.clone();
    let child = tokio::spawn(redisync::Owner::current().scope(async move {
        run(&mut twin, name, &child_flow).await;
    }));
    run(ctx, name, &flow).await;
    if let Err(e) = child.await {
        ctx.stats.violation(&format!(
            "{}: a child flow run as its parent's owner failed: {e}",
            ctx.client
        ));
    }
}

/// What a section asks again while it holds.
pub(super) enum Again<'a> {
    /// The same handle, which re-enters (nested guards on one token).
    Reenter,
    /// Another handle on the same lock, which must not grant while the
    /// task holds (a second `Redlock` value): a zero-wait try.
    Refused(&'a Target),
}

/// Now and then asks `twin` (another handle on the lock the task holds
/// with `token`) with a zero wait: granting it on the same token (a
/// re-entry) is a violation. A new token is no re-entry: the hold ran out.
async fn refused_while_held(ctx: &mut Ctx, kind: Kind, name: &str, twin: &Target, token: u64) {
    if !ctx.chance(20) {
        return;
    }
    let lease = ctx.lease();
    if let Some(Ok(Some(g))) = twin.call(ctx, How::Await, Duration::ZERO, lease).await {
        if g.token() != token {
            return;
        }
        ctx.stats.violation(&format!(
            "{}: a second {kind:?} value granted {name:?} (token {}) to the task that holds it (token {token})",
            ctx.client,
            g.token(),
        ));
    }
}

/// Now and then, before a section of `reentrant` lets go: the only guard
/// is handed off and the task asks again, or a lock holder force-unlocks
/// its own lock.
async fn before_release(
    ctx: &mut Ctx,
    kind: Kind,
    name: &str,
    target: &Target,
    guards: &mut [Vec<Guard>],
) {
    let only = guards.len() == 1 && guards[0].len() == 1;
    if matches!(kind, Kind::Lock | Kind::FairLock) && only && ctx.chance(10) {
        hand_off_then_ask(ctx, kind, name, target, &mut guards[0][0]).await;
    }
    if ctx.chance(10) {
        query_held(ctx, target).await;
    }
    if only && ctx.chance(15) {
        let client = match target {
            Target::Lock(l) => Some(l.client()),
            Target::Fair(l) => Some(l.client()),
            _ => None,
        };
        if let Some(client) = client {
            let f = client.fenced(&format!("torture:fenced:{name}"));
            fenced(ctx, &f, &guards[0][0]).await;
        }
    }
    if let (Target::Lock(lock), true) = (target, kind == Kind::Lock && ctx.chance(4)) {
        force_own(ctx, name, lock, guards).await;
    }
    if ctx.chance(15) {
        wait_lost(ctx, &guards[0][0]).await;
    }
}

/// Hands `g` (the only guard of the task's hold of `name`) off, awaited,
/// under a tiny `timeout` or dropped after a few polls, then asks `name`
/// again at once from the task that took it. A new token while `g` still
/// says held is two holders, whatever the hand-off's outcome: done, the
/// task waits for `g` like any contender; undone, it re-enters (the same
/// token); unknown, it waits for `g` to end.
async fn hand_off_then_ask(ctx: &mut Ctx, kind: Kind, name: &str, target: &Target, g: &mut Guard) {
    let since = now_us();
    let how = ctx.how(30);
    let Some(op) = g.hand_off_op() else {
        return;
    };
    match ctx.call(op, how, g.hand_off()).await {
        Some(Ok(())) => ctx.stats.bump(kind, Count::HandedOff),
        Some(Err(e)) => ctx.stats.error(kind, &e),
        None => ctx.stats.bump(kind, Count::Cancelled),
    }
    let token = g.token();
    let lease = ctx.lease();
    if let Some(Ok(Some(again))) = target.call(ctx, How::Await, Duration::ZERO, lease).await {
        // Another client's force of the lock (of this process: the other
        // process's are not seen here) tells `g` only at its next renewal.
        let forced =
            ctx.stats.forced_at(&lock_id(kind, name)) + micros(ctx.settings.max_lease()) >= since;
        // A restart that lost the hold tells `g` within its lease too.
        if again.token() != token && !g.is_lost() && !forced && !lost_data(ctx, target).await {
            ctx.stats.violation(&format!(
                "{}: {kind:?} {name:?} granted again (token {}) to the task that handed its hold (token {token}) off, which still says held",
                ctx.client,
                again.token(),
            ));
        }
        if release(ctx, again).await.is_err() {
            ctx.stats.bump(kind, Count::ReleaseFailed);
        }
    }
}

/// A section of a re-entrant kind (and Redlock, without re-entry): hold,
/// maybe ask again (see [`Again`]) and extend at random moments, release
/// the nested guards in a random order, the last one as [`let_go_how`]
/// says.
///
/// A re-entry whose outer hold was gone from the server is granted afresh
/// with a new token: a section of its own (same holder), which later
/// re-entries join.
pub(super) async fn reentrant(
    ctx: &mut Ctx,
    kind: Kind,
    name: &str,
    target: &Target,
    again: Again<'_>,
) {
    let lease = ctx.lease();
    let requested_us = now_us();
    let first = match acquire(ctx, kind, target, lease).await {
        Got::Guard(g) => g,
        Got::Busy | Got::Cancelled => return,
        Got::Failed(f) => return failed(ctx, kind, &f).await,
    };
    let mut tokens = vec![first.token()];
    let mut recs = vec![ctx.open(
        kind,
        name,
        Access::Exclusive,
        tokens[0],
        requested_us,
        ctx.belief(lease),
    )];
    // guards[k]: the guards of section recs[k].
    let mut guards = vec![vec![first]];
    let phases = 1 + ctx.rng.below(3);
    for _ in 0..phases {
        let d = ctx.hold_time() / u32::try_from(phases).unwrap_or(1);
        hold_all(ctx, &mut recs, &guards, d).await;
        if let Again::Refused(twin) = again {
            refused_while_held(ctx, kind, name, twin, tokens[0]).await;
        }
        if matches!(again, Again::Reenter) && ctx.chance(30) {
            let lease2 = ctx.lease();
            let requested = now_us();
            match target.call(ctx, How::Await, WAIT, lease2).await {
                None => {}
                Some(Ok(Some(g))) => {
                    let t = g.token();
                    if let Some(k) = tokens.iter().position(|&x| x == t) {
                        ctx.stats.bump(kind, Count::Reentered);
                        recs[k].section.guards += 1;
                        let belief = micros(ctx.belief(lease2));
                        recs[k].section.lease_us = recs[k].section.lease_us.max(belief);
                        guards[k].push(g);
                    } else {
                        ctx.stats.bump(kind, Count::Acquired);
                        let mut r = ctx.open(
                            kind,
                            name,
                            Access::Exclusive,
                            t,
                            requested,
                            ctx.belief(lease2),
                        );
                        ctx.look(&mut r, || !g.is_lost());
                        tokens.push(t);
                        recs.push(r);
                        guards.push(vec![g]);
                    }
                }
                // Busy: the outer hold is gone from the server and someone
                // else has the lock (after a lost lease, or a restart that
                // lost it); if the outer guard still believes, the checker
                // sees the two holders.
                Some(Ok(None)) => ctx
                    .stats
                    .error(kind, "re-entry busy: the outer hold was gone"),
                Some(Err(f)) => ctx.stats.error(kind, &f.text),
            }
        }
        if ctx.chance(25) {
            let cap = if kind == Kind::Redlock {
                ctx.settings.max_lease()
            } else {
                Duration::MAX
            };
            let ext = ctx.extend_lease(cap);
            let last = recs.len() - 1;
            recs[last].section.lease_us = recs[last].section.lease_us.max(micros(ext));
            if extend(ctx, &guards[last][0], ext).await {
                ctx.stats.bump(kind, Count::Extended);
            }
        }
    }
    before_release(ctx, kind, name, target, &mut guards).await;
    // Release the nested guards in a random order; each section goes on
    // while one of its guards is left.
    loop {
        let nested: Vec<usize> = (0..guards.len()).filter(|&k| guards[k].len() > 1).collect();
        if nested.is_empty() {
            break;
        }
        let k = nested[usize::try_from(ctx.rng.below(nested.len() as u64)).unwrap_or(0)];
        let i = usize::try_from(ctx.rng.below(guards[k].len() as u64)).unwrap_or(0);
        let g = guards[k].swap_remove(i);
        if release(ctx, g).await.is_err() {
            ctx.stats.bump(kind, Count::ReleaseFailed);
        }
        let d = Duration::from_millis(ctx.rng.below(20));
        hold_all(ctx, &mut recs, &guards, d).await;
    }
    for (k, (r, gs)) in recs.into_iter().zip(guards).enumerate() {
        ctx.close(r, || gs.iter().all(|g| !g.is_lost()));
        let how = if k == 0 {
            let_go_how(ctx)
        } else {
            LetGo::Unlock
        };
        let_go(ctx, kind, gs, how).await;
    }
}

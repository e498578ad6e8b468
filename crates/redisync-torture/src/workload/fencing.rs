//! Fencing tokens and fenced values: lower bounds asked of `Lock`
//! acquisitions, `advance_fencing_token`, and fenced writes and claims
//! under a held guard.

use redisync::__private;
use redisync::fenced::Fenced;
use redisync::Lock;

use super::{lock_id, Ctx, Guard};
use crate::history::Kind;

/// Tokens are microseconds of the server clock: a bound this far ahead is
/// ignored by `try_lock_with_min_token`.
const FAR_AHEAD: u64 = 1 << 62;

/// Above what `advance_fencing_token` accepts (2^52).
const TOO_LARGE: u64 = (1 << 52) + 1;

/// A lower bound for a token of the `Lock` `name`: none, just above the
/// newest token this process saw of it (at most a millisecond), or far
/// ahead (ignored). Not further, nor from another lock (another server's
/// clock): a bound up to a second ahead of the server's clock is honoured,
/// and a token ahead of the clock is undercut by the clock's tokens after
/// a restart that lost the counter (the limit, in docs/guarantees.md, of a
/// clock that steps back around a data loss).
pub(super) fn min_token(ctx: &mut Ctx, name: &str) -> u64 {
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

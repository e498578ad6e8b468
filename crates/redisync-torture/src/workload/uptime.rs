//! Whether a server restarted, read from its uptime: a restart may lose
//! what a check would otherwise call a violation.

use std::time::Duration;

use redisync::__private;
use redisync::Client;
use tokio::time::Instant;

use super::{Ctx, How, Target};

/// The server's uptime, and when it was read (after its answer); `None`
/// when it failed or is too young to tell a restart by (whole seconds).
pub(super) async fn uptime(ctx: &mut Ctx, client: &Client) -> Option<(Duration, Instant)> {
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
pub(super) async fn restarted(
    ctx: &mut Ctx,
    client: &Client,
    up0: Duration,
    t0: Instant,
) -> Option<bool> {
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

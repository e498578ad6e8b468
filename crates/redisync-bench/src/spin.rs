//! The naive spin-lock baseline (`--kind spin`), implemented in the bench
//! itself so that it runs in the same process, on the same machine, at the
//! same moment as redisync: the lock of countless blog posts.
//!
//! - acquire: `SET key token NX PX ttl`; on failure sleep 50 ms and try
//!   again, until the caller's wait runs out (the last try happens at the
//!   deadline, so a wait of zero is one try);
//! - release: compare-and-delete as one Lua script (`GET == token` then
//!   `DEL`), sent as `EVALSHA` (loaded at connect, reloaded on `NOSCRIPT`);
//! - no watchdog, no fencing token, no queue, no wake-up message: a waiter
//!   only learns that the lock is free by polling.
//!
//! One plain `fred` client (default configuration) per `--clients`,
//! shared by the tasks like `redisync::Client` is.

use fred::clients::Client;
use fred::interfaces::{ClientLike, KeysInterface};
use fred::types::scripts::Script;
use fred::types::{Expiration, SetOptions};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pause between two failed `SET NX` tries.
pub(crate) const SPIN_SLEEP: Duration = Duration::from_millis(50);

/// Deletes the key only if it still holds the caller's token.
const RELEASE_LUA: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     return redis.call('del', KEYS[1]) else return 0 end";

/// A spin lock on one key through one plain `fred` client.
#[derive(Clone)]
pub(crate) struct SpinLock {
    client: Client,
    key: Arc<str>,
    release: Arc<Script>,
    /// Source of unique tokens: `<prefix>:<n>`.
    prefix: Arc<str>,
    next: Arc<AtomicU64>,
}

/// A held spin lock: the token written by `SET NX`.
pub(crate) struct SpinGuard {
    lock: SpinLock,
    token: String,
}

impl SpinLock {
    /// Connects a plain client to `url` and loads the release script.
    pub(crate) async fn connect(url: &str, key: &str) -> Result<Self, String> {
        let client = crate::redis_stats::plain_client(url, "spin").await?;
        let release = Script::from_lua(RELEASE_LUA);
        release
            .load(&client)
            .await
            .map_err(|e| format!("spin SCRIPT LOAD: {e}"))?;
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Ok(Self {
            client,
            key: key.into(),
            release: Arc::new(release),
            prefix: format!("{:x}-{started:x}", std::process::id()).into(),
            next: Arc::new(AtomicU64::new(0)),
        })
    }

    /// `SET NX PX` every `SPIN_SLEEP` until it succeeds or `wait` runs out.
    pub(crate) async fn try_lock(
        &self,
        wait: Duration,
        ttl: Duration,
    ) -> Result<Option<SpinGuard>, String> {
        let deadline = Instant::now() + wait;
        let px = i64::try_from(ttl.as_millis()).map_err(|_| format!("ttl {ttl:?} too long"))?;
        let token = format!(
            "{}:{}",
            self.prefix,
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        loop {
            let set: Option<String> = self
                .client
                .set(
                    self.key.as_ref(),
                    token.as_str(),
                    Some(Expiration::PX(px)),
                    Some(SetOptions::NX),
                    false,
                )
                .await
                .map_err(|e| format!("SET NX: {e}"))?;
            if set.is_some() {
                return Ok(Some(SpinGuard {
                    lock: self.clone(),
                    token,
                }));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            tokio::time::sleep(SPIN_SLEEP.min(left)).await;
        }
    }

    /// Closes the connection (best effort).
    pub(crate) async fn quit(&self) {
        if let Err(e) = self.client.quit().await {
            eprintln!("spin quit: {e}");
        }
    }
}

impl SpinGuard {
    /// Compare-and-delete; an error if the key no longer held our token
    /// (the lease ran out while we held it).
    pub(crate) async fn unlock(self) -> Result<(), String> {
        let lock = &self.lock;
        let deleted: i64 = lock
            .release
            .evalsha_with_reload(&lock.client, lock.key.as_ref(), self.token.as_str())
            .await
            .map_err(|e| format!("release script: {e}"))?;
        if deleted == 1 {
            Ok(())
        } else {
            Err("spin lock was no longer held at release (lease expired)".into())
        }
    }
}

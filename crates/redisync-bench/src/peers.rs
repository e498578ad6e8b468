//! The peers `--compare` runs in the same process and the same run as
//! redisync, interleaved with it:
//!
//! - `rslock` (crates.io, pinned in Cargo.toml): the fastest Rust Redis lock
//!   we know of, a Redlock over its instances (one instance for S1/S2, three
//!   for S4), on its defaults (3 tries per `lock()` call, a random pause
//!   below 200 ms between them); the driver calls `lock()` again until the
//!   wait runs out, as rslock's own `acquire()` does.
//! - The fred floor: two `EVALSHA` of a script that does nothing, through a
//!   plain fred client: what any lock on fred with one script per acquire
//!   and per release cannot beat.
//! - The raw floor: two `PING` round trips on one TCP connection, written
//!   and read by hand: what no client stack beats.

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::scripts::Script;
use rslock::{LockError, LockManager};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

/// The rslock version pinned in Cargo.toml (shown in every line).
pub(crate) const RSLOCK_VERSION: &str = "0.10.0";

/// rslock's defaults, set explicitly so that the JSON line can say them.
const RSLOCK_RETRY_COUNT: u32 = 3;
const RSLOCK_RETRY_DELAY: Duration = Duration::from_millis(200);

/// An rslock `LockManager` over one or three servers, on one key.
#[derive(Clone)]
pub(crate) struct Rslock {
    manager: LockManager,
    key: Arc<str>,
}

impl Rslock {
    pub(crate) fn new(urls: &[String], key: &str) -> Rslock {
        let mut manager = LockManager::new(urls.to_vec());
        manager.set_retry(RSLOCK_RETRY_COUNT, RSLOCK_RETRY_DELAY);
        Rslock {
            manager,
            key: key.into(),
        }
    }

    /// `lock()` until it succeeds or `wait` runs out (checked between calls:
    /// a call is never cancelled halfway).
    pub(crate) async fn try_lock(
        &self,
        wait: Duration,
        ttl: Duration,
    ) -> Result<Option<rslock::Lock>, String> {
        let deadline = Instant::now() + wait;
        loop {
            match self.manager.lock(self.key.as_bytes(), ttl).await {
                Ok(lock) => return Ok(Some(lock)),
                Err(LockError::Unavailable) if Instant::now() < deadline => {}
                Err(LockError::Unavailable) => return Ok(None),
                Err(e) => return Err(format!("rslock: {e}")),
            }
        }
    }

    /// Best effort, as rslock's `unlock` is (it reports nothing).
    pub(crate) async fn unlock(&self, lock: &rslock::Lock) {
        self.manager.unlock(lock).await;
    }

    pub(crate) fn settings(ttl_ms: u128, instances: usize) -> serde_json::Value {
        serde_json::json!({
            "algorithm": "rslock: Redlock, SET NX PX on every instance at once, quorum N/2+1, \
                a failed round deletes on all (EVALSHA); no fencing token, no wake-up",
            "retry": format!(
                "lock(): {RSLOCK_RETRY_COUNT} tries, a random pause below {} ms between them \
                 (library defaults); the driver calls lock() again until the wait runs out",
                RSLOCK_RETRY_DELAY.as_millis()
            ),
            "ttl_ms": ttl_ms,
            "instances": instances,
        })
    }
}

/// A floor: what one "acquire" and one "release" cost when each is one
/// round trip that does nothing.
#[derive(Clone)]
pub(crate) enum Floor {
    /// `EVALSHA` of an empty script through a plain fred client.
    Fred { client: Client, script: Arc<Script> },
    /// `PING` written and read by hand on one connection.
    Raw(Arc<Mutex<TcpStream>>),
    /// `Lock`'s own scripts, without the engine (what the engine adds is
    /// `Lock` minus this).
    Scripts(Arc<LockScripts>),
}

/// `lua/lock_acquire.lua` and `lua/lock_release.lua` with their helpers, run
/// as `Lock` runs them for one owner and a fixed lease.
pub(crate) struct LockScripts {
    client: Client,
    acquire: Script,
    release: Script,
    hold: String,
    fence: String,
    queue: String,
    channel: String,
    /// The token of the acquisition held (one task runs S1).
    token: std::sync::atomic::AtomicU64,
}

/// The lease and fencing-counter TTL the script floor passes, as `Lock`
/// in S1 (10 s lease, the client's default 24 h counter TTL).
const SCRIPT_FLOOR_LEASE_MS: &str = "10000";
const SCRIPT_FLOOR_FENCE_TTL_MS: &str = "86400000";

/// The empty script of the fred floor.
const NOTHING_LUA: &str = "return 0";

impl Floor {
    pub(crate) async fn fred(url: &str) -> Result<Floor, String> {
        let client = crate::redis_stats::plain_client(url, "fred floor").await?;
        let script = Script::from_lua(NOTHING_LUA);
        script
            .load(&client)
            .await
            .map_err(|e| format!("fred floor SCRIPT LOAD: {e}"))?;
        Ok(Floor::Fred {
            client,
            script: Arc::new(script),
        })
    }

    /// `Lock`'s scripts on the keys of lock `name` (layout
    /// [`redisync::KEY_LAYOUT`]).
    pub(crate) async fn scripts(url: &str, name: &str) -> Result<Floor, String> {
        let client = crate::redis_stats::plain_client(url, "script floor").await?;
        let key = |role: &str| format!("redisync:{}:lock:{role}:{{{name}}}", redisync::KEY_LAYOUT);
        // `Lock`'s scripts, as the library sends them (helpers in front).
        let script = |file: &str| {
            Script::from_lua(redisync::__private::script_source(file).expect("a script of lua/"))
        };
        Ok(Floor::Scripts(Arc::new(LockScripts {
            client,
            acquire: script("lock_acquire.lua"),
            release: script("lock_release.lua"),
            hold: key("hold"),
            fence: key("fence"),
            queue: key("queue"),
            channel: key("ch"),
            token: std::sync::atomic::AtomicU64::new(0),
        })))
    }

    /// The "acquire" of the floor.
    pub(crate) async fn acquire(&self) -> Result<(), String> {
        let Floor::Scripts(s) = self else {
            return self.round_trip().await;
        };
        let reply: Vec<i64> = s
            .acquire
            .evalsha_with_reload(
                &s.client,
                vec![s.hold.as_str(), s.fence.as_str(), s.queue.as_str()],
                // As `Lock` sends them uncontended: no wait queue, no hint.
                vec![
                    "bench:1",
                    SCRIPT_FLOOR_LEASE_MS,
                    "",
                    SCRIPT_FLOOR_FENCE_TTL_MS,
                    "",
                    "",
                    "",
                    "1",
                    "2",
                ],
            )
            .await
            .map_err(|e| format!("script floor acquire: {e}"))?;
        match reply[..] {
            [1, token] => {
                let token = u64::try_from(token).map_err(|e| e.to_string())?;
                s.token.store(token, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            }
            _ => Err(format!("script floor acquire: not granted: {reply:?}")),
        }
    }

    /// The "release" of the floor.
    pub(crate) async fn release(&self) -> Result<(), String> {
        let Floor::Scripts(s) = self else {
            return self.round_trip().await;
        };
        let token = s
            .token
            .load(std::sync::atomic::Ordering::Relaxed)
            .to_string();
        let released: i64 = s
            .release
            .evalsha_with_reload(
                &s.client,
                vec![s.hold.as_str(), s.fence.as_str(), s.queue.as_str()],
                vec![
                    "bench:1",
                    token.as_str(),
                    "1",
                    "publish",
                    s.channel.as_str(),
                    SCRIPT_FLOOR_FENCE_TTL_MS,
                ],
            )
            .await
            .map_err(|e| format!("script floor release: {e}"))?;
        if released == 2 {
            Ok(())
        } else {
            Err(format!("script floor release answered {released}"))
        }
    }

    pub(crate) async fn raw(port: u16) -> Result<Floor, String> {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("raw floor connect {port}: {e}"))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("raw floor: {e}"))?;
        Ok(Floor::Raw(Arc::new(Mutex::new(stream))))
    }

    /// One round trip of an empty floor.
    async fn round_trip(&self) -> Result<(), String> {
        match self {
            Floor::Scripts(_) => Err("the script floor acquires and releases".into()),
            Floor::Fred { client, script } => {
                let _: i64 = script
                    .evalsha_with_reload(client, (), ())
                    .await
                    .map_err(|e| format!("fred floor EVALSHA: {e}"))?;
                Ok(())
            }
            Floor::Raw(stream) => {
                const PONG: &[u8] = b"+PONG\r\n";
                let mut stream = stream.lock().await;
                stream
                    .write_all(b"*1\r\n$4\r\nPING\r\n")
                    .await
                    .map_err(|e| format!("raw floor write: {e}"))?;
                let mut reply = [0u8; PONG.len()];
                stream
                    .read_exact(&mut reply)
                    .await
                    .map_err(|e| format!("raw floor read: {e}"))?;
                if reply == PONG {
                    Ok(())
                } else {
                    Err(format!(
                        "raw floor: unexpected reply {:?}",
                        String::from_utf8_lossy(&reply)
                    ))
                }
            }
        }
    }

    pub(crate) async fn quit(&self) {
        match self {
            Floor::Fred { client, .. } => {
                let _ = client.quit().await;
            }
            Floor::Scripts(s) => {
                let _ = s.client.quit().await;
            }
            Floor::Raw(_) => {}
        }
    }
}

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
}

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

    pub(crate) async fn raw(port: u16) -> Result<Floor, String> {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("raw floor connect {port}: {e}"))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("raw floor: {e}"))?;
        Ok(Floor::Raw(Arc::new(Mutex::new(stream))))
    }

    /// One round trip.
    pub(crate) async fn round_trip(&self) -> Result<(), String> {
        match self {
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
        if let Floor::Fred { client, .. } = self {
            let _ = client.quit().await;
        }
    }
}

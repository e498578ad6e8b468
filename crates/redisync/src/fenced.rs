//! Fenced values: a value in Redis that only the newest holder of a lock
//! may change, checked by the fencing token every write carries. Made by
//! [`Client::fenced`]; see [`Fenced`] for why and how.
//!
//! - [`Fenced`]: the handle on one fenced value (`claim`, `write`, `read`).
//! - [`FencedWrite`]: what a write did (written, or refused as stale).
//! - [`FencedClaim`]: what a claim returned (the value, or stale).
//! - [`FencedValue`]: a value read with its newest token.

use std::sync::Arc;

use fred::types::{Key, Value};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::redis::args::{Digits, FencedBytes, FencedWriteArgs, ScriptArgs};
use crate::redis::script::lua_script;

lua_script!(WRITE, "fenced_write.lua");

/// Tokens are below 2^53 (exact in Lua numbers); a larger one is refused.
const TOKEN_LIMIT: u64 = 1 << 53;

/// A value in Redis guarded by fencing tokens: the storage side of fencing.
///
/// A lock's lease can run out while its holder is paused (GC, swap, a long
/// network stall); another task then takes the lock, and when the first one
/// resumes it still believes it holds it. Checking
/// [`is_lost`](Guard::is_lost) first does not help: the pause can fall
/// between the check and the write. A fenced value refuses the late write
/// instead: every write carries the writer's fencing token, and the value
/// keeps the newest token it saw. A write with an older token is refused
/// ([`FencedWrite::Stale`]) and changes nothing.
///
/// For a read-modify-write, [`claim`](Fenced::claim) first: it raises the
/// stored token to yours and returns the value in one step, so a late write
/// of an earlier holder can no longer land between your read and your
/// write.
///
/// Stored as a hash at the key you name (not a redisync key): field `value`
/// (the bytes) and field `token` (the newest token, decimal). Tokens of one
/// lock rise across acquisitions; use one lock (or one semaphore, one
/// `Redlock`) per fenced value.
///
/// ```no_run
/// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
/// use redisync::fenced::FencedWrite;
///
/// let balance = client.fenced("accounts:42:balance");
/// let guard = client.lock("accounts:42").lock().await?;
/// let current = balance.claim(&guard).await?.value().unwrap_or_default();
/// let next = (String::from_utf8_lossy(&current).parse::<i64>().unwrap_or(0) + 10).to_string();
/// match balance.write(&guard, next).await? {
///     FencedWrite::Written => {}
///     FencedWrite::Stale { newest } => eprintln!("lost the lock to token {newest}: not written"),
/// }
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Fenced {
    client: Client,
    key: Arc<str>,
}

impl std::fmt::Debug for Fenced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fenced")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// How a fenced write ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum FencedWrite {
    /// Written; the value's token is now the writer's.
    Written,
    /// Refused, nothing written: a write or claim with the newer token
    /// `newest` came first (the writer's lock was lost and taken since).
    Stale {
        /// The newest token the value has seen.
        newest: u64,
    },
}

impl FencedWrite {
    /// Whether the value was written.
    pub fn is_written(&self) -> bool {
        matches!(self, FencedWrite::Written)
    }
}

/// How a fenced claim ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum FencedClaim {
    /// Claimed: writes with older tokens are refused from now on. The value
    /// as it was (`None`: never written).
    Claimed(Option<Vec<u8>>),
    /// Refused, nothing changed: a newer token came first.
    Stale {
        /// The newest token the value has seen.
        newest: u64,
    },
}

impl FencedClaim {
    /// The value if claimed (`None` when refused or never written).
    pub fn value(self) -> Option<Vec<u8>> {
        match self {
            FencedClaim::Claimed(value) => value,
            FencedClaim::Stale { .. } => None,
        }
    }

    /// Whether the claim was refused.
    pub fn is_stale(&self) -> bool {
        matches!(self, FencedClaim::Stale { .. })
    }
}

/// A fenced value as stored: its bytes and the newest token it has seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedValue {
    /// The bytes last written (`None`: only claimed so far).
    pub value: Option<Vec<u8>>,
    /// The newest token of a write or claim.
    pub token: u64,
}

impl Client {
    /// A handle on the fenced value stored at `key` (no I/O). See
    /// [`Fenced`].
    pub fn fenced(&self, key: &str) -> Fenced {
        Fenced {
            client: self.clone(),
            key: Arc::from(key),
        }
    }
}

impl Fenced {
    /// The Redis key of the value.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Writes `value` under `guard`'s fencing token: refused if a newer
    /// token was seen first.
    ///
    /// # Errors
    /// [`Error::WrongType`] when the key holds something else (nothing
    /// written); [`Error::InvalidArgument`] for an empty key; [`Error::Redis`];
    /// [`Error::Shutdown`].
    ///
    /// # Cancel safety
    /// One script: done or not done (a dropped future may still have
    /// written).
    pub async fn write<G: Guard>(&self, guard: &G, value: impl AsRef<[u8]>) -> Result<FencedWrite> {
        self.write_with_token(guard.fencing_token(), value).await
    }

    /// [`write`](Fenced::write) with a token carried some other way (from
    /// another process, or a token stored with a job).
    ///
    /// # Errors
    /// As [`write`](Fenced::write); [`Error::InvalidArgument`] for a token of
    /// 2^53 or more (no lock issues one).
    pub async fn write_with_token(
        &self,
        token: u64,
        value: impl AsRef<[u8]>,
    ) -> Result<FencedWrite> {
        let value = Value::Bytes(value.as_ref().to_vec().into());
        match self.run(token, "write", Some(value)).await? {
            Ok(_) => Ok(FencedWrite::Written),
            Err(newest) => Ok(FencedWrite::Stale { newest }),
        }
    }

    /// Raises the value's token to `guard`'s and returns the value, in one
    /// step: from now on writes with older tokens are refused, so a
    /// read-modify-write under `guard` cannot be overwritten by a holder
    /// whose lock was lost before. Refused if a newer token was seen first.
    ///
    /// # Errors
    /// As [`write`](Fenced::write).
    ///
    /// # Cancel safety
    /// One script: done or not done.
    pub async fn claim<G: Guard>(&self, guard: &G) -> Result<FencedClaim> {
        self.claim_with_token(guard.fencing_token()).await
    }

    /// [`claim`](Fenced::claim) with a token carried some other way.
    ///
    /// # Errors
    /// As [`write_with_token`](Fenced::write_with_token).
    pub async fn claim_with_token(&self, token: u64) -> Result<FencedClaim> {
        match self.run(token, "claim", None).await? {
            Ok(value) => Ok(FencedClaim::Claimed(value)),
            Err(newest) => Ok(FencedClaim::Stale { newest }),
        }
    }

    /// The value and its newest token, without claiming (`None`: never
    /// written or claimed).
    ///
    /// # Errors
    /// [`Error::WrongType`] when the key holds something else;
    /// [`Error::Redis`]; [`Error::Shutdown`].
    pub async fn read(&self) -> Result<Option<FencedValue>> {
        self.client.inner.check_usable(&self.key, "fenced value")?;
        let fields: Vec<Value> = self
            .client
            .inner
            .link()
            .call(crate::redis::link::Command {
                name: "HMGET",
                route: Some(&self.key),
                args: vec![Value::from(&*self.key), "token".into(), "value".into()],
            })
            .await
            .map_err(|e| {
                if e.details().contains("WRONGTYPE") {
                    Error::WrongType {
                        key: self.key.to_string(),
                    }
                } else {
                    Error::Redis(crate::error::RedisFailure(e))
                }
            })?;
        let mut fields = fields.into_iter();
        let (token, value) = (fields.next(), fields.next());
        match token {
            None | Some(Value::Null) => Ok(None),
            Some(token) => Ok(Some(FencedValue {
                token: self.parse_token(&token)?,
                value: value.and_then(bytes_of),
            })),
        }
    }

    /// Runs the script: `Ok(value)` done (a claim's value), `Err(newest)`
    /// refused.
    async fn run(
        &self,
        token: u64,
        mode: &str,
        value: Option<Value>,
    ) -> Result<std::result::Result<Option<Vec<u8>>, u64>> {
        self.client.inner.check_usable(&self.key, "fenced value")?;
        if token >= TOKEN_LIMIT {
            return Err(Error::InvalidArgument(format!(
                "fencing token {token} is not one a lock issues (they are below 2^53)"
            )));
        }
        let args = FencedWriteArgs {
            token: Digits(token),
            mode,
            value: value.map(|bytes| FencedBytes { bytes }),
        }
        .into_values();
        let reply: Vec<Value> = WRITE
            .run(
                self.client.inner.link(),
                &self.key,
                vec![Key::from(&*self.key)],
                args,
            )
            .await?;
        match &reply[..] {
            [Value::Integer(1), value] => Ok(Ok(bytes_of(value.clone()))),
            [Value::Integer(0), newest] => Ok(Err(self.parse_token(newest)?)),
            _ => Err(Error::Script {
                name: "fenced_write.lua",
                message: format!("unexpected reply {reply:?}"),
            }),
        }
    }

    /// A stored token, or a clear error naming the key.
    fn parse_token(&self, token: &Value) -> Result<u64> {
        token
            .as_str()
            .and_then(|t| t.parse().ok())
            .or_else(|| token.as_u64())
            .ok_or_else(|| Error::WrongType {
                key: self.key.to_string(),
            })
    }
}

/// The bytes of a bulk reply; `None` for a nil.
fn bytes_of(value: Value) -> Option<Vec<u8>> {
    match value {
        Value::Bytes(b) => Some(b.to_vec()),
        Value::String(s) => Some(s.as_bytes().to_vec()),
        _ => None,
    }
}

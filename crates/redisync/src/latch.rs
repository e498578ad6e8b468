//! Count-down latches: tasks of any process wait until a count, set once,
//! is counted down to zero (Redisson's `RCountDownLatch`, with a TTL).

use std::sync::Arc;
use std::time::Duration;

use fred::types::{Key, Value};
use tokio::time::Instant;
use uuid::Uuid;

use crate::client::Client;
use crate::engine::guard_core::retry_until_deadline;
use crate::error::{Error, Result};
use crate::inspect::{inspect_kind, Inspection};
use crate::redis::args::{LatchCountDown, LatchRead, LatchSetCount, ScriptArgs};
use crate::redis::keys::{self, Kind, Role};
use crate::redis::script::{checked_ms, lua_script};
use crate::retry::{is_blip, plain_while, Outage};

lua_script!(SET_COUNT, "latch_set_count.lua");
lua_script!(COUNT_DOWN, "latch_count_down.lua");
lua_script!(READ, "latch_read.lua");

/// Counts are below 2^53 (exact in Lua numbers).
const COUNT_LIMIT: u64 = 1 << 53;

/// How long a count-down whose outcome is unknown (the connection dropped)
/// is sent again: it counts once however often it runs.
const COUNT_DOWN_RETRY_FOR: Duration = Duration::from_secs(10);

/// How long Redis remembers a count-down (after it counted, well past the
/// re-sends of [`COUNT_DOWN_RETRY_FOR`]) and that a phase opened (after the
/// open latch ended): each count-down forgets what ended before it, so the
/// record holds at most the count-downs of the last minute and the phases
/// that opened within their TTL and a minute.
const RECORD_FOR_MS: i64 = 60_000;

/// The longest member id of [`CountDownLatch::count_down_as`], in bytes.
const MEMBER_LIMIT: usize = 1024;

/// A latch that tasks of any process wait on until its count, set once
/// with [`try_set_count`](CountDownLatch::try_set_count), is counted down to
/// zero by [`count_down`](CountDownLatch::count_down): "wait until the N
/// workers of this phase are done".
///
/// - **Waiting** is woken by a message when the count reaches zero (no
///   polling); a waiter also looks again when the latch's TTL would end and
///   at least once per watchdog period of the client (a message lost in a
///   reconnect).
/// - **A TTL bounds its life**, counting or open: the latch of a fleet whose
///   counters crashed does not stay in Redis for ever. A latch that expires
///   before it opened is an error for its waiters
///   ([`Error::LatchExpired`]), never an opening: set a TTL longer than
///   the phase can take. Once open it stays open (count 0) for its TTL
///   again, then is gone.
/// - **A count-down counts once**: it is sent again when the connection
///   drops before the answer (for up to 10 s), and a second run of it
///   changes nothing, also after the latch opened and was set again (Redis
///   remembers each count-down for a minute after it counted, then forgets
///   it: the latch's keys do not grow with its count-downs).
/// - **A member counts once per phase**:
///   [`count_down_as`](CountDownLatch::count_down_as) counts down by a
///   member id (a worker's name), and a second count-down of that member
///   in the same phase counts nothing: a worker restarted after it checked
///   in checks in again without counting twice, and the latch never opens
///   with a member missing. The next phase (set again after it opened)
///   counts every member afresh.
/// - **Counting down a latch that is not set is an error**
///   ([`Error::LatchNotSet`]), never a silent no-op: a count-down that
///   comes before the count was set, or after the latch expired, would be
///   lost.
/// - A waiter stalled (a paused process) until more than a minute after
///   the open latch ended cannot tell an opening from an expiry any more
///   and reports [`Error::LatchExpired`]: an error, never a false opening.
/// - **Not set means open** for its waiters, as with Redisson and Java's
///   latch: waiting on a latch whose count was never set (or that opened
///   and ended) returns at once. Set the count before the waiters start;
///   members that race can all call `try_set_count`, the first one sets
///   it.
/// - An open latch can be set again for the next phase; a waiter of the
///   phase before still sees its phase opened (Redis remembers that it
///   opened until a minute after the open latch ended).
///
/// ```no_run
/// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
/// use std::time::Duration;
///
/// let phase = client.count_down_latch("import:phase-1");
/// phase.try_set_count(3, Duration::from_hours(1)).await?;
/// // In each of the three workers, when its part is done:
/// phase.count_down().await?;
/// // In the coordinator:
/// if phase.wait_timeout(Duration::from_mins(10)).await? {
///     println!("all three workers are done");
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    client: Client,
    name: Arc<str>,
    /// The latch hash, as a string: also the key of the client's local slot.
    key: Arc<str>,
    record: Key,
    forget: Key,
    channel: Key,
}

impl std::fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountDownLatch")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A handle on the count-down latch `name` (no I/O). See
    /// [`CountDownLatch`].
    pub fn count_down_latch(&self, name: &str) -> CountDownLatch {
        CountDownLatch {
            client: self.clone(),
            name: Arc::from(name),
            key: Arc::from(keys::key(Kind::Latch, Role::Hold, name)),
            record: Key::from(keys::key(Kind::Latch, Role::Record, name)),
            forget: Key::from(keys::key(Kind::Latch, Role::Forget, name)),
            channel: Key::from(keys::key(Kind::Latch, Role::Channel, name)),
        }
    }
}

/// A latch as its waiters read it.
#[derive(Debug)]
enum Look {
    /// Not set, or expired.
    Unset,
    /// Open (counted down to zero), as set with `id`.
    Open { id: String },
    /// Counting down, as set with `id`, ending in `ttl`.
    Counting { id: String, ttl: Option<Duration> },
}

impl CountDownLatch {
    /// The latch's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn check(&self) -> Result<()> {
        self.client.inner.check_usable(&self.name, "latch")
    }

    /// Sets the count to `count` for `ttl`, unless the latch is counting
    /// down already: `Ok(false)` then, and nothing changed. A latch that is
    /// open (or not set, or expired) is set.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty name, a zero count or one of
    /// 2^53 or more, a zero or absurd TTL; [`Error::WrongType`] when the
    /// latch's key holds something else; [`Error::Redis`] when Redis fails
    /// (after a timeout it may have been set).
    pub async fn try_set_count(&self, count: u64, ttl: Duration) -> Result<bool> {
        self.check()?;
        if count == 0 || count >= COUNT_LIMIT {
            return Err(Error::InvalidArgument(format!(
                "latch count must be from 1 to 2^53 - 1, not {count}"
            )));
        }
        let ttl_ms = checked_ms("latch TTL", ttl)?;
        let set: i64 = SET_COUNT
            .run(
                self.client.inner.link(),
                &self.key,
                vec![Key::from(&*self.key), self.record.clone()],
                LatchSetCount {
                    count: i64::try_from(count).unwrap_or(i64::MAX),
                    ttl_ms,
                    id: Uuid::new_v4().to_string(),
                }
                .into_values(),
            )
            .await?;
        Ok(set == 1)
    }

    /// Counts the latch down by one and returns the count left; at zero it
    /// opens and its waiters wake. A latch that is open stays as it is
    /// (`Ok(0)`).
    ///
    /// Counts once even when sent again: the connection dropping before
    /// the answer makes it send the same count-down again, for up to 10 s.
    /// Each call counts, though: a worker that may run twice (restarted
    /// after it counted) should count down with
    /// [`count_down_as`](CountDownLatch::count_down_as).
    ///
    /// # Errors
    /// [`Error::LatchNotSet`] when the latch is not set (its count was never
    /// set, or it expired): nothing counted; [`Error::InvalidArgument`] for
    /// an empty name; [`Error::WrongType`] when the latch's key holds
    /// something else; [`Error::Redis`] when Redis stays unreachable (it
    /// may have counted).
    pub async fn count_down(&self) -> Result<u64> {
        self.count_down_by("").await
    }

    /// Counts the latch down by one for `member` (a worker's id), unless
    /// `member` counted down already in this phase: a member counts once
    /// per phase however often it calls, so a worker restarted after its
    /// check-in checks in again under its id without counting twice, and a
    /// latch set to the number of members opens only when each of them
    /// counted down. Returns the count left (unchanged for a member that
    /// counted already); at zero the latch opens and its waiters wake. A
    /// latch that is open stays as it is (`Ok(0)`); the next phase (set
    /// again after it opened) counts every member afresh.
    ///
    /// Member and plain [`count_down`](CountDownLatch::count_down)s count
    /// alike on one latch. Like `count_down`, it is sent again when the
    /// connection drops before the answer (for up to 10 s) and counts once.
    ///
    /// ```no_run
    /// # async fn demo(client: redisync::Client, worker: &str) -> redisync::Result<()> {
    /// let phase = client.count_down_latch("import:phase-1");
    /// // Each of the three workers, when its part is done (again after a restart):
    /// phase.count_down_as(worker).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty `member` or one longer than
    /// 1024 bytes, and otherwise as [`count_down`](CountDownLatch::count_down)
    /// ([`Error::LatchNotSet`] when the latch is not set: nothing counted).
    pub async fn count_down_as(&self, member: &str) -> Result<u64> {
        if member.is_empty() || member.len() > MEMBER_LIMIT {
            return Err(Error::InvalidArgument(format!(
                "latch member id must be 1 to {MEMBER_LIMIT} bytes, not {}",
                member.len()
            )));
        }
        self.count_down_by(member).await
    }

    /// A count-down, by `member` ('' for none).
    async fn count_down_by(&self, member: &str) -> Result<u64> {
        self.check()?;
        let inner = &self.client.inner;
        let id = Uuid::new_v4().to_string();
        let until = Instant::now() + COUNT_DOWN_RETRY_FOR;
        let left: i64 = retry_until_deadline(
            until,
            || inner.check_open(),
            || {
                COUNT_DOWN.run(
                    inner.link(),
                    &self.key,
                    vec![
                        Key::from(&*self.key),
                        self.record.clone(),
                        self.forget.clone(),
                    ],
                    LatchCountDown {
                        id: &id,
                        publish: inner.hub.publish_command(),
                        channel: self.channel.clone(),
                        record_for_ms: RECORD_FOR_MS,
                        member,
                    }
                    .into_values(),
                )
            },
        )
        .await?;
        u64::try_from(left).map_err(|_| Error::LatchNotSet {
            name: self.name.to_string(),
        })
    }

    /// The count left: 0 when open or not set.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty name; [`Error::WrongType`]
    /// when the latch's key holds something else; [`Error::Redis`] when
    /// Redis fails.
    pub async fn count(&self) -> Result<u64> {
        self.check()?;
        let (left, _, _) = self.read(None).await?;
        Ok(left)
    }

    /// Waits until the latch opens (its count reaches zero). Returns at
    /// once when it is open or not set.
    ///
    /// A blip (a reset connection, a failover, a Redis restart) does not end
    /// the wait: it looks again once Redis is back, after pauses with
    /// back-off and jitter as the client's
    /// [`acquire_retry`](crate::ClientBuilder::acquire_retry) sets them, so
    /// an opening during the outage is seen after it.
    ///
    /// # Errors
    /// [`Error::LatchExpired`] when the latch expires (its TTL ends) before
    /// it opened; [`Error::InvalidArgument`] for an empty name;
    /// [`Error::WrongType`] when its key holds something else;
    /// [`Error::Redis`] when Redis fails otherwise than by a blip, or stays
    /// unreachable for the policy's
    /// [`max_outage`](crate::AcquireRetry::max_outage) (in plain words
    /// naming the address), or at the first blip with
    /// [`AcquireRetry::never`](crate::AcquireRetry::never);
    /// [`Error::Shutdown`] after the client's shutdown.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn wait(&self) -> Result<()> {
        self.wait_until(None).await.map(|_| ())
    }

    /// [`wait`](CountDownLatch::wait) for at most `timeout`: `Ok(true)` when
    /// the latch opened, `Ok(false)` when the time ran out first.
    ///
    /// # Errors
    /// As [`wait`](CountDownLatch::wait). A blip is ridden out until
    /// `timeout` runs out; when it runs out while Redis is unreachable, the
    /// answer is that error, in plain words naming the address, not
    /// `Ok(false)` (whether the latch opened meanwhile is unknown), as an
    /// acquisition's wait ends (see
    /// [`AcquireRetry`](crate::AcquireRetry)). A zero `timeout` answers a
    /// blip at once with it.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn wait_timeout(&self, timeout: Duration) -> Result<bool> {
        // A bound too far to represent is no bound.
        self.wait_until(Instant::now().checked_add(timeout)).await
    }

    async fn wait_until(&self, deadline: Option<Instant>) -> Result<bool> {
        self.check()?;
        let inner = &self.client.inner;
        let slot = inner.hub.slot(&self.key, &self.channel);
        let period = inner.settings.watchdog_timeout;
        // The phase (setting id) this wait is for, once seen counting.
        let mut waited_for: Option<String> = None;
        // A blip is ridden out while the wait lasts, as an acquisition's
        // (see `AcquireRetry`): it only reads, so a look sent again is safe.
        let mut outage = Outage::of(inner.id, &slot.key);
        let waits = deadline.is_none_or(|d| d > Instant::now());
        loop {
            // Subscribed before each look (again, if a blip cut the first
            // try): an opening after it is heard.
            let looked = match inner.hub.ensure_subscribed(&slot).await {
                Ok(()) => {
                    let since = slot.wakeups.all.generation();
                    self.read(waited_for.as_deref())
                        .await
                        .map(|read| (since, read))
                }
                Err(e) => Err(e),
            };
            let (since, (_, look, opened)) = match looked {
                Ok(looked) => {
                    outage.over();
                    looked
                }
                Err(e) => {
                    self.ride_out(&mut outage, deadline, waits, e).await?;
                    continue;
                }
            };
            if opened {
                return Ok(true);
            }
            // Another phase than ours, and ours did not open: it expired.
            let ours = |id: &str| waited_for.as_ref().is_none_or(|mine| mine == id);
            let ttl = match look {
                Look::Unset if waited_for.is_none() => return Ok(true),
                Look::Open { id } if ours(&id) => return Ok(true),
                Look::Unset | Look::Open { .. } => return Err(self.expired()),
                Look::Counting { id, .. } if !ours(&id) => return Err(self.expired()),
                Look::Counting { id, ttl } => {
                    waited_for.get_or_insert(id);
                    ttl
                }
            };
            let now = Instant::now();
            if deadline.is_some_and(|d| d <= now) {
                return Ok(false);
            }
            // Again when the TTL ends (an expiry publishes nothing).
            let mut next = now + crate::engine::hub::look_again_after(ttl, period);
            if let Some(d) = deadline {
                next = next.min(d);
            }
            slot.wakeups.all.wait(since, next).await;
            inner.check_open()?;
        }
    }

    /// A look of a wait met `e`. A blip is ridden out while the wait lasts
    /// (the client's [`AcquireRetry`](crate::AcquireRetry)): a pause with
    /// back-off and jitter, until Redis is reachable again, then `Ok(())` to
    /// look again. Otherwise `e`: as it is with retries off or for any other
    /// error; in plain words naming the address for a zero wait, or once the
    /// deadline (or the policy's outage bound) passed during the outage.
    async fn ride_out(
        &self,
        outage: &mut Outage,
        deadline: Option<Instant>,
        waits: bool,
        e: Error,
    ) -> Result<()> {
        let inner = &self.client.inner;
        let policy = inner.settings.acquire_retry;
        if !policy.is_enabled() || !is_blip(&e) {
            return Err(e);
        }
        loop {
            let until = if waits {
                outage.next_pause(&policy, deadline)
            } else {
                None
            };
            let Some(until) = until else {
                let thing = format!("latch {:?}", self.name);
                return Err(plain_while(
                    e,
                    &self.client.endpoints(),
                    &format!("read {thing}"),
                    &thing,
                    outage.lasted(),
                ));
            };
            tokio::select! {
                biased;
                () = inner.hub.closing() => return Err(Error::Shutdown),
                () = tokio::time::sleep_until(until) => {}
            }
            // Nothing is sent while fred reconnects (it would wait in its
            // queue, or fail at once): the next pause first.
            if inner.check_reachable().is_ok() {
                return Ok(());
            }
        }
    }

    fn expired(&self) -> Error {
        Error::LatchExpired {
            name: self.name.to_string(),
        }
    }

    /// The count left, the latch as its waiters see it, and whether the
    /// phase `mine` opened.
    async fn read(&self, mine: Option<&str>) -> Result<(u64, Look, bool)> {
        let reply: Vec<Value> = READ
            .run_idempotent(
                self.client.inner.link(),
                &self.key,
                vec![Key::from(&*self.key), self.record.clone()],
                LatchRead {
                    phase: mine.unwrap_or(""),
                }
                .into_values(),
            )
            .await?;
        let bad = || Error::Script {
            name: READ.name,
            message: "unexpected reply".into(),
        };
        let [left, id, ttl, opened] = <[Value; 4]>::try_from(reply).map_err(|_| bad())?;
        let left = left.as_i64().ok_or_else(bad)?;
        let look = match u64::try_from(left) {
            Err(_) => Look::Unset,
            Ok(0) => Look::Open {
                id: id.as_string().ok_or_else(bad)?,
            },
            Ok(_) => Look::Counting {
                id: id.as_string().ok_or_else(bad)?,
                ttl: ttl
                    .as_i64()
                    .and_then(|t| u64::try_from(t).ok())
                    .map(Duration::from_millis),
            },
        };
        Ok((
            u64::try_from(left).unwrap_or(0),
            look,
            opened.as_i64() == Some(1),
        ))
    }

    /// What Redis holds of the latch: [`Inspection::count`] is its count
    /// left, [`Inspection::lease_left`] its TTL left.
    ///
    /// # Errors
    /// As [`count`](CountDownLatch::count).
    pub async fn inspect(&self) -> Result<Inspection> {
        inspect_kind(&self.client.inner, &self.name, Kind::Latch, "latch").await
    }
}

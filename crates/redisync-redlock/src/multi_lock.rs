//! `MultiLock`: all-or-nothing over several locks.

use std::sync::Arc;
use std::time::Duration;

use futures::future::{join_all, select_all};
use redisync::{Lock, LockGuard, LostSignal};
use tokio::time::Instant;

use crate::error::{Error, MemberError, Result};
use crate::redlock::give_back;
use crate::validity::{backoff_bound, Jitter};

/// First bound of the random pause after a collision with another `MultiLock`.
const BACKOFF_BASE: Duration = Duration::from_millis(5);
/// Largest bound of that pause.
const BACKOFF_CAP: Duration = Duration::from_millis(100);

/// All-or-nothing over several [`Lock`]s, on the same or on different Redis
/// servers: [`lock`](MultiLock::lock) returns once it holds every one of
/// them, and never leaves some of them held when it gives up, fails or is
/// cancelled.
///
/// # How it acquires
///
/// Every round first tries all members at once without waiting (one round
/// trip when nothing is busy). If a member is busy, the members taken are
/// released and the task waits for the busy member alone, with the lock's
/// own wake-up on release (no polling), and then tries the others at once
/// again. It never holds one member while waiting for another, so two
/// `MultiLock`s over the same locks given in different orders cannot
/// deadlock; members are tried and waited for in one canonical order (by
/// name, then client id), and repeated collisions back off a random pause
/// (full jitter, 5 ms doubling up to 100 ms) so two of them cannot chase
/// each other forever. A zero wait (`try_lock(Duration::ZERO, ..)`) tries
/// the members one after another in that order instead, stopping at the
/// first busy one: of tasks racing for the same free members, exactly one
/// gets them all (one round trip per member).
///
/// # Leases
///
/// Each member's lease starts when that member is granted: `lease: None`
/// means every member is renewed by its own client's watchdog; a fixed lease
/// applies to each member from its own grant, all of which happen within one
/// round of tries. Members are reentrant like [`Lock`]: an owner (a task,
/// or an [`Owner`](redisync::Owner) scope) that holds some of them already
/// holds them once more; built from [`Lock::non_reentrant`] handles, it
/// re-enters nothing.
///
/// The guard is a [`MultiLockGuard`]. Cloning a `MultiLock` is cheap and
/// gives a handle on the same locks.
#[derive(Clone)]
pub struct MultiLock {
    inner: Arc<Inner>,
}

struct Inner {
    /// In the order given to `new`.
    locks: Vec<Lock>,
    /// Indices into `locks`, in the canonical order.
    order: Vec<usize>,
    jitter: Jitter,
}

impl std::fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiLock")
            .field(
                "locks",
                &self.inner.locks.iter().map(Lock::name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl MultiLock {
    /// A `MultiLock` over `locks` (any clients, any servers; no I/O).
    ///
    /// Each lock may be given once: two members are the same lock when they
    /// have the same name and either the same [`Client`](redisync::Client)
    /// (clones of one `Lock` included) or clients configured with a common
    /// endpoint ([`Client::endpoints`](redisync::Client::endpoints): same
    /// `host:port` and database). A `MultiLock` holding the same lock twice
    /// would wait for itself. One server reached under two spellings
    /// (`localhost` and `127.0.0.1`, a DNS alias, two different cluster
    /// seeds) cannot be told apart without I/O and is not detected.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `locks` is empty or holds the same
    /// lock twice.
    pub fn new(locks: Vec<Lock>) -> Result<MultiLock> {
        if locks.is_empty() {
            return Err(Error::InvalidArgument(
                "a MultiLock needs at least one lock".into(),
            ));
        }
        let endpoints: Vec<Vec<String>> = locks.iter().map(|l| l.client().endpoints()).collect();
        for (i, a) in locks.iter().enumerate() {
            for (j, b) in locks.iter().enumerate().skip(i + 1) {
                let same_server = a.client().id() == b.client().id()
                    || endpoints[i].iter().any(|e| endpoints[j].contains(e));
                if a.name() == b.name() && same_server {
                    return Err(Error::InvalidArgument(format!(
                        "locks #{i} and #{j} are the same lock {:?} on the same server ({}): \
                         a MultiLock would wait for itself; give each lock once",
                        a.name(),
                        endpoints[i].join(", ")
                    )));
                }
            }
        }
        let mut order: Vec<usize> = (0..locks.len()).collect();
        order.sort_by(|&a, &b| {
            (locks[a].name(), locks[a].client().id(), a).cmp(&(
                locks[b].name(),
                locks[b].client().id(),
                b,
            ))
        });
        Ok(MultiLock {
            inner: Arc::new(Inner {
                locks,
                order,
                jitter: Jitter::new(),
            }),
        })
    }

    /// The member locks, in the order given to [`MultiLock::new`].
    pub fn locks(&self) -> &[Lock] {
        &self.inner.locks
    }

    /// Waits until every member is held; each member's lease is renewed by
    /// its client's watchdog until the guard is released.
    ///
    /// # Errors
    /// [`Error::Member`] when a member fails (Redis down, wrong key type,
    /// client shut down); the members taken are released first.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future releases every member it took, in the
    /// background, and the acquisition in flight is undone by the member lock.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(a: redisync::Client, b: redisync::Client) -> redisync_redlock::Result<()> {
    /// use redisync_redlock::MultiLock;
    /// let both = MultiLock::new(vec![a.lock("account:1"), b.lock("account:2")])?;
    /// let guard = both.lock().await?;
    /// // ... move money between the two accounts ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<MultiLockGuard> {
        self.acquire(None, None).await?.ok_or_else(|| {
            Error::InvalidArgument("a MultiLock wait ended without a deadline".into())
        })
    }

    /// Tries to take every member within `wait` (zero: one round of tries,
    /// one round trip per server). `lease: None` means each member is renewed
    /// by its client's watchdog; `Some(lease)` is a fixed lease per member.
    /// `Ok(None)` when the wait ran out; then no member is held.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (before any I/O) for a zero lease or one
    /// over a year (366 days), as a [`Lock`] refuses them; [`Error::Member`]
    /// when a member fails (the members taken are released first). A lease
    /// is whole milliseconds, rounded up (1 ns is 1 ms). A `wait` too long
    /// for the clock (`Duration::MAX`) waits as long as [`MultiLock::lock`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`MultiLock::lock`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(client: redisync::Client) -> redisync_redlock::Result<()> {
    /// use std::time::Duration;
    /// use redisync_redlock::MultiLock;
    /// let pair = MultiLock::new(vec![client.lock("seat:12A"), client.lock("seat:12B")])?;
    /// match pair.try_lock(Duration::from_secs(2), Some(Duration::from_secs(30))).await? {
    ///     Some(guard) => guard.unlock().await?,
    ///     None => println!("one of the seats is taken"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<MultiLockGuard>> {
        self.acquire(Instant::now().checked_add(wait), lease).await
    }

    #[tracing::instrument(level = "debug", name = "redisync.multilock.acquire", skip_all, fields(locks = self.inner.locks.len()))]
    async fn acquire(
        &self,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<MultiLockGuard>> {
        if let Some(lease) = lease {
            check_lease(lease)?;
        }
        let inner = &*self.inner;
        // The member to wait for alone before trying the others; none in the
        // first round.
        let mut first: Option<usize> = None;
        let mut collisions = 0u32;
        loop {
            let j = match self.round(first, deadline, lease).await? {
                Round::Held(guard) => return Ok(Some(guard)),
                Round::TimedOut => return Ok(None),
                Round::Busy(j) => j,
            };
            tracing::debug!(
                busy = j,
                "a member is busy: released the others, waiting for it"
            );
            if first.is_some() {
                // A second collision: another MultiLock may be chasing the
                // same members in step with us; fall out of step.
                let pause =
                    inner
                        .jitter
                        .below(backoff_bound(BACKOFF_BASE, collisions, BACKOFF_CAP));
                collisions += 1;
                let wake = Instant::now() + pause;
                tokio::time::sleep_until(deadline.map_or(wake, |d| d.min(wake))).await;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            first = Some(j);
        }
    }

    /// One round of [`MultiLock::acquire`]: waits for `first` alone (the
    /// member busy in the last round), then tries the others without
    /// waiting. A busy member's index once every member taken is given back.
    async fn round(
        &self,
        first: Option<usize>,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Round> {
        let inner = &*self.inner;
        let mut held: Vec<Option<LockGuard>> = (0..inner.locks.len()).map(|_| None).collect();
        if let Some(i) = first {
            let wait = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            match inner.locks[i].try_lock(wait, lease).await {
                Ok(Some(g)) => held[i] = Some(g),
                Ok(None) => return Ok(Round::TimedOut),
                Err(e) => return Err(Error::Member(MemberError::new(i, &inner.locks[i], e))),
            }
        }
        let mut busy = None;
        let mut failure = None;
        for (j, result) in self.try_others(first, deadline, lease).await {
            match result {
                Ok(Some(g)) => held[j] = Some(g),
                Ok(None) => {
                    busy.get_or_insert(j);
                }
                Err(e) => {
                    failure.get_or_insert((j, e));
                }
            }
        }
        if let Some((j, e)) = failure {
            give_back(held.into_iter().flatten().collect()).await;
            return Err(Error::Member(MemberError::new(j, &inner.locks[j], e)));
        }
        let Some(j) = busy else {
            return Ok(Round::Held(MultiLockGuard {
                guards: held.into_iter().flatten().collect(),
            }));
        };
        // Released before the next round tries them again.
        give_back(held.into_iter().flatten().collect()).await;
        Ok(Round::Busy(j))
    }

    /// Tries every member but `first` without waiting.
    ///
    /// With no time left (a zero wait) the members are tried one after
    /// another in the canonical order, stopping at the first busy one: of
    /// tasks racing for the same free members, the one that takes the first
    /// takes them all (tried all at once, each could take one and none
    /// all). With time left, all at once (one round trip); a collision is
    /// waited out by the caller.
    async fn try_others(
        &self,
        first: Option<usize>,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Vec<(usize, redisync::Result<Option<LockGuard>>)> {
        let inner = &*self.inner;
        let others = inner.order.iter().copied().filter(|&j| Some(j) != first);
        if deadline.is_some_and(|d| Instant::now() >= d) {
            let mut results = Vec::with_capacity(inner.locks.len());
            for j in others {
                let result = inner.locks[j].try_lock(Duration::ZERO, lease).await;
                let stop = !matches!(result, Ok(Some(_)));
                results.push((j, result));
                if stop {
                    break;
                }
            }
            return results;
        }
        let tries = others
            .map(|j| async move { (j, inner.locks[j].try_lock(Duration::ZERO, lease).await) });
        join_all(tries).await
    }
}

/// What one round of [`MultiLock::acquire`] came to.
enum Round {
    /// Every member taken.
    Held(MultiLockGuard),
    /// The member waited for first was still busy at the deadline.
    TimedOut,
    /// This member was busy: the others were given back.
    Busy(usize),
}

/// Refuses, before any I/O, a lease every member would refuse (zero, or
/// over a year): as one error, not one per member.
fn check_lease(lease: Duration) -> Result<()> {
    if lease.is_zero() {
        return Err(Error::InvalidArgument("lease must not be zero".into()));
    }
    if lease > crate::redlock::ABSURD_LEASE {
        return Err(Error::InvalidArgument(format!(
            "lease of {lease:?} is longer than a year (366 days); is the unit right?"
        )));
    }
    Ok(())
}

/// Every member of a [`MultiLock`], held. Release it with
/// [`unlock`](MultiLockGuard::unlock).
///
/// Dropping the guard without `unlock` drops every member's guard: their
/// renewal stops at once and each is released in a background task that only
/// logs errors (`unlock().await` returns them).
#[must_use = "if unused the locks are released immediately"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct MultiLockGuard {
    /// In the order given to `MultiLock::new`.
    guards: Vec<LockGuard>,
}

impl MultiLockGuard {
    /// The member guards, in the order the locks were given to
    /// [`MultiLock::new`].
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The fencing token of every member, in the order the locks were given.
    /// Fence each member's own resource with its own token.
    pub fn fencing_tokens(&self) -> Vec<u64> {
        self.guards.iter().map(LockGuard::fencing_token).collect()
    }

    /// One fencing token for the whole set: the largest member token. Each
    /// member's token rises for every later holder of that member, so the
    /// largest rises for every later holder of the same set of locks: a
    /// resource guarded by the set as one can reject older tokens. (A
    /// resource guarded by one member takes that member's token from
    /// [`fencing_tokens`](MultiLockGuard::fencing_tokens).)
    pub fn fencing_token(&self) -> u64 {
        self.guards
            .iter()
            .map(LockGuard::fencing_token)
            .max()
            .unwrap_or(0)
    }

    /// The smallest validity of the members (zero once one is lost).
    pub fn validity(&self) -> Duration {
        self.guards
            .iter()
            .map(LockGuard::validity)
            .min()
            .unwrap_or(Duration::ZERO)
    }

    /// An owned signal that fires once a member is lost or the guard is
    /// released (see [`LostSignal`]); unlike [`lost`](MultiLockGuard::lost)
    /// it borrows nothing.
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal::any(self.guards.iter().map(LockGuard::lost_signal))
    }

    /// Makes every member's remaining lease at least `lease`, all at once.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (before any I/O) for a zero lease or one
    /// over a year (366 days); [`Error::Extend`] listing each member that failed
    /// ([`redisync::Error::NotHeld`] when it was lost, Redis errors); the
    /// others were extended.
    ///
    /// # Cancel safety
    /// Cancel safe: each member's extension is one script, done or not done.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        check_lease(lease)?;
        let extensions = self
            .guards
            .iter()
            .enumerate()
            .map(|(i, g)| async move { (i, g.extend(lease).await) });
        let mut failures = Vec::new();
        for (i, result) in join_all(extensions).await {
            if let Err(e) = result {
                failures.push(MemberError::new(i, self.guards[i].lock(), e));
            }
        }
        if failures.is_empty() {
            return Ok(());
        }
        Err(Error::Extend {
            extended: self.guards.len() - failures.len(),
            required: self.guards.len(),
            failures,
        })
    }

    /// Whether some member is known to be lost (see [`LockGuard::lost`]).
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Resolves when the first member is known to be lost.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn lost(&self) {
        let all = self.guards.iter().map(|g| Box::pin(g.lost()));
        let _ = select_all(all).await;
    }

    /// Releases every member, all at once, and reports every failure.
    ///
    /// # Errors
    /// [`Error::Release`] listing each member whose release failed
    /// ([`redisync::Error::NotHeld`] when it was lost meanwhile, Redis errors);
    /// the others were released.
    ///
    /// # Cancel safety
    /// Cancel safe in effect: renewal of every member stops on the first
    /// poll; releases not sent when the future is dropped are left to the
    /// lease expiry.
    #[tracing::instrument(level = "debug", name = "redisync.multilock.release", skip_all, fields(locks = self.guards.len()))]
    pub async fn unlock(self) -> Result<()> {
        let total = self.guards.len();
        let releases = self.guards.into_iter().enumerate().map(|(i, g)| {
            let lock = g.lock().clone();
            async move { (i, lock, g.unlock().await) }
        });
        let mut failures = Vec::new();
        for (i, lock, result) in join_all(releases).await {
            if let Err(e) = result {
                failures.push(MemberError::new(i, &lock, e));
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(Error::Release {
                released: total - failures.len(),
                required: total,
                pending: 0,
                failures,
            })
        }
    }
}

impl redisync::Guard for MultiLockGuard {
    type Error = Error;

    fn fencing_token(&self) -> u64 {
        MultiLockGuard::fencing_token(self)
    }

    fn is_lost(&self) -> bool {
        MultiLockGuard::is_lost(self)
    }

    fn lost_signal(&self) -> LostSignal {
        MultiLockGuard::lost_signal(self)
    }

    fn validity(&self) -> Duration {
        MultiLockGuard::validity(self)
    }

    fn extend(&self, lease: Duration) -> impl std::future::Future<Output = Result<()>> + Send {
        MultiLockGuard::extend(self, lease)
    }

    fn release(self) -> impl std::future::Future<Output = Result<()>> + Send {
        self.unlock()
    }
}

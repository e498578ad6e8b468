//! Leader election on a lock: a [`Leader`] (from [`Client::leader`])
//! campaigns, publishes who leads, and runs a scheduled job only while
//! leading. [`Leader`] and [`Leadership`] are also at the crate root.
//!
//! - [`Leader`]: the handle on one election (`campaign`, `run`, `watch`,
//!   `status`).
//! - [`Leadership`]: a won lead, the election's guard.
//! - [`LeaderTerm`]: one term as a [`Leader::run_with_term`] job sees it
//!   (token, loss signal, `set_identity`), without keeping the lead.
//! - [`LeaderInfo`]: who leads, as Redis records it.
//! - [`LeaderWatch`]: follows who leads, from [`Leader::watch`].
//! - [`LeaderStatus`]: what a handle's own runs and campaigns do, from
//!   [`Leader::status`].

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};

use crate::client::Client;
use crate::engine::Spec;
use crate::error::{Error, Result};
use crate::guard::{Guard, LostSignal};
use crate::lock::{Lock, LockGuard};

/// Pause before campaigning again after Redis failed.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// A leader election among processes (and tasks): at most one
/// [`Leadership`] of a name is alive at a time, as long as its lease lasts.
///
/// It is a [`Lock`] held under the watchdog lease (the client's
/// `watchdog_timeout`, renewed every third of it): a leader that crashes or
/// is paused loses the lead within one lease and a waiting candidate takes
/// it over. Every leadership has a fencing token, higher than any earlier
/// leader's: pass it to what the leader writes, so a leader that was paused
/// and resumes late cannot overwrite its successor's work.
///
/// ```no_run
/// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
/// use std::time::Duration;
///
/// let leader = client.leader("jobs:nightly").with_identity("worker-3");
/// // Runs the job every 10 s while this process leads; campaigns again
/// // after losing the lead; returns only on a non-Redis error (shutdown).
/// leader
///     .run(Duration::from_secs(10), |token| async move {
///         // ... the job, writing with `token` as its fencing token ...
///     })
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Leader {
    lock: Lock,
    identity: Arc<str>,
    /// What the `run`s of the handle and its clones do.
    status: Arc<RunStatus>,
}

/// What a handle and its clones do, as [`Leader::status`] shows it: one
/// entry per `run` and `campaign` under way (`None`: campaigning) and per
/// leadership they won that is not known lost (`Some(token)`).
#[derive(Debug)]
struct RunStatus {
    runs: std::sync::Mutex<(u64, std::collections::HashMap<u64, Option<u64>>)>,
    shown: watch::Sender<LeaderStatus>,
}

impl RunStatus {
    /// Registers an entry.
    fn start(&self, token: Option<u64>) -> u64 {
        let mut runs = crate::mutex::lock_unpoisoned(&self.runs);
        runs.0 += 1;
        let id = runs.0;
        runs.1.insert(id, token);
        self.show(&runs.1);
        id
    }

    /// Ends entry `id` (again: nothing).
    fn end(&self, id: u64) {
        let mut runs = crate::mutex::lock_unpoisoned(&self.runs);
        runs.1.remove(&id);
        self.show(&runs.1);
    }

    /// Leading when a run leads (the newest term), else campaigning when a
    /// run runs, else idle.
    fn show(&self, runs: &std::collections::HashMap<u64, Option<u64>>) {
        let now = match runs.values().flatten().max() {
            Some(&token) => LeaderStatus::Leading { token },
            None if runs.is_empty() => LeaderStatus::Idle,
            None => LeaderStatus::Campaigning,
        };
        self.shown.send_if_modified(|shown| {
            let changed = *shown != now;
            *shown = now;
            changed
        });
    }
}

/// What a candidate's [`Leader::run`] is doing: see [`Leader::status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaderStatus {
    /// `run` is not running (not called yet, returned, or dropped).
    Idle,
    /// `run` campaigns: another candidate leads, or nobody yet.
    Campaigning,
    /// `run` leads, under this leadership's fencing token.
    Leading {
        /// The leadership's fencing token (each term has its own).
        token: u64,
    },
}

impl std::fmt::Debug for Leader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leader")
            .field("name", &self.lock.name())
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A handle on the leader election `name` (no I/O). See [`Leader`].
    /// Its identity is the client's id until
    /// [`with_identity`](Leader::with_identity) says otherwise.
    pub fn leader(&self, name: &str) -> Leader {
        Leader {
            // Every campaign is an owner of its own: two campaigns of one
            // task must not both lead.
            lock: self.lock(name).non_reentrant(),
            identity: Arc::from(self.id().to_string()),
            status: Arc::new(RunStatus {
                runs: std::sync::Mutex::default(),
                shown: watch::Sender::new(LeaderStatus::Idle),
            }),
        }
    }
}

/// Who leads now, as [`Leader::current`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// The identity the leader published. `None` exactly when the lock
    /// under the election is held but no identity was published for its
    /// current grant: a candidate between winning the lock and publishing
    /// (its `campaign` has not returned yet), a grant that never becomes a
    /// term (the restart guard undoes it, or the lead is lost before the
    /// publish), or a plain [`Lock`] on the election's name. Only
    /// [`Leader::current`] reports such a grant; a [`LeaderWatch`] never
    /// does (it reports nobody leading until an identity is published), so
    /// every term a watch reports is one whose candidate published its
    /// identity. That is the last step of `campaign`: a campaign dropped
    /// (or failing) after the publish reached Redis but before its reply
    /// made no [`Leadership`], gives the lead back in the background, and
    /// its watchers hear at once that the term ended.
    pub identity: Option<String>,
    /// The fencing token of its leadership.
    pub token: Option<u64>,
    /// Time left on its lease (renewed while it leads).
    pub lease_left: Option<Duration>,
}

impl Leader {
    /// The election's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The identity this candidate publishes when it leads (a host name, an
    /// address where followers reach the leader).
    #[must_use]
    pub fn with_identity(mut self, identity: impl Into<String>) -> Leader {
        self.identity = Arc::from(identity.into());
        self
    }

    /// The identity this candidate publishes.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// An empty election name is refused in the election's words (the lock
    /// under it would say "lock").
    fn check_name(&self) -> Result<()> {
        if self.name().is_empty() {
            return Err(Error::InvalidArgument(
                "leader election name must not be empty".into(),
            ));
        }
        Ok(())
    }

    /// Waits until this candidate leads, and publishes its identity.
    /// [`status`](Leader::status) shows it campaigning meanwhile, then
    /// leading until the leadership is known lost or dropped.
    ///
    /// # Errors
    /// As [`Lock::lock`].
    ///
    /// # Cancel safety
    /// Cancel safe: a lead won in flight is given back in the background.
    pub async fn campaign(&self) -> Result<Leadership> {
        self.check_name()?;
        let _campaigning = StatusEntry::new(&self.status, None);
        loop {
            let guard = self.lock.lock().await?;
            if let Some(won) = self.publish(guard).await? {
                return Ok(won);
            }
        }
    }

    /// Waits at most `wait` to lead; `Ok(None)` when another leads
    /// throughout. A wait too long for the clock (`Duration::MAX`) waits
    /// as long as it takes, as [`Leader::campaign`].
    ///
    /// # Errors
    /// As [`Lock::try_lock`].
    ///
    /// # Cancel safety
    /// As [`Leader::campaign`].
    pub async fn try_campaign(&self, wait: Duration) -> Result<Option<Leadership>> {
        self.check_name()?;
        let _campaigning = StatusEntry::new(&self.status, None);
        // A wait too long for the clock (`Duration::MAX`) has no deadline:
        // it waits as long as `campaign`.
        let deadline = tokio::time::Instant::now().checked_add(wait);
        loop {
            let left = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(tokio::time::Instant::now())
            });
            let Some(guard) = self.lock.try_lock(left, None).await? else {
                return Ok(None);
            };
            if let Some(won) = self.publish(guard).await? {
                return Ok(Some(won));
            }
        }
    }

    /// The leadership of `guard` once its identity is published; `None`
    /// when the lead was lost before.
    async fn publish(&self, guard: LockGuard) -> Result<Option<Leadership>> {
        let published = guard.publish_identity(&self.identity).await?;
        Ok(published.then(|| Leadership::new(guard, &self.status)))
    }

    /// Who leads now; `None` when nobody does.
    ///
    /// # Errors
    /// As [`Lock::inspect`].
    pub async fn current(&self) -> Result<Option<LeaderInfo>> {
        self.check_name()?;
        let seen = self.lock.inspect().await?;
        Ok(seen.is_held().then_some(LeaderInfo {
            identity: seen.identity,
            token: seen.token,
            lease_left: seen.lease_left,
        }))
    }

    /// A live view of who leads, for any member or observer: its value is
    /// the leader now (as [`current`](Leader::current) reads it), and
    /// [`LeaderWatch::changed`] waits for the next leader (or for nobody
    /// leading). A background task keeps it fresh without polling in your
    /// code: it reads again when a new leader publishes its identity (a
    /// message on the election's channel), when the leader's lease runs out
    /// (a leader that crashed or froze: seen within one lease), and at
    /// least once per watchdog period of the client (a message lost in a
    /// reconnect). It stops when the watch is dropped.
    ///
    /// A watch reports only real terms: a grant counts once its identity is
    /// published (see [`LeaderInfo::identity`]), so a grant that never led
    /// (one a guarded client's own check gives back because the server
    /// turned out to be freshly restarted, or a plain [`Lock`] on the
    /// name) shows as nobody leading, never as a leader.
    /// The end of a term is heard at once when it is given back (resigned,
    /// dropped), and at its lease's end when the leader crashed.
    ///
    /// # Errors
    /// As [`Leader::current`]; [`Error::Shutdown`] after the client's
    /// shutdown.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing runs until it returns.
    pub async fn watch(&self) -> Result<LeaderWatch> {
        self.check_name()?;
        let named = self.lock.named();
        let client = named.client_inner();
        client.check_open()?;
        let slot = client.hub.slot(&named.key, &named.channel);
        // Subscribed before the first read: a change after it is heard.
        client.hub.ensure_subscribed(&slot).await?;
        let since = slot.wakeups.all.generation();
        let first = self.current().await?;
        let mut next = look_again_after(self, first.as_ref());
        let (tx, rx) = watch::channel(a_term(first));
        let leader = self.clone();
        let task = tokio::spawn(async move {
            let mut since = since;
            loop {
                let client = leader.lock.named().client_inner();
                tokio::select! {
                    biased;
                    // The client shuts down: `changed` answers `Shutdown`
                    // at once, not at the next look.
                    () = client.hub.closing() => return,
                    _ = slot.wakeups.all.wait(since, Instant::now() + next) => {}
                }
                since = slot.wakeups.all.generation();
                // A read in flight at the shutdown is not waited for either.
                let read = tokio::select! {
                    biased;
                    () = client.hub.closing() => return,
                    read = leader.current() => read,
                };
                next = match read {
                    Ok(read) => {
                        // Read again when an unpublished grant's lease ends
                        // (its publish, if it comes, is a message).
                        let next = look_again_after(&leader, read.as_ref());
                        let info = a_term(read);
                        // Told only when the leader changes, not its lease.
                        tx.send_if_modified(|now| {
                            let changed = now.as_ref().map(|i| (&i.identity, i.token))
                                != info.as_ref().map(|i| (&i.identity, i.token));
                            now.clone_from(&info);
                            changed
                        });
                        next
                    }
                    Err(Error::Shutdown) => return,
                    Err(e) => {
                        tracing::debug!(leader = %leader.name(), error = %e, "reading the leader failed; trying again");
                        RETRY_PAUSE
                    }
                };
                if tx.is_closed() {
                    return;
                }
            }
        });
        Ok(LeaderWatch {
            rx,
            task: task.abort_handle(),
        })
    }

    /// What this handle and its clones do, for "elected" and "lost the
    /// lead" events, whether they [`run`](Leader::run) or
    /// [`campaign`](Leader::campaign): [`Leading`](LeaderStatus::Leading)
    /// while a [`Leadership`] they won is not known lost (the newest term
    /// when several), else [`Campaigning`](LeaderStatus::Campaigning) while
    /// a `run`, `campaign` or `try_campaign` is under way, else
    /// [`Idle`](LeaderStatus::Idle). A term ends in the status the moment
    /// the client knows it is lost (the lease ran out by its clock, the
    /// watchdog found it gone) or the leadership is dropped or resigned; a
    /// `run` then shows campaigning again. A status read late skips what
    /// came between: two `Leading` with different tokens are two terms,
    /// with a loss between them.
    ///
    /// ```no_run
    /// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
    /// use redisync::leader::LeaderStatus;
    ///
    /// let leader = client.leader("jobs:nightly");
    /// let mut status = leader.status();
    /// tokio::spawn(async move {
    ///     while status.changed().await.is_ok() {
    ///         match *status.borrow_and_update() {
    ///             LeaderStatus::Leading { token } => println!("elected, token {token}"),
    ///             LeaderStatus::Campaigning => println!("not leading; campaigning"),
    ///             _ => println!("stopped"),
    ///         }
    ///     }
    /// });
    /// # Ok(()) }
    /// ```
    pub fn status(&self) -> watch::Receiver<LeaderStatus> {
        self.status.shown.subscribe()
    }

    /// Runs `job` every `every` while this candidate leads, and campaigns
    /// for the lead whenever it does not (after losing it too), until the
    /// returned future is dropped.
    ///
    /// Each run gets the leadership's fencing token. The loss of the lead
    /// always wins: it is checked before every run and while a run is in
    /// flight (a `biased` select), so a run in flight is cancelled (dropped
    /// at its next await point) the moment the loss is known, and a leader
    /// resumed after a pause longer than its lease never starts another run
    /// (its lease clock has run out). Ticks missed while a run was slow or
    /// the process paused are not made up in a burst: the next run comes
    /// `every` after the late one. The token still matters: a run already
    /// past its last await point when the lead goes finishes, so the
    /// resource must refuse writes older than the newest token it has seen
    /// (see [`Fenced`](crate::fenced::Fenced)).
    ///
    /// A Redis failure while campaigning is logged and retried after a
    /// second. While the connection is down
    /// ([`ConnectionState::Suspended`](crate::ConnectionState::Suspended)),
    /// runs go on until the lease clock says the lead is lost (nobody else
    /// is granted it before then); across a Redis restart without
    /// persistence only the client's
    /// [`restart_guard`](crate::ClientBuilder::restart_guard) keeps a second
    /// leader out meanwhile.
    ///
    /// The period is whole milliseconds, rounded up (1 ns runs the job
    /// every 1 ms).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero period or one over a year
    /// (366 days), [`Error::Shutdown`]
    /// after the client's shutdown; never returns otherwise.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping it drops a run in flight and gives the lead
    /// back in the background.
    pub async fn run<F, Fut>(&self, every: Duration, mut job: F) -> Result<Infallible>
    where
        F: FnMut(u64) -> Fut,
        Fut: Future<Output = ()>,
    {
        self.run_with_term(every, move |term| job(term.token()))
            .await
    }

    /// [`run`](Leader::run), with each run given a [`LeaderTerm`] rather
    /// than only its token: the job can publish another identity
    /// ([`LeaderTerm::set_identity`]), hand the loss signal
    /// ([`LeaderTerm::lost_signal`]) to work it starts, or read the time
    /// left. The leadership stays `run`'s: it is given back when the lead
    /// is lost or `run` is dropped, whatever the job kept (a kept term is
    /// lost by then, and its calls answer [`Error::NotHeld`]).
    ///
    /// ```no_run
    /// # async fn demo(client: redisync::Client) -> redisync::Result<()> {
    /// use std::time::Duration;
    ///
    /// let leader = client.leader("jobs:nightly").with_identity("worker-3");
    /// leader
    ///     .run_with_term(Duration::from_secs(10), |term| async move {
    ///         // Followers reach the leader at the address of this term.
    ///         let _ = term.set_identity("10.0.0.3:8080").await;
    ///         // ... the job, writing with `term.token()`, stopping when
    ///         // `term.lost_signal()` fires ...
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`run`](Leader::run).
    ///
    /// # Cancel safety
    /// As [`run`](Leader::run).
    pub async fn run_with_term<F, Fut>(&self, every: Duration, mut job: F) -> Result<Infallible>
    where
        F: FnMut(LeaderTerm) -> Fut,
        Fut: Future<Output = ()>,
    {
        // Whole milliseconds, as leases: 1 ns runs the job every 1 ms,
        // not in a hot loop.
        let every = Duration::from_millis(
            u64::try_from(crate::redis::script::checked_ms("run period", every)?)
                .unwrap_or(u64::MAX),
        );
        self.check_name()?;
        // Campaigning between terms; ended however `run` ends: returned,
        // or its future dropped. Each term shows as its leadership's entry.
        let _running = StatusEntry::new(&self.status, None);
        loop {
            let leadership = match self.campaign().await {
                Ok(won) => won,
                Err(e) if e.redis_kind().is_some() => {
                    tracing::warn!(leader = %self.name(), error = %e, "campaign failed; retrying");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let leadership = Arc::new(leadership);
            lead(&leadership, every, &mut job).await;
            // Lost: its release (if any) runs in the background. The job's
            // terms hold it weakly: this is its last strong reference.
            drop(leadership);
        }
    }
}

/// An entry of [`RunStatus`] for as long as it lives.
struct StatusEntry {
    status: Arc<RunStatus>,
    id: u64,
}

impl StatusEntry {
    fn new(status: &Arc<RunStatus>, token: Option<u64>) -> StatusEntry {
        StatusEntry {
            status: status.clone(),
            id: status.start(token),
        }
    }
}

impl Drop for StatusEntry {
    fn drop(&mut self) {
        self.status.end(self.id);
    }
}

/// Runs `job` every `every` until `leadership` is lost.
async fn lead<F, Fut>(leadership: &Arc<Leadership>, every: Duration, job: &mut F)
where
    F: FnMut(LeaderTerm) -> Fut,
    Fut: Future<Output = ()>,
{
    let term = LeaderTerm {
        token: leadership.token(),
        lost: leadership.lost_signal(),
        leadership: Arc::downgrade(leadership),
        name: Arc::from(leadership.guard.lock_handle().name()),
    };
    let lost = leadership.lost_signal();
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = lost.clone() => return,
            _ = ticks.tick() => {}
        }
        // By the local lease clock: after a pause the watchdog may not have
        // run yet, but the lease is known to have ended.
        if leadership.is_lost() {
            return;
        }
        tokio::select! {
            biased;
            () = lost.clone() => return,
            () = job(term.clone()) => {}
        }
    }
}

/// What a watch reports of a read: a term only once its identity is
/// published, which a candidate does before its `campaign` returns the
/// [`Leadership`]. A grant without one is no leader (yet): a candidate
/// between winning and publishing, a grant the restart guard undoes, or a
/// plain [`Lock`] taken on the election's name.
fn a_term(read: Option<LeaderInfo>) -> Option<LeaderInfo> {
    read.filter(|info| info.identity.is_some())
}

/// When a watch reads again without a message: when the leader's lease
/// runs out (a crashed leader's), and at least once per watchdog period.
fn look_again_after(leader: &Leader, info: Option<&LeaderInfo>) -> Duration {
    crate::engine::hub::look_again_after(
        info.and_then(|i| i.lease_left),
        leader.lock.client().watchdog_timeout(),
    )
}

/// Who leads an election, kept fresh in the background (see
/// [`Leader::watch`]). Dropping it stops the background task.
#[derive(Debug)]
pub struct LeaderWatch {
    rx: watch::Receiver<Option<LeaderInfo>>,
    task: tokio::task::AbortHandle,
}

impl LeaderWatch {
    /// The leader as last read; `None` when nobody led then.
    pub fn current(&self) -> Option<LeaderInfo> {
        self.rx.borrow().clone()
    }

    /// Waits until the leader changes (another identity or token, or nobody
    /// leading) and returns the new one.
    ///
    /// # Errors
    /// [`Error::Shutdown`] when the watch can no longer be kept (its task
    /// ended with the client's shutdown).
    ///
    /// # Cancel safety
    /// Cancel safe: a change it did not return is returned by the next call.
    pub async fn changed(&mut self) -> Result<Option<LeaderInfo>> {
        self.rx.changed().await.map_err(|_| Error::Shutdown)?;
        Ok(self.rx.borrow_and_update().clone())
    }
}

impl Drop for LeaderWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// This candidate leads while this lives (see [`Leader`]). Dropping it
/// resigns in the background; [`resign`](Leadership::resign) waits.
#[must_use = "if unused the lead is given back immediately"]
#[derive(Debug)]
pub struct Leadership {
    guard: LockGuard,
    /// Kept for its drop: the status shows the term while this lives.
    _term: TermShown,
}

/// A leadership's entry in the status of the handle that won it: ended
/// when the leadership is dropped or (by `watcher`) the moment it is known
/// lost.
#[derive(Debug)]
struct TermShown {
    status: Arc<RunStatus>,
    entry: u64,
    watcher: tokio::task::AbortHandle,
}

impl Drop for TermShown {
    fn drop(&mut self) {
        self.watcher.abort();
        self.status.end(self.entry);
    }
}

impl Leadership {
    /// A leadership shown as leading in `status` until it is lost.
    fn new(guard: LockGuard, status: &Arc<RunStatus>) -> Leadership {
        let entry = status.start(Some(guard.fencing_token()));
        let lost = guard.lost_signal();
        let watcher = {
            let status = status.clone();
            tokio::spawn(async move {
                lost.await;
                status.end(entry);
            })
        };
        Leadership {
            guard,
            _term: TermShown {
                status: status.clone(),
                entry,
                watcher: watcher.abort_handle(),
            },
        }
    }

    /// The fencing token of this leadership: higher than every earlier
    /// leader's of the name.
    pub fn token(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// Resolves when this candidate is known to have lost the lead.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn lost(&self) {
        self.guard.lost().await;
    }

    /// Whether the lead is known to be lost.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// An owned signal that fires when the lead is lost or given back.
    pub fn lost_signal(&self) -> LostSignal {
        self.guard.lost_signal()
    }

    /// Publishes another identity (a new address, a changed value) while
    /// this candidate leads; watchers see it at once.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the lead was lost; [`Error::Redis`];
    /// [`Error::Shutdown`] after [`Client::shutdown`] (nothing is sent).
    ///
    /// # Cancel safety
    /// Cancel safe: one script, done or not done.
    pub async fn set_identity(&self, identity: &str) -> Result<()> {
        if self.guard.publish_identity(identity).await? {
            Ok(())
        } else {
            Err(Error::NotHeld {
                name: self.guard.lock_handle().name().to_owned(),
            })
        }
    }

    /// Gives the lead back now: a waiting candidate takes it. Watchers
    /// hear of it at once (nobody leads, or the next leader), as they do
    /// of a leadership dropped (given back in the background).
    ///
    /// # Errors
    /// [`Error::NotHeld`] when it was lost already; [`Error::Redis`].
    pub async fn resign(self) -> Result<()> {
        // The release tells the watchers (a published identity's release
        // publishes to the election's channel).
        self.guard.unlock().await
    }
}

impl Guard for Leadership {
    type Error = Error;

    fn fencing_token(&self) -> u64 {
        self.guard.fencing_token()
    }

    fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    fn lost_signal(&self) -> LostSignal {
        self.guard.lost_signal()
    }

    fn validity(&self) -> Duration {
        self.guard.validity()
    }

    fn extend(&self, lease: Duration) -> impl Future<Output = Result<()>> + Send {
        Guard::extend(&self.guard, lease)
    }

    fn release(self) -> impl Future<Output = Result<()>> + Send {
        self.guard.unlock()
    }
}

/// A term of [`Leader::run_with_term`], as its job sees it: the token, the
/// loss signal and the identity of the leadership `run` holds. It does not
/// keep the lead: `run` gives the leadership back when the lead is lost or
/// `run` is dropped, and a term kept past that is lost.
#[derive(Debug, Clone)]
pub struct LeaderTerm {
    token: u64,
    lost: LostSignal,
    leadership: std::sync::Weak<Leadership>,
    /// The election's name, for `NotHeld`.
    name: Arc<str>,
}

impl LeaderTerm {
    /// The term's fencing token: higher than every earlier leader's.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Whether the term is known to be over (the lead lost, or given back
    /// by `run`).
    pub fn is_lost(&self) -> bool {
        self.lost.is_lost()
    }

    /// An owned signal that fires when the term is over.
    pub fn lost_signal(&self) -> LostSignal {
        self.lost.clone()
    }

    /// Time left of the lead by this client's clock; zero once the term
    /// is over.
    pub fn validity(&self) -> Duration {
        self.leadership
            .upgrade()
            .map_or(Duration::ZERO, |l| l.validity())
    }

    /// Publishes another identity while the term lasts, as
    /// [`Leadership::set_identity`].
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the term is over; else as
    /// [`Leadership::set_identity`].
    ///
    /// # Cancel safety
    /// Cancel safe: one script, done or not done.
    pub async fn set_identity(&self, identity: &str) -> Result<()> {
        let Some(leadership) = self.leadership.upgrade() else {
            return Err(Error::NotHeld {
                name: self.name.to_string(),
            });
        };
        leadership.set_identity(identity).await
    }
}

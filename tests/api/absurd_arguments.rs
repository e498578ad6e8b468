//! Every duration and count argument of the public API with 0, 1 ns (or 1)
//! and the largest value (`Duration::MAX`, `u32::MAX`, `u64::MAX`), against
//! real redis-server processes: nothing panics, a value the library cannot
//! honour is refused with [`Error::InvalidArgument`] naming the setting and
//! its bound, a wait of `Duration::MAX` waits (forever), and nothing spins.
//!
//! Each case runs in a task of its own, so a panic is caught as the task's
//! `JoinError` and reported with the case's name; each test collects every
//! failing case before it fails, so one run lists them all.
//!
//! "Nothing spins" is measured on the server: the scripts it ran (`INFO
//! commandstats`, `EVALSHA` and `EVAL`: every attempt, look, renewal and
//! release is one script; the commands a script runs are counted apart and
//! not here) while a waiting call is pending for [`WINDOW`] must stay
//! within [`PARKED_BOUND`]. A parked waiter sends its attempt and then
//! looks again only when a holder's lease may have ended or (queued, a
//! hold may be handed to it) every quarter of its own lease, but at most
//! every 10 ms: 50 looks in 500 ms at the very worst. Before that floor a
//! waiter with a 1 ms lease (1 ns rounds up to it) ran about 350 scripts
//! in the window (about 2,000 commands), one every 1.4 ms.

// Each test is one flat list of cases, in the order of the API (`s` the
// sweep, `a` and `b` two clients, `v` and `d` the value's name and value).
#![allow(clippy::too_many_lines, clippy::many_single_char_names)]

use crate::common;

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::ClientLike;
use redisync::__private::{self, RestartGuard};
use redisync::{Client, Error};
use redisync_redlock::{MultiLock, Redlock};
use redisync_testkit::RedisNodes;

const ZERO: Duration = Duration::ZERO;
const NS: Duration = Duration::from_nanos(1);
const MAX: Duration = Duration::MAX;
/// The three values every duration argument is tried with.
const DURATIONS: [(&str, Duration); 3] = [("0", ZERO), ("1ns", NS), ("MAX", MAX)];
/// How long a waiting call is watched (pending, and quiet).
const WINDOW: Duration = Duration::from_millis(500);
/// Most scripts a parked waiter may run in [`WINDOW`] (see the module
/// docs): its attempt, and looks at most every 10 ms (50), with slack.
const PARKED_BOUND: u64 = 75;
/// Most scripts a Redlock over 3 nodes waiting at its lowest retry delay
/// (20 ms, uniform pauses of 10 ms on average) may run in [`WINDOW`]: 50
/// attempts of at most 2 scripts on each of 3 nodes, twice over for slack.
const REDLOCK_FLOOR_BOUND: u64 = 600;
/// A call that should answer at once must answer within this (a hang).
const ANSWER: Duration = Duration::from_secs(10);

/// What a case must do.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// `Ok`.
    Ok,
    /// `Err(InvalidArgument)` whose message contains every one of these.
    Refused(&'static [&'static str]),
    /// Anything but a panic or a hang (`Ok` or an error).
    Answers,
    /// Still pending after [`WINDOW`], running at most [`PARKED_BOUND`]
    /// scripts meanwhile.
    Waits,
    /// Answers (anything but `InvalidArgument`) or is still pending after
    /// [`WINDOW`]; either way runs at most [`PARKED_BOUND`] scripts.
    Bounded,
}

/// The message of an `InvalidArgument`, whichever crate's error.
trait Invalid {
    fn invalid(&self) -> Option<&str>;
}

impl Invalid for Error {
    fn invalid(&self) -> Option<&str> {
        match self {
            Error::InvalidArgument(m) => Some(m),
            _ => None,
        }
    }
}

impl Invalid for redisync_redlock::Error {
    fn invalid(&self) -> Option<&str> {
        match self {
            redisync_redlock::Error::InvalidArgument(m) => Some(m),
            redisync_redlock::Error::Lock(e) => e.invalid(),
            _ => None,
        }
    }
}

/// Runs cases against one server, collecting what failed.
struct Sweep {
    /// Where commands are counted (`None`: several servers, counted by
    /// `nodes`).
    admins: Vec<fred::clients::Client>,
    failures: Vec<String>,
}

impl Sweep {
    fn new(admins: Vec<fred::clients::Client>) -> Sweep {
        Sweep {
            admins,
            failures: Vec::new(),
        }
    }

    /// Scripts the servers ran so far (`EVALSHA`, `EVAL`).
    async fn calls(&self) -> u64 {
        let mut total = 0;
        for admin in &self.admins {
            let info: String = admin
                .info(Some(fred::types::InfoKind::CommandStats))
                .await
                .expect("INFO");
            total += info
                .lines()
                .filter_map(|l| {
                    let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                    let calls = rest.strip_prefix("calls=")?.split(',').next()?;
                    name.starts_with("eval")
                        .then_some(calls.parse::<u64>().ok()?)
                })
                .sum::<u64>();
        }
        total
    }

    /// Runs `call` in a task of its own and checks it does what `expect`
    /// says.
    async fn case<T, E, F>(&mut self, case: impl Into<String>, expect: Expect, call: F)
    where
        T: Send + 'static,
        E: Invalid + Display + Send + 'static,
        F: Future<Output = Result<T, E>> + Send + 'static,
    {
        let case = case.into();
        let before = self.calls().await;
        let bound = match expect {
            Expect::Waits | Expect::Bounded => WINDOW,
            _ => ANSWER,
        };
        let task = tokio::spawn(async move { tokio::time::timeout(bound, call).await });
        let outcome = match task.await {
            Err(e) if e.is_panic() => {
                let p = e.into_panic();
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                self.failures.push(format!("{case}: PANIC: {msg}"));
                return;
            }
            Err(e) => panic!("{case}: task failed: {e}"),
            Ok(outcome) => outcome,
        };
        let sent = self.calls().await.saturating_sub(before);
        let failure = match (expect, outcome) {
            (Expect::Waits | Expect::Bounded, _) if sent > PARKED_BOUND => Some(format!(
                "BUSY LOOP: {sent} scripts in {WINDOW:?} (bound {PARKED_BOUND})"
            )),
            (Expect::Waits | Expect::Bounded, Err(_))
            | (Expect::Bounded | Expect::Ok | Expect::Answers, Ok(Ok(_))) => None,
            (Expect::Waits, Ok(Ok(_))) => Some("answered Ok instead of waiting".to_owned()),
            (Expect::Waits, Ok(Err(e))) => Some(format!("failed instead of waiting: {e}")),
            (_, Err(_)) => Some(format!("HANG: no answer within {ANSWER:?}")),
            (Expect::Answers | Expect::Bounded, Ok(Err(e))) if e.invalid().is_none() => None,
            (Expect::Answers | Expect::Ok | Expect::Bounded, Ok(Err(e))) => {
                Some(format!("failed: {e}"))
            }
            (Expect::Refused(words), Ok(Err(e))) => match e.invalid() {
                Some(m) if words.iter().all(|w| m.contains(w)) => None,
                _ => Some(format!("refused, but not naming {words:?}: {e}")),
            },
            (Expect::Refused(_), Ok(Ok(_))) => Some("accepted; should be refused".to_owned()),
        };
        if let Some(f) = failure {
            self.failures.push(format!("{case}: {f}"));
        }
    }

    fn finish(self, what: &str) {
        assert!(
            self.failures.is_empty(),
            "{what}: {} case(s) failed:\n{}",
            self.failures.len(),
            self.failures.join("\n")
        );
    }
}

/// The expectation of a lease argument `d`: leases are whole milliseconds
/// (1 ns is taken as 1 ms), zero and over a year are refused.
fn lease_expect(d: Duration) -> Expect {
    if d.is_zero() {
        Expect::Refused(&["lease", "zero"])
    } else if d == MAX {
        Expect::Refused(&["lease", "year"])
    } else {
        Expect::Ok
    }
}

fn builder(env: &common::Env) -> redisync::ClientBuilder {
    Client::builder(&env.server.url())
}

/// Connects with `b` and shuts down (boxed: a connect is a large future).
fn connect(
    b: redisync::ClientBuilder,
) -> std::pin::Pin<Box<dyn Future<Output = redisync::Result<()>> + Send>> {
    Box::pin(async move {
        let client = b.connect().await?;
        client.shutdown().await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_builder_settings() {
    let env = common::Env::start().await;
    let mut s = Sweep::new(vec![env.admin.clone()]);
    for (v, d) in DURATIONS {
        let words: &'static [&str] = if v == "MAX" {
            &["watchdog_timeout", "year"]
        } else {
            &["watchdog_timeout", "at least 30 ms"]
        };
        s.case(
            format!("watchdog_timeout({v})"),
            Expect::Refused(words),
            connect(builder(&env).watchdog_timeout(d)),
        )
        .await;
        let bound: &'static [&str] = if v == "MAX" {
            &["fence_ttl", "year"]
        } else {
            &["fence_ttl", "at least 1 s"]
        };
        s.case(
            format!("fence_ttl({v})"),
            Expect::Refused(bound),
            connect(builder(&env).fence_ttl(d)),
        )
        .await;
        let (expect, connect_expect) = match v {
            "0" => (
                Expect::Refused(&["command_timeout", "zero"]),
                Expect::Refused(&["connect_timeout", "zero"]),
            ),
            // A 1 ns connect times out: an error, not a panic.
            "1ns" => (Expect::Answers, Expect::Answers),
            _ => (
                Expect::Refused(&["command_timeout", "year"]),
                Expect::Refused(&["connect_timeout", "year"]),
            ),
        };
        s.case(
            format!("command_timeout({v})"),
            expect,
            connect(builder(&env).command_timeout(d)),
        )
        .await;
        s.case(
            format!("connect_timeout({v})"),
            connect_expect,
            connect(builder(&env).connect_timeout(d)),
        )
        .await;
        let expect = match v {
            "0" => Expect::Refused(&["max_lease", "zero"]),
            // The default watchdog timeout (30 s) is above it.
            "1ns" => Expect::Refused(&["watchdog_timeout", "max_lease"]),
            _ => Expect::Refused(&["max_lease", "year"]),
        };
        s.case(
            format!("restart_guard({v})"),
            expect,
            connect(builder(&env).restart_guard(d)),
        )
        .await;
        let expect = if v == "1ns" {
            Expect::Ok
        } else {
            Expect::Refused(&["replica_sync", "timeout"])
        };
        s.case(
            format!("replica_sync(1, {v})"),
            expect,
            connect(builder(&env).replica_sync(1, d)),
        )
        .await;
    }
    for (v, n) in [("0", 0), ("1", 1), ("MAX", u32::MAX)] {
        let expect = if n == 0 {
            Expect::Refused(&["replica_sync", "at least one replica"])
        } else {
            Expect::Ok
        };
        s.case(
            format!("replica_sync({v}, 100ms)"),
            expect,
            connect(builder(&env).replica_sync(n, Duration::from_millis(100))),
        )
        .await;
    }

    // A 1 ns command timeout: every command times out. Acquisitions fail
    // (an error, not a panic) and their compensations do not spin.
    let quick = builder(&env)
        .command_timeout(NS)
        .connect()
        .await
        .expect("connect with a 1 ns command timeout");
    let lock = quick.lock("quick");
    s.case(
        "command_timeout(1ns): try_lock(0)",
        Expect::Answers,
        async move { lock.try_lock(ZERO, None).await.map(drop) },
    )
    .await;
    let lock = quick.lock("quick");
    // `lock()` may wait for the undo of its own attempt (an unknown
    // outcome) as long as that attempt's lease: bounded, never spinning.
    s.case(
        "command_timeout(1ns): lock()",
        Expect::Bounded,
        async move { lock.lock().await.map(drop) },
    )
    .await;
    s.case(
        "command_timeout(1ns): shutdown",
        Expect::Answers,
        async move { quick.shutdown().await },
    )
    .await;

    // A 1 ns WAIT timeout is 1 ms, not `WAIT n 0` (which blocks forever).
    let synced = builder(&env)
        .replica_sync(1, NS)
        .connect()
        .await
        .expect("connect");
    let lock = synced.lock("synced");
    s.case(
        "replica_sync(1, 1ns): try_lock(0) answers (no replica: refused)",
        Expect::Answers,
        async move {
            let started = tokio::time::Instant::now();
            let r = lock.try_lock(ZERO, None).await.map(drop);
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "WAIT blocked for {:?}",
                started.elapsed()
            );
            r
        },
    )
    .await;
    let synced = builder(&env)
        .replica_sync(u32::MAX, Duration::from_millis(10))
        .connect()
        .await
        .expect("connect");
    let lock = synced.lock("synced");
    s.case(
        "replica_sync(MAX, 10ms): try_lock(0)",
        Expect::Answers,
        async move { lock.try_lock(ZERO, None).await.map(drop) },
    )
    .await;
    s.finish("ClientBuilder");
}

/// Runs the lease and wait sweep of one lock kind: `try_lock(wait, lease)`
/// on a free lock, `lock_with_lease`, the guard's `extend`, and waits while
/// another client holds it.
macro_rules! sweep_lock_kind {
    ($s:expr, $what:literal, $handle:expr, $other:expr) => {{
        let s: &mut Sweep = $s;
        for (v, d) in DURATIONS {
            let h = $handle;
            s.case(
                format!("{}.lock_with_lease({v})", $what),
                lease_expect(d),
                async move { h.lock_with_lease(d).await.map(drop) },
            )
            .await;
            let h = $handle;
            s.case(
                format!("{}.try_lock({v}, None)", $what),
                Expect::Ok,
                async move {
                    h.try_lock(d, None)
                        .await
                        .map(|g| assert!(g.is_some(), "a free lock"))
                },
            )
            .await;
            let h = $handle;
            s.case(
                format!("{}.try_lock(1s, Some({v}))", $what),
                lease_expect(d),
                async move {
                    h.try_lock(Duration::from_secs(1), Some(d))
                        .await
                        .map(|g| assert!(g.is_some(), "a free lock"))
                },
            )
            .await;
            let h = $handle;
            let guard = h.lock().await.expect("lock");
            s.case(
                format!("{}: guard.extend({v})", $what),
                lease_expect(d),
                async move {
                    let r = guard.extend(d).await;
                    drop(guard);
                    r
                },
            )
            .await;
        }
        // Held by another client: a zero or 1 ns wait answers `None`, MAX
        // waits (forever), whatever the lease, without spinning.
        let held = $other.lock().await.expect("the other client locks");
        for (v, d) in DURATIONS {
            let h = $handle;
            let expect = if d == MAX { Expect::Waits } else { Expect::Ok };
            s.case(
                format!("{} held: try_lock({v}, None)", $what),
                expect,
                async move {
                    h.try_lock(d, None)
                        .await
                        .map(|g| assert!(g.is_none(), "held by another"))
                },
            )
            .await;
        }
        for (v, lease) in [("1ns", NS), ("1s", Duration::from_secs(1))] {
            let h = $handle;
            s.case(
                format!("{} held: try_lock(MAX, Some({v}))", $what),
                Expect::Waits,
                async move { h.try_lock(MAX, Some(lease)).await.map(drop) },
            )
            .await;
        }
        drop(held);
    }};
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_fair_lock_and_rw_lock_waits_and_leases() {
    let env = common::Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    let mut s = Sweep::new(vec![env.admin.clone()]);
    sweep_lock_kind!(&mut s, "Lock", a.lock("l"), b.lock("l"));
    sweep_lock_kind!(&mut s, "FairLock", a.fair_lock("f"), b.fair_lock("f"));
    sweep_lock_kind!(
        &mut s,
        "RwLock.write",
        a.rw_lock("w").write(),
        b.rw_lock("w").write()
    );
    sweep_lock_kind!(
        &mut s,
        "RwLock.read",
        a.rw_lock("r").read(),
        b.rw_lock("r").write()
    );
    for (v, d) in DURATIONS {
        let expect = if d == MAX {
            Expect::Refused(&["queue lease", "year"])
        } else {
            Expect::Refused(&["queue lease", "at least 30ms"])
        };
        let f = a.fair_lock("q").with_queue_lease(d);
        s.case(
            format!("FairLock.with_queue_lease({v})"),
            expect,
            async move { f.lock().await.map(drop) },
        )
        .await;
    }
    for (v, t) in [("0", 0), ("1", 1), ("MAX", u64::MAX)] {
        // Tokens are exact integers in Lua: 2^53 and above are refused.
        let token_expect = if t == u64::MAX {
            Expect::Refused(&["fencing token", "2^5"])
        } else {
            Expect::Answers
        };
        let l = a.lock("tokens");
        s.case(
            format!("Lock.try_lock_with_min_token(0, None, {v})"),
            // A bound more than 1 s ahead of the server clock is ignored
            // (documented).
            Expect::Answers,
            async move {
                __private::try_lock_with_min_token(&l, ZERO, None, t)
                    .await
                    .map(drop)
            },
        )
        .await;
        let l = a.lock("tokens");
        s.case(
            format!("Lock.advance_fencing_token({v})"),
            token_expect,
            async move { __private::advance_fencing_token(&l, t).await.map(drop) },
        )
        .await;
        let f = a.fenced("fenced");
        s.case(
            format!("Fenced.write_with_token({v})"),
            token_expect,
            async move { f.write_with_token(t, b"v").await.map(drop) },
        )
        .await;
        let f = a.fenced("fenced");
        s.case(
            format!("Fenced.claim_with_token({v})"),
            token_expect,
            async move { f.claim_with_token(t).await.map(drop) },
        )
        .await;
    }
    s.finish("Lock, FairLock, RwLock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_permits_waits_and_leases() {
    let env = common::Env::start().await;
    let a = env.client().await;
    let mut s = Sweep::new(vec![env.admin.clone()]);
    let counts = [("0", 0u32), ("1", 1), ("MAX", u32::MAX)];
    for (v, n) in counts {
        // A semaphore has at least one permit.
        let zero = Expect::Refused(&["at least one permit"]);
        let sem = a.semaphore(&format!("set{v}"));
        s.case(
            format!("Semaphore.try_set_permits({v})"),
            if n == 0 { zero } else { Expect::Answers },
            async move { sem.try_set_permits(n).await.map(drop) },
        )
        .await;
        let sem = a.semaphore(&format!("set{v}"));
        s.case(
            format!("Semaphore.set_permits({v})"),
            if n == 0 { zero } else { Expect::Answers },
            async move { sem.set_permits(n).await },
        )
        .await;
        let sem = a.semaphore(&format!("with{v}")).with_permits(n);
        s.case(
            format!("Semaphore.with_permits({v}).try_acquire(1, 0)"),
            if n == 0 {
                Expect::Refused(&["with_permits(0)", "at least one"])
            } else {
                Expect::Answers
            },
            async move { sem.try_acquire(1, ZERO).await.map(drop) },
        )
        .await;
        let sem = a.semaphore("big").with_permits(u32::MAX);
        s.case(
            format!("Semaphore(MAX permits).try_acquire({v}, 0)"),
            if n == 0 {
                Expect::Refused(&["at least one permit"])
            } else {
                Expect::Answers
            },
            async move { sem.try_acquire(n, ZERO).await.map(drop) },
        )
        .await;
    }
    for (v, delta) in [("MIN", i64::MIN), ("0", 0), ("1", 1), ("MAX", i64::MAX)] {
        let sem = a.semaphore("add").with_permits(1);
        s.case(
            format!("Semaphore.add_permits({v})"),
            if delta == 0 {
                Expect::Refused(&["at least one permit"])
            } else {
                Expect::Answers
            },
            async move { sem.add_permits(delta).await.map(drop) },
        )
        .await;
    }
    for (v, d) in DURATIONS {
        let sem = a.semaphore("free").with_permits(2);
        s.case(
            format!("Semaphore.try_acquire(1, {v})"),
            Expect::Ok,
            async move { sem.try_acquire(1, d).await.map(|p| assert!(p.is_some())) },
        )
        .await;
        let sem = a.semaphore("free").with_permits(2);
        s.case(
            format!("Semaphore.acquire_with_lease(1, {v})"),
            lease_expect(d),
            async move { sem.acquire_with_lease(1, d).await.map(drop) },
        )
        .await;
        let sem = a.semaphore("free").with_permits(2);
        s.case(
            format!("Semaphore.try_acquire_with_lease(1, 1s, {v})"),
            lease_expect(d),
            async move {
                sem.try_acquire_with_lease(1, Duration::from_secs(1), d)
                    .await
                    .map(drop)
            },
        )
        .await;
        let permit = a
            .semaphore("free")
            .with_permits(2)
            .acquire(1)
            .await
            .expect("acquire");
        s.case(
            format!("SemaphorePermit.extend({v})"),
            lease_expect(d),
            async move { permit.extend(d).await },
        )
        .await;
    }
    // Exhausted by another client: waits.
    let b = env.client().await;
    let taken = b
        .semaphore("full")
        .with_permits(1)
        .acquire(1)
        .await
        .expect("acquire");
    for (v, d) in DURATIONS {
        let sem = a.semaphore("full").with_permits(1);
        let expect = if d == MAX { Expect::Waits } else { Expect::Ok };
        s.case(
            format!("Semaphore exhausted: try_acquire(1, {v})"),
            expect,
            async move { sem.try_acquire(1, d).await.map(|p| assert!(p.is_none())) },
        )
        .await;
    }
    let sem = a.semaphore("full").with_permits(1);
    s.case(
        "Semaphore exhausted: try_acquire_with_lease(1, MAX, 1ns)",
        Expect::Waits,
        async move { sem.try_acquire_with_lease(1, MAX, NS).await.map(drop) },
    )
    .await;
    drop(taken);
    s.finish("Semaphore");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latch_leader_fenced_and_restart_guard() {
    let env = common::Env::start().await;
    let a = env.client().await;
    let b = env.client().await;
    let mut s = Sweep::new(vec![env.admin.clone()]);
    for (v, n) in [("0", 0u64), ("1", 1), ("MAX", u64::MAX)] {
        let latch = a.count_down_latch(&format!("count{v}"));
        let expect = if n == 1 {
            Expect::Ok
        } else {
            Expect::Refused(&["latch count", "2^53"])
        };
        s.case(
            format!("CountDownLatch.try_set_count({v}, 10s)"),
            expect,
            async move { latch.try_set_count(n, Duration::from_secs(10)).await },
        )
        .await;
    }
    for (v, d) in DURATIONS {
        let latch = a.count_down_latch(&format!("ttl{v}"));
        let expect = match v {
            "0" => Expect::Refused(&["latch TTL", "zero"]),
            "1ns" => Expect::Ok,
            _ => Expect::Refused(&["latch TTL", "year"]),
        };
        s.case(
            format!("CountDownLatch.try_set_count(1, {v})"),
            expect,
            async move { latch.try_set_count(1, d).await },
        )
        .await;
    }
    a.count_down_latch("closed")
        .try_set_count(1, Duration::from_mins(1))
        .await
        .expect("set");
    for (v, d) in DURATIONS {
        let latch = a.count_down_latch("closed");
        let expect = if d == MAX { Expect::Waits } else { Expect::Ok };
        s.case(
            format!("CountDownLatch.wait_timeout({v}) on a closed latch"),
            expect,
            async move { latch.wait_timeout(d).await.map(|open| assert!(!open)) },
        )
        .await;
    }

    for (v, d) in DURATIONS {
        let leader = a.leader(&format!("free{v}"));
        s.case(
            format!("Leader.try_campaign({v}) alone"),
            Expect::Ok,
            async move {
                leader
                    .try_campaign(d)
                    .await
                    .map(|l| assert!(l.is_some(), "nobody else campaigns"))
            },
        )
        .await;
    }
    let leads = b.leader("taken").campaign().await.expect("campaign");
    for (v, d) in DURATIONS {
        let leader = a.leader("taken");
        let expect = if d == MAX { Expect::Waits } else { Expect::Ok };
        s.case(
            format!("Leader.try_campaign({v}) while another leads"),
            expect,
            async move { leader.try_campaign(d).await.map(|l| assert!(l.is_none())) },
        )
        .await;
    }
    drop(leads);
    for (v, d) in DURATIONS {
        let leader = a.leader(&format!("run{v}"));
        let expect = match v {
            "0" => Expect::Refused(&["run period", "zero"]),
            "1ns" => Expect::Waits,
            _ => Expect::Refused(&["run period", "year"]),
        };
        let runs = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = runs.clone();
        s.case(format!("Leader.run({v})"), expect, async move {
            leader
                .run(d, move |_| {
                    counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    async {}
                })
                .await
        })
        .await;
        // A period is whole milliseconds: 1 ns runs the job every 1 ms,
        // not in a hot loop.
        let runs = runs.load(std::sync::atomic::Ordering::Relaxed);
        if runs > 1 + u64::try_from(WINDOW.as_millis()).expect("small") {
            s.failures.push(format!(
                "Leader.run({v}): HOT LOOP: ran its job {runs} times in {WINDOW:?}"
            ));
        }
    }

    // A restart guard built by hand, with the largest values.
    for (v, d) in DURATIONS {
        let guard = Arc::new(RestartGuard::new(d));
        let lock = __private::with_restart_guard(&a.lock(&format!("guarded{v}")), guard.clone());
        s.case(
            format!("Lock.with_restart_guard(RestartGuard::new({v})).try_lock(0, 1s)"),
            Expect::Answers,
            async move {
                lock.try_lock(ZERO, Some(Duration::from_millis(10)))
                    .await
                    .map(drop)
            },
        )
        .await;
        s.case(
            format!("RestartGuard::new({v}): judge and is_proven_old_on at u64::MAX"),
            Expect::Ok,
            async move {
                guard.judge(u64::MAX, u64::MAX, MAX);
                guard.judge(u64::MAX, 0, ZERO);
                let _ = guard.is_proven_old_on(u64::MAX);
                guard
                    .check_lease("lease", MAX)
                    .or_else(|_| guard.check_lease("lease", ZERO))
            },
        )
        .await;
    }
    s.finish("CountDownLatch, Leader, RestartGuard");
}

/// Three nodes, one client on each for `a` and for `b`.
async fn redlock_clients(nodes: &RedisNodes) -> Vec<Client> {
    let mut out = Vec::new();
    for url in nodes.urls() {
        out.push(Client::connect(&url).await.expect("connect"));
    }
    out
}

fn redlock_builder(clients: &[Client], name: &str) -> redisync_redlock::RedlockBuilder {
    Redlock::builder(clients.iter().map(|c| c.lock(name)).collect()).max_lease(ZERO)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_and_multi_lock() {
    let nodes = RedisNodes::start(3).await;
    let mut admins = Vec::new();
    for url in nodes.urls() {
        admins.push(common::admin(&url).await);
    }
    let a = redlock_clients(&nodes).await;
    let b = redlock_clients(&nodes).await;
    let mut s = Sweep::new(admins);

    // The builder: what it refuses, and what a built Redlock then does.
    for (v, d) in DURATIONS {
        let expect = match v {
            "MAX" => Expect::Refused(&["max_lease", "year"]),
            // Its 1 s lease is above a 1 ns max_lease.
            "1ns" => Expect::Refused(&["longer than max_lease"]),
            _ => Expect::Ok,
        };
        let (a2, name) = (a.clone(), format!("max_lease{v}"));
        s.case(format!("Redlock max_lease({v})"), expect, async move {
            let redlock = redlock_builder(&a2, &name).max_lease(d).build()?;
            // A restart guard of 1 ns is 1 ms: the fresh nodes count.
            redlock
                .try_lock(ZERO, Some(Duration::from_secs(1)))
                .await
                .map(drop)
        })
        .await;
        let expect = match v {
            "0" => Expect::Refused(&["node_timeout", "zero"]),
            "1ns" => Expect::Answers,
            _ => Expect::Refused(&["node_timeout", "at most a year"]),
        };
        let (a2, name) = (a.clone(), format!("node_timeout{v}"));
        s.case(format!("Redlock node_timeout({v})"), expect, async move {
            let redlock = redlock_builder(&a2, &name)
                .node_timeout(d)
                .retry_delay(Duration::from_millis(20))
                .build()?;
            match redlock.try_lock(ZERO, None).await? {
                Some(g) => g.unlock().await,
                None => Ok(()),
            }
        })
        .await;
        let expect = Expect::Refused(&["retry_delay", "at least 20ms", "at most 60s"]);
        let (a2, name) = (a.clone(), format!("retry_delay{v}"));
        s.case(format!("Redlock retry_delay({v})"), expect, async move {
            redlock_builder(&a2, &name).retry_delay(d).build().map(drop)
        })
        .await;
    }
    for (v, f) in [
        ("NaN", f64::NAN),
        ("INF", f64::INFINITY),
        ("-0.1", -0.1),
        ("1", 1.0),
        ("MAX", f64::MAX),
    ] {
        let (a2, name) = (a.clone(), "drift");
        s.case(
            format!("Redlock drift_factor({v})"),
            Expect::Refused(&["drift_factor", "[0, 1)"]),
            async move { redlock_builder(&a2, name).drift_factor(f).build().map(drop) },
        )
        .await;
    }

    // Waits and leases of an acquisition.
    let redlock = redlock_builder(&a, "rl").build().expect("build");
    let other = redlock_builder(&b, "rl").build().expect("build");
    for (v, d) in DURATIONS {
        let r = redlock.clone();
        s.case(
            format!("Redlock.try_lock({v}, None)"),
            Expect::Ok,
            async move {
                let g = r.try_lock(d, None).await?.expect("free");
                g.unlock().await
            },
        )
        .await;
        let r = redlock.clone();
        let expect = match v {
            "0" => Expect::Refused(&["lease", "zero"]),
            "1ns" => Expect::Refused(&["lease", "drift"]),
            _ => Expect::Refused(&["lease", "year"]),
        };
        s.case(
            format!("Redlock.try_lock(1s, Some({v}))"),
            expect,
            async move { r.try_lock(Duration::from_secs(1), Some(d)).await.map(drop) },
        )
        .await;
        let guard = redlock.lock().await.expect("lock");
        let expect = match v {
            "0" => Expect::Refused(&["lease", "zero"]),
            "1ns" => Expect::Refused(&["lease", "drift"]),
            _ => Expect::Refused(&["lease", "year"]),
        };
        s.case(format!("RedlockGuard.extend({v})"), expect, async move {
            let r = guard.extend(d).await;
            guard.unlock().await?;
            r
        })
        .await;
    }
    let held = other.lock().await.expect("the other one locks");
    for (v, d) in DURATIONS {
        let r = redlock.clone();
        let expect = if d == MAX { Expect::Waits } else { Expect::Ok };
        s.case(
            format!("Redlock held: try_lock({v}, None)"),
            expect,
            async move { r.try_lock(d, None).await.map(|g| assert!(g.is_none())) },
        )
        .await;
    }
    // At the lowest retry delay (20 ms) a waiter does not spin either: it
    // pauses 10 ms on average between attempts, each at most 2 scripts per
    // node (the attempt, a release): about 300 in the window over 3 nodes.
    let fastest = redlock_builder(&a, "rl")
        .retry_delay(Duration::from_millis(20))
        .build()
        .expect("build");
    let before = s.calls().await;
    let waited = tokio::time::timeout(WINDOW, fastest.try_lock(MAX, None)).await;
    let sent = s.calls().await - before;
    assert!(waited.is_err(), "the 20 ms retry delay waiter answered");
    if sent > REDLOCK_FLOOR_BOUND {
        s.failures.push(format!(
            "Redlock(retry_delay 20ms) held: try_lock(MAX, None): BUSY LOOP: {sent} scripts \
             in {WINDOW:?} (bound {REDLOCK_FLOOR_BOUND})"
        ));
    }
    held.unlock().await.expect("unlock");

    // MultiLock.
    let multi = |c: &[Client]| {
        MultiLock::new(vec![c[0].lock("m1"), c[1].lock("m2"), c[0].lock("m3")]).expect("multi")
    };
    let (ma, mb) = (multi(&a), multi(&b));
    for (v, d) in DURATIONS {
        let m = multi(&a);
        s.case(
            format!("MultiLock.try_lock({v}, None)"),
            Expect::Ok,
            async move { m.try_lock(d, None).await?.expect("free").unlock().await },
        )
        .await;
        let m = multi(&a);
        s.case(
            format!("MultiLock.try_lock(1s, Some({v}))"),
            lease_expect(d),
            async move { m.try_lock(Duration::from_secs(1), Some(d)).await.map(drop) },
        )
        .await;
        let guard = ma.lock().await.expect("lock");
        s.case(
            format!("MultiLockGuard.extend({v})"),
            lease_expect(d),
            async move {
                let r = guard.extend(d).await;
                guard.unlock().await?;
                r
            },
        )
        .await;
    }
    let held = mb.lock().await.expect("the other one locks");
    for (v, d) in DURATIONS {
        let m = multi(&a);
        let expect = if d == MAX { Expect::Waits } else { Expect::Ok };
        s.case(
            format!("MultiLock held: try_lock({v}, None)"),
            expect,
            async move { m.try_lock(d, None).await.map(|g| assert!(g.is_none())) },
        )
        .await;
    }
    held.unlock().await.expect("unlock");
    s.finish("Redlock, MultiLock");
}

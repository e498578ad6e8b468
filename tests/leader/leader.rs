//! Leader election: one leader at a time, published identity, take-over
//! after a resign or a leader cut off, and `run`, which never lets a job
//! run once the lead is known lost.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{eventually, Env};
use redisync::Client;
use redisync_testkit::{Direction, FaultProxy};

const WITHIN: Duration = Duration::from_secs(10);

async fn client_with_lease(url: &str, lease: Duration) -> Client {
    Client::builder(url)
        .watchdog_timeout(lease)
        .connect()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leads_at_a_time_and_the_next_takes_over_when_it_resigns() {
    let env = Env::start().await;
    let (a, b) = (env.client().await, env.client().await);
    let first = a
        .leader("sched")
        .with_identity("host-a")
        .campaign()
        .await
        .unwrap();
    let now = b.leader("sched").current().await.unwrap().expect("a leads");
    assert_eq!(now.identity.as_deref(), Some("host-a"));
    assert_eq!(now.token, Some(first.token()));
    assert!(now.lease_left.unwrap() > Duration::ZERO);

    // Another candidate does not lead while it does, in this task or another.
    let second_here = a
        .leader("sched")
        .try_campaign(Duration::from_millis(50))
        .await
        .unwrap();
    assert!(second_here.is_none(), "two campaigns of one task both led");
    let candidate = b.leader("sched").with_identity("host-b");
    assert!(candidate
        .try_campaign(Duration::from_millis(50))
        .await
        .unwrap()
        .is_none());
    let next = tokio::spawn(async move { candidate.campaign().await });

    let token = first.token();
    first.resign().await.unwrap();
    let second = next.await.unwrap().unwrap();
    assert!(second.token() > token, "tokens rise with every leadership");
    let now = a.leader("sched").current().await.unwrap().unwrap();
    assert_eq!(now.identity.as_deref(), Some("host-b"));
    second.resign().await.unwrap();
    assert_eq!(a.leader("sched").current().await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_redis_is_replaced_within_one_lease() {
    let env = Env::start().await;
    let lease = Duration::from_secs(1);
    let proxy = FaultProxy::start(env.server.addr()).await;
    let cut_off = client_with_lease(&proxy.url(), lease).await;
    let other = client_with_lease(&env.server.url(), lease).await;
    let leading = cut_off
        .leader("sched")
        .with_identity("a")
        .campaign()
        .await
        .unwrap();
    let candidate = other.leader("sched").with_identity("b");
    let next = tokio::spawn(async move { candidate.campaign().await });

    proxy.blackhole(Direction::Both);
    let cut_at = tokio::time::Instant::now();
    // The cut-off leader learns it by its own lease clock (no renewal).
    tokio::time::timeout(WITHIN, leading.lost())
        .await
        .expect("the cut-off leader knows");
    let second = tokio::time::timeout(WITHIN, next)
        .await
        .expect("taken over")
        .unwrap()
        .unwrap();
    let took = cut_at.elapsed();
    // The lock lives at most one lease after its last renewal.
    assert!(
        took <= lease + Duration::from_secs(2),
        "took over after {took:?}"
    );
    assert!(second.token() > leading.token());
    let now = other.leader("sched").current().await.unwrap().unwrap();
    assert_eq!(now.identity.as_deref(), Some("b"));
    proxy.heal();
    drop(leading);
    second.resign().await.unwrap();
}

/// Sets its flag when dropped before the end of a run (cancelled).
struct CancelMark(Arc<AtomicBool>, bool);
impl Drop for CancelMark {
    fn drop(&mut self) {
        if !self.1 {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_cancels_the_job_when_the_lead_is_lost_and_leads_again_with_a_new_token() {
    let env = Env::start().await;
    // Renewals every ~330 ms: a forced unlock is found within that.
    let client = client_with_lease(&env.server.url(), Duration::from_secs(1)).await;
    let runs: Arc<Mutex<Vec<u64>>> = Arc::default();
    let started = Arc::new(AtomicU32::new(0));
    let cancelled = Arc::new(AtomicBool::new(false));

    let leader = client.leader("sched");
    let job = {
        let (runs, started, cancelled) = (runs.clone(), started.clone(), cancelled.clone());
        tokio::spawn(async move {
            leader
                .run(Duration::from_millis(20), move |token| {
                    let (runs, started, cancelled) =
                        (runs.clone(), started.clone(), cancelled.clone());
                    async move {
                        runs.lock().unwrap().push(token);
                        let mut mark = CancelMark(cancelled, false);
                        // The first run takes far longer than the test: only a
                        // cancellation ends it.
                        if started.fetch_add(1, Ordering::SeqCst) == 0 {
                            tokio::time::sleep(Duration::from_secs(1000)).await;
                        }
                        mark.1 = true;
                    }
                })
                .await
        })
    };
    assert!(eventually(WITHIN, || async { started.load(Ordering::SeqCst) == 1 }).await);
    let first = runs.lock().unwrap()[0];

    // Forced away by another client: the watchdog finds it gone, the run in
    // flight is dropped, and the candidate leads again under a new token.
    let operator = env.client().await;
    assert!(operator.lock("sched").force_unlock().await.unwrap());
    let resumed = eventually(WITHIN, || async { started.load(Ordering::SeqCst) >= 3 }).await;
    assert!(resumed, "did not lead again");
    assert!(
        cancelled.load(Ordering::SeqCst),
        "the run in flight was not cancelled"
    );
    let tokens = runs.lock().unwrap().clone();
    assert!(
        tokens[1..].iter().all(|t| *t > first),
        "{tokens:?}: a run under the lost lead"
    );
    assert!(tokens.windows(2).all(|w| w[0] <= w[1]), "{tokens:?}");
    job.abort();
    assert!(job.await.unwrap_err().is_cancelled());
    // Dropping the run gives the lead back.
    let gone = eventually(WITHIN, || async {
        client.leader("sched").current().await.unwrap().is_none()
    })
    .await;
    assert!(gone, "the lead was not given back");
}

/// A leader stalled (a GC-like pause) inside a run past its lease: when it
/// resumes, the run is not polled past its next await point, though tokio
/// polls the woken run before the overdue lease timer fires. It used to
/// go on while the next leader's job could be running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stalled_past_its_lease_stops_the_run_at_its_next_await() {
    let env = Env::start().await;
    let url = env.server.url();
    common::on_one_thread(move || async move {
        let lease = Duration::from_millis(300);
        let client = client_with_lease(&url, lease).await;
        let leader = client.leader("stalled");
        let runs = Arc::new(AtomicU32::new(0));
        let went_on = Arc::new(AtomicBool::new(false));
        let next_run = Arc::new(tokio::sync::Notify::new());
        let (r, w, n) = (runs.clone(), went_on.clone(), next_run.clone());
        let lead = tokio::spawn(async move {
            leader
                .run(Duration::from_millis(10), move |_token| {
                    let (r, w, n) = (r.clone(), w.clone(), n.clone());
                    async move {
                        if r.fetch_add(1, Ordering::SeqCst) == 0 {
                            common::stall(lease * 3);
                            common::woken_at_once().await;
                            w.store(true, Ordering::SeqCst);
                        } else {
                            n.notify_one();
                        }
                    }
                })
                .await
        });
        tokio::time::timeout(WITHIN, next_run.notified())
            .await
            .expect("it leads again after the stall");
        lead.abort();
        assert!(
            !went_on.load(Ordering::SeqCst),
            "the run went on past an await after a stall that lost the lead"
        );
        client.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused() {
    let env = Env::start().await;
    let client = env.client().await;
    let err = client
        .leader("sched")
        .run(Duration::ZERO, |_| async {})
        .await
        .unwrap_err();
    assert!(matches!(err, redisync::Error::InvalidArgument(_)), "{err}");
    let err = client.leader("").campaign().await.unwrap_err();
    assert!(matches!(err, redisync::Error::InvalidArgument(_)), "{err}");
}

/// A watch of the election sees every change without polling in the test:
/// a new identity published while leading, and a take-over after the
/// leader's process froze (its runtime thread blocked, as under SIGSTOP),
/// within about one lease of the freeze.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_sees_a_new_identity_and_a_take_over_after_the_leader_froze() {
    let lease = Duration::from_secs(2);
    let server = redisync_testkit::RedisServer::start().await;
    let url = server.url();
    // The first leader runs on a runtime of its own, on one thread the test
    // freezes.
    let (led_tell, led) = tokio::sync::oneshot::channel::<()>();
    let (renamed_tell, renamed) = tokio::sync::oneshot::channel::<()>();
    let (freeze, freeze_asked) = tokio::sync::oneshot::channel::<()>();
    let (thaw, thaw_asked) = std::sync::mpsc::channel::<()>();
    let leader_url = url.clone();
    let frozen_thread = common::on_own_runtime(move || async move {
        let client = redisync::Client::builder(&leader_url)
            .watchdog_timeout(lease)
            .connect()
            .await
            .unwrap();
        let leading = client
            .leader("watched")
            .with_identity("a")
            .campaign()
            .await
            .unwrap();
        let _ = led_tell.send(());
        let _ = freeze_asked.await;
        leading.set_identity("a2").await.unwrap();
        let _ = renamed_tell.send(());
        // Frozen: no renewal, no release.
        let _ = thaw_asked.recv();
        drop(leading);
    });
    led.await.unwrap();
    let observer = redisync::Client::connect(&url).await.unwrap();
    let mut watch = observer.leader("watched").watch().await.unwrap();
    assert_eq!(
        watch.current().and_then(|i| i.identity).as_deref(),
        Some("a")
    );
    // Another member waits to take over.
    let other = redisync::Client::builder(&url)
        .watchdog_timeout(lease)
        .connect()
        .await
        .unwrap();
    let candidate = other.leader("watched").with_identity("b");
    let taking_over = tokio::spawn(async move { candidate.campaign().await });

    freeze.send(()).unwrap();
    renamed.await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(10), watch.changed())
        .await
        .expect("the new identity is seen")
        .unwrap();
    assert_eq!(seen.and_then(|i| i.identity).as_deref(), Some("a2"));
    let frozen_at = tokio::time::Instant::now();
    // The frozen leader's lease runs out; the candidate takes over.
    let took_over = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let now = watch.changed().await.unwrap();
            if now.as_ref().and_then(|i| i.identity.as_deref()) == Some("b") {
                return now;
            }
        }
    })
    .await
    .expect("the take-over is seen");
    let after = frozen_at.elapsed();
    assert!(
        after < lease + Duration::from_secs(2),
        "the take-over was seen {after:?} after the freeze (lease {lease:?})"
    );
    let won = taking_over.await.unwrap().unwrap();
    assert_eq!(took_over.and_then(|i| i.token), Some(won.token()));
    thaw.send(()).unwrap();
    frozen_thread.join().unwrap();
    won.resign().await.unwrap();
}

/// A resignation nobody waited for is seen by another process's watch at
/// once, not at the end of the leader's (here 60 s) lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_sees_a_resignation_at_once() {
    let server = redisync_testkit::RedisServer::start().await;
    let client = redisync::Client::builder(&server.url())
        .watchdog_timeout(Duration::from_mins(1))
        .connect()
        .await
        .unwrap();
    let leader = client.leader("resigning").with_identity("only");
    let leading = leader.campaign().await.unwrap();
    // Another process watches (a release wakes its own client's slot
    // locally, without a message).
    let observer = redisync::Client::connect(&server.url()).await.unwrap();
    let mut watch = observer.leader("resigning").watch().await.unwrap();
    assert_eq!(
        watch.current().and_then(|i| i.identity).as_deref(),
        Some("only")
    );
    leading.resign().await.unwrap();
    let now = tokio::time::timeout(WITHIN, watch.changed())
        .await
        .expect("the resignation is seen well before the lease would end")
        .unwrap();
    assert_eq!(now, None, "nobody leads after the resignation");
}

/// `Leader::status` tells a `run` user when it is elected and when it loses
/// the lead: idle before `run`, campaigning while another leads, leading
/// (with the term's token) once elected, out of that term when forced away,
/// then leading again under a newer token; idle once `run` is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_status_reports_election_loss_and_stop() {
    use redisync::leader::LeaderStatus;
    let env = Env::start().await;
    let client = client_with_lease(&env.server.url(), Duration::from_secs(1)).await;
    let other = env.client().await;
    let leader = client.leader("status");
    let status = leader.status();
    assert_eq!(*status.borrow(), LeaderStatus::Idle);

    let first = other.leader("status").campaign().await.unwrap();
    let job = {
        let leader = leader.clone();
        tokio::spawn(async move { leader.run(Duration::from_millis(20), |_| async {}).await })
    };
    let seen = |want: fn(&LeaderStatus) -> bool| {
        let mut status = status.clone();
        async move {
            let got = tokio::time::timeout(WITHIN, status.wait_for(want)).await;
            *got.expect("status within the bound").expect("sender alive")
        }
    };
    seen(|s| *s == LeaderStatus::Campaigning).await;
    // Still campaigning while the other leads: it cannot have been elected.
    assert_eq!(*status.borrow(), LeaderStatus::Campaigning);

    first.resign().await.unwrap();
    let LeaderStatus::Leading { token: t1 } =
        seen(|s| matches!(s, LeaderStatus::Leading { .. })).await
    else {
        unreachable!()
    };
    let now = other.leader("status").current().await.unwrap().unwrap();
    assert_eq!(now.token, Some(t1), "the status's token is the term's");

    // Forced away: the term ends (lost), and it is elected again, later.
    let operator = env.client().await;
    assert!(operator.lock("status").force_unlock().await.unwrap());
    let next = {
        let mut status = status.clone();
        tokio::time::timeout(
            WITHIN,
            status.wait_for(|s| matches!(s, LeaderStatus::Leading { token } if *token != t1)),
        )
        .await
        .expect("elected again within the bound")
        .map(|s| *s)
        .unwrap()
    };
    let LeaderStatus::Leading { token: t2 } = next else {
        unreachable!()
    };
    assert!(t2 > t1, "a new term has a newer token: {t1} then {t2}");

    job.abort();
    assert!(job.await.unwrap_err().is_cancelled());
    seen(|s| *s == LeaderStatus::Idle).await;
}

/// A leadership's calls after its client's shutdown answer `Shutdown` and
/// send nothing (the shutdown released the lead): `set_identity` published
/// the identity anyway (found by the torture workload's after-shutdown
/// step).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leadership_after_its_clients_shutdown_sends_nothing() {
    let env = Env::start().await;
    let client = env.client().await;
    let lead = client.leader("after-shutdown").campaign().await.unwrap();
    client.shutdown().await.unwrap();
    let err = lead.set_identity("late").await.unwrap_err();
    assert!(matches!(err, redisync::Error::Shutdown), "{err}");
    let watcher = env.client().await;
    let current = watcher.leader("after-shutdown").current().await.unwrap();
    assert!(
        current.is_none(),
        "the shutdown released the lead: {current:?}"
    );
}

/// A grant that never led (no identity published for it: here a
/// plain `Lock` on the election's name) is no leader to a watch; the next
/// real term is. Failed before: the watch reported the lock's grant as a
/// leader with identity `None`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_never_reports_a_grant_that_never_led() {
    let env = Env::start().await;
    let client = env.client().await;
    let plain = client.lock("ghostly").lock().await.unwrap();
    let leader = client.leader("ghostly").with_identity("real");
    let raw = leader.current().await.unwrap().expect("the lock is held");
    assert_eq!(raw.identity, None, "current reads the bare grant");
    let mut watch = leader.watch().await.unwrap();
    assert_eq!(watch.current(), None, "a bare grant is nobody leading");
    let campaigning = tokio::spawn({
        let leader = leader.clone();
        async move { leader.campaign().await }
    });
    plain.unlock().await.unwrap();
    let seen = tokio::time::timeout(WITHIN, watch.changed())
        .await
        .expect("the real term is seen")
        .unwrap()
        .expect("a leader");
    let won = campaigning.await.unwrap().unwrap();
    assert_eq!(seen.token, Some(won.token()));
    assert_eq!(seen.identity.as_deref(), Some("real"));
    won.resign().await.unwrap();
}

/// Guarded candidates campaign through server restarts (empty,
/// and from a snapshot); a watch reports only terms a `Leadership` was
/// returned for, never a grant the restart guard undid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_across_restarts_reports_only_real_terms() {
    let mut env = Env::start().await;
    let url = env.server.url();
    let max_lease = Duration::from_millis(500);
    let guarded = || async {
        Client::builder(&url)
            .restart_guard(max_lease)
            .watchdog_timeout(max_lease)
            .command_timeout(Duration::from_millis(300))
            .connect()
            .await
            .unwrap()
    };
    let (a, b) = (guarded().await, guarded().await);
    let observer = Client::builder(&url)
        .watchdog_timeout(max_lease)
        .connect()
        .await
        .unwrap();
    let real: Arc<Mutex<Vec<u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut candidates = Vec::new();
    for (i, client) in [a.clone(), b.clone()].into_iter().enumerate() {
        let (real, stop) = (real.clone(), stop.clone());
        candidates.push(tokio::spawn(async move {
            let leader = client.leader("restarted").with_identity(format!("c{i}"));
            while !stop.load(Ordering::Relaxed) {
                match leader.try_campaign(Duration::from_millis(200)).await {
                    Ok(Some(won)) => {
                        real.lock().unwrap().push(won.token());
                        let _ = tokio::time::timeout(Duration::from_millis(30), won.lost()).await;
                        let _ = won.resign().await;
                    }
                    Ok(None) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        }));
    }
    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    let watching = tokio::spawn({
        let (seen, leader) = (seen.clone(), observer.leader("restarted"));
        async move {
            let mut watch = loop {
                if let Ok(w) = leader.watch().await {
                    break w;
                }
            };
            loop {
                if let Some(token) = watch.current().and_then(|i| i.token) {
                    seen.lock().unwrap().push(token);
                }
                if watch.changed().await.is_err() {
                    return;
                }
            }
        }
    });
    // Terms before, between and after the restarts.
    let terms_past = |n: usize| {
        let real = real.clone();
        async move {
            eventually(Duration::from_secs(20), || async {
                real.lock().unwrap().len() >= n
            })
            .await
        }
    };
    assert!(terms_past(3).await, "terms before the restarts");
    env.server.remove_snapshot().unwrap();
    env.server.restart().await;
    let n = real.lock().unwrap().len();
    assert!(terms_past(n + 3).await, "terms after the empty restart");
    common::save(&env.admin).await;
    env.server.restart().await;
    let n = real.lock().unwrap().len();
    assert!(
        terms_past(n + 3).await,
        "terms after the restart from a snapshot"
    );
    stop.store(true, Ordering::Relaxed);
    for c in candidates {
        c.await.unwrap();
    }
    watching.abort();
    let (real, seen) = (real.lock().unwrap().clone(), seen.lock().unwrap().clone());
    let ghosts: Vec<u64> = seen.iter().filter(|t| !real.contains(t)).copied().collect();
    assert!(
        ghosts.is_empty(),
        "the watch reported terms that never led: {ghosts:?} (real: {real:?})"
    );
    assert!(!seen.is_empty(), "the watch saw terms");
}

/// `Leader::status` also follows a `campaign` user's leadership: idle
/// before, campaigning while `campaign` waits, leading under the
/// leadership's token once it returns, and idle again the moment the
/// leadership is known lost (forced away) or dropped, with no `run`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_status_follows_the_leadership_until_it_is_lost_or_dropped() {
    use redisync::leader::LeaderStatus;
    let env = Env::start().await;
    let client = client_with_lease(&env.server.url(), Duration::from_secs(1)).await;
    let other = env.client().await;
    let leader = client.leader("campaign-status");
    let status = leader.status();
    let seen = |want: fn(&LeaderStatus) -> bool| {
        let mut status = status.clone();
        async move {
            let got = tokio::time::timeout(WITHIN, status.wait_for(want)).await;
            *got.expect("status within the bound").expect("sender alive")
        }
    };
    assert_eq!(*status.borrow(), LeaderStatus::Idle);

    let first = other.leader("campaign-status").campaign().await.unwrap();
    let campaign = {
        let leader = leader.clone();
        tokio::spawn(async move { leader.campaign().await })
    };
    seen(|s| *s == LeaderStatus::Campaigning).await;
    first.resign().await.unwrap();
    let won = campaign.await.unwrap().unwrap();
    assert_eq!(
        *status.borrow(),
        LeaderStatus::Leading { token: won.token() },
        "leading under its token once campaign returned"
    );

    // Forced away: the status leaves the term once the loss is known.
    let operator = env.client().await;
    assert!(operator
        .lock("campaign-status")
        .force_unlock()
        .await
        .unwrap());
    seen(|s| *s == LeaderStatus::Idle).await;
    assert!(won.is_lost());
    drop(won);

    // A zero-wait campaign that finds another leading leaves it idle.
    let again = other.leader("campaign-status").campaign().await.unwrap();
    assert!(leader.try_campaign(Duration::ZERO).await.unwrap().is_none());
    assert_eq!(*status.borrow(), LeaderStatus::Idle);
    again.resign().await.unwrap();

    // Dropped: idle at once.
    let second = leader.campaign().await.unwrap();
    assert_eq!(
        *status.borrow(),
        LeaderStatus::Leading {
            token: second.token()
        }
    );
    drop(second);
    assert_eq!(*status.borrow(), LeaderStatus::Idle);
}

/// The job of `Leader::run_with_term` reaches its leadership: it
/// publishes another identity (watchers see it) and holds its loss signal,
/// which fires when the lead is forced away; a term kept past the run is
/// over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_job_reaches_its_leadership() {
    let env = Env::start().await;
    let client = client_with_lease(&env.server.url(), Duration::from_secs(1)).await;
    let leader = client.leader("job-reach").with_identity("before");
    let terms: Arc<Mutex<Vec<redisync::leader::LeaderTerm>>> = Arc::default();
    let run = {
        let (leader, terms) = (leader.clone(), terms.clone());
        tokio::spawn(async move {
            leader
                .run_with_term(Duration::from_millis(20), |term| {
                    let terms = terms.clone();
                    async move {
                        let first = {
                            let mut s = terms.lock().unwrap();
                            let first = s.is_empty();
                            s.push(term.clone());
                            first
                        };
                        if first {
                            term.set_identity("after").await.unwrap();
                        }
                    }
                })
                .await
        })
    };
    let observer = env.client().await;
    assert!(
        eventually(WITHIN, || async {
            observer
                .leader("job-reach")
                .current()
                .await
                .unwrap()
                .and_then(|i| i.identity)
                .as_deref()
                == Some("after")
        })
        .await
    );
    let first = terms.lock().unwrap()[0].clone();
    let (token, lost) = (first.token(), first.lost_signal());
    assert!(!lost.is_lost());
    assert!(observer.lock("job-reach").force_unlock().await.unwrap());
    tokio::time::timeout(WITHIN, lost)
        .await
        .expect("the job's loss signal fires once the lead is forced away");
    // The next term's job sees the next token.
    assert!(
        eventually(WITHIN, || async {
            terms.lock().unwrap().iter().any(|t| t.token() > token)
        })
        .await
    );
    // A term kept past its run's end is over: its calls answer NotHeld.
    let kept = terms.lock().unwrap().last().unwrap().clone();
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    assert!(eventually(WITHIN, || async { kept.is_lost() }).await);
    assert_eq!(kept.validity(), Duration::ZERO);
    let e = kept.set_identity("late").await.unwrap_err();
    assert!(e.is_not_held(), "{e:?}");
}

/// A leadership dropped without `resign` (a task that ended, a panic) is
/// given back in the background, and watchers hear of it at once, not at
/// the end of its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_sees_a_dropped_leadership_at_once() {
    let env = Env::start().await;
    let client = client_with_lease(&env.server.url(), Duration::from_mins(1)).await;
    let leading = client
        .leader("dropping")
        .with_identity("only")
        .campaign()
        .await
        .unwrap();
    let observer = client_with_lease(&env.server.url(), Duration::from_mins(1)).await;
    let mut watch = observer.leader("dropping").watch().await.unwrap();
    assert_eq!(
        watch.current().and_then(|i| i.identity).as_deref(),
        Some("only")
    );
    drop(leading);
    let now = tokio::time::timeout(WITHIN, watch.changed())
        .await
        .expect("the dropped leadership is seen well before the lease would end")
        .unwrap();
    assert_eq!(now, None, "nobody leads once the leadership is dropped");
}

/// A campaign dropped after its publish ran in Redis but before its reply
/// came makes no `Leadership`: the lead is given back in the background
/// and a watch that saw the published identity hears at once that nobody
/// leads (found by review: it kept reporting the identity until the lease
/// or its watchdog period ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_dropped_after_its_publish_leaves_no_leader_in_the_watch() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let candidate = Client::builder(&proxy.url())
        .watchdog_timeout(Duration::from_mins(1))
        .command_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    // Scripts loaded (no NOSCRIPT round trip under the latency).
    let warm = candidate.leader("warm").campaign().await.unwrap();
    warm.resign().await.unwrap();
    let observer = client_with_lease(&env.server.url(), Duration::from_mins(1)).await;
    let mut watch = observer.leader("election").watch().await.unwrap();
    assert!(watch.current().is_none());

    // Replies to the candidate come late; its commands reach Redis at once.
    proxy.set_latency_in(Direction::Downstream, Duration::from_millis(600));
    let campaign = tokio::spawn({
        let candidate = candidate.clone();
        async move {
            candidate
                .leader("election")
                .with_identity("abandoned")
                .campaign()
                .await
        }
    });
    let admin = env.client().await;
    assert!(
        eventually(WITHIN, || async {
            admin
                .leader("election")
                .current()
                .await
                .unwrap()
                .and_then(|i| i.identity)
                .is_some()
        })
        .await,
        "the publish never ran"
    );
    // Its reply is still on the way: dropped, no Leadership is made.
    campaign.abort();
    assert!(campaign.await.unwrap_err().is_cancelled());
    proxy.heal();
    let nobody = tokio::time::timeout(WITHIN, async {
        loop {
            if watch.changed().await.unwrap().is_none() {
                return;
            }
        }
    })
    .await;
    assert!(
        nobody.is_ok(),
        "the watch still reports {:?} long after the campaign was dropped",
        watch.current()
    );
}

/// A leader resigns while a candidate of another client waits in the
/// election's queue: the release hands the lock to that candidate, whose
/// requests stall before it publishes its identity. A third client's watch
/// hears at once that the term ended (found by review: the hand-off's
/// message woke no watcher, which kept showing the resigned leader until
/// its lease would have ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_hears_a_resignation_that_hands_the_lead_over() {
    let env = Env::start().await;
    let lease = Duration::from_secs(30);
    let a = env.client_with_watchdog(lease).await;
    let w = env.client_with_watchdog(lease).await;
    let proxy = FaultProxy::start(env.server.addr()).await;
    let b = Client::builder(&proxy.url())
        .watchdog_timeout(lease)
        .command_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect through the proxy");
    let name = "handed-election";
    let leading = a.leader(name).with_identity("A").campaign().await.unwrap();
    let mut watch = w.leader(name).watch().await.unwrap();
    assert_eq!(
        watch.current().and_then(|i| i.identity).as_deref(),
        Some("A")
    );
    let candidate = tokio::spawn({
        let b = b.clone();
        async move { b.leader(name).with_identity("B").campaign().await }
    });
    assert!(
        common::lock_queued(&env.admin, name, 1).await,
        "B never queued"
    );
    // B still hears messages; its requests stall (it never publishes).
    proxy.blackhole(Direction::Upstream);
    leading.resign().await.expect("resign");
    let changed = tokio::time::timeout(WITHIN, watch.changed()).await;
    assert!(
        changed.is_ok(),
        "the watch still shows {:?} long after A resigned",
        watch.current()
    );
    assert_eq!(changed.unwrap().unwrap(), None, "nobody has published yet");
    candidate.abort();
}

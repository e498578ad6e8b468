//! Leader steps: `Leader::run` jobs (naming their terms), campaigns whose
//! leadership records steps as a job would, and watches of an election.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redisync::leader::LeaderTerm;
use redisync::{Client, Leader};
use tokio::time::Instant;

use super::{
    lock_id, micros, poll_then_drop, restarted, uptime, Count, Ctx, Handles, How, LOOK_EVERY, WAIT,
};
use crate::coverage::{Ending, Recorded, Recorder};
use crate::history::{now_us, Kind, Record, Step, Work};
use crate::rng::Rng;

/// A `Leader::run` for a while (0.3 to 1.8 leases), then dropped (the lead is
/// given back in the background): each job run records its steps with the
/// leadership's token. The checker derives one section per leadership.
pub(super) async fn leader(ctx: &mut Ctx, name: &str, leader: &Leader) {
    let kind = Kind::Leader;
    let every = Duration::from_millis(20 + ctx.rng.below(60));
    let run_for = ctx.settings.lease.mul_f64(0.3 + 1.5 * ctx.rng.unit());
    let job_steps = 1 + ctx.rng.below(8);
    let started = now_us();
    let log: Arc<Mutex<Vec<Work>>> = Arc::default();
    let lock = lock_id(kind, name);
    let lease_us = micros(ctx.settings.lease);
    let client = ctx.client.clone();
    let job_log = log.clone();
    // Half the runs give their job the term: its first run of each term
    // names it (`LeaderTerm::set_identity`, ending every way).
    let with_term = ctx.chance(50);
    let (set_roll, set_polls, set_budget) = (
        ctx.rng.below(100),
        1 + ctx.rng.below(6),
        Duration::from_millis(ctx.rng.below(30)),
    );
    let set_rng = Rng::new(ctx.rng.next_u64());
    let coverage = ctx.stats.coverage.clone();
    let kept: Arc<Mutex<Option<LeaderTerm>>> = Arc::default();
    let kept_by_job = kept.clone();
    let mut named = 0;
    let mut job = move |token: u64, term: Option<LeaderTerm>| {
        let log = job_log.clone();
        let work = Work {
            lock: lock.clone(),
            kind,
            client: client.clone(),
            token,
            lease_us,
            requested_us: started,
            steps: Vec::new(),
        };
        // Its first run of a term names it, as `Leadership::set_identity`
        // does in the campaign step: a watch must report it with that token.
        let set = term.filter(|_| std::mem::replace(&mut named, token) != token);
        let identity = format!("{client}@{token}");
        let mut set_rng = set_rng.clone();
        let (coverage, kept) = (coverage.clone(), kept_by_job.clone());
        async move {
            if let Some(term) = set {
                let how = (set_roll, set_polls, set_budget);
                name_term(&coverage, &term, &identity, how, &mut set_rng).await;
                *kept.lock().unwrap_or_else(PoisonError::into_inner) = Some(term);
            }
            job_run(&log, work, job_steps).await;
        }
    };
    let (op, run): (_, std::pin::Pin<Box<dyn Future<Output = _> + Send + '_>>) = if with_term {
        let run = leader.run_with_term(every, move |term| job(term.token(), Some(term)));
        ("Leader::run_with_term", Box::pin(run))
    } else {
        (
            "Leader::run",
            Box::pin(leader.run(every, move |token| job(token, None))),
        )
    };
    // Mostly for its time; now and then dropped after a few polls.
    let how = if ctx.chance(10) {
        How::Drop(1 + ctx.rng.below(6))
    } else {
        How::Timeout(run_for)
    };
    if let Some(Err(e)) = ctx.call(op, how, run).await {
        ctx.stats.error(kind, &e.to_string());
    }
    let kept = kept.lock().unwrap_or_else(PoisonError::into_inner).take();
    if let Some(term) = kept {
        term_kept_past_its_run(ctx, name, &term).await;
    }
    let mut works = std::mem::take(&mut *log.lock().unwrap_or_else(PoisonError::into_inner));
    // A leadership was asked for when the one before ended (or at the start).
    let mut campaign_since = started;
    let mut current = None;
    for w in &mut works {
        if current != Some(w.token) {
            current = Some(w.token);
            ctx.stats.bump(kind, Count::Acquired);
        }
        w.requested_us = campaign_since;
        if let Some(last) = w.steps.last() {
            campaign_since = campaign_since.max(last.at_us);
        }
        ctx.stats.bump(kind, Count::Special);
    }
    // Every run of one leadership keeps the request of its first.
    let mut first_request = std::collections::HashMap::new();
    for w in &mut works {
        let r = *first_request.entry(w.token).or_insert(w.requested_us);
        w.requested_us = r;
        let _ = ctx.sink.send(Record::Work(w.clone()));
    }
}

/// One run of a leader's job: `steps` steps, `LOOK_EVERY` apart, logged
/// as `work`'s.
async fn job_run(log: &Mutex<Vec<Work>>, work: Work, steps: u64) {
    let i = {
        let mut l = log.lock().unwrap_or_else(PoisonError::into_inner);
        l.push(work);
        l.len() - 1
    };
    for k in 0..steps {
        let at_us = now_us();
        if let Some(w) = log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(i)
        {
            w.steps.push(Step {
                at_us,
                left_us: None,
            });
        }
        if k + 1 < steps {
            tokio::time::sleep(LOOK_EVERY).await;
        }
    }
}

/// A `run_with_term` job names its term (`LeaderTerm::set_identity`),
/// awaited, cut by a timeout or dropped after a few polls, as `how` (a
/// roll, the polls, the budget) says.
async fn name_term(
    coverage: &Arc<Recorder>,
    term: &LeaderTerm,
    identity: &str,
    (roll, polls, budget): (u64, u64, Duration),
    rng: &mut Rng,
) {
    let op = "LeaderTerm::set_identity";
    let call = term.set_identity(identity);
    if roll < 10 {
        let cut = Recorded::new(coverage, op, call, Ending::Dropped);
        drop(poll_then_drop(cut, polls, rng).await);
    } else if roll < 20 {
        let cut = Recorded::new(coverage, op, call, Ending::Timeout);
        drop(tokio::time::timeout(budget, cut).await);
    } else {
        drop(Recorded::new(coverage, op, call, Ending::Dropped).await);
    }
}

/// A term kept past its run is over: nothing is published.
async fn term_kept_past_its_run(ctx: &mut Ctx, name: &str, term: &LeaderTerm) {
    let how = ctx.how(30);
    let late = ctx
        .call("LeaderTerm::set_identity", how, term.set_identity("over"))
        .await;
    if let Some(Ok(())) = late {
        ctx.stats.violation(&format!(
            "{}: a term of {name:?} (token {}) kept past its run published an identity",
            ctx.client,
            term.token()
        ));
    }
}

/// A leader step besides `run` (half of them): a campaign (`campaign`
/// under the workload's deadline, or `try_campaign`) whose leadership
/// records steps as a job would (the checker derives its section: two
/// leaders at once are an (a) overlap), publishes another identity now and
/// then, waits a little for `lost`, and ends by `resign` or a drop; or a
/// watch of the election.
pub(super) async fn leader_step(ctx: &mut Ctx, name: &str, leader: &Leader, h: &Handles) {
    if ctx.chance(30) {
        return watch(ctx, leader, &h.more.client).await;
    }
    let kind = Kind::Leader;
    let how = ctx.how(30);
    let requested_us = now_us();
    let won = if ctx.chance(50) {
        let wait = Duration::from_millis(ctx.rng.below(1500));
        let asked = leader.try_campaign(wait);
        match ctx.call("Leader::try_campaign", how, asked).await {
            Some(Ok(won)) => won,
            Some(Err(e)) => return ctx.stats.error(kind, &e.to_string()),
            None => None,
        }
    } else {
        let how = Ctx::bounded(how, WAIT);
        match ctx.call("Leader::campaign", how, leader.campaign()).await {
            Some(Ok(won)) => Some(won),
            Some(Err(e)) => return ctx.stats.error(kind, &e.to_string()),
            None => None,
        }
    };
    let Some(lead) = won else {
        return;
    };
    ctx.stats.bump(kind, Count::Acquired);
    let mut work = Work {
        lock: lock_id(kind, name),
        kind,
        client: ctx.client.clone(),
        token: lead.token(),
        lease_us: micros(ctx.settings.lease),
        requested_us,
        steps: Vec::new(),
    };
    let until = Instant::now() + ctx.hold_time();
    // As `run` does: a step only while the lead is not known lost.
    while !lead.is_lost() {
        work.steps.push(Step {
            at_us: now_us(),
            left_us: None,
        });
        if Instant::now() >= until {
            break;
        }
        if ctx.chance(3) {
            let how = ctx.how(30);
            // Names its term: a watch must report it with that token.
            let identity = format!("{}@{}", ctx.client, work.token);
            let set = lead.set_identity(&identity);
            drop(ctx.call("Leadership::set_identity", how, set).await);
        }
        if ctx.chance(10) {
            let how = if ctx.chance(20) {
                How::Drop(1 + ctx.rng.below(6))
            } else {
                How::Timeout(LOOK_EVERY)
            };
            let _ = ctx.call("Leadership::lost", how, lead.lost()).await;
        } else {
            tokio::time::sleep(LOOK_EVERY).await;
        }
    }
    if !work.steps.is_empty() {
        let _ = ctx.sink.send(Record::Work(work));
    }
    if ctx.chance(60) {
        let how = ctx.how(30);
        drop(ctx.call("Leadership::resign", how, lead.resign()).await);
    }
}

/// A watch of an election for a while: the terms it reports never go
/// back (a token below one it reported before), unless the server
/// restarted meanwhile (an older snapshot brings an older term back), and
/// each is one that existed: an identity set by a leadership (it names
/// its token, see [`leader_step`]) comes with that token.
async fn watch(ctx: &mut Ctx, leader: &Leader, client: &Client) {
    let since = uptime(ctx, client).await;
    let how = ctx.how(30);
    let Some(Ok(mut w)) = ctx.call("Leader::watch", how, leader.watch()).await else {
        return;
    };
    term_existed(ctx, leader.name(), w.current().as_ref());
    let mut newest = w.current().and_then(|i| i.token);
    let mut went_back = None;
    for _ in 0..=ctx.rng.below(4) {
        let how = if ctx.chance(15) {
            How::Drop(1 + ctx.rng.below(6))
        } else {
            How::Timeout(Duration::from_millis(20 + ctx.rng.below(400)))
        };
        match ctx.call("LeaderWatch::changed", how, w.changed()).await {
            Some(Ok(info)) => {
                term_existed(ctx, leader.name(), info.as_ref());
                let token = info.and_then(|i| i.token);
                if let (Some(before), Some(now)) = (newest, token) {
                    if now < before {
                        went_back = went_back.or(Some((before, now)));
                    }
                }
                newest = newest.max(token);
            }
            Some(Err(_)) => break,
            None => {}
        }
    }
    let Some((before, now)) = went_back else {
        return;
    };
    let Some((up0, t0)) = since else {
        return;
    };
    if restarted(ctx, client, up0, t0).await == Some(false) {
        ctx.stats.violation(&format!(
            "{}: a watch of {:?} reported term {now} after term {before} (no restart between)",
            ctx.client,
            leader.name()
        ));
    }
}

/// A term reported by a watch or `Leader::current`: an identity that
/// names a token (`<client>@<token>`, set by [`leader_step`]) comes with
/// that token, or the report mixes two terms.
pub(super) fn term_existed(ctx: &Ctx, election: &str, info: Option<&redisync::leader::LeaderInfo>) {
    let Some(info) = info else {
        return;
    };
    let named = info
        .identity
        .as_deref()
        .and_then(|i| i.rsplit_once('@'))
        .and_then(|(_, t)| t.parse::<u64>().ok());
    if let (Some(named), Some(token)) = (named, info.token) {
        if named != token {
            ctx.stats.violation(&format!(
                "{}: {election:?} reported a term that did not exist: identity {:?} (set by the leadership of token {named}) with token {token}",
                ctx.client, info.identity
            ));
        }
    }
}

//! Leader election across three processes running one scheduled job.
//!
//! Three member processes run `leader.run(..)`: whichever leads runs the
//! job every 200 ms; each run works 300 ms, then records itself in a fenced
//! value with its leadership's token. Then two faults:
//!
//! 1. The leader is paused (SIGSTOP) in the middle of a run, for three
//!    leases, and resumed. Another member takes the lead meanwhile. On
//!    resume, the paused leader's run is cancelled before it writes (the
//!    loss of the lead wins every select), and the write it would have made
//!    is sent anyway, as a hand-written loop would: the fenced value refuses
//!    it, its token is older than the new leader's.
//! 2. The leader is killed (SIGKILL): another member leads within one lease.
//!
//! The example prints what happened and exits 1 if the paused leader's late
//! run wrote or its write landed, if a take-over took longer than a lease
//! (plus scheduling slack), or if the value holds a token newer than the
//! leader's.
//!
//! Redis: `REDIS_URL` when set; else 127.0.0.1:6379 if a server answers;
//! else a throwaway redis-server started through redisync-testkit.
//!
//!     cargo run --example leader

use std::time::Duration;

use redisync::fenced::FencedWrite;
use tokio::process::Child;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

mod support;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const MEMBERS: usize = 3;
/// The members' watchdog lease: a paused or dead leader loses the lead
/// within it.
const LEASE: Duration = Duration::from_secs(1);
const EVERY: Duration = Duration::from_millis(200);
const WORK: Duration = Duration::from_millis(300);
/// The leader is paused in its run number ...
const PAUSE_AT_RUN: u32 = 3;
const PAUSE: Duration = Duration::from_secs(3);
/// Scheduling slack on top of one lease for a take-over.
const SLACK: Duration = Duration::from_millis(1500);
const MEMBER_ENV: &str = "LEADER_EXAMPLE_MEMBER";

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    if let Ok(member) = std::env::var(MEMBER_ENV) {
        return member_main(member.parse()?).await;
    }
    let Some((url, _server)) = support::find_redis().await else {
        std::process::exit(1);
    };
    let violations = run_example(&url).await?;
    support::report(&violations, "one leader at a time, the paused leader's late run was stopped and its write refused, leadership moved within one lease, and an observer's watch saw the take-over within one lease");
    Ok(())
}

/// What the members print, one event per line: `<member> <event> ...`.
struct Members {
    children: Vec<Child>,
    lines: UnboundedReceiver<(usize, String)>,
}

impl Members {
    fn start(url: &str, run: &str) -> Result<Members, BoxError> {
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        let mut children = Vec::new();
        for member in 0..MEMBERS {
            let mut cmd = tokio::process::Command::new(std::env::current_exe()?);
            cmd.env(MEMBER_ENV, member.to_string())
                .env("LEADER_EXAMPLE_URL", url)
                .env("LEADER_EXAMPLE_RUN", run);
            let child = support::spawn_with_lines(cmd, member, tx.clone(), true)?;
            children.push(child);
        }
        Ok(Members { children, lines })
    }

    /// The next line matching `want`, within `within`.
    async fn next(
        &mut self,
        within: Duration,
        want: impl Fn(usize, &[&str]) -> bool,
    ) -> Result<(usize, String), BoxError> {
        support::next_line(&mut self.lines, within, "the members", |member, line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            want(member, &words)
        })
        .await
    }

    /// Waits for another member than `old` to lead, and checks it came
    /// within one lease (plus slack) of the `fault` at `since`.
    async fn take_over(
        &mut self,
        old: usize,
        since: Instant,
        fault: &str,
        violations: &mut Vec<String>,
    ) -> Result<usize, BoxError> {
        let (next, _) = self
            .next(Duration::from_secs(30), |m, w| {
                m != old && matches!(w, ["leads", ..])
            })
            .await?;
        let took = since.elapsed();
        println!("member {next} leads {took:?} after the {fault}");
        if took > LEASE + SLACK {
            violations.push(format!("take-over after a {fault} took {took:?}"));
        }
        Ok(next)
    }

    async fn signal(&self, member: usize, sig: &str) -> Result<(), BoxError> {
        support::signal(self.children[member].id().ok_or("member gone")?, sig).await
    }
}

async fn run_example(url: &str) -> Result<Vec<String>, BoxError> {
    let run = uuid::Uuid::new_v4().simple().to_string();
    let client = redisync::Client::connect(url).await?;
    let leader = client.leader(&format!("example:{run}:scheduler"));
    let mut members = Members::start(url, &run)?;
    let mut violations = Vec::new();
    // An observer (not a member) watches who leads and prints each change.
    let mut watch = leader.watch().await?;
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(now) = watch.changed().await {
            let who = now.as_ref().and_then(|i| i.identity.clone());
            match &now {
                Some(i) => println!(
                    "observer: {} leads (token {})",
                    who.as_deref().unwrap_or("?"),
                    i.token.unwrap_or(0)
                ),
                None => println!("observer: nobody leads"),
            }
            if seen_tx.send((Instant::now(), who)).is_err() {
                return;
            }
        }
    });

    // Fault 1: pause the leader inside its run, for three leases.
    let (paused, _) = members
        .next(
            Duration::from_secs(30),
            |_, w| matches!(w, ["run", n, "started", ..] if *n == PAUSE_AT_RUN.to_string()),
        )
        .await?;
    members.signal(paused, "STOP").await?;
    let stopped_at = Instant::now();
    println!("paused member {paused} (SIGSTOP) inside its run {PAUSE_AT_RUN}");
    members
        .take_over(paused, stopped_at, "pause", &mut violations)
        .await?;
    tokio::time::sleep(PAUSE.saturating_sub(stopped_at.elapsed())).await;
    members.signal(paused, "CONT").await?;
    println!("resumed member {paused} (SIGCONT)");
    let (_, verdict) = members
        .next(Duration::from_secs(30), |m, w| {
            m == paused && matches!(w, ["late", ..] | ["run", _, "written", ..])
        })
        .await?;
    if !verdict.starts_with("late write refused") {
        violations.push(format!("the paused leader's late run: {verdict}"));
    }

    // Fault 2: kill the leader now.
    let now = leader.current().await?.ok_or("nobody leads")?;
    let identity = now.identity.ok_or("no identity published")?;
    let leading: usize = identity.trim_start_matches("member-").parse()?;
    members.signal(leading, "KILL").await?;
    let killed_at = Instant::now();
    println!("killed member {leading} (SIGKILL), the leader");
    let after = members
        .take_over(leading, killed_at, "kill", &mut violations)
        .await?;
    let (_, line) = members
        .next(Duration::from_secs(30), |m, w| {
            m == after && matches!(w, ["run", _, "written", ..])
        })
        .await?;
    println!("the job goes on under member {after}: {line}");
    // The observer saw the take-over within one lease of the kill.
    let want = format!("member-{after}");
    let deadline = killed_at + LEASE + SLACK;
    loop {
        let next = tokio::time::timeout_at(deadline, seen.recv()).await;
        match next {
            Ok(Some((at, Some(who)))) if who == want && at >= killed_at => break,
            Ok(Some(_)) => {}
            _ => {
                violations.push(format!(
                    "the observer did not see {want} lead within one lease of the kill"
                ));
                break;
            }
        }
    }
    violations.extend(check_value(&client, &run).await?);
    client.shutdown().await?;
    Ok(violations)
}

/// The fenced value holds the newest run, written under the newest token.
async fn check_value(client: &redisync::Client, run: &str) -> Result<Vec<String>, BoxError> {
    let value = client
        .fenced(&format!("example:{run}:last-run"))
        .read()
        .await?;
    let value = value.ok_or("no run recorded")?;
    let leader = client.leader(&format!("example:{run}:scheduler"));
    let now = leader.current().await?.ok_or("nobody leads")?;
    let mut v = Vec::new();
    if now.token.is_some_and(|t| value.token > t) {
        v.push("the value holds a token newer than the leader's".to_owned());
    }
    Ok(v)
}

/// One member process: campaigns and runs the job while it leads.
async fn member_main(member: usize) -> Result<(), BoxError> {
    let url = std::env::var("LEADER_EXAMPLE_URL")?;
    let run = std::env::var("LEADER_EXAMPLE_RUN")?;
    let client = redisync::Client::builder(&url)
        .watchdog_timeout(LEASE)
        .connect()
        .await?;
    let leader = client
        .leader(&format!("example:{run}:scheduler"))
        .with_identity(format!("member-{member}"));
    let value = client.fenced(&format!("example:{run}:last-run"));
    // The elected / lost events of `run`, as a job's owner would log them.
    let mut status = leader.status();
    tokio::spawn(async move {
        while status.changed().await.is_ok() {
            let now = *status.borrow_and_update();
            match now {
                redisync::leader::LeaderStatus::Leading { token } => {
                    println!("status: elected, token {token}");
                }
                redisync::leader::LeaderStatus::Campaigning => println!("status: campaigning"),
                other => println!("status: {other:?}"),
            }
        }
    });
    let mut runs = 0u32;
    let mut led_under = 0u64;
    leader
        .run(EVERY, |token| {
            runs += 1;
            let n = runs;
            if token != led_under {
                led_under = token;
                println!("leads under token {token}");
            }
            let value = value.clone();
            async move {
                println!("run {n} started under token {token}");
                let mut cancelled = Cancelled(Some((value.clone(), n, token)));
                tokio::time::sleep(WORK).await;
                // Past the last await point before the write: not cancelled.
                cancelled.0 = None;
                let outcome = value
                    .write_with_token(token, format!("run {n} of member {member}"))
                    .await;
                match outcome {
                    Ok(FencedWrite::Written) => println!("run {n} written under token {token}"),
                    Ok(other) => println!("run {n} refused: {other:?}"),
                    Err(e) => println!("run {n} failed: {e}"),
                }
            }
        })
        .await?;
    Ok(())
}

/// Dropped before the run's write: the run was cancelled (the lead was
/// lost). It then sends the write anyway, in the background, as a
/// hand-written loop would have, to show the fence refuse it.
struct Cancelled(Option<(redisync::fenced::Fenced, u32, u64)>);

impl Drop for Cancelled {
    fn drop(&mut self) {
        if let Some((value, n, token)) = self.0.take() {
            println!("run {n} cancelled: the lead was lost");
            tokio::spawn(async move {
                match value.write_with_token(token, format!("late run {n}")).await {
                    Ok(FencedWrite::Stale { newest }) => println!(
                        "late write refused: run {n}'s write, sent anyway under token {token}, is older than {newest}"
                    ),
                    Ok(FencedWrite::Written) => println!("late write LANDED under token {token}"),
                    Err(e) => println!("late write failed: {e}"),
                }
            });
        }
    }
}

//! Worker tasks: each task runs steps of one [`Family`] of locks (see
//! [`crate::workload`]) again and again; the workers of a process report
//! every section, and whatever went wrong outside the history: a task that
//! panicked, hung, or left sections open.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redisync::Client;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::history::{now_us, Kind, Record};
use crate::rng::Rng;
use crate::workload::{
    self, Connect, Counts, Ctx, Family, Handles, Settings, Stats, TaskState, GUARDED_NAMES, NAMES,
    SYNCED_NAMES,
};

/// A step that takes longer than this is a hung task: a step is bounded by
/// an acquisition's wait, a hold of at most a few leases and the releases.
const HUNG_STEP: Duration = Duration::from_secs(30);

/// The servers one client set talks to: the main server and the three
/// Redlock nodes (directly or through fault proxies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Urls {
    pub(crate) main: String,
    pub(crate) nodes: Vec<String>,
}

/// How long a worker keeps trying to connect at start.
const CONNECT_FOR: Duration = Duration::from_secs(15);
/// Pause between two connect attempts.
const CONNECT_PAUSE: Duration = Duration::from_millis(100);

/// How long a replica-synced client waits for its replica's acknowledgement.
const REPLICA_SYNC_TIMEOUT: Duration = Duration::from_millis(200);

/// What a client set has on beyond the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Plain,
    /// `ClientBuilder::restart_guard(max_lease)`.
    Guarded,
    /// `ClientBuilder::replica_sync(1, ...)`: the main server has one
    /// replica.
    Synced,
}

/// One client for the main server and one per Redlock node.
pub struct ClientSet {
    /// `"<process>.<set>"`: `direct`, `proxied`, `guarded` (the restart
    /// guard on; names of its own) or `synced` (replica sync on).
    pub label: String,
    /// Makes a fresh client of the main server, with this set's settings.
    pub connect: Connect,
    /// The main server's client.
    pub main: Client,
    /// One client per Redlock node.
    pub nodes: Vec<Client>,
}

impl std::fmt::Debug for ClientSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientSet")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl ClientSet {
    pub(crate) async fn connect(
        label: &str,
        urls: &Urls,
        settings: Settings,
        mode: Mode,
    ) -> Result<ClientSet, String> {
        // A client's connect is bounded by its command timeout (450 ms in
        // the short run), which a loaded machine can miss while the worker
        // starts: set-up is not under test, so it tries again for a while.
        let connect = |url: String| async move {
            let give_up = tokio::time::Instant::now() + CONNECT_FOR;
            loop {
                let mut builder = Client::builder(&url)
                    .watchdog_timeout(settings.lease)
                    .command_timeout(settings.command_timeout);
                builder = match mode {
                    Mode::Plain => builder,
                    Mode::Guarded => builder.restart_guard(settings.max_lease()),
                    Mode::Synced => builder.replica_sync(1, REPLICA_SYNC_TIMEOUT),
                };
                let attempt = builder.connect().await;
                match attempt {
                    Ok(client) => return Ok(client),
                    Err(e) if e.is_retryable() && tokio::time::Instant::now() < give_up => {
                        tokio::time::sleep(CONNECT_PAUSE).await;
                    }
                    Err(e) => return Err(format!("{label}: cannot connect to {url}: {e}")),
                }
            }
        };
        let main = connect(urls.main.clone()).await?;
        let mut nodes = Vec::with_capacity(urls.nodes.len());
        for url in &urls.nodes {
            nodes.push(connect(url.clone()).await?);
        }
        let url = urls.main.clone();
        let fresh: Connect = Arc::new(move || {
            let builder = Client::builder(&url)
                .watchdog_timeout(settings.lease)
                .command_timeout(settings.command_timeout);
            Box::pin(builder.connect())
        });
        Ok(ClientSet {
            label: label.to_owned(),
            connect: fresh,
            main,
            nodes,
        })
    }

    /// Shuts every client of the set down.
    pub async fn shutdown(&self) {
        let _ = self.main.shutdown().await;
        for n in &self.nodes {
            let _ = n.shutdown().await;
        }
    }
}

/// The workers of one process: four client sets (direct, proxied,
/// guarded, synced; see the crate's README.md), each running
/// `tasks_per_family` tasks per family.
pub(crate) struct Workers {
    stop: Arc<AtomicBool>,
    tasks: JoinSet<()>,
    states: Vec<(String, Arc<TaskState>)>,
    pub(crate) stats: Arc<Stats>,
    /// Open sections of tasks that did not finish go here; dropped once
    /// stopped, so the reader sees the end of the sections.
    sink: Option<mpsc::UnboundedSender<Record>>,
    sets: Vec<ClientSet>,
}

impl Workers {
    /// Connects the client sets `"<process>.direct"`, `"<process>.proxied"`,
    /// `"<process>.guarded"` and `"<process>.synced"` and starts the tasks.
    /// Sections go to `sink`.
    pub(crate) async fn start(
        process: &str,
        direct: &Urls,
        proxied: &Urls,
        settings: Settings,
        tasks_per_family: usize,
        seed: u64,
        sink: &mpsc::UnboundedSender<Record>,
    ) -> Result<Workers, String> {
        let sets = vec![
            ClientSet::connect(&format!("{process}.direct"), direct, settings, Mode::Plain).await?,
            ClientSet::connect(
                &format!("{process}.proxied"),
                proxied,
                settings,
                Mode::Plain,
            )
            .await?,
            // The restart guard on: a kill and restart needs no excuse
            // between these clients (on names of their own).
            ClientSet::connect(
                &format!("{process}.guarded"),
                direct,
                settings,
                Mode::Guarded,
            )
            .await?,
            // Replica sync on: a failover to the lagging replica needs no
            // excuse between these (on names of their own).
            ClientSet::connect(&format!("{process}.synced"), direct, settings, Mode::Synced)
                .await?,
        ];
        Workers::start_sets(sets, settings, tasks_per_family, seed, sink).await
    }

    /// Starts the tasks on client sets made elsewhere: per family,
    /// `tasks_per_family` tasks per set (the families of a `guarded` or
    /// `synced` set on names of their own). Sections go to `sink`.
    pub(crate) async fn start_sets(
        sets: Vec<ClientSet>,
        settings: Settings,
        tasks_per_family: usize,
        seed: u64,
        sink: &mpsc::UnboundedSender<Record>,
    ) -> Result<Workers, String> {
        let Some(first) = sets.first() else {
            return Err("no client set to run the workload on".into());
        };
        Handles::new(&first.main, &first.nodes, settings, NAMES)?
            .init_semaphores()
            .await;
        for names in [GUARDED_NAMES, SYNCED_NAMES] {
            Handles::new(&first.main, &first.nodes, settings, names)?
                .init_semaphores()
                .await;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Stats::default());
        let mut tasks = JoinSet::new();
        let mut task_states = Vec::new();
        let mut rng = Rng::new(seed);
        for set in &sets {
            let (names, families) = if set.label.ends_with(".guarded") {
                (GUARDED_NAMES, &Family::GUARDED[..])
            } else if set.label.ends_with(".synced") {
                (SYNCED_NAMES, &Family::GUARDED[..])
            } else {
                (NAMES, &Family::ALL[..])
            };
            for &family in families {
                for t in 0..tasks_per_family {
                    let client = format!("{}.{}{t}", set.label, family.short());
                    let task_state = Arc::new(TaskState::default());
                    task_states.push((client.clone(), task_state.clone()));
                    let ctx = Ctx {
                        client,
                        settings,
                        stats: stats.clone(),
                        sink: sink.clone(),
                        state: task_state,
                        rng: Rng::new(rng.next_u64()),
                    };
                    let process = set.label.split('.').next().unwrap_or("");
                    let mut handles = Handles::new(&set.main, &set.nodes, settings, names)?
                        .latch_of(&set.main, process);
                    handles.connect = Some(set.connect.clone());
                    tasks.spawn(run_task(ctx, family, handles, stop.clone()));
                }
            }
        }
        Ok(Workers {
            stop,
            tasks,
            states: task_states,
            stats,
            sink: Some(sink.clone()),
            sets,
        })
    }

    /// Stops the tasks after their current step and waits for them (at most
    /// `within`). A task that panicked, or did not stop in time (hung: it
    /// is aborted), is a violation, and its open sections are reported as
    /// they were at its last look. Clients stay connected.
    pub(crate) async fn stop(&mut self, within: Duration) {
        self.stop.store(true, Ordering::Release);
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.tasks.join_next()).await {
                Ok(None) => break,
                Ok(Some(Ok(()))) => {}
                Ok(Some(Err(e))) if e.is_panic() => {
                    let payload = e.into_panic();
                    let message = payload
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                        .unwrap_or_else(|| "(no message)".into());
                    self.stats
                        .violation(&format!("a worker task panicked: {message}"));
                }
                Ok(Some(Err(e))) => self.stats.violation(&format!("a worker task failed: {e}")),
                Err(_) => {
                    self.tasks.abort_all();
                    while self.tasks.join_next().await.is_some() {}
                    break;
                }
            }
        }
        let now = now_us();
        let sink = self.sink.take();
        for (client, state) in &self.states {
            if state.done.load(Ordering::Acquire) {
                continue;
            }
            let (step, since) = state.step();
            self.stats.violation(&format!(
                "task {client} did not finish (hung or panicked) in step {step:?}, running for {} ms",
                now.saturating_sub(since) / 1000
            ));
            for s in state.open_sections() {
                if let Some(sink) = &sink {
                    let _ = sink.send(Record::Section(s));
                }
            }
        }
    }

    /// Shuts the clients down.
    pub(crate) async fn shutdown(self) {
        for set in &self.sets {
            set.shutdown().await;
        }
    }
}

/// One worker task: steps until stopped.
async fn run_task(mut ctx: Ctx, family: Family, handles: Handles, stop: Arc<AtomicBool>) {
    let mut steps = 0u64;
    while !stop.load(Ordering::Acquire) {
        steps += 1;
        ctx.state.set_step(format!("{family:?} step {steps}"));
        let started = tokio::time::Instant::now();
        Box::pin(workload::step(&mut ctx, family, &handles)).await;
        let took = started.elapsed();
        if took > HUNG_STEP {
            ctx.stats.violation(&format!(
                "{}: a {family:?} step took {} ms (hung for a while)",
                ctx.client,
                took.as_millis()
            ));
        }
        let pause = ctx.rng.below(10);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    ctx.state.done.store(true, Ordering::Release);
}

/// What [`run_workload`] produced: the records for a [`History`](crate::History),
/// what went wrong outside it, and what each kind did.
#[derive(Debug, Default)]
pub struct WorkloadRun {
    /// Every record (sections, works, probes, stalls, force-unlocks).
    pub records: Vec<Record>,
    /// Tasks that panicked, hung or saw a broken promise at once.
    pub violations: Vec<String>,
    /// Per kind: acquisitions, busy, errors, ...
    pub counts: std::collections::BTreeMap<Kind, Counts>,
    /// Calls per operation and ending.
    pub coverage: crate::Coverage,
}

/// Runs the torture workload on client sets made elsewhere (a simulated
/// world's): the families of each set (see [`ClientSet::label`]),
/// `tasks_per_family` tasks each, for `run_for`, then stops the tasks. The
/// clients stay connected (the caller checks what is left in Redis, then
/// shuts them down).
///
/// # Errors
/// No client set, or handles that cannot be made.
pub async fn run_workload(
    sets: Vec<ClientSet>,
    settings: Settings,
    tasks_per_family: usize,
    seed: u64,
    run_for: Duration,
) -> Result<(WorkloadRun, Vec<ClientSet>), String> {
    let (sink, mut records) = mpsc::unbounded_channel();
    let mut workers = Workers::start_sets(sets, settings, tasks_per_family, seed, &sink).await?;
    drop(sink);
    let mut run = WorkloadRun::default();
    let end = tokio::time::Instant::now() + run_for;
    while let Ok(Some(r)) = tokio::time::timeout_at(end, records.recv()).await {
        run.records.push(r);
    }
    // A quiet period: lost holders let go.
    tokio::time::sleep(settings.lease * 2).await;
    workers.stop(Duration::from_secs(20)).await;
    while let Ok(r) = records.try_recv() {
        run.records.push(r);
    }
    for kind in Kind::ALL {
        run.counts.insert(kind, workers.stats.counts(kind));
    }
    run.violations = workers.stats.violations();
    run.coverage = workers.stats.coverage.snapshot();
    Ok((run, std::mem::take(&mut workers.sets)))
}

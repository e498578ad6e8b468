//! The worker process: spawned, told to stop and read by the coordinator
//! ([`WorkerProcess`]), and its own side ([`worker_process`]), which
//! reports its records and counts one line at a time.

use std::collections::{BTreeMap, HashMap};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{Config, CHILD_TIMEOUT, STOP_WITHIN};
use crate::history::{Kind, Record};
use crate::worker::{Urls, Workers};
use crate::workload::{Counts, Settings};

/// What the worker process reported.
#[derive(Debug, Default)]
pub(super) struct ChildOutput {
    pub(super) records: Vec<Record>,
    pub(super) counts: BTreeMap<Kind, Counts>,
    pub(super) errors: BTreeMap<Kind, Vec<String>>,
    /// What its workers saw go wrong outside the history.
    pub(super) violations: Vec<String>,
    /// Its calls per operation and ending.
    pub(super) coverage: crate::Coverage,
    /// Lines that were not understood (printed as they come, kept for errors).
    other: Vec<String>,
}

/// The worker process, seen from the coordinator.
pub(super) struct WorkerProcess {
    child: Child,
    stdin: ChildStdin,
    events: mpsc::UnboundedReceiver<String>,
    output: Arc<Mutex<ChildOutput>>,
    reader: JoinHandle<()>,
}

impl WorkerProcess {
    /// Spawns `<worker_exe> worker ...` and waits until its workers run.
    pub(super) async fn spawn(
        config: &Config,
        direct: &Urls,
        proxied: &Urls,
    ) -> Result<WorkerProcess, String> {
        let mut command = Command::new(&config.worker_exe);
        command
            .arg("worker")
            .args(["--process", "p1"])
            .args(["--seed", &config.seed.wrapping_add(1).to_string()])
            .args(["--lease-ms", &config.lease.as_millis().to_string()])
            .args(["--tasks", &config.tasks_per_family.to_string()])
            .args(["--drop-percent", &config.drop_percent.to_string()])
            .args(["--main", &direct.main])
            .args(["--nodes", &direct.nodes.join(",")])
            .args(["--main-proxied", &proxied.main])
            .args(["--nodes-proxied", &proxied.nodes.join(",")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot spawn {}: {e}", config.worker_exe.display()))?;
        let stdin = child
            .stdin
            .take()
            .ok_or("no stdin for the worker process")?;
        let stdout = child
            .stdout
            .take()
            .ok_or("no stdout for the worker process")?;
        let output = Arc::new(Mutex::new(ChildOutput::default()));
        let (events_tx, events) = mpsc::unbounded_channel();
        let reader = tokio::spawn(read_child(stdout, output.clone(), events_tx));
        let mut process = WorkerProcess {
            child,
            stdin,
            events,
            output,
            reader,
        };
        process.expect("READY").await?;
        Ok(process)
    }

    /// Waits for the line `what` from the worker process.
    async fn expect(&mut self, what: &str) -> Result<(), String> {
        let wait = async {
            while let Some(line) = self.events.recv().await {
                if line == what {
                    return Ok(());
                }
            }
            Err(format!(
                "the worker process ended before saying {what}: {}",
                self.last_words()
            ))
        };
        tokio::time::timeout(CHILD_TIMEOUT, wait)
            .await
            .map_err(|_| {
                format!("the worker process did not say {what} within {CHILD_TIMEOUT:?}")
            })?
    }

    fn last_words(&self) -> String {
        let out = self.output.lock().unwrap_or_else(PoisonError::into_inner);
        out.other
            .iter()
            .rev()
            .take(5)
            .rev()
            .cloned()
            .collect::<Vec<_>>()
            .join(" | ")
    }

    pub(super) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Fails if the worker process has exited.
    pub(super) fn check_alive(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!(
                "the worker process exited early ({status}): {}",
                self.last_words()
            )),
            Err(e) => Err(format!("cannot query the worker process: {e}")),
        }
    }

    async fn send(&mut self, line: &str) -> Result<(), String> {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .and(self.stdin.flush().await)
            .map_err(|e| format!("cannot talk to the worker process: {e}"))
    }

    /// Stops its workers; returns once it has reported everything.
    pub(super) async fn stop(&mut self) -> Result<(), String> {
        self.send("stop").await?;
        self.expect("STOPPED").await
    }

    /// A copy of the history records it has reported so far.
    pub(super) fn records_so_far(&self) -> Vec<Record> {
        let out = self.output.lock().unwrap_or_else(PoisonError::into_inner);
        out.records.clone()
    }

    /// Everything it reported so far.
    pub(super) fn output(&self) -> ChildOutput {
        let mut out = self.output.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::take(&mut *out)
    }

    /// Lets it shut its clients down and exit (killed if it does not).
    pub(super) async fn exit(mut self) {
        let _ = self.send("exit").await;
        drop(self.stdin);
        if tokio::time::timeout(CHILD_TIMEOUT, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
        let _ = self.reader.await;
    }
}

/// Reads the worker process's stdout: history lines, counters, events.
async fn read_child(
    stdout: tokio::process::ChildStdout,
    output: Arc<Mutex<ChildOutput>>,
    events: mpsc::UnboundedSender<String>,
) {
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let mut out = output.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(record) = Record::from_line(&line) {
            match record {
                Ok(r) => out.records.push(r),
                Err(e) => out.other.push(e),
            }
        } else if let Some((kind, counts)) = Counts::from_line(&line) {
            out.counts.insert(kind, counts);
        } else if out.coverage.add_line(&line) {
        } else if let Some(rest) = line.strip_prefix("X\t") {
            if let Some((kind, message)) = rest
                .split_once('\t')
                .and_then(|(k, m)| Some((Kind::parse(k)?, m)))
            {
                out.errors.entry(kind).or_default().push(message.to_owned());
            }
        } else if let Some(what) = line.strip_prefix("V\t") {
            out.violations.push(format!("p1: {what}"));
        } else if line == "READY" || line == "STOPPED" {
            let _ = events.send(line);
        } else {
            println!("[worker process] {line}");
            out.other.push(line);
        }
    }
}

/// The worker process: `redisync-torture worker --process P --seed N
/// --lease-ms L --tasks T --drop-percent D --main URL --nodes U,U,U
/// --main-proxied URL --nodes-proxied U,U,U`.
///
/// Runs the workers of one process (its four client sets),
/// prints each section as a history line on stdout as it ends, and says
/// `READY` once running. On `stop` (a line on stdin) it stops the workers,
/// prints its counters and `STOPPED`, and keeps its clients connected (for
/// check (d)) until `exit` or the end of stdin.
///
/// # Errors
/// A message for bad arguments or when the clients cannot connect.
pub async fn worker_process(args: &[String]) -> Result<(), String> {
    let mut opts: HashMap<&str, &str> = HashMap::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        opts.insert(flag.as_str(), value.as_str());
    }
    let get = |flag: &str| {
        opts.get(flag)
            .copied()
            .ok_or_else(|| format!("missing {flag}"))
    };
    let num = |flag: &str| -> Result<u64, String> {
        get(flag)?.parse().map_err(|e| format!("bad {flag}: {e}"))
    };
    let urls = |main: &str, nodes: &str| -> Result<Urls, String> {
        Ok(Urls {
            main: get(main)?.to_owned(),
            nodes: get(nodes)?.split(',').map(str::to_owned).collect(),
        })
    };
    let process = get("--process")?;
    let settings = Settings::new(
        Duration::from_millis(num("--lease-ms")?),
        num("--drop-percent")?,
    );
    let tasks = usize::try_from(num("--tasks")?).map_err(|e| e.to_string())?;
    let (sink, mut sections) = mpsc::unbounded_channel::<Record>();
    let mut workers = Workers::start(
        process,
        &urls("--main", "--nodes")?,
        &urls("--main-proxied", "--nodes-proxied")?,
        settings,
        tasks,
        num("--seed")?,
        &sink,
    )
    .await?;
    drop(sink);
    say("READY");
    let printer = tokio::spawn(async move {
        while let Some(s) = sections.recv().await {
            say(&s.to_line());
        }
    });
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    // Until "stop" (or the coordinator is gone).
    while let Ok(Some(line)) = stdin.next_line().await {
        if line == "stop" {
            break;
        }
    }
    workers.stop(STOP_WITHIN).await;
    let _ = printer.await;
    for kind in Kind::ALL {
        say(&workers.stats.counts(kind).to_line(kind));
        for sample in workers.stats.samples(kind) {
            say(&format!("X\t{}\t{sample}", kind.name()));
        }
    }
    for what in workers.stats.violations() {
        say(&format!("V\t{what}"));
    }
    for line in workers.stats.coverage.snapshot().to_lines() {
        say(&line);
    }
    say("STOPPED");
    while let Ok(Some(line)) = stdin.next_line().await {
        if line == "exit" {
            break;
        }
    }
    workers.shutdown().await;
    Ok(())
}

/// One line on stdout, flushed (the coordinator reads it at once).
fn say(line: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

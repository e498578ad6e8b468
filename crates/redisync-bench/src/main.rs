//! Benchmark driver for redisync: the scenarios S1-S6 described in `BENCHMARKS.md`.
//!
//! ```text
//! redisync-bench --scenario S1|S2|S3 --ports P1[,P2,P3] [parameters]
//!                [--lease fixed|watchdog] [--clients N] [--kind lock|fair|semaphore|write|spin]
//!                [--release await|drop]
//! redisync-bench --scenario S5 --ports P1[,P2,...] [--cluster] [parameters]
//! redisync-bench --scenario S6 --ports P1 --clients N [parameters]
//! redisync-bench --all [--quick] [--repeats N]
//! redisync-bench --compare [--quick] [--repeats N]
//! redisync-bench --tls [--quick] [--repeats N]
//! ```
//!
//! With `--ports` the servers already listening on 127.0.0.1 are used and
//! exactly one JSON line is printed on stdout (logs go to stderr); the exit
//! status is 0 even when the line says `"ok": false` (2 for a bad command
//! line). `--all` starts a fresh `redis-server` through `redisync-testkit`
//! for every run of S1, S2 and S3 with `Lock`, `FairLock`, `Semaphore(1)`
//! and the spin baseline (plus S2 with a watchdog-leased `Lock`), then three
//! fresh servers for each of S4.1 (S1 through a `Redlock`) and S4.2 (S2
//! through a `Redlock`), then S5 on a fresh server and on a fresh
//! 3-primary Redis Cluster, and prints one line per run, then one
//! `"kind":"comparison"` line per (scenario, variant) with the ratios to the
//! spin baseline (and the same as a table on stderr) and one
//! `"kind":"scaling"` line (S5: cluster / one node); it exits with 1 if any
//! run was not ok. `--compare` runs redisync side by side with the peer
//! rslock (see `peers.rs`): S1 with the floors too and with `Lock`
//! "released by drop", S2, S6 and S4 through a `Redlock` and rslock over
//! three servers, each 5 times (variants interleaved), then prints markdown
//! tables of medians with min-max and ratios to rslock on stderr.
//! `--repeats N` runs S1, S2, S4, S5 and S6 N times (variants interleaved)
//! and compares medians; S3 runs once.
//!
//! `--tls` measures what TLS costs: S1 and S2 with `Lock` (fixed lease),
//! each run on a fresh server, alternately over plain TCP (`redis://`, a
//! plain server) and over TLS (`rediss://` to the TLS port of a server of
//! the same binary started with `--tls-port` and test certificates; the
//! client trusts their CA, no client certificate), 5 times each by default
//! (plain, TLS, plain, TLS, ...; `--repeats N`); then a markdown table per
//! scenario on stderr: medians with min-max, and the ratios TLS / plain of
//! the medians with the min-max of the per-repeat pairs. The lines of the
//! TLS runs carry `"transport":"tls"` and the variant `Lock (TLS)`; the
//! commands are counted over the plain port, so cmds/op must match.
//!
//! S1 "released by drop" (`--release drop`, `Lock` only; variant
//! `Lock (released by drop)`): the loop drops the guard instead of awaiting
//! `unlock()`, so the library releases in the background, and acquires
//! again at once. Each acquisition must be a new one (its fencing token above
//! the previous; a re-entry into a hold not yet released would repeat it):
//! those that are not count as `not_released`, and the lock must be free
//! within 5 s after the window (`freed_after_window`); either, or an
//! acquire that got nothing, makes the run not ok.
//!
//! S6 (S2 spread over clients): S2's workload (16 workers on one key, 2 ms
//! holds, fixed 10 s lease, 5 s window) with the workers spread over
//! `--clients N` clients, each its own `redisync::Client` (or rslock
//! `LockManager`, or plain fred client for the spin baseline; worker i uses
//! client i % N). Its lines carry `"scenario":"S6"`, `clients`, `workers`
//! and a `label` with the layout, "S6 16x1" (16 clients x 1 worker each).
//! `--compare` runs the layouts 16x1 and 4x4 for `Lock`, `FairLock`,
//! `Semaphore(1)`, the write side of `RwLock`, rslock and the spin
//! baseline, plus the reference
//! "S6 1x16" (`Lock` with all 16 workers in one client, i.e. S2's `Lock`) in
//! the same interleaving, and prints one table per layout: acq/s (min-max),
//! x rslock, x the reference's acq/s, cmds/acq, the least and the most
//! served worker's acquisitions, wait p99.
//!
//! S5 (many keys): `workers` tasks loop for `duration-s`, each operation on
//! a key `bench:lock:<i>` picked uniformly from `keys` (one `Lock` handle per
//! key, made and warmed up before the window): `try_lock(10 s, lease)`, hold
//! `hold-ms` (a `tokio::time::sleep`, none by default), `unlock`. One port:
//! one server. `--cluster`: the ports are nodes of one Redis Cluster, the
//! client connects with `redis-cluster://127.0.0.1:P1` (a plain `Lock`, not
//! a Redlock; each lock lives in the slot of its name), and the commands are
//! counted on every primary that `CLUSTER NODES` lists (`instances` = their
//! number, `cmds_per_instance` how the work spread).
//!
//! `--kind spin` is the naive spin-lock baseline implemented in the bench
//! (`SET NX PX`, 50 ms sleep between tries, compare-and-delete release; see
//! `spin.rs`), reported with `"lib":"spin-baseline"`, one server only.
//!
//! Three ports mean scenario S4: the same scenario through a
//! `redisync_redlock::Redlock` over the three servers (one `redisync::Client`
//! per server). Its restart guard stays on with `max_lease` = the lease in
//! use; servers younger than that do not count, so the bench first waits
//! until every server has been up that long (`--all` starts the S4 servers
//! first, so they come of age during the other runs).
//!
//! Concurrency model: tokio tasks on the multi-thread runtime, all sharing
//! one `redisync::Client` (`--clients N` spreads the S2/S3/S6 tasks over N
//! clients, to see contention between processes; S5 always uses one).
//! Times come from one monotonic clock (`Instant`).

mod args;
mod compare;
mod opts;
mod peers;
mod redis_stats;
mod report;
mod run;
mod scenarios;
mod spin;
mod stats;
mod suite;

use args::{message, parse_args, Command};
use report::emit;
use run::run_one;
use serde_json::{json, Map};
use std::process::ExitCode;
use suite::run_suite;

/// The one key every scenario locks (S5: `bench:lock:<i>`).
const KEY: &str = "bench:lock";

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    stats::now_ns(); // starts the monotonic clock
    match parse_args(std::env::args_os()) {
        Ok(Command::One(o)) => {
            emit(&run_one(&o).await);
            ExitCode::SUCCESS
        }
        Ok(Command::Suite(suite)) => run_suite(suite).await,
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => {
            // Help goes to stdout, exit 0.
            let _ = e.print();
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = e.print();
            // The caller reads stdout: it gets one line there too.
            let mut out = Map::new();
            out.insert("ok".into(), json!(false));
            out.insert("error".into(), json!(message(&e)));
            out.insert("lib".into(), json!("redisync"));
            out.insert("lib_version".into(), json!(env!("CARGO_PKG_VERSION")));
            out.insert("lang".into(), json!("rust"));
            emit(&out);
            ExitCode::from(2)
        }
    }
}

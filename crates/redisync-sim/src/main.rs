//! Explores seeds of the simulation, or replays one.
//!
//! ```text
//! redisync-sim --minutes 10          # new seeds for 10 minutes
//! redisync-sim --minutes 10 --stop-at-first   # until the first failing seed
//! redisync-sim --seed 42 [--history FILE]   # one seed, its history to FILE
//! ```

use std::time::{Duration, Instant};

use redisync_sim::{simulate, SimConfig, SimOutcome};
use redisync_torture::Coverage;

fn usage() -> ! {
    eprintln!(
        "usage: redisync-sim --minutes M [--first-seed N] [--stop-at-first] | --seed N [--history FILE]"
    );
    std::process::exit(2);
}

fn report(outcome: &SimOutcome) {
    for v in &outcome.report.violations {
        println!("seed {}: VIOLATION {v}", outcome.seed);
    }
}

#[allow(clippy::cast_precision_loss, reason = "rates for a human to read")]
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| -> Option<String> {
        args.iter()
            .position(|a| a == name)
            .map(|i| args.get(i + 1).cloned().unwrap_or_else(|| usage()))
    };
    let number = |name: &str| value(name).map(|v| v.parse::<u64>().unwrap_or_else(|_| usage()));
    if let Some(seed) = number("--seed") {
        let started = Instant::now();
        let outcome = simulate(&SimConfig::new(seed)).unwrap_or_else(|e| {
            eprintln!("seed {seed}: {e}");
            std::process::exit(1)
        });
        if let Some(path) = value("--history") {
            if let Err(e) = std::fs::write(&path, outcome.lines.join("\n") + "\n") {
                eprintln!("cannot write {path}: {e}");
            }
        }
        report(&outcome);
        print!("operations (calls per ending):\n{}", outcome.coverage);
        println!(
            "seed {seed}: {} violations, {} grants, {} commands, {} faults, history digest {:016x}, {:.1} s",
            outcome.report.violations.len(),
            outcome.report.grants,
            outcome.commands,
            outcome.schedule.len(),
            outcome.digest,
            started.elapsed().as_secs_f64()
        );
        std::process::exit(i32::from(!outcome.ok()));
    }
    let Some(minutes) = value("--minutes") else {
        usage()
    };
    let minutes: f64 = minutes.parse().unwrap_or_else(|_| usage());
    let first = number("--first-seed").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    let until = Instant::now() + Duration::from_secs_f64(minutes * 60.0);
    let stop_at_first = args.iter().any(|a| a == "--stop-at-first");
    let started = Instant::now();
    let (mut seeds, mut commands, mut grants, mut failed) = (0u64, 0u64, 0usize, Vec::new());
    let mut coverage = Coverage::default();
    let mut seed = first;
    while Instant::now() < until {
        match simulate(&SimConfig::new(seed)) {
            Ok(outcome) => {
                commands += outcome.commands;
                grants += outcome.report.grants;
                coverage.merge(&outcome.coverage);
                if !outcome.ok() {
                    report(&outcome);
                    failed.push(seed);
                }
                if !failed.is_empty() && stop_at_first {
                    seeds += 1;
                    seed += 1;
                    break;
                }
            }
            Err(e) => {
                println!("seed {seed}: {e}");
                failed.push(seed);
            }
        }
        seeds += 1;
        seed += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    print!("operations (calls per ending, every seed):\n{coverage}");
    println!(
        "{seeds} schedules (seeds {first}..{}) in {secs:.1} s, {commands} commands ({:.0} steps/s), {grants} grants ({:.0}/s), {} failing seeds {failed:?}",
        seed.saturating_sub(1),
        commands as f64 / secs,
        grants as f64 / secs,
        failed.len()
    );
    println!("replay one: cargo run --release -p redisync-sim -- --seed N");
    std::process::exit(i32::from(!failed.is_empty()));
}

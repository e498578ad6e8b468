//! `redisync-torture`: runs the torture test and prints its summary; exits
//! with status 1 on violations, 2 when the run could not be set up.
//!
//! ```text
//! redisync-torture [--minutes M | --seconds S] [--lease-ms L] [--tasks T] [--seed N] [--drop-percent D] [--quiet]
//! redisync-torture worker ...   # the worker process, spawned by a run
//! ```
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Duration;

use redisync_torture::{run, worker_process, Config};

const USAGE: &str = "usage: redisync-torture [--minutes M | --seconds S] [--lease-ms L] [--tasks T] [--seed N] [--drop-percent D] [--quiet]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start a tokio runtime: {e}");
            return ExitCode::from(2);
        }
    };
    if args.first().map(String::as_str) == Some("worker") {
        return match runtime.block_on(worker_process(&args[1..])) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("redisync-torture worker: {e}");
                ExitCode::from(2)
            }
        };
    }
    let config = match parse(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    println!(
        "redisync torture: faults for at least {} s, lease {} ms, seed {}",
        config.duration.as_secs(),
        config.lease.as_millis(),
        config.seed
    );
    match runtime.block_on(run(&config)) {
        Ok(summary) => {
            print!("{summary}");
            if summary.violations().is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("redisync torture could not run: {e}");
            ExitCode::from(2)
        }
    }
}

fn parse(args: &[String]) -> Result<Config, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let mut config = Config::short(exe);
    config.verbose = true;
    config.duration = Duration::from_secs(60);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || -> Result<u64, String> {
            let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
            v.parse()
                .map_err(|e| format!("bad value for {flag}: {v:?}: {e}"))
        };
        match flag.as_str() {
            "--minutes" => config.duration = Duration::from_secs(value()? * 60),
            "--seconds" => config.duration = Duration::from_secs(value()?),
            "--lease-ms" => config.lease = Duration::from_millis(value()?.max(100)),
            "--tasks" => {
                config.tasks_per_family =
                    usize::try_from(value()?.max(1)).map_err(|e| e.to_string())?;
            }
            "--seed" => config.seed = value()?,
            "--drop-percent" => config.drop_percent = value()?.min(100),
            "--quiet" => config.verbose = false,
            "-h" | "--help" => return Err("redisync torture test".into()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(config)
}

//! `redisync`: who holds a lock, since when, with what token, who waits;
//! every lock in the keyspace; and a force-unlock for what is stuck. Over
//! the same connection URLs as the library (single server, cluster,
//! sentinel). Exit codes: 0 done, 1 an error (a name that holds no lock, a
//! key that is not redisync's, Redis unreachable), 2 a usage error.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use redisync::inspect::{Inspection, LockKind};
use redisync::Client;

mod render;

/// Inspect and operate redisync locks.
#[derive(Debug, Parser)]
#[command(name = "redisync", version, about)]
struct Cli {
    /// The Redis URL: redis://, redis-cluster:// or redis-sentinel://.
    #[arg(
        long,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        global = true
    )]
    url: String,
    /// Print JSON (one document on stdout, errors too; schema: docs/operating.md).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Who holds NAME (hold counts, lease left, fencing token), who waits.
    Inspect {
        /// The lock's name, as given to client.lock(..) and the others.
        name: String,
        /// Only this kind (default: every kind used under NAME).
        #[arg(long, value_parser = parse_kind)]
        kind: Option<LockKind>,
    },
    /// Every redisync lock whose name matches PATTERN, one line each.
    List {
        /// A glob: `*` any characters, `?` one, `\` escapes.
        #[arg(default_value = "*")]
        pattern: String,
    },
    /// Remove NAME whoever holds it and wake its waiters (a semaphore gives
    /// back every permit and keeps its set-up); prints what it removed.
    Unlock {
        /// The lock's name.
        name: String,
        /// Required: holders lose the lock (their guards report it lost).
        #[arg(long)]
        force: bool,
        /// Only this kind (default: every kind used under NAME).
        #[arg(long, value_parser = parse_kind)]
        kind: Option<LockKind>,
    },
}

fn parse_kind(s: &str) -> Result<LockKind, String> {
    s.parse().map_err(|e: redisync::Error| e.to_string())
}

/// An error to report: a short machine-readable kind and the message.
#[derive(Debug)]
struct Failure {
    kind: &'static str,
    message: String,
}

impl Failure {
    fn new(kind: &'static str, message: impl Into<String>) -> Failure {
        Failure {
            kind,
            message: message.into(),
        }
    }
}

impl From<redisync::Error> for Failure {
    fn from(e: redisync::Error) -> Failure {
        let kind = match &e {
            redisync::Error::WrongType { .. } | redisync::Error::NotALock { .. } => "not_ours",
            redisync::Error::InvalidArgument(_) => "invalid_argument",
            _ => "redis",
        };
        Failure::new(kind, e.to_string())
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli).await {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(f) => {
            if cli.json {
                println!("{}", render::error_json(f.kind, &f.message));
            } else {
                eprintln!("redisync: {}", f.message);
            }
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: &Cli) -> Result<String, Failure> {
    if let Command::Unlock { force: false, .. } = cli.command {
        return Err(Failure::new(
            "invalid_argument",
            "unlock removes the lock whoever holds it: add --force to do it",
        ));
    }
    let client = Client::builder(&cli.url)
        .connect_timeout(Duration::from_secs(5))
        .command_timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| Failure::new("redis", format!("could not connect to {}: {e}", cli.url)))?;
    let out = command(cli, &client).await;
    // Nothing of this client is held: a failed quit changes nothing.
    let _ = client.shutdown().await;
    out
}

async fn command(cli: &Cli, client: &Client) -> Result<String, Failure> {
    match &cli.command {
        Command::Inspect { name, kind } => {
            let found = existing(client, name, *kind).await?;
            Ok(if cli.json {
                render::inspections_json(&found)
            } else {
                render::inspections_text(&found)
            })
        }
        Command::List { pattern } => {
            let found = client.list(pattern).await?;
            Ok(if cli.json {
                render::inspections_json(&found)
            } else {
                render::list_text(&found)
            })
        }
        Command::Unlock { name, kind, .. } => {
            let found = existing(client, name, *kind).await?;
            let mut removed = Vec::new();
            for i in found {
                if force_unlock(client, &i).await? {
                    removed.push(i);
                }
            }
            if removed.is_empty() {
                return Err(Failure::new(
                    "not_found",
                    format!("{name:?} holds no lock: nothing was removed"),
                ));
            }
            Ok(if cli.json {
                render::removed_json(&removed)
            } else {
                render::removed_text(&removed)
            })
        }
    }
}

/// The kinds NAME exists as (of `kind` only, when given); an error when it
/// holds no lock.
async fn existing(
    client: &Client,
    name: &str,
    kind: Option<LockKind>,
) -> Result<Vec<Inspection>, Failure> {
    let found = client.inspect(name).await?;
    let (live, free): (Vec<Inspection>, Vec<Inspection>) = found
        .into_iter()
        .filter(|i| kind.is_none_or(|k| k == i.kind))
        .partition(|i| i.exists);
    if live.is_empty() {
        let last = free
            .iter()
            .find_map(|i| i.last_token)
            .map(|t| format!(" (free; last fencing token {t})"))
            .unwrap_or_default();
        let what = kind.map_or("no lock".to_owned(), |k| format!("no {k}"));
        return Err(Failure::new(
            "not_found",
            format!("{name:?} holds {what}{last}; `redisync list` shows the names in use"),
        ));
    }
    Ok(live)
}

/// Runs the kind's force-unlock; whether it removed anything.
async fn force_unlock(client: &Client, i: &Inspection) -> Result<bool, Failure> {
    Ok(match i.kind {
        LockKind::Lock => client.lock(&i.name).force_unlock().await?,
        LockKind::FairLock => client.fair_lock(&i.name).force_unlock().await?,
        LockKind::RwLock => client.rw_lock(&i.name).write().force_unlock().await?,
        LockKind::Semaphore => client.semaphore(&i.name).force_release().await?,
        _ => false,
    })
}

//! The `redisync` binary against real servers (one, and a 3-primary
//! cluster): every subcommand, in text and in JSON, and its errors.

use std::time::Duration;

use redisync::Client;
use redisync_testkit::{RedisCluster, RedisServer};
use serde_json::Value;

/// What one run of the binary printed, and how it ended.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }
}

async fn redisync(url: &str, args: &[&str]) -> Run {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_redisync"))
        .args(args)
        .env("REDIS_URL", url)
        .output()
        .await
        .expect("run the redisync binary");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The one lock of an `inspect --json` or the `removed` of an unlock.
fn only(doc: &Value, field: &str) -> Value {
    let all = doc[field].as_array().expect(field);
    assert_eq!(all.len(), 1, "{doc}");
    all[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_holders_tokens_and_waiters_in_text_and_json() {
    let server = RedisServer::start().await;
    let url = server.url();
    let (a, b) = (
        Client::connect(&url).await.unwrap(),
        Client::connect(&url).await.unwrap(),
    );
    let guard = a.lock("orders:42").lock().await.unwrap();
    let again = a.lock("orders:42").lock().await.unwrap();
    let token = guard.fencing_token();

    let text = redisync(&url, &["inspect", "orders:42"]).await;
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(
        text.stdout.starts_with("lock orders:42\n"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("held (lease"), "{}", text.stdout);
    assert!(
        text.stdout.contains(&format!("{}:", a.id())),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("holds 2"), "{}", text.stdout);
    assert!(
        text.stdout.contains(&format!("token {token}")),
        "{}",
        text.stdout
    );

    let lock = only(
        &redisync(&url, &["--json", "inspect", "orders:42"])
            .await
            .json(),
        "locks",
    );
    assert_eq!(lock["kind"], "lock");
    assert_eq!(lock["held"], true);
    assert_eq!(lock["token"], token);
    assert_eq!(lock["last_token"], token);
    let holder = &lock["holders"][0];
    assert_eq!(holder["client_id"], a.id().to_string());
    assert_eq!(holder["mode"], "exclusive");
    assert_eq!(holder["holds"], 2);
    assert!(holder["lease_left_ms"].as_u64().unwrap() > 0);

    // A fair lock with a waiter of another client, shown in queue order.
    let fair = a.fair_lock("jobs").lock().await.unwrap();
    let waiting = b.fair_lock("jobs");
    let waiter = tokio::spawn(async move { waiting.lock().await.map(|g| g.fencing_token()) });
    let mut queued = Value::Null;
    for _ in 0..500 {
        let doc = redisync(&url, &["--json", "inspect", "jobs", "--kind", "fair"])
            .await
            .json();
        if only(&doc, "locks")["waiters"]
            .as_array()
            .is_some_and(|w| !w.is_empty())
        {
            queued = only(&doc, "locks");
            break;
        }
    }
    assert_eq!(
        queued["waiters"][0]["client_id"],
        b.id().to_string(),
        "{queued}"
    );
    assert!(queued["waiters"][0]["expires_in_ms"].as_u64().is_some());
    let text = redisync(&url, &["inspect", "jobs"]).await;
    assert!(text.stdout.contains("waiter   #1"), "{}", text.stdout);

    // A semaphore: permits in use, by whom.
    let pool = a.semaphore("pool");
    pool.set_permits(3).await.unwrap();
    let permits = pool.acquire(2).await.unwrap();
    let sem = only(
        &redisync(&url, &["--json", "inspect", "pool"]).await.json(),
        "locks",
    );
    assert_eq!(sem["kind"], "semaphore");
    assert_eq!(sem["permits"]["in_use"], 2);
    assert_eq!(sem["permits"]["total"], 3);
    assert_eq!(sem["holders"][0]["permits"], 2);
    assert_eq!(sem["last_token"], permits.fencing_token());
    let text = redisync(&url, &["inspect", "pool"]).await;
    assert!(
        text.stdout.contains("permits  2 of 3 in use"),
        "{}",
        text.stdout
    );

    // A read-write lock's readers.
    let read = b.rw_lock("doc").read().lock().await.unwrap();
    let rw = only(
        &redisync(&url, &["--json", "inspect", "doc"]).await.json(),
        "locks",
    );
    assert_eq!(rw["holders"][0]["mode"], "read");
    assert_eq!(rw["holders"][0]["token"], read.fencing_token());

    fair.unlock().await.unwrap();
    assert!(waiter.await.unwrap().unwrap() > 0);
    drop((again, guard, permits, read));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_force_unlock_in_text_and_json() {
    let server = RedisServer::start().await;
    let url = server.url();
    // Renewals every ~330 ms: the holder learns of the force-unlock quickly.
    let a = Client::builder(&url)
        .watchdog_timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let held = a.lock("inv:a").lock().await.unwrap();
    let _fair = a.fair_lock("inv:b").lock().await.unwrap();
    let sem = a.semaphore("other");
    sem.set_permits(2).await.unwrap();
    let permit = sem.acquire(1).await.unwrap();

    let text = redisync(&url, &["list"]).await;
    assert_eq!(text.code, 0, "{}", text.stderr);
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", text.stdout);
    assert!(lines[0].starts_with("lock      inv:a "), "{}", text.stdout);
    assert!(lines[1].starts_with("fair      inv:b "), "{}", text.stdout);
    assert!(lines[2].contains("1/2 permits in use"), "{}", text.stdout);
    let doc = redisync(&url, &["--json", "list", "inv:*"]).await.json();
    let names: Vec<&str> = doc["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["inv:a", "inv:b"]);

    // No --force: refused, nothing touched.
    let refused = redisync(&url, &["unlock", "inv:a"]).await;
    assert_eq!(refused.code, 1);
    assert!(refused.stderr.contains("--force"), "{}", refused.stderr);
    assert!(a.lock("inv:a").is_locked().await.unwrap());

    let removed = redisync(&url, &["unlock", "inv:a", "--force"]).await;
    assert_eq!(removed.code, 0, "{}", removed.stderr);
    assert!(
        removed
            .stdout
            .starts_with("removed lock inv:a: was held by"),
        "{}",
        removed.stdout
    );
    tokio::time::timeout(Duration::from_secs(10), held.lost())
        .await
        .expect("the holder learns it lost the lock");
    assert!(!a.lock("inv:a").is_locked().await.unwrap());

    let doc = redisync(&url, &["--json", "unlock", "other", "--force"])
        .await
        .json();
    let was = only(&doc, "removed");
    assert_eq!(
        (was["kind"].as_str(), was["permits"]["in_use"].as_u64()),
        (Some("semaphore"), Some(1))
    );
    tokio::time::timeout(Duration::from_secs(10), permit.lost())
        .await
        .expect("the permit holder learns it lost its permit");
    assert_eq!(
        sem.available_permits().await.unwrap(),
        2,
        "set-up kept, permits back"
    );

    // Removed: now an error, with the last token in the message.
    let gone = redisync(&url, &["--json", "unlock", "inv:a", "--force"]).await;
    assert_eq!(gone.code, 1);
    assert_eq!(gone.json()["error"]["kind"], "not_found");
    let gone = redisync(&url, &["inspect", "inv:a"]).await;
    assert_eq!(gone.code, 1);
    assert!(
        gone.stderr
            .contains("holds no lock (free; last fencing token"),
        "{}",
        gone.stderr
    );
    a.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_hold_no_lock_and_keys_that_are_not_ours_are_errors() {
    let server = RedisServer::start().await;
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();

    let none = redisync(&url, &["inspect", "nobody"]).await;
    assert_eq!(none.code, 1);
    assert!(
        none.stderr.contains("\"nobody\" holds no lock"),
        "{}",
        none.stderr
    );
    assert!(none.stdout.is_empty());
    let none = redisync(&url, &["--json", "inspect", "nobody"]).await;
    assert_eq!(
        (none.code, none.json()["error"]["kind"].as_str()),
        (1, Some("not_found"))
    );

    // A plain key spelled like the name, and a key of ours holding a string.
    set_plain(&url, "plain").await;
    let plain = redisync(&url, &["--json", "inspect", "plain"]).await;
    assert_eq!(plain.code, 1);
    assert_eq!(plain.json()["error"]["kind"], "not_ours");
    set_plain(&url, "redisync:v1:lock:hold:{bad}").await;
    let wrong = redisync(&url, &["inspect", "bad"]).await;
    assert_eq!(wrong.code, 1);
    assert!(
        wrong.stderr.contains("redisync:v1:lock:hold:{bad}"),
        "{}",
        wrong.stderr
    );
    assert!(
        wrong
            .stderr
            .contains("another type than redisync keeps there"),
        "{}",
        wrong.stderr
    );
    let wrong = redisync(&url, &["--json", "list"]).await;
    assert_eq!(wrong.json()["error"]["kind"], "not_ours");

    // Usage errors exit 2; an unreachable server is an error naming the URL.
    assert_eq!(redisync(&url, &["inspect"]).await.code, 2);
    assert_eq!(
        redisync(&url, &["inspect", "x", "--kind", "queue"])
            .await
            .code,
        2
    );
    let down = redisync("redis://127.0.0.1:1", &["list"]).await;
    assert_eq!(down.code, 1);
    assert!(
        down.stderr
            .contains("could not connect to redis://127.0.0.1:1"),
        "{}",
        down.stderr
    );
    client.shutdown().await.unwrap();
}

/// Writes the string "x" at `key`, as another program would.
async fn set_plain(url: &str, key: &str) {
    use fred::prelude::*;
    let admin = Builder::from_config(Config::from_url(url).unwrap())
        .build()
        .unwrap();
    admin.init().await.unwrap();
    let _: () = admin.set(key, "x", None, None, false).await.unwrap();
    admin.quit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_is_listed_inspected_and_unlocked_across_primaries() {
    let cluster = RedisCluster::start(3, 0).await;
    let url = cluster.url();
    let client = Client::builder(&url)
        .watchdog_timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let mut guards = Vec::new();
    for n in 0..9 {
        guards.push(client.lock(&format!("spread:{n}")).lock().await.unwrap());
    }
    let doc = redisync(&url, &["--json", "list", "spread:*"]).await.json();
    assert_eq!(doc["locks"].as_array().unwrap().len(), 9, "{doc}");
    let text = redisync(&url, &["list"]).await;
    assert_eq!(text.stdout.lines().count(), 9, "{}", text.stdout);

    let one = only(
        &redisync(&url, &["--json", "inspect", "spread:4"])
            .await
            .json(),
        "locks",
    );
    assert_eq!(one["token"], guards[4].fencing_token());
    let text = redisync(&url, &["inspect", "spread:4"]).await;
    assert!(
        text.stdout.starts_with("lock spread:4\n"),
        "{}",
        text.stdout
    );

    let removed = redisync(&url, &["--json", "unlock", "spread:4", "--force"]).await;
    assert_eq!(removed.code, 0, "{}", removed.stdout);
    tokio::time::timeout(Duration::from_secs(10), guards[4].lost())
        .await
        .expect("lost");
    let text = redisync(&url, &["unlock", "spread:5", "--force"]).await;
    assert!(
        text.stdout.starts_with("removed lock spread:5"),
        "{}",
        text.stdout
    );
    let doc = redisync(&url, &["--json", "list", "spread:*"]).await.json();
    assert_eq!(doc["locks"].as_array().unwrap().len(), 7, "{doc}");
    drop(guards);
    client.shutdown().await.unwrap();
}

/// A leader's identity shows in text and JSON; a semaphore whose only
/// permit's lease ended (a crashed holder, not yet reclaimed) is free, not
/// "permits held".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_a_leaders_identity_and_ended_leases_as_free() {
    let server = RedisServer::start().await;
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let leading = client
        .leader("billing")
        .with_identity("billing-1.internal:8080")
        .campaign()
        .await
        .unwrap();
    let text = redisync(&url, &["inspect", "billing"]).await;
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(
        text.stdout.contains("identity billing-1.internal:8080"),
        "{}",
        text.stdout
    );
    let json = redisync(&url, &["--json", "inspect", "billing"])
        .await
        .json();
    let lock = only(&json, "locks");
    assert_eq!(lock["identity"], "billing-1.internal:8080", "{json}");
    leading.resign().await.unwrap();

    let sem = client.semaphore("payments").with_permits(1);
    let permit = sem
        .acquire_with_lease(1, Duration::from_millis(100))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), permit.lost())
        .await
        .expect("the fixed lease ran out");
    // Like a crash: nothing released it, nobody reclaimed it yet.
    std::mem::forget(permit);
    // The client's clock gave up first (it counts from the send): wait for
    // Redis's lease end too (an ended permit reads as a lease of zero, or
    // is gone with its key, whose TTL is its longest lease).
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let seen = sem.inspect().await.unwrap();
            if seen
                .holders
                .first()
                .is_none_or(|h| h.lease_left == Some(Duration::ZERO))
            {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the lease ends in Redis");
    assert!(!seen.is_held(), "an ended lease counts as held: {seen:?}");
    let text = redisync(&url, &["inspect", "payments"]).await;
    assert!(text.stdout.contains("state    free"), "{}", text.stdout);
    let json = redisync(&url, &["--json", "inspect", "payments"])
        .await
        .json();
    assert_eq!(only(&json, "locks")["held"], false, "{json}");
}

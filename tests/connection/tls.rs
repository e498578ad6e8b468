//! TLS and authentication against a real `redis-server` with `--tls-port`
//! and certificates made at test time (testkit's `TestCerts`).
//!
//! A server binary without TLS skips these tests with a printed reason,
//! unless `REDISYNC_REQUIRE_TLS=1` (CI), where it fails them.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redisync::{Client, ClientBuilder, Credentials, RedisErrorKind};
use redisync_redlock::Redlock;
use redisync_testkit::{command, RedisServer, TestCerts, TestkitError};

/// Bound on everything a test waits for on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(20);

fn tls_required() -> bool {
    std::env::var("REDISYNC_REQUIRE_TLS").is_ok_and(|v| v == "1")
}

/// A TLS server (mutual TLS with `auth_clients`), or `None` (skip) when the
/// server binary has no TLS and CI does not require it.
async fn tls_server(certs: &TestCerts, auth_clients: bool) -> Option<RedisServer> {
    match RedisServer::try_start_tls(certs, auth_clients, &[]).await {
        Ok(server) => Some(server),
        Err(
            e @ (TestkitError::NoTls { .. }
            | TestkitError::BinaryNotFound
            | TestkitError::NoServer(_)),
        ) if !tls_required() => {
            eprintln!("skipped: no TLS-enabled redis-server ({e}); REDISYNC_REQUIRE_TLS=1 makes this a failure");
            None
        }
        Err(e) => panic!(
            "no TLS-enabled redis-server (REDISYNC_REQUIRE_TLS={}): {e}",
            tls_required()
        ),
    }
}

/// One TLS server and its certificates.
struct Tls {
    certs: TestCerts,
    server: RedisServer,
}

impl Tls {
    async fn start(auth_clients: bool) -> Option<Tls> {
        let certs = TestCerts::generate().expect("certificates");
        let server = tls_server(&certs, auth_clients).await?;
        Some(Tls { certs, server })
    }

    fn url(&self) -> String {
        self.server.tls_url().expect("a TLS server")
    }

    /// A builder on the TLS port that trusts the test CA.
    fn builder(&self) -> ClientBuilder {
        self.builder_for(&self.url())
    }

    fn builder_for(&self, url: &str) -> ClientBuilder {
        Client::builder(url).tls_ca_pem(self.certs.ca_pem.clone())
    }

    async fn client(&self) -> Client {
        self.builder().connect().await.expect("connect over TLS")
    }

    /// A command over the plain port (administration).
    async fn admin(&self, args: &[&str]) -> String {
        command(self.server.port(), args)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", args.join(" ")))
    }

    /// Adds the ACL user `user` with `password` and every right.
    async fn add_user(&self, user: &str, password: &str) {
        let pass = format!(">{password}");
        let reply = self
            .admin(&["ACL", "SETUSER", user, "on", &pass, "~*", "&*", "+@all"])
            .await;
        assert_eq!(reply.trim(), "OK", "ACL SETUSER {user}");
    }
}

/// The error of a connect that must fail.
async fn connect_error(builder: ClientBuilder) -> redisync::Error {
    match builder.connect().await {
        Ok(_) => panic!("connected, but the connect should have failed"),
        Err(e) => {
            eprintln!("connect failed as it should: {e}");
            e
        }
    }
}

/// Takes and releases a lock through `client`, and checks that another
/// client sees it held meanwhile.
async fn lock_round_trip(client: &Client, other: &Client, name: &str) {
    let guard = client.lock(name).lock().await.expect("lock");
    let busy = other
        .lock(name)
        .try_lock(Duration::ZERO, None)
        .await
        .expect("try_lock");
    assert!(busy.is_none(), "{name} is held");
    guard.unlock().await.expect("unlock");
    let free = other
        .lock(name)
        .try_lock(Duration::ZERO, None)
        .await
        .expect("try_lock");
    free.expect("free after unlock")
        .unlock()
        .await
        .expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_and_unlock_over_tls() {
    let Some(tls) = Tls::start(false).await else {
        return;
    };
    let (a, b) = (tls.client().await, tls.client().await);
    lock_round_trip(&a, &b, "tls:lock").await;
    // The server name override: verified against "localhost" (a SAN).
    let named = tls
        .builder()
        .tls_server_name("localhost")
        .connect()
        .await
        .expect("connect with a server name");
    lock_round_trip(&named, &b, "tls:named").await;
    for c in [a, b, named] {
        c.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_when_the_holder_releases_over_tls() {
    let Some(tls) = Tls::start(false).await else {
        return;
    };
    let (holder, waiter) = (tls.client().await, tls.client().await);
    let admin = common::admin(&tls.server.url()).await;
    // A lease far beyond the wait: only the release message can wake it.
    let guard = holder
        .lock("tls:wake")
        .lock_with_lease(Duration::from_secs(90))
        .await
        .expect("lock");
    let lock = waiter.lock("tls:wake");
    let waiting = tokio::spawn(async move { lock.try_lock(PATIENCE, None).await });
    let channel = common::key("lock", "ch", "tls:wake");
    let deadline = Instant::now() + PATIENCE;
    while common::subscribers(&admin, &channel).await < 1 {
        assert!(Instant::now() < deadline, "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let released = Instant::now();
    guard.unlock().await.expect("unlock");
    let got = waiting.await.expect("task").expect("try_lock");
    let got = got.expect("woken and acquired before its wait ran out");
    assert!(released.elapsed() < PATIENCE, "woken by the release");
    got.unlock().await.expect("unlock");
    holder.shutdown().await.expect("shutdown");
    waiter.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_past_the_lease_over_tls() {
    let Some(tls) = Tls::start(false).await else {
        return;
    };
    let lease = Duration::from_millis(300);
    let holder = tls
        .builder()
        .watchdog_timeout(lease)
        .connect()
        .await
        .expect("connect");
    let other = tls.client().await;
    let guard = holder.lock("tls:watchdog").lock().await.expect("lock");
    // Time passing is what is tested: four leases.
    tokio::time::sleep(lease * 4).await;
    assert!(!guard.is_lost(), "the watchdog kept the lease");
    let busy = other
        .lock("tls:watchdog")
        .try_lock(Duration::ZERO, None)
        .await
        .expect("try_lock");
    assert!(busy.is_none(), "still held after four leases");
    guard.unlock().await.expect("unlock");
    holder.shutdown().await.expect("shutdown");
    other.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_over_three_tls_nodes() {
    let certs = TestCerts::generate().expect("certificates");
    let mut nodes = Vec::new();
    for _ in 0..3 {
        let Some(server) = tls_server(&certs, false).await else {
            return;
        };
        nodes.push(server);
    }
    let mut clients = Vec::new();
    for node in &nodes {
        let url = node.tls_url().expect("a TLS server");
        clients.push(
            Client::builder(&url)
                .tls_ca_pem(certs.ca_pem.clone())
                .connect()
                .await
                .expect("connect a node over TLS"),
        );
    }
    let redlock = |name: &str| {
        // Fresh servers: no restart guard (it would wait out max_lease).
        Redlock::builder(clients.iter().map(|c| c.lock(name)).collect())
            .max_lease(Duration::ZERO)
            .build()
            .expect("build")
    };
    let a = redlock("tls:redlock");
    let guard = a.lock().await.expect("redlock");
    assert!(guard.nodes().len() >= 2, "a majority: {:?}", guard.nodes());
    let b = redlock("tls:redlock");
    assert!(
        b.try_lock(Duration::ZERO, None)
            .await
            .expect("try_lock")
            .is_none(),
        "held by a"
    );
    guard.unlock().await.expect("unlock");
    let again = a.try_lock(PATIENCE, None).await.expect("try_lock");
    again.expect("free again").unlock().await.expect("unlock");
    for c in clients {
        c.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_needs_a_client_certificate() {
    let Some(tls) = Tls::start(true).await else {
        return;
    };
    let e = connect_error(tls.builder().connect_timeout(Duration::from_secs(5))).await;
    let text = e.to_string();
    assert!(text.contains(&tls.url()), "names the address: {text}");
    assert!(
        e.redis_kind() == Some(RedisErrorKind::Tls) && text.contains("client certificate"),
        "says a client certificate may be needed: {text}"
    );
    let client = tls
        .builder()
        .tls_client_cert_pem(
            tls.certs.client_cert_pem.clone(),
            tls.certs.client_key_pem.clone(),
        )
        .connect()
        .await
        .expect("connect with a client certificate");
    let other = tls
        .builder()
        .tls_client_cert_pem(
            tls.certs.client_cert_pem.clone(),
            tls.certs.client_key_pem.clone(),
        )
        .connect()
        .await
        .expect("connect with a client certificate");
    lock_round_trip(&client, &other, "tls:mutual").await;
    client.shutdown().await.expect("shutdown");
    other.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_fails_naming_the_address() {
    let Some(tls) = Tls::start(false).await else {
        return;
    };
    let other_ca = TestCerts::generate().expect("certificates").ca_pem;
    let e = connect_error(Client::builder(&tls.url()).tls_ca_pem(other_ca)).await;
    let text = e.to_string();
    assert_eq!(e.redis_kind(), Some(RedisErrorKind::Tls), "{text}");
    assert!(text.contains(&tls.url()), "names the address: {text}");
    assert!(text.contains("wrong CA"), "says why: {text}");
    // The system CAs do not know the test CA either.
    let e = connect_error(Client::builder(&tls.url())).await;
    assert_eq!(e.redis_kind(), Some(RedisErrorKind::Tls), "{e}");
    // A name the certificate does not carry.
    let e = connect_error(tls.builder().tls_server_name("elsewhere.example")).await;
    let text = e.to_string();
    assert!(text.contains("tls_server_name"), "says why: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_server_behind_rediss_fails_clearly() {
    let Some(tls) = Tls::start(false).await else {
        return;
    };
    let url = format!("rediss://127.0.0.1:{}", tls.server.port());
    let within = Duration::from_secs(3);
    let started = Instant::now();
    let e = connect_error(tls.builder_for(&url).connect_timeout(within)).await;
    let text = e.to_string();
    assert!(started.elapsed() < within + PATIENCE, "bounded: {text}");
    assert!(text.contains(&url), "names the address: {text}");
    assert!(
        text.contains("plain server") && text.contains("redis://"),
        "says it is a plain server: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_server_behind_redis_fails_clearly() {
    let Some(tls) = Tls::start(false).await else {
        return;
    };
    let url = format!(
        "redis://127.0.0.1:{}",
        tls.server.tls_port().expect("a TLS port")
    );
    let within = Duration::from_secs(3);
    let started = Instant::now();
    let e = connect_error(Client::builder(&url).connect_timeout(within)).await;
    let text = e.to_string();
    assert!(started.elapsed() < within + PATIENCE, "bounded: {text}");
    assert!(text.contains(&url), "names the address: {text}");
    assert!(text.contains("rediss://"), "hints at TLS: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_settings_on_a_plain_url_are_refused() {
    let ca = TestCerts::generate().expect("certificates").ca_pem;
    let e = connect_error(Client::builder("redis://127.0.0.1:1").tls_ca_pem(ca)).await;
    assert!(matches!(e, redisync::Error::InvalidArgument(_)), "{e}");
    assert!(
        e.to_string().contains("rediss://"),
        "says what is needed: {e}"
    );
    let e = connect_error(Client::builder("rediss://127.0.0.1:1").tls_ca_pem("not pem")).await;
    assert!(
        e.to_string().contains("tls_ca_pem"),
        "names the setting: {e}"
    );
    let e = connect_error(
        Client::builder("rediss://127.0.0.1:1").tls_client_cert_pem("x", "-----BEGIN SECRET-----"),
    )
    .await;
    assert!(!e.to_string().contains("SECRET"), "no key in: {e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_and_legacy_credentials_from_the_url_and_the_builder() {
    let Some(tls) = Tls::start(false).await else {
        return;
    };
    tls.add_user("app", "s3cret-acl").await;
    let port = tls.server.tls_port().expect("a TLS port");
    let from_url = tls
        .builder_for(&format!("rediss://app:s3cret-acl@127.0.0.1:{port}"))
        .connect()
        .await
        .expect("ACL user from the URL");
    let from_builder = tls
        .builder()
        .credentials("app", "s3cret-acl")
        .connect()
        .await
        .expect("ACL user from the builder");
    lock_round_trip(&from_url, &from_builder, "tls:acl").await;
    // Legacy AUTH: requirepass is the password of the user `default`.
    tls.admin(&["CONFIG", "SET", "requirepass", "legacy-pw"])
        .await;
    let legacy_url = tls
        .builder_for(&format!("rediss://:legacy-pw@127.0.0.1:{port}"))
        .connect()
        .await
        .expect("legacy password from the URL");
    let legacy_builder = tls
        .builder()
        .credentials("default", "legacy-pw")
        .connect()
        .await
        .expect("legacy password from the builder");
    lock_round_trip(&legacy_url, &legacy_builder, "tls:legacy").await;
    let e = connect_error(tls.builder()).await;
    assert_eq!(e.redis_kind(), Some(RedisErrorKind::Auth), "NOAUTH: {e}");
    for c in [from_url, from_builder, legacy_url, legacy_builder] {
        c.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_without_showing_it() {
    let Some(tls) = Tls::start(false).await else {
        return;
    };
    tls.add_user("app", "right-password").await;
    let port = tls.server.tls_port().expect("a TLS port");
    let url = format!("rediss://app:WRONG-pass-123@127.0.0.1:{port}");
    let check = |e: redisync::Error, at: &str| {
        let text = e.to_string();
        let debug = format!("{e:?}");
        assert_eq!(e.redis_kind(), Some(RedisErrorKind::Auth), "{text}");
        assert!(
            text.contains("authentication failed for user \"app\""),
            "names the user: {text}"
        );
        assert!(text.contains(at), "names the address: {text}");
        for secret in ["WRONG-pass-123", "right-password"] {
            assert!(
                !text.contains(secret) && !debug.contains(secret),
                "no secret: {debug}"
            );
        }
    };
    check(
        connect_error(tls.builder_for(&url)).await,
        &format!("rediss://app:***@127.0.0.1:{port}"),
    );
    check(
        connect_error(tls.builder().credentials("app", "WRONG-pass-123")).await,
        &tls.url(),
    );
    check(
        connect_error(
            tls.builder()
                .credential_provider(|| async { Ok(Credentials::new("app", "WRONG-pass-123")) }),
        )
        .await,
        &tls.url(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_credential_provider_is_asked_again_on_reconnect() {
    let Some(tls) = Tls::start(false).await else {
        return;
    };
    tls.add_user("rotating", "token-1").await;
    let calls = Arc::new(AtomicUsize::new(0));
    let token = Arc::new(std::sync::Mutex::new("token-1".to_owned()));
    let (counted, current) = (calls.clone(), token.clone());
    let client = tls
        .builder()
        .credential_provider(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            let password = current.lock().expect("token").clone();
            std::future::ready(Ok(Credentials::new("rotating", password)))
        })
        .connect()
        .await
        .expect("connect with a provider");
    let other = tls.client().await;
    lock_round_trip(&client, &other, "tls:rotate").await;
    let before = calls.load(Ordering::SeqCst);
    assert!(before >= 1, "asked at connect");
    // Rotate: only the new token works from now on, the provider hands it
    // out, and the server drops the connections made with the old one.
    tls.admin(&["ACL", "SETUSER", "rotating", "resetpass", ">token-2"])
        .await;
    *token.lock().expect("token") = "token-2".to_owned();
    let killed = tls.admin(&["CLIENT", "KILL", "USER", "rotating"]).await;
    assert_ne!(
        killed.trim(),
        "0",
        "killed the client's connections: {killed}"
    );
    let deadline = Instant::now() + PATIENCE;
    loop {
        let attempt = client
            .lock("tls:rotate")
            .try_lock(Duration::ZERO, None)
            .await;
        if let Ok(Some(guard)) = attempt {
            guard.unlock().await.expect("unlock");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no command worked after the reconnect: {attempt:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        calls.load(Ordering::SeqCst) > before,
        "asked again at the reconnect ({before} calls before)"
    );
    client.shutdown().await.expect("shutdown");
    other.shutdown().await.expect("shutdown");
}

/// A Redis Cluster over TLS (`rediss-cluster://`, `--tls-cluster yes`: the
/// slot map announces TLS ports): locks on names spread over the slots
/// take, refuse and release, and a waiter on another client is handed the
/// lock when its holder releases (sharded pub/sub over TLS), long before
/// the holder's lease would end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_tls() {
    let certs = TestCerts::generate().expect("certificates");
    let cluster = match redisync_testkit::RedisCluster::try_start_tls(3, 0, &certs).await {
        Ok(cluster) => cluster,
        Err(e @ (TestkitError::NoTls { .. } | TestkitError::BinaryNotFound)) if !tls_required() => {
            eprintln!("skipped: no TLS-enabled redis-server ({e})");
            return;
        }
        Err(e) => panic!(
            "no TLS cluster (REDISYNC_REQUIRE_TLS={}): {e}",
            tls_required()
        ),
    };
    let url = cluster.tls_url().expect("a TLS cluster");
    let connect = || {
        Client::builder(&url)
            .tls_ca_pem(certs.ca_pem.clone())
            .connect()
    };
    let (holder, waiter) = (
        connect().await.expect("connect over TLS"),
        connect().await.expect("connect over TLS"),
    );
    for i in 0..6 {
        lock_round_trip(&holder, &waiter, &format!("tls:cluster:{i}")).await;
    }
    let guard = holder
        .lock("tls:cluster:wake")
        .lock_with_lease(Duration::from_secs(90))
        .await
        .expect("lock");
    let lock = waiter.lock("tls:cluster:wake");
    let waiting = tokio::spawn(async move { lock.try_lock(PATIENCE, None).await });
    let deadline = Instant::now() + PATIENCE;
    while holder
        .lock("tls:cluster:wake")
        .inspect()
        .await
        .expect("inspect")
        .waiters
        .is_empty()
    {
        assert!(Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    guard.unlock().await.expect("unlock");
    let got = waiting.await.expect("task").expect("try_lock");
    got.expect("handed the lock before its wait ran out")
        .unlock()
        .await
        .expect("unlock");
    holder.shutdown().await.expect("shutdown");
    waiter.shutdown().await.expect("shutdown");
}

/// Sentinel over TLS (`rediss-sentinel://`): the sentinels are asked over
/// TLS, the primary they name (its TLS port: they monitor it over TLS) is
/// reached over TLS; locks take, refuse and release through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_over_tls() {
    let certs = TestCerts::generate().expect("certificates");
    let setup = match redisync_testkit::RedisSentinels::try_start_tls(&certs).await {
        Ok(setup) => setup,
        Err(e @ (TestkitError::NoTls { .. } | TestkitError::BinaryNotFound)) if !tls_required() => {
            eprintln!("skipped: no TLS-enabled redis-server ({e})");
            return;
        }
        Err(e) => panic!(
            "no TLS sentinels (REDISYNC_REQUIRE_TLS={}): {e}",
            tls_required()
        ),
    };
    let url = setup.tls_url().expect("TLS sentinels");
    let connect = || {
        Client::builder(&url)
            .tls_ca_pem(certs.ca_pem.clone())
            .connect()
    };
    let (a, b) = (
        connect().await.expect("connect over TLS"),
        connect().await.expect("connect over TLS"),
    );
    for i in 0..3 {
        lock_round_trip(&a, &b, &format!("tls:sentinel:{i}")).await;
    }
    a.shutdown().await.expect("shutdown");
    b.shutdown().await.expect("shutdown");
}

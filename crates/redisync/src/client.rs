//! `Client`: one command connection, one subscriber connection, the watchdog.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use fred::clients::Client as RedisClient;
use fred::interfaces::{ClientLike, EventInterface};
use fred::types::config::{Config, TcpConfig};
use fred::types::{Builder, Value};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::Notify;

use crate::engine::client_inner::{ClientInner, Settings};
use crate::engine::hub::Hub;
use crate::error::{Error, Result};
use crate::redis::connect::{CredentialSource, Credentials, ReconnectPolicy};
use crate::redis::link::{stop_routers, Delivery, FredLink};
use futures::StreamExt;

/// Default watchdog lease.
const DEFAULT_WATCHDOG: Duration = Duration::from_secs(30);
/// Default per-command timeout.
const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(3);
/// How often a connect in progress checks whether it is done.
const CONNECT_POLL: Duration = Duration::from_millis(5);
/// Default [`ClientBuilder::connect_timeout`].
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`ClientBuilder::fence_ttl`].
const DEFAULT_FENCE_TTL: Duration = Duration::from_secs(24 * 3600);
/// The oldest Redis (major, minor) redisync runs on: its scripts use
/// `ZADD GT` (6.2); below 7 it falls back to classic pub/sub.
const MIN_SERVER: (u64, u64) = (6, 2);
const MIN_SERVER_NAME: &str = "6.2";

/// Connects a [`Client`] with non-default settings.
///
/// ```no_run
/// # async fn demo() -> redisync::Result<()> {
/// use std::time::Duration;
/// let client = redisync::Client::builder("redis://127.0.0.1:6379")
///     .watchdog_timeout(Duration::from_secs(10))
///     .command_timeout(Duration::from_secs(1))
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct ClientBuilder {
    url: String,
    settings: Settings,
}

impl ClientBuilder {
    /// Lease of locks taken without an explicit lease; the watchdog renews it
    /// every `lease / 3` while a guard is alive.
    ///
    /// Default: 30 s. Must be at least 30 ms, at most a year (366 days;
    /// checked at connect, [`Error::InvalidArgument`]).
    pub fn watchdog_timeout(mut self, lease: Duration) -> Self {
        self.settings.watchdog_timeout = lease;
        self
    }

    /// How long a fencing counter outlives the last token it issued.
    ///
    /// A token is `max(counter + 1, server time in µs)`, so a lost or
    /// expired counter never makes tokens go back (while the server clock
    /// does not step back); the counter only orders tokens issued within
    /// one microsecond and covers the server clock stepping back by less
    /// than this TTL. Without a TTL every lock name ever used would leave
    /// one key behind. A semaphore keeps its last token in its own hash
    /// instead (which lives as long as its permits): no TTL applies there.
    ///
    /// Default: 24 h. At least 1 s, at most a year.
    pub fn fence_ttl(mut self, ttl: Duration) -> Self {
        self.settings.fence_ttl = ttl;
        self
    }

    /// Whether metrics carry the lock name as a `name` label (besides
    /// `kind`). Off by default: every name is a time series of its own in
    /// the metrics backend, so turn it on only for a bounded set of names.
    /// Metrics are recorded with the cargo feature `metrics` (the
    /// repository's docs/operating.md, "Metrics"); without it this changes nothing.
    pub fn metrics_lock_names(mut self, on: bool) -> Self {
        self.settings.metrics_lock_names = on;
        self
    }

    /// Bound on every Redis command. A command that times out has an unknown
    /// outcome; redisync compensates for acquisitions.
    ///
    /// Default: 3 s. Must not be zero, at most a year (366 days; checked at
    /// connect, [`Error::InvalidArgument`]).
    pub fn command_timeout(mut self, t: Duration) -> Self {
        self.settings.command_timeout = t;
        self
    }

    /// Bound on connecting: both connections of the client (commands and
    /// pub/sub, made at once) with their handshakes. Longer than the command
    /// timeout by default, as a connect on a loaded machine or to a far
    /// server takes several round trips.
    ///
    /// Default: 10 s. Must not be zero, at most a year (366 days; checked at
    /// connect, [`Error::InvalidArgument`]).
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.settings.connect_timeout = t;
        self
    }

    /// Replica sync (Redisson's answer to locks lost in a failover): every
    /// write of every primitive is followed by `WAIT replicas timeout` on the
    /// connection of the primary that ran it.
    ///
    /// - **Acquisitions** (new or re-entrant, of a [`Lock`](crate::Lock), `FairLock`,
    ///   either side of an `RwLock`, a `Semaphore`): when fewer than
    ///   `replicas` replicas acknowledge within `timeout` (or `WAIT` fails),
    ///   the acquisition is undone (one hold; an outer re-entrant hold
    ///   stays) and reported as [`Error::ReplicaSync`] (or the error), so no
    ///   lock is left behind that was reported as failed.
    /// - **Watchdog renewals** count only when acknowledged: a guard's lease
    ///   estimate (`validity`, `lost`) advances only with renewals the
    ///   replicas have, so it never runs past the lease a synced replica
    ///   would keep after a failover. Replicas lagging for a whole lease make
    ///   the guard lost (the lock then ends with its lease on the primary).
    /// - **Extensions** (`extend` of any guard) count only when acknowledged
    ///   too: otherwise `extend` reports [`Error::ReplicaSync`] and the
    ///   guard's lease estimate stays as it was (the primary may keep the
    ///   longer lease; the lock then outlives the guard's belief, not the
    ///   other way round).
    /// - **Releases** are followed by `WAIT` too; too few acknowledgements
    ///   are only logged (the release happened; a failover to a replica
    ///   without it leaves the lock there until its lease ends).
    ///
    /// What it does not do: replication stays asynchronous. A lock
    /// acknowledged by `replicas` replicas survives a failover to one of
    /// *them*; a failover to a replica that had not acknowledged (pick
    /// `replicas` = all replicas, or a majority with Sentinel's/Cluster's
    /// election preferring the most up-to-date one), a write lost after the
    /// acknowledgement (a replica restarted without persistence) or a
    /// partition can still lose it. Fixed-lease locks are not renewed, so
    /// only their acquisition is synced. `WAIT` holds the client's
    /// connection to that primary for up to `timeout` when replicas lag,
    /// delaying the client's other commands to it. A server without `WAIT`
    /// (some managed offerings) fails every acquisition: leave this off there.
    ///
    /// `replicas` must be at least 1, `timeout` above zero and below the
    /// command timeout (checked at connect, [`Error::InvalidArgument`]);
    /// `WAIT` takes whole milliseconds, so it is rounded up (1 ns waits
    /// 1 ms: `WAIT n 0` would block until the replicas answer).
    ///
    /// Default: off.
    pub fn replica_sync(mut self, replicas: u32, timeout: Duration) -> Self {
        self.settings.replica_sync = Some((replicas, timeout));
        self
    }

    /// The restart guard (the single-server analogue of Redlock's
    /// `max_lease`): a Redis restarted without persistence has forgotten
    /// every lease it granted, so a second holder could get a lock while
    /// the first still works. Without it, the defaults are not safe across
    /// such a restart. With the guard, this client takes nothing from a
    /// server that has been up for less than `max_lease`, whatever the
    /// primitive (locks, fair and read-write locks, semaphore permits,
    /// leader campaigns): its acquisitions wait until every lease granted before the restart could
    /// have ended (a zero-wait `try_lock` answers `None`), and leases above
    /// `max_lease` are refused at once ([`Error::InvalidArgument`]): fixed
    /// leases, extensions, and a `watchdog_timeout` above it (at connect).
    ///
    /// Cost: the server's uptime is read once per connection (one `INFO`;
    /// nothing per acquisition while the connection lasts), and a server
    /// that restarted, or a fresh one, grants nothing for up to `max_lease`
    /// (plus a second: the uptime is in whole seconds). Every client that
    /// takes the names must have it for it to close the gap. It does not
    /// cover a failover to a replica that missed a grant (see
    /// [`replica_sync`](ClientBuilder::replica_sync)), and it needs a single
    /// server or a Sentinel set: a cluster is refused at connect (its nodes
    /// restart one by one; use a Redlock over independent servers there).
    ///
    /// `max_lease` is whole milliseconds, rounded up; zero and over a year
    /// (366 days) are refused at connect ([`Error::InvalidArgument`]), as is
    /// a `watchdog_timeout` above it.
    ///
    /// Default: off.
    pub fn restart_guard(mut self, max_lease: Duration) -> Self {
        self.settings.restart_guard = Some(max_lease);
        self
    }

    /// Authenticates as the ACL user `username` with `password` (`AUTH
    /// username password`, or `HELLO ... AUTH`), in place of credentials in
    /// the URL (`redis://user:password@host`). For a password alone (legacy
    /// `requirepass`, the user `default`) use the user `"default"` or put
    /// it in the URL (`redis://:password@host`).
    ///
    /// A wrong user or password fails [`connect`](ClientBuilder::connect)
    /// with an [`Error::Redis`] of kind
    /// [`Auth`](crate::RedisErrorKind::Auth) that names the user and the
    /// address, never the password.
    ///
    /// Default: those of the URL, if any.
    pub fn credentials(mut self, username: impl Into<String>, password: impl Into<String>) -> Self {
        self.settings.credentials = CredentialSource::Fixed(Credentials::new(username, password));
        self
    }

    /// Asks `provider` for the credentials at each connect: each connection
    /// the client makes, each reconnection, each cluster node and sentinel.
    /// For credentials that rotate: IAM authentication tokens of `ElastiCache`
    /// (valid for 15 minutes), Microsoft Entra ID tokens of Azure Cache for
    /// Redis, a secret manager. A connection keeps the credentials it
    /// authenticated with; the server may close it when they expire, and the
    /// reconnection asks again.
    ///
    /// The provider is an async function; a synchronous one returns
    /// `std::future::ready(...)`. Its error fails the connect (or the
    /// reconnection, which is retried by the
    /// [reconnect policy](ClientBuilder::reconnect_policy)) with an error of
    /// kind [`Auth`](crate::RedisErrorKind::Auth) that quotes it: do not put
    /// secrets in it.
    ///
    /// ```no_run
    /// # async fn demo() -> redisync::Result<()> {
    /// use redisync::Credentials;
    /// async fn fetch_token() -> Result<String, redisync::CredentialError> {
    ///     Ok("token".to_owned())
    /// }
    /// let client = redisync::Client::builder("rediss://cache.example.com:6379")
    ///     .credential_provider(|| async { Ok(Credentials::new("app", fetch_token().await?)) })
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// Replaces [`credentials`](ClientBuilder::credentials) and those of the
    /// URL. Default: none.
    pub fn credential_provider<F, Fut>(mut self, provider: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<
                Output = std::result::Result<Credentials, crate::redis::connect::CredentialError>,
            > + Send
            + 'static,
    {
        self.settings.credentials =
            CredentialSource::Provider(Arc::new(crate::redis::connect::Provider::new(provider)));
        self
    }

    /// How the client reconnects after its connection broke (see
    /// [`ReconnectPolicy`]). A lock's lease keeps running meanwhile; the
    /// watchdog renews it again once the connection is back, if the lease
    /// has not ended by then.
    ///
    /// Default: [`ReconnectPolicy::default`] (50 ms doubling up to 2 s,
    /// forever).
    pub fn reconnect_policy(mut self, policy: ReconnectPolicy) -> Self {
        self.settings.reconnect = policy;
        self
    }

    /// How a waiting acquisition rides out a connection blip (see
    /// [`AcquireRetry`](crate::AcquireRetry); not to be confused with
    /// [`ClientBuilder::reconnect_policy`], which is how the connection
    /// comes back): `lock()`, `try_lock` with a wait, a semaphore's
    /// `acquire`, `run_locked` and `Leader::campaign` try again after a
    /// connection error, a timeout or a loading or read-only server, with
    /// exponential back-off and full jitter, until their deadline; an
    /// attempt whose outcome is unknown is undone before the next one, so
    /// one acquisition never holds twice. A zero wait answers at once.
    /// When the deadline passes, the error says in plain words what
    /// happened and names the address.
    ///
    /// Default: [`AcquireRetry::default`](crate::AcquireRetry::default)
    /// (50 ms doubling up to 1 s, as long as the wait lasts);
    /// [`AcquireRetry::never`](crate::AcquireRetry::never) turns it off.
    /// Absurd settings are refused at connect ([`Error::InvalidArgument`]).
    pub fn acquire_retry(mut self, policy: crate::retry::AcquireRetry) -> Self {
        self.settings.acquire_retry = policy;
        self
    }

    /// Trusts only the CA certificates in `pem` (one or more
    /// `-----BEGIN CERTIFICATE-----` blocks) for the server's certificate,
    /// instead of the system's CAs: a private CA, a self-signed server,
    /// Memorystore's per-instance server CA. Certificates are always
    /// verified; there is no switch to turn that off.
    ///
    /// Needs a `rediss://` URL (a plain URL with TLS settings is refused at
    /// connect). Checked at connect: bad PEM or no certificate is an
    /// [`Error::InvalidArgument`].
    ///
    /// Default: the system's CAs (as `rustls-native-certs` finds them).
    #[cfg(feature = "tls")]
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.settings.tls.ca_pem = Some(pem.into());
        self
    }

    /// Presents a client certificate (mutual TLS, for a server with
    /// `tls-auth-clients yes`): `cert_chain_pem` holds the certificate and
    /// any intermediates, `key_pem` its private key (PKCS#8, PKCS#1 or
    /// SEC1 PEM). The key is never printed (nor in `Debug`).
    ///
    /// Checked at connect: a bad PEM, or a key that does not go with the
    /// certificate, is an [`Error::InvalidArgument`].
    ///
    /// Default: none.
    #[cfg(feature = "tls")]
    pub fn tls_client_cert_pem(
        mut self,
        cert_chain_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.settings.tls.client_cert = Some((cert_chain_pem.into(), key_pem.into()));
        self
    }

    /// The name the server's certificate is verified against (and sent as
    /// SNI), instead of the host of the URL: for a server reached by an IP
    /// address or a tunnel whose certificate names its DNS name. With a
    /// cluster it applies to the seed nodes and to every node discovered
    /// from the slot map; with Sentinel to the sentinels (the primary a
    /// sentinel names is verified against the address it gives, a
    /// limitation of fred).
    ///
    /// Checked at connect: a name that is neither a DNS name nor an IP
    /// address is an [`Error::InvalidArgument`].
    ///
    /// Default: the host of the URL (of each node).
    #[cfg(feature = "tls")]
    pub fn tls_server_name(mut self, name: impl Into<String>) -> Self {
        self.settings.tls.server_name = Some(name.into());
        self
    }

    /// Connects both connections and starts the background tasks.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad URL or setting (a `rediss://`
    /// URL without the cargo feature `tls`, TLS settings on a plain URL,
    /// bad PEM), [`Error::Redis`] when the server cannot be reached: its
    /// message names the address (without password) and, for a failed TLS
    /// handshake (untrusted certificate, wrong name, a client certificate
    /// required, a plain server behind `rediss://`) or refused credentials
    /// (kind [`Auth`](crate::RedisErrorKind::Auth), naming the user), says so.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves no client behind (the half-built
    /// connections are closed when dropped).
    pub async fn connect(self) -> Result<Client> {
        // Boxed: connecting (TLS, two connections, the server checks) is a
        // future of some 20 KB that the caller's own would carry.
        Box::pin(Client::connect_with(&self.url, self.settings)).await
    }

    /// A client on another [`Link`](crate::redis::link::Link) than fred's (a
    /// simulated Redis), with this builder's settings, whose owner ids start
    /// with `id` (a fixed id makes a simulation replay exactly). The URL is
    /// not used. Call it on the runtime that will drive the client.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for bad settings or a restart guard on a
    /// clustered link; [`Error::UnsupportedServer`] for a version below the
    /// minimum.
    #[cfg(feature = "simulation")]
    #[doc(hidden)]
    pub fn connect_on<L: crate::redis::link::Link>(
        self,
        link: Arc<L>,
        id: uuid::Uuid,
    ) -> Result<Client> {
        self.settings.validate()?;
        let sharded = check_server(&self.settings, &*link)?;
        Ok(Client::assemble(
            id,
            link,
            None,
            sharded,
            self.settings,
            Vec::new(),
        ))
    }
}

/// Refuses a server below the minimum version, and a restart guard on a
/// cluster; else whether to use sharded pub/sub (Redis 7 on; classic
/// PUBLISH/SUBSCRIBE before, and when the version is unknown: INFO refused
/// by an ACL).
fn check_server(settings: &Settings, link: &dyn crate::redis::link::Link) -> Result<bool> {
    let version = link.server_version();
    let mut parts = version
        .as_deref()
        .unwrap_or("")
        .split('.')
        .map(|p| p.parse::<u64>().unwrap_or(0));
    let major_minor = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if let Some(v) = version.as_ref().filter(|_| major_minor < MIN_SERVER) {
        return Err(Error::UnsupportedServer {
            version: v.clone(),
            minimum: MIN_SERVER_NAME,
        });
    }
    if settings.restart_guard.is_some() && link.is_clustered() {
        return Err(Error::InvalidArgument(
            "restart_guard needs a single server or a Sentinel set, not a cluster (its nodes \
             restart one by one); use a Redlock over independent servers"
                .into(),
        ));
    }
    Ok(version.is_some() && major_minor.0 >= 7)
}

/// A connection to Redis (or a cluster or sentinel set) that makes locks.
///
/// Cheap to clone: every clone shares one command connection, one subscriber
/// connection and one watchdog. Dropping the last clone (and the last guard)
/// closes the connections; [`Client::shutdown`] does it explicitly.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.inner.id)
            .finish_non_exhaustive()
    }
}

/// The URL schemes `connect` takes without TLS.
const SCHEMES: [&str; 6] = [
    "redis",
    "redis-cluster",
    "redis-sentinel",
    "valkey",
    "valkey-cluster",
    "valkey-sentinel",
];

/// The TLS schemes (with the cargo feature `tls`).
const TLS_SCHEMES: [&str; 6] = [
    "rediss",
    "rediss-cluster",
    "rediss-sentinel",
    "valkeys",
    "valkeys-cluster",
    "valkeys-sentinel",
];

/// Refuses a URL whose scheme names no Redis deployment `connect` knows
/// (fred would take `http://host` as a single server), naming the ones
/// that work; else whether it asks for TLS.
fn check_scheme(url: &str) -> Result<bool> {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    match scheme {
        Some(s) if SCHEMES.contains(&s.as_str()) => Ok(false),
        Some(s) if TLS_SCHEMES.contains(&s.as_str()) && cfg!(feature = "tls") => Ok(true),
        Some(s) if TLS_SCHEMES.contains(&s.as_str()) => Err(Error::InvalidArgument(format!(
            "redis url {:?}: TLS ({s}://) needs redisync's cargo feature `tls` \
             (redisync = {{ version = \"...\", features = [\"tls\"] }})",
            redacted(url),
        ))),
        _ => Err(Error::InvalidArgument(format!(
            "redis url {:?} has no scheme redisync connects with; use one of {}",
            redacted(url),
            schemes_text()
        ))),
    }
}

fn schemes_text() -> String {
    let tls: &[&str] = if cfg!(feature = "tls") {
        &TLS_SCHEMES
    } else {
        &[]
    };
    SCHEMES
        .iter()
        .chain(tls)
        .map(|s| format!("{s}://"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `url` with its TLS scheme made plain (`rediss` -> `redis`): fred's own
/// TLS setup for such a URL loads the system CAs with rustls' process-wide
/// default provider, which panics when the program has both of rustls'
/// providers compiled in; redisync puts its own connector on instead.
fn plain_scheme(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let lower = scheme.to_ascii_lowercase();
            let plain = lower
                .replacen("rediss", "redis", 1)
                .replacen("valkeys", "valkey", 1);
            format!("{plain}://{rest}")
        }
        None => url.to_owned(),
    }
}

/// What a failed connect's message needs besides the URL.
struct ConnectContext<'a> {
    url: &'a str,
    tls: bool,
    credentials: CredentialSource,
    url_user: Option<String>,
    url_password: Option<String>,
}

/// fred's builder of both connections with our connection rules.
fn fred_builder(config: Config, settings: &Settings) -> Builder {
    let mut builder = Builder::from_config(config);
    let timeout = settings.command_timeout;
    let connect_timeout = settings.connect_timeout;
    builder
        .with_connection_config(|c| {
            c.connection_timeout = connect_timeout;
            // The handshake (and a cluster's or a sentinel's topology
            // queries) are part of connecting.
            c.internal_command_timeout = connect_timeout;
            // Never re-send a lock mutation after a reconnect: scripts run
            // at most once, and an unknown outcome is compensated.
            c.max_command_attempts = 1;
            // Commands go out as written: a release and the next
            // waiter's acquire, written back to back, do not wait for
            // the first one's acknowledgement (Nagle).
            c.tcp = TcpConfig {
                nodelay: Some(true),
                ..TcpConfig::default()
            };
        })
        .with_performance_config(|p| {
            p.default_command_timeout = timeout;
            // Lagging still wakes every waiter, but rarely.
            p.broadcast_channel_capacity = 4096;
        })
        .set_policy(settings.reconnect.to_fred());
    builder
}

/// fred's configuration of `url` with the settings' credentials and TLS,
/// and what a failed connect's message needs.
fn fred_config<'a>(url: &'a str, settings: &Settings) -> Result<(Config, ConnectContext<'a>)> {
    let tls = check_scheme(url)?;
    #[cfg(feature = "tls")]
    if settings.tls.is_set() && !tls {
        return Err(Error::InvalidArgument(format!(
            "TLS settings (tls_ca_pem, tls_client_cert_pem, tls_server_name) need a \
             TLS url (rediss://...), got {:?}",
            redacted(url)
        )));
    }
    let mut config = Config::from_url(&plain_scheme(url)).map_err(|e| {
        Error::InvalidArgument(format!(
            "bad redis url {:?}: {}",
            redacted(url),
            e.details()
        ))
    })?;
    #[cfg(feature = "tls")]
    if tls {
        settings.tls.apply(&mut config)?;
    }
    let cx = ConnectContext {
        url,
        tls,
        credentials: settings.credentials.clone(),
        url_user: config.username.clone(),
        url_password: config.password.clone(),
    };
    match &settings.credentials {
        CredentialSource::Url => {}
        CredentialSource::Fixed(c) => {
            config.username = c.username().map(str::to_owned);
            config.password = Some(c.password_text().to_owned());
        }
        CredentialSource::Provider(p) => {
            config.username = None;
            config.password = None;
            config.credential_provider =
                Some(Arc::new(crate::redis::connect::FredProvider(p.clone())));
        }
    }
    Ok((config, cx))
}

/// A failed connect as the caller sees it: where it went (fred's
/// "Connection refused" names no address), what kind of failure it was (a
/// TLS handshake, refused credentials, with a hint), and `None` as a
/// timeout. No secret of the context appears in it.
fn connect_failed(
    cx: &ConnectContext<'_>,
    within: Duration,
    e: Option<fred::error::Error>,
) -> Error {
    use crate::redis::connect::{classify, hint, scrub, secrets_of, user_of, Failure};
    use fred::error::ErrorKind;
    let at = redacted(cx.url);
    // Read now: a provider's credentials are known once it was asked.
    let secrets = secrets_of(&cx.credentials, cx.url_password.as_deref());
    let (kind, message) = match e {
        Some(e) => {
            let failure = classify(&e);
            let details = scrub(crate::error::tidy(e.details()), &secrets);
            let hint = hint(&failure, cx.tls, *e.kind() == ErrorKind::Timeout);
            match failure {
                Failure::Auth => (
                    ErrorKind::Auth,
                    format!(
                        "authentication failed for user {:?} at {at}: {details}",
                        user_of(&cx.credentials, cx.url_user.as_deref())
                    ),
                ),
                Failure::Other => (
                    e.kind().clone(),
                    format!("could not connect to {at}: {details}{hint}"),
                ),
                _ => (
                    crate::redis::connect::tls_kind(),
                    format!("TLS handshake with {at} failed: {details}{hint}"),
                ),
            }
        }
        None => (
            ErrorKind::Timeout,
            format!(
                "could not connect to {at} within {within:?}{}",
                hint(&Failure::Other, cx.tls, true)
            ),
        ),
    };
    Error::redis(fred::error::Error::new(kind, message))
}

/// `url` without its password, for messages.
fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split_once(':').map_or(user, |(u, _)| u);
            format!("{scheme}://{user}:***@{host}{path}")
        }
        None => url.to_owned(),
    }
}

/// Starts `client`'s connection task and waits until it is connected, as
/// fred's `init` does, but keeps the task's handle: a connect that is still
/// trying at `deadline` is stopped (`Err(None)`), not left running. A
/// refused connect fails at once (`Err(Some(e))`: fred fails fast on the
/// first connection, and its task ends with the error).
async fn start_connection<C: ClientLike>(
    client: &C,
    deadline: tokio::time::Instant,
) -> std::result::Result<fred::types::ConnectHandle, Option<fred::error::Error>> {
    let mut router = client.connect();
    // fred's `wait_for_connect` reads the state, then subscribes to the
    // connect notice, and sleeps through a connect that completes in between
    // (seen under load): the state is polled as well. It reads `Connected`
    // once every connection is up (all primaries of a cluster).
    let polled = async {
        let mut tick = tokio::time::interval(CONNECT_POLL);
        loop {
            tick.tick().await;
            if client.is_connected() {
                return;
            }
        }
    };
    let connected = async {
        tokio::select! {
            connected = client.wait_for_connect() => connected,
            () = polled => Ok(()),
            ended = &mut router => Err(match ended {
                Ok(Err(e)) => e,
                _ => fred::error::Error::new(fred::error::ErrorKind::IO, "connection task ended"),
            }),
        }
    };
    match tokio::time::timeout_at(deadline, connected).await {
        Ok(Ok(())) => Ok(router),
        Ok(Err(e)) => {
            router.abort();
            Err(Some(e))
        }
        Err(_) => {
            router.abort();
            Err(None)
        }
    }
}

/// Starts the command and the pub/sub connection at once (see
/// [`start_connection`]). When one fails, the other, if up, is told to quit
/// and stopped; the error is the failure's (`None`: timed out).
async fn start_connections(
    redis: &RedisClient,
    subscriber: &fred::clients::SubscriberClient,
    deadline: tokio::time::Instant,
) -> std::result::Result<Vec<fred::types::ConnectHandle>, Option<fred::error::Error>> {
    let (a, b) = futures::join!(
        start_connection(redis, deadline),
        start_connection(subscriber, deadline)
    );
    let (a, b) = match (a, b) {
        (Ok(a), Ok(b)) => return Ok(vec![a, b]),
        other => other,
    };
    // The one that is up quits; an error says more than a timeout.
    let (up, error) = match (a, b) {
        (Ok(router), Err(e)) => {
            let _ = redis.quit().await;
            (Some(router), e)
        }
        (Err(e), Ok(router)) => {
            let _ = subscriber.quit().await;
            (Some(router), e)
        }
        (Err(a), Err(b)) => (None, a.or(b)),
        (Ok(_), Ok(_)) => unreachable!("both up returned above"),
    };
    stop_routers(up.into_iter().collect());
    Err(error)
}

impl Client {
    /// The client whose shared state is `inner`.
    pub(crate) fn of(inner: Arc<ClientInner>) -> Client {
        Client { inner }
    }

    /// Connects with default settings. Accepts every URL fred accepts:
    /// `redis://`, `rediss://` (with a TLS feature of fred), `redis-cluster://`,
    /// `redis-sentinel://`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad URL, [`Error::Redis`] when the
    /// server cannot be reached within the command timeout.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is left behind.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo() -> redisync::Result<()> {
    /// let client = redisync::Client::connect("redis://127.0.0.1:6379").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Client> {
        Client::builder(url).connect().await
    }

    /// A builder for non-default settings.
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            url: url.to_owned(),
            settings: Settings {
                watchdog_timeout: DEFAULT_WATCHDOG,
                command_timeout: DEFAULT_COMMAND_TIMEOUT,
                connect_timeout: DEFAULT_CONNECT_TIMEOUT,
                replica_sync: None,
                fence_ttl: DEFAULT_FENCE_TTL,
                metrics_lock_names: false,
                restart_guard: None,
                credentials: CredentialSource::default(),
                reconnect: ReconnectPolicy::default(),
                acquire_retry: crate::retry::AcquireRetry::default(),
                #[cfg(feature = "tls")]
                tls: crate::redis::connect::TlsSettings::default(),
            },
        }
    }

    async fn connect_with(url: &str, settings: Settings) -> Result<Client> {
        settings.validate()?;
        let (config, cx) = fred_config(url, &settings)?;
        let builder = fred_builder(config, &settings);
        let connect_timeout = settings.connect_timeout;
        let redis = builder.build().map_err(Error::redis)?;
        let subscriber = builder.build_subscriber_client().map_err(Error::redis)?;
        // Only connections still running are told to quit: a failed `init`
        // stopped its own, and one never started was not running (fred warns
        // about quitting either).
        let deadline = tokio::time::Instant::now() + connect_timeout;
        let routers = start_connections(&redis, &subscriber, deadline)
            .await
            .map_err(|e| connect_failed(&cx, connect_timeout, e))?;
        let fred = Arc::new(FredLink::new(redis, subscriber));
        let sharded = match check_server(&settings, &*fred) {
            Ok(sharded) => sharded,
            Err(e) => {
                let _ = futures::join!(fred.redis.quit(), fred.subscriber.quit());
                stop_routers(routers);
                return Err(e);
            }
        };
        let client = Client::assemble(
            uuid::Uuid::new_v4(),
            fred.clone(),
            Some(fred.clone()),
            sharded,
            settings,
            routers,
        );
        let inner = &client.inner;
        let mut tasks = vec![tokio::spawn(resubscribe_on(
            Arc::downgrade(&inner.hub),
            crate::redis::link::every_event(fred.subscriber.cluster_change_rx()),
            "cluster change",
        ))];
        if inner.hub.sharded && fred.redis.is_clustered() {
            tasks.push(tokio::spawn(follow_moved_shard_channels(
                Arc::downgrade(inner),
                fred.redis.cluster_change_rx(),
            )));
        }
        crate::mutex::lock_unpoisoned(&inner.tasks).extend(tasks);
        Ok(client)
    }

    /// A client on `link` (after its checks): the hub, and the tasks that
    /// receive messages and subscribe again after a reconnection.
    fn assemble(
        id: uuid::Uuid,
        link: Arc<dyn crate::redis::link::Link>,
        fred: Option<Arc<FredLink>>,
        sharded: bool,
        settings: Settings,
        routers: Vec<fred::types::ConnectHandle>,
    ) -> Client {
        let restart_guard = settings
            .restart_guard
            .map(crate::redis::restart::RestartGuard::new);
        let inner = Arc::new(ClientInner {
            id,
            id_str: id.to_string(),
            link: link.clone(),
            hub: Arc::new(Hub::new(link, sharded)),
            fred,
            settings,
            closed: AtomicBool::new(false),
            connections_closed: AtomicBool::new(false),
            background: AtomicUsize::new(0),
            background_idle: Notify::new(),
            watchdog_started: AtomicBool::new(false),
            tasks: std::sync::Mutex::new(Vec::new()),
            routers: std::sync::Mutex::new(routers),
            restart_guard,
            connection: Arc::new(crate::connection::ConnectionSignal::new()),
            runtime: tokio::runtime::Handle::current().id(),
        });
        *crate::mutex::lock_unpoisoned(&inner.tasks) = vec![
            tokio::spawn(receive_messages(
                Arc::downgrade(&inner.hub),
                inner.link.deliveries(),
            )),
            tokio::spawn(resubscribe_on(
                Arc::downgrade(&inner.hub),
                inner.link.subscriber_reconnects(),
                "reconnect",
            )),
            tokio::spawn(follow_connection(
                Arc::downgrade(&inner),
                inner.link.connection_changes(),
            )),
        ];
        Client { inner }
    }

    /// The UUID that prefixes every owner id this client writes
    /// (`"<uuid>:<owner tag>"`, see [`Owner`](crate::Owner)).
    pub fn id(&self) -> uuid::Uuid {
        self.inner.id
    }

    /// The lease of watchdog-renewed locks of this client.
    pub fn watchdog_timeout(&self) -> Duration {
        self.inner.settings.watchdog_timeout
    }

    /// The Redis version the server reported at connect (`redis_version`
    /// of `INFO server`; Valkey reports the Redis version it is compatible
    /// with), `None` when it could not be read.
    pub fn server_version(&self) -> Option<String> {
        self.inner.link.server_version()
    }

    /// Where this client was configured to connect (no I/O, no DNS), one
    /// entry per configured endpoint, as `"host:port/db"` with the host in
    /// lower case: the server, each seed node of a cluster, or
    /// `"service@host:port/db"` for each sentinel of a sentinel service.
    ///
    /// Two clients whose endpoints share an entry reach the same server (and
    /// database); different entries do not prove different servers (a host
    /// name and its IP address, or a cluster reached through different
    /// seeds, look different). `redisync-redlock` uses it to refuse one lock
    /// given twice.
    pub fn endpoints(&self) -> Vec<String> {
        self.inner.endpoints()
    }

    /// How long the Redis server has been running: see
    /// [`__private::server_uptime`](crate::__private::server_uptime), through
    /// which `redisync-redlock` reaches it.
    pub(crate) async fn server_uptime(&self) -> Result<Duration> {
        self.inner.server_uptime().await
    }

    /// How many times the command connection was established again since
    /// [`Client::connect`]: see
    /// [`__private::connection_generation`](crate::__private::connection_generation),
    /// through which `redisync-redlock` reaches it.
    pub(crate) fn connection_generation(&self) -> u64 {
        self.inner.connection_generation()
    }

    /// Shuts the client down now: refuses new acquisitions, fails every
    /// waiting acquisition with [`Error::Shutdown`] at once, marks every live
    /// guard [`lost`](crate::LockGuard::lost) *before* releasing its hold,
    /// stops the watchdog, releases every hold at once while releases of
    /// guards dropped before it finish, and closes the connections. All of
    /// it takes at most about one command timeout, however many locks a
    /// hung server leaves unanswered (those end with their leases).
    /// Afterwards every call on this client, its handles and its guards
    /// returns [`Error::Shutdown`] at once (`unlock` and `release` included).
    ///
    /// Code still running under a guard is told only through `lost()`
    /// (`is_lost()`): drain your tasks (release their guards) before calling
    /// it to let them finish. Calling it again does nothing.
    ///
    /// A shutdown without live guards logs nothing at warn level or above
    /// (through `tracing`, or fred's `log` records); each live guard is
    /// reported lost (`redisync.lease.lost`, warn).
    ///
    /// # Errors
    /// Never fails today; release failures are logged (the leases expire).
    ///
    /// # Cancel safety
    /// Cancel safe in effect: waiters fail and background tasks stop at once;
    /// a dropped future may leave some locks to expire by lease instead of
    /// being released.
    pub async fn shutdown(&self) -> Result<()> {
        // Boxed: the releases and the connections' close make a large
        // future that the caller's own would carry.
        Box::pin(self.shut_down()).await
    }

    /// See [`Client::shutdown`].
    async fn shut_down(&self) -> Result<()> {
        self.inner.connection.shut_down();
        self.inner.hub.close();
        // SeqCst: pairs with `ClientInner::start_background`.
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let tasks = std::mem::take(&mut *crate::mutex::lock_unpoisoned(&self.inner.tasks));
        for t in tasks {
            t.abort();
        }
        // One bound for all of it: a hung server would otherwise cost a
        // command timeout per lock (the releases run at once, next to the
        // background ones); what is unanswered by then ends with its lease.
        let deadline = tokio::time::Instant::now() + self.inner.settings.command_timeout;
        let holds: Vec<_> = self
            .inner
            .hub
            .all_slots()
            .iter()
            .flat_map(|slot| slot.holds.all())
            .collect();
        // Tell every guard before any hold is given away.
        for hold in &holds {
            // reintroduce: shutdown-without-telling-guards
            hold.mark_lost("client shut down");
        }
        // reintroduce: shutdown-one-timeout-per-lock
        let releases = futures::future::join_all(holds.iter().map(|hold| async move {
            let release = crate::engine::guard_core::release_at_shutdown(&self.inner, hold);
            // reintroduce: shutdown-one-timeout-per-lock
            let error = match tokio::time::timeout_at(deadline, release).await {
                Ok(Ok(_)) => return,
                Ok(Err(e)) => e.to_string(),
                Err(_) => "no answer within the command timeout".to_owned(),
            };
            tracing::warn!(target: "redisync.release.failed", lock_key = %hold.key, error, "release at shutdown failed");
        }));
        futures::join!(releases, self.inner.background_finished(deadline));
        self.inner.close_connections(deadline).await;
        Ok(())
    }
}

/// Wakes the waiters of every unlock message; on lag wakes everyone.
async fn receive_messages(
    hub: Weak<Hub>,
    mut deliveries: futures::stream::BoxStream<'static, Delivery>,
) {
    while let Some(delivery) = deliveries.next().await {
        let Some(hub) = hub.upgrade() else { return };
        match delivery {
            Delivery::Message { channel, payload } => hub.on_message(&channel, &payload),
            Delivery::Missed => {
                tracing::debug!("unlock messages lagged: waking every waiter");
                hub.wake_all();
            }
        }
    }
}

/// Whenever `rx` fires, subscribes every channel again (retried until it
/// works) and then wakes every waiter: after the subscriber reconnected
/// (messages sent meanwhile are gone) and after the cluster's slot map
/// changed (resharding, failover: the server may have dropped sharded
/// subscriptions, and fred drops its `sunsubscribe` notice).
async fn resubscribe_on(
    hub: Weak<Hub>,
    mut events: futures::stream::BoxStream<'static, ()>,
    what: &'static str,
) {
    while events.next().await.is_some() {
        // Waiters re-check once their subscriptions are back: woken while a
        // failover is still under way they would only collect errors (and
        // parked, each is bounded by its holder's lease anyway).
        let mut pause = Duration::from_millis(50);
        loop {
            let Some(hub) = hub.upgrade() else { return };
            match hub.resubscribe().await {
                Ok(()) => {
                    hub.wake_all();
                    break;
                }
                Err(e) => {
                    tracing::debug!(error = %e, after = what, "resubscribe failed; retrying");
                }
            }
            drop(hub);
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }
}

/// How often a clustered client with sharded subscriptions checks that each
/// is still on the primary that serves its slot.
const SHARD_CHECK_PERIOD: Duration = Duration::from_secs(1);

/// Keeps sharded subscriptions on the primaries that own their slots.
///
/// When a slot moves (resharding) or its primary fails over, the server drops
/// the slot's sharded subscriptions with a `sunsubscribe` push that fred
/// discards, and the subscriber connection never sees a MOVED of its own:
/// the subscription would go silent. So while any channel is subscribed,
/// once a period (and at once when our command connection followed a MOVED)
/// this reads the slot map (one `CLUSTER SLOTS`) and, if a subscribed slot
/// is served elsewhere than the subscriber believes, makes the subscriber
/// sync its map; its cluster-change event then resubscribes and wakes every
/// waiter ([`resubscribe_on`]).
async fn follow_moved_shard_channels<T: Clone>(
    client: Weak<ClientInner>,
    mut moved: tokio::sync::broadcast::Receiver<T>,
) {
    use fred::interfaces::ClusterInterface;
    let mut ticker = tokio::time::interval(SHARD_CHECK_PERIOD);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            event = moved.recv() => {
                if matches!(event, Err(RecvError::Closed)) {
                    return;
                }
            }
        }
        let Some(client) = client.upgrade() else {
            return;
        };
        let slots = client.hub.subscribed_hash_slots().await;
        if slots.is_empty() {
            continue;
        }
        let Some(fred) = client.fred.clone() else {
            return;
        };
        let Some(known) = fred.subscriber.cached_cluster_state() else {
            continue;
        };
        let Some(host) = known.slots().first().map(|r| r.primary.host.clone()) else {
            continue;
        };
        let current = match fred.redis.cluster_slots::<Value>().await {
            Ok(v) => fred::types::cluster::ClusterRouting::from_cluster_slots(v, host),
            Err(e) => Err(e),
        };
        let current = match current {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "reading the cluster slot map failed");
                continue;
            }
        };
        let stale = slots
            .iter()
            .any(|s| current.get_server(*s) != known.get_server(*s));
        if stale {
            tracing::debug!("a subscribed slot moved: syncing the subscriber");
            if let Err(e) = fred.subscriber.sync_cluster().await {
                tracing::warn!(error = %e, "subscriber cluster sync failed");
            }
        }
    }
}

// ---- Connection state ----

impl Client {
    /// A live view of this client's connection state: [`Connected`],
    /// [`Suspended`] while the command connection is lost and the client
    /// reconnects, or Redis does not answer the watchdog's renewals (holds
    /// may be lost: their renewals fail), [`Reconnected`] once Redis
    /// answers again and every hold was looked at (those gone reported
    /// lost first), and [`Shutdown`]; with the count of holds found lost
    /// ([`ConnectionWatch::lost_holds`]). See the repository's docs/connecting.md, "Connection state",
    /// for pausing work while suspended.
    ///
    /// ```no_run
    /// # async fn demo(client: redisync::Client) {
    /// use redisync::ConnectionState;
    ///
    /// let mut connection = client.connection_state();
    /// loop {
    ///     match connection.changed().await {
    ///         ConnectionState::Suspended => println!("connection lost: pausing"),
    ///         ConnectionState::Shutdown => break,
    ///         _ => println!("connected; {} holds lost so far", connection.lost_holds()),
    ///     }
    /// }
    /// # }
    /// ```
    ///
    /// [`Connected`]: crate::ConnectionState::Connected
    /// [`Suspended`]: crate::ConnectionState::Suspended
    /// [`Reconnected`]: crate::ConnectionState::Reconnected
    /// [`Shutdown`]: crate::ConnectionState::Shutdown
    /// [`ConnectionWatch::lost_holds`]: crate::ConnectionWatch::lost_holds
    pub fn connection_state(&self) -> crate::ConnectionWatch {
        self.inner.connection.watch()
    }
}

/// Follows the command connection and tells the watches (see
/// [`ConnectionState`](crate::ConnectionState)): `Suspended` when it is lost
/// (or a renewal found Redis unreachable, see
/// [`ConnectionSignal::unreachable`](crate::connection::ConnectionSignal::unreachable));
/// `Reconnected` only once a look at every hold
/// ([`verify_holds`](crate::engine::watchdog::verify_holds)) had its
/// verdict, started at once when the connection is back. A look that fails,
/// and a suspension with no connection event to wait for (a partition that
/// keeps the connection open), is tried again every watchdog period.
async fn follow_connection(
    client: Weak<ClientInner>,
    mut changes: futures::stream::BoxStream<'static, crate::redis::link::LinkChange>,
) {
    let Some((signal, period)) = client
        .upgrade()
        .map(|c| (c.connection.clone(), c.settings.watchdog_timeout / 3))
    else {
        return;
    };
    // The look in flight, and the pause before the next one.
    let mut look: Option<futures::future::BoxFuture<'static, ()>> = None;
    let mut pause: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    loop {
        tokio::select! {
            biased;
            change = changes.next() => {
                let Some(change) = change else {
                    return;
                };
                // Lost, or made again (a reconnection means it was lost):
                // suspended, and a look in flight no longer counts.
                signal.lost();
                pause = None;
                look = match change {
                    crate::redis::link::LinkChange::Lost => None,
                    crate::redis::link::LinkChange::Back => start_look(&client, false),
                };
            }
            () = signal.suspended_unreachable() => {
                if look.is_none() && pause.is_none() {
                    pause = Some(Box::pin(tokio::time::sleep(period)));
                }
            }
            () = or_pending(look.as_mut()) => {
                look = None;
                if signal.is_suspended() {
                    // The look failed: again after a pause.
                    pause = Some(Box::pin(tokio::time::sleep(period)));
                }
            }
            () = or_pending(pause.as_mut()) => {
                pause = None;
                look = start_look(&client, true);
            }
        }
    }
}

/// `f`'s output, or never when there is none.
async fn or_pending<F: std::future::Future + Unpin>(f: Option<&mut F>) -> F::Output {
    match f {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

/// A look at every hold (see [`follow_connection`]) that publishes
/// `Reconnected` once it has every verdict, unless the connection was lost
/// again meanwhile; `None` once the client is gone or shut down.
fn start_look(
    client: &Weak<ClientInner>,
    probe: bool,
) -> Option<futures::future::BoxFuture<'static, ()>> {
    let client = client.upgrade()?;
    if client.connection.is_shut_down() {
        return None;
    }
    let epoch = client.connection.epoch();
    Some(Box::pin(async move {
        if crate::engine::watchdog::verify_holds(&client, probe).await {
            client.connection.reconnected(epoch);
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::{check_scheme, plain_scheme, redacted};

    #[test]
    fn a_url_in_a_message_never_shows_its_password() {
        assert_eq!(
            redacted("redis://me:secret@host:6379/0"),
            "redis://me:***@host:6379/0"
        );
        assert_eq!(redacted("redis://:secret@host"), "redis://:***@host");
        assert_eq!(redacted("redis://host:6379"), "redis://host:6379");
        assert_eq!(redacted("not a url"), "not a url");
    }

    #[test]
    fn only_the_schemes_that_work_are_taken() {
        for ok in [
            "redis://h",
            "REDIS://h",
            "redis-cluster://h",
            "redis-sentinel://h",
            "valkey://h",
        ] {
            assert!(check_scheme(ok).is_ok(), "{ok}");
        }
        for bad in ["http://h", "h:6379", "unix:///tmp/s"] {
            let e = check_scheme(bad).unwrap_err().to_string();
            assert!(e.contains("redis://"), "{bad}: {e}");
        }
        for tls in [
            "rediss://h",
            "REDISS://h",
            "rediss-cluster://h",
            "valkeys-sentinel://h",
        ] {
            if cfg!(feature = "tls") {
                assert!(check_scheme(tls).unwrap(), "{tls}");
            } else {
                let e = check_scheme(tls).unwrap_err().to_string();
                assert!(e.contains("feature `tls`"), "{tls}: {e}");
            }
        }
        assert!(!check_scheme("redis://h").unwrap());
    }

    #[test]
    fn a_tls_scheme_is_handed_to_fred_as_plain() {
        assert_eq!(plain_scheme("rediss://u:p@h:1/2"), "redis://u:p@h:1/2");
        assert_eq!(plain_scheme("REDISS-cluster://h"), "redis-cluster://h");
        assert_eq!(plain_scheme("valkeys-sentinel://h"), "valkey-sentinel://h");
        assert_eq!(plain_scheme("redis://h"), "redis://h");
    }
}

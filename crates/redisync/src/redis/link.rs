//! The seam under the engine: everything the engine and the primitives ask
//! of Redis, in their terms (run a script, a plain command, which
//! connection answered). `FredLink` is the production side, on fred; a
//! simulated Redis implements the same trait (the `simulation` feature
//! makes it public), so the real engine runs against it.
//!
//! Values, keys and errors stay fred's types: they are plain data, and the
//! engine's error rules (unknown outcome, refusal while a slot moves) read
//! them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use fred::bytes_utils::Str;
use fred::clients::{Client as RedisClient, SubscriberClient};
use fred::error::Error as RedisError;
use fred::interfaces::{ClientLike, EventInterface, LuaInterface, PubsubInterface};
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand, Key, Value};
use futures::stream::{BoxStream, TryStreamExt};
use tokio::sync::broadcast::error::RecvError;

/// What a [`Link`] call returns.
pub type LinkFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, RedisError>> + Send + 'a>>;

/// One run of a Lua script.
#[derive(Debug)]
pub struct ScriptCall<'a> {
    /// The script's SHA1 (EVALSHA).
    pub sha: &'a str,
    /// The script's body: set, the script is sent whole (EVAL), after the
    /// server answered NOSCRIPT to its SHA1.
    pub body: Option<&'a str>,
    /// `KEYS`.
    pub keys: Vec<Key>,
    /// `ARGV`.
    pub args: Vec<Value>,
    /// How many times the link may send it (a re-send after a cluster
    /// redirection; never after a connection was lost with it in flight).
    pub attempts: u32,
}

/// One plain command (`WAIT`, `HMGET`, `INFO`, `EXISTS`, `PUBLISH`, ...).
#[derive(Debug)]
pub struct Command<'a> {
    /// The command's name.
    pub name: &'static str,
    /// The key whose server must run it (a cluster routes by it); `None`:
    /// any server.
    pub route: Option<&'a str>,
    /// Its arguments (keys included).
    pub args: Vec<Value>,
}

/// What the subscriber connection receives.
#[derive(Debug, Clone)]
pub enum Delivery {
    /// A message published on a subscribed channel.
    Message {
        /// The channel it was published on.
        channel: Str,
        /// What was published.
        payload: Value,
    },
    /// Messages were dropped (a receiver fell behind): every waiter must
    /// look again.
    Missed,
}

/// A change of the command connection (see [`Link::connection_changes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkChange {
    /// The connection was lost (or a reconnection failed): the link is
    /// reconnecting.
    Lost,
    /// The connection was established again.
    Back,
}

/// The engine's connection to one Redis deployment (see the [module
/// docs](self)).
pub trait Link: Send + Sync + 'static {
    /// Runs a script on the server of its first key.
    fn script<'a>(&'a self, call: ScriptCall<'a>) -> LinkFuture<'a, Value>;

    /// Runs a plain command; never sent twice.
    fn command<'a>(&'a self, command: Command<'a>) -> LinkFuture<'a, Value>;

    /// How many times the command connection was established again since
    /// the link was made. A reply read before a call came over a connection
    /// this count includes.
    fn connection_generation(&self) -> u64;

    /// Whether keys are spread over a cluster's servers (scripts of one
    /// batch must then share a hash slot).
    fn is_clustered(&self) -> bool;

    /// The server's version (`redis_version` of `INFO server`) as read at
    /// connect, `None` when unknown.
    fn server_version(&self) -> Option<String>;

    /// Whether the command connection is up now (not reconnecting).
    fn is_connected(&self) -> bool;

    /// Every key matching the glob `pattern` (a SCAN of the keyspace, of
    /// every primary of a cluster).
    fn scan(&self, pattern: &'static str) -> LinkFuture<'_, Vec<Key>>;

    /// Subscribes the subscriber connection to `channel` (`SSUBSCRIBE` when
    /// `sharded`, else `SUBSCRIBE`); resolves once the server confirmed, so
    /// a message published afterwards is delivered.
    fn subscribe(&self, channel: Key, sharded: bool) -> LinkFuture<'_, ()>;

    /// Ends a subscription of [`Link::subscribe`].
    fn unsubscribe(&self, channel: Key, sharded: bool) -> LinkFuture<'_, ()>;

    /// What the subscriber connection receives from now on; ends when the
    /// link closes.
    fn deliveries(&self) -> BoxStream<'static, Delivery>;

    /// Yields each time the subscriber connection was established again
    /// (the server forgot its subscriptions, and messages sent meanwhile
    /// are gone); ends when the link closes.
    fn subscriber_reconnects(&self) -> BoxStream<'static, ()>;

    /// Yields each time the command connection is lost and each time it is
    /// back, in order; ends when the link closes.
    fn connection_changes(&self) -> BoxStream<'static, LinkChange>;
}

impl dyn Link {
    /// [`Link::command`] with its reply converted.
    pub(crate) async fn call<R: fred::types::FromValue>(
        &self,
        command: Command<'_>,
    ) -> Result<R, RedisError> {
        self.command(command).await.and_then(R::from_value)
    }
}

/// The production [`Link`]: fred's command and subscriber connections.
pub(crate) struct FredLink {
    pub(crate) redis: RedisClient,
    pub(crate) subscriber: SubscriberClient,
    /// Reconnections of the command connection seen so far, and the
    /// channel they are announced on.
    reconnects: Mutex<(
        tokio::sync::broadcast::Receiver<fred::types::config::Server>,
        u64,
    )>,
}

impl FredLink {
    /// The configured endpoints, as `host:port/db` (see `Client::endpoints`).
    pub(crate) fn endpoints(&self) -> Vec<String> {
        use fred::types::config::ServerConfig;
        let config = self.redis.client_config();
        let db = config.database.unwrap_or(0);
        let at =
            |s: &fred::types::config::Server| format!("{}:{}/{db}", s.host.to_lowercase(), s.port);
        match &config.server {
            ServerConfig::Centralized { server } => vec![at(server)],
            ServerConfig::Clustered { hosts, .. } => hosts.iter().map(at).collect(),
            ServerConfig::Sentinel {
                hosts,
                service_name,
                ..
            } => hosts
                .iter()
                .map(|s| format!("{service_name}@{}", at(s)))
                .collect(),
        }
    }

    pub(crate) fn new(redis: RedisClient, subscriber: SubscriberClient) -> FredLink {
        let reconnects = Mutex::new((redis.reconnect_rx(), 0));
        FredLink {
            redis,
            subscriber,
            reconnects,
        }
    }
}

impl Link for FredLink {
    fn script<'a>(&'a self, call: ScriptCall<'a>) -> LinkFuture<'a, Value> {
        Box::pin(async move {
            let options = Options {
                max_attempts: Some(call.attempts),
                ..Options::default()
            };
            let redis = self.redis.with_options(&options);
            // The typed calls: fred never re-sends them after a reconnect
            // (see `LuaScript::run_idempotent`).
            match call.body {
                None => redis.evalsha(call.sha, call.keys, call.args).await,
                Some(body) => redis.eval(body, call.keys, call.args).await,
            }
        })
    }

    fn command<'a>(&'a self, command: Command<'a>) -> LinkFuture<'a, Value> {
        Box::pin(async move {
            let hash = match command.route {
                Some(key) => ClusterHash::Custom(fred::util::redis_keyslot(key.as_bytes())),
                None => ClusterHash::Random,
            };
            let custom = CustomCommand::new(command.name, hash, false);
            // One send, said here rather than left to the client's setting
            // (a re-sent PUBLISH or WAIT would count twice).
            let options = Options {
                max_attempts: Some(1),
                ..Options::default()
            };
            self.redis
                .with_options(&options)
                .custom(custom, command.args)
                .await
        })
    }

    fn connection_generation(&self) -> u64 {
        use tokio::sync::broadcast::error::TryRecvError;
        let mut guard = crate::mutex::lock_unpoisoned(&self.reconnects);
        let (rx, count) = &mut *guard;
        loop {
            match rx.try_recv() {
                Ok(_) => *count += 1,
                // Missed announcements were reconnections too.
                Err(TryRecvError::Lagged(n)) => *count += n + 1,
                Err(TryRecvError::Empty | TryRecvError::Closed) => return *count,
            }
        }
    }

    fn is_clustered(&self) -> bool {
        self.redis.is_clustered()
    }

    fn server_version(&self) -> Option<String> {
        self.redis.server_version().map(|v| v.to_string())
    }

    fn is_connected(&self) -> bool {
        self.redis.state() == fred::types::ClientState::Connected
    }

    fn scan(&self, pattern: &'static str) -> LinkFuture<'_, Vec<Key>> {
        Box::pin(async move {
            if self.redis.is_clustered() {
                self.redis
                    .scan_cluster_buffered(pattern, Some(500), None)
                    .try_collect()
                    .await
            } else {
                self.redis
                    .scan_buffered(pattern, Some(500), None)
                    .try_collect()
                    .await
            }
        })
    }

    fn subscribe(&self, channel: Key, sharded: bool) -> LinkFuture<'_, ()> {
        Box::pin(async move {
            if sharded {
                self.subscriber.ssubscribe(channel).await
            } else {
                self.subscriber.subscribe(channel).await
            }
        })
    }

    fn unsubscribe(&self, channel: Key, sharded: bool) -> LinkFuture<'_, ()> {
        Box::pin(async move {
            if sharded {
                self.subscriber.sunsubscribe(channel).await
            } else {
                self.subscriber.unsubscribe(channel).await
            }
        })
    }

    fn deliveries(&self) -> BoxStream<'static, Delivery> {
        Box::pin(futures::stream::unfold(
            self.subscriber.message_rx(),
            |mut rx| async move {
                let delivery = match rx.recv().await {
                    Ok(m) => Delivery::Message {
                        channel: m.channel,
                        payload: m.value,
                    },
                    Err(RecvError::Lagged(_)) => Delivery::Missed,
                    Err(RecvError::Closed) => return None,
                };
                Some((delivery, rx))
            },
        ))
    }

    fn subscriber_reconnects(&self) -> BoxStream<'static, ()> {
        every_event(self.subscriber.reconnect_rx())
    }

    fn connection_changes(&self) -> BoxStream<'static, LinkChange> {
        // fred announces a lost connection (its reader ended) and each
        // failed reconnection as an error, a reconnection on its own
        // channel. Both waiting: the error came first (fred reconnects
        // after it), so it is taken first.
        let channels = (self.redis.error_rx(), self.redis.reconnect_rx());
        Box::pin(futures::stream::unfold(
            channels,
            |(mut errors, mut back)| async move {
                let change = tokio::select! {
                    biased;
                    e = errors.recv() => match e {
                        Err(RecvError::Closed) => return None,
                        Ok(_) | Err(RecvError::Lagged(_)) => LinkChange::Lost,
                    },
                    b = back.recv() => match b {
                        Err(RecvError::Closed) => return None,
                        Ok(_) | Err(RecvError::Lagged(_)) => LinkChange::Back,
                    },
                };
                Some((change, (errors, back)))
            },
        ))
    }
}

/// A stream that yields once per event of `rx` (missed ones included, as
/// one) until it closes.
pub(crate) fn every_event<T: Clone + Send + 'static>(
    rx: tokio::sync::broadcast::Receiver<T>,
) -> BoxStream<'static, ()> {
    Box::pin(futures::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(_) | Err(RecvError::Lagged(_)) => Some(((), rx)),
            Err(RecvError::Closed) => None,
        }
    }))
}

/// Quits `client` if fred has it connected; otherwise does nothing (see
/// `ClientInner::close_connections`).
pub(crate) async fn quit_if_up<C: ClientLike>(client: &C) {
    if client.state() == fred::types::ClientState::Connected {
        let _ = client.quit().await;
    }
}

/// Stops connection tasks that were told to quit. A quit sent while fred
/// reconnects (the server gone) waits in its queue, and fred's reconnection
/// loop can miss the close notice: without this it would keep reconnecting
/// and talk to whatever server comes up at that address later.
pub(crate) fn stop_routers(routers: Vec<fred::types::ConnectHandle>) {
    for router in routers {
        router.abort();
    }
}

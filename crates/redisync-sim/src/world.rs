//! A simulated world for the real engine: simulated servers ([`SimRedis`])
//! behind [`SimLink`]s (redisync's seam under the engine), on tokio's
//! paused clock, with every delay and fault drawn from one seeded
//! generator. Run on a current-thread runtime, a seed decides the whole
//! run: the same seed gives the same history.
//!
//! Faults ([`Faults`]): reply and message delays, lost messages, lagging
//! subscribers, connection resets whose command may or may not have run,
//! client stalls (nothing reaches or leaves a stalled client, as under a
//! long pause), server pauses, restarts (empty or from an older snapshot)
//! and clock steps.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use fred::error::{Error as RedisError, ErrorKind};
use fred::types::{Key, Value};
use futures::stream::BoxStream;
use redisync::link::{Command, Delivery, Link, LinkChange, LinkFuture, ScriptCall};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tokio::time::Instant;

use crate::{Reply, SimRedis, Snapshot};
use redisync_torture::Rng;

/// The server version a simulated server reports (the simulator mirrors
/// Redis 7.0: sharded pub/sub, `PEXPIRE .. GT`).
pub const SIM_VERSION: &str = "7.0.15";

/// How often each fault happens (probabilities per command or message, and
/// the mean gap between scheduled faults).
#[derive(Debug, Clone)]
pub struct Faults {
    /// The largest delay of a command on its way or of its reply (most are
    /// far shorter: the draw is skewed to small values).
    pub max_delay: Duration,
    /// Probability that a published message is lost for one subscriber.
    pub message_loss: f64,
    /// Probability that a delivered message finds its subscriber connection
    /// lagging (a full output buffer, a retransmission): it and every later
    /// message to that connection wait until the lag ends.
    pub late_message: f64,
    /// The longest such lag (drawn uniformly: a heavy tail next to
    /// `max_delay`).
    pub max_late: Duration,
    /// Probability that a command's connection resets: the caller gets an
    /// IO error, and the command ran or not (half each).
    pub reset: f64,
    /// Mean virtual time between two scheduled faults (stall, pause,
    /// restart, clock step); `None`: none.
    pub scheduled_every: Option<Duration>,
    /// The longest client stall or server pause.
    pub max_stall: Duration,
    /// The largest server clock step back (never forward: leases assume
    /// bounded drift, docs/guarantees.md).
    pub max_clock_step: Duration,
}

impl Faults {
    /// No faults: small delays only.
    pub fn none() -> Faults {
        Faults {
            max_delay: Duration::from_micros(400),
            message_loss: 0.0,
            late_message: 0.0,
            max_late: Duration::ZERO,
            reset: 0.0,
            scheduled_every: None,
            max_stall: Duration::ZERO,
            max_clock_step: Duration::ZERO,
        }
    }

    /// Every fault kind, often.
    pub fn all() -> Faults {
        Faults {
            max_delay: Duration::from_millis(30),
            message_loss: 0.02,
            late_message: 0.002,
            max_late: Duration::from_secs(6),
            reset: 0.005,
            scheduled_every: Some(Duration::from_secs(3)),
            max_stall: Duration::from_secs(4),
            max_clock_step: Duration::from_secs(1),
        }
    }
}

/// A fault of the schedule, as it was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scheduled {
    /// Client group `0` (every link of one simulated process) stalled:
    /// nothing in or out for this long.
    Stall(usize, Duration),
    /// Server `0` answered nothing for this long.
    Pause(usize, Duration),
    /// Server `0` restarted empty (`false`) or from its last snapshot; the
    /// third field: behind a proxy that keeps the clients' connections
    /// open (it redials the server and subscribes again: the clients see
    /// the replies in flight lost, and no new connection).
    Restart(usize, bool, bool),
    /// Server `0` saved a snapshot.
    Save(usize),
    /// Server `0`'s clock stepped by this many microseconds (back).
    ClockStep(usize, i64),
}

/// One simulated Redis server.
struct Server {
    redis: SimRedis,
    /// Bumped by each restart: connections made before it are gone.
    life: u64,
    /// Commands wait until then (a paused server).
    paused_until: Instant,
    /// Where the server's clock stands against the virtual clock.
    clock_offset_us: i64,
    snapshot: Option<Snapshot>,
}

/// One client's link as the world sees it.
struct LinkState {
    server: usize,
    /// The simulated process the link belongs to (stalls hit all of it).
    group: usize,
    /// The server life its connections were made in.
    life: u64,
    generation: u64,
    /// Nothing reaches or leaves the client until then.
    stalled_until: Instant,
    /// Messages reach the client's subscriber no earlier than then.
    late_until: Instant,
    subscribed: BTreeSet<Vec<u8>>,
    deliveries: Option<UnboundedSender<Delivery>>,
    reconnects: Option<UnboundedSender<()>>,
    /// Where the command connection's changes are told.
    changes: Option<UnboundedSender<LinkChange>>,
}

struct State {
    rng: Rng,
    faults: Faults,
    servers: Vec<Server>,
    links: Vec<LinkState>,
    /// Every scheduled fault applied, with its virtual time (µs).
    schedule: Vec<(u64, Scheduled)>,
    commands: u64,
}

/// The simulated world: servers, links, the seeded generator, the clock.
#[derive(Clone)]
pub struct World {
    state: Arc<Mutex<State>>,
    start: Instant,
    start_us: i64,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World").finish_non_exhaustive()
    }
}

impl World {
    /// `servers` empty servers, faults drawn from `seed`. Call it on the
    /// (paused, current-thread) runtime that runs the simulation.
    pub fn new(seed: u64, servers: usize, faults: Faults) -> World {
        let start = Instant::now();
        let start_us = crate::DEFAULT_START_US;
        World {
            state: Arc::new(Mutex::new(State {
                rng: Rng::new(seed),
                faults,
                servers: (0..servers)
                    .map(|_| Server {
                        redis: SimRedis::with_time_us(start_us),
                        life: 0,
                        paused_until: start,
                        clock_offset_us: 0,
                        snapshot: None,
                    })
                    .collect(),
                links: Vec::new(),
                schedule: Vec::new(),
                commands: 0,
            })),
            start,
            start_us,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Virtual microseconds since the world began.
    pub fn now_us(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// A new link (one client's connections) to server `server`, of the
    /// simulated process `group`.
    pub fn link(&self, server: usize, group: usize) -> Arc<SimLink> {
        let mut state = self.lock();
        let life = state.servers[server].life;
        state.links.push(LinkState {
            server,
            group,
            life,
            generation: 0,
            stalled_until: self.start,
            late_until: self.start,
            subscribed: BTreeSet::new(),
            deliveries: None,
            reconnects: None,
            changes: None,
        });
        Arc::new(SimLink {
            world: self.clone(),
            id: state.links.len() - 1,
        })
    }

    /// A draw of the world's generator.
    pub fn next_u64(&self) -> u64 {
        self.lock().rng.next_u64()
    }

    /// Commands run by every server so far.
    pub fn commands(&self) -> u64 {
        self.lock().commands
    }

    /// The scheduled faults applied so far, with their virtual times (µs).
    pub fn schedule(&self) -> Vec<(u64, Scheduled)> {
        self.lock().schedule.clone()
    }

    /// Waits until the instant `until` reads from the state has passed (a
    /// stall or a pause, which a fault may lengthen meanwhile).
    async fn wait_out(&self, until: impl Fn(&State) -> Instant) {
        loop {
            let at = until(&self.lock());
            if at <= Instant::now() {
                return;
            }
            tokio::time::sleep_until(at).await;
        }
    }

    /// Runs a command on server `server` as an operator would (no faults).
    pub fn command(&self, server: usize, words: &[&str]) -> Reply {
        let now = Instant::now();
        let mut state = self.lock();
        let at = self.server_time_us(&state.servers[server], now);
        let redis = &mut state.servers[server].redis;
        redis.set_time_us(at);
        redis.command(words)
    }

    fn server_time_us(&self, server: &Server, now: Instant) -> i64 {
        let elapsed = i64::try_from((now - self.start).as_micros()).unwrap_or(i64::MAX);
        self.start_us + elapsed + server.clock_offset_us
    }

    /// Applies scheduled faults until the returned future is dropped: one
    /// at a time (the next after the last one ended), at random gaps
    /// around [`Faults::scheduled_every`].
    pub async fn run_schedule(self, groups: usize) {
        loop {
            let (gap, fault, step_room) = {
                let mut state = self.lock();
                let Some(every) = state.faults.scheduled_every else {
                    return;
                };
                let gap = every.mul_f64(2.0 * state.rng.unit());
                let servers = state.servers.len() as u64;
                let server = usize::try_from(state.rng.below(servers)).unwrap_or(0);
                let max_stall = state.faults.max_stall;
                let stall = max_stall.mul_f64(state.rng.unit());
                let step_max = u64::try_from(state.faults.max_clock_step.as_micros()).unwrap_or(0);
                let fault = match state.rng.below(10) {
                    0..=2 if groups > 0 => Scheduled::Stall(
                        usize::try_from(state.rng.below(groups as u64)).unwrap_or(0),
                        stall,
                    ),
                    3 | 4 => Scheduled::Pause(server, stall / 2),
                    5 => {
                        // One draw (its low bit as before: which snapshot).
                        let how = state.rng.below(4);
                        Scheduled::Restart(server, how % 2 == 0, how >= 2)
                    }
                    6 | 7 => Scheduled::Save(server),
                    _ if step_max > 0 => {
                        // Back only: a lease's end is read off the server's clock, and
                        // the library assumes bounded drift (a step forward
                        // would end leases early, a documented limit).
                        let step = -i64::try_from(state.rng.below(step_max + 1)).unwrap_or(0);
                        Scheduled::ClockStep(server, step)
                    }
                    _ => Scheduled::Save(server),
                };
                (gap, fault, state.faults.max_clock_step)
            };
            tokio::time::sleep(gap).await;
            if let Scheduled::Restart(server, _, true) = fault {
                // Behind a proxy a restart is seen by LASTSAVE, in whole
                // seconds: one in the same second as the server's last
                // save is the undetectable case of docs/guarantees.md. Not before the
                // next second, then.
                let wait = {
                    let state = self.lock();
                    let s = &state.servers[server];
                    let now_us = self.server_time_us(s, Instant::now());
                    let next_us = (s.redis.lastsave() + 1).saturating_mul(1_000_000);
                    u64::try_from(next_us.saturating_sub(now_us)).unwrap_or(0)
                };
                tokio::time::sleep(Duration::from_micros(wait)).await;
            }
            // One fault at a time, as in the torture test: the next waits
            // for this one to end (the checker cannot tell a grant whose
            // reply a stalled client reads after a restart wiped it).
            let lasts = match fault {
                Scheduled::Stall(_, d) | Scheduled::Pause(_, d) => d,
                // Tokens assume the clock does not step back, around a loss
                // of data, by more than the time between the last token
                // before it and the first after (docs/guarantees.md, "Fencing"): no
                // restart closer to a step than the step, either way.
                Scheduled::ClockStep(_, us) => Duration::from_micros(us.unsigned_abs()),
                Scheduled::Restart(..) => step_room,
                Scheduled::Save(_) => Duration::ZERO,
            };
            self.apply(fault);
            tokio::time::sleep(lasts).await;
        }
    }

    /// Applies one fault now.
    pub fn apply(&self, fault: Scheduled) {
        let now = Instant::now();
        let mut state = self.lock();
        let at = self.now_us();
        match &fault {
            Scheduled::Stall(group, d) => {
                for link in state.links.iter_mut().filter(|l| l.group == *group) {
                    link.stalled_until = link.stalled_until.max(now + *d);
                }
            }
            Scheduled::Pause(server, d) => {
                let s = &mut state.servers[*server];
                s.paused_until = s.paused_until.max(now + *d);
            }
            Scheduled::Restart(server, from_snapshot, proxied) => {
                let time = self.server_time_us(&state.servers[*server], now);
                let s = &mut state.servers[*server];
                let snapshot = if *from_snapshot {
                    s.snapshot.clone()
                } else {
                    None
                };
                s.redis.set_time_us(time);
                s.redis.restart(snapshot.as_ref());
                s.life += 1;
                let life = s.life;
                for link in state.links.iter_mut().filter(|l| l.server == *server) {
                    if *proxied {
                        // The proxy keeps the connection: same generation,
                        // same subscriptions; a reply in flight is lost.
                        link.life = life;
                    } else {
                        // Every connection closes: subscriptions are gone,
                        // and each client reconnects (a new generation).
                        link.reconnect(life);
                    }
                }
            }
            Scheduled::Save(server) => {
                let s = &mut state.servers[*server];
                s.snapshot = Some(s.redis.snapshot());
            }
            Scheduled::ClockStep(server, us) => {
                state.servers[*server].clock_offset_us += us;
            }
        }
        state.schedule.push((at, fault));
    }
}

impl LinkState {
    /// The connections were made again (after a reset or a restart): the
    /// server forgot the subscriptions; the client is told.
    fn reconnect(&mut self, life: u64) {
        self.life = life;
        self.generation += 1;
        self.subscribed.clear();
        if let Some(tx) = &self.reconnects {
            let _ = tx.send(());
        }
        // Lost and made again at once (the simulation has no spell
        // without a connection).
        if let Some(tx) = &self.changes {
            let _ = tx.send(LinkChange::Lost);
            let _ = tx.send(LinkChange::Back);
        }
    }
}

/// One client's connections to a simulated server: redisync's [`Link`].
pub struct SimLink {
    world: World,
    id: usize,
}

impl std::fmt::Debug for SimLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimLink")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// What became of a command at the server.
enum Fate {
    /// Ran; its reply travels back.
    Ran(Reply),
    /// The connection reset: the command ran or not, and the caller
    /// cannot tell which.
    Reset,
}

fn io_error(what: &'static str) -> RedisError {
    RedisError::new(ErrorKind::IO, what)
}

impl SimLink {
    /// This link's client number (its index in the world).
    pub fn id(&self) -> usize {
        self.id
    }

    /// A delay for one leg of a command: mostly short, sometimes up to the
    /// fault's maximum.
    fn draw_delay(state: &mut State) -> Duration {
        let max = state.faults.max_delay;
        let u = state.rng.unit();
        // Skewed: u^4 keeps most delays well below the maximum.
        max.mul_f64(u * u * u * u)
    }

    /// A command reaches the link's server: its index and life, or the IO
    /// error of a connection the server's restart closed (the client then
    /// reconnects).
    fn arrive(&self, state: &mut State) -> Result<(usize, u64), RedisError> {
        let server = state.links[self.id].server;
        let life = state.servers[server].life;
        if state.links[self.id].life != life {
            state.links[self.id].reconnect(life);
            return Err(io_error("connection closed by a server restart"));
        }
        Ok((server, life))
    }

    /// Waits out a stall of this client (nothing in or out meanwhile).
    async fn stall_point(&self) {
        let id = self.id;
        self.world
            .wait_out(|state| state.links[id].stalled_until)
            .await;
    }

    /// Sends one command: the way there, the server (waiting out a pause),
    /// the way back; a reset or a restart in between loses the reply.
    async fn send(&self, run: impl FnOnce(&mut SimRedis) -> Reply) -> Result<Reply, RedisError> {
        self.stall_point().await;
        let out = Self::draw_delay(&mut self.world.lock());
        tokio::time::sleep(out).await;
        let id = self.id;
        self.world
            .wait_out(|state| state.servers[state.links[id].server].paused_until)
            .await;
        let (fate, life, back) = {
            let now = Instant::now();
            let mut guard = self.world.lock();
            let state = &mut *guard;
            let (server, life) = self.arrive(state)?;
            let reset = state.rng.unit() < state.faults.reset;
            let runs = !reset || state.rng.below(2) == 0;
            let fate = if runs {
                let at = self.world.server_time_us(&state.servers[server], now);
                let redis = &mut state.servers[server].redis;
                redis.set_time_us(at);
                let reply = run(redis);
                state.commands += 1;
                let published = state.servers[server].redis.take_published();
                deliver(&self.world, state, server, published);
                if reset {
                    Fate::Reset
                } else {
                    Fate::Ran(reply)
                }
            } else {
                Fate::Reset
            };
            if matches!(fate, Fate::Reset) {
                state.links[self.id].reconnect(life);
            }
            (fate, life, Self::draw_delay(state))
        };
        let Fate::Ran(reply) = fate else {
            return Err(io_error("connection reset by peer"));
        };
        tokio::time::sleep(back).await;
        {
            let mut state = self.world.lock();
            let server = state.links[self.id].server;
            if state.servers[server].life != life {
                let now_life = state.servers[server].life;
                if state.links[self.id].life != now_life {
                    state.links[self.id].reconnect(now_life);
                }
                return Err(io_error("connection closed by a server restart"));
            }
        }
        self.stall_point().await;
        Ok(reply)
    }
}

/// Hands the messages a command published to the subscribed links: each
/// delayed at random, or lost.
fn deliver(world: &World, state: &mut State, server: usize, published: Vec<crate::Message>) {
    for message in published {
        let mut targets = Vec::new();
        for (id, link) in state.links.iter().enumerate() {
            if link.server == server && link.subscribed.contains(&message.channel) {
                if let Some(tx) = &link.deliveries {
                    targets.push((id, tx.clone()));
                }
            }
        }
        for (id, tx) in targets {
            if state.rng.unit() < state.faults.message_loss {
                continue;
            }
            let delay = SimLink::draw_delay(state);
            if state.rng.unit() < state.faults.late_message {
                let late = state.faults.max_late.mul_f64(state.rng.unit());
                let link = &mut state.links[id];
                link.late_until = link.late_until.max(Instant::now() + late);
            }
            let life = state.links[id].life;
            let world = world.clone();
            let channel = message.channel.clone();
            let payload = message.payload.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                world
                    .wait_out(|state| {
                        state.links[id]
                            .stalled_until
                            .max(state.links[id].late_until)
                    })
                    .await;
                let state = world.lock();
                // A message of an earlier connection is gone with it.
                if state.links[id].life == life && state.links[id].subscribed.contains(&channel) {
                    let _ = tx.send(Delivery::Message {
                        channel: String::from_utf8_lossy(&channel).into_owned().into(),
                        payload: reply_to_value(Reply::Bulk(payload)),
                    });
                }
            });
        }
    }
}

/// A reply as fred hands it over (RESP2: bulk strings that are UTF-8
/// become strings).
fn reply_to_value(reply: Reply) -> Value {
    match reply {
        Reply::Status(s) => Value::String(s.into()),
        Reply::Error(e) => Value::String(e.into()),
        Reply::Integer(i) => Value::Integer(i),
        Reply::Bulk(b) => match String::from_utf8(b) {
            Ok(s) => Value::String(s.into()),
            Err(e) => Value::Bytes(e.into_bytes().into()),
        },
        Reply::Nil => Value::Null,
        Reply::Array(items) => Value::Array(items.into_iter().map(reply_to_value).collect()),
    }
}

/// An error reply as fred reports it (its kinds by the reply's first word).
fn reply_error(text: &str) -> RedisError {
    let kind = match text.split_whitespace().next().unwrap_or("") {
        "WRONGTYPE" => ErrorKind::InvalidArgument,
        "MOVED" | "ASK" | "CLUSTERDOWN" => ErrorKind::Cluster,
        _ => ErrorKind::Unknown,
    };
    RedisError::new(kind, text.to_owned())
}

fn into_result(reply: Result<Reply, RedisError>) -> Result<Value, RedisError> {
    match reply? {
        Reply::Error(e) => Err(reply_error(&e)),
        other => Ok(reply_to_value(other)),
    }
}

/// An argument as fred writes it.
fn arg_bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Bytes(b) => b.to_vec(),
        Value::Integer(i) => i.to_string().into_bytes(),
        Value::Double(d) => d.to_string().into_bytes(),
        Value::Boolean(b) => if *b { "true" } else { "false" }.as_bytes().to_vec(),
        _ => Vec::new(),
    }
}

fn key_bytes(k: &Key) -> Vec<u8> {
    k.as_bytes().to_vec()
}

impl Link for SimLink {
    fn script<'a>(&'a self, call: ScriptCall<'a>) -> LinkFuture<'a, Value> {
        Box::pin(async move {
            let keys: Vec<Vec<u8>> = call.keys.iter().map(key_bytes).collect();
            let args: Vec<Vec<u8>> = call.args.iter().map(arg_bytes).collect();
            let reply = self
                .send(|redis| match call.body {
                    None => redis.evalsha(call.sha, &keys, &args),
                    Some(body) => redis.eval(body, &keys, &args),
                })
                .await;
            into_result(reply)
        })
    }

    fn command<'a>(&'a self, command: Command<'a>) -> LinkFuture<'a, Value> {
        Box::pin(async move {
            let mut words: Vec<Vec<u8>> = vec![command.name.as_bytes().to_vec()];
            words.extend(command.args.iter().map(arg_bytes));
            let reply = self
                .send(|redis| match command.name.to_ascii_lowercase().as_str() {
                    // Both fields from the server the command reached (one
                    // that restarted behind a proxy while it was on its way
                    // answers for its new process).
                    "info" => {
                        let up = redis.uptime_secs();
                        let saved = redis.lastsave();
                        Reply::Bulk(
                            format!("# Server\r\nredis_version:{SIM_VERSION}\r\nuptime_in_seconds:{up}\r\n# Persistence\r\nrdb_last_save_time:{saved}\r\n")
                                .into_bytes(),
                        )
                    }
                    // No replicas in the simulation.
                    "wait" => Reply::Integer(0),
                    _ => redis.command(&words),
                })
                .await;
            into_result(reply)
        })
    }

    fn connection_generation(&self) -> u64 {
        self.world.lock().links[self.id].generation
    }

    fn is_clustered(&self) -> bool {
        false
    }

    fn server_version(&self) -> Option<String> {
        Some(SIM_VERSION.to_owned())
    }

    fn is_connected(&self) -> bool {
        true
    }

    fn scan(&self, pattern: &'static str) -> LinkFuture<'_, Vec<Key>> {
        Box::pin(async move {
            let reply = self.send(|redis| redis.command(&["keys", pattern])).await?;
            match reply {
                Reply::Array(keys) => Ok(keys
                    .into_iter()
                    .filter_map(|k| k.as_bytes().map(Key::from))
                    .collect()),
                other => Err(reply_error(&format!("ERR unexpected KEYS reply {other:?}"))),
            }
        })
    }

    fn subscribe(&self, channel: Key, _sharded: bool) -> LinkFuture<'_, ()> {
        Box::pin(async move {
            let channel = key_bytes(&channel);
            self.send_subscription(move |link| {
                link.subscribed.insert(channel);
            })
            .await
        })
    }

    fn unsubscribe(&self, channel: Key, _sharded: bool) -> LinkFuture<'_, ()> {
        Box::pin(async move {
            let channel = key_bytes(&channel);
            self.send_subscription(move |link| {
                link.subscribed.remove(&channel);
            })
            .await
        })
    }

    fn deliveries(&self) -> BoxStream<'static, Delivery> {
        let (tx, rx) = unbounded_channel();
        self.world.lock().links[self.id].deliveries = Some(tx);
        Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|d| (d, rx))
        }))
    }

    fn subscriber_reconnects(&self) -> BoxStream<'static, ()> {
        let (tx, rx) = unbounded_channel();
        self.world.lock().links[self.id].reconnects = Some(tx);
        Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|()| ((), rx))
        }))
    }

    fn connection_changes(&self) -> BoxStream<'static, LinkChange> {
        let (tx, rx) = unbounded_channel();
        self.world.lock().links[self.id].changes = Some(tx);
        Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|change| (change, rx))
        }))
    }
}

impl SimLink {
    /// A (un)subscription: travels to the server like a command; it takes
    /// effect there, on the connection the server knows.
    async fn send_subscription(
        &self,
        change: impl FnOnce(&mut LinkState),
    ) -> Result<(), RedisError> {
        self.stall_point().await;
        let out = Self::draw_delay(&mut self.world.lock());
        tokio::time::sleep(out).await;
        let back = {
            let mut guard = self.world.lock();
            let state = &mut *guard;
            self.arrive(state)?;
            change(&mut state.links[self.id]);
            Self::draw_delay(state)
        };
        tokio::time::sleep(back).await;
        Ok(())
    }
}

//! [`FaultProxy`]: a TCP proxy on loopback that injects network faults
//! between clients and one server.
//!
//! Every accepted connection gets its own upstream connection and one task
//! that pumps bytes both ways. All connections follow one shared fault state
//! (a `watch` channel), so a change made by the test applies at once to the
//! connections already open and to those opened later.

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Bound on connecting to the upstream server for one client connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Bytes read at once from one side.
const CHUNK: usize = 16 * 1024;
/// Chunks read but not yet written (delayed or stalled) per direction before
/// the proxy stops reading that side (TCP back-pressure takes over).
const CHUNKS_IN_FLIGHT: usize = 64;
/// Pause after a failed `accept` (e.g. out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// Which way traffic flows through a [`FaultProxy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the client to the server (requests).
    Upstream,
    /// From the server to the client (replies, pub/sub messages).
    Downstream,
    /// Both ways.
    Both,
}

impl Direction {
    /// The indices into the per-direction fault arrays (0 up, 1 down).
    fn indices(self) -> &'static [usize] {
        match self {
            Direction::Upstream => &[UP],
            Direction::Downstream => &[DOWN],
            Direction::Both => &[UP, DOWN],
        }
    }
}

const UP: usize = 0;
const DOWN: usize = 1;

/// The faults in force; every connection watches one shared copy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Faults {
    /// Added to every chunk, per direction (`[UP, DOWN]`).
    latency: [Duration; 2],
    /// Stalled directions: bytes are held, not dropped, until healed.
    blackhole: [bool; 2],
    /// New connections are reset as soon as they are accepted.
    refuse: bool,
    /// Bumped by `reset_connections`: connections opened under an older
    /// value are reset.
    resets: u64,
}

/// A TCP proxy on `127.0.0.1` (a free port) in front of one server on
/// loopback, whose faults can be switched at run time:
///
/// * [`set_latency`](FaultProxy::set_latency) /
///   [`set_latency_in`](FaultProxy::set_latency_in): every chunk of bytes is
///   delivered that much later (per direction; order is kept);
/// * [`blackhole`](FaultProxy::blackhole): traffic in one or both directions
///   stalls: connections stay open, nothing is delivered and nothing is lost.
///   This is what TCP does during a network partition (it keeps
///   retransmitting); [`heal`](FaultProxy::heal) delivers the held bytes late.
///   A partition that also ends the connections is `blackhole` followed by
///   [`reset_connections`](FaultProxy::reset_connections);
/// * [`reset_connections`](FaultProxy::reset_connections): every current
///   connection is aborted with a TCP `RST` on both sides (client and server);
/// * [`refuse_connections`](FaultProxy::refuse_connections): new connections
///   are reset right after they are accepted (the client sees its connection
///   reset, not refused: the port stays bound);
/// * [`heal`](FaultProxy::heal): back to pass-through.
///
/// When the upstream server cannot be reached (killed, restarting) a new
/// client connection is reset, like a refused connection.
///
/// Dropping the proxy stops accepting and resets every connection. It needs a
/// tokio runtime with the `net` and `time` drivers to start.
///
/// ```no_run
/// # async fn demo() {
/// use std::time::Duration;
/// use redisync_testkit::{Direction, FaultProxy, RedisServer};
///
/// let server = RedisServer::start().await;
/// let proxy = FaultProxy::start(server.addr()).await;
/// let url = proxy.url(); // give this to the client under test
/// # let _ = url;
/// proxy.set_latency(Duration::from_millis(50)); // 100 ms round trips
/// proxy.blackhole(Direction::Both); // a partition
/// proxy.heal(); // pass-through again
/// proxy.reset_connections(); // every connection gets a RST
/// # }
/// ```
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    faults: watch::Sender<Faults>,
    live: Arc<AtomicUsize>,
    accept: JoinHandle<()>,
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.upstream)
            .field("faults", &*self.faults.borrow())
            .field("connections", &self.connections())
            .finish_non_exhaustive()
    }
}

impl FaultProxy {
    /// Starts a proxy on a free `127.0.0.1` port in front of `upstream`.
    ///
    /// # Panics
    ///
    /// Panics with the error of [`FaultProxy::try_start`].
    pub async fn start(upstream: SocketAddr) -> FaultProxy {
        match Self::try_start(upstream).await {
            Ok(proxy) => proxy,
            Err(e) => panic!("cannot start a fault proxy in front of {upstream}: {e}"),
        }
    }

    /// Starts a proxy on a free `127.0.0.1` port in front of `upstream`. No
    /// connection to `upstream` is made until a client connects.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] when `upstream` is not a loopback
    /// address (the proxy is for tests on one machine only); the error of
    /// binding the listening socket otherwise.
    pub async fn try_start(upstream: SocketAddr) -> io::Result<FaultProxy> {
        if !upstream.ip().is_loopback() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the fault proxy only forwards to loopback addresses, not {upstream}"),
            ));
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let (faults, watcher) = watch::channel(Faults::default());
        let live = Arc::new(AtomicUsize::new(0));
        let accept = tokio::spawn(accept_loop(listener, upstream, watcher, live.clone()));
        Ok(FaultProxy {
            addr,
            upstream,
            faults,
            live,
            accept,
        })
    }

    /// The address clients connect to: `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The Redis URL of the proxy: `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.addr.port())
    }

    /// The server the proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Client connections currently proxied (accepted and not yet closed).
    pub fn connections(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// Delays traffic in both directions by `latency` (a round trip then
    /// takes twice as long). `Duration::ZERO` removes the delay. Bytes
    /// already in flight keep the delay they were read with.
    pub fn set_latency(&self, latency: Duration) {
        self.set_latency_in(Direction::Both, latency);
    }

    /// Delays traffic in `direction` by `latency`, leaving the other
    /// direction as it is.
    pub fn set_latency_in(&self, direction: Direction, latency: Duration) {
        self.faults.send_modify(|f| {
            for &i in direction.indices() {
                f.latency[i] = latency;
            }
        });
    }

    /// Stalls traffic in `direction` (in addition to directions already
    /// stalled): nothing is delivered and the connections stay open, as in a
    /// network partition. The held bytes (up to a bound, then TCP
    /// back-pressure) are delivered after [`heal`](FaultProxy::heal).
    pub fn blackhole(&self, direction: Direction) {
        self.faults.send_modify(|f| {
            for &i in direction.indices() {
                f.blackhole[i] = true;
            }
        });
    }

    /// Whether new connections are reset as soon as they are accepted.
    /// Existing connections are not affected (see
    /// [`reset_connections`](FaultProxy::reset_connections)).
    pub fn refuse_connections(&self, refuse: bool) {
        self.faults.send_modify(|f| f.refuse = refuse);
    }

    /// Aborts every current connection with a TCP `RST` on both sides;
    /// bytes held by a latency or a blackhole are discarded. New connections
    /// are accepted as before (unless refused).
    pub fn reset_connections(&self) {
        self.faults.send_modify(|f| f.resets += 1);
    }

    /// Back to pass-through: no latency, no blackhole, new connections
    /// accepted. Connections that survived the faults carry on, and stalled
    /// bytes are delivered.
    pub fn heal(&self) {
        self.faults.send_modify(|f| {
            *f = Faults {
                resets: f.resets,
                ..Faults::default()
            };
        });
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // The listener goes with the accept task; dropping `faults` (after
        // this) ends every connection task, which resets its connections.
        self.accept.abort();
    }
}

/// Accepts clients until the proxy is dropped (the task is aborted).
async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    faults: watch::Receiver<Faults>,
    live: Arc<AtomicUsize>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(ACCEPT_BACKOFF).await;
            continue;
        };
        let now = *faults.borrow();
        if now.refuse {
            abort(&client);
            continue;
        }
        let _ = client.set_nodelay(true);
        tokio::spawn(serve(
            client,
            upstream,
            faults.clone(),
            now.resets,
            Live::count(&live),
        ));
    }
}

/// Counts one proxied connection while alive.
struct Live(Arc<AtomicUsize>);

impl Live {
    fn count(live: &Arc<AtomicUsize>) -> Live {
        live.fetch_add(1, Ordering::AcqRel);
        Live(live.clone())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Makes the socket send a `RST` instead of a `FIN` when it is closed.
fn abort(stream: &TcpStream) {
    // SO_LINGER with a zero timeout never blocks on close (tokio deprecates
    // `set_linger` for the non-zero case only); `set_zero_linger` would need
    // a newer tokio than the workspace's minimum.
    #[allow(deprecated)]
    let _ = stream.set_linger(Some(Duration::ZERO));
}

/// How a proxied connection ended.
enum End {
    /// Both sides closed cleanly (each `FIN` was passed on).
    Closed,
    /// Reset by the test, the proxy was dropped, or a side failed: both
    /// sides get a `RST`.
    Aborted,
}

/// Proxies one client connection until both sides close, either fails, or
/// the connection is reset.
async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut faults: watch::Receiver<Faults>,
    epoch: u64,
    _live: Live,
) {
    let reset = move |f: &Faults| f.resets != epoch;
    let connect = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(upstream));
    let mut server = tokio::select! {
        connected = connect => match connected {
            Ok(Ok(server)) => server,
            // The server is down: the client sees its connection reset.
            _ => return abort(&client),
        },
        _ = faults.wait_for(reset) => return abort(&client),
    };
    let _ = server.set_nodelay(true);

    let end = {
        let (client_rx, client_tx) = client.split();
        let (server_rx, server_tx) = server.split();
        let up = pump(client_rx, server_tx, UP, faults.clone());
        let down = pump(server_rx, client_tx, DOWN, faults.clone());
        tokio::pin!(up, down);
        let (mut up_done, mut down_done) = (false, false);
        loop {
            tokio::select! {
                r = &mut up, if !up_done => match r {
                    Ok(()) => up_done = true,
                    Err(_) => break End::Aborted,
                },
                r = &mut down, if !down_done => match r {
                    Ok(()) => down_done = true,
                    Err(_) => break End::Aborted,
                },
                // Also ends when the proxy is dropped (the sender is gone).
                _ = faults.wait_for(reset) => break End::Aborted,
            }
            if up_done && down_done {
                break End::Closed;
            }
        }
    };
    if let End::Aborted = end {
        abort(&client);
        abort(&server);
    }
}

/// Copies `from` to `to`, each chunk delayed by the direction's latency at
/// the time it was read and held while the direction is blackholed. On end
/// of stream the `FIN` is passed on. An error means the connection must be
/// aborted (a side failed, or the proxy is gone).
async fn pump(
    mut from: ReadHalf<'_>,
    mut to: WriteHalf<'_>,
    direction: usize,
    faults: watch::Receiver<Faults>,
) -> io::Result<()> {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(CHUNKS_IN_FLIGHT);
    let read_faults = faults.clone();
    let read = async move {
        let mut buf = vec![0_u8; CHUNK];
        loop {
            let n = from.read(&mut buf).await?;
            if n == 0 {
                return io::Result::Ok(()); // dropping `tx` ends the writer
            }
            let due = Instant::now() + read_faults.borrow().latency[direction];
            if tx.send((due, buf[..n].to_vec())).await.is_err() {
                return Ok(());
            }
        }
    };
    let mut write_faults = faults;
    let write = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if write_faults
                .wait_for(|f| !f.blackhole[direction])
                .await
                .is_err()
            {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "the proxy was dropped",
                ));
            }
            to.write_all(&chunk).await?;
        }
        to.shutdown().await
    };
    tokio::try_join!(read, write).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RedisServer;

    /// A raw connection through the proxy speaking inline commands.
    struct Conn(TcpStream);

    impl Conn {
        async fn open(proxy: &FaultProxy) -> Conn {
            Conn(TcpStream::connect(proxy.addr()).await.expect("connect"))
        }

        async fn send(&mut self, cmd: &str) {
            self.0
                .write_all(format!("{cmd}\r\n").as_bytes())
                .await
                .expect("write");
        }

        /// Reads until `expect` shows up; `None` on timeout, EOF or error.
        async fn expect(&mut self, expect: &str, wait: Duration) -> Option<String> {
            let read = async {
                let mut reply = String::new();
                let mut buf = [0_u8; 256];
                while !reply.contains(expect) {
                    match self.0.read(&mut buf).await {
                        Ok(0) | Err(_) => return None,
                        Ok(n) => reply.push_str(&String::from_utf8_lossy(&buf[..n])),
                    }
                }
                Some(reply)
            };
            tokio::time::timeout(wait, read).await.ok().flatten()
        }

        async fn ping(&mut self, wait: Duration) -> bool {
            self.send("PING").await;
            self.expect("+PONG\r\n", wait).await.is_some()
        }

        /// What the next read says: `Ok(0)` for EOF, an error for a reset.
        async fn read_outcome(&mut self) -> io::Result<usize> {
            let mut buf = [0_u8; 64];
            tokio::time::timeout(Duration::from_secs(2), self.0.read(&mut buf))
                .await
                .expect("the connection neither closed nor answered")
        }
    }

    const SHORT: Duration = Duration::from_millis(300);
    const LONG: Duration = Duration::from_secs(2);

    async fn setup() -> (RedisServer, FaultProxy) {
        let server = RedisServer::start().await;
        let proxy = FaultProxy::start(server.addr()).await;
        (server, proxy)
    }

    #[tokio::test]
    async fn passes_ping_through_on_loopback() {
        let (server, proxy) = setup().await;
        assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}", proxy.port()));
        assert_eq!(proxy.addr().ip(), Ipv4Addr::LOCALHOST);
        assert_eq!(proxy.upstream(), server.addr());
        assert_ne!(proxy.port(), server.port());
        let mut conn = Conn::open(&proxy).await;
        assert!(conn.ping(LONG).await);
        conn.send("SET k v").await;
        assert!(conn.expect("+OK\r\n", LONG).await.is_some());
        conn.send("GET k").await;
        assert!(conn.expect("$1\r\nv\r\n", LONG).await.is_some());
        assert_eq!(proxy.connections(), 1);
        drop(conn);
        for _ in 0..100 {
            if proxy.connections() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(proxy.connections(), 0, "a closed connection is forgotten");
    }

    #[tokio::test]
    async fn refuses_non_loopback_upstreams() {
        let err = FaultProxy::try_start(SocketAddr::from(([192, 0, 2, 1], 6379)))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[tokio::test]
    async fn latency_is_added_per_direction() {
        let (_server, proxy) = setup().await;
        let mut conn = Conn::open(&proxy).await;
        assert!(conn.ping(LONG).await);

        let delay = Duration::from_millis(100);
        proxy.set_latency(delay);
        let t = Instant::now();
        assert!(conn.ping(LONG).await);
        let both = t.elapsed();
        assert!(both >= 2 * delay, "round trip {both:?}");
        assert!(both < 2 * delay + Duration::from_millis(500), "{both:?}");

        proxy.set_latency(Duration::ZERO);
        proxy.set_latency_in(Direction::Downstream, delay);
        let t = Instant::now();
        assert!(conn.ping(LONG).await);
        let one = t.elapsed();
        assert!(one >= delay && one < 2 * delay, "round trip {one:?}");

        proxy.heal();
        let t = Instant::now();
        assert!(conn.ping(LONG).await);
        assert!(t.elapsed() < delay, "healed round trip {:?}", t.elapsed());
    }

    #[tokio::test]
    async fn blackhole_stalls_each_direction_until_healed() {
        let (_server, proxy) = setup().await;
        for direction in [Direction::Upstream, Direction::Downstream, Direction::Both] {
            let mut conn = Conn::open(&proxy).await;
            assert!(conn.ping(LONG).await);
            proxy.blackhole(direction);
            conn.send("PING").await;
            assert_eq!(
                conn.expect("+PONG", SHORT).await,
                None,
                "{direction:?}: no reply through a blackhole"
            );
            assert_eq!(
                proxy.connections(),
                1,
                "{direction:?}: the connection stays open"
            );
            proxy.heal();
            // The stalled bytes are delivered, not lost.
            assert!(
                conn.expect("+PONG\r\n", LONG).await.is_some(),
                "{direction:?}: the held reply arrives after heal"
            );
            assert!(conn.ping(LONG).await);
        }
    }

    #[tokio::test]
    async fn blackhole_also_stalls_new_connections() {
        let (_server, proxy) = setup().await;
        proxy.blackhole(Direction::Upstream);
        let mut conn = Conn::open(&proxy).await;
        assert!(!conn.ping(SHORT).await);
        proxy.heal();
        assert!(conn.expect("+PONG\r\n", LONG).await.is_some());
    }

    #[tokio::test]
    async fn reset_aborts_current_connections_only() {
        let (server, proxy) = setup().await;
        let mut conn = Conn::open(&proxy).await;
        assert!(conn.ping(LONG).await);
        // Reset also works on a stalled connection.
        proxy.blackhole(Direction::Both);
        proxy.reset_connections();
        let outcome = conn.read_outcome().await;
        assert!(
            matches!(&outcome, Err(e) if e.kind() == io::ErrorKind::ConnectionReset),
            "{outcome:?}"
        );
        // The server side was aborted too: only our probe is connected.
        proxy.heal();
        let mut direct = TcpStream::connect(server.addr()).await.expect("direct");
        let mut clients = String::new();
        for _ in 0..100 {
            direct.write_all(b"CLIENT LIST\r\n").await.unwrap();
            let mut buf = [0_u8; 4096];
            let n = direct.read(&mut buf).await.unwrap();
            clients = String::from_utf8_lossy(&buf[..n]).into_owned();
            if clients.matches("id=").count() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(clients.matches("id=").count(), 1, "{clients}");
        // New connections work.
        let mut again = Conn::open(&proxy).await;
        assert!(again.ping(LONG).await);
    }

    #[tokio::test]
    async fn refused_connections_are_reset_until_accepted_again() {
        let (_server, proxy) = setup().await;
        let mut old = Conn::open(&proxy).await;
        assert!(old.ping(LONG).await);
        proxy.refuse_connections(true);
        let mut refused = Conn::open(&proxy).await;
        refused.send("PING").await;
        assert!(refused.read_outcome().await.is_err(), "reset at once");
        assert!(old.ping(LONG).await, "existing connections carry on");
        proxy.refuse_connections(false);
        let mut conn = Conn::open(&proxy).await;
        assert!(conn.ping(LONG).await);
        // heal() accepts again too.
        proxy.refuse_connections(true);
        proxy.heal();
        let mut conn = Conn::open(&proxy).await;
        assert!(conn.ping(LONG).await);
    }

    #[tokio::test]
    async fn a_dead_upstream_resets_new_connections() {
        let (mut server, proxy) = setup().await;
        server.kill().await;
        let mut conn = Conn::open(&proxy).await;
        conn.send("PING").await;
        assert!(conn.read_outcome().await.is_err());
        server.restart().await;
        let mut conn = Conn::open(&proxy).await;
        assert!(conn.ping(LONG).await, "same port after the restart");
    }

    #[tokio::test]
    async fn drop_stops_the_proxy_and_its_connections() {
        let (_server, proxy) = setup().await;
        let addr = proxy.addr();
        let mut conn = Conn::open(&proxy).await;
        assert!(conn.ping(LONG).await);
        drop(proxy);
        assert!(conn.read_outcome().await.is_err(), "connections are reset");
        let mut refused = false;
        for _ in 0..100 {
            if TcpStream::connect(addr).await.is_err() {
                refused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(refused, "the port is closed");
    }

    #[test]
    fn proxy_is_send_and_sync() {
        fn both<T: Send + Sync>() {}
        fn send<T: Send>(_: &T) {}
        both::<FaultProxy>();
        send(&FaultProxy::start(SocketAddr::from((
            Ipv4Addr::LOCALHOST,
            1,
        ))));
    }
}

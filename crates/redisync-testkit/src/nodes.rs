//! Several independent servers at once ([`RedisNodes`]), e.g. for Redlock.

use std::ops::{Deref, DerefMut, Index, IndexMut};

use crate::{RedisServer, TestkitError};

/// Several independent [`RedisServer`]s, e.g. the nodes of a Redlock setup.
///
/// Dereferences to a slice of servers, so `nodes[0].pause()`,
/// `nodes.len()` and `nodes.iter()` work; dropping it stops all of them.
#[derive(Debug)]
pub struct RedisNodes(Vec<RedisServer>);

impl RedisNodes {
    /// Starts `n` servers concurrently, each on its own free port.
    ///
    /// # Panics
    ///
    /// Panics with the message of the [`TestkitError`] returned by
    /// [`RedisNodes::try_start`].
    pub async fn start(n: usize) -> RedisNodes {
        match Self::try_start(n).await {
            Ok(nodes) => nodes,
            Err(e) => panic!("{e}"),
        }
    }

    /// Starts `n` servers concurrently, each on its own free port. Servers
    /// already started are stopped again if one of them fails.
    ///
    /// # Errors
    ///
    /// The first error of [`RedisServer::try_start`].
    ///
    /// # Panics
    ///
    /// Panics if a start task panics or is cancelled.
    pub async fn try_start(n: usize) -> Result<RedisNodes, TestkitError> {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..n {
            tasks.spawn(async move { (i, RedisServer::try_start().await) });
        }
        let mut slots: Vec<Option<RedisServer>> = (0..n).map(|_| None).collect();
        let mut first_error = None;
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((i, Ok(server))) => slots[i] = Some(server),
                Ok((_, Err(e))) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(RedisNodes(slots.into_iter().flatten().collect())),
        }
    }

    /// The URLs of all servers, in order.
    pub fn urls(&self) -> Vec<String> {
        self.0.iter().map(RedisServer::url).collect()
    }

    /// The ports of all servers, in order.
    pub fn ports(&self) -> Vec<u16> {
        self.0.iter().map(RedisServer::port).collect()
    }

    /// Unwraps the servers.
    pub fn into_vec(self) -> Vec<RedisServer> {
        self.0
    }
}

impl From<Vec<RedisServer>> for RedisNodes {
    fn from(servers: Vec<RedisServer>) -> Self {
        RedisNodes(servers)
    }
}

impl Deref for RedisNodes {
    type Target = [RedisServer];

    fn deref(&self) -> &[RedisServer] {
        &self.0
    }
}

impl DerefMut for RedisNodes {
    fn deref_mut(&mut self) -> &mut [RedisServer] {
        &mut self.0
    }
}

impl Index<usize> for RedisNodes {
    type Output = RedisServer;

    fn index(&self, index: usize) -> &RedisServer {
        &self.0[index]
    }
}

impl IndexMut<usize> for RedisNodes {
    fn index_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.0[index]
    }
}

impl<'a> IntoIterator for &'a RedisNodes {
    type Item = &'a RedisServer;
    type IntoIter = std::slice::Iter<'a, RedisServer>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<'a> IntoIterator for &'a mut RedisNodes {
    type Item = &'a mut RedisServer;
    type IntoIter = std::slice::IterMut<'a, RedisServer>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter_mut()
    }
}

impl IntoIterator for RedisNodes {
    type Item = RedisServer;
    type IntoIter = std::vec::IntoIter<RedisServer>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

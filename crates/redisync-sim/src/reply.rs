//! Replies, as RESP2 carries them.

use std::fmt;

/// One reply, as a Redis server sends it over RESP2 (what a script or a
/// command returns to its caller).
#[derive(Clone, PartialEq, Eq)]
pub enum Reply {
    /// A status reply (`+OK`), its text.
    Status(String),
    /// An error reply (`-ERR ...`), its text without the `-`.
    Error(String),
    /// An integer reply.
    Integer(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// The nil bulk string (`$-1`).
    Nil,
    /// An array (multi-bulk) reply.
    Array(Vec<Reply>),
}

impl Reply {
    /// A status reply.
    pub fn status(text: impl Into<String>) -> Reply {
        Reply::Status(text.into())
    }

    /// An error reply.
    pub fn error(text: impl Into<String>) -> Reply {
        Reply::Error(text.into())
    }

    /// A bulk string.
    pub fn bulk(bytes: impl AsRef<[u8]>) -> Reply {
        Reply::Bulk(bytes.as_ref().to_vec())
    }

    /// `+OK`.
    pub fn ok() -> Reply {
        Reply::Status("OK".to_owned())
    }

    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// The integer of an integer reply.
    pub fn as_integer(&self) -> Option<i64> {
        match self {
            Reply::Integer(n) => Some(*n),
            _ => None,
        }
    }

    /// The bytes of a bulk string.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Reply::Bulk(b) => Some(b),
            _ => None,
        }
    }

    /// The elements of an array.
    pub fn as_array(&self) -> Option<&[Reply]> {
        match self {
            Reply::Array(v) => Some(v),
            _ => None,
        }
    }
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Status(s) => write!(f, "+{s}"),
            Reply::Error(s) => write!(f, "-{s}"),
            Reply::Integer(n) => write!(f, ":{n}"),
            Reply::Bulk(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Reply::Nil => write!(f, "nil"),
            Reply::Array(v) => f.debug_list().entries(v).finish(),
        }
    }
}

//! One command to a server on loopback over RESP2, without `redis-cli`
//! (the servers fetched from PyPI ship none).

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::TestkitError;

/// How long one command may take, connect included.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends `args` as one command to the server on `127.0.0.1:port` and returns
/// its reply as text, as `redis-cli` prints it when not on a terminal:
/// strings and integers as they are, an error reply as its message (`ERR
/// ...`), every element of an array (nested ones flattened) on its own line,
/// a nil as an empty line.
///
/// # Errors
/// [`TestkitError::Io`] when the server cannot be reached or the reply
/// cannot be read within 5 s.
pub async fn command(port: u16, args: &[&str]) -> Result<String, TestkitError> {
    let what = || format!("{} on 127.0.0.1:{port}", args.join(" "));
    let exchange = async {
        let stream = TcpStream::connect(("127.0.0.1", port)).await?;
        let mut stream = BufReader::new(stream);
        let mut request = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            request.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            request.extend_from_slice(a.as_bytes());
            request.extend_from_slice(b"\r\n");
        }
        stream.get_mut().write_all(&request).await?;
        let mut out = Vec::new();
        read_reply(&mut stream, &mut out).await?;
        Ok::<_, std::io::Error>(out.join("\n"))
    };
    match tokio::time::timeout(COMMAND_TIMEOUT, exchange).await {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(e)) => Err(TestkitError::io(what(), e)),
        Err(_) => Err(TestkitError::io(
            what(),
            std::io::Error::new(std::io::ErrorKind::TimedOut, "no reply within 5 s"),
        )),
    }
}

/// [`command`], or an empty string when it fails (for polling loops).
pub(crate) async fn command_or_empty(port: u16, args: &[&str]) -> String {
    command(port, args).await.unwrap_or_default()
}

fn bad_reply(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned())
}

/// Reads one reply, pushing its lines to `out`.
async fn read_reply(
    stream: &mut BufReader<TcpStream>,
    out: &mut Vec<String>,
) -> std::io::Result<()> {
    // An explicit stack instead of recursion: arrays count down their
    // remaining elements.
    let mut pending: Vec<i64> = Vec::new();
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).await? == 0 {
            return Err(bad_reply("connection closed mid-reply"));
        }
        let line = line.trim_end_matches(['\r', '\n']);
        let (kind, rest) = line.split_at(line.len().min(1));
        match kind {
            "+" | "-" | ":" => out.push(rest.to_owned()),
            "$" => {
                let len: i64 = rest.parse().map_err(|_| bad_reply("bad bulk length"))?;
                if len < 0 {
                    out.push(String::new());
                } else {
                    let len = usize::try_from(len).map_err(|_| bad_reply("bad bulk length"))?;
                    let mut data = vec![0u8; len + 2];
                    stream.read_exact(&mut data).await?;
                    data.truncate(len);
                    out.push(String::from_utf8_lossy(&data).into_owned());
                }
            }
            "*" => {
                let n: i64 = rest.parse().map_err(|_| bad_reply("bad array length"))?;
                if n < 0 {
                    out.push(String::new());
                } else if n > 0 {
                    pending.push(n);
                    continue;
                }
            }
            _ => return Err(bad_reply("unknown reply type")),
        }
        // One element done: close every array it completed.
        loop {
            match pending.last_mut() {
                None => return Ok(()),
                Some(left) => {
                    *left -= 1;
                    if *left > 0 {
                        break;
                    }
                    pending.pop();
                }
            }
        }
    }
}

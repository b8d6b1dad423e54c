//! A counting TCP proxy in front of Redis: forwards bytes both ways and
//! counts the commands clients send (top-level RESP arrays) and the round
//! trips (a send after an answer), so "Redis round trips per grab" is
//! counted at the wire rather than estimated. (The server's own statistics
//! also count the commands scripts run.)

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What crossed the proxy so far.
#[derive(Clone, Default)]
pub struct Wire {
    commands: Arc<AtomicU64>,
    exchanges: Arc<AtomicU64>,
}

impl Wire {
    /// Commands clients sent.
    pub fn commands(&self) -> u64 {
        self.commands.load(Ordering::Relaxed)
    }

    /// Round trips: sends that began after the server had answered
    /// (commands written together before any answer, such as the two risk
    /// scripts of a press, are one round trip). Exact for one caller per
    /// connection pressing one request at a time.
    pub fn round_trips(&self) -> u64 {
        self.exchanges.load(Ordering::Relaxed)
    }
}

/// Parses as many complete commands as `buf` holds; returns (commands,
/// bytes consumed).
fn complete_commands(buf: &[u8]) -> (u64, usize) {
    fn line(buf: &[u8], at: usize) -> Option<(i64, usize)> {
        let end = buf[at..].windows(2).position(|w| w == b"\r\n")? + at;
        let n = std::str::from_utf8(&buf[at + 1..end]).ok()?.parse().ok()?;
        Some((n, end + 2))
    }
    let (mut count, mut at) = (0, 0);
    'frames: while at < buf.len() {
        if buf[at] != b'*' {
            // An inline command: one line.
            match buf[at..].windows(2).position(|w| w == b"\r\n") {
                Some(p) => {
                    at += p + 2;
                    count += 1;
                    continue;
                }
                None => break,
            }
        }
        let Some((n, mut pos)) = line(buf, at) else { break };
        for _ in 0..n.max(0) {
            if pos >= buf.len() || buf[pos] != b'$' {
                break 'frames;
            }
            let Some((len, start)) = line(buf, pos) else {
                break 'frames;
            };
            let end = start + len.max(0) as usize + 2;
            if end > buf.len() {
                break 'frames;
            }
            pos = end;
        }
        at = pos;
        count += 1;
    }
    (count, at)
}

/// Listens on a free loopback port and proxies every connection to
/// `upstream` (`host:port`). Returns the port and the counters.
pub async fn start(upstream: String) -> (u16, Wire) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
    let port = listener.local_addr().expect("addr").port();
    let wire = Wire::default();
    let counter = wire.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                // Set when the server has answered since the client last sent.
                let answered = Arc::new(AtomicBool::new(true));
                let heard = answered.clone();
                tokio::spawn(async move {
                    let mut chunk = vec![0u8; 16 * 1024];
                    loop {
                        let n = match sr.read(&mut chunk).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        heard.store(true, Ordering::Relaxed);
                        if cw.write_all(&chunk[..n]).await.is_err() {
                            break;
                        }
                    }
                });
                let mut pending: Vec<u8> = Vec::new();
                let mut chunk = vec![0u8; 16 * 1024];
                loop {
                    let n = match cr.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if answered.swap(false, Ordering::Relaxed) {
                        counter.exchanges.fetch_add(1, Ordering::Relaxed);
                    }
                    if sw.write_all(&chunk[..n]).await.is_err() {
                        break;
                    }
                    pending.extend_from_slice(&chunk[..n]);
                    let (count, used) = complete_commands(&pending);
                    counter.commands.fetch_add(count, Ordering::Relaxed);
                    pending.drain(..used);
                }
            });
        }
    });
    (port, wire)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_whole_commands_and_keeps_partial_ones() {
        let two = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n";
        assert_eq!(complete_commands(two), (2, two.len()));
        let partial = b"*2\r\n$3\r\nGET\r\n$5\r\nab";
        assert_eq!(complete_commands(partial), (0, 0));
        let star_in_data = b"*2\r\n$3\r\nGET\r\n$3\r\n*1*\r\n";
        assert_eq!(complete_commands(star_in_data), (1, star_in_data.len()));
    }
}

//! systemd's notify protocol (`Type=notify`): nothing happens unless
//! `NOTIFY_SOCKET` is set.
//!
//! The datagrams are sent here rather than through `sd_notify::notify`,
//! whose send blocks while the receiver's queue is full (ten datagrams by
//! default, `net.unix.max_dgram_qlen`). A manager that stops reading, a
//! stuck PID 1 or a test, must never stall the agent's loop: watchdog pings
//! and status lines are sent without waiting and dropped when the queue is
//! full; `READY=1` and `STOPPING=1`, which the manager must not miss, wait
//! at most [`STATE_WAIT`].

use std::ffi::OsString;
use std::io::ErrorKind;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

/// How long `READY=1` or `STOPPING=1` may wait for room in a full queue.
pub const STATE_WAIT: Duration = Duration::from_secs(1);

/// Tells systemd about readiness, status and liveness.
pub struct Notifier {
    /// `NOTIFY_SOCKET`, if set and not empty.
    socket: Option<OsString>,
    /// Half the watchdog period systemd asked for (`WATCHDOG_USEC`), if any.
    watchdog_every: Option<Duration>,
    next_ping: Option<Instant>,
    last_status: String,
    /// Messages dropped because the queue was full, and whether that was
    /// already logged (once per episode, not once per ping).
    dropped: u64,
    warned: bool,
}

impl Notifier {
    /// Read `NOTIFY_SOCKET` and `WATCHDOG_USEC` (and `WATCHDOG_PID`).
    pub fn from_env() -> Notifier {
        let socket = std::env::var_os("NOTIFY_SOCKET").filter(|s| !s.is_empty());
        let mut usec = 0u64;
        let watchdog_every = (socket.is_some() && sd_notify::watchdog_enabled(false, &mut usec) && usec > 0)
            .then(|| Duration::from_micros(usec) / 2);
        if let Some(every) = watchdog_every {
            tracing::info!("systemd watchdog: pinging every {}", humantime::format_duration(every));
        }
        Notifier::new(socket, watchdog_every)
    }

    fn new(socket: Option<OsString>, watchdog_every: Option<Duration>) -> Notifier {
        Notifier {
            socket,
            watchdog_every,
            next_ping: watchdog_every.map(|_| Instant::now()),
            last_status: String::new(),
            dropped: 0,
            warned: false,
        }
    }

    /// Send one datagram of `lines`; `wait` bounds how long a full queue
    /// may hold it (`None`: not at all).
    fn send(&mut self, lines: &[&str], wait: Option<Duration>) {
        let Some(socket) = &self.socket else { return };
        let message: String = lines.iter().map(|l| format!("{l}\n")).collect();
        match send_datagram(socket, message.as_bytes(), wait) {
            Ok(()) => {
                if self.warned {
                    tracing::info!("systemd's notify socket takes messages again ({} dropped)", self.dropped);
                    self.warned = false;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                self.dropped += 1;
                if !self.warned {
                    tracing::warn!(
                        "systemd's notify socket is full: {} dropped rather than stalling the agent",
                        lines.join(" ")
                    );
                    self.warned = true;
                }
            }
            Err(e) => tracing::warn!("notifying systemd: {e}"),
        }
    }

    /// `READY=1` with a status line.
    pub fn ready(&mut self, status: &str) {
        self.last_status = status.to_owned();
        self.send(&["READY=1", &status_line(status)], Some(STATE_WAIT));
    }

    /// `STATUS=…`, when it changed.
    pub fn status(&mut self, status: &str) {
        if status != self.last_status {
            self.last_status = status.to_owned();
            self.send(&[&status_line(status)], None);
        }
    }

    /// `STOPPING=1` with a status line.
    pub fn stopping(&mut self, status: &str) {
        self.send(&["STOPPING=1", &status_line(status)], Some(STATE_WAIT));
    }

    /// When the next `WATCHDOG=1` is due.
    pub fn next_ping(&self) -> Option<Instant> {
        self.next_ping
    }

    /// Send `WATCHDOG=1` if it is due. Called from the agent's loop, so a
    /// stuck loop stops the pings and systemd restarts the agent.
    pub fn ping_if_due(&mut self, now: Instant) {
        if let (Some(at), Some(every)) = (self.next_ping, self.watchdog_every)
            && now >= at
        {
            self.send(&["WATCHDOG=1"], None);
            self.next_ping = Some(now + every);
        }
    }
}

/// `STATUS=` with the text on one line: a newline would start another
/// assignment in the manager's parser.
fn status_line(status: &str) -> String {
    format!("STATUS={}", status.replace(['\n', '\r'], " "))
}

/// One datagram to the socket `NOTIFY_SOCKET` names: a path, or an
/// abstract name after `@`.
fn send_datagram(socket: &OsString, message: &[u8], wait: Option<Duration>) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let sock = UnixDatagram::unbound()?;
    match wait {
        None => sock.set_nonblocking(true)?,
        // A zero timeout would mean "forever" to `SO_SNDTIMEO`.
        Some(wait) => sock.set_write_timeout(Some(wait.max(Duration::from_millis(1))))?,
    }
    let bytes = socket.as_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name)?
        }
        None => SocketAddr::from_pathname(std::path::Path::new(socket))?,
    };
    let sent = sock.send_to_addr(message, &addr).map_err(|e| {
        // `SO_SNDTIMEO` running out is EAGAIN too: the queue stayed full.
        if e.kind() == ErrorKind::TimedOut { ErrorKind::WouldBlock.into() } else { e }
    })?;
    if sent != message.len() {
        return Err(std::io::Error::new(ErrorKind::WriteZero, "the datagram was cut short"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receiver() -> (tempfile::TempDir, UnixDatagram, OsString) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        (dir, sock, path.into_os_string())
    }

    fn received(sock: &UnixDatagram) -> Vec<String> {
        sock.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 4096];
        let mut out = Vec::new();
        while let Ok(n) = sock.recv(&mut buf) {
            out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        out
    }

    #[test]
    fn a_receiver_that_never_reads_never_stalls_the_pings_or_the_stop() {
        let (_dir, sock, path) = receiver();
        let mut n = Notifier::new(Some(path), Some(Duration::from_millis(1)));
        let start = Instant::now();
        // Far more than any default queue holds, each one due.
        for i in 0..2000 {
            n.ping_if_due(start + Duration::from_millis(2 * i));
        }
        n.stopping("stopped");
        // The stop waited at most STATE_WAIT; the pings not at all.
        assert!(start.elapsed() < STATE_WAIT * 3, "{:?}", start.elapsed());
        assert!(n.dropped > 0);
        let got = received(&sock);
        assert!(got.len() < 2000, "the queue is bounded: {}", got.len());
        assert!(got.iter().all(|m| m == "WATCHDOG=1\n"), "{got:?}");
    }

    #[test]
    fn ready_status_and_stop_arrive_as_one_datagram_each_with_one_line_statuses() {
        let (_dir, sock, path) = receiver();
        let mut n = Notifier::new(Some(path), None);
        n.ready("2 of 2\nready");
        n.status("2 of 2\nready");
        n.status("1 of 2 ready");
        n.stopping("stopped");
        assert_eq!(
            received(&sock),
            ["READY=1\nSTATUS=2 of 2 ready\n", "STATUS=1 of 2 ready\n", "STOPPING=1\nSTATUS=stopped\n"]
        );
    }

    #[test]
    fn an_abstract_socket_is_reached_by_its_at_name() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("durasync-notify-test-{}", std::process::id());
        let sock = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
        let mut n = Notifier::new(Some(format!("@{name}").into()), None);
        n.ready("up");
        assert_eq!(received(&sock), ["READY=1\nSTATUS=up\n"]);
    }

    #[test]
    fn without_a_socket_nothing_is_sent_and_nothing_fails() {
        let mut n = Notifier::new(None, None);
        n.ready("up");
        n.ping_if_due(Instant::now());
        assert_eq!(n.next_ping(), None);
    }
}

//! The handover's messages and their framing, over the Unix stream socket the old
//! numatgtd shares with the new one: each message is a 4-byte big-endian length and that
//! many bytes of text; the first one (the offer) carries the passed-on listening sockets
//! as SCM_RIGHTS. The text is line-based and starts with the format's name and number, so
//! a binary that reads another format says so instead of guessing.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

/// The handover format this numatgtd writes and reads.
pub const FORMAT: u32 = 1;
/// Its name, the first word of every offer.
const MAGIC: &str = "numatgt-handover";
/// The longest message accepted (the running configuration's YAML is the big part).
const MAX_MESSAGE: usize = 64 << 20;
/// The most descriptors one offer carries.
pub const MAX_FDS: usize = 250;

/// Why a numatgtd was started with a handover socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A trial run of the new executable: read the offer and the configuration, answer
    /// `prepared` or `refused`, and exit. Nothing is served.
    Check,
    /// The new executable, in the process of the old one (execve): serve on the passed-on
    /// sockets, answer the management client; on failure start the old executable again.
    Takeover,
    /// The old executable again after a failed takeover: serve, nobody waits.
    Resume,
}

impl Mode {
    fn word(self) -> &'static str {
        match self {
            Mode::Check => "check",
            Mode::Takeover => "takeover",
            Mode::Resume => "resume",
        }
    }
}

/// What a passed-on descriptor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A TCP portal's listening socket.
    Tcp,
    /// The listening socket of a TCP portal added at run time (tgtadm `--mode portal`, a
    /// reload): the new process serves it as one (it can be deleted).
    AddedTcp,
    /// The management socket's listening socket.
    Mgmt,
    /// The metrics server's listening socket.
    Metrics,
    /// The connection of the management client that asked for the upgrade.
    Reply,
    /// The old executable (opened from `/proc/self/exe`), to start again if the new one
    /// fails.
    Fallback,
    /// A TCP connection of a normal session that goes on in the new process; its state is
    /// the offer's next `conn` line.
    Conn,
    /// A node's cache memory file, in node order; the offer's `cache-layout` line says
    /// its shape and the `hot` lines where its blocks are.
    CacheMemory,
}

const ROLES: [(Role, &str); 8] = [
    (Role::Tcp, "tcp"),
    (Role::AddedTcp, "tcp-added"),
    (Role::Mgmt, "mgmt"),
    (Role::Metrics, "metrics"),
    (Role::Reply, "reply"),
    (Role::Fallback, "fallback"),
    (Role::Conn, "conn"),
    (Role::CacheMemory, "cache-memory"),
];

/// What a new executable says it can take besides format [`FORMAT`]'s basics, in its
/// `prepared` answer: moved TCP connections (`Role::Conn`). A binary that does not say so
/// gets none: its sessions log out and in again.
pub const CAN_MOVE_CONNECTIONS: &str = "moves-connections";
/// And the cache's memory files (`Role::CacheMemory`) with the blocks' places in them.
pub const CAN_KEEP_CACHE_MEMORY: &str = "keeps-cache-memory";
/// And the ownership of RBD LUNs this gateway owned (`alua-owned` lines): it takes their
/// locks back at start.
pub const CAN_KEEP_ALUA_OWNERSHIP: &str = "keeps-alua-ownership";
/// And portals added at run time as such (`Role::AddedTcp`); a binary that does not say so
/// gets them as `Role::Tcp` (configured portals, fixed until a restart).
pub const CAN_TAKE_ADDED_PORTALS: &str = "takes-added-portals";

impl Role {
    fn word(self) -> &'static str {
        ROLES
            .iter()
            .find(|(r, _)| *r == self)
            .map_or("?", |(_, w)| w)
    }
}

/// The first message: who hands over, why, which descriptors (in order) and the running
/// configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// The handover format ([`FORMAT`]).
    pub format: u32,
    /// The old numatgtd's version.
    pub from_version: String,
    /// The old numatgtd's PID.
    pub from_pid: u32,
    /// Take over, or start again.
    pub mode: Mode,
    /// What each passed-on descriptor is, in the order they come.
    pub roles: Vec<Role>,
    /// When the old daemon stopped serving (milliseconds since the Unix epoch; 0: not).
    pub paused_at_ms: u64,
    /// What the old daemon reports of its side (one line, for the admin's answer).
    pub note: String,
    /// Upgrades this process went through before this one.
    pub upgrades: u64,
    /// Connections moved with their sessions (`Role::Conn`).
    pub moved: u64,
    /// Connections asked to log out, and those closed when the wait ended.
    pub asked: u64,
    /// See `asked`.
    pub closed: u64,
    /// Milliseconds the logouts took, and the old executable's stop.
    pub quiesce_ms: u64,
    /// See `quiesce_ms`.
    pub writeback_ms: u64,
    /// The state of each moved connection (`iscsi_proto::MovedConn`'s text), in the
    /// order of their `Role::Conn` descriptors.
    pub conns: Vec<String>,
    /// The ownership records of the RBD LUNs the old executable owned (only to a binary
    /// that says [`CAN_KEEP_ALUA_OWNERSHIP`]).
    pub alua_owned: Vec<String>,
    /// Logical units' state (`scsi::LogicalUnit::handover_state`): target name, LUN, bytes.
    pub lus: Vec<(String, u64, Vec<u8>)>,
    /// The old process's cached blocks (`backend::warm::HotList`'s text), for a warm start.
    pub hot: Option<String>,
    /// The shape of the cache memory passed on (`cache::MemoryLayout`'s text).
    pub cache_layout: Option<String>,
    /// The running configuration (`numatgtadm --dump`'s YAML).
    pub config: String,
}

/// Why a message could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The other side closed the socket.
    #[error("the other numatgtd closed the handover socket")]
    Closed,
    /// The socket failed (or timed out).
    #[error("handover socket: {0}")]
    Io(#[from] std::io::Error),
    /// A length beyond [`MAX_MESSAGE`].
    #[error("handover message of {0} bytes is too long")]
    TooLong(usize),
    /// Not a message of this format.
    #[error("not a numatgt handover message: {0}")]
    Malformed(String),
    /// Another format number.
    #[error(
        "handover format {0}: this numatgtd reads format {FORMAT} only (restart it instead: \
         systemctl restart numatgtd)"
    )]
    Format(u32),
}

impl Offer {
    /// The offer's text.
    pub fn encode(&self) -> String {
        let mut t = format!(
            "{MAGIC} {}\nfrom-version {}\nfrom-pid {}\nmode {}\npaused-at-ms {}\nnote {}\n",
            self.format,
            self.from_version,
            self.from_pid,
            self.mode.word(),
            self.paused_at_ms,
            self.note.replace('\n', " "),
        );
        t.push_str(&format!(
            "upgrades {}\nasked {}\nclosed {}\nquiesce-ms {}\nwriteback-ms {}\n",
            self.upgrades, self.asked, self.closed, self.quiesce_ms, self.writeback_ms
        ));
        if self.moved > 0 {
            t.push_str(&format!("moved {}\n", self.moved));
        }
        for r in &self.roles {
            t.push_str("fd ");
            t.push_str(r.word());
            t.push('\n');
        }
        for c in &self.conns {
            t.push_str("conn ");
            t.push_str(&hex(c.as_bytes()));
            t.push('\n');
        }
        for l in self.hot.iter().flat_map(|h| h.lines()) {
            t.push_str("hot ");
            t.push_str(l);
            t.push('\n');
        }
        if let Some(l) = &self.cache_layout {
            t.push_str(&format!("cache-layout {}\n", l.replace('\n', " ")));
        }
        for (iqn, lun, state) in &self.lus {
            t.push_str(&format!(
                "lu {} {lun} {}\n",
                hex(iqn.as_bytes()),
                hex(state)
            ));
        }
        for r in &self.alua_owned {
            t.push_str(&format!("alua-owned {}\n", hex(r.as_bytes())));
        }
        t.push_str("config\n");
        t.push_str(&self.config);
        t
    }

    /// Reads an offer; a different format number is [`WireError::Format`] (checked before
    /// anything else, so later formats may change the rest).
    pub fn decode(text: &str) -> Result<Offer, WireError> {
        let bad = |what: &str| WireError::Malformed(what.to_string());
        let (head, config) = match text.find("\nconfig\n") {
            Some(i) => (&text[..i], &text[i + "\nconfig\n".len()..]),
            None => return Err(bad("no config line")),
        };
        let mut lines = head.lines();
        let first = lines.next().unwrap_or_default();
        let format = match first.split_once(' ') {
            Some((MAGIC, n)) => n.trim().parse::<u32>().map_err(|_| bad(first))?,
            _ => return Err(bad(first)),
        };
        if format != FORMAT {
            return Err(WireError::Format(format));
        }
        let mut offer = Offer {
            format,
            from_version: String::new(),
            from_pid: 0,
            mode: Mode::Check,
            roles: Vec::new(),
            paused_at_ms: 0,
            note: String::new(),
            upgrades: 0,
            asked: 0,
            closed: 0,
            quiesce_ms: 0,
            writeback_ms: 0,
            moved: 0,
            conns: Vec::new(),
            lus: Vec::new(),
            alua_owned: Vec::new(),
            hot: None,
            cache_layout: None,
            config: config.to_string(),
        };
        for line in lines {
            let (k, v) = line.split_once(' ').unwrap_or((line, ""));
            match k {
                "from-version" => offer.from_version = v.to_string(),
                "from-pid" => offer.from_pid = v.parse().map_err(|_| bad(line))?,
                "mode" => {
                    offer.mode = [Mode::Check, Mode::Takeover, Mode::Resume]
                        .into_iter()
                        .find(|m| m.word() == v)
                        .ok_or_else(|| bad(line))?;
                }
                "paused-at-ms" => offer.paused_at_ms = v.parse().map_err(|_| bad(line))?,
                "note" => offer.note = v.to_string(),
                "cache-layout" => offer.cache_layout = Some(v.to_string()),
                "alua-owned" => offer.alua_owned.push(
                    unhex(v)
                        .and_then(|b| String::from_utf8(b).ok())
                        .ok_or_else(|| bad("alua-owned: not hexadecimal UTF-8"))?,
                ),
                "hot" => {
                    let h = offer.hot.get_or_insert_with(String::new);
                    h.push_str(v);
                    h.push('\n');
                }
                "lu" => {
                    let mut w = v.split(' ');
                    let text = |w: Option<&str>| {
                        unhex(w.unwrap_or(""))
                            .and_then(|b| String::from_utf8(b).ok())
                            .ok_or_else(|| bad("lu: not hexadecimal UTF-8"))
                    };
                    let iqn = text(w.next())?;
                    let lun = w
                        .next()
                        .and_then(|n| n.parse().ok())
                        .ok_or_else(|| bad(line))?;
                    let state = unhex(w.next().unwrap_or("")).ok_or_else(|| bad(line))?;
                    offer.lus.push((iqn, lun, state));
                }
                "conn" => offer.conns.push(
                    unhex(v)
                        .and_then(|b| String::from_utf8(b).ok())
                        .ok_or_else(|| bad("conn: not hexadecimal UTF-8"))?,
                ),
                "upgrades" | "moved" | "asked" | "closed" | "quiesce-ms" | "writeback-ms" => {
                    let n: u64 = v.parse().map_err(|_| bad(line))?;
                    *match k {
                        "upgrades" => &mut offer.upgrades,
                        "moved" => &mut offer.moved,
                        "asked" => &mut offer.asked,
                        "closed" => &mut offer.closed,
                        "quiesce-ms" => &mut offer.quiesce_ms,
                        _ => &mut offer.writeback_ms,
                    } = n;
                }
                "fd" => offer.roles.push(
                    ROLES
                        .iter()
                        .find(|(_, w)| *w == v)
                        .map(|(r, _)| *r)
                        .ok_or_else(|| bad(line))?,
                ),
                _ => return Err(bad(line)),
            }
        }
        let conn_fds = offer.roles.iter().filter(|r| **r == Role::Conn).count();
        if conn_fds != offer.conns.len() {
            return Err(bad("conn lines and conn descriptors differ in number"));
        }
        Ok(offer)
    }
}

fn hex(bytes: &[u8]) -> String {
    iscsi_proto::text::binary::encode_hex(bytes)
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    iscsi_proto::text::binary::decode_hex_record(s, MAX_MESSAGE).ok()
}

/// The message that carries further descriptors of an offer, [`MAX_FDS`] at most each.
pub const MORE_FDS: &str = "numatgt-handover-more-descriptors\n";

/// Sends `first` with as many of `fds` as one message carries, and the rest in
/// [`MORE_FDS`] messages.
pub fn send_with_fds(sock: &UnixStream, first: &str, fds: &[RawFd]) -> Result<(), WireError> {
    let mut chunks = fds.chunks(MAX_FDS);
    send(sock, first, chunks.next().unwrap_or(&[]))?;
    for c in chunks {
        send(sock, MORE_FDS, c)?;
    }
    Ok(())
}

/// Receives [`MORE_FDS`] messages until `fds` holds `total` descriptors.
pub fn recv_more_fds(
    sock: &UnixStream,
    fds: &mut Vec<OwnedFd>,
    total: usize,
) -> Result<(), WireError> {
    while fds.len() < total {
        let (more, f) = recv(sock)?;
        if more != MORE_FDS || f.is_empty() {
            return Err(WireError::Malformed(format!(
                "{} of {total} descriptors came",
                fds.len()
            )));
        }
        fds.extend(f);
    }
    Ok(())
}

/// Sends one message, with `fds` attached when there are any.
pub fn send(sock: &UnixStream, text: &str, fds: &[RawFd]) -> Result<(), WireError> {
    let len = u32::try_from(text.len()).map_err(|_| WireError::TooLong(text.len()))?;
    let mut msg = Vec::with_capacity(4 + text.len());
    msg.extend_from_slice(&len.to_be_bytes());
    msg.extend_from_slice(text.as_bytes());
    let mut off = 0;
    if !fds.is_empty() {
        let iov = [std::io::IoSlice::new(&msg)];
        let cmsg = [ControlMessage::ScmRights(fds)];
        off = loop {
            match sendmsg::<()>(sock.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None) {
                Ok(n) => break n,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(std::io::Error::from(e).into()),
            }
        };
    }
    let mut w = sock;
    w.write_all(&msg[off..])?;
    Ok(())
}

/// Receives one message and the descriptors that came with it.
pub fn recv(sock: &UnixStream) -> Result<(String, Vec<OwnedFd>), WireError> {
    let mut fds = Vec::new();
    let mut head = [0u8; 4];
    let mut got = 0;
    // the first bytes with recvmsg: descriptors arrive with them
    while got < head.len() {
        let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
        let mut iov = [std::io::IoSliceMut::new(&mut head[got..])];
        // a socket with a receive timeout fails with EINTR (instead of restarting) when
        // any signal arrives: try again
        let r = match recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(r) => r,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(std::io::Error::from(e).into()),
        };
        for c in r.cmsgs().map_err(std::io::Error::from)? {
            if let ControlMessageOwned::ScmRights(list) = c {
                // SAFETY: SCM_RIGHTS gave this process these new descriptors; each is
                // owned here once, and closed when dropped.
                fds.extend(
                    list.into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
        if r.bytes == 0 {
            return Err(WireError::Closed);
        }
        got += r.bytes;
    }
    let len = u32::from_be_bytes(head) as usize;
    if len > MAX_MESSAGE {
        return Err(WireError::TooLong(len));
    }
    let mut body = vec![0u8; len];
    let mut r = sock;
    r.read_exact(&mut body).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => WireError::Closed,
        _ => WireError::Io(e),
    })?;
    let text = String::from_utf8(body).map_err(|_| WireError::Malformed("not UTF-8".into()))?;
    Ok((text, fds))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer() -> Offer {
        Offer {
            format: FORMAT,
            from_version: "0.1.0".into(),
            from_pid: 42,
            mode: Mode::Takeover,
            roles: vec![
                Role::Tcp,
                Role::Mgmt,
                Role::Metrics,
                Role::Reply,
                Role::Fallback,
                Role::Conn,
                Role::CacheMemory,
                Role::AddedTcp,
            ],
            paused_at_ms: 1_800_000_000_000,
            note: "2 connections asked to log out".into(),
            upgrades: 3,
            moved: 1,
            conns: vec!["initiator iqn.x\ntarget iqn.y\n".into()],
            lus: vec![("iqn.y".into(), 1, vec![1, 2, 3])],
            alua_owned: vec!["rbd_data.numatgt-alua.img 1".into()],
            hot: Some("block-size 65536\nlun 0x6979 1 5+3,1+1\nat 0x6979 1 3.7,-,-,4.0\n".into()),
            cache_layout: Some(
                "block-size 65536 sector-size 512 group 8 partitions 16 blocks 256 nodes 1".into(),
            ),
            asked: 2,
            closed: 1,
            quiesce_ms: 40,
            writeback_ms: 250,
            config: "targets: []\nconfig\n".into(),
        }
    }

    #[test]
    fn an_offer_reads_back() {
        let o = offer();
        assert_eq!(Offer::decode(&o.encode()).expect("decode"), o);
        let r = Offer {
            mode: Mode::Resume,
            roles: vec![],
            conns: vec![],
            moved: 0,
            hot: None,
            ..offer()
        };
        assert_eq!(Offer::decode(&r.encode()).expect("decode"), r);
    }

    #[test]
    fn another_format_or_garbage_is_refused_clearly() {
        let t = offer().encode().replacen("handover 1", "handover 2", 1);
        let e = Offer::decode(&t).expect_err("format 2");
        assert!(matches!(e, WireError::Format(2)), "{e}");
        assert!(e.to_string().contains("systemctl restart"), "{e}");
        for t in [
            "",
            "GET / HTTP/1.0\r\n\r\n",
            "numatgt-handover x\nconfig\n",
            "numatgt-handover 1\nmode sideways\nconfig\n",
            "numatgt-handover 1\nfd disk\nconfig\n",
        ] {
            assert!(Offer::decode(t).is_err(), "{t:?}");
        }
    }

    #[test]
    fn messages_and_descriptors_cross_a_socket_pair() {
        let (a, b) = UnixStream::pair().expect("pair");
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        send(&a, &offer().encode(), &[l.as_raw_fd()]).expect("send");
        send(&a, "go\n", &[]).expect("send");
        let (t, fds) = recv(&b).expect("recv");
        assert_eq!(Offer::decode(&t).expect("decode"), offer());
        assert_eq!(fds.len(), 1);
        let got = std::net::TcpListener::from(fds.into_iter().next().expect("fd"));
        assert_eq!(got.local_addr().expect("addr"), addr, "the same socket");
        let (t, fds) = recv(&b).expect("recv");
        assert_eq!((t.as_str(), fds.len()), ("go\n", 0));
        drop(a);
        assert!(matches!(recv(&b), Err(WireError::Closed)));
    }
}

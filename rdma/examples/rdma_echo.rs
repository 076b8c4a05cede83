//! rdma_echo: the `rdma` crate end to end over a real (or soft-RoCE) device.
//!
//! `rdma_echo server IP:PORT` and `rdma_echo client IP:PORT` (`--timeout SECS`, default 30
//! per step). The client connects with 4 bytes of CM private data, the server checks them
//! and accepts with its own 4; the client Sends (inline) the address, rkey and length of a
//! registered 8 KiB pattern; the server RDMA READs it (two SGEs), checks it, RDMA WRITEs
//! its complement (two SGEs) into the client's buffer right after the pattern, and Sends
//! "DONE" from a registered buffer; the client checks the written bytes and Sends "BYE";
//! the server disconnects. Every wait is on the completion channel and CM channel fds
//! (mio), bounded by the timeout. Success: `RDMA_ECHO_OK server` / `RDMA_ECHO_OK client`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use rdma::{
    Access, Buffer, CmEvent, CmEventKind, CmId, Completion, CompletionQueue, Connection, Context,
    EventChannel, Listener, MemoryRegion, ProtectionDomain, QpCaps, Remote, SendOptions, WcOpcode,
};

const CLIENT_PRIV: [u8; 4] = *b"NTGc";
const SERVER_PRIV: [u8; 4] = *b"NTGs";
const MSG_MAGIC: [u8; 4] = *b"BUF1";
const DATA: usize = 8192;
const CTL: u32 = 64;

type Res<T> = Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: rdma_echo server|client IP:PORT [--timeout SECS]";
    let (Some(mode), Some(addr)) = (args.get(1), args.get(2)) else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    let Ok(addr) = addr.parse::<SocketAddr>() else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    let secs = match args.get(3).map(String::as_str) {
        Some("--timeout") => args.get(4).and_then(|s| s.parse().ok()).unwrap_or(30),
        _ => 30,
    };
    let timeout = Duration::from_secs(secs);
    let r = match mode.as_str() {
        "server" => server(addr, timeout),
        "client" => client(addr, timeout),
        _ => Err(usage.to_string()),
    };
    match r {
        Ok(()) => {
            println!("RDMA_ECHO_OK {mode}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rdma_echo {mode}: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 8)) as u8
}

/// Waits on a CQ's completion channel and a CM event channel with one mio poll set.
struct Waiter {
    poll: Poll,
    events: Events,
    cq: Arc<CompletionQueue>,
    cm: EventChannel,
    completions: VecDeque<Completion>,
    cm_events: VecDeque<CmEvent>,
    timeout: Duration,
}

const CQ_TOKEN: Token = Token(0);
const CM_TOKEN: Token = Token(1);

impl Waiter {
    fn new(cq: Arc<CompletionQueue>, cm: EventChannel, timeout: Duration) -> Res<Waiter> {
        let poll = Poll::new().map_err(|e| format!("mio: {e}"))?;
        poll.registry()
            .register(&mut SourceFd(&cq.as_raw_fd()), CQ_TOKEN, Interest::READABLE)
            .map_err(|e| format!("register cq fd: {e}"))?;
        poll.registry()
            .register(&mut SourceFd(&cm.as_raw_fd()), CM_TOKEN, Interest::READABLE)
            .map_err(|e| format!("register cm fd: {e}"))?;
        cq.arm(false).map_err(|e| e.to_string())?;
        Ok(Waiter {
            poll,
            events: Events::with_capacity(8),
            cq,
            cm,
            completions: VecDeque::new(),
            cm_events: VecDeque::new(),
            timeout,
        })
    }

    /// Moves what is ready into the queues; when nothing is, sleeps on the fds until
    /// `deadline`.
    fn pump(&mut self, deadline: Instant) -> Res<()> {
        loop {
            let mut buf = [Completion::default(); 8];
            let n = self.cq.poll(&mut buf).map_err(|e| e.to_string())?;
            self.completions.extend(&buf[..n]);
            while let Some(ev) = self.cm.get_event().map_err(|e| e.to_string())? {
                self.cm_events.push_back(ev);
            }
            if !self.completions.is_empty() || !self.cm_events.is_empty() {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err("timed out".into());
            }
            self.poll
                .poll(&mut self.events, Some(deadline - now))
                .map_err(|e| format!("poll: {e}"))?;
            let cq_ready = self.events.iter().any(|e| e.token() == CQ_TOKEN);
            if cq_ready {
                // consume (and ack) the events, re-arm, then poll again above: whatever
                // completed before the re-arm is found by that poll
                while self.cq.get_event().map_err(|e| e.to_string())? {}
                self.cq.arm(false).map_err(|e| e.to_string())?;
            }
        }
    }

    fn completion(&mut self, what: &str) -> Res<Completion> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(c) = self.completions.pop_front() {
                if !c.status.is_success() {
                    return Err(format!(
                        "{what}: wr {} completed with {}",
                        c.wr_id, c.status
                    ));
                }
                return Ok(c);
            }
            self.pump(deadline).map_err(|e| format!("{what}: {e}"))?;
        }
    }

    /// `n` successful completions, in wr_id order (a Send's completion and the peer's next
    /// message may come either way round).
    fn completions(&mut self, n: usize, what: &str) -> Res<Vec<Completion>> {
        let mut v = (0..n)
            .map(|_| self.completion(what))
            .collect::<Res<Vec<_>>>()?;
        v.sort_by_key(|c| c.wr_id);
        Ok(v)
    }

    fn cm_event(&mut self, want: CmEventKind, what: &str) -> Res<CmEvent> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(ev) = self.cm_events.pop_front() {
                if ev.kind != want {
                    return Err(format!(
                        "{what}: CM event {:?} (status {}), want {want:?}",
                        ev.kind, ev.status
                    ));
                }
                return Ok(ev);
            }
            self.pump(deadline).map_err(|e| format!("{what}: {e}"))?;
        }
    }
}

/// Per-connection verbs objects.
struct Setup {
    conn: Connection,
    cq: Arc<CompletionQueue>,
    pd: Arc<ProtectionDomain>,
}

fn setup(id: CmId) -> Res<Setup> {
    let ctx = Context::of_id(&id).map_err(|e| format!("context: {e}"))?;
    let pd = ProtectionDomain::new(&ctx).map_err(|e| e.to_string())?;
    let cq = Arc::new(CompletionQueue::new(&ctx, 32).map_err(|e| e.to_string())?);
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 4,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let conn = Connection::create(id, &pd, &cq, caps).map_err(|(e, id)| {
        // a server would reject here; the id is destroyed when dropped
        let _ = id.reject(&[]);
        e.to_string()
    })?;
    eprintln!(
        "device {}, qp {}, caps {:?}, cq depth {}",
        ctx.device_name(),
        conn.qp_num(),
        conn.caps(),
        cq.depth()
    );
    Ok(Setup { conn, cq, pd })
}

fn region(
    pd: &Arc<ProtectionDomain>,
    len: usize,
    access: Access,
) -> Res<(Arc<Buffer>, MemoryRegion)> {
    let buf = Arc::new(Buffer::new(len).map_err(|e| e.to_string())?);
    let mr = MemoryRegion::register(pd, buf.clone(), access).map_err(|e| e.to_string())?;
    Ok((buf, mr))
}

fn wait_cm(ch: &EventChannel, want: CmEventKind, timeout: Duration) -> Res<CmEvent> {
    let mut poll = Poll::new().map_err(|e| format!("mio: {e}"))?;
    poll.registry()
        .register(&mut SourceFd(&ch.as_raw_fd()), CM_TOKEN, Interest::READABLE)
        .map_err(|e| format!("register: {e}"))?;
    let mut events = Events::with_capacity(4);
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(ev) = ch.get_event().map_err(|e| e.to_string())? {
            if ev.kind != want {
                return Err(format!(
                    "CM event {:?} (status {}), want {want:?}",
                    ev.kind, ev.status
                ));
            }
            return Ok(ev);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(format!("no {want:?} CM event in {timeout:?}"));
        }
        poll.poll(&mut events, Some(deadline - now))
            .map_err(|e| format!("poll: {e}"))?;
    }
}

fn server(addr: SocketAddr, timeout: Duration) -> Res<()> {
    let listener = Listener::bind(addr, 4).map_err(|e| format!("listen on {addr}: {e}"))?;
    eprintln!("server: listening on {addr}");
    let mut req = wait_cm(&listener.channel(), CmEventKind::ConnectRequest, timeout)?;
    if req.private_data.get(..4) != Some(&CLIENT_PRIV[..]) {
        return Err(format!(
            "connect request private data {:02x?}",
            req.private_data
        ));
    }
    let id = req.new_id.take().ok_or("connect request without an id")?;
    let Setup { conn, cq, pd } = setup(id)?;
    let mut w = Waiter::new(cq, listener.channel(), timeout)?;
    let (ctl, ctl_mr) = region(&pd, 4096, Access::LOCAL_WRITE)?;
    let (data, data_mr) = region(&pd, 2 * DATA, Access::LOCAL_WRITE)?;
    for i in 0..2u64 {
        let sge = ctl_mr
            .sge(i as usize * CTL as usize, CTL)
            .ok_or("ctl sge")?;
        conn.post_recv(100 + i, sge).map_err(|e| e.to_string())?;
    }
    conn.accept(&SERVER_PRIV, 4, 4)
        .map_err(|e| format!("accept: {e}"))?;
    // the first receive may complete before ESTABLISHED: take whichever comes
    let mut established = false;
    let deadline = Instant::now() + timeout;
    while w.completions.is_empty() {
        if let Some(ev) = w.cm_events.pop_front() {
            if ev.kind != CmEventKind::Established {
                return Err(format!("CM event {:?} before the first message", ev.kind));
            }
            established = true;
            continue;
        }
        w.pump(deadline)
            .map_err(|e| format!("first message: {e}"))?;
    }
    let c = w.completion("first message")?;
    if c.opcode != WcOpcode::Recv || c.wr_id != 100 || c.byte_len != 20 {
        return Err(format!("first message completion {c:?}"));
    }
    if !established {
        w.cm_event(CmEventKind::Established, "established")?;
    }
    let mut msg = [0u8; 20];
    ctl.read_at(0, &mut msg).map_err(|e| e.to_string())?;
    if msg[..4] != MSG_MAGIC {
        return Err(format!("message {msg:02x?}"));
    }
    let va = u64::from_be_bytes(msg[4..12].try_into().unwrap());
    let rkey = u32::from_be_bytes(msg[12..16].try_into().unwrap());
    let len = u32::from_be_bytes(msg[16..20].try_into().unwrap()) as usize;
    if len != DATA {
        return Err(format!("peer buffer of {len} bytes, want {DATA}"));
    }
    eprintln!("server: peer buffer va {va:#x} rkey {rkey:#x} len {len}");

    // RDMA READ the pattern into data[0..DATA], two SGEs
    let half = (DATA / 2) as u32;
    let sges = [
        data_mr.sge(0, half).unwrap(),
        data_mr.sge(DATA / 2, half).unwrap(),
    ];
    conn.post_rdma_read(1, &sges, Remote { addr: va, rkey }, true)
        .map_err(|e| format!("post RDMA READ: {e}"))?;
    let c = w.completion("RDMA READ")?;
    if c.opcode != WcOpcode::RdmaRead || c.wr_id != 1 {
        return Err(format!("RDMA READ completion {c:?}"));
    }
    let mut got = vec![0u8; DATA];
    data.read_at(0, &mut got).map_err(|e| e.to_string())?;
    if let Some(i) = (0..DATA).find(|&i| got[i] != pattern(i)) {
        return Err(format!("RDMA READ data differ at byte {i}: {:#x}", got[i]));
    }
    eprintln!("server: RDMA READ of {DATA} bytes verified");

    // RDMA WRITE the complement to the peer right after its pattern
    let inv: Vec<u8> = got.iter().map(|b| !b).collect();
    data.write_at(DATA, &inv).map_err(|e| e.to_string())?;
    let sges = [
        data_mr.sge(DATA, half).unwrap(),
        data_mr.sge(DATA + DATA / 2, half).unwrap(),
    ];
    let remote = Remote {
        addr: va + DATA as u64,
        rkey,
    };
    conn.post_rdma_write(2, &sges, remote, true)
        .map_err(|e| format!("post RDMA WRITE: {e}"))?;
    let c = w.completion("RDMA WRITE")?;
    if c.opcode != WcOpcode::RdmaWrite || c.wr_id != 2 {
        return Err(format!("RDMA WRITE completion {c:?}"));
    }
    eprintln!("server: RDMA WRITE of {DATA} bytes done");

    // "DONE" by a (non-inline) Send from registered memory
    ctl.write_at(2048, b"DONE").map_err(|e| e.to_string())?;
    let sge = ctl_mr.sge(2048, 4).unwrap();
    let opts = SendOptions {
        signaled: true,
        ..Default::default()
    };
    conn.post_send(3, &[sge], opts)
        .map_err(|e| format!("post Send: {e}"))?;
    let cs = w.completions(2, "Send DONE, receive BYE")?;
    let (c, bye_c) = (cs[0], cs[1]);
    if c.opcode != WcOpcode::Send || c.wr_id != 3 {
        return Err(format!("Send completion {c:?}"));
    }
    let mut bye = [0u8; 3];
    ctl.read_at(CTL as usize, &mut bye)
        .map_err(|e| e.to_string())?;
    if bye_c.wr_id != 101 || bye_c.byte_len != 3 || &bye != b"BYE" {
        return Err(format!("BYE: {bye_c:?} {bye:02x?}"));
    }
    conn.disconnect().map_err(|e| format!("disconnect: {e}"))?;
    w.cm_event(CmEventKind::Disconnected, "disconnected")?;
    eprintln!("server: disconnected");
    Ok(())
}

fn client(addr: SocketAddr, timeout: Duration) -> Res<()> {
    let (id, ch) = CmId::create_client().map_err(|e| format!("create id: {e}"))?;
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    id.resolve_addr(addr, ms).map_err(|e| e.to_string())?;
    wait_cm(&ch, CmEventKind::AddrResolved, timeout)?;
    id.resolve_route(ms).map_err(|e| e.to_string())?;
    wait_cm(&ch, CmEventKind::RouteResolved, timeout)?;
    let Setup { conn, cq, pd } = setup(id)?;
    let mut w = Waiter::new(cq, ch, timeout)?;
    let (ctl, ctl_mr) = region(&pd, 4096, Access::LOCAL_WRITE)?;
    let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    let (data, data_mr) = region(&pd, 2 * DATA, access)?;
    let pat: Vec<u8> = (0..DATA).map(pattern).collect();
    data.write_at(0, &pat).map_err(|e| e.to_string())?;
    conn.post_recv(200, ctl_mr.sge(0, CTL).unwrap())
        .map_err(|e| e.to_string())?;
    conn.connect(&CLIENT_PRIV, 4, 4)
        .map_err(|e| format!("connect: {e}"))?;
    let ev = w.cm_event(CmEventKind::Established, "established")?;
    if ev.private_data.get(..4) != Some(&SERVER_PRIV[..]) {
        return Err(format!("accept private data {:02x?}", ev.private_data));
    }
    eprintln!("client: connected, accept private data ok");

    let mut msg = Vec::with_capacity(20);
    msg.extend_from_slice(&MSG_MAGIC);
    msg.extend_from_slice(&data_mr.addr().to_be_bytes());
    msg.extend_from_slice(&data_mr.rkey().to_be_bytes());
    msg.extend_from_slice(&(DATA as u32).to_be_bytes());
    let opts = SendOptions {
        signaled: true,
        ..Default::default()
    };
    conn.post_send_inline(1, &msg, opts)
        .map_err(|e| format!("post Send: {e}"))?;
    let cs = w.completions(2, "Send buffer, receive DONE")?;
    let (c, done_c) = (cs[0], cs[1]);
    if c.opcode != WcOpcode::Send || c.wr_id != 1 {
        return Err(format!("Send completion {c:?}"));
    }
    let mut done = [0u8; 4];
    ctl.read_at(0, &mut done).map_err(|e| e.to_string())?;
    if done_c.opcode != WcOpcode::Recv || done_c.byte_len != 4 || &done != b"DONE" {
        return Err(format!("DONE: {done_c:?} {done:02x?}"));
    }
    let mut got = vec![0u8; DATA];
    data.read_at(DATA, &mut got).map_err(|e| e.to_string())?;
    if let Some(i) = (0..DATA).find(|&i| got[i] != !pattern(i)) {
        return Err(format!("RDMA WRITE data differ at byte {i}: {:#x}", got[i]));
    }
    eprintln!("client: {DATA} bytes written by the peer verified");
    conn.post_send_inline(2, b"BYE", opts)
        .map_err(|e| format!("post Send: {e}"))?;
    w.completion("Send BYE")?;
    w.cm_event(CmEventKind::Disconnected, "disconnected")?;
    // the passive side disconnected first: this only completes the local teardown
    if let Err(e) = conn.disconnect() {
        eprintln!("client: disconnect after the peer's: {e}");
    }
    eprintln!("client: disconnected");
    Ok(())
}

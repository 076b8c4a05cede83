//! iser-hostile: a misbehaving iSER initiator, for the guest test (tools/vm/guest-iser.sh).
//!
//! `iser-hostile IP:PORT [--timeout SECS]` opens one RDMA connection per case to an iSER
//! portal and checks that the target refuses or drops each one, quickly, without hanging:
//!
//! - `bad-private-data`: CM private data with reserved flag bits set: must be rejected;
//! - `short-message`: a 10-byte Send (shorter than the iSER header): disconnected;
//! - `hello`: an iSER Hello although iSERHelloRequired was never negotiated: disconnected;
//! - `bad-opcode`: an iSER header with opcode 0xf: disconnected;
//! - `length-lie`: a Login request whose BHS announces 64 KiB of data in a 76-byte Send:
//!   disconnected;
//! - `command-before-login`: a SCSI command as the first PDU: refused and disconnected;
//! - `abrupt-close`: connect, then destroy the connection without a word;
//! - `silent`: log in (a discovery session), then send pings and stop posting receives: the
//!   target's answers are retried for ever on Receiver-Not-Ready, so the target must drop
//!   the connection by its own bound (numatgtd: nothing sent completed for 15 s).
//!
//! Prints `CASE name: ok (...)` per case and `ISER_HOSTILE_OK` when all behaved, else
//! `CASE name: FAILED ...` and exits 1. Whether the target still serves is for the caller to
//! check (a normal login afterwards).

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use iser::proto::header::{FLAG_RSV, FLAG_WSV, ISER_VERSION, OP_HELLO, OP_ISCSI_CTRL};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use rdma::{
    Access, Buffer, CmEventKind, CmId, CompletionQueue, Connection, Context, EventChannel,
    MemoryRegion, ProtectionDomain, QpCaps, SendOptions,
};

type Res<T> = Result<T, String>;
/// One case: connect to the portal, misbehave, say what the target did.
type Case = fn(SocketAddr, Duration) -> Res<String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: iser-hostile IP:PORT [--timeout SECS]";
    let Some(addr) = args.get(1).and_then(|a| a.parse::<SocketAddr>().ok()) else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    let secs = match args.get(2).map(String::as_str) {
        Some("--timeout") => args.get(3).and_then(|s| s.parse().ok()).unwrap_or(20),
        _ => 20,
    };
    let timeout = Duration::from_secs(secs);
    let cases: [(&str, Case); 8] = [
        ("bad-private-data", bad_private_data),
        ("short-message", |a, t| {
            send_and_expect_drop(a, t, &[0x10; 10])
        }),
        ("hello", |a, t| send_and_expect_drop(a, t, &hello())),
        ("bad-opcode", |a, t| {
            send_and_expect_drop(a, t, &bad_opcode())
        }),
        ("length-lie", |a, t| {
            send_and_expect_drop(a, t, &length_lie())
        }),
        ("command-before-login", |a, t| {
            send_and_expect_drop(a, t, &command_before_login())
        }),
        ("abrupt-close", abrupt_close),
        ("silent", silent),
    ];
    let mut failed = 0;
    for (name, case) in cases {
        let t0 = Instant::now();
        match case(addr, timeout) {
            Ok(what) => println!("CASE {name}: ok ({what}, {:?})", t0.elapsed()),
            Err(e) => {
                println!("CASE {name}: FAILED {e}");
                failed += 1;
            }
        }
    }
    if failed == 0 {
        println!("ISER_HOSTILE_OK");
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// An iSER header of a control PDU with no buffers, then `bhs`.
fn control(bhs: &[u8; 48]) -> Vec<u8> {
    let mut m = vec![0u8; 28];
    m[0] = OP_ISCSI_CTRL << 4;
    m.extend_from_slice(bhs);
    m
}

fn hello() -> Vec<u8> {
    let mut m = vec![0u8; 28];
    m[0] = OP_HELLO << 4;
    m[1] = (ISER_VERSION << 4) | ISER_VERSION;
    m[2..4].copy_from_slice(&128u16.to_be_bytes());
    m
}

fn bad_opcode() -> Vec<u8> {
    let mut m = control(&[0u8; 48]);
    m[0] = 0xf0 | FLAG_WSV | FLAG_RSV;
    m
}

fn length_lie() -> Vec<u8> {
    let mut bhs = [0u8; 48];
    bhs[0] = 0x43; // Login request, immediate
    bhs[1] = 0x87; // T, CSG 1 (operational), NSG 3
    bhs[5..8].copy_from_slice(&[0x01, 0x00, 0x00]); // 64 KiB of data announced
    control(&bhs)
}

fn command_before_login() -> Vec<u8> {
    let mut bhs = [0u8; 48];
    bhs[0] = 0x01; // SCSI Command
    bhs[1] = 0xc1; // F, R, simple
    bhs[16..20].copy_from_slice(&1u32.to_be_bytes()); // ITT
    bhs[20..24].copy_from_slice(&512u32.to_be_bytes()); // EDTL
    bhs[32] = 0x28; // READ(10)
    bhs[40] = 1;
    control(&bhs)
}

/// A client connection: id, channel, queue pair and a registered buffer (receives in the
/// first half, the message to send in the second).
struct Client {
    conn: Connection,
    cq: Arc<CompletionQueue>,
    ch: EventChannel,
    buf: Arc<Buffer>,
    mr: MemoryRegion,
    poll: Poll,
}

const HALF: usize = 16 * 1024;

fn wait_cm(
    poll: &mut Poll,
    ch: &EventChannel,
    until: Instant,
    want: &[CmEventKind],
) -> Res<CmEventKind> {
    let mut events = Events::with_capacity(4);
    loop {
        while let Some(ev) = ch.get_event().map_err(|e| e.to_string())? {
            if want.contains(&ev.kind) {
                return Ok(ev.kind);
            }
            if !matches!(ev.kind, CmEventKind::Established) {
                return Err(format!("CM event {:?} (status {})", ev.kind, ev.status));
            }
        }
        let now = Instant::now();
        if now >= until {
            return Err(format!("no {want:?} CM event in time"));
        }
        poll.poll(&mut events, Some(until - now))
            .map_err(|e| format!("poll: {e}"))?;
    }
}

/// Connects with `private_data`; returns the client and the event that ended the connect
/// (Established or Rejected).
fn connect(addr: SocketAddr, timeout: Duration, private_data: &[u8]) -> Res<(Client, bool)> {
    let (id, ch) = CmId::create_client().map_err(|e| format!("create id: {e}"))?;
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    let mut poll = Poll::new().map_err(|e| e.to_string())?;
    poll.registry()
        .register(&mut SourceFd(&ch.as_raw_fd()), Token(0), Interest::READABLE)
        .map_err(|e| e.to_string())?;
    let until = Instant::now() + timeout;
    id.resolve_addr(addr, ms).map_err(|e| e.to_string())?;
    wait_cm(&mut poll, &ch, until, &[CmEventKind::AddrResolved])?;
    id.resolve_route(ms).map_err(|e| e.to_string())?;
    wait_cm(&mut poll, &ch, until, &[CmEventKind::RouteResolved])?;
    let ctx = Context::of_id(&id).map_err(|e| e.to_string())?;
    let pd = ProtectionDomain::new(&ctx).map_err(|e| e.to_string())?;
    let cq = Arc::new(CompletionQueue::new(&ctx, 32).map_err(|e| e.to_string())?);
    let caps = QpCaps {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let conn = Connection::create(id, &pd, &cq, caps).map_err(|(e, _)| e.to_string())?;
    let buf = Arc::new(Buffer::new(2 * HALF).map_err(|e| e.to_string())?);
    let mr =
        MemoryRegion::register(&pd, buf.clone(), Access::LOCAL_WRITE).map_err(|e| e.to_string())?;
    for i in 0..4u64 {
        let sge = mr.sge(i as usize * 4096, 4096).ok_or("sge")?;
        conn.post_recv(100 + i, sge).map_err(|e| e.to_string())?;
    }
    conn.connect(private_data, 0, 1)
        .map_err(|e| format!("connect: {e}"))?;
    let kind = wait_cm(
        &mut poll,
        &ch,
        until,
        &[CmEventKind::Established, CmEventKind::Rejected],
    );
    // wait_cm treats Established as "keep waiting" only when not wanted: here it is wanted
    let established = match kind {
        Ok(CmEventKind::Established) => true,
        Ok(_) => false,
        Err(e) => return Err(e),
    };
    Ok((
        Client {
            conn,
            cq,
            ch,
            buf,
            mr,
            poll,
        },
        established,
    ))
}

/// Linux's private data: ZBVA and Send-with-Invalidate not supported.
const LINUX_PRIVATE: [u8; 4] = [0xc0, 0, 0, 0];

fn bad_private_data(addr: SocketAddr, timeout: Duration) -> Res<String> {
    let (_c, established) = connect(addr, timeout, &[0x3f, 0, 0, 0])?;
    if established {
        return Err("connect request with reserved flag bits was accepted".into());
    }
    Ok("rejected".into())
}

fn send_and_expect_drop(addr: SocketAddr, timeout: Duration, msg: &[u8]) -> Res<String> {
    let (mut c, established) = connect(addr, timeout, &LINUX_PRIVATE)?;
    if !established {
        return Err("a well-formed connect request was rejected".into());
    }
    send(&c, 1, msg)?;
    let until = Instant::now() + Duration::from_secs(15);
    wait_cm(&mut c.poll, &c.ch, until, &[CmEventKind::Disconnected])
        .map_err(|e| format!("target did not drop the connection: {e}"))?;
    // drain what came back (a Reject or a login response may precede the drop)
    let mut got = [rdma::Completion::default(); 8];
    let n = c.cq.poll(&mut got).unwrap_or(0);
    let _ = c.conn.disconnect();
    Ok(format!("disconnected by the target, {n} completions"))
}

fn abrupt_close(addr: SocketAddr, timeout: Duration) -> Res<String> {
    let (c, established) = connect(addr, timeout, &LINUX_PRIVATE)?;
    if !established {
        return Err("a well-formed connect request was rejected".into());
    }
    drop(c);
    Ok("connection destroyed without a disconnect".into())
}

/// A Login Request straight into the operational stage and on to full feature phase: a
/// discovery session (no security, RDMAExtensions irrelevant there).
fn discovery_login() -> Vec<u8> {
    let keys = b"InitiatorName=iqn.2026-11.org.numatgt:iser-hostile\0SessionType=Discovery\0";
    let mut bhs = [0u8; 48];
    bhs[0] = 0x43; // Login request, immediate
    bhs[1] = 0x87; // T, CSG 1 (operational), NSG 3 (full feature)
    let len = keys.len() as u32;
    bhs[5..8].copy_from_slice(&len.to_be_bytes()[1..]);
    bhs[8..14].copy_from_slice(&[0x00, 0x02, 0x3d, 0x00, 0x00, 0x01]); // ISID
    bhs[16..20].copy_from_slice(&1u32.to_be_bytes()); // ITT
    bhs[24..28].copy_from_slice(&1u32.to_be_bytes()); // CmdSN
    let mut m = control(&bhs);
    m.extend_from_slice(keys);
    m
}

/// An immediate NOP-Out ping (the target must answer with a NOP-In).
fn ping(itt: u32) -> Vec<u8> {
    let mut bhs = [0u8; 48];
    bhs[0] = 0x40; // NOP-Out, immediate
    bhs[1] = 0x80; // F
    bhs[16..20].copy_from_slice(&itt.to_be_bytes());
    bhs[20..24].copy_from_slice(&u32::MAX.to_be_bytes()); // TTT: none
    bhs[24..28].copy_from_slice(&1u32.to_be_bytes()); // CmdSN (immediate: not advanced)
    bhs[28..32].copy_from_slice(&1u32.to_be_bytes()); // ExpStatSN
    control(&bhs)
}

/// Posts a signaled Send of `msg` from the second half of the client's buffer.
fn send(c: &Client, wr: u64, msg: &[u8]) -> Res<()> {
    c.buf.write_at(HALF, msg).map_err(|e| e.to_string())?;
    let sge = c.mr.sge(HALF, msg.len() as u32).ok_or("sge")?;
    let opts = SendOptions {
        signaled: true,
        ..Default::default()
    };
    c.conn
        .post_send(wr, &[sge], opts)
        .map_err(|e| format!("post Send: {e}"))
}

/// Waits for a completion of a receive (wr_id 100 and up); returns its byte count.
fn wait_receive(c: &Client, until: Instant) -> Res<usize> {
    let mut got = [rdma::Completion::default(); 8];
    loop {
        let n = c.cq.poll(&mut got).map_err(|e| e.to_string())?;
        for w in &got[..n] {
            if !w.status.is_success() {
                return Err(format!("completion {} failed: {}", w.wr_id, w.status));
            }
            if w.wr_id >= 100 {
                return Ok(w.byte_len as usize);
            }
        }
        if Instant::now() >= until {
            return Err("no login response in time".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn silent(addr: SocketAddr, timeout: Duration) -> Res<String> {
    let (mut c, established) = connect(addr, timeout, &LINUX_PRIVATE)?;
    if !established {
        return Err("a well-formed connect request was rejected".into());
    }
    send(&c, 1, &discovery_login())?;
    let len = wait_receive(&c, Instant::now() + timeout)?;
    let mut rsp = [0u8; 76];
    c.buf
        .read_at(0, &mut rsp[..len.min(76)])
        .map_err(|e| e.to_string())?;
    // the response sits in the first receive buffer: iSER header, then the BHS
    if rsp[28] & 0x3f != 0x23 || rsp[28 + 36] != 0 {
        return Err(format!(
            "login refused: opcode {:#x}, status class {}",
            rsp[28],
            rsp[28 + 36]
        ));
    }
    // three receives are left: the fourth answer and later ones find none
    for i in 0..6u32 {
        send(&c, 2 + u64::from(i), &ping(10 + i))?;
        std::thread::sleep(Duration::from_millis(50));
    }
    let t0 = Instant::now();
    let until = t0 + Duration::from_secs(45);
    wait_cm(&mut c.poll, &c.ch, until, &[CmEventKind::Disconnected])
        .map_err(|e| format!("the target kept a connection that posts no receives: {e}"))?;
    let _ = c.conn.disconnect();
    Ok(format!(
        "logged in, stopped receiving, dropped by the target after {:?}",
        t0.elapsed()
    ))
}

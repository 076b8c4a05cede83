//! Hand-built iSCSI PDUs (RFC 7143 §11) for the raw-TCP robustness tests and for holding a
//! session open: a 48-byte BHS builder, a Login Request builder, a bounded PDU reader and a
//! minimal login to full-feature phase. Deliberately independent of the `iscsi-proto` crate,
//! so a bug there cannot hide itself here.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

pub const OP_NOP_OUT: u8 = 0x00;
pub const OP_LOGIN_REQ: u8 = 0x03;
pub const OP_LOGIN_RSP: u8 = 0x23;
pub const OP_REJECT: u8 = 0x3f;
pub const BHS_LEN: usize = 48;

/// A 48-byte Basic Header Segment.
#[derive(Clone, Debug)]
pub struct Bhs(pub [u8; BHS_LEN]);

impl Bhs {
    pub fn new(opcode: u8, immediate: bool) -> Bhs {
        let mut b = [0u8; BHS_LEN];
        b[0] = (opcode & 0x3f) | if immediate { 0x40 } else { 0 };
        Bhs(b)
    }
    pub fn flags(mut self, f: u8) -> Bhs {
        self.0[1] = f;
        self
    }
    /// DataSegmentLength (24 bits).
    pub fn data_len(mut self, n: u32) -> Bhs {
        assert!(n < 1 << 24, "DataSegmentLength is 24 bits");
        self.0[5..8].copy_from_slice(&n.to_be_bytes()[1..]);
        self
    }
    pub fn itt(mut self, itt: u32) -> Bhs {
        self.0[16..20].copy_from_slice(&itt.to_be_bytes());
        self
    }
    pub fn set_u32(mut self, off: usize, v: u32) -> Bhs {
        self.0[off..off + 4].copy_from_slice(&v.to_be_bytes());
        self
    }
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Encodes `key=value\0...` text and pads to a multiple of 4.
pub fn text_data(pairs: &[(&str, &str)]) -> (Vec<u8>, u32) {
    let mut d = Vec::new();
    for (k, v) in pairs {
        d.extend_from_slice(k.as_bytes());
        d.push(b'=');
        d.extend_from_slice(v.as_bytes());
        d.push(0);
    }
    let len = u32::try_from(d.len()).expect("text fits u32");
    while d.len() % 4 != 0 {
        d.push(0);
    }
    (d, len)
}

/// Login stage numbers.
pub const STAGE_SECURITY: u8 = 0;
pub const STAGE_OPERATIONAL: u8 = 1;
pub const STAGE_FFP: u8 = 3;

/// A complete Login Request PDU (BHS + padded text).
pub fn login_request(
    isid: [u8; 6],
    itt: u32,
    cmd_sn: u32,
    csg: u8,
    nsg: u8,
    transit: bool,
    pairs: &[(&str, &str)],
) -> Vec<u8> {
    let (data, len) = text_data(pairs);
    let flags = if transit { 0x80 } else { 0 } | (csg & 3) << 2 | (nsg & 3);
    let mut bhs = Bhs::new(OP_LOGIN_REQ, true)
        .flags(flags)
        .data_len(len)
        .itt(itt)
        .set_u32(24, cmd_sn);
    bhs.0[8..14].copy_from_slice(&isid); // ISID; TSIH (14..16) = 0; CID (20..22) = 0
    let mut pdu = bhs.bytes().to_vec();
    pdu.extend_from_slice(&data);
    pdu
}

/// A PDU read back from the target.
#[derive(Clone, Debug)]
pub struct Pdu {
    pub bhs: [u8; BHS_LEN],
    pub data: Vec<u8>,
}

impl Pdu {
    pub fn opcode(&self) -> u8 {
        self.bhs[0] & 0x3f
    }
    pub fn flags(&self) -> u8 {
        self.bhs[1]
    }
    /// Login Response Status-Class / Status-Detail.
    pub fn login_status(&self) -> (u8, u8) {
        (self.bhs[36], self.bhs[37])
    }
    pub fn stat_sn(&self) -> u32 {
        u32::from_be_bytes([self.bhs[24], self.bhs[25], self.bhs[26], self.bhs[27]])
    }
    pub fn text_pairs(&self) -> Vec<String> {
        self.data
            .split(|b| *b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect()
    }
}

/// What a bounded read from the target produced.
#[derive(Debug)]
pub enum ReadOutcome {
    Pdu(Pdu),
    /// The target closed the connection (EOF or reset); `partial` bytes of a PDU came first.
    Closed {
        partial: usize,
    },
    /// Nothing complete within the deadline.
    Timeout {
        partial: usize,
    },
}

fn read_exact_by(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), ReadOutcome> {
    let mut got = 0;
    while got < buf.len() {
        let now = Instant::now();
        if now >= deadline {
            return Err(ReadOutcome::Timeout { partial: got });
        }
        s.set_read_timeout(Some(deadline - now))
            .expect("set_read_timeout");
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(ReadOutcome::Closed { partial: got }),
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(ReadOutcome::Timeout { partial: got });
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Err(ReadOutcome::Closed { partial: got }),
        }
    }
    Ok(())
}

/// Reads one PDU (no digests) within `timeout`. Data segments over 16 MiB are refused.
pub fn read_pdu(s: &mut TcpStream, timeout: Duration) -> ReadOutcome {
    let deadline = Instant::now() + timeout;
    let mut bhs = [0u8; BHS_LEN];
    if let Err(o) = read_exact_by(s, &mut bhs, deadline) {
        return o;
    }
    let ahs = usize::from(bhs[4]) * 4;
    let dsl = u32::from_be_bytes([0, bhs[5], bhs[6], bhs[7]]) as usize;
    let padded = dsl.div_ceil(4) * 4;
    let mut rest = vec![0u8; ahs + padded];
    if let Err(o) = read_exact_by(s, &mut rest, deadline) {
        return match o {
            ReadOutcome::Closed { partial } => ReadOutcome::Closed {
                partial: BHS_LEN + partial,
            },
            ReadOutcome::Timeout { partial } => ReadOutcome::Timeout {
                partial: BHS_LEN + partial,
            },
            p => p,
        };
    }
    let data = rest[ahs..ahs + dsl].to_vec();
    ReadOutcome::Pdu(Pdu { bhs, data })
}

/// Reads until the target closes the connection or `timeout` passes; returns
/// (bytes received, closed?). Bounded in time and bytes (stops after 1 MiB).
pub fn drain_until_close(s: &mut TcpStream, timeout: Duration) -> (usize, bool) {
    let deadline = Instant::now() + timeout;
    let mut total = 0;
    let mut buf = [0u8; 4096];
    while total < 1 << 20 {
        let now = Instant::now();
        if now >= deadline {
            return (total, false);
        }
        s.set_read_timeout(Some(deadline - now))
            .expect("set_read_timeout");
        match s.read(&mut buf) {
            Ok(0) => return (total, true),
            Ok(n) => total += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return (total, false);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return (total, true),
        }
    }
    (total, false)
}

/// Connects to `addr` (bounded).
pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_nodelay(true).expect("TCP_NODELAY");
    s.set_write_timeout(Some(Duration::from_secs(5)))
        .expect("set_write_timeout");
    s
}

/// An open raw session in full-feature phase.
pub struct RawSession {
    pub stream: TcpStream,
    pub login_response: Pdu,
}

/// Logs in to `target` (no authentication, operational stage straight to FFP; continues
/// with empty requests while the target answers T=0, at most 4 round trips).
pub fn login_normal(addr: SocketAddr, initiator: &str, target: &str) -> Result<RawSession, String> {
    let mut s = connect(addr);
    let isid = [0x80, 0x00, 0x4e, 0x47, 0x00, 0x01];
    let mut pairs: Vec<(&str, &str)> = vec![
        ("InitiatorName", initiator),
        ("TargetName", target),
        ("SessionType", "Normal"),
        ("HeaderDigest", "None"),
        ("DataDigest", "None"),
        ("MaxRecvDataSegmentLength", "65536"),
        ("ImmediateData", "Yes"),
        ("InitialR2T", "Yes"),
    ];
    for round in 0..4u32 {
        let req = login_request(isid, 0x1000, 1, STAGE_OPERATIONAL, STAGE_FFP, true, &pairs);
        s.write_all(&req)
            .map_err(|e| format!("send login request {round}: {e}"))?;
        match read_pdu(&mut s, Duration::from_secs(5)) {
            ReadOutcome::Pdu(p) => {
                if p.opcode() != OP_LOGIN_RSP {
                    return Err(format!(
                        "expected Login Response, got opcode {:#x}",
                        p.opcode()
                    ));
                }
                let (class, detail) = p.login_status();
                if class != 0 {
                    return Err(format!(
                        "login rejected: class {class:#x} detail {detail:#x} {:?}",
                        p.text_pairs()
                    ));
                }
                if p.flags() & 0x80 != 0 && p.flags() & 3 == STAGE_FFP {
                    return Ok(RawSession {
                        stream: s,
                        login_response: p,
                    });
                }
                pairs.clear();
            }
            other => return Err(format!("no login response: {other:?}")),
        }
    }
    Err("target never transitioned to full-feature phase in 4 round trips".into())
}

/// A logged-in raw session for SCSI commands to LUN `lun` (1 unless changed) of
/// [`crate::TEST_IQN`] (or another target, [`ScsiSession::open_target`]): each command
/// is sent as an immediate SCSI Command PDU (write data as immediate data) and its Data-In
/// and SCSI Response collected. For tests that need exact control of the I_T nexus or see
/// unit attentions that libiscsi's tools would hide.
pub struct ScsiSession {
    pub stream: TcpStream,
    cmd_sn: u32,
    itt: u32,
    /// The LUN commands go to (1 unless changed).
    pub lun: u16,
}

impl ScsiSession {
    /// Logs in as `initiator` (fixed ISID, so the same name is the same I_T nexus again) and
    /// clears the power-on unit attention with TEST UNIT READY.
    pub fn open(d: &crate::Daemon, initiator: &str) -> ScsiSession {
        Self::open_target(d, initiator, crate::TEST_IQN)
    }

    /// As [`ScsiSession::open`], to target `iqn`.
    pub fn open_target(d: &crate::Daemon, initiator: &str, iqn: &str) -> ScsiSession {
        let sess = login_normal(d.addr(), initiator, iqn)
            .unwrap_or_else(|e| panic!("login {initiator}: {e}\n{}", d.log_tail(40)));
        let b = &sess.login_response.bhs;
        let mut s = ScsiSession {
            stream: sess.stream,
            cmd_sn: u32::from_be_bytes([b[28], b[29], b[30], b[31]]),
            itt: 0,
            lun: 1,
        };
        for _ in 0..3 {
            if s.command(&[0; 6], &[], 0).0 == 0 {
                break;
            }
        }
        s
    }

    /// The CmdSN the session's next non-immediate command would carry (its immediate
    /// commands carry it without advancing it).
    pub fn cmd_sn(&self) -> u32 {
        self.cmd_sn
    }

    /// (status, sense bytes, Data-In) of one command; `read_len` is the expected Data-In
    /// length (0: none), `data_out` the write data (sent as immediate data).
    pub fn command(
        &mut self,
        cdb: &[u8],
        data_out: &[u8],
        read_len: u32,
    ) -> (u8, Vec<u8>, Vec<u8>) {
        let edtl = if data_out.is_empty() {
            read_len
        } else {
            data_out.len() as u32
        };
        self.send_command(cdb, data_out, edtl, read_len > 0);
        let mut data = Vec::new();
        loop {
            match read_pdu(&mut self.stream, Duration::from_secs(10)) {
                ReadOutcome::Pdu(p) if p.opcode() == 0x25 => {
                    data.extend_from_slice(&p.data);
                    if p.flags() & 0x01 != 0 {
                        return (p.bhs[3], Vec::new(), data);
                    }
                }
                ReadOutcome::Pdu(p) if p.opcode() == 0x21 => {
                    let sense = p.data.get(2..).map(<[u8]>::to_vec).unwrap_or_default();
                    return (p.bhs[3], sense, data);
                }
                ReadOutcome::Pdu(_) => {}
                other => panic!("no response to {cdb:02x?}: {other:?}"),
            }
        }
    }

    /// (status, sense bytes) of one command without Data-In (`data_out` as immediate data),
    /// or why there was none: the send failed or the connection ended or went quiet for
    /// `timeout` (for tests that kill the target under running commands).
    pub fn try_command(
        &mut self,
        cdb: &[u8],
        data_out: &[u8],
        timeout: Duration,
    ) -> Result<(u8, Vec<u8>), String> {
        let (itt, pdu) = self.command_pdu(cdb, data_out, data_out.len() as u32, false);
        self.stream
            .write_all(&pdu)
            .map_err(|e| format!("send: {e}"))?;
        loop {
            match read_pdu(&mut self.stream, timeout) {
                ReadOutcome::Pdu(p) if p.opcode() == 0x21 && p.bhs[16..20] == itt.to_be_bytes() => {
                    let sense = p.data.get(2..).map(<[u8]>::to_vec).unwrap_or_default();
                    return Ok((p.bhs[3], sense));
                }
                ReadOutcome::Pdu(_) => {}
                other => return Err(format!("no response: {other:?}")),
            }
        }
    }

    /// Sends one immediate SCSI Command PDU (`data_out` as immediate data, expected
    /// transfer length `edtl`, a read when `read`, else a write when `edtl > 0`) and returns
    /// its ITT without waiting for anything.
    pub fn send_command(&mut self, cdb: &[u8], data_out: &[u8], edtl: u32, read: bool) -> u32 {
        let (itt, pdu) = self.command_pdu(cdb, data_out, edtl, read);
        self.stream.write_all(&pdu).expect("send command");
        itt
    }

    /// The next ITT and the bytes of an immediate SCSI Command PDU carrying it.
    fn command_pdu(
        &mut self,
        cdb: &[u8],
        data_out: &[u8],
        edtl: u32,
        read: bool,
    ) -> (u32, Vec<u8>) {
        self.itt += 1;
        let write = !read && edtl > 0;
        let mut bhs = [0u8; BHS_LEN];
        bhs[0] = 0x40 | 0x01; // immediate SCSI Command
        bhs[1] = 0x80 | 0x01 | if read { 0x40 } else { 0 } | if write { 0x20 } else { 0 };
        let dlen = data_out.len() as u32;
        bhs[5..8].copy_from_slice(&dlen.to_be_bytes()[1..]);
        bhs[8..10].copy_from_slice(&self.lun.to_be_bytes());
        bhs[16..20].copy_from_slice(&self.itt.to_be_bytes());
        bhs[20..24].copy_from_slice(&edtl.to_be_bytes());
        bhs[24..28].copy_from_slice(&self.cmd_sn.to_be_bytes());
        bhs[32..32 + cdb.len().min(16)].copy_from_slice(&cdb[..cdb.len().min(16)]);
        let mut pdu = bhs.to_vec();
        pdu.extend_from_slice(data_out);
        while pdu.len() % 4 != 0 {
            pdu.push(0);
        }
        (self.itt, pdu)
    }

    /// Sends every write of `cdbs` (with `data[i]` as its immediate data) before waiting
    /// for any answer, so they are in the target together; (status, sense) of each, in
    /// order.
    pub fn pipeline_writes(&mut self, cdbs: &[Vec<u8>], data: &[&[u8]]) -> Vec<(u8, Vec<u8>)> {
        let itts: Vec<u32> = cdbs
            .iter()
            .zip(data)
            .map(|(cdb, d)| self.send_command(cdb, d, d.len() as u32, false))
            .collect();
        let mut answers: Vec<Option<(u8, Vec<u8>)>> = vec![None; itts.len()];
        while answers.iter().any(Option::is_none) {
            match read_pdu(&mut self.stream, Duration::from_secs(30)) {
                ReadOutcome::Pdu(p) if p.opcode() == 0x21 => {
                    let itt = u32::from_be_bytes([p.bhs[16], p.bhs[17], p.bhs[18], p.bhs[19]]);
                    if let Some(i) = itts.iter().position(|&t| t == itt) {
                        let sense = p.data.get(2..).map(<[u8]>::to_vec).unwrap_or_default();
                        answers[i] = Some((p.bhs[3], sense));
                    }
                }
                ReadOutcome::Pdu(_) => {}
                other => panic!("no response to a pipelined write: {other:?}"),
            }
        }
        answers.into_iter().flatten().collect()
    }

    /// Sends a final Data-Out PDU for task `itt` answering the R2T with `ttt`.
    pub fn send_data_out(&mut self, itt: u32, ttt: u32, offset: u32, data: &[u8]) {
        let mut bhs = [0u8; BHS_LEN];
        bhs[0] = 0x05;
        bhs[1] = 0x80;
        bhs[5..8].copy_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
        bhs[8..10].copy_from_slice(&[0, 1]);
        bhs[16..20].copy_from_slice(&itt.to_be_bytes());
        bhs[20..24].copy_from_slice(&ttt.to_be_bytes());
        bhs[40..44].copy_from_slice(&offset.to_be_bytes());
        let mut pdu = bhs.to_vec();
        pdu.extend_from_slice(data);
        while pdu.len() % 4 != 0 {
            pdu.push(0);
        }
        self.stream.write_all(&pdu).expect("send Data-Out");
    }

    /// Sends an immediate Task Management Function Request for LUN 1 and returns the
    /// Response field of its answer.
    pub fn task_management(&mut self, function: u8, referenced_itt: u32) -> u8 {
        self.itt += 1;
        let mut bhs = [0u8; BHS_LEN];
        bhs[0] = 0x40 | 0x02;
        bhs[1] = 0x80 | (function & 0x7F);
        bhs[8..10].copy_from_slice(&[0, 1]);
        bhs[16..20].copy_from_slice(&self.itt.to_be_bytes());
        bhs[20..24].copy_from_slice(&referenced_itt.to_be_bytes());
        bhs[24..28].copy_from_slice(&self.cmd_sn.to_be_bytes());
        self.stream.write_all(&bhs).expect("send TMF");
        loop {
            match read_pdu(&mut self.stream, Duration::from_secs(10)) {
                ReadOutcome::Pdu(p) if p.opcode() == 0x22 => return p.bhs[2],
                ReadOutcome::Pdu(_) => {}
                other => panic!("no task management response: {other:?}"),
            }
        }
    }

    /// Logs the session out (close the session) and returns the Response field of the
    /// Logout Response (waits up to 30 s for it).
    pub fn logout(&mut self) -> u8 {
        self.itt += 1;
        let bhs = Bhs::new(0x06, true)
            .flags(0x80)
            .itt(self.itt)
            .set_u32(24, self.cmd_sn);
        self.stream.write_all(bhs.bytes()).expect("send Logout");
        loop {
            match read_pdu(&mut self.stream, Duration::from_secs(30)) {
                ReadOutcome::Pdu(p) if p.opcode() == 0x26 => return p.bhs[2],
                ReadOutcome::Pdu(_) => {}
                other => panic!("no Logout Response: {other:?}"),
            }
        }
    }

    /// PERSISTENT RESERVE OUT with a basic 24-byte parameter list (service action `sa`,
    /// `pr_type`, RESERVATION KEY `key`, SERVICE ACTION RESERVATION KEY `sa_key`, APTPL);
    /// returns the status.
    pub fn persistent_reserve_out(
        &mut self,
        sa: u8,
        pr_type: u8,
        key: u64,
        sa_key: u64,
        aptpl: bool,
    ) -> u8 {
        let mut cdb = [0u8; 10];
        cdb[0] = 0x5F;
        cdb[1] = sa;
        cdb[2] = pr_type;
        cdb[8] = 24;
        let mut p = [0u8; 24];
        p[0..8].copy_from_slice(&key.to_be_bytes());
        p[8..16].copy_from_slice(&sa_key.to_be_bytes());
        p[20] = u8::from(aptpl);
        self.command(&cdb, &p, 0).0
    }

    /// The next PDU from the target, if one comes within `timeout`.
    pub fn next_pdu(&mut self, timeout: Duration) -> Option<Pdu> {
        match read_pdu(&mut self.stream, timeout) {
            ReadOutcome::Pdu(p) => Some(p),
            _ => None,
        }
    }
}

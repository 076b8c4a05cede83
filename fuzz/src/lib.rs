//! Shared helpers of numatgt's fuzz targets: a byte cursor over the fuzz input, a test
//! [`Directory`], raw PDU framing (any header bytes, correct lengths and digests), and a
//! connection [`Harness`] that drains and checks everything the target sends.
//!
//! The same helpers build the seed corpora (`examples/gen_seeds.rs`), so a seed and the
//! target that reads it always agree on the input format.

use iscsi_proto::pdu::{
    Bhs, Decoded, Digests, LoginRequest, Pdu, RESERVED_TAG, check_frame, frame, pad4,
};
use iscsi_proto::{
    CommandResult, ConnConfig, Connection, Directory, Event, LoginGrant, LoginReject,
    LoginRequestInfo, TargetRecord, TmfResponse,
};
use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::Arc;

/// Data-In buffer type used by the fuzzed connections.
pub type Buf = Arc<[u8]>;

/// The normal target of the test directory (default limits).
pub const TARGET: &str = "iqn.2026-11.org.numatgt:disk1";
/// A target granted small per-target limits (window of 4, NOP-In pings, 8K segments).
pub const TARGET_SMALL: &str = "iqn.2026-11.org.numatgt:small";
/// A target whose ACL refuses everyone.
pub const TARGET_ACL: &str = "iqn.2026-11.org.numatgt:acl";
/// The initiator name open-iscsi sends (any name is accepted).
pub const INITIATOR: &str = "iqn.2004-10.com.ubuntu:01:abcdef";
/// open-iscsi's ISID.
pub const ISID: [u8; 6] = [0x00, 0x02, 0x3d, 0x00, 0x00, 0x01];

/// open-iscsi's security-stage login text (keys separated by NULs).
pub fn open_iscsi_security_text(target: &str) -> Vec<u8> {
    kv(&[
        ("InitiatorName", INITIATOR),
        ("InitiatorAlias", "host"),
        ("SessionType", "Normal"),
        ("TargetName", target),
        ("AuthMethod", "None"),
    ])
}

/// open-iscsi's operational-stage login text.
pub fn open_iscsi_operational_text(header_digest: &str, data_digest: &str) -> Vec<u8> {
    kv(&open_iscsi_operational_pairs(header_digest, data_digest))
}

/// open-iscsi's operational-stage keys, in its order.
pub fn open_iscsi_operational_pairs<'a>(
    header_digest: &'a str,
    data_digest: &'a str,
) -> Vec<(&'a str, &'a str)> {
    vec![
        ("HeaderDigest", header_digest),
        ("DataDigest", data_digest),
        ("DefaultTime2Wait", "2"),
        ("DefaultTime2Retain", "0"),
        ("IFMarker", "No"),
        ("OFMarker", "No"),
        ("ErrorRecoveryLevel", "0"),
        ("InitialR2T", "No"),
        ("ImmediateData", "Yes"),
        ("MaxBurstLength", "16776192"),
        ("FirstBurstLength", "262144"),
        ("MaxOutstandingR2T", "1"),
        ("MaxConnections", "1"),
        ("DataPDUInOrder", "Yes"),
        ("DataSequenceInOrder", "Yes"),
        ("MaxRecvDataSegmentLength", "262144"),
    ]
}

/// Replaces the value of `key` in `pairs`.
pub fn set_key<'a>(pairs: &mut [(&'a str, &'a str)], key: &str, value: &'a str) {
    for p in pairs.iter_mut().filter(|p| p.0 == key) {
        p.1 = value;
    }
}

/// `key=value\0...`.
pub fn kv(pairs: &[(&str, &str)]) -> Vec<u8> {
    iscsi_proto::text::kv::encode(pairs)
}

/// A reader over the fuzz input that never fails: past the end it yields zeros / empty
/// slices, so every input decodes to *some* scenario.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    b: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Input { b }
    }
    pub fn is_empty(&self) -> bool {
        self.b.is_empty()
    }
    pub fn len(&self) -> usize {
        self.b.len()
    }
    pub fn u8(&mut self) -> u8 {
        match self.b.split_first() {
            Some((&x, rest)) => {
                self.b = rest;
                x
            }
            None => 0,
        }
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    pub fn u64(&mut self) -> u64 {
        (u64::from(self.u32()) << 32) | u64::from(self.u32())
    }
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 != 0
    }
    /// Up to `n` bytes (fewer at the end of the input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.b.len());
        let (h, t) = self.b.split_at(n);
        self.b = t;
        h
    }
    /// Exactly `N` bytes, zero-padded at the end of the input.
    pub fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        let s = self.bytes(N);
        a[..s.len()].copy_from_slice(s);
        a
    }
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.b)
    }
}

/// Frames a PDU from raw header bytes: TotalAHSLength and DataSegmentLength are set from
/// `ahs` (padded to 4 bytes) and `data`, every other header byte is kept as given; digests
/// are computed when `dg` asks for them. `ahs` is cut to 255 words and `data` to 2^24-1.
pub fn frame_raw(hdr: &[u8; 48], ahs: &[u8], data: &[u8], dg: Digests) -> Vec<u8> {
    let ahs = &ahs[..ahs.len().min(255 * 4)];
    let data = &data[..data.len().min(0xff_ffff)];
    let ahs_padded = pad4(ahs.len());
    let mut out = Vec::with_capacity(48 + ahs_padded + 8 + pad4(data.len()));
    out.extend_from_slice(hdr);
    out[4] = (ahs_padded / 4) as u8;
    let dl = (data.len() as u32).to_be_bytes();
    out[5..8].copy_from_slice(&dl[1..]);
    out.extend_from_slice(ahs);
    out.resize(48 + ahs_padded, 0);
    if dg.header {
        let c = crc32c_of(&out);
        out.extend_from_slice(&c.to_le_bytes());
    }
    if !data.is_empty() {
        out.extend_from_slice(data);
        out.resize(out.len() + pad4(data.len()) - data.len(), 0);
        if dg.data {
            out.extend_from_slice(&frame::data_digest(data).to_le_bytes());
        }
    }
    out
}

fn crc32c_of(b: &[u8]) -> u32 {
    // data_digest() of a 4-byte aligned buffer is its plain CRC32C
    debug_assert_eq!(b.len() % 4, 0);
    frame::data_digest(b)
}

/// Encodes a typed BHS (no AHS) with data into wire bytes.
pub fn encode(bhs: Bhs, data: &[u8], dg: Digests) -> Vec<u8> {
    Pdu::new(bhs, data.to_vec())
        .encode(dg)
        .expect("harness PDUs are small")
}

/// A login request header (open-iscsi's ISID, TSIH 0, ITT 0, CID 0).
pub fn login_req(csg: u8, nsg: u8, transit: bool, cmd_sn: u32, exp_stat_sn: u32) -> Bhs {
    Bhs::LoginRequest(LoginRequest {
        transit,
        cont: false,
        csg,
        nsg,
        version_max: 0,
        version_min: 0,
        isid: ISID,
        tsih: 0,
        itt: 0,
        cid: 0,
        cmd_sn,
        exp_stat_sn,
    })
}

/// The test directory: [`TARGET`] and [`TARGET_SMALL`] log in, [`TARGET_ACL`] is refused,
/// any other name is not found; discovery sessions are allowed.
#[derive(Debug, Default, Clone, Copy)]
pub struct TestDir;

impl TestDir {
    /// The per-target limits granted for [`TARGET_SMALL`].
    pub fn small_config() -> ConnConfig {
        ConnConfig {
            max_recv_data_segment_length: 8192,
            max_burst_length: 65536,
            first_burst_length: 16384,
            immediate_data: true,
            initial_r2t: false,
            max_outstanding_r2t: 2,
            max_queued_commands: 4,
            nop_interval_ms: 1000,
            nop_count: 3,
            ..ConnConfig::default()
        }
    }
}

impl Directory for TestDir {
    fn login(&self, req: &LoginRequestInfo<'_>) -> Result<LoginGrant, LoginReject> {
        match req.target_name {
            None | Some(TARGET) => Ok(LoginGrant {
                config: None,
                tsih: 0x11,
                target_portal_group_tag: 1,
                target_alias: Some("disk1".into()),
            }),
            Some(TARGET_SMALL) => Ok(LoginGrant {
                config: Some(Self::small_config()),
                tsih: 0x12,
                target_portal_group_tag: 2,
                target_alias: None,
            }),
            Some(TARGET_ACL) => Err(LoginReject::NotAuthorized),
            _ => Err(LoginReject::TargetNotFound),
        }
    }
    fn send_targets(
        &self,
        _initiator: &str,
        _peer: SocketAddr,
        _local: SocketAddr,
        scope: Option<&str>,
    ) -> Vec<TargetRecord> {
        let mut all = vec![
            TargetRecord {
                name: TARGET.into(),
                addresses: vec!["127.0.0.1:3260,1".into(), "[::1]:3260,1".into()],
            },
            TargetRecord {
                name: TARGET_SMALL.into(),
                addresses: vec!["127.0.0.1:3260,2".into()],
            },
        ];
        // enough targets for a SendTargets answer longer than one PDU
        for i in 0..64 {
            all.push(TargetRecord {
                name: format!("iqn.2026-11.org.numatgt:extra-target-with-a-long-name-{i:03}"),
                addresses: vec!["127.0.0.1:3260,1".into()],
            });
        }
        all.into_iter()
            .filter(|t| scope.is_none_or(|s| s == t.name))
            .collect()
    }
}

/// True when `NUMATGT_FUZZ_TRACE` is set: the harness then prints every event and every
/// PDU the target sends (for triaging a crash input: run the target on it).
pub fn trace() -> bool {
    static T: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *T.get_or_init(|| std::env::var_os("NUMATGT_FUZZ_TRACE").is_some())
}

/// A command delivered to the "server" and not completed yet.
#[derive(Debug, Clone, Copy)]
pub struct PendingCmd {
    pub itt: u32,
    pub read: bool,
    pub write: bool,
    pub expected_read_len: u32,
    pub expected_write_len: u32,
}

/// An R2T seen in the target's output.
#[derive(Debug, Clone, Copy)]
pub struct SeenR2t {
    pub itt: u32,
    pub ttt: u32,
    pub offset: u32,
    pub len: u32,
}

/// Largest receive buffer a connection may ever hold: its initial 64 KiB plus one maximal
/// PDU (BHS, 255 AHS words, digests, a 16 MiB data segment) plus a BHS of slack.
pub const RX_BOUND: usize = 64 * 1024 + 48 + 1020 + 8 + 0x100_0000 + 48;

/// Output one received PDU may cause at most: one answer of a full MaxRecvDataSegmentLength
/// (the harness declares at most 256 KiB) plus a few headers (R2Ts, Reject, digests).
pub const PER_PDU_TX: usize = 256 * 1024 + 4096;

/// A connection driven like the server drives it, with every output byte checked.
pub struct Harness {
    pub c: Connection<Buf>,
    pub now: u64,
    /// Digests of the target's output (switched on after the final login response).
    pub out_dg: Digests,
    /// Digests the initiator uses for what it sends.
    pub in_dg: Digests,
    /// Target output drained but not yet parsed.
    pub out: Vec<u8>,
    /// Parsed target PDUs.
    pub out_pdus: Vec<Bhs>,
    pub pending: Vec<PendingCmd>,
    pub tmfs: Vec<u32>,
    pub r2ts: Vec<SeenR2t>,
    pub ping_ttt: Option<u32>,
    pub exp_cmd_sn: u32,
    pub stat_sn: u32,
    pub logged_in: bool,
    pub closed: bool,
    /// While set, output is only written when a test step asks (`drain_tx`); otherwise
    /// the harness writes it all after every step, as a server with a fast socket would.
    pub hold_tx: bool,
    /// Output the test's own actions justify (command data, ticks, completions); each
    /// received PDU adds [`PER_PDU_TX`] on top (see [`Harness::check_bounds`]).
    pub budget: usize,
    /// MaxQueuedCommands in force (for the task bound).
    pub max_queued: usize,
}

impl Harness {
    pub fn new(cfg: ConnConfig) -> Self {
        let peer: SocketAddr = "127.0.0.1:50000".parse().expect("address");
        let local: SocketAddr = "127.0.0.1:3260".parse().expect("address");
        let max_queued = cfg.max_queued_commands.max(1) as usize;
        Harness {
            c: Connection::new(cfg, peer, local),
            now: 1000,
            out_dg: Digests::default(),
            in_dg: Digests::default(),
            out: Vec::new(),
            out_pdus: Vec::new(),
            pending: Vec::new(),
            tmfs: Vec::new(),
            r2ts: Vec::new(),
            ping_ttt: None,
            exp_cmd_sn: 0,
            stat_sn: 0,
            logged_in: false,
            closed: false,
            hold_tx: false,
            budget: 64 * 1024,
            max_queued,
        }
    }

    /// Feeds `bytes` as the socket would deliver them, at most `chunk` bytes per read.
    pub fn feed(&mut self, bytes: &[u8], chunk: usize) {
        self.feed_with(bytes, chunk, &TestDir);
    }

    /// [`Harness::feed`] with another [`Directory`] (the daemon's registry in `multi_conn`).
    pub fn feed_with(&mut self, bytes: &[u8], chunk: usize, dir: &dyn Directory) {
        let chunk = chunk.max(1);
        let mut off = 0;
        while off < bytes.len() && !self.c.is_closing() {
            let space = self.c.rx_space();
            assert!(space.len() >= 48, "rx_space must offer at least a BHS");
            assert!(
                space.len() <= RX_BOUND,
                "receive buffer grew to {} bytes",
                space.len()
            );
            let n = space.len().min(bytes.len() - off).min(chunk);
            space[..n].copy_from_slice(&bytes[off..off + n]);
            self.c.rx_commit(n, dir, self.now);
            off += n;
            self.events();
            self.check_bounds();
        }
    }

    /// Handles every event the way a server would (commands and TMFs are remembered
    /// for completion).
    pub fn events(&mut self) {
        while let Some(e) = self.c.poll_event() {
            if trace() {
                eprintln!("event: {e:?}");
            }
            match e {
                Event::LoggedIn(info) => {
                    assert!(!self.logged_in, "LoggedIn twice");
                    self.logged_in = true;
                    if info.target_name.as_deref() == Some(TARGET_SMALL) {
                        self.max_queued = TestDir::small_config().max_queued_commands as usize;
                    }
                    // the final login response was queued before the digests switched on
                    self.drain_tx(usize::MAX);
                    self.out_dg = Digests {
                        header: info.params.header_digest == iscsi_proto::Digest::Crc32c,
                        data: info.params.data_digest == iscsi_proto::Digest::Crc32c,
                    };
                    self.in_dg = self.out_dg;
                    // half the sessions (by ISID) have their logouts confirmed by the
                    // harness, as a server that shares reservations does
                    self.c.hold_logouts(info.isid[5] & 1 == 1);
                }
                Event::Command(cmd) => {
                    assert!(self.logged_in, "command before login");
                    assert!(
                        !self.pending.iter().any(|p| p.itt == cmd.itt),
                        "ITT {:#x} delivered twice",
                        cmd.itt
                    );
                    assert_eq!(
                        cmd.data_out.len() as u64 + u64::from(cmd.landed),
                        u64::from(cmd.expected_write_len),
                        "a command is delivered with all of its write data"
                    );
                    self.pending.push(PendingCmd {
                        itt: cmd.itt,
                        read: cmd.read,
                        write: cmd.write,
                        expected_read_len: cmd.expected_read_len,
                        expected_write_len: cmd.expected_write_len,
                    });
                }
                Event::TaskMgmt(t) => self.tmfs.push(t.itt),
                Event::LoggedOut | Event::Close(_) => self.closed = true,
                Event::LogoutRequested => self.c.confirm_logout(),
                Event::Resumed(_) => panic!("resumed without a move"),
                Event::LoginFailed { .. }
                | Event::Rejected(_)
                | Event::DigestError { .. }
                | Event::DataFetch { .. } => {}
            }
        }
        let _ = self.c.take_drop_reason();
        let _ = self.c.next_deadline_ms();
    }

    /// Bounded state: tasks within the session's queue limits, queued output within what
    /// the input could justify.
    pub fn check_bounds(&mut self) {
        assert!(
            self.c.tasks_in_flight() <= 2 * self.max_queued + 1,
            "{} tasks in flight with MaxQueuedCommands {}",
            self.c.tasks_in_flight(),
            self.max_queued
        );
        let queued = self.tx_queued();
        let pdus = usize::try_from(self.c.stats().pdus_rx).unwrap_or(usize::MAX);
        let budget = self.budget.saturating_add(pdus.saturating_mul(PER_PDU_TX));
        assert!(
            queued <= budget,
            "{queued} bytes queued for output after {pdus} PDUs, budget {budget}"
        );
    }

    /// Bytes waiting in the transmit queue.
    pub fn tx_queued(&self) -> usize {
        let mut v = Vec::new();
        self.c.gather_tx(&mut v, usize::MAX);
        v.iter().map(|s| s.len()).sum()
    }

    /// Drains up to `max` bytes of output, a few slices per "writev", and parses every
    /// complete PDU of it.
    pub fn drain_tx(&mut self, max: usize) {
        let mut left = max;
        while self.c.has_tx() && left > 0 {
            let mut v: Vec<IoSlice<'_>> = Vec::new();
            self.c.gather_tx(&mut v, 4);
            assert!(!v.is_empty(), "has_tx but nothing to gather");
            let mut n = 0;
            for s in &v {
                let take = s.len().min(left - n);
                self.out.extend_from_slice(&s[..take]);
                n += take;
                if n == left {
                    break;
                }
            }
            assert!(n > 0 || left == 0, "gather_tx offered only empty slices");
            self.c.tx_consumed(n);
            left -= n;
        }
        self.parse_out();
    }

    fn parse_out(&mut self) {
        let mut off = 0;
        while off < self.out.len() {
            let buf = &self.out[off..];
            let f = match check_frame(buf, 0xff_ffff, self.out_dg) {
                Ok(Decoded::Complete(f)) => f,
                Ok(Decoded::Incomplete(_)) => break,
                Err(e) => panic!("target sent a malformed PDU: {e}: {:02x?}", &buf[..48]),
            };
            let hdr = f.header(buf);
            let bhs = Bhs::decode(hdr).expect("target sent an unknown opcode");
            assert!(bhs.opcode() >= 0x20, "target sent an initiator opcode");
            self.observe(&bhs);
            self.out_pdus.push(bhs);
            off += f.total;
        }
        self.out.drain(..off);
        // keep memory flat on long runs
        if self.out_pdus.len() > 256 {
            self.out_pdus.drain(..128);
        }
    }

    fn observe(&mut self, bhs: &Bhs) {
        if trace() {
            eprintln!("target sent: {bhs:?}");
        }
        let (stat_sn, exp) = match bhs {
            Bhs::R2t(r) => {
                self.r2ts.push(SeenR2t {
                    itt: r.itt,
                    ttt: r.ttt,
                    offset: r.buffer_offset,
                    len: r.desired_len,
                });
                if self.r2ts.len() > 64 {
                    self.r2ts.remove(0);
                }
                (None, Some(r.exp_cmd_sn))
            }
            Bhs::NopIn(n) => {
                if n.itt == RESERVED_TAG {
                    self.ping_ttt = Some(n.ttt);
                }
                (Some(n.stat_sn), Some(n.exp_cmd_sn))
            }
            Bhs::ScsiResponse(r) => (Some(r.stat_sn), Some(r.exp_cmd_sn)),
            Bhs::LoginResponse(r) => (Some(r.stat_sn), Some(r.exp_cmd_sn)),
            Bhs::TextResponse(r) => (Some(r.stat_sn), Some(r.exp_cmd_sn)),
            Bhs::TaskMgmtResponse(r) => (Some(r.stat_sn), Some(r.exp_cmd_sn)),
            Bhs::LogoutResponse(r) => (Some(r.stat_sn), Some(r.exp_cmd_sn)),
            Bhs::Reject(r) => (Some(r.stat_sn), Some(r.exp_cmd_sn)),
            Bhs::DataIn(d) => (d.status.map(|_| d.stat_sn), Some(d.exp_cmd_sn)),
            _ => (None, None),
        };
        if let Some(s) = stat_sn {
            self.stat_sn = s.wrapping_add(1);
        }
        if let Some(e) = exp {
            self.exp_cmd_sn = e;
        }
    }

    /// Completes the `idx`-th pending command with a result shaped by `inp`.
    pub fn complete(&mut self, idx: usize, inp: &mut Input<'_>) {
        if self.pending.is_empty() {
            return;
        }
        let p = self.pending.remove(idx % self.pending.len());
        let status = match inp.u8() % 4 {
            0 => 0,
            1 => 2,
            2 => 0x18,
            _ => inp.u8(),
        };
        let sense_len = usize::from(inp.u8() % 40);
        let sense = inp.bytes(sense_len).to_vec();
        let want = u64::from(p.expected_read_len);
        let data_len = match inp.u8() % 5 {
            0 => None,
            1 => Some(want),
            2 => Some(want / 2),
            3 => Some(want + u64::from(inp.u16())),
            _ => Some(u64::from(inp.u16())),
        };
        // keep each completion's payload modest
        let data = data_len.map(|n| {
            let n = n.min(1 << 20) as usize;
            self.budget = self.budget.saturating_add(n * 2 + 4096);
            Buf::from(vec![0xa5u8; n])
        });
        let write_transfer_len = match inp.u8() % 4 {
            0 => None,
            1 => Some(p.expected_write_len),
            2 => Some(p.expected_write_len / 2),
            _ => Some(inp.u32()),
        };
        let _ = p.write;
        self.budget = self.budget.saturating_add(4096);
        self.c.complete_command(
            p.itt,
            CommandResult {
                status,
                sense,
                data,
                write_transfer_len,
            },
        );
        self.events();
        self.check_bounds();
    }

    /// Answers the `idx`-th pending task management request (after completing every
    /// running command when the answer may abort tasks, as the server does).
    pub fn complete_tmf(&mut self, idx: usize, code: u8) {
        if self.tmfs.is_empty() {
            return;
        }
        let itt = self.tmfs.remove(idx % self.tmfs.len());
        let resp = match code % 7 {
            0 => TmfResponse::Complete,
            1 => TmfResponse::TaskNotExist,
            2 => TmfResponse::LunNotExist,
            3 => TmfResponse::TaskStillAllegiant,
            4 => TmfResponse::NotSupported,
            5 => TmfResponse::AuthFailed,
            _ => TmfResponse::Rejected,
        };
        if matches!(resp, TmfResponse::Complete | TmfResponse::TaskNotExist) {
            // The connection forgets the affected tasks when the TMF succeeds, and the
            // initiator may then reuse their ITTs: a completion arriving after that would
            // answer the new command. So the server (event_loop.rs) answers such a TMF
            // only once every command it is running has completed; do the same.
            let mut none = Input::new(&[]);
            while !self.pending.is_empty() {
                self.complete(0, &mut none);
            }
        }
        self.budget = self.budget.saturating_add(4096);
        self.c.complete_tmf(itt, resp);
        self.events();
        self.check_bounds();
    }

    pub fn tick(&mut self, advance_ms: u64) {
        self.now = self.now.saturating_add(advance_ms);
        self.budget = self.budget.saturating_add(4096);
        self.c.on_tick(self.now);
        self.events();
        self.check_bounds();
    }

    /// Finishes a run: completes everything, drains all output, checks it.
    pub fn finish(&mut self) {
        let mut none = Input::new(&[]);
        while !self.pending.is_empty() {
            self.complete(0, &mut none);
        }
        while !self.tmfs.is_empty() {
            self.complete_tmf(0, 0);
        }
        self.drain_tx(usize::MAX);
        assert!(!self.c.has_tx());
        let _ = self.c.stats();
        let _ = self.c.session();
    }

    /// The open-iscsi login to `target`: the security stage, then the operational stage
    /// with `op_text`. Returns whether the connection reached full feature phase.
    pub fn login(&mut self, target: &str, op_text: &[u8]) -> bool {
        let sec = open_iscsi_security_text(target);
        self.feed(
            &encode(login_req(0, 1, true, 1, 0), &sec, Digests::default()),
            usize::MAX,
        );
        self.drain_tx(usize::MAX);
        let st = self.stat_sn;
        self.feed(
            &encode(login_req(1, 3, true, 1, st), op_text, Digests::default()),
            usize::MAX,
        );
        self.drain_tx(usize::MAX);
        self.logged_in
    }

    /// A discovery session login (both stages in one PDU pair).
    pub fn login_discovery(&mut self) -> bool {
        let sec = kv(&[
            ("InitiatorName", INITIATOR),
            ("SessionType", "Discovery"),
            ("AuthMethod", "None"),
        ]);
        self.feed(
            &encode(login_req(0, 1, true, 1, 0), &sec, Digests::default()),
            usize::MAX,
        );
        self.drain_tx(usize::MAX);
        let op = kv(&[
            ("HeaderDigest", "None"),
            ("DataDigest", "None"),
            ("MaxRecvDataSegmentLength", "8192"),
        ]);
        let st = self.stat_sn;
        self.feed(
            &encode(login_req(1, 3, true, 1, st), &op, Digests::default()),
            usize::MAX,
        );
        self.drain_tx(usize::MAX);
        self.logged_in
    }
}

/// Record format of the `login` target: a 48-byte header, then a big-endian u16 data
/// length and that many data bytes (cut to what is left). The target forces the opcode
/// to Login Request and recomputes the length fields.
pub fn login_record(bhs: Bhs, data: &[u8]) -> Vec<u8> {
    let hdr = bhs.encode(0, data.len() as u32);
    let mut out = hdr.to_vec();
    out.extend_from_slice(&(data.len() as u16).to_be_bytes());
    out.extend_from_slice(data);
    out
}

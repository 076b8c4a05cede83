//! The RDMA datamover mode (iSER): login with transport keys, PDU-at-a-time framing,
//! READ by Put, WRITE by Get with and without immediate data, abort of a task waiting for
//! its Get, logout and the window cap.

use super::*;

const READ_BUF: RemoteBuf = RemoteBuf {
    stag: 0x1111,
    va: 0x7000_0000,
};
const WRITE_BUF: RemoteBuf = RemoteBuf {
    stag: 0x2222,
    va: 0x8000_0000,
};
/// The buffers a READ announces.
const READS_ONLY: RemoteBufs = RemoteBufs {
    write: None,
    read: Some(READ_BUF),
};
/// The buffers a WRITE announces.
const WRITES_ONLY: RemoteBufs = RemoteBufs {
    write: Some(WRITE_BUF),
    read: None,
};

/// A stand-in for the iSER key negotiator (the real one lives in the `iser` crate).
#[derive(Default)]
struct Keys {
    rdma: bool,
}

impl TransportKeys for Keys {
    fn respond(&mut self, key: &str, value: &str) -> Result<Option<String>, String> {
        match key {
            "RDMAExtensions" => {
                self.rdma = value == "Yes";
                Ok(Some(if self.rdma { "Yes" } else { "No" }.into()))
            }
            "InitiatorRecvDataSegmentLength" | "TargetRecvDataSegmentLength" => {
                Ok(Some("8192".into()))
            }
            _ => Ok(None),
        }
    }
    fn declarations(&mut self) -> Vec<(String, String)> {
        vec![("X-Declared".into(), "1".into())]
    }
    fn finish(&mut self, discovery: bool) -> Result<RdmaLimits, String> {
        if !self.rdma && !discovery {
            return Err("RDMAExtensions=Yes missing".into());
        }
        Ok(RdmaLimits {
            max_send_data: 128,
            max_recv_data: 8192,
        })
    }
}

const ISER_OP: &str = "HeaderDigest=CRC32C,None;DataDigest=CRC32C,None;\
    RDMAExtensions=Yes;InitiatorRecvDataSegmentLength=262144;\
    TargetRecvDataSegmentLength=262144;ErrorRecoveryLevel=0;InitialR2T=No;\
    ImmediateData=Yes;MaxBurstLength=16776192;FirstBurstLength=262144;\
    MaxOutstandingR2T=1;MaxConnections=1;DataPDUInOrder=Yes;DataSequenceInOrder=Yes;\
    MaxRecvDataSegmentLength=262144;";

/// What the transport did with one item of `pop_rdma_tx`.
#[derive(Debug)]
enum Out {
    Pdu(Pdu),
    Put {
        itt: u32,
        remote: RemoteBuf,
        len: usize,
    },
    Get {
        itt: u32,
        xfer: u32,
        remote: RemoteBuf,
        offset: u32,
        len: u32,
    },
}

struct Rdma {
    i: Ini,
}

impl Rdma {
    fn new() -> Self {
        let mut i = Ini::new(ConnConfig::default());
        i.c.set_rdma_transport(Box::new(Keys::default()));
        Rdma { i }
    }

    /// One Send: the PDU without padding.
    fn send_bufs(&mut self, bhs: Bhs, data: &[u8], bufs: RemoteBufs) {
        self.send_cut(bhs, data, 48 + data.len(), bufs);
    }

    fn send(&mut self, bhs: Bhs, data: &[u8]) {
        self.send_bufs(bhs, data, RemoteBufs::default());
    }

    fn recv(&mut self) -> Vec<Out> {
        assert!(
            matches!(self.i.c.framing, framing::Framing::Rdma(_)),
            "byte stream used"
        );
        let mut out = Vec::new();
        while let Some(t) = self.i.c.pop_rdma_tx() {
            out.push(match t {
                RdmaTx::Pdu { bhs, data } => {
                    let mut b = bhs.to_vec();
                    b.extend_from_slice(&data);
                    b.resize(48 + data.len().div_ceil(4) * 4, 0);
                    match Pdu::decode(&b, 1 << 24, Digests::default()).unwrap() {
                        Decoded::Complete(p) => Out::Pdu(p),
                        Decoded::Incomplete(_) => panic!("short PDU"),
                    }
                }
                RdmaTx::Put {
                    itt,
                    remote,
                    data,
                    len,
                } => {
                    assert!(len <= data.len());
                    Out::Put { itt, remote, len }
                }
                RdmaTx::Get {
                    itt,
                    xfer,
                    remote,
                    offset,
                    len,
                } => Out::Get {
                    itt,
                    xfer,
                    remote,
                    offset,
                    len,
                },
            });
        }
        assert!(!self.i.c.has_tx());
        out
    }

    fn pdus(&mut self) -> Vec<Pdu> {
        self.recv()
            .into_iter()
            .map(|o| match o {
                Out::Pdu(p) => p,
                other => panic!("not a PDU: {other:?}"),
            })
            .collect()
    }

    fn login_with(&mut self, op: &str) -> Vec<Pdu> {
        let (b, d) = self.i.login_pdu(
            0,
            1,
            true,
            &format!(
                "InitiatorName=iqn.2004-10.com.ubuntu:01:abcdef;SessionType=Normal;\
                 TargetName={TARGET};AuthMethod=None;"
            ),
        );
        self.send(b, &d);
        let r = self.pdus();
        let Bhs::LoginResponse(lr) = r[0].bhs else {
            panic!()
        };
        self.i.exp_stat_sn = lr.stat_sn + 1;
        let (b, d) = self.i.login_pdu(1, 3, true, op);
        self.send(b, &d);
        self.pdus()
    }

    fn login(&mut self) -> String {
        let r = self.login_with(ISER_OP);
        let Bhs::LoginResponse(lr) = r[0].bhs else {
            panic!()
        };
        assert_eq!((lr.status_class, lr.status_detail), (0, 0));
        self.i.exp_stat_sn = lr.stat_sn + 1;
        assert!(matches!(self.i.c.poll_event(), Some(Event::LoggedIn(_))));
        assert!(self.i.c.is_rdma());
        String::from_utf8(r[0].data.clone()).unwrap()
    }

    /// The BHS of the next SCSI READ(10) or WRITE(10) command (takes its CmdSN).
    fn command_bhs(&mut self, itt: u32, read: bool, write: bool, edtl: u32) -> Bhs {
        let mut cdb = [0u8; 16];
        cdb[0] = if write { 0x2a } else { 0x28 };
        let h = Bhs::ScsiCommand(ScsiCommandHdr {
            immediate: false,
            final_: true,
            read,
            write,
            attr: 1,
            lun: fields::lun_encode(1),
            itt,
            edtl,
            cmd_sn: self.i.cmd_sn,
            exp_stat_sn: self.i.exp_stat_sn,
            cdb,
        });
        self.i.cmd_sn += 1;
        h
    }

    fn scsi(&mut self, itt: u32, read: bool, write: bool, edtl: u32, imm: &[u8], bufs: RemoteBufs) {
        let h = self.command_bhs(itt, read, write, edtl);
        self.send_bufs(h, imm, bufs);
    }

    /// An immediate NOP-Out (ITT 9) asking for an echo.
    fn immediate_nop(&self) -> Bhs {
        Bhs::NopOut(NopOut {
            immediate: true,
            lun: 0,
            itt: 9,
            ttt: RESERVED_TAG,
            cmd_sn: self.i.cmd_sn,
            exp_stat_sn: 0,
        })
    }

    /// Command `bhs` with `data` as its data segment, and a Send of its first `send` bytes.
    fn send_cut(&mut self, bhs: Bhs, data: &[u8], send: usize, bufs: RemoteBufs) {
        let b = Pdu {
            bhs,
            ahs: vec![],
            data: data.to_vec(),
        }
        .encode(Digests::default())
        .unwrap();
        self.i.c.rx_pdu(&b[..send], bufs, &Dir, self.i.now);
    }

    fn write(&mut self, itt: u32, edtl: u32, imm: &[u8]) {
        let bufs = RemoteBufs {
            write: Some(WRITE_BUF),
            read: None,
        };
        self.scsi(itt, false, true, edtl, imm, bufs);
    }
}

/// A READ's good result with `data`.
fn good_read(data: Vec<u8>) -> CommandResult<Buf> {
    CommandResult {
        status: 0,
        sense: vec![],
        data: Some(Buf::from(data)),
        write_transfer_len: None,
    }
}

fn response(p: &Pdu) -> ScsiResponse {
    match p.bhs {
        Bhs::ScsiResponse(r) => r,
        ref b => panic!("not a SCSI Response: {b:?}"),
    }
}

#[test]
fn login_answers_transport_keys_and_no_digests() {
    let mut r = Rdma::new();
    let text = r.login();
    for k in [
        "RDMAExtensions=Yes\0",
        "InitiatorRecvDataSegmentLength=8192\0",
        "TargetRecvDataSegmentLength=8192\0",
        "HeaderDigest=None\0",
        "DataDigest=None\0",
        "X-Declared=1\0",
    ] {
        assert!(text.contains(k), "{k} missing from {text:?}");
    }
    assert_eq!(
        r.i.c.rdma_limits(),
        Some(RdmaLimits {
            max_send_data: 128,
            max_recv_data: 8192
        })
    );
    // TCP connections are untouched
    let mut t = Ini::new(ConnConfig::default());
    t.login();
    assert!(!t.c.is_rdma() && t.c.pop_rdma_tx().is_none());
}

#[test]
fn login_without_rdma_extensions_fails() {
    let mut r = Rdma::new();
    let p = r.login_with("HeaderDigest=None;DataDigest=None;");
    let Bhs::LoginResponse(lr) = p[0].bhs else {
        panic!()
    };
    assert_eq!(lr.status_class, 2);
    assert!(r.i.c.is_closing() && !r.i.c.is_rdma());
}

#[test]
fn read_puts_data_then_sends_only_the_response() {
    let mut r = Rdma::new();
    r.login();
    let bufs = READS_ONLY;
    r.scsi(1, true, false, 8192, &[], bufs);
    let cmd = cmd_events(r.i.events());
    assert_eq!((cmd[0].itt, cmd[0].expected_read_len), (1, 8192));
    r.i.c.complete_command(1, good_read(vec![7u8; 8192]));
    let out = r.recv();
    assert_eq!(out.len(), 2, "{out:?}");
    assert!(matches!(
        out[0],
        Out::Put {
            itt: 1,
            remote: READ_BUF,
            len: 8192
        }
    ));
    let Out::Pdu(p) = &out[1] else { panic!() };
    let s = response(p);
    assert_eq!((s.status, s.itt, s.exp_data_sn, s.residual), (0, 1, 0, 0));
    assert!(!s.underflow && p.data.is_empty());
    // a short READ: underflow, Put of what there is; sense cut to the 128-byte buffer
    r.scsi(2, true, false, 4096, &[], bufs);
    let _ = r.i.events();
    r.i.c.complete_command(
        2,
        CommandResult {
            status: 2,
            sense: vec![0x70; 252],
            data: Some(Buf::from(vec![1u8; 1024])),
            write_transfer_len: None,
        },
    );
    let out = r.recv();
    assert!(matches!(
        out[0],
        Out::Put {
            itt: 2,
            len: 1024,
            ..
        }
    ));
    let Out::Pdu(p) = &out[1] else { panic!() };
    let s = response(p);
    assert!(s.underflow && s.residual == 3072 && s.status == 2);
    assert_eq!(p.data.len(), 128);
    assert_eq!(&p.data[..2], &126u16.to_be_bytes());
    // a READ announcing no read buffer is rejected
    r.scsi(3, true, false, 512, &[], RemoteBufs::default());
    let p = r.pdus();
    assert!(matches!(p[0].bhs, Bhs::Reject(_)));
    assert!(!r.i.c.is_closing());
}

#[test]
fn write_with_only_immediate_data_needs_no_get() {
    let mut r = Rdma::new();
    r.login();
    let data: Vec<u8> = (0..1001u32).map(|i| i as u8).collect();
    r.write(1, 1001, &data);
    assert!(r.recv().is_empty());
    let cmd = cmd_events(r.i.events());
    assert_eq!(cmd[0].data_out, data);
    r.i.c.complete_command(1, CommandResult::good());
    let p = r.pdus();
    assert_eq!(response(&p[0]).status, 0);
}

#[test]
fn write_with_immediate_data_gets_the_rest() {
    let mut r = Rdma::new();
    r.login();
    let data: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
    r.write(1, 65536, &data[..1001]);
    let out = r.recv();
    let Out::Get {
        itt: 1,
        xfer,
        remote: WRITE_BUF,
        offset: 1001,
        len,
    } = out[0]
    else {
        panic!("{out:?}")
    };
    assert_eq!(len, 65536 - 1001);
    assert!(r.i.events().is_empty(), "delivered before its data");
    // a wrong transfer tag or too much data is refused
    assert!(!r.i.c.data_arrived(1, xfer.wrapping_add(1), &data[1001..]));
    assert!(!r.i.c.data_arrived(1, xfer, &[0; 65536]));
    // the data may arrive in parts
    assert!(r.i.c.data_arrived(1, xfer, &data[1001..30000]));
    assert!(r.i.events().is_empty());
    assert!(r.i.c.data_arrived(1, xfer, &data[30000..]));
    let cmd = cmd_events(r.i.events());
    assert_eq!(cmd[0].data_out, data);
    assert!(!r.i.c.data_arrived(1, xfer, &[0]));
    r.i.c.complete_command(1, CommandResult::good());
    let p = r.pdus();
    let s = response(&p[0]);
    assert_eq!((s.status, s.exp_data_sn), (0, 0));
}

#[test]
fn write_data_may_land_where_the_server_asked() {
    let mut r = Rdma::new();
    r.login();
    let data: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
    r.write(1, 65536, &data[..8192]);
    let out = r.recv();
    let Out::Get {
        itt: 1,
        xfer,
        offset: 8192,
        ..
    } = out[0]
    else {
        panic!("{out:?}")
    };
    // the fetch is announced, and the command can be looked at with what is in so far
    assert_eq!(r.i.fetches(), vec![1]);
    let cmd = r.i.c.fetching_write(1).expect("fetching");
    assert_eq!((cmd.itt, cmd.expected_write_len, cmd.landed), (1, 65536, 0));
    assert_eq!(cmd.data_out, data[..8192]);
    assert!(r.i.c.fetching_write(2).is_none());
    // landed in parts, never more than asked, never under a wrong tag
    assert!(!r.i.c.data_landed(1, xfer.wrapping_add(1), 1000));
    assert!(!r.i.c.data_landed(1, xfer, 65536));
    assert!(r.i.c.data_landed(1, xfer, 20000));
    assert!(r.i.events().is_empty());
    // a fetch is all landed or all handed over
    assert!(!r.i.c.data_arrived(1, xfer, &data[28192..30000]));
    assert!(r.i.c.data_landed(1, xfer, 65536 - 28192));
    let cmd = cmd_events(r.i.events());
    assert_eq!(cmd[0].data_out, data[..8192]);
    assert_eq!(cmd[0].landed, 65536 - 8192);
    assert!(r.i.c.fetching_write(1).is_none());
    assert!(!r.i.c.data_landed(1, xfer, 1));
    r.i.c.complete_command(1, CommandResult::good());
    assert_eq!(response(&r.pdus()[0]).status, 0);

    // handed over first: landing is refused for the rest of that fetch
    r.write(2, 16384, &[]);
    let Out::Get { xfer, .. } = r.recv()[0] else {
        panic!()
    };
    assert!(r.i.c.data_arrived(2, xfer, &[1; 4096]));
    assert!(!r.i.c.data_landed(2, xfer, 4096));
    assert!(r.i.c.data_arrived(2, xfer, &[1; 12288]));
    let cmd = cmd_events(r.i.events());
    assert_eq!((cmd[0].data_out.len(), cmd[0].landed), (16384, 0));
}

#[test]
fn write_without_immediate_data_gets_it_all() {
    let mut r = Rdma::new();
    r.login();
    r.write(4, 4096, &[]);
    let out = r.recv();
    let Out::Get {
        itt: 4,
        xfer,
        offset: 0,
        len: 4096,
        ..
    } = out[0]
    else {
        panic!("{out:?}")
    };
    assert!(r.i.c.data_arrived(4, xfer, &[9; 4096]));
    let cmd = cmd_events(r.i.events());
    assert_eq!(cmd[0].data_out, vec![9; 4096]);
    // a solicited Data-Out is a protocol error in RDMA mode (no R2T was sent)
    r.write(5, 4096, &[]);
    let _ = r.recv();
    r.i.data_out_rdma(5, 1);
    assert!(r.i.c.is_closing());
}

impl Ini {
    fn data_out_rdma(&mut self, itt: u32, ttt: u32) {
        let h = Bhs::DataOut(DataOut {
            final_: true,
            lun: fields::lun_encode(1),
            itt,
            ttt,
            exp_stat_sn: self.exp_stat_sn,
            data_sn: 0,
            buffer_offset: 0,
        });
        let b = Pdu {
            bhs: h,
            ahs: vec![],
            data: vec![0; 512],
        }
        .encode(Digests::default())
        .unwrap();
        self.c.rx_pdu(&b, RemoteBufs::default(), &Dir, self.now);
    }
}

#[test]
fn abort_of_a_task_waiting_for_its_get() {
    let mut r = Rdma::new();
    r.login();
    r.write(5, 8192, &[]);
    let out = r.recv();
    let Out::Get { xfer, .. } = out[0] else {
        panic!()
    };
    let t = tmf_pdu(&r.i, 1, 1, 6, 5, r.i.cmd_sn - 1);
    r.send(t, &[]);
    assert_eq!(r.i.c.tasks_in_flight(), 0);
    assert!(matches!(r.i.events()[..], [Event::TaskMgmt(_)]));
    r.i.c.complete_tmf(6, TmfResponse::TaskNotExist);
    let p = r.pdus();
    assert_eq!(tmf_response(&p), Some((6, 0)));
    // the RDMA READ completing late is refused (the transport drops its buffer), even
    // when the initiator already reuses the ITT
    r.write(5, 8192, &[]);
    let out = r.recv();
    let Out::Get { xfer: xfer2, .. } = out[0] else {
        panic!()
    };
    assert_ne!(xfer, xfer2);
    assert!(!r.i.c.data_arrived(5, xfer, &[0; 8192]));
    assert!(r.i.events().is_empty());
    assert!(r.i.c.data_arrived(5, xfer2, &[1; 8192]));
    assert_eq!(cmd_events(r.i.events())[0].data_out, vec![1; 8192]);
    assert!(!r.i.c.is_closing());
}

#[test]
fn logout_nop_and_window_cap() {
    let mut r = Rdma::new();
    r.i.c.set_window_limit(32);
    r.login();
    // NOP-Out with data: the echo fits the initiator's 128-byte buffer
    r.send(
        Bhs::NopOut(NopOut {
            immediate: true,
            lun: 0,
            itt: 9,
            ttt: RESERVED_TAG,
            cmd_sn: r.i.cmd_sn,
            exp_stat_sn: r.i.exp_stat_sn,
        }),
        &[5; 512],
    );
    let p = r.pdus();
    let Bhs::NopIn(n) = p[0].bhs else { panic!() };
    assert_eq!(p[0].data.len(), 128);
    assert_eq!(n.max_cmd_sn.wrapping_sub(n.exp_cmd_sn) + 1, 32);
    r.i.c.set_window_limit(100);
    r.send(
        Bhs::LogoutRequest(LogoutRequest {
            immediate: true,
            reason: 0,
            itt: 2,
            cid: 0,
            cmd_sn: r.i.cmd_sn,
            exp_stat_sn: r.i.exp_stat_sn,
        }),
        &[],
    );
    let p = r.pdus();
    let Bhs::LogoutResponse(l) = p[0].bhs else {
        panic!()
    };
    assert_eq!((l.itt, l.response), (2, 0));
    assert_eq!(l.max_cmd_sn.wrapping_sub(l.exp_cmd_sn) + 1, 100);
    assert!(matches!(r.i.c.poll_event(), Some(Event::LoggedOut)));
}

#[test]
fn send_length_must_match_the_pdu() {
    let mut r = Rdma::new();
    r.login();
    let b = Pdu {
        bhs: r.immediate_nop(),
        ahs: vec![],
        data: vec![1; 100],
    }
    .encode(Digests::default())
    .unwrap();
    // with padding is fine, without too
    r.i.c.rx_pdu(&b, RemoteBufs::default(), &Dir, 0);
    r.i.c.rx_pdu(&b[..148], RemoteBufs::default(), &Dir, 0);
    assert_eq!(r.pdus().len(), 2);
    r.i.c.rx_pdu(&b[..120], RemoteBufs::default(), &Dir, 0);
    assert!(matches!(
        r.i.events().last(),
        Some(Event::Close(ConnError::Protocol(
            ProtocolError::PduSizeMismatch { .. }
        )))
    ));
}

impl Rdma {
    /// A WRITE whose BHS announces `imm` bytes of immediate data while the Send carries its
    /// BHS alone (libiscsi 1.19's iSER initiator), with `bufs` announced.
    fn write_header_only(&mut self, itt: u32, edtl: u32, imm: u32, bufs: RemoteBufs) {
        let h = self.command_bhs(itt, false, true, edtl);
        // the Send ends after the BHS: the data bytes behind it are stale, never data
        self.send_cut(h, &vec![0xee; imm as usize], 48, bufs);
    }
}

#[test]
fn immediate_data_left_in_the_write_buffer_is_fetched_from_its_start() {
    let mut r = Rdma::new();
    r.login();
    let bufs = WRITES_ONLY;
    // all of the data announced as immediate (a 512-byte WRITE), or part of it with the
    // rest solicited: either way one Get of everything from the write buffer's byte 0
    for (itt, edtl, imm) in [(1, 512, 512), (2, 65536, 8192)] {
        r.write_header_only(itt, edtl, imm, bufs);
        let out = r.recv();
        let Out::Get {
            itt: got_itt,
            xfer,
            remote: WRITE_BUF,
            offset: 0,
            len,
        } = out[0]
        else {
            panic!("{out:?}")
        };
        assert_eq!((got_itt, len), (itt, edtl));
        assert!(r.i.events().is_empty(), "delivered before its data");
        let data: Vec<u8> = (0..edtl).map(|i| (i % 13) as u8).collect();
        assert!(r.i.c.data_arrived(itt, xfer, &data));
        assert_eq!(cmd_events(r.i.events())[0].data_out, data);
        r.i.c.complete_command(itt, CommandResult::good());
        assert_eq!(response(&r.pdus()[0]).status, 0);
    }
    assert_eq!(r.i.c.stats().immediate_data_fetched, 2);
    assert!(!r.i.c.is_closing());
}

#[test]
fn a_short_send_without_a_write_buffer_still_closes() {
    // no write buffer announced: nowhere to fetch from, and the receive buffer's bytes are
    // not the data
    let mut r = Rdma::new();
    r.login();
    let read_only = READS_ONLY;
    r.write_header_only(1, 512, 512, read_only);
    assert!(matches!(
        r.i.events().last(),
        Some(Event::Close(ConnError::Protocol(
            ProtocolError::PduSizeMismatch {
                got: 48,
                expected: 560
            }
        )))
    ));
    assert_eq!(r.i.c.stats().immediate_data_fetched, 0);
}

#[test]
fn a_send_with_part_of_the_immediate_data_still_closes() {
    let mut r = Rdma::new();
    r.login();
    let bufs = WRITES_ONLY;
    let h = r.command_bhs(1, false, true, 4096);
    r.send_cut(h, &[1; 1024], 48 + 100, bufs);
    assert!(matches!(
        r.i.events().last(),
        Some(Event::Close(ConnError::Protocol(
            ProtocolError::PduSizeMismatch { .. }
        )))
    ));
}

#[test]
fn only_a_write_command_may_leave_its_data_behind() {
    // a NOP-Out (or a READ) whose Send lacks its data segment is a protocol error, write
    // buffer or not
    let mut r = Rdma::new();
    r.login();
    let bufs = RemoteBufs {
        write: Some(WRITE_BUF),
        read: Some(READ_BUF),
    };
    let nop = r.immediate_nop();
    r.send_cut(nop, &[1; 100], 48, bufs);
    assert!(r.i.c.is_closing());
}

#[test]
fn commands_beyond_the_window_are_dropped_and_the_connection_goes_on() {
    // libiscsi 1.19 over iSER ignores MaxCmdSN; RFC 7143 §3.2.2.1 has the target ignore
    // what lies beyond it, silently, and the connection must serve what follows
    let mut r = Rdma::new();
    r.i.c.set_window_limit(2);
    r.login();
    let bufs = READS_ONLY;
    r.scsi(1, true, false, 512, &[], bufs);
    // CmdSN well past MaxCmdSN (the window holds 2 from ExpCmdSN)
    r.i.cmd_sn += 4;
    r.scsi(2, true, false, 512, &[], bufs);
    r.i.cmd_sn -= 5;
    let cmd = cmd_events(r.i.events());
    assert_eq!(cmd.iter().map(|c| c.itt).collect::<Vec<_>>(), vec![1]);
    assert_eq!(r.i.c.stats().dropped_out_of_window, 1);
    assert!(!r.i.c.is_closing());
    r.i.c.complete_command(1, good_read(vec![1u8; 512]));
    assert_eq!(r.recv().len(), 2);
    // the next command in the window is served; nothing of the dropped one is left
    r.scsi(3, true, false, 512, &[], bufs);
    let cmd = cmd_events(r.i.events());
    assert_eq!(cmd.iter().map(|c| c.itt).collect::<Vec<_>>(), vec![3]);
    assert_eq!(r.i.c.tasks_in_flight(), 1);
}

//! Connection-level scenarios: an open-iscsi style login, READ with Data-In splitting and
//! residuals, WRITE with immediate data + R2T + Data-Out, CmdSN ordering, malformed PDUs,
//! NOP pings and timeout, text/SendTargets, task management and logout.

use super::*;
use crate::pdu::*;
use std::sync::Arc;

type Buf = Arc<[u8]>;

struct Dir;
impl Directory for Dir {
    fn login(&self, req: &LoginRequestInfo<'_>) -> Result<LoginGrant, LoginReject> {
        match req.target_name {
            None | Some("iqn.2026-11.org.numatgt:disk1" | "iqn.2026-11.org.numatgt:chap") => {
                Ok(LoginGrant {
                    config: None,
                    tsih: 0x11,
                    target_portal_group_tag: 1,
                    target_alias: Some("disk1".into()),
                })
            }
            Some("iqn.2026-11.org.numatgt:acl") => Err(LoginReject::NotAuthorized),
            Some("iqn.2026-11.org.numatgt:small") => Ok(LoginGrant {
                config: Some(ConnConfig {
                    max_recv_data_segment_length: 8192,
                    max_burst_length: 65536,
                    first_burst_length: 16384,
                    immediate_data: false,
                    initial_r2t: true,
                    max_queued_commands: 4,
                    ..ConnConfig::default()
                }),
                tsih: 0x12,
                target_portal_group_tag: 1,
                target_alias: None,
            }),
            _ => Err(LoginReject::TargetNotFound),
        }
    }
    fn send_targets(
        &self,
        _i: &str,
        _p: SocketAddr,
        _l: SocketAddr,
        scope: Option<&str>,
    ) -> Vec<TargetRecord> {
        let all = vec![
            TargetRecord {
                name: "iqn.2026-11.org.numatgt:disk1".into(),
                addresses: vec!["127.0.0.1:3260,1".into()],
            },
            TargetRecord {
                name: "iqn.2026-11.org.numatgt:disk2".into(),
                addresses: vec!["127.0.0.1:3260,1".into(), "[::1]:3260,1".into()],
            },
        ];
        all.into_iter()
            .filter(|t| scope.is_none_or(|s| s == t.name))
            .collect()
    }
    fn auth_policy(&self, req: &LoginRequestInfo<'_>) -> crate::AuthPolicy {
        match req.target_name {
            Some("iqn.2026-11.org.numatgt:chap") => {
                crate::AuthPolicy::Chap(crate::ChapPolicy::new(
                    vec![crate::ChapCredential::new("alice", "alice-secret-1234")],
                    None,
                ))
            }
            _ => crate::AuthPolicy::None,
        }
    }
}

const TARGET: &str = "iqn.2026-11.org.numatgt:disk1";
const ISID: [u8; 6] = [0x00, 0x02, 0x3d, 0x00, 0x00, 0x01];

struct Ini {
    c: Connection<Buf>,
    dg: Digests,
    cmd_sn: u32,
    exp_stat_sn: u32,
    now: u64,
}

impl Ini {
    fn new(cfg: ConnConfig) -> Self {
        let a: SocketAddr = "127.0.0.1:3260".parse().unwrap();
        let p: SocketAddr = "127.0.0.1:50000".parse().unwrap();
        Ini {
            c: Connection::new(cfg, p, a),
            dg: Digests::default(),
            cmd_sn: 1,
            exp_stat_sn: 0,
            now: 1000,
        }
    }

    /// Feeds bytes in chunks of at most `chunk`.
    fn feed_chunked(&mut self, bytes: &[u8], chunk: usize) {
        let mut off = 0;
        while off < bytes.len() && !self.c.is_closing() {
            let space = self.c.rx_space();
            assert!(space.len() >= 48 || space.len() >= bytes.len() - off);
            let n = space.len().min(bytes.len() - off).min(chunk);
            space[..n].copy_from_slice(&bytes[off..off + n]);
            self.c.rx_commit(n, &Dir, self.now);
            off += n;
        }
    }
    fn feed(&mut self, bytes: &[u8]) {
        self.feed_chunked(bytes, usize::MAX);
    }
    fn send(&mut self, bhs: Bhs, ahs: Vec<Ahs>, data: &[u8]) {
        let b = Pdu {
            bhs,
            ahs,
            data: data.to_vec(),
        }
        .encode(self.dg)
        .unwrap();
        self.feed(&b);
    }
    /// Drains transmitted bytes (in small writev steps) and decodes them.
    fn recv(&mut self) -> Vec<Pdu> {
        let mut bytes = Vec::new();
        while self.c.has_tx() {
            let mut v = Vec::new();
            self.c.gather_tx(&mut v, 3);
            let mut n = 0;
            for s in &v {
                bytes.extend_from_slice(s);
                n += s.len();
            }
            self.c.tx_consumed(n);
        }
        let mut out = Vec::new();
        let mut off = 0;
        while off < bytes.len() {
            let f = match check_frame(&bytes[off..], 1 << 24, self.dg).unwrap() {
                Decoded::Complete(f) => f,
                Decoded::Incomplete(_) => panic!("truncated tx"),
            };
            let p = match Pdu::decode(&bytes[off..], 1 << 24, self.dg).unwrap() {
                Decoded::Complete(p) => p,
                Decoded::Incomplete(_) => unreachable!(),
            };
            off += f.total;
            out.push(p);
        }
        out
    }
    /// The connection's events, without the RDMA fetch notices ([`Ini::fetches`] has them).
    /// An immediate Logout Request (ITT 2) with `reason`.
    fn logout(&mut self, reason: u8) {
        self.send(
            Bhs::LogoutRequest(LogoutRequest {
                immediate: true,
                reason,
                itt: 2,
                cid: 0,
                cmd_sn: self.cmd_sn,
                exp_stat_sn: 0,
            }),
            vec![],
            &[],
        );
    }

    /// Task `itt`, a 512-byte READ, ends GOOD.
    fn read_done(&mut self, itt: u32) {
        self.c.complete_command(
            itt,
            CommandResult {
                status: 0,
                sense: vec![],
                data: Some(Arc::from(vec![0; 512])),
                write_transfer_len: None,
            },
        );
    }

    fn events(&mut self) -> Vec<Event> {
        self.all_events()
            .into_iter()
            .filter(|e| !matches!(e, Event::DataFetch { .. }))
            .collect()
    }
    fn all_events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.c.poll_event()).collect()
    }
    /// The ITTs of the RDMA fetch notices among the connection's events (the other events
    /// are dropped).
    fn fetches(&mut self) -> Vec<u32> {
        self.all_events()
            .into_iter()
            .filter_map(|e| match e {
                Event::DataFetch { itt } => Some(itt),
                _ => None,
            })
            .collect()
    }
    fn login_pdu(&self, csg: u8, nsg: u8, t: bool, text: &str) -> (Bhs, Vec<u8>) {
        (
            Bhs::LoginRequest(LoginRequest {
                transit: t,
                cont: false,
                csg,
                nsg,
                version_max: 0,
                version_min: 0,
                isid: ISID,
                tsih: 0,
                itt: 0,
                cid: 0,
                cmd_sn: self.cmd_sn,
                exp_stat_sn: self.exp_stat_sn,
            }),
            text.replace(';', "\0").into_bytes(),
        )
    }

    /// The login open-iscsi performs: security stage then operational stage.
    fn login_with(&mut self, op_text: &str) -> SessionInfo {
        let (b, d) = self.login_pdu(
            0,
            1,
            true,
            &format!(
                "InitiatorName=iqn.2004-10.com.ubuntu:01:abcdef;InitiatorAlias=host;\
                 SessionType=Normal;TargetName={TARGET};AuthMethod=None;"
            ),
        );
        self.send(b, vec![], &d);
        let r = self.recv();
        assert_eq!(r.len(), 1);
        let Bhs::LoginResponse(lr) = r[0].bhs else {
            panic!()
        };
        assert_eq!((lr.status_class, lr.status_detail), (0, 0));
        assert!(lr.transit && lr.csg == 0 && lr.nsg == 1);
        self.exp_stat_sn = lr.stat_sn + 1;
        let txt = String::from_utf8(r[0].data.clone()).unwrap();
        assert!(txt.contains("AuthMethod=None\0"), "{txt}");
        assert!(txt.contains("TargetPortalGroupTag=1\0"));
        assert!(txt.contains("TargetAlias=disk1\0"));
        let (b, d) = self.login_pdu(1, 3, true, op_text);
        self.send(b, vec![], &d);
        let r = self.recv();
        let Bhs::LoginResponse(lr) = r[0].bhs else {
            panic!()
        };
        assert_eq!((lr.status_class, lr.status_detail), (0, 0), "{:?}", r[0]);
        assert!(lr.transit && lr.nsg == 3);
        assert_eq!(lr.tsih, 0x11);
        assert_eq!(lr.exp_cmd_sn, self.cmd_sn);
        self.exp_stat_sn = lr.stat_sn + 1;
        let ev = self.events();
        let Some(Event::LoggedIn(info)) = ev.into_iter().next() else {
            panic!()
        };
        self.dg = Digests {
            header: info.params.header_digest == crate::Digest::Crc32c,
            data: info.params.data_digest == crate::Digest::Crc32c,
        };
        info
    }

    fn login(&mut self) -> SessionInfo {
        self.login_with(OPEN_ISCSI_OP)
    }

    #[allow(clippy::too_many_arguments)]
    fn scsi(
        &mut self,
        itt: u32,
        read: bool,
        write: bool,
        edtl: u32,
        cdb0: u8,
        imm: &[u8],
        final_: bool,
    ) {
        let mut cdb = [0u8; 16];
        cdb[0] = cdb0;
        let h = Bhs::ScsiCommand(ScsiCommandHdr {
            immediate: false,
            final_,
            read,
            write,
            attr: 1,
            lun: fields::lun_encode(1),
            itt,
            edtl,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            cdb,
        });
        self.cmd_sn += 1;
        self.send(h, vec![], imm);
    }

    fn data_out(&mut self, itt: u32, ttt: u32, data_sn: u32, off: u32, data: &[u8], final_: bool) {
        let h = Bhs::DataOut(DataOut {
            final_,
            lun: fields::lun_encode(1),
            itt,
            ttt,
            exp_stat_sn: self.exp_stat_sn,
            data_sn,
            buffer_offset: off,
        });
        self.send(h, vec![], data);
    }
}

const OPEN_ISCSI_OP: &str = "HeaderDigest=None,CRC32C;DataDigest=None;\
    DefaultTime2Wait=2;DefaultTime2Retain=0;IFMarker=No;OFMarker=No;ErrorRecoveryLevel=0;\
    InitialR2T=No;ImmediateData=Yes;MaxBurstLength=16776192;FirstBurstLength=262144;\
    MaxOutstandingR2T=1;MaxConnections=1;DataPDUInOrder=Yes;DataSequenceInOrder=Yes;\
    MaxRecvDataSegmentLength=262144;";

fn cmd_events(ev: Vec<Event>) -> Vec<ScsiCommand> {
    ev.into_iter()
        .map(|e| match e {
            Event::Command(c) => c,
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

#[test]
fn open_iscsi_login_negotiates() {
    let mut i = Ini::new(ConnConfig::default());
    let (b, d) = i.login_pdu(
        0,
        1,
        true,
        &format!("InitiatorName=iqn.x;SessionType=Normal;TargetName={TARGET};AuthMethod=None;"),
    );
    i.send(b, vec![], &d);
    let _ = i.recv();
    let (b, d) = i.login_pdu(1, 3, true, OPEN_ISCSI_OP);
    i.send(b, vec![], &d);
    let r = i.recv();
    let txt = String::from_utf8(r[0].data.clone()).unwrap();
    for want in [
        "HeaderDigest=None\0",
        "DataDigest=None\0",
        "InitialR2T=Yes\0",
        "ImmediateData=Yes\0",
        "MaxBurstLength=262144\0",
        "FirstBurstLength=65536\0",
        "DefaultTime2Retain=0\0",
        "ErrorRecoveryLevel=0\0",
        "MaxRecvDataSegmentLength=262144\0",
        "IFMarker=No\0",
    ] {
        assert!(txt.contains(want), "{want} missing in {txt}");
    }
    let Some(Event::LoggedIn(info)) = i.c.poll_event() else {
        panic!()
    };
    assert_eq!(info.params.initiator_max_recv_data_segment_length, 262144);
    assert_eq!(info.isid, ISID);
    assert_eq!(info.target_name.as_deref(), Some(TARGET));
    assert!(i.c.session().is_some());
}

/// CHAP through the connection: challenge from the injected random source, the response
/// checked, and a wrong one closing with the failure reason.
#[test]
fn chap_login_over_the_wire() {
    const CHAP_TARGET: &str = "iqn.2026-11.org.numatgt:chap";
    for good in [true, false] {
        let mut i = Ini::new(ConnConfig::default());
        i.c.set_random_source(Box::new(|b: &mut [u8]| {
            b.fill(0x33);
            Ok(())
        }));
        let (b, d) = i.login_pdu(
            0,
            1,
            true,
            &format!("InitiatorName=iqn.x;TargetName={CHAP_TARGET};AuthMethod=CHAP,None;"),
        );
        i.send(b, vec![], &d);
        let r = i.recv();
        let txt = String::from_utf8(r[0].data.clone()).unwrap();
        assert!(txt.contains("AuthMethod=CHAP\0"), "{txt}");
        let (b, d) = i.login_pdu(0, 1, false, "CHAP_A=5;");
        i.send(b, vec![], &d);
        let r = i.recv();
        let txt = String::from_utf8(r[0].data.clone()).unwrap();
        assert!(txt.contains("CHAP_I=51\0"), "{txt}");
        assert!(
            txt.contains(&format!("CHAP_C=0x{}\0", "33".repeat(16))),
            "{txt}"
        );
        let secret: &[u8] = if good { b"alice-secret-1234" } else { b"guess" };
        let resp = crate::ChapAlgorithm::Md5.response(0x33, secret, &[0x33; 16]);
        let hex: String = resp.iter().map(|b| format!("{b:02x}")).collect();
        let (b, d) = i.login_pdu(0, 3, true, &format!("CHAP_N=alice;CHAP_R=0x{hex};"));
        i.send(b, vec![], &d);
        let r = i.recv();
        let Bhs::LoginResponse(lr) = r[0].bhs else {
            panic!()
        };
        if good {
            assert_eq!((lr.status_class, lr.status_detail), (0, 0));
            let Some(Event::LoggedIn(info)) = i.c.poll_event() else {
                panic!()
            };
            assert_eq!(info.chap.map(|c| c.user), Some("alice".into()));
        } else {
            assert_eq!((lr.status_class, lr.status_detail), (2, 1));
            let Some(Event::LoginFailed {
                target_name,
                failure,
            }) = i.c.poll_event()
            else {
                panic!()
            };
            assert_eq!(failure, LoginFailure::AuthFailure);
            assert_eq!(target_name.as_deref(), Some(CHAP_TARGET));
            let Some(Event::Close(ConnError::LoginFailed { auth: Some(f), .. })) = i.c.poll_event()
            else {
                panic!()
            };
            assert!(i.c.poll_event().is_none());
            assert_eq!(f.reason, crate::AuthFailureReason::BadResponse);
            assert_eq!(f.user.as_deref(), Some("alice"));
        }
    }
}

#[test]
fn login_failures_close() {
    let cases = [
        ("iqn.nope", 0x03, LoginFailure::NotFound, None),
        (
            "iqn.2026-11.org.numatgt:acl",
            0x02,
            LoginFailure::NotAuthorized,
            Some("iqn.2026-11.org.numatgt:acl"),
        ),
    ];
    for (target, detail, failure, named) in cases {
        let mut i = Ini::new(ConnConfig::default());
        let (b, d) = i.login_pdu(
            0,
            1,
            true,
            &format!("InitiatorName=iqn.x;TargetName={target};"),
        );
        i.send(b, vec![], &d);
        let r = i.recv();
        let Bhs::LoginResponse(lr) = r[0].bhs else {
            panic!()
        };
        assert_eq!((lr.status_class, lr.status_detail), (2, detail));
        // one LoginFailed (the name only when the Directory knows the target), then Close
        let ev = i.events();
        assert_eq!(ev.len(), 2, "{ev:?}");
        let Event::LoginFailed {
            target_name,
            failure: f,
        } = &ev[0]
        else {
            panic!("{ev:?}")
        };
        assert_eq!((target_name.as_deref(), *f), (named, failure));
        assert!(matches!(ev[1], Event::Close(ConnError::LoginFailed { .. })));
        assert!(i.c.is_closing());
    }
    // A non-login PDU during login closes.
    let mut i = Ini::new(ConnConfig::default());
    i.send(
        Bhs::NopOut(NopOut {
            immediate: true,
            lun: 0,
            itt: 1,
            ttt: RESERVED_TAG,
            cmd_sn: 0,
            exp_stat_sn: 0,
        }),
        vec![],
        &[],
    );
    assert!(matches!(
        i.c.poll_event(),
        Some(Event::Close(ConnError::Protocol(_)))
    ));
    assert!(i.c.poll_event().is_none());
}

/// Every failed login reports one `LoginFailed`, whatever the stage it fails in, naming
/// the target only once the Directory knew it; a successful login reports none.
#[test]
fn failed_logins_are_reported_once() {
    let op_fail = "MaxBurstLength=512;MaxBurstLength=512;";
    // (first login text, operational text if the first succeeds, failure, target named)
    let cases = [
        ("TargetName=iqn.x;", None, LoginFailure::Error, None),
        (
            "InitiatorName=iqn.i;TargetName=iqn.nope;",
            None,
            LoginFailure::NotFound,
            None,
        ),
        (
            "InitiatorName=iqn.i;SessionType=Discovery;AuthMethod=None;",
            Some(op_fail),
            LoginFailure::Error,
            None,
        ),
        (
            &*format!("InitiatorName=iqn.i;TargetName={TARGET};AuthMethod=None;"),
            Some(op_fail),
            LoginFailure::Error,
            Some(TARGET),
        ),
    ];
    for (first, op, failure, named) in cases {
        let mut i = Ini::new(ConnConfig::default());
        let (b, d) = i.login_pdu(0, 1, true, first);
        i.send(b, vec![], &d);
        let mut ev = i.events();
        if let Some(op) = op {
            assert!(ev.is_empty(), "{ev:?}");
            let (b, d) = i.login_pdu(1, 3, true, op);
            i.send(b, vec![], &d);
            ev = i.events();
        }
        let r = i.recv();
        let Some(Bhs::LoginResponse(lr)) = r.last().map(|p| p.bhs) else {
            panic!("{r:?}")
        };
        let want = LoginFailure::from_status(lr.status_class, lr.status_detail);
        assert_eq!(want, Some(failure), "{first}");
        let [
            Event::LoginFailed {
                target_name,
                failure: f,
            },
            Event::Close(ConnError::LoginFailed { .. }),
        ] = &ev[..]
        else {
            panic!("{first}: {ev:?}")
        };
        assert_eq!((target_name.as_deref(), *f), (named, failure), "{first}");
        // nothing more comes out of a closed login
        let (b, d) = i.login_pdu(0, 1, true, first);
        i.send(b, vec![], &d);
        assert!(i.events().is_empty());
    }
    let mut i = Ini::new(ConnConfig::default());
    i.login();
    assert!(i.events().is_empty());
}

/// A data digest error on a PDU carrying task data: reported, rejected, then the connection
/// closes (ERL 0).
#[test]
fn data_digest_error_on_task_data_closes() {
    let mut i = Ini::new(ConnConfig::default());
    i.login_with("HeaderDigest=CRC32C;DataDigest=CRC32C;");
    let mut cdb = [0u8; 16];
    cdb[0] = 0x2a;
    let mut b = Pdu::new(
        Bhs::ScsiCommand(ScsiCommandHdr {
            immediate: false,
            final_: true,
            read: false,
            write: true,
            attr: 1,
            lun: fields::lun_encode(1),
            itt: 3,
            edtl: 512,
            cmd_sn: i.cmd_sn,
            exp_stat_sn: i.exp_stat_sn,
            cdb,
        }),
        vec![5u8; 512],
    )
    .encode(i.dg)
    .unwrap();
    let n = b.len();
    b[n - 2] ^= 0x01;
    i.feed(&b);
    assert!(matches!(
        i.events()[..],
        [
            Event::DigestError { header: false },
            Event::Rejected(RejectReason::DataDigest),
            Event::Close(ConnError::DataDigest)
        ]
    ));
    let r = i.recv();
    let Bhs::Reject(rj) = r[0].bhs else { panic!() };
    assert_eq!(rj.reason, RejectReason::DataDigest.code());
}

#[test]
fn tmf_function_labels() {
    let labels: Vec<&str> = (1..=9).map(|c| TmfFunction::from_code(c).label()).collect();
    assert_eq!(
        labels,
        [
            "abort_task",
            "abort_task_set",
            "clear_aca",
            "clear_task_set",
            "lun_reset",
            "target_warm_reset",
            "target_cold_reset",
            "task_reassign",
            "other"
        ]
    );
    assert_eq!(TmfFunction::Other(0x7f).label(), "other");
}

#[test]
fn read_split_and_phase_collapse() {
    let mut i = Ini::new(ConnConfig::default());
    i.login_with("MaxRecvDataSegmentLength=8192;MaxBurstLength=16384;");
    i.scsi(0x10, true, false, 20000, 0x28, &[], true);
    let cmds = cmd_events(i.events());
    assert_eq!(cmds.len(), 1);
    assert_eq!(cmds[0].lun, 1);
    assert_eq!(cmds[0].expected_read_len, 20000);
    let payload: Vec<u8> = (0..20000u32).map(|x| x as u8).collect();
    i.c.complete_command(
        0x10,
        CommandResult {
            status: 0,
            sense: vec![],
            data: Some(Arc::from(payload.clone())),
            write_transfer_len: None,
        },
    );
    assert_eq!(i.c.tasks_in_flight(), 0);
    let r = i.recv();
    assert_eq!(r.len(), 3);
    let mut got = Vec::new();
    let lens = [8192, 8192, 3616];
    for (n, p) in r.iter().enumerate() {
        let Bhs::DataIn(d) = p.bhs else { panic!() };
        assert_eq!(d.data_sn, n as u32);
        assert_eq!(d.buffer_offset as usize, got.len());
        assert_eq!(p.data.len(), lens[n]);
        // burst of 16384 ends after the second PDU
        assert_eq!(d.final_, n >= 1);
        assert_eq!(d.status.is_some(), n == 2);
        got.extend_from_slice(&p.data);
    }
    assert_eq!(got, payload);
    let Bhs::DataIn(last) = r[2].bhs else {
        panic!()
    };
    assert_eq!(last.status, Some(0));
    assert!(!last.underflow && !last.overflow);
    assert_eq!(last.stat_sn, i.exp_stat_sn);
}

#[test]
fn read_residuals_and_sense() {
    let mut i = Ini::new(ConnConfig::default());
    i.login();
    // Underflow
    i.scsi(1, true, false, 4096, 0x28, &[], true);
    i.c.complete_command(
        1,
        CommandResult {
            status: 0,
            sense: vec![],
            data: Some(Arc::from(vec![1; 1000])),
            write_transfer_len: None,
        },
    );
    let r = i.recv();
    let Bhs::DataIn(d) = r[0].bhs else { panic!() };
    assert!(d.underflow && d.residual == 3096 && d.status == Some(0));
    // Overflow
    i.scsi(2, true, false, 512, 0x12, &[], true);
    i.c.complete_command(
        2,
        CommandResult {
            status: 0,
            sense: vec![],
            data: Some(Arc::from(vec![1; 600])),
            write_transfer_len: None,
        },
    );
    let r = i.recv();
    assert_eq!(r[0].data.len(), 512);
    let Bhs::DataIn(d) = r[0].bhs else { panic!() };
    assert!(d.overflow && d.residual == 88);
    // CHECK CONDITION with sense: separate response, no data
    i.scsi(3, true, false, 512, 0x28, &[], true);
    let sense = vec![0x70, 0, 5, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x21, 0, 0, 0, 0, 0];
    i.c.complete_command(
        3,
        CommandResult::<Buf> {
            status: 2,
            sense: sense.clone(),
            data: None,
            write_transfer_len: None,
        },
    );
    let r = i.recv();
    assert_eq!(r.len(), 1);
    let Bhs::ScsiResponse(s) = r[0].bhs else {
        panic!()
    };
    assert_eq!(s.status, 2);
    assert!(s.underflow && s.residual == 512);
    assert_eq!(&r[0].data[..2], &[0, 18]);
    assert_eq!(&r[0].data[2..], &sense[..]);
    let _ = i.events();
}

#[test]
fn write_immediate_then_r2t() {
    let mut i = Ini::new(ConnConfig::default());
    let info = i.login();
    assert!(info.params.initial_r2t);
    let edtl = 200_000u32;
    let payload: Vec<u8> = (0..edtl).map(|x| (x * 7) as u8).collect();
    i.scsi(5, false, true, edtl, 0x2a, &payload[..8192], true);
    assert!(i.events().is_empty());
    let r = i.recv();
    assert_eq!(r.len(), 1);
    let Bhs::R2t(r2t) = r[0].bhs else {
        panic!("{:?}", r[0])
    };
    assert_eq!(
        (r2t.buffer_offset, r2t.desired_len, r2t.r2t_sn),
        (8192, edtl - 8192, 0)
    );
    let mut off = 8192u32;
    let mut sn = 0;
    while off < edtl {
        let len = (edtl - off).min(65536);
        i.data_out(
            5,
            r2t.ttt,
            sn,
            off,
            &payload[off as usize..(off + len) as usize],
            off + len == edtl,
        );
        off += len;
        sn += 1;
    }
    let cmds = cmd_events(i.events());
    assert_eq!(cmds.len(), 1);
    assert_eq!(cmds[0].data_out, payload);
    assert_eq!(cmds[0].expected_write_len, edtl);
    i.c.complete_command(
        5,
        CommandResult::<Buf> {
            status: 0,
            sense: vec![],
            data: None,
            write_transfer_len: None,
        },
    );
    let r = i.recv();
    let Bhs::ScsiResponse(s) = r[0].bhs else {
        panic!()
    };
    assert_eq!((s.status, s.residual, s.underflow), (0, 0, false));
    assert_eq!(s.exp_data_sn, 1);
}

#[test]
fn write_unsolicited_and_multiple_r2ts() {
    let cfg = ConnConfig {
        initial_r2t: false,
        max_burst_length: 65536,
        first_burst_length: 16384,
        max_outstanding_r2t: 2,
        ..ConnConfig::default()
    };
    let mut i = Ini::new(cfg);
    let info = i.login_with(&OPEN_ISCSI_OP.replace("MaxOutstandingR2T=1", "MaxOutstandingR2T=4"));
    assert!(!info.params.initial_r2t);
    assert_eq!(info.params.first_burst_length, 16384);
    let edtl = 200_000u32;
    let payload: Vec<u8> = (0..edtl).map(|x| (x * 3) as u8).collect();
    i.scsi(9, false, true, edtl, 0x2a, &payload[..4096], false);
    assert!(i.recv().is_empty(), "no R2T during the unsolicited burst");
    i.data_out(9, RESERVED_TAG, 0, 4096, &payload[4096..12288], false);
    i.data_out(9, RESERVED_TAG, 1, 12288, &payload[12288..16384], true);
    let r = i.recv();
    assert_eq!(r.len(), 2, "MaxOutstandingR2T=2");
    let mut r2ts: Vec<R2t> = r
        .iter()
        .map(|p| match p.bhs {
            Bhs::R2t(x) => x,
            _ => panic!(),
        })
        .collect();
    assert_eq!(r2ts[0].buffer_offset, 16384);
    assert_eq!(r2ts[0].desired_len, 65536);
    assert_eq!(r2ts[1].buffer_offset, 16384 + 65536);
    let mut next_sn = 2;
    while let Some(r2t) = (!r2ts.is_empty()).then(|| r2ts.remove(0)) {
        let mut off = r2t.buffer_offset;
        let end = off + r2t.desired_len;
        let mut sn = 0;
        while off < end {
            let len = (end - off).min(32768);
            i.data_out(
                9,
                r2t.ttt,
                sn,
                off,
                &payload[off as usize..(off + len) as usize],
                off + len == end,
            );
            off += len;
            sn += 1;
        }
        for p in i.recv() {
            let Bhs::R2t(x) = p.bhs else { panic!() };
            assert_eq!(x.r2t_sn, next_sn);
            next_sn += 1;
            r2ts.push(x);
        }
    }
    let cmds = cmd_events(i.events());
    assert_eq!(cmds[0].data_out, payload);
}

#[test]
fn bad_data_out_is_rejected_and_closes() {
    let mut i = Ini::new(ConnConfig::default());
    i.login();
    i.scsi(5, false, true, 4096, 0x2a, &[], true);
    let r = i.recv();
    let Bhs::R2t(r2t) = r[0].bhs else { panic!() };
    // Wrong offset.
    i.data_out(5, r2t.ttt, 0, 512, &[0; 512], false);
    let r = i.recv();
    let Bhs::Reject(rj) = r[0].bhs else { panic!() };
    assert_eq!(rj.reason, 0x09);
    assert!(matches!(
        i.c.poll_event(),
        Some(Event::Rejected(RejectReason::InvalidPduField))
    ));
    assert!(matches!(
        i.c.poll_event(),
        Some(Event::Close(ConnError::Protocol(_)))
    ));
    // Data-Out for an unknown task is ignored.
    let mut i = Ini::new(ConnConfig::default());
    i.login();
    i.data_out(77, 5, 0, 0, &[0; 512], true);
    assert!(i.recv().is_empty());
    assert_eq!(i.c.stats().dropped_unknown_data_out, 1);
}

/// The status of `r` (a single SCSI Response) and its sense key / ASC / ASCQ.
fn check_condition_of(r: &[Pdu]) -> (u8, u8, u8, u8) {
    let Some(p) = r.iter().find(|p| matches!(p.bhs, Bhs::ScsiResponse(_))) else {
        panic!("no SCSI Response in {r:?}")
    };
    let Bhs::ScsiResponse(s) = p.bhs else {
        unreachable!()
    };
    let sense = &p.data[2..];
    (s.status, sense[2] & 0x0F, sense[12], sense[13])
}

#[test]
fn data_sn_out_of_order_fails_the_task_and_keeps_the_connection() {
    // solicited: DataSN 1 where 0 is expected (the data of an R2T sent in reverse order)
    let mut i = Ini::new(ConnConfig::default());
    i.login();
    i.scsi(5, false, true, 1024, 0x2a, &[], true);
    let r = i.recv();
    let Bhs::R2t(r2t) = r[0].bhs else { panic!() };
    i.data_out(5, r2t.ttt, 1, 0, &[1; 512], false);
    assert!(i.recv().is_empty(), "no status before the final Data-Out");
    i.data_out(5, r2t.ttt, 0, 512, &[2; 512], true);
    assert!(
        i.events().is_empty(),
        "the failed write never reaches the server"
    );
    assert_eq!(check_condition_of(&i.recv()), (2, 0x0B, 0x47, 0x05));
    assert_eq!(i.c.stats().data_sequence_errors, 1);
    // the connection carries on: a read is served
    i.scsi(6, true, false, 512, 0x28, &[], true);
    let cmds = cmd_events(i.events());
    assert_eq!(cmds.len(), 1);
    assert_eq!(cmds[0].itt, 6);

    // unsolicited: DataSN 27 on the only Data-Out (InitialR2T=No, no immediate data)
    let cfg = ConnConfig {
        initial_r2t: false,
        ..ConnConfig::default()
    };
    let mut i = Ini::new(cfg);
    i.login_with(OPEN_ISCSI_OP);
    i.scsi(7, false, true, 512, 0x2a, &[], false);
    i.data_out(7, RESERVED_TAG, 27, 0, &[3; 512], true);
    assert!(i.events().is_empty());
    let r = i.recv();
    assert!(
        !r.iter().any(|p| matches!(p.bhs, Bhs::R2t(_))),
        "no R2T for a failed task"
    );
    assert_eq!(check_condition_of(&r), (2, 0x0B, 0x47, 0x05));
    // a later Data-Out of the ended task is ignored, not a protocol error
    i.data_out(7, RESERVED_TAG, 1, 512, &[3; 512], true);
    assert!(i.recv().is_empty());
    assert!(i.c.poll_event().is_none(), "the connection stays open");
}

#[test]
fn cmdsn_ordering_and_window() {
    let cfg = ConnConfig {
        max_queued_commands: 4,
        ..ConnConfig::default()
    };
    let mut i = Ini::new(cfg);
    i.login();
    let base = i.cmd_sn;
    // Send CmdSN base+1 first, then base.
    i.cmd_sn = base + 1;
    i.scsi(0x21, true, false, 512, 0x28, &[], true);
    assert!(i.events().is_empty());
    i.cmd_sn = base;
    i.scsi(0x20, true, false, 512, 0x28, &[], true);
    let cmds = cmd_events(i.events());
    assert_eq!(
        cmds.iter().map(|c| c.itt).collect::<Vec<_>>(),
        vec![0x20, 0x21]
    );
    // Beyond MaxCmdSN (base+3): dropped silently.
    i.cmd_sn = base + 9;
    i.scsi(0x30, true, false, 512, 0x28, &[], true);
    assert!(i.events().is_empty() && i.recv().is_empty());
    assert_eq!(i.c.stats().dropped_out_of_window, 1);
    assert!(i.c.take_drop_reason().unwrap().contains("MaxCmdSN"));
    // Duplicate / stale.
    i.cmd_sn = base;
    i.scsi(0x31, true, false, 512, 0x28, &[], true);
    assert!(i.events().is_empty());
    // Window opens as tasks complete.
    i.c.complete_command(
        0x20,
        CommandResult {
            status: 0,
            sense: vec![],
            data: Some(Arc::from(vec![0; 512])),
            write_transfer_len: None,
        },
    );
    let r = i.recv();
    let Bhs::DataIn(d) = r[0].bhs else { panic!() };
    assert_eq!(d.exp_cmd_sn, base + 2);
    assert_eq!(d.max_cmd_sn, base + 4);
}

#[test]
fn malformed_pdus() {
    let mut i = Ini::new(ConnConfig::default());
    i.login();
    // Unknown opcode -> Reject "command not supported"
    let mut raw = [0u8; 48];
    raw[0] = 0x1d;
    i.feed(&raw);
    let r = i.recv();
    let Bhs::Reject(rj) = r[0].bhs else { panic!() };
    assert_eq!(rj.reason, 0x05);
    assert_eq!(&r[0].data[..], &raw[..]);
    // SNACK at ERL 0 -> Reject protocol error
    i.send(
        Bhs::Snack(Snack {
            snack_type: 0,
            lun: 0,
            itt: 1,
            ttt: 0,
            exp_stat_sn: 0,
            beg_run: 0,
            run_length: 0,
        }),
        vec![],
        &[],
    );
    let r = i.recv();
    let Bhs::Reject(rj) = r[0].bhs else { panic!() };
    assert_eq!(rj.reason, 0x04);
    assert!(!i.c.is_closing());
    // Data segment longer than our MaxRecvDataSegmentLength -> Reject + close.
    let mut raw = Bhs::NopOut(NopOut {
        immediate: true,
        lun: 0,
        itt: 1,
        ttt: RESERVED_TAG,
        cmd_sn: 0,
        exp_stat_sn: 0,
    })
    .encode(0, 300_000);
    raw[0] |= 0x40;
    let _ = i.events();
    i.feed(&raw);
    assert!(matches!(
        i.c.poll_event(),
        Some(Event::Rejected(RejectReason::ProtocolError))
    ));
    assert!(matches!(
        i.c.poll_event(),
        Some(Event::Close(ConnError::Protocol(_)))
    ));
    assert!(i.c.is_closing());
}

#[test]
fn digests_after_login() {
    let mut i = Ini::new(ConnConfig::default());
    let info = i.login_with("HeaderDigest=CRC32C;DataDigest=CRC32C;");
    assert_eq!(info.params.header_digest, crate::Digest::Crc32c);
    assert!(i.dg.header && i.dg.data);
    // NOP-Out ping with data is echoed with digests.
    i.send(
        Bhs::NopOut(NopOut {
            immediate: true,
            lun: 0,
            itt: 7,
            ttt: RESERVED_TAG,
            cmd_sn: i.cmd_sn,
            exp_stat_sn: 0,
        }),
        vec![],
        b"hello",
    );
    let r = i.recv();
    assert_eq!(r[0].data, b"hello");
    // Corrupt data digest on a NOP-Out: Reject 0x02, connection stays.
    let mut b = Pdu::new(
        Bhs::NopOut(NopOut {
            immediate: true,
            lun: 0,
            itt: 8,
            ttt: RESERVED_TAG,
            cmd_sn: i.cmd_sn,
            exp_stat_sn: 0,
        }),
        b"abcd".to_vec(),
    )
    .encode(i.dg)
    .unwrap();
    let n = b.len();
    b[n - 1] ^= 0xff;
    i.feed(&b);
    let r = i.recv();
    let Bhs::Reject(rj) = r[0].bhs else { panic!() };
    assert_eq!(rj.reason, 0x02);
    assert!(!i.c.is_closing());
    assert!(matches!(
        i.events()[..],
        [
            Event::DigestError { header: false },
            Event::Rejected(RejectReason::DataDigest)
        ]
    ));
    // Corrupt header digest: close.
    b[50] ^= 0xff;
    i.feed(&b);
    assert!(matches!(
        i.events()[..],
        [
            Event::DigestError { header: true },
            Event::Close(ConnError::HeaderDigest)
        ]
    ));
}

#[test]
fn nop_ping_and_timeout() {
    let cfg = ConnConfig {
        nop_interval_ms: 1000,
        nop_count: 2,
        ..ConnConfig::default()
    };
    let mut i = Ini::new(cfg);
    i.login();
    assert_eq!(i.c.next_deadline_ms(), Some(2000));
    i.c.on_tick(2000);
    let r = i.recv();
    let Bhs::NopIn(p) = r[0].bhs else { panic!() };
    assert_eq!(p.itt, RESERVED_TAG);
    // Answer it.
    i.send(
        Bhs::NopOut(NopOut {
            immediate: true,
            lun: 0,
            itt: RESERVED_TAG,
            ttt: p.ttt,
            cmd_sn: i.cmd_sn,
            exp_stat_sn: 0,
        }),
        vec![],
        &[],
    );
    assert!(i.recv().is_empty());
    i.c.on_tick(3000);
    assert_eq!(i.recv().len(), 1);
    i.c.on_tick(4000); // one missed
    assert_eq!(i.recv().len(), 1);
    assert!(i.c.poll_event().is_none());
    i.c.on_tick(5000); // two missed -> drop
    assert!(matches!(
        i.c.poll_event(),
        Some(Event::Close(ConnError::NopTimeout(2)))
    ));
}

#[test]
fn a_held_logout_waits_for_the_servers_confirmation() {
    let mut i = Ini::new(ConnConfig::default());
    i.login();
    i.c.hold_logouts(true);
    i.scsi(1, true, false, 512, 0x28, &[], true);
    let _ = i.events();
    i.logout(0);
    // the task first, the server's confirmation next
    assert!(i.recv().is_empty());
    assert!(i.c.poll_event().is_none());
    i.c.confirm_logout(); // not asked yet: nothing
    assert!(i.recv().is_empty());
    i.read_done(1);
    let r = i.recv();
    assert_eq!(r.len(), 1, "the Data-In, not yet the Logout Response");
    assert!(matches!(i.c.poll_event(), Some(Event::LogoutRequested)));
    assert!(i.c.poll_event().is_none(), "asked once");
    assert!(!i.c.is_closing());
    i.c.confirm_logout();
    let r = i.recv();
    let Bhs::LogoutResponse(l) = r[0].bhs else {
        panic!("{:?}", r[0].bhs)
    };
    assert_eq!(l.response, 0);
    assert!(matches!(i.c.poll_event(), Some(Event::LoggedOut)));
    assert!(i.c.is_closing());
}

#[test]
fn logout_waits_for_tasks() {
    let mut i = Ini::new(ConnConfig::default());
    i.login();
    i.scsi(1, true, false, 512, 0x28, &[], true);
    let _ = i.events();
    i.logout(0);
    assert!(i.recv().is_empty());
    i.read_done(1);
    let r = i.recv();
    assert!(matches!(r[0].bhs, Bhs::DataIn(_)));
    let Bhs::LogoutResponse(l) = r[1].bhs else {
        panic!()
    };
    assert_eq!(l.response, 0);
    assert!(matches!(i.c.poll_event(), Some(Event::LoggedOut)));
    assert!(i.c.is_closing());
    // Late completions are dropped.
    i.c.complete_command(
        1,
        CommandResult {
            status: 0,
            sense: vec![],
            data: None,
            write_transfer_len: None,
        },
    );
    assert!(!i.c.has_tx());

    let mut i = Ini::new(ConnConfig::default());
    i.login();
    i.logout(2);
    let r = i.recv();
    let Bhs::LogoutResponse(l) = r[0].bhs else {
        panic!()
    };
    assert_eq!(l.response, 2);
    assert!(!i.c.is_closing());
}

#[test]
fn request_logout_asks_with_an_async_message_and_the_logout_follows() {
    let mut i = Ini::new(ConnConfig::default());
    assert!(!i.c.request_logout(5), "not before the login");
    i.login();
    assert!(i.c.request_logout(5));
    let r = i.recv();
    assert_eq!(r.len(), 2);
    let Bhs::AsyncMessage(drop) = r[0].bhs else {
        panic!("{:?}", r[0].bhs)
    };
    assert_eq!((drop.event, drop.param2), (2, 0), "dropping, Time2Wait 0");
    let Bhs::AsyncMessage(m) = r[1].bhs else {
        panic!("{:?}", r[1].bhs)
    };
    assert_eq!((m.event, m.param3), (1, 5));
    assert_eq!(m.stat_sn, drop.stat_sn.wrapping_add(1));
    // the initiator logs out as asked: the usual response, and the connection ends
    i.logout(0);
    let r = i.recv();
    let Bhs::LogoutResponse(l) = r[0].bhs else {
        panic!()
    };
    assert_eq!(l.response, 0);
    assert_eq!(
        l.stat_sn,
        m.stat_sn.wrapping_add(1),
        "the Async Message took a StatSN"
    );
    assert_eq!(l.time2wait, 0, "asked by the target: log in again at once");
    assert!(!i.c.request_logout(5), "logged out: nothing more to ask");
}

#[test]
fn discovery_send_targets() {
    let mut i = Ini::new(ConnConfig::default());
    let (b, d) = i.login_pdu(
        1,
        3,
        true,
        "InitiatorName=iqn.x;SessionType=Discovery;MaxRecvDataSegmentLength=512;",
    );
    i.send(b, vec![], &d);
    let r = i.recv();
    let Bhs::LoginResponse(lr) = r[0].bhs else {
        panic!()
    };
    assert!(lr.transit);
    let Some(Event::LoggedIn(info)) = i.c.poll_event() else {
        panic!()
    };
    assert_eq!(info.session_type, SessionType::Discovery);
    // Make the answer longer than 512 bytes by asking many times via a long X- key list.
    let mut text = b"SendTargets=All\0".to_vec();
    for n in 0..20 {
        text.extend_from_slice(format!("X-vendor.key{n}=1\0").as_bytes());
    }
    let tr = |ttt, cmd_sn| {
        Bhs::TextRequest(TextRequest {
            immediate: false,
            final_: true,
            cont: false,
            lun: 0,
            itt: 3,
            ttt,
            cmd_sn,
            exp_stat_sn: 0,
        })
    };
    let sn = i.cmd_sn;
    i.send(tr(RESERVED_TAG, sn), vec![], &text);
    let mut all = Vec::new();
    let mut sn = sn + 1;
    loop {
        let r = i.recv();
        let Bhs::TextResponse(t) = r[0].bhs else {
            panic!()
        };
        assert!(r[0].data.len() <= 512);
        all.extend_from_slice(&r[0].data);
        if t.final_ {
            break;
        }
        assert!(t.cont);
        i.send(tr(t.ttt, sn), vec![], &[]);
        sn += 1;
    }
    let s = String::from_utf8(all).unwrap();
    assert!(
        s.contains("TargetName=iqn.2026-11.org.numatgt:disk1\0TargetAddress=127.0.0.1:3260,1\0")
    );
    assert!(s.contains("TargetAddress=[::1]:3260,1\0"));
    assert!(s.contains("X-vendor.key19=NotUnderstood\0"));
}

#[test]
fn abort_task_waiting_for_data() {
    let mut i = Ini::new(ConnConfig::default());
    i.login();
    i.scsi(5, false, true, 4096, 0x2a, &[], true);
    let _ = i.recv();
    assert_eq!(i.c.tasks_in_flight(), 1);
    i.send(
        Bhs::TaskMgmtRequest(TaskMgmtRequest {
            immediate: true,
            function: 1,
            lun: fields::lun_encode(1),
            itt: 6,
            rtt: 5,
            cmd_sn: i.cmd_sn,
            exp_stat_sn: 0,
            ref_cmd_sn: i.cmd_sn - 1,
            exp_data_sn: 0,
        }),
        vec![],
        &[],
    );
    assert_eq!(i.c.tasks_in_flight(), 0);
    let Some(Event::TaskMgmt(t)) = i.c.poll_event() else {
        panic!()
    };
    assert_eq!(
        (t.function, t.referenced_itt, t.lun),
        (TmfFunction::AbortTask, 5, 1)
    );
    i.c.complete_tmf(6, TmfResponse::TaskNotExist);
    let r = i.recv();
    let Bhs::TaskMgmtResponse(tr) = r[0].bhs else {
        panic!()
    };
    assert_eq!(tr.response, 0);
    // Data still in flight for the aborted task is ignored.
    i.data_out(5, 1, 0, 0, &[0; 512], true);
    assert!(i.recv().is_empty());
    assert!(!i.c.is_closing());
}

#[test]
fn byte_at_a_time_and_batched_input() {
    let mut i = Ini::new(ConnConfig::default());
    let (b, d) = i.login_pdu(
        1,
        3,
        true,
        &format!("InitiatorName=iqn.x;SessionType=Normal;TargetName={TARGET};"),
    );
    let bytes = Pdu::new(b, d).encode(Digests::default()).unwrap();
    i.feed_chunked(&bytes, 1);
    assert!(matches!(i.c.poll_event(), Some(Event::LoggedIn(_))));
    let _ = i.recv();
    // Many commands in one commit.
    let mut all = Vec::new();
    for n in 0..50u32 {
        let mut cdb = [0u8; 16];
        cdb[0] = 0x28;
        let h = Bhs::ScsiCommand(ScsiCommandHdr {
            immediate: false,
            final_: true,
            read: true,
            write: false,
            attr: 1,
            lun: 0,
            itt: n,
            edtl: 512,
            cmd_sn: i.cmd_sn + n,
            exp_stat_sn: 0,
            cdb,
        });
        all.extend(Pdu::new(h, vec![]).encode(Digests::default()).unwrap());
    }
    i.feed(&all);
    assert_eq!(cmd_events(i.events()).len(), 50);
}

#[test]
fn extended_cdb_and_bidi_ahs() {
    let mut i = Ini::new(ConnConfig::default());
    i.login();
    let mut cdb = [0u8; 16];
    cdb[0] = 0x7f;
    let h = Bhs::ScsiCommand(ScsiCommandHdr {
        immediate: true,
        final_: true,
        read: true,
        write: true,
        attr: 1,
        lun: 0,
        itt: 1,
        edtl: 512,
        cmd_sn: i.cmd_sn,
        exp_stat_sn: 0,
        cdb,
    });
    i.send(
        h,
        vec![Ahs::extended_cdb(&[9u8; 16]), Ahs::bidi_read_len(1024)],
        &[7u8; 512],
    );
    let cmds = cmd_events(i.events());
    assert_eq!(cmds[0].cdb.len(), 32);
    assert_eq!(cmds[0].expected_read_len, 1024);
    assert_eq!(cmds[0].data_out, vec![7u8; 512]);
    assert!(cmds[0].immediate);
}

#[test]
fn discovery_refuses_scsi_and_immediate_bound() {
    let mut i = Ini::new(ConnConfig::default());
    let (b, d) = i.login_pdu(1, 3, true, "InitiatorName=iqn.x;SessionType=Discovery;");
    i.send(b, vec![], &d);
    let _ = i.recv();
    let _ = i.events();
    i.scsi(1, true, false, 512, 0x28, &[], true);
    let r = i.recv();
    assert!(matches!(r[0].bhs, Bhs::Reject(_)));
    assert!(matches!(
        i.events()[..],
        [Event::Rejected(RejectReason::ProtocolError)]
    ));

    let cfg = ConnConfig {
        max_queued_commands: 2,
        ..ConnConfig::default()
    };
    let mut i = Ini::new(cfg);
    i.login();
    for itt in 0..3u32 {
        let h = Bhs::ScsiCommand(ScsiCommandHdr {
            immediate: true,
            final_: true,
            read: true,
            write: false,
            attr: 1,
            lun: 0,
            itt,
            edtl: 512,
            cmd_sn: i.cmd_sn,
            exp_stat_sn: 0,
            cdb: [0; 16],
        });
        i.send(h, vec![], &[]);
    }
    let ev = i.events();
    assert!(matches!(
        ev[..],
        [
            Event::Command(_),
            Event::Command(_),
            Event::Rejected(RejectReason::ImmediateCommandReject)
        ]
    ));
    let r = i.recv();
    let Bhs::Reject(rj) = r[0].bhs else { panic!() };
    assert_eq!(rj.reason, reason::IMMEDIATE_REJECT);
}

#[test]
fn write_command_data_is_not_sent_back() {
    let mut i = Ini::new(ConnConfig::default());
    i.login();
    i.scsi(1, false, true, 512, 0x2a, &[1u8; 512], true);
    let _ = i.events();
    i.c.complete_command(
        1,
        CommandResult {
            status: 0,
            sense: vec![],
            data: Some(Arc::from(vec![0u8; 64])),
            write_transfer_len: None,
        },
    );
    let r = i.recv();
    assert_eq!(r.len(), 1);
    let Bhs::ScsiResponse(s) = r[0].bhs else {
        panic!()
    };
    assert!(!s.overflow && !s.underflow && s.residual == 0);
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn random_input_never_panics(chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..200), 0..8),
                                     login_first in any::<bool>()) {
            let mut i = Ini::new(ConnConfig { nop_interval_ms: 10, nop_count: 1, ..ConnConfig::default() });
            if login_first {
                i.login();
            }
            for c in &chunks {
                i.feed(c);
                i.c.on_tick(i.now + 100);
                let _ = i.events();
                let mut v = Vec::new();
                i.c.gather_tx(&mut v, 16);
                let n: usize = v.iter().map(|s| s.len()).sum();
                drop(v);
                i.c.tx_consumed(n);
            }
        }

        #[test]
        fn random_commands_after_login(ops in prop::collection::vec((0u8..4, 0u32..8, 0u32..3, any::<bool>()), 0..40)) {
            let mut i = Ini::new(ConnConfig { max_queued_commands: 8, ..ConnConfig::default() });
            i.login();
            for (kind, itt, sn_off, flag) in ops {
                match kind {
                    0 => {
                        i.cmd_sn = i.cmd_sn.wrapping_add(sn_off).wrapping_sub(1);
                        i.scsi(itt, flag, !flag, 1024, 0x28, &[], true);
                    }
                    1 => i.data_out(itt, if flag { RESERVED_TAG } else { 1 }, 0, 0, &[0; 512], true),
                    2 => i.c.complete_command(itt, CommandResult { status: 0, sense: vec![], data: Some(Arc::from(vec![0u8; 700])), write_transfer_len: None }),
                    _ => {
                        i.send(Bhs::TaskMgmtRequest(TaskMgmtRequest {
                            immediate: true, function: 1 + (itt % 7) as u8, lun: 0, itt: 100 + itt, rtt: itt,
                            cmd_sn: i.cmd_sn, exp_stat_sn: 0, ref_cmd_sn: 0, exp_data_sn: 0,
                        }), vec![], &[]);
                        i.c.complete_tmf(100 + itt, TmfResponse::Complete);
                    }
                }
                let _ = i.events();
                let _ = i.recv();
                prop_assert!(i.c.tasks_in_flight() <= 8 + 8);
            }
        }
    }
}

#[test]
fn per_target_limits_from_the_login_grant() {
    // libiscsi style: everything in one operational-stage PDU; the limits of the target it
    // names apply to the whole negotiation and the session window
    let mut i = Ini::new(ConnConfig::default());
    let text = format!(
        "InitiatorName=iqn.2007-10.com.github:sahlberg:libiscsi:iscsi-test;\
         SessionType=Normal;TargetName=iqn.2026-11.org.numatgt:small;{OPEN_ISCSI_OP}"
    );
    let (b, d) = i.login_pdu(1, 3, true, &text);
    i.send(b, vec![], &d);
    let r = i.recv();
    let Bhs::LoginResponse(lr) = r[0].bhs else {
        panic!("{:?}", r[0])
    };
    assert_eq!((lr.status_class, lr.status_detail), (0, 0));
    assert_eq!(lr.tsih, 0x12);
    let txt = String::from_utf8(r[0].data.clone()).unwrap();
    assert!(txt.contains("MaxRecvDataSegmentLength=8192\0"), "{txt}");
    assert!(txt.contains("MaxBurstLength=65536\0"), "{txt}");
    assert!(txt.contains("FirstBurstLength=16384\0"), "{txt}");
    assert!(txt.contains("ImmediateData=No\0"), "{txt}");
    assert!(txt.contains("InitialR2T=Yes\0"), "{txt}");
    // the window follows the target's MaxQueueCmd
    assert_eq!(lr.max_cmd_sn.wrapping_sub(lr.exp_cmd_sn), 3);
    let Some(Event::LoggedIn(info)) = i.events().into_iter().next() else {
        panic!("no login")
    };
    assert_eq!(info.params.max_burst_length, 65536);
}

#[test]
fn recycled_write_buffers_are_reused() {
    let mut i = Ini::new(ConnConfig::default());
    i.login();
    let payload = vec![5u8; 4096];
    i.scsi(1, false, true, 4096, 0x2a, &payload, true);
    let mut cmds = cmd_events(i.events());
    let first = std::mem::take(&mut cmds[0].data_out);
    assert_eq!(first, payload);
    let ptr = first.as_ptr() as usize;
    i.c.recycle_buffer(first);
    i.c.complete_command(1, CommandResult::<Buf>::good());
    let _ = i.recv();
    // the next write of the same size gets the same memory, holding only its own data
    let payload2 = vec![6u8; 2048];
    i.scsi(2, false, true, 2048, 0x2a, &payload2, true);
    let cmds = cmd_events(i.events());
    assert_eq!(cmds[0].data_out, payload2);
    assert_eq!(cmds[0].data_out.as_ptr() as usize, ptr, "buffer not reused");
}

#[test]
fn cdb_longer_than_260_bytes_is_rejected() {
    let mut i = Ini::new(ConnConfig::default());
    i.login();
    let mut cdb = [0u8; 16];
    cdb[0] = 0x7f;
    let h = Bhs::ScsiCommand(ScsiCommandHdr {
        immediate: true,
        final_: true,
        read: false,
        write: false,
        attr: 1,
        lun: 0,
        itt: 1,
        edtl: 0,
        cmd_sn: i.cmd_sn,
        exp_stat_sn: 0,
        cdb,
    });
    // 16 + 248 = 264 bytes of CDB
    i.send(h, vec![Ahs::extended_cdb(&[9u8; 248])], &[]);
    assert!(matches!(
        i.events()[..],
        [Event::Rejected(RejectReason::InvalidPduField)]
    ));
    let r = i.recv();
    let Bhs::Reject(rj) = r[0].bhs else {
        panic!("{:?}", r[0])
    };
    assert_eq!(rj.reason, reason::INVALID_FIELD);
}

fn tmf_pdu(i: &Ini, function: u8, lun: u64, itt: u32, rtt: u32, ref_cmd_sn: u32) -> Bhs {
    Bhs::TaskMgmtRequest(TaskMgmtRequest {
        immediate: true,
        function,
        lun: fields::lun_encode(lun),
        itt,
        rtt,
        cmd_sn: i.cmd_sn,
        exp_stat_sn: 0,
        ref_cmd_sn,
        exp_data_sn: 0,
    })
}

fn tmf_response(r: &[Pdu]) -> Option<(u32, u8)> {
    r.iter().find_map(|p| match p.bhs {
        Bhs::TaskMgmtResponse(t) => Some((t.itt, t.response)),
        _ => None,
    })
}

#[test]
fn abort_of_a_running_task_swallows_its_status_and_answers_after_it_ends() {
    let mut i = Ini::new(ConnConfig::default());
    i.login();
    let write_sn = i.cmd_sn;
    i.scsi(5, false, true, 512, 0x2a, &[1u8; 512], true);
    assert_eq!(cmd_events(i.events()).len(), 1); // the server runs it
    assert!(i.c.task_wanted(5));
    assert!(!i.c.task_wanted(6));
    let h = tmf_pdu(&i, 1, 1, 9, 5, write_sn);
    i.send(h, vec![], &[]);
    let Some(Event::TaskMgmt(t)) = i.c.poll_event() else {
        panic!("no TMF event")
    };
    assert_eq!(t.function, TmfFunction::AbortTask);
    // a long server-side job sees that the task is no longer wanted
    assert!(!i.c.task_wanted(5));
    // the server agrees at once; the task is still running: no response yet
    i.c.complete_tmf(9, TmfResponse::Complete);
    assert!(
        i.recv().is_empty(),
        "TMF answered before the aborted task ended"
    );
    // the task ends: no SCSI status for it, then the TMF response
    i.c.complete_command(5, CommandResult::<Buf>::good());
    let r = i.recv();
    assert!(
        !r.iter().any(|p| matches!(p.bhs, Bhs::ScsiResponse(_))),
        "status sent for an aborted task: {r:?}"
    );
    assert_eq!(tmf_response(&r), Some((9, 0)));
    assert_eq!(i.c.tasks_in_flight(), 0);
    // the tag may be used again at once
    i.scsi(5, true, false, 512, 0x28, &[], true);
    assert_eq!(cmd_events(i.events()).len(), 1);
}

#[test]
fn abort_of_a_finished_task_says_it_does_not_exist() {
    let mut i = Ini::new(ConnConfig::default());
    i.login();
    let sn = i.cmd_sn;
    i.scsi(5, true, false, 512, 0x28, &[], true);
    assert_eq!(cmd_events(i.events()).len(), 1);
    i.c.complete_command(5, CommandResult::<Buf>::good());
    let _ = i.recv();
    let h = tmf_pdu(&i, 1, 1, 9, 5, sn);
    i.send(h, vec![], &[]);
    assert!(i.events().is_empty(), "nothing for the server to do");
    assert_eq!(tmf_response(&i.recv()), Some((9, 1)));
}

#[test]
fn abort_of_a_command_never_received_consumes_its_cmdsn() {
    let mut i = Ini::new(ConnConfig::default());
    i.login();
    // CmdSN `lost` never arrives; the next command waits behind it
    let lost = i.cmd_sn;
    i.cmd_sn += 1;
    i.scsi(6, true, false, 512, 0x28, &[], true);
    assert!(cmd_events(i.events()).is_empty(), "ran out of CmdSN order");
    let h = tmf_pdu(&i, 1, 1, 9, 5, lost);
    i.send(h, vec![], &[]);
    let r = i.recv();
    assert_eq!(tmf_response(&r), Some((9, 0)));
    // the hole is filled: the waiting command runs now
    assert_eq!(cmd_events(i.events()).len(), 1);
}

#[test]
fn lun_reset_aborts_only_that_luns_tasks() {
    let mut i = Ini::new(ConnConfig::default());
    i.login();
    i.scsi(1, true, false, 512, 0x28, &[], true); // LUN 1 (the helper's)
    i.scsi(2, true, false, 512, 0x28, &[], true);
    assert_eq!(cmd_events(i.events()).len(), 2);
    let h = tmf_pdu(&i, 5, 1, 9, 0, 0);
    i.send(h, vec![], &[]);
    let Some(Event::TaskMgmt(t)) = i.c.poll_event() else {
        panic!("no TMF event")
    };
    assert_eq!((t.function, t.lun), (TmfFunction::LogicalUnitReset, 1));
    i.c.complete_command(1, CommandResult::<Buf>::good());
    assert!(i.recv().is_empty());
    i.c.complete_tmf(9, TmfResponse::Complete);
    assert!(i.recv().is_empty(), "answered while task 2 still runs");
    i.c.complete_command(2, CommandResult::<Buf>::good());
    let r = i.recv();
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(tmf_response(&r), Some((9, 0)));
    // a reset of another LUN leaves LUN 1's new task alone
    i.scsi(3, true, false, 512, 0x28, &[], true);
    assert_eq!(cmd_events(i.events()).len(), 1);
    let h = tmf_pdu(&i, 5, 2, 10, 0, 0);
    i.send(h, vec![], &[]);
    let _ = i.events();
    i.c.complete_tmf(10, TmfResponse::Complete);
    assert_eq!(tmf_response(&i.recv()), Some((10, 0)));
    i.c.complete_command(3, CommandResult::<Buf>::good());
    assert!(matches!(i.recv()[0].bhs, Bhs::ScsiResponse(_)));
}

#[test]
fn tasks_ended_by_another_nexus_send_nothing() {
    let mut i = Ini::new(ConnConfig::default());
    i.login();
    // a running read and a write waiting for its data, both on LUN 1
    i.scsi(1, true, false, 512, 0x28, &[], true);
    i.scsi(2, false, true, 4096, 0x2a, &[], true);
    assert_eq!(cmd_events(i.events()).len(), 1);
    let _ = i.recv(); // the write's R2T
    let mut running = Vec::new();
    assert_eq!(
        i.c.abort_tasks(Some(2), &mut running),
        0,
        "other LUN untouched"
    );
    assert_eq!(i.c.abort_tasks(Some(1), &mut running), 2);
    assert_eq!(
        running,
        vec![1],
        "the read runs in the server; the write had not started"
    );
    assert_eq!(
        i.c.tasks_in_flight(),
        1,
        "the running read stays until it ends"
    );
    i.c.complete_command(1, CommandResult::<Buf>::good());
    assert!(
        i.recv().is_empty(),
        "status sent for a task aborted by another nexus"
    );
    assert_eq!(i.c.tasks_in_flight(), 0);
    // the write's late data is ignored; the tags are free again
    i.data_out(2, 1, 0, 0, &[0; 512], true);
    assert!(i.recv().is_empty());
    i.scsi(1, true, false, 512, 0x28, &[], true);
    assert_eq!(cmd_events(i.events()).len(), 1);
}

#[path = "rdma_tests.rs"]
mod rdma_tests;

#[test]
fn login_timeout_follows_the_configuration() {
    // a connection that never logs in (slow-loris) is dropped after the configured time
    let cfg = ConnConfig {
        login_timeout_ms: 2_000,
        ..ConnConfig::default()
    };
    let mut i = Ini::new(cfg);
    i.c.on_tick(100); // the first tick starts the clock
    assert_eq!(i.c.next_deadline_ms(), Some(2_100));
    i.c.on_tick(2_099);
    assert!(i.c.poll_event().is_none(), "dropped early");
    i.c.on_tick(2_100);
    assert!(matches!(
        i.c.poll_event(),
        Some(Event::Close(ConnError::LoginTimeout))
    ));
}

/// A connection moved to another process (live upgrade): the window is held until the
/// connection is quiet, its state survives the text form, and the resumed connection goes
/// on with the same StatSN and CmdSN, the bytes of a half-received PDU included.
#[test]
fn a_held_connection_moves_and_goes_on_with_its_numbers() {
    let cfg = ConnConfig {
        max_queued_commands: 4,
        ..ConnConfig::default()
    };
    let mut i = Ini::new(cfg.clone());
    let info = i.login();
    let base = i.cmd_sn;
    i.scsi(0x20, true, false, 512, 0x28, &[], true);
    assert_eq!(cmd_events(i.events()).len(), 1);
    i.c.hold_commands();
    assert!(!i.c.movable(), "a task is running");
    assert!(i.c.take_moved().is_none());
    i.read_done(0x20);
    let r = i.recv();
    let Bhs::DataIn(d) = r[0].bhs else { panic!() };
    // held: MaxCmdSN stays where it was (base + 3), it does not open to base + 4
    assert_eq!((d.exp_cmd_sn, d.max_cmd_sn), (base + 1, base + 3));
    i.exp_stat_sn = d.stat_sn + 1;
    // what the initiator may still send comes in and is served; then the window is closed
    for itt in 0x21..0x24 {
        i.scsi(itt, true, false, 512, 0x28, &[], true);
        assert_eq!(cmd_events(i.events()).len(), 1);
        i.read_done(itt);
        let r = i.recv();
        let Bhs::DataIn(d) = r[0].bhs else { panic!() };
        assert_eq!(d.max_cmd_sn, base + 3);
        i.exp_stat_sn = d.stat_sn + 1;
    }
    assert_eq!(
        i.c.window.exp_cmd_sn(),
        base + 4,
        "closed: MaxCmdSN = ExpCmdSN - 1"
    );
    // half of a NOP-Out ping has arrived when the connection moves
    let ping = Pdu {
        bhs: Bhs::NopOut(NopOut {
            immediate: true,
            lun: 0,
            itt: 0x99,
            ttt: RESERVED_TAG,
            cmd_sn: base + 4,
            exp_stat_sn: i.exp_stat_sn,
        }),
        ahs: vec![],
        data: b"ping".to_vec(),
    }
    .encode(i.dg)
    .unwrap();
    i.feed(&ping[..30]);
    assert!(i.c.movable());
    let moved = i.c.take_moved().expect("movable");
    assert!(i.c.is_closing() && !i.c.has_tx() && i.events().is_empty());
    assert_eq!(moved.pending_input, ping[..30]);
    assert_eq!((moved.exp_cmd_sn, moved.max_cmd_sn), (base + 4, base + 3));
    assert_eq!(moved.stat_sn, i.exp_stat_sn);
    assert_eq!(moved.info.tsih, info.tsih);
    let text = moved.to_text();
    let back = MovedConn::from_text(&text).expect(&text);
    assert_eq!(back, moved, "{text}");
    // the new process goes on
    let a: SocketAddr = "127.0.0.1:3260".parse().unwrap();
    let p: SocketAddr = "127.0.0.1:50000".parse().unwrap();
    i.c = Connection::resume(cfg, p, a, back, 5000);
    match &i.events()[..] {
        [Event::Resumed(got)] => assert_eq!((got.tsih, got.isid), (info.tsih, info.isid)),
        other => panic!("{other:?}"),
    }
    let r = i.recv();
    let Bhs::NopIn(n) = r[0].bhs else {
        panic!("{r:?}")
    };
    assert_eq!(
        (n.itt, n.ttt),
        (RESERVED_TAG, RESERVED_TAG),
        "wants no answer"
    );
    assert_eq!(n.stat_sn, i.exp_stat_sn, "StatSN not advanced");
    assert_eq!(
        (n.exp_cmd_sn, n.max_cmd_sn),
        (base + 4, base + 7),
        "window open"
    );
    i.feed(&ping[30..]);
    let r = i.recv();
    let Bhs::NopIn(n) = r[0].bhs else {
        panic!("{r:?}")
    };
    assert_eq!((n.itt, n.stat_sn), (0x99, i.exp_stat_sn));
    assert_eq!(r[0].data, b"ping");
    i.exp_stat_sn += 1;
    i.cmd_sn = base + 4;
    i.scsi(0x30, true, false, 512, 0x28, &[], true);
    let cmds = cmd_events(i.events());
    assert_eq!(cmds[0].itt, 0x30);
    i.read_done(0x30);
    let r = i.recv();
    let Bhs::DataIn(d) = r[0].bhs else { panic!() };
    assert_eq!(d.stat_sn, i.exp_stat_sn);
    assert_eq!(d.exp_cmd_sn, base + 5);
}

#[test]
fn a_moved_connections_text_is_checked() {
    for (bad, why) in [
        ("", "name"),
        ("initiator i\ntarget t\ntsih 0\n", "TSIH"),
        ("initiator i\ntarget t\ntsih 3\nbogus 1\n", "unknown key"),
        ("initiator i\ntarget t\ntsih 3\nisid 0x0102\n", "6 bytes"),
        ("initiator i\ntarget t\ntsih 3\nisid 0102\n", "prefix"),
        (
            "initiator i\ntarget t\ntsih 3\nHeaderDigest MD5\n",
            "digest",
        ),
        (
            "initiator i\ntarget t\ntsih 3\ncid 1\nstat-sn 1\nexp-cmd-sn 10\nmax-cmd-sn 2\nnext-ttt 1\n",
            "below",
        ),
        (
            "initiator i\ntarget t\ntsih 3\ncid 1\nstat-sn x\n",
            "number",
        ),
    ] {
        let e = MovedConn::from_text(bad).unwrap_err();
        assert!(e.contains(why), "{bad:?}: {e}");
    }
}

//! iSER receive path, as numatgtd's iSER transport (`target-server/src/transport/iser`) runs
//! it, without a device: the connect request's private data through `CmRequest::parse`,
//! then every received Send through `IserMessage::split` and, for iSCSI control messages,
//! `Connection::rx_pdu` of a connection in RDMA datamover mode (`set_rdma_transport` with the
//! iSER login keys); a Hello ends the connection as the driver does. What the connection
//! queues (`pop_rdma_tx`) is checked and answered: Gets with `data_arrived` (any length, in
//! parts), commands with results (READ data for Puts).
//!
//! Input: 4 bytes of CM private data; byte 4 = setup (bit 0: log in first with Linux's
//! iSER keys, so the fuzzer starts in full feature phase; bit 1: a discovery session);
//! then records: a kind byte and, for kinds that carry bytes, a big-endian u16 length and
//! the bytes (see `step`).
//!
//! Checks: no panic; in full feature phase every PDU the target sends (but the login
//! response) fits the initiator's receive buffers (`RdmaLimits::max_send_data`) and parses
//! as a target PDU;
//! Puts never announce more bytes than their payload holds; at most one Get per task is
//! open; queued output stays bounded.
#![no_main]

use iscsi_proto::pdu::{Decoded, Digests, Pdu};
use iscsi_proto::{CommandResult, Connection, Event, conn::RdmaTx};
use iser::proto::{CmRequest, IserLimits, IserLoginKeys, IserMessage};
use libfuzzer_sys::fuzz_target;
use numatgt_fuzz::{Input, TARGET, TestDir, encode, kv, login_req, open_iscsi_security_text};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

/// Linux ib_iser's operational keys (iSER keys included).
fn linux_iser_operational() -> Vec<u8> {
    kv(&[
        ("HeaderDigest", "None"),
        ("DataDigest", "None"),
        ("MaxRecvDataSegmentLength", "262144"),
        ("MaxBurstLength", "16776192"),
        ("FirstBurstLength", "262144"),
        ("ImmediateData", "Yes"),
        ("InitialR2T", "No"),
        ("MaxOutstandingR2T", "1"),
        ("RDMAExtensions", "Yes"),
        ("InitiatorRecvDataSegmentLength", "262144"),
        ("TargetRecvDataSegmentLength", "8192"),
    ])
}

/// An iSER control header (no buffers) in front of `pdu`.
fn ctrl(pdu: &[u8]) -> Vec<u8> {
    let mut m = vec![0u8; 28];
    m[0] = 0x10;
    m.extend_from_slice(pdu);
    m
}

struct State {
    conn: Connection<Vec<u8>>,
    closed: bool,
    /// Commands handed out and not completed: ITT and expected read length.
    commands: VecDeque<(u32, u32)>,
    /// Open Gets by task: (xfer, bytes still to deliver).
    gets: HashMap<u32, (u32, u32)>,
    queued: usize,
}

impl State {
    /// One received Send, as the driver handles it.
    fn receive(&mut self, msg: &[u8]) {
        if self.closed {
            return;
        }
        match IserMessage::split(msg) {
            Ok((IserMessage::Control(hdr), pdu)) => {
                self.conn.rx_pdu(pdu, hdr.remote_bufs(), &TestDir, 1000)
            }
            // the driver closes on a Hello and on an undecodable header
            Ok(_) | Err(_) => self.closed = true,
        }
        self.events();
    }

    fn events(&mut self) {
        while let Some(ev) = self.conn.poll_event() {
            match ev {
                Event::Command(cmd) => {
                    assert_eq!(cmd.data_out.len(), cmd.expected_write_len as usize);
                    self.commands.push_back((cmd.itt, cmd.expected_read_len));
                }
                Event::TaskMgmt(req) => {
                    self.conn
                        .complete_tmf(req.itt, iscsi_proto::TmfResponse::Complete);
                }
                Event::Close(_) | Event::LoggedOut => self.closed = true,
                _ => {}
            }
        }
    }

    /// Takes what the connection queued, as the driver posts it, and checks it.
    fn drain(&mut self) {
        let limit = self.conn.rdma_limits();
        while let Some(tx) = self.conn.pop_rdma_tx() {
            self.queued += 1;
            if numatgt_fuzz::trace() {
                match &tx {
                    RdmaTx::Pdu { bhs, data } => {
                        eprintln!("tx Send opcode {:#04x}, {} data bytes", bhs[0], data.len())
                    }
                    RdmaTx::Put { itt, len, .. } => eprintln!("tx Put itt {itt} {len} bytes"),
                    RdmaTx::Get {
                        itt, offset, len, ..
                    } => eprintln!("tx Get itt {itt} bytes {offset}+{len}"),
                }
            }
            match tx {
                RdmaTx::Pdu { bhs, data } => {
                    // the last login response goes to the initiator's login buffer (8 KiB)
                    let login_response = bhs[0] & 0x3f == 0x23;
                    if let Some(l) = limit.filter(|_| !login_response) {
                        assert!(
                            data.len() <= l.max_send_data as usize,
                            "a {}-byte data segment for {}-byte receive buffers",
                            data.len(),
                            l.max_send_data
                        );
                    }
                    let mut wire = bhs.to_vec();
                    wire[5..8].copy_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
                    wire.extend_from_slice(&data);
                    while wire.len() % 4 != 0 {
                        wire.push(0);
                    }
                    match Pdu::decode(&wire, 1 << 24, Digests::default()) {
                        Ok(Decoded::Complete(_)) => {}
                        other => panic!("target PDU does not parse: {other:?}"),
                    }
                }
                RdmaTx::Put { data, len, .. } => {
                    assert!(len <= data.len(), "Put of {len} bytes from {}", data.len());
                }
                RdmaTx::Get { itt, xfer, len, .. } => {
                    assert!(len > 0, "empty Get");
                    // a new Get replaces one of an ended task with the same ITT
                    self.gets.insert(itt, (xfer, len));
                }
            }
        }
        assert!(self.queued < 1_000_000, "unbounded output");
    }
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let private: [u8; 4] = inp.array();
    if CmRequest::parse(&private).is_err() {
        return; // refused at connect time: no connection
    }
    let setup = inp.u8();
    let peer: SocketAddr = "192.168.77.2:40000".parse().expect("addr");
    let local: SocketAddr = "192.168.77.1:3260".parse().expect("addr");
    let mut conn: Connection<Vec<u8>> =
        Connection::new(iscsi_proto::ConnConfig::default(), peer, local);
    let (keys, _params) = IserLoginKeys::new(IserLimits::default());
    conn.set_rdma_transport(Box::new(keys));
    let mut st = State {
        conn,
        closed: false,
        commands: VecDeque::new(),
        gets: HashMap::new(),
        queued: 0,
    };
    if setup & 1 != 0 {
        let (sec, op) = if setup & 2 != 0 {
            (
                kv(&[
                    ("InitiatorName", numatgt_fuzz::INITIATOR),
                    ("SessionType", "Discovery"),
                    ("AuthMethod", "None"),
                ]),
                kv(&[("HeaderDigest", "None"), ("DataDigest", "None")]),
            )
        } else {
            (open_iscsi_security_text(TARGET), linux_iser_operational())
        };
        st.receive(&ctrl(&encode(
            login_req(0, 1, true, 1, 0),
            &sec,
            Digests::default(),
        )));
        st.drain();
        st.receive(&ctrl(&encode(
            login_req(1, 3, true, 1, 1),
            &op,
            Digests::default(),
        )));
        st.drain();
    }
    let mut steps = 0;
    while !inp.is_empty() && steps < 256 && !st.closed {
        steps += 1;
        step(&mut st, &mut inp);
        st.drain();
    }
});

fn step(st: &mut State, inp: &mut Input<'_>) {
    match inp.u8() % 5 {
        // any received Send
        0 => {
            let len = usize::from(inp.u16() % 9000);
            let msg = inp.bytes(len).to_vec();
            st.receive(&msg);
        }
        // a control message: any BHS and data behind a header announcing buffers
        1 => {
            let flags = inp.u8() & 0x0c;
            let stags: [u8; 24] = inp.array();
            let mut m = vec![0x10 | flags, 0, 0, 0];
            m.extend_from_slice(&stags);
            let mut bhs: [u8; 48] = inp.array();
            let dlen = usize::from(inp.u16() % 9000);
            let d = inp.bytes(dlen).to_vec();
            bhs[4] = 0;
            bhs[5..8].copy_from_slice(&(d.len() as u32).to_be_bytes()[1..]);
            m.extend_from_slice(&bhs);
            m.extend_from_slice(&d);
            st.receive(&m);
        }
        // complete the oldest command (READ data of its expected length, or short)
        2 => {
            if let Some((itt, rlen)) = st.commands.pop_front() {
                let mut r = CommandResult::good();
                if rlen > 0 {
                    let n = if inp.bool() { rlen } else { rlen / 2 };
                    r.data = Some(vec![0x5a; n.min(1 << 20) as usize]);
                }
                if inp.bool() {
                    r.status = 2;
                    r.sense = vec![0x70, 0, 5, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x24, 0, 0, 0, 0, 0];
                    r.sense.resize(usize::from(inp.u8()).max(18), 0);
                }
                st.conn.complete_command(itt, r);
                st.events();
            }
        }
        // the next part of an open Get (any length) or a stale xfer
        3 => {
            let Some((&itt, &(xfer, left))) = st.gets.iter().next() else {
                return;
            };
            let n = if inp.bool() {
                left
            } else {
                u32::from(inp.u16()).min(left)
            };
            let xfer = if inp.u8() == 0 { xfer ^ 1 } else { xfer };
            let _ = st.conn.data_arrived(itt, xfer, &vec![0xa5; n as usize]);
            if left <= n {
                st.gets.remove(&itt);
            } else if let Some(g) = st.gets.get_mut(&itt) {
                g.1 = left - n;
            }
            st.events();
        }
        // a tick (login timeout, NOP-In pings)
        _ => {
            st.conn.on_tick(1000 + u64::from(inp.u32()));
            st.events();
        }
    }
}

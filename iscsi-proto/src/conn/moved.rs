//! A connection moved to another process (live upgrade): what of a full-feature byte-stream
//! connection outlives its process ([`MovedConn`]: the session, the parameters in force,
//! CID, StatSN, the command window, bytes received and not processed), when a connection
//! may be moved ([`Connection::hold_commands`], [`Connection::movable`]), taking it out
//! ([`Connection::take_moved`]) and going on with it ([`Connection::resume`]), and its text
//! form (`key value` lines) for the handover.

use std::fmt::Write as _;
use std::net::SocketAddr;

use super::framing::Framing;
use super::state::{FullFeature, State};
use super::{ConnConfig, Connection};
use crate::DataBuf;
use crate::Digest;
use crate::login::{ChapAlgorithm, ChapIdentity, SessionInfo, SessionType};
use crate::pdu::{Bhs, Digests, NopIn, RESERVED_TAG};
use crate::seq::{CmdWindow, StatSn};
use crate::text::negotiate::SessionParams;

use super::tx::TxData;

/// The state of a full-feature TCP connection of a normal session, between the process
/// that served it and the one that goes on with it. Nothing in flight: no task, no queued
/// output, no exchange half done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MovedConn {
    /// What the login established (a normal session).
    pub info: SessionInfo,
    /// The parameters in force (the login's, with later declarative Text values).
    pub params: SessionParams,
    pub cid: u16,
    /// The StatSN of the next status-bearing PDU.
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    /// The next target transfer tag.
    pub next_ttt: u32,
    /// Bytes received and not processed (the start of a PDU).
    pub pending_input: Vec<u8>,
}

impl<B: DataBuf> Connection<B> {
    /// Stops the command window from opening further: MaxCmdSN stays where it is, so once
    /// the commands the initiator may still send have arrived the window is closed
    /// (MaxCmdSN = ExpCmdSN − 1) and the connection goes quiet. Everything else goes on
    /// (Data-Out, NOP, task management).
    pub fn hold_commands(&mut self) {
        self.window.set_cap(Some(0));
    }

    /// True when the connection can be moved ([`Self::take_moved`]): a byte-stream
    /// connection of a normal session in full feature phase with no task, no output
    /// queued, no command waiting for its turn, no Text, Logout or task management
    /// exchange under way.
    pub fn movable(&self) -> bool {
        let State::FullFeature(ff) = &self.state else {
            return false;
        };
        matches!(self.framing, Framing::Stream(_))
            && !ff.discovery()
            && ff.session.rdma.is_none()
            && self.tasks.is_empty()
            && self.active == 0
            && self.window.held() == 0
            && !self.framing.has_tx()
            && ff.logout.is_none()
            && ff.tmfs.len() == 0
            && ff.text.idle()
    }

    /// Takes the connection's state out when it is [`movable`](Self::movable); the
    /// connection is closed then (no event, nothing sent). `None` (nothing changed) when
    /// it is not movable.
    pub fn take_moved(&mut self) -> Option<MovedConn> {
        if !self.movable() {
            return None;
        }
        let State::FullFeature(ff) = &self.state else {
            return None;
        };
        let pending_input = match &self.framing {
            Framing::Stream(s) => s.rx.buf[s.rx.start..s.rx.end].to_vec(),
            Framing::Rdma(_) => Vec::new(),
        };
        let moved = MovedConn {
            info: ff.session.info.clone(),
            params: ff.params.clone(),
            cid: ff.cid,
            stat_sn: self.stat_sn.current(),
            exp_cmd_sn: self.window.exp_cmd_sn(),
            max_cmd_sn: self.window.max_cmd_sn(),
            next_ttt: self.next_ttt,
            pending_input,
        };
        if let Framing::Stream(s) = &mut self.framing {
            s.rx.start = 0;
            s.rx.end = 0;
        }
        self.state.step(State::closed);
        Some(moved)
    }

    /// A connection going on from `moved` on the same socket, with `cfg` (the target's
    /// configuration) in force from `now_ms`. The window opens again: a NOP-In that wants
    /// no answer tells the initiator the new MaxCmdSN. The bytes received before the move
    /// are processed with the next [`Self::rx_commit`] (they are
    /// never a whole PDU: every whole PDU received was processed).
    pub fn resume(
        cfg: ConnConfig,
        peer: SocketAddr,
        local: SocketAddr,
        moved: MovedConn,
        now_ms: u64,
    ) -> Self {
        let mut c = Connection::new(cfg, peer, local);
        c.now = now_ms;
        c.stat_sn = StatSn::new(moved.stat_sn);
        c.window = CmdWindow::resume(
            moved.exp_cmd_sn,
            moved.max_cmd_sn,
            c.cfg.max_queued_commands.max(1),
        );
        c.next_ttt = if moved.next_ttt == RESERVED_TAG || moved.next_ttt == 0 {
            1
        } else {
            moved.next_ttt
        };
        if let Framing::Stream(s) = &mut c.framing {
            s.dg = Digests {
                header: moved.params.header_digest == Digest::Crc32c,
                data: moved.params.data_digest == Digest::Crc32c,
            };
            let n = moved.pending_input.len();
            if s.rx.buf.len() < n + 48 {
                s.rx.buf.resize(n + 48, 0);
            }
            s.rx.buf[..n].copy_from_slice(&moved.pending_input);
            s.rx.start = 0;
            s.rx.end = n;
        }
        let mut info = moved.info;
        info.params = moved.params.clone();
        c.state = State::FullFeature(Box::new(FullFeature::resumed(
            info,
            moved.params,
            moved.cid,
            &c.cfg,
            now_ms,
        )));
        c.window.update_max(0);
        let nop = NopIn {
            lun: 0,
            itt: RESERVED_TAG,
            ttt: RESERVED_TAG,
            stat_sn: c.stat_sn.current(),
            exp_cmd_sn: c.window.exp_cmd_sn(),
            max_cmd_sn: c.window.max_cmd_sn(),
        };
        c.push(&Bhs::NopIn(nop), TxData::None);
        if let State::FullFeature(ff) = &c.state {
            c.events
                .push_back(super::Event::Resumed(ff.session.info.clone()));
        }
        c
    }
}

fn digest_name(d: Digest) -> &'static str {
    match d {
        Digest::None => "None",
        Digest::Crc32c => "CRC32C",
    }
}

fn yes_no(b: bool) -> &'static str {
    if b { "Yes" } else { "No" }
}

/// Most bytes of one hexadecimal value (the pending input is at most one PDU's start).
const MAX_HEX: usize = 1 << 25;

fn hex(bytes: &[u8]) -> String {
    crate::text::binary::encode_hex(bytes)
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    crate::text::binary::decode_hex_record(s, MAX_HEX).map_err(|e| format!("{s:.40}: {e}"))
}

impl MovedConn {
    /// The state as `key value` lines (values without line breaks; names hex-free text as
    /// the initiator sent them, which the login already checked).
    pub fn to_text(&self) -> String {
        let p = &self.params;
        let mut s = String::new();
        let mut line = |k: &str, v: &dyn std::fmt::Display| {
            let _ = writeln!(s, "{k} {v}");
        };
        line("initiator", &self.info.initiator_name);
        line("target", &self.info.target_name.as_deref().unwrap_or(""));
        line("isid", &hex(&self.info.isid));
        line("tsih", &self.info.tsih);
        if let Some(c) = &self.info.chap {
            line("chap-user", &c.user);
            line("chap-algorithm", &(c.algorithm as u8));
            line("chap-mutual", &yes_no(c.mutual));
        }
        line("cid", &self.cid);
        line("stat-sn", &self.stat_sn);
        line("exp-cmd-sn", &self.exp_cmd_sn);
        line("max-cmd-sn", &self.max_cmd_sn);
        line("next-ttt", &self.next_ttt);
        line("pending-input", &hex(&self.pending_input));
        line("HeaderDigest", &digest_name(p.header_digest));
        line("DataDigest", &digest_name(p.data_digest));
        line("MaxConnections", &p.max_connections);
        line("InitialR2T", &yes_no(p.initial_r2t));
        line("ImmediateData", &yes_no(p.immediate_data));
        line(
            "TargetMaxRecvDataSegmentLength",
            &p.target_max_recv_data_segment_length,
        );
        line(
            "MaxRecvDataSegmentLength",
            &p.initiator_max_recv_data_segment_length,
        );
        line("MaxBurstLength", &p.max_burst_length);
        line("FirstBurstLength", &p.first_burst_length);
        line("DefaultTime2Wait", &p.default_time2wait);
        line("DefaultTime2Retain", &p.default_time2retain);
        line("MaxOutstandingR2T", &p.max_outstanding_r2t);
        line("DataPDUInOrder", &yes_no(p.data_pdu_in_order));
        line("DataSequenceInOrder", &yes_no(p.data_sequence_in_order));
        line("ErrorRecoveryLevel", &p.error_recovery_level);
        if let Some(a) = &p.initiator_alias {
            line("InitiatorAlias", a);
        }
        if let Some(a) = &p.target_alias {
            line("TargetAlias", a);
        }
        line("TargetPortalGroupTag", &p.target_portal_group_tag);
        s
    }

    /// Reads [`Self::to_text`]'s lines back. Unknown keys are refused (a format that
    /// changed is a new handover format version, not something to guess at).
    pub fn from_text(text: &str) -> Result<MovedConn, String> {
        let mut p = SessionParams::default();
        let mut info = SessionInfo {
            session_type: SessionType::Normal,
            initiator_name: String::new(),
            target_name: None,
            isid: [0; 6],
            tsih: 0,
            params: SessionParams::default(),
            chap: None,
        };
        let mut chap: (Option<String>, Option<ChapAlgorithm>, bool) = (None, None, false);
        let (mut cid, mut stat_sn, mut exp, mut max, mut ttt) = (None, None, None, None, None);
        let mut pending_input = Vec::new();
        fn num<T: std::str::FromStr>(k: &str, v: &str) -> Result<T, String> {
            v.parse().map_err(|_| format!("{k}: not a number: {v:?}"))
        }
        fn flag(k: &str, v: &str) -> Result<bool, String> {
            match v {
                "Yes" => Ok(true),
                "No" => Ok(false),
                _ => Err(format!("{k}: neither Yes nor No: {v:?}")),
            }
        }
        fn digest(k: &str, v: &str) -> Result<Digest, String> {
            match v {
                "None" => Ok(Digest::None),
                "CRC32C" => Ok(Digest::Crc32c),
                _ => Err(format!("{k}: unknown digest {v:?}")),
            }
        }
        for l in text.lines().filter(|l| !l.is_empty()) {
            let (k, v) = l.split_once(' ').unwrap_or((l, ""));
            match k {
                "initiator" => info.initiator_name = v.to_string(),
                "target" => info.target_name = Some(v.to_string()).filter(|t| !t.is_empty()),
                "isid" => {
                    info.isid = unhex(v)?
                        .try_into()
                        .map_err(|_| format!("isid: not 6 bytes: {v:?}"))?
                }
                "tsih" => info.tsih = num(k, v)?,
                "chap-user" => chap.0 = Some(v.to_string()),
                "chap-algorithm" => {
                    let n: u64 = num(k, v)?;
                    chap.1 = Some(
                        ChapAlgorithm::from_code(n)
                            .ok_or_else(|| format!("chap-algorithm: unknown {n}"))?,
                    )
                }
                "chap-mutual" => chap.2 = flag(k, v)?,
                "cid" => cid = Some(num(k, v)?),
                "stat-sn" => stat_sn = Some(num(k, v)?),
                "exp-cmd-sn" => exp = Some(num(k, v)?),
                "max-cmd-sn" => max = Some(num(k, v)?),
                "next-ttt" => ttt = Some(num(k, v)?),
                "pending-input" => pending_input = unhex(v)?,
                "HeaderDigest" => p.header_digest = digest(k, v)?,
                "DataDigest" => p.data_digest = digest(k, v)?,
                "MaxConnections" => p.max_connections = num(k, v)?,
                "InitialR2T" => p.initial_r2t = flag(k, v)?,
                "ImmediateData" => p.immediate_data = flag(k, v)?,
                "TargetMaxRecvDataSegmentLength" => {
                    p.target_max_recv_data_segment_length = num(k, v)?
                }
                "MaxRecvDataSegmentLength" => p.initiator_max_recv_data_segment_length = num(k, v)?,
                "MaxBurstLength" => p.max_burst_length = num(k, v)?,
                "FirstBurstLength" => p.first_burst_length = num(k, v)?,
                "DefaultTime2Wait" => p.default_time2wait = num(k, v)?,
                "DefaultTime2Retain" => p.default_time2retain = num(k, v)?,
                "MaxOutstandingR2T" => p.max_outstanding_r2t = num(k, v)?,
                "DataPDUInOrder" => p.data_pdu_in_order = flag(k, v)?,
                "DataSequenceInOrder" => p.data_sequence_in_order = flag(k, v)?,
                "ErrorRecoveryLevel" => p.error_recovery_level = num(k, v)?,
                "InitiatorAlias" => p.initiator_alias = Some(v.to_string()),
                "TargetAlias" => p.target_alias = Some(v.to_string()),
                "TargetPortalGroupTag" => p.target_portal_group_tag = num(k, v)?,
                _ => return Err(format!("unknown key {k:?}")),
            }
        }
        if info.initiator_name.is_empty() || info.target_name.is_none() {
            return Err("no initiator or target name".into());
        }
        if info.tsih == 0 {
            return Err("no TSIH".into());
        }
        let missing = |what: &str| format!("no {what}");
        if let (Some(user), Some(algorithm)) = (chap.0, chap.1) {
            info.chap = Some(ChapIdentity {
                user,
                algorithm,
                mutual: chap.2,
            });
        }
        let exp_cmd_sn: u32 = exp.ok_or_else(|| missing("exp-cmd-sn"))?;
        let max_cmd_sn: u32 = max.ok_or_else(|| missing("max-cmd-sn"))?;
        if crate::seq::sn_lt(max_cmd_sn, exp_cmd_sn.wrapping_sub(1)) {
            return Err(format!(
                "max-cmd-sn {max_cmd_sn} below exp-cmd-sn {exp_cmd_sn} - 1"
            ));
        }
        info.params = p.clone();
        Ok(MovedConn {
            info,
            params: p,
            cid: cid.ok_or_else(|| missing("cid"))?,
            stat_sn: stat_sn.ok_or_else(|| missing("stat-sn"))?,
            exp_cmd_sn,
            max_cmd_sn,
            next_ttt: ttt.ok_or_else(|| missing("next-ttt"))?,
            pending_input,
        })
    }
}

//! tgtd's `show` layouts, byte for byte (tgt-admin parses them with regexes): target list
//! with I_T nexus, LUN, account and ACL sections, a target's parameter list, connections,
//! portals, LLDs, the system, and the statistics table. LUN 0 is tgtd's controller LUN: a
//! target without a real LUN 0 shows the same synthetic entry tgtd does (`Backing store
//! path: None`, which tgt-admin skips).

use std::fmt::Write as _;

use iscsi_proto::{ConnConfig, Digest};

use crate::registry::{Lun, Registry, SessionView, Target};

/// tgt's size rounding: `((size/512) - (((size/512)/625) - 974)) / 1950` MB.
pub fn tgt_size_mb(size: u64) -> i64 {
    let sectors = (size / 512) as i64;
    (sectors - ((sectors / 625) - 974)) / 1950
}

const CONTROLLER_LUN0: &str = "        LUN: 0
            Type: controller
            SCSI ID: IET     {tid:04x}0000
            SCSI SN: beaf{tid}0
            Size: 0 MB, Block size: 1
            Online: Yes
            Removable media: No
            Prevent removal: No
            Readonly: No
            SWP: No
            Thin-provisioning: No
            Backing store type: null
            Backing store path: None
            Backing store flags: 
";

fn yes_no(b: bool) -> &'static str {
    if b { "Yes" } else { "No" }
}

fn lun_entry(out: &mut String, lun: &Lun, alua: &config::AluaConfig) {
    let m = lun.meta.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let p = lun.scsi.params();
    let size = p.num_blocks.saturating_mul(u64::from(p.block_size));
    // tgtd 1.0.85 shows a cd's block size as 1 (its 2048-byte sectors are MMC's), and a
    // tape drive's size as 0 with blocks of 1
    let (kind, size, block_size) = match p.device_type {
        scsi::DeviceType::Disk => ("disk", size, p.block_size),
        scsi::DeviceType::Cd => ("cd/dvd", size, 1),
        scsi::DeviceType::Tape => ("tape", 0, 1),
        scsi::DeviceType::Changer => ("changer", 0, 1),
        // tgtd knows no size of a passed-through device
        scsi::DeviceType::Passthrough => ("passthrough", 0, 1),
    };
    let removable = m.removable
        || !matches!(
            p.device_type,
            scsi::DeviceType::Disk | scsi::DeviceType::Passthrough
        );
    let _ = write!(
        out,
        "        LUN: {}\n            Type: {}\n            SCSI ID: {}\n            SCSI SN: {}\n            Size: {} MB, Block size: {}\n            Online: {}\n            Removable media: {}\n            Prevent removal: No\n            Readonly: {}\n            SWP: No\n            Thin-provisioning: {}\n            Backing store type: {}\n            Backing store path: {}\n            Backing store flags: {}\n",
        lun.number,
        kind,
        m.scsi_id,
        m.scsi_sn,
        tgt_size_mb(size),
        block_size,
        yes_no(m.online),
        yes_no(removable),
        yes_no(p.readonly),
        yes_no(m.thin_provisioning),
        m.bstype,
        m.path,
        m.bsoflags,
    );
    // numatgt: several gateways export the target (tgtd's output has no such line)
    if !alua.peers.is_empty() {
        let _ = writeln!(
            out,
            "            ALUA: owner group {}, this gateway group {}: {}",
            m.alua_owner,
            alua.group,
            lun.scsi.access_state().name()
        );
    }
    // numatgt: the LUN's QoS limits, when it has any, as tgtadm's `--params` set them
    let q = lun.qos.limits();
    if !q.is_unlimited() {
        let _ = writeln!(out, "            QoS: {}", qos_text(&q));
    }
}

/// QoS limits as tgtadm's `--params` say them (`none` when unlimited): `show` and the log.
pub(crate) fn qos_text(q: &config::Qos) -> String {
    let params: Vec<String> = config::qos_params(q)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if params.is_empty() {
        "none".into()
    } else {
        params.join(",")
    }
}

/// One target's block in `--op show --mode target`.
pub fn target(out: &mut String, t: &Target, sessions: &[SessionView]) {
    let mgmt = t.mgmt().clone();
    let cc = t.conn_config();
    let _ = writeln!(out, "Target {}: {}", t.tid, t.iqn);
    let _ = writeln!(
        out,
        "    System information:\n        Driver: {}",
        t.driver.as_str()
    );
    let _ = writeln!(out, "        State: {}", mgmt.state.as_str());
    if cc.nop_interval_ms != 0 {
        let _ = writeln!(out, "        Nop interval: {}", cc.nop_interval_ms / 1000);
        let _ = writeln!(out, "        Nop count: {}", cc.nop_count);
    }
    if let Some(n) = t.max_sessions() {
        let _ = writeln!(out, "        Max sessions: {n}");
    }
    // numatgt: the ALUA settings, when the target has any (tgtd's output has no such line)
    let alua = t.alua();
    if *alua != config::AluaConfig::default() {
        let _ = writeln!(out, "        ALUA: {}", alua_line(&alua));
    }
    out.push_str("    I_T nexus information:\n");
    for s in sessions {
        let _ = writeln!(out, "        I_T nexus: {}", s.tsih);
        let _ = writeln!(
            out,
            "            Initiator: {} alias: {}",
            s.initiator,
            s.alias.as_deref().unwrap_or("none")
        );
        let _ = writeln!(out, "            Connection: {}", s.cid);
        let _ = writeln!(out, "                {}", address_line(s));
    }
    out.push_str("    LUN information:\n");
    let luns = t.lun_set();
    if !luns.map.contains_key(&0) {
        out.push_str(
            &CONTROLLER_LUN0
                .replace("{tid:04x}", &format!("{:04x}", t.tid))
                .replace("{tid}", &t.tid.to_string()),
        );
    }
    let alua = t.alua();
    for lun in luns.map.values() {
        lun_entry(out, lun, &alua);
    }
    out.push_str("    Account information:\n");
    for u in &mgmt.auth.incoming {
        let _ = writeln!(out, "        {u}");
    }
    if let Some(u) = &mgmt.auth.outgoing {
        let _ = writeln!(out, "        {u} (outgoing)");
    }
    out.push_str("    ACL information:\n");
    for (text, _) in &mgmt.acl.addresses {
        let _ = writeln!(out, "        {text}");
    }
    for n in &mgmt.acl.names {
        let _ = writeln!(out, "        {n}");
    }
}

/// The connection's address as tgtd's transports show it: `IP Address: …` over TCP,
/// `RDMA IP Address: …` over iSER.
fn address_line(s: &SessionView) -> String {
    match s.transport {
        config::Driver::Iscsi => format!("IP Address: {}", s.peer.ip()),
        config::Driver::Iser => format!("RDMA IP Address: {}", s.peer.ip()),
    }
}

/// `--lld L --op show --mode target`: the targets of LLD `lld`, by tid (tgtd lists the
/// targets per LLD).
pub fn targets(reg: &Registry, lld: config::Driver) -> String {
    let mut ts = reg.targets();
    ts.retain(|t| t.driver == lld);
    ts.sort_by_key(|t| t.tid);
    let mut out = String::new();
    for t in ts {
        let sessions = reg.sessions_of(&t.iqn);
        target(&mut out, &t, &sessions);
    }
    out
}

fn digests(d: &[Digest]) -> String {
    d.iter()
        .map(|d| match d {
            Digest::None => "None",
            Digest::Crc32c => "CRC32C",
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The fixed session keys numatgt shows with their only supported value.
pub const FIXED_KEYS: [(&str, &str); 9] = [
    ("DataPDUInOrder", "Yes"),
    ("DataSequenceInOrder", "Yes"),
    ("ErrorRecoveryLevel", "0"),
    ("IFMarker", "No"),
    ("OFMarker", "No"),
    ("OFMarkInt", "Reject"),
    ("IFMarkInt", "Reject"),
    ("MaxConnections", "1"),
    ("MaxOutstandingUnexpectedPDUs", "0"),
];

/// `--op show --mode target --tid N`: the target's parameters, in tgtd's order.
/// The peers as `G:P` joined by `sep`, or `none`.
fn peers_text(a: &config::AluaConfig, sep: &str) -> String {
    if a.peers.is_empty() {
        return "none".into();
    }
    let peers: Vec<String> = a
        .peers
        .iter()
        .map(|p| format!("{}:{}", p.group, p.relative_port))
        .collect();
    peers.join(sep)
}

/// `group 2, relative port 2, peers 1:1 3:7, non-owner state standby` (`auto`: by LUN kind).
fn alua_line(a: &config::AluaConfig) -> String {
    format!(
        "group {}, relative port {}, peers {}, non-owner state {}",
        a.group,
        a.relative_port,
        peers_text(a, " "),
        a.non_owner_state.map_or("auto", |s| s.as_str())
    )
}

/// The ALUA settings as `--op update` names them, for `--op show --tid N`.
fn alua_params(a: &config::AluaConfig) -> Vec<(&'static str, String)> {
    vec![
        ("alua_group", a.group.to_string()),
        ("alua_relative_port", a.relative_port.to_string()),
        ("alua_peers", peers_text(a, ",")),
        (
            "alua_non_owner_state",
            a.non_owner_state.map_or("auto", |s| s.as_str()).to_string(),
        ),
    ]
}

pub fn target_params(t: &Target) -> String {
    let cc: ConnConfig = t.conn_config();
    let extra = t.mgmt().extra.clone();
    let get = |k: &str, dflt: String| -> String {
        extra
            .iter()
            .rev()
            .find(|(n, _)| n.eq_ignore_ascii_case(k))
            .map(|(_, v)| v.clone())
            .unwrap_or(dflt)
    };
    let fixed = |k: &str| {
        FIXED_KEYS
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
            .unwrap_or_default()
    };
    let rows: Vec<(&str, String)> = vec![
        ("nop_interval", (cc.nop_interval_ms / 1000).to_string()),
        ("nop_count", cc.nop_count.to_string()),
        (
            "MaxRecvDataSegmentLength",
            cc.max_recv_data_segment_length.to_string(),
        ),
        ("HeaderDigest", digests(&cc.header_digest)),
        ("DataDigest", digests(&cc.data_digest)),
        ("InitialR2T", yes_no(cc.initial_r2t).into()),
        ("MaxOutstandingR2T", cc.max_outstanding_r2t.to_string()),
        ("ImmediateData", yes_no(cc.immediate_data).into()),
        ("FirstBurstLength", cc.first_burst_length.to_string()),
        ("MaxBurstLength", cc.max_burst_length.to_string()),
        ("DataPDUInOrder", fixed("DataPDUInOrder")),
        ("DataSequenceInOrder", fixed("DataSequenceInOrder")),
        ("ErrorRecoveryLevel", fixed("ErrorRecoveryLevel")),
        ("IFMarker", fixed("IFMarker")),
        ("OFMarker", fixed("OFMarker")),
        ("DefaultTime2Wait", cc.default_time2wait.to_string()),
        ("DefaultTime2Retain", cc.default_time2retain.to_string()),
        ("OFMarkInt", fixed("OFMarkInt")),
        ("IFMarkInt", fixed("IFMarkInt")),
        ("MaxConnections", fixed("MaxConnections")),
        ("RDMAExtensions", get("RDMAExtensions", "Yes".into())),
        (
            "TargetRecvDataSegmentLength",
            get("TargetRecvDataSegmentLength", "262144".into()),
        ),
        (
            "InitiatorRecvDataSegmentLength",
            get("InitiatorRecvDataSegmentLength", "262144".into()),
        ),
        (
            "MaxOutstandingUnexpectedPDUs",
            fixed("MaxOutstandingUnexpectedPDUs"),
        ),
        (
            "MaxXmitDataSegmentLength",
            get("MaxXmitDataSegmentLength", "8192".into()),
        ),
        ("MaxQueueCmd", cc.max_queued_commands.to_string()),
    ];
    // numatgt: the ALUA settings, when the target has any (not in tgtd's list)
    let alua = t.alua();
    let mut rows = rows;
    if *alua != config::AluaConfig::default() {
        rows.extend(alua_params(&alua));
    }
    let mut out = String::new();
    for (k, v) in rows {
        let _ = writeln!(out, "{k}={v}");
    }
    out
}

/// `--op show --mode conn --tid N`.
pub fn connections(sessions: &[SessionView]) -> String {
    let mut out = String::new();
    for s in sessions {
        let _ = writeln!(out, "Session: {}", s.tsih);
        let _ = writeln!(out, "    Connection: {}", s.cid);
        let _ = writeln!(out, "        Initiator: {}", s.initiator);
        let _ = writeln!(out, "        {}", address_line(s));
    }
    out
}

/// `--op show --mode portal` (newest first, as tgtd).
pub fn portals(reg: &Registry) -> String {
    portal_list(&reg.portals())
}

/// Portals in `--op show --mode portal`'s layout, newest (last) first.
pub fn portal_list(portals: &[crate::registry::Portal]) -> String {
    let mut out = String::new();
    for p in portals.iter().rev() {
        let _ = writeln!(
            out,
            "Portal: {},{}",
            p.addr,
            crate::registry::PORTAL_GROUP_TAG
        );
    }
    out
}

/// `--op show --mode lld`.
pub fn llds(reg: &Registry) -> String {
    let mut ts = reg.targets();
    ts.sort_by_key(|t| t.tid);
    let mut out = String::from("LLDs:\n");
    for (d, state) in [
        (config::Driver::Iscsi, "ready"),
        (config::Driver::Iser, crate::rdma_probe::iser_state()),
    ] {
        let _ = writeln!(out, "    {}: {state}", d.as_str());
        for t in ts.iter().filter(|t| t.driver == d) {
            let _ = writeln!(out, "        Target {}: {}", t.tid, t.iqn);
        }
    }
    out
}

/// `--op show --mode sys`.
pub fn system(reg: &Registry) -> String {
    let st = *reg.system();
    let mut out = String::from("System:\n");
    let _ = writeln!(
        out,
        "    State: {}",
        if st.offline { "offline" } else { "ready" }
    );
    let _ = writeln!(out, "    debug: {}", if st.debug { "on" } else { "off" });
    let _ = writeln!(
        out,
        "LLDs:\n    iscsi: ready\n    iser: {}",
        crate::rdma_probe::iser_state()
    );
    out.push_str("Backing stores:\n    rdwr (bsoflags sync:direct)\n    aio\n");
    out.push_str("Device types:\n    disk\n");
    let disc = reg.accounts().discovery.clone();
    if !disc.incoming.is_empty() || disc.outgoing.is_some() {
        out.push_str("    Account information:\n");
        for u in &disc.incoming {
            let _ = write!(out, "\n    {u}");
        }
        if let Some(u) = &disc.outgoing {
            let _ = write!(out, "\n    {u} (outgoing)");
        }
        out.push('\n');
    }
    out.push_str(
        "iSNS:\n    iSNS=Off\n    iSNSServerIP=\n    iSNSServerPort=3205\n    iSNSAccessControl=Off\n",
    );
    // numatgt's own section: the limits in force (`--op update --mode sys --name K`)
    let l = reg.limits.settings();
    let _ = write!(
        out,
        "Limits:\n    MaxSessions={}\n    MaxConnections={}\n    LoginTimeout={}\n    MaxMgmtClients={}\n",
        l.max_sessions, l.max_connections, l.login_timeout, l.max_mgmt_clients
    );
    out
}

/// The header of `--op stat`.
pub const STAT_HEADER: &str = "tgt lun sid rd_subm(bytes,cmds) rd_done(bytes,cmds) wr_subm(bytes,cmds) wr_done(bytes,cmds) errs\n";

/// What one `--op stat` row shows: bytes and commands of reads and writes received
/// (submitted) and answered (done), and commands that did not end GOOD.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StatRow {
    pub rd_subm: (u64, u64),
    pub rd_done: (u64, u64),
    pub wr_subm: (u64, u64),
    pub wr_done: (u64, u64),
    pub errs: u64,
}

impl StatRow {
    fn of(t: &crate::io_stats::IoTotals) -> StatRow {
        use crate::io_stats::c;
        StatRow {
            rd_subm: (t.c[c::RD_SUBM_BYTES], t.c[c::RD_SUBM]),
            rd_done: (t.c[c::RD_BYTES], t.c[c::RD_DONE]),
            wr_subm: (t.c[c::WR_SUBM_BYTES], t.c[c::WR_SUBM]),
            wr_done: (t.c[c::WR_BYTES], t.c[c::WR_DONE]),
            errs: t.c[c::ERRORS],
        }
    }
}

/// One `--op stat` row, in tgtd's column layout.
pub fn stat_row(out: &mut String, tid: u32, lun: u64, sid: u16, r: &StatRow) {
    let _ = writeln!(
        out,
        "{:3} {:3} {:3} {:12} {:6} {:12} {:6} {:12} {:6} {:12} {:6} {:4}",
        tid,
        lun,
        sid,
        r.rd_subm.0,
        r.rd_subm.1,
        r.rd_done.0,
        r.rd_done.1,
        r.wr_subm.0,
        r.wr_subm.1,
        r.wr_done.0,
        r.wr_done.1,
        r.errs
    );
}

/// `--op stat --mode target --tid N` (or one LUN of it): one row per LUN and logged-in
/// session, with what that session's connections counted on the LUN.
pub fn stats(reg: &Registry, t: &Target, only_lun: Option<u64>) -> String {
    let mut out = String::from(STAT_HEADER);
    let sessions = reg.sessions_of(&t.iqn);
    let luns = t.lun_set();
    let mut numbers: Vec<u64> = luns.numbers.clone();
    if !luns.map.contains_key(&0) {
        numbers.insert(0, 0);
    }
    for lun in numbers {
        if only_lun.is_some_and(|l| l != lun) {
            continue;
        }
        let counted = luns
            .map
            .get(&lun)
            .map(|l| l.stats.by_session())
            .unwrap_or_default();
        for s in &sessions {
            let row = counted
                .iter()
                .find(|(tsih, _)| *tsih == s.tsih)
                .map(|(_, t)| StatRow::of(t))
                .unwrap_or_default();
            stat_row(&mut out, t.tid, lun, s.tsih, &row);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg_with(drivers: &[config::Driver]) -> Registry {
        let ts = drivers
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let tid = i as u32 + 1;
                std::sync::Arc::new(
                    Target::new(
                        tid,
                        format!("iqn.2026-11.org.numatgt:t{tid}"),
                        None,
                        Default::default(),
                        ConnConfig::default(),
                        Default::default(),
                    )
                    .with_driver(*d),
                )
            })
            .collect();
        Registry::new(ts, Vec::new(), ConnConfig::default())
    }

    fn view(transport: config::Driver) -> SessionView {
        SessionView {
            tsih: 3,
            initiator: "iqn.i".into(),
            alias: None,
            peer: "10.0.0.1:40000".parse().expect("addr"),
            cid: 0,
            owner: crate::conn_id::ConnId {
                thread: 0,
                slot: 0,
                generation: 0,
            },
            transport,
        }
    }

    #[test]
    fn target_shows_its_driver_and_transport() {
        use config::Driver::{Iscsi, Iser};
        let reg = reg_with(&[Iscsi, Iser]);
        let all = reg.targets();
        let mut out = String::new();
        target(&mut out, &all[1], &[view(Iser)]);
        assert!(
            out.starts_with("Target 2: iqn.2026-11.org.numatgt:t2\n    System information:\n        Driver: iser\n        State: ready\n"),
            "{out}"
        );
        assert!(
            out.contains("            Connection: 0\n                RDMA IP Address: 10.0.0.1\n"),
            "{out}"
        );
        out.clear();
        target(&mut out, &all[0], &[view(Iscsi)]);
        assert!(out.contains("        Driver: iscsi\n"), "{out}");
        assert!(
            out.contains("            Connection: 0\n                IP Address: 10.0.0.1\n"),
            "{out}"
        );
        assert_eq!(
            connections(&[view(Iser)]),
            "Session: 3\n    Connection: 0\n        Initiator: iqn.i\n        RDMA IP Address: 10.0.0.1\n"
        );
    }

    #[test]
    fn target_lists_are_per_lld() {
        use config::Driver::{Iscsi, Iser};
        let reg = reg_with(&[Iscsi, Iser, Iscsi]);
        let iscsi = targets(&reg, Iscsi);
        let iser = targets(&reg, Iser);
        assert!(
            iscsi.contains("Target 1: ") && iscsi.contains("Target 3: "),
            "{iscsi}"
        );
        assert!(!iscsi.contains("Target 2: "), "{iscsi}");
        assert!(
            iser.starts_with("Target 2: ") && !iser.contains("Target 1: "),
            "{iser}"
        );
        let l = llds(&reg);
        let state = crate::rdma_probe::iser_state();
        assert_eq!(
            l,
            format!(
                "LLDs:\n    iscsi: ready\n        Target 1: iqn.2026-11.org.numatgt:t1\n        Target 3: iqn.2026-11.org.numatgt:t3\n    iser: {state}\n        Target 2: iqn.2026-11.org.numatgt:t2\n"
            )
        );
    }

    #[test]
    fn iser_portal_list_layout() {
        let p = |a: &str| crate::registry::Portal {
            addr: a.parse().expect("addr"),
            nop_interval: None,
            nop_count: None,
        };
        assert_eq!(
            portal_list(&[p("0.0.0.0:3260"), p("[::1]:3261")]),
            "Portal: [::1]:3261,1\nPortal: 0.0.0.0:3260,1\n"
        );
        assert_eq!(portal_list(&[]), "");
    }

    #[test]
    fn tgt_size_rounding() {
        assert_eq!(tgt_size_mb(1 << 30), 1074);
        assert_eq!(tgt_size_mb(10 << 20), 10);
        assert_eq!(tgt_size_mb(0), 0);
    }

    #[test]
    fn stat_row_layout() {
        let mut s = String::new();
        stat_row(&mut s, 1, 0, 2, &StatRow::default());
        assert_eq!(
            s,
            "  1   0   2            0      0            0      0            0      0            0      0    0\n"
        );
        s.clear();
        let r = StatRow {
            rd_subm: (8192, 2),
            rd_done: (4096, 1),
            wr_subm: (512, 1),
            wr_done: (512, 1),
            errs: 1,
        };
        stat_row(&mut s, 1, 2, 3, &r);
        assert_eq!(
            s,
            "  1   2   3         8192      2         4096      1          512      1          512      1    1\n"
        );
    }
}

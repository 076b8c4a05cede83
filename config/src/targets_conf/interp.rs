//! What the directives of targets.conf mean, following tgt-admin: global
//! directives, `<target>` blocks (ACLs, CHAP accounts, iSCSI keys, tids) and
//! the collection of their LUN directives (turned into LUNs by
//! [`super::luns`]), QoS defaults (`qos_*`, as tgtadm names them), producing the raw YAML structures so that the same
//! validation applies. Records where every value came from ([`Locations`])
//! and collects warnings for directives accepted without effect.

use std::collections::BTreeSet;

use super::locations::Locations;
use super::syntax::{Loc, Node};
use crate::alua::RawAlua;
use crate::error::ConfigError;
use crate::qos::RawQos;
use crate::raw::{
    List, RawAccount, RawAllow, RawAuth, RawConfig, RawIscsi, RawTarget, Word, YesNo,
};

pub(super) type R<T> = Result<T, ConfigError>;

/// The importer's state: options, warnings, accounts, locations.
pub(crate) struct Interp {
    ignore_errors: bool,
    pub warnings: Vec<String>,
    pub locations: Locations,
    accounts: Vec<(String, String, Loc)>,
}

/// A LUN-level directive: canonical key, value, where, and the spelling used.
#[derive(Debug, Clone)]
pub(super) struct Setting {
    pub key: &'static str,
    pub value: String,
    pub loc: Loc,
    pub name: String,
}

/// A backing-store or direct-store with its own settings.
#[derive(Debug)]
pub(super) struct Store {
    pub path: String,
    pub direct: bool,
    pub loc: Loc,
    pub settings: Vec<Setting>,
}

impl Store {
    pub(super) fn kind(&self) -> &'static str {
        if self.direct {
            "direct-store"
        } else {
            "backing-store"
        }
    }
}

/// LUN-level directives (canonical spelling). Names are matched ignoring case
/// and treating `_` and `-` alike.
const LUN_KEYS: &[&str] = &[
    "lun",
    "write-cache",
    "scsi_id",
    "scsi_sn",
    "vendor_id",
    "product_id",
    "product_rev",
    "sense_format",
    "removable",
    "path",
    "readonly",
    "online",
    "thin_provisioning",
    "device-type",
    "bs-type",
    "bsopts",
    "bsoflags",
    "allow-in-use",
    "block-size",
    "lbppbe",
    "la_lba",
    "optimal_xfer_gran",
    "optimal_xfer_len",
    "rotation_rate",
    "params",
    "mode_page",
];

/// iSCSI session keys tgt-admin passes to `tgtadm --op update --mode target`.
const ISCSI_KEYS: &[&str] = &[
    "MaxRecvDataSegmentLength",
    "MaxXmitDataSegmentLength",
    "HeaderDigest",
    "DataDigest",
    "InitialR2T",
    "MaxOutstandingR2T",
    "ImmediateData",
    "FirstBurstLength",
    "MaxBurstLength",
    "DataPDUInOrder",
    "DataSequenceInOrder",
    "ErrorRecoveryLevel",
    "IFMarker",
    "OFMarker",
    "DefaultTime2Wait",
    "DefaultTime2Retain",
    "OFMarkInt",
    "IFMarkInt",
    "MaxConnections",
    "MaxQueueCmd",
];

/// Other target-level directives (normalised spelling).
const TARGET_KEYS: &[&str] = &[
    "backing-store",
    "direct-store",
    "driver",
    "state",
    "initiator-address",
    "initiator-name",
    "incominguser",
    "outgoinguser",
    "controller-tid",
    "nop-interval",
    "nop-count",
    "alua-group",
    "alua-relative-port",
    "alua-peers",
    "alua-non-owner-state",
];

pub(super) fn norm(name: &str) -> String {
    name.to_ascii_lowercase().replace('_', "-")
}

fn lun_key(name: &str) -> Option<&'static str> {
    let n = norm(name);
    LUN_KEYS.iter().copied().find(|k| norm(k) == n)
}

/// A QoS directive (`qos_iops`, ...: tgtadm's parameter names), canonical spelling.
pub(super) fn qos_key(name: &str) -> Option<&'static str> {
    crate::qos::param_name(name)
}

fn iscsi_key(name: &str) -> Option<&'static str> {
    ISCSI_KEYS
        .iter()
        .copied()
        .find(|k| k.eq_ignore_ascii_case(name))
}

/// Values tgt accepts for a flag: 0/1, yes/no, on/off, true/false.
pub(super) fn flag(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "yes" | "on" | "true" => Some(true),
        "0" | "no" | "off" | "false" => Some(false),
        _ => None,
    }
}

pub(super) fn number(v: &str) -> Result<u64, String> {
    let t = v.trim();
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse::<u64>(),
    };
    parsed.map_err(|_| format!("expected a number (got {v:?})"))
}

pub(super) fn err_at(loc: &Loc, directive: &str, msg: impl Into<String>) -> ConfigError {
    ConfigError::new(&loc.file, Some(loc.line), None, directive, msg)
}

fn warn_text(loc: &Loc, directive: &str, msg: &str) -> String {
    format!("{}:{}: {directive}: {msg}", loc.file, loc.line)
}

fn list(items: Vec<String>) -> List {
    List {
        items,
        single: false,
    }
}

impl Interp {
    pub(crate) fn new(origin: &str) -> Self {
        Interp {
            ignore_errors: false,
            warnings: Vec::new(),
            locations: Locations::new(origin),
            accounts: Vec::new(),
        }
    }

    pub(crate) fn ignore_errors(&self) -> bool {
        self.ignore_errors
    }

    /// An error, or with `ignore-errors yes` a warning (the directive is skipped).
    pub(super) fn fail(&mut self, e: ConfigError) -> R<()> {
        if self.ignore_errors {
            self.warnings
                .push(format!("{e} (skipped: ignore-errors yes)"));
            Ok(())
        } else {
            Err(e)
        }
    }

    pub(super) fn warn(&mut self, loc: &Loc, directive: &str, msg: &str) {
        self.warnings.push(warn_text(loc, directive, msg));
    }

    /// Adds an account; a user defined again keeps its first secret, as tgt-admin does.
    fn account(&mut self, loc: &Loc, directive: &str, value: &str) -> R<Option<String>> {
        let parts: Vec<&str> = value.split_whitespace().collect();
        let [user, password] = parts[..] else {
            self.fail(err_at(
                loc,
                directive,
                format!("expected USER PASSWORD (got {value:?})"),
            ))?;
            return Ok(None);
        };
        match self.accounts.iter().find(|(u, _, _)| u == user) {
            Some((_, p, first)) if p != password => {
                let msg = format!(
                    "account {user:?} was defined at {}:{} with another password; the first one is used",
                    first.file, first.line
                );
                self.warn(loc, directive, &msg);
            }
            Some(_) => {}
            None => {
                let k = self.accounts.len();
                self.locations.set(format!("accounts[{k}]"), loc, directive);
                self.accounts
                    .push((user.to_string(), password.to_string(), loc.clone()));
            }
        }
        Ok(Some(user.to_string()))
    }

    /// Interprets the whole tree.
    pub(crate) fn run(&mut self, nodes: &[Node]) -> R<RawConfig> {
        // ignore-errors applies to the whole file wherever it is written.
        for n in nodes {
            if let Node::Directive { name, value, .. } = n {
                if norm(name) == "ignore-errors" && flag(value) == Some(true) {
                    self.ignore_errors = true;
                }
            }
        }
        let mut default_driver: Option<(String, Loc)> = None;
        let mut control_port: Option<Loc> = None;
        let mut disc_in: Vec<String> = Vec::new();
        let mut disc_out: Option<String> = None;
        let mut targets: Vec<(&str, &Loc, &[Node])> = Vec::new();
        for n in nodes {
            match n {
                Node::Block {
                    name,
                    arg,
                    children,
                    loc,
                } if norm(name) == "target" => {
                    if arg.is_empty() {
                        self.fail(err_at(loc, "target", "<target> needs a target name"))?;
                        continue;
                    }
                    if let Some((_, first, _)) =
                        targets.iter().find(|(t, _, _)| t.eq_ignore_ascii_case(arg))
                    {
                        let msg = format!(
                            "duplicate target {arg:?}, already defined at {}:{}",
                            first.file, first.line
                        );
                        self.fail(err_at(loc, "target", msg))?;
                        continue;
                    }
                    targets.push((arg, loc, children));
                }
                Node::Block { name, loc, .. } => {
                    let msg = format!("unknown block <{name}> (only <target> is allowed here)");
                    self.fail(err_at(loc, name, msg))?;
                }
                Node::Directive { name, value, loc } => {
                    let lname = norm(name);
                    match lname.as_str() {
                        "default-driver" => {
                            if let Some((_, first)) = &default_driver {
                                let msg = format!(
                                    "multiple default-driver definitions are not allowed (first at line {})",
                                    first.line
                                );
                                self.fail(err_at(loc, name, msg))?;
                            } else if crate::model::Driver::parse(value).is_none() {
                                let msg = format!("must be iscsi or iser (got {value:?})");
                                self.fail(err_at(loc, name, msg))?;
                            } else {
                                default_driver = Some((value.clone(), loc.clone()));
                            }
                        }
                        "ignore-errors" => {
                            if flag(value).is_none() {
                                self.fail(err_at(
                                    loc,
                                    name,
                                    format!("must be yes or no (got {value:?})"),
                                ))?;
                            }
                        }
                        "control-port" => {
                            if let Some(first) = &control_port {
                                let msg = format!(
                                    "multiple control-port definitions are not allowed (first at line {})",
                                    first.line
                                );
                                self.fail(err_at(loc, name, msg))?;
                            } else if let Err(m) = number(value) {
                                self.fail(err_at(loc, name, m))?;
                            } else {
                                control_port = Some(loc.clone());
                                self.warn(
                                    loc,
                                    name,
                                    "ignored: numatgtd takes the control port from -C/--control-port",
                                );
                            }
                        }
                        "isns" | "isnsserverip" | "isnsserverport" | "isnsaccesscontrol" => {
                            self.warn(loc, name, "ignored: numatgt has no iSNS client");
                        }
                        "incomingdiscoveryuser" => {
                            if let Some(u) = self.account(loc, name, value)? {
                                if !disc_in.contains(&u) {
                                    self.locations.set(
                                        format!("discovery_auth.incoming_users[{}]", disc_in.len()),
                                        loc,
                                        name,
                                    );
                                    disc_in.push(u);
                                }
                            }
                        }
                        "outgoingdiscoveryuser" => {
                            if disc_out.is_some() {
                                self.warn(loc, name, "only one is allowed; the first is used");
                            } else if let Some(u) = self.account(loc, name, value)? {
                                self.locations.set(
                                    "discovery_auth.outgoing_user".into(),
                                    loc,
                                    name,
                                );
                                disc_out = Some(u);
                            }
                        }
                        _ => {
                            let msg = if lun_key(name).is_some()
                                || iscsi_key(name).is_some()
                                || qos_key(name).is_some()
                                || TARGET_KEYS.contains(&norm(name).as_str())
                            {
                                "belongs inside a <target> block".to_string()
                            } else {
                                "unknown directive".to_string()
                            };
                            self.fail(err_at(loc, name, msg))?;
                        }
                    }
                }
            }
        }
        let driver = default_driver.map_or_else(|| "iscsi".to_string(), |(d, _)| d);
        let tids = self.assign_tids(&targets)?;
        let mut raw_targets = Vec::new();
        for ((name, loc, children), tid) in targets.iter().zip(tids) {
            let ti = raw_targets.len();
            raw_targets.push(self.target(ti, name, loc, children, tid, &driver)?);
        }
        let accounts: Vec<RawAccount> = self
            .accounts
            .iter()
            .map(|(u, p, _)| RawAccount {
                user: u.clone(),
                password: p.clone(),
            })
            .collect();
        Ok(RawConfig {
            accounts: (!accounts.is_empty()).then_some(accounts),
            discovery_auth: (!disc_in.is_empty() || disc_out.is_some()).then(|| RawAuth {
                incoming_users: (!disc_in.is_empty()).then(|| list(disc_in)),
                outgoing_user: disc_out,
            }),
            targets: Some(raw_targets),
            ..RawConfig::default()
        })
    }

    /// tids as `tgt-admin -e` gives them on a fresh tgtd: targets in sorted
    /// name order, each `controller_tid` or the previous target's tid + 1.
    fn assign_tids(&mut self, targets: &[(&str, &Loc, &[Node])]) -> R<Vec<u64>> {
        let mut order: Vec<usize> = (0..targets.len()).collect();
        order.sort_by(|&a, &b| targets[a].0.cmp(targets[b].0));
        let mut tids = vec![0u64; targets.len()];
        let mut used: BTreeSet<u64> = BTreeSet::new();
        let mut prev = 0u64;
        for i in order {
            let mut tid = prev.saturating_add(1);
            for n in targets[i].2 {
                if let Node::Directive { name, value, loc } = n {
                    if norm(name) == "controller-tid" {
                        match number(value) {
                            Ok(t) if t > 0 => {
                                tid = t;
                                self.locations.set(format!("targets[{i}].tid"), loc, name);
                            }
                            Ok(_) => self.fail(err_at(loc, name, "tid 0 is not allowed"))?,
                            Err(m) => self.fail(err_at(loc, name, m))?,
                        }
                    }
                }
            }
            if !used.insert(tid) {
                let msg = format!("tid {tid} is already used by another target");
                self.fail(err_at(targets[i].1, "target", msg))?;
            }
            tids[i] = tid;
            prev = tid;
        }
        Ok(tids)
    }

    /// One `<target>` block.
    fn target(
        &mut self,
        i: usize,
        name: &str,
        loc: &Loc,
        children: &[Node],
        tid: u64,
        default_driver: &str,
    ) -> R<RawTarget> {
        let base = format!("targets[{i}]");
        self.locations.set(base.clone(), loc, "target");
        self.locations.set(format!("{base}.iqn"), loc, "target");
        let mut t = RawTarget {
            iqn: name.to_string(),
            tid: Some(tid),
            alias: None,
            allow: None,
            iscsi: None,
            driver: Some(Word(default_driver.to_string())),
            state: None,
            incoming_users: None,
            outgoing_user: None,
            max_sessions: None,
            qos: None,
            luns: None,
            alua: None,
        };
        let mut addresses: Vec<String> = Vec::new();
        let mut initiators: Vec<String> = Vec::new();
        let mut incoming: Vec<String> = Vec::new();
        let mut iscsi = RawIscsi::default();
        let mut iscsi_seen: Vec<&'static str> = Vec::new();
        let mut defaults: Vec<Setting> = Vec::new();
        let mut qos: Vec<Setting> = Vec::new();
        let mut stores: Vec<Store> = Vec::new();
        for n in children {
            match n {
                Node::Block {
                    name: bname,
                    arg,
                    children: inner,
                    loc: bloc,
                } => {
                    let lb = norm(bname);
                    if lb != "backing-store" && lb != "direct-store" {
                        let msg = format!(
                            "unknown block <{bname}> (expected <backing-store PATH> or <direct-store PATH>)"
                        );
                        self.fail(err_at(bloc, bname, msg))?;
                        continue;
                    }
                    if arg.is_empty() {
                        self.fail(err_at(bloc, bname, "missing path"))?;
                        continue;
                    }
                    let mut settings = Vec::new();
                    for c in inner {
                        match c {
                            Node::Block {
                                name: cn, loc: cl, ..
                            } => {
                                let msg = format!("<{cn}> is not allowed inside <{bname}>");
                                self.fail(err_at(cl, cn, msg))?;
                            }
                            Node::Directive {
                                name: cn,
                                value,
                                loc: cl,
                            } => match lun_key(cn).or_else(|| qos_key(cn)) {
                                Some(key) => {
                                    self.push_setting(&mut settings, key, cn, value, cl)?
                                }
                                None => {
                                    let msg = if iscsi_key(cn).is_some() {
                                        "is a target-level directive, not allowed inside a LUN block"
                                    } else {
                                        "unknown directive"
                                    };
                                    self.fail(err_at(cl, cn, msg))?;
                                }
                            },
                        }
                    }
                    stores.push(Store {
                        path: arg.clone(),
                        direct: lb == "direct-store",
                        loc: bloc.clone(),
                        settings,
                    });
                }
                Node::Directive {
                    name: dname,
                    value,
                    loc: dloc,
                } => {
                    let lname = norm(dname);
                    if value.is_empty() {
                        self.fail(err_at(dloc, dname, "missing value"))?;
                        continue;
                    }
                    match lname.as_str() {
                        "backing-store" | "direct-store" => stores.push(Store {
                            path: value.clone(),
                            direct: lname == "direct-store",
                            loc: dloc.clone(),
                            settings: Vec::new(),
                        }),
                        "driver" => {
                            self.locations.set(format!("{base}.driver"), dloc, dname);
                            t.driver = Some(Word(value.clone()));
                        }
                        "state" => {
                            self.locations.set(format!("{base}.state"), dloc, dname);
                            t.state = Some(Word(value.clone()));
                        }
                        "initiator-address" => {
                            for a in value.split_whitespace() {
                                self.locations.set(
                                    format!("{base}.allow.addresses[{}]", addresses.len()),
                                    dloc,
                                    dname,
                                );
                                addresses.push(a.to_string());
                            }
                        }
                        "initiator-name" => {
                            for a in value.split_whitespace() {
                                self.locations.set(
                                    format!("{base}.allow.initiators[{}]", initiators.len()),
                                    dloc,
                                    dname,
                                );
                                initiators.push(a.to_string());
                            }
                        }
                        "incominguser" => {
                            if let Some(u) = self.account(dloc, dname, value)? {
                                if !incoming.contains(&u) {
                                    self.locations.set(
                                        format!("{base}.incoming_users[{}]", incoming.len()),
                                        dloc,
                                        dname,
                                    );
                                    incoming.push(u);
                                }
                            }
                        }
                        "outgoinguser" => {
                            if t.outgoing_user.is_some() {
                                self.warn(
                                    dloc,
                                    dname,
                                    "only one outgoinguser is allowed; the first is used",
                                );
                            } else if let Some(u) = self.account(dloc, dname, value)? {
                                self.locations
                                    .set(format!("{base}.outgoing_user"), dloc, dname);
                                t.outgoing_user = Some(u);
                            }
                        }
                        "controller-tid" => {}
                        "alua-group"
                        | "alua-relative-port"
                        | "alua-peers"
                        | "alua-non-owner-state" => {
                            let field = lname["alua-".len()..].replace('-', "_");
                            self.locations.set(format!("{base}.alua"), dloc, dname);
                            self.locations
                                .set(format!("{base}.alua.{field}"), dloc, dname);
                            let raw = t.alua.get_or_insert_with(RawAlua::default);
                            if let Err(msg) = crate::alua::set_raw(raw, &field, value) {
                                self.fail(err_at(dloc, dname, msg))?;
                            }
                        }
                        "nop-interval" | "nop-count" => {
                            let key = if lname == "nop-interval" {
                                "NopInterval"
                            } else {
                                "NopCount"
                            };
                            self.iscsi_value(
                                &mut iscsi,
                                &mut iscsi_seen,
                                &base,
                                key,
                                dname,
                                value,
                                dloc,
                            )?;
                        }
                        _ => {
                            if let Some(key) = iscsi_key(dname) {
                                self.iscsi_value(
                                    &mut iscsi,
                                    &mut iscsi_seen,
                                    &base,
                                    key,
                                    dname,
                                    value,
                                    dloc,
                                )?;
                            } else if let Some(key) = lun_key(dname) {
                                self.push_setting(&mut defaults, key, dname, value, dloc)?;
                            } else if let Some(key) = qos_key(dname) {
                                // the target's own default, not copied into each LUN
                                self.push_setting(&mut qos, key, dname, value, dloc)?;
                            } else {
                                self.fail(err_at(dloc, dname, "unknown directive"))?;
                            }
                        }
                    }
                }
            }
        }
        if !addresses.is_empty() || !initiators.is_empty() {
            t.allow = Some(RawAllow {
                initiators: (!initiators.is_empty()).then(|| list(initiators)),
                addresses: (!addresses.is_empty()).then(|| list(addresses)),
            });
        }
        if !iscsi_seen.is_empty() {
            t.iscsi = Some(iscsi);
        }
        t.incoming_users = (!incoming.is_empty()).then(|| list(incoming));
        for set in &qos {
            let raw = t.qos.get_or_insert_with(RawQos::default);
            match raw.set_param(set.key, &set.value) {
                Ok(Some(field)) => {
                    self.locations
                        .set(format!("{base}.qos.{field}"), &set.loc, &set.name)
                }
                Ok(None) => {}
                Err(m) => self.fail(err_at(&set.loc, &set.name, m))?,
            }
        }
        let luns = self.luns(&base, tid, stores, &defaults)?;
        t.luns = Some(luns);
        Ok(t)
    }

    fn push_setting(
        &mut self,
        into: &mut Vec<Setting>,
        key: &'static str,
        name: &str,
        value: &str,
        loc: &Loc,
    ) -> R<()> {
        let repeatable = matches!(key, "params" | "mode_page");
        if !repeatable {
            if let Some(first) = into.iter().find(|s| s.key == key) {
                let msg = format!(
                    "multiple {key} definitions are not allowed here (first at line {})",
                    first.loc.line
                );
                return self.fail(err_at(loc, name, msg));
            }
        }
        if value.is_empty() && key != "write-cache" {
            return self.fail(err_at(loc, name, "missing value"));
        }
        into.push(Setting {
            key,
            value: value.to_string(),
            loc: loc.clone(),
            name: name.to_string(),
        });
        Ok(())
    }

    /// One iSCSI key of a target: the first definition is used (tgt-admin).
    #[allow(clippy::too_many_arguments)]
    fn iscsi_value(
        &mut self,
        r: &mut RawIscsi,
        seen: &mut Vec<&'static str>,
        base: &str,
        key: &'static str,
        name: &str,
        value: &str,
        loc: &Loc,
    ) -> R<()> {
        if seen.contains(&key) {
            self.warn(
                loc,
                name,
                &format!("only one {key} is allowed; the first is used"),
            );
            return Ok(());
        }
        if matches!(key, "IFMarkInt" | "OFMarkInt") {
            self.warn(
                loc,
                name,
                "ignored: markers are not supported (RFC 7143 removed them)",
            );
            return Ok(());
        }
        let num = || number(value);
        let yn = || {
            flag(value)
                .map(YesNo)
                .ok_or_else(|| format!("must be Yes or No (got {value:?})"))
        };
        let res: Result<(), String> = (|| {
            match key {
                "MaxRecvDataSegmentLength" => r.max_recv_data_segment_length = Some(num()?),
                "MaxXmitDataSegmentLength" => r.max_xmit_data_segment_length = Some(num()?),
                "MaxBurstLength" => r.max_burst_length = Some(num()?),
                "FirstBurstLength" => r.first_burst_length = Some(num()?),
                "MaxOutstandingR2T" => r.max_outstanding_r2t = Some(num()?),
                "ErrorRecoveryLevel" => r.error_recovery_level = Some(num()?),
                "DefaultTime2Wait" => r.default_time2wait = Some(num()?),
                "DefaultTime2Retain" => r.default_time2retain = Some(num()?),
                "MaxConnections" => r.max_connections = Some(num()?),
                "MaxQueueCmd" => r.max_queued_commands = Some(num()?),
                "NopInterval" => r.nop_interval = Some(num()?),
                "NopCount" => r.nop_count = Some(num()?),
                "InitialR2T" => r.initial_r2t = Some(yn()?),
                "ImmediateData" => r.immediate_data = Some(yn()?),
                "DataPDUInOrder" => r.data_pdu_in_order = Some(yn()?),
                "DataSequenceInOrder" => r.data_sequence_in_order = Some(yn()?),
                "IFMarker" => r.if_marker = Some(yn()?),
                "OFMarker" => r.of_marker = Some(yn()?),
                "HeaderDigest" => {
                    r.header_digest = Some(List {
                        items: vec![value.to_string()],
                        single: true,
                    })
                }
                "DataDigest" => {
                    r.data_digest = Some(List {
                        items: vec![value.to_string()],
                        single: true,
                    })
                }
                _ => return Err("unknown iSCSI key".into()),
            }
            Ok(())
        })();
        match res {
            Ok(()) => {
                seen.push(key);
                self.locations.set(format!("{base}.iscsi.{key}"), loc, name);
                Ok(())
            }
            Err(m) => self.fail(err_at(loc, name, m)),
        }
    }
}

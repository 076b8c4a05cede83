//! The running configuration as numatgt YAML (`numatgtadm --dump`): the startup
//! configuration's global sections with the portals, targets, LUNs, ACLs and per-target
//! iSCSI keys as they are now. Feeding the output back to `numatgtd --config` recreates the
//! same targets, accounts and bindings (targets nobody may log in to are left out, with a
//! comment: YAML cannot say "nobody").

use iscsi_proto::ConnConfig;

use crate::registry::{Lun, Registry, Target};

fn digest(d: &iscsi_proto::Digest) -> config::Digest {
    match d {
        iscsi_proto::Digest::None => config::Digest::None,
        iscsi_proto::Digest::Crc32c => config::Digest::Crc32c,
    }
}

/// `Some(v)` when the target's value differs from the global one.
fn differs<T: PartialEq>(mine: T, global: T) -> Option<T> {
    (mine != global).then_some(mine)
}

fn overrides(cc: &ConnConfig, g: &config::IscsiParams) -> Option<config::IscsiParamsOverride> {
    let hd: Vec<config::Digest> = cc.header_digest.iter().map(digest).collect();
    let dd: Vec<config::Digest> = cc.data_digest.iter().map(digest).collect();
    let o = config::IscsiParamsOverride {
        max_recv_data_segment_length: differs(
            cc.max_recv_data_segment_length,
            g.max_recv_data_segment_length,
        ),
        max_burst_length: differs(cc.max_burst_length, g.max_burst_length),
        first_burst_length: differs(cc.first_burst_length, g.first_burst_length),
        immediate_data: differs(cc.immediate_data, g.immediate_data),
        initial_r2t: differs(cc.initial_r2t, g.initial_r2t),
        max_outstanding_r2t: differs(cc.max_outstanding_r2t, g.max_outstanding_r2t),
        header_digest: differs(hd, g.header_digest.clone()),
        data_digest: differs(dd, g.data_digest.clone()),
        max_queued_commands: differs(cc.max_queued_commands, g.max_queued_commands),
        nop_interval: differs((cc.nop_interval_ms / 1000) as u32, g.nop_interval),
        nop_count: differs(cc.nop_count, g.nop_count),
        default_time2wait: differs(cc.default_time2wait, g.default_time2wait),
        default_time2retain: differs(cc.default_time2retain, g.default_time2retain),
        ..config::IscsiParamsOverride::default()
    };
    (o != config::IscsiParamsOverride::default()).then_some(o)
}

fn lun_config(l: &Lun, alua: &config::AluaConfig) -> config::LunConfig {
    let p = l.scsi.params();
    let meta = l.meta.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let device_type = config::DeviceType::parse(p.device_type.as_str()).unwrap_or_default();
    config::LunConfig {
        block_size: p.block_size,
        write_cache: l.scsi.write_cache_enabled(),
        readonly: p.readonly,
        create_size: None,
        vendor_id: Some(p.vendor_id.clone()),
        product_id: Some(p.product_id.clone()),
        product_rev: Some(p.product_rev.clone()),
        serial: Some(p.serial.clone()),
        cache: Some(l.cache_mode),
        scsi_id: Some(meta.scsi_id.clone()),
        sense_format: if meta.sense_format == 1 {
            config::SenseFormat::Descriptor
        } else {
            config::SenseFormat::Fixed
        },
        // a cd is removable by its type
        removable: meta.removable && device_type == config::DeviceType::Disk,
        thin_provisioning: meta.thin_provisioning,
        online: meta.online,
        bs_type: config::BsType::parse(&meta.bstype).unwrap_or_default(),
        device_type,
        bsopts: (!meta.bsopts.is_empty()).then(|| meta.bsopts.clone()),
        bsoflags: config::BsOflags::parse(&meta.bsoflags).unwrap_or_default(),
        alua_owner: (!alua.peers.is_empty()).then_some(meta.alua_owner),
        qos: l.qos.limits(),
        changer: if device_type == config::DeviceType::Changer {
            l.scsi.changer_library().to_params()
        } else {
            Vec::new()
        },
        ..config::LunConfig::new(l.number, meta.path.into())
    }
}

fn target_config(t: &Target, global: &config::IscsiParams) -> config::TargetConfig {
    let m = t.mgmt().clone();
    let alua = t.alua();
    config::TargetConfig {
        tid: Some(t.tid),
        alias: t.alias.clone(),
        allow_initiators: m.acl.names.clone(),
        allow_addresses: m.acl.addresses.iter().map(|(_, r)| *r).collect(),
        iscsi: overrides(&t.conn_config(), global),
        driver: t.driver,
        state: m.state,
        incoming_users: m.auth.incoming.clone(),
        outgoing_user: m.auth.outgoing.clone(),
        max_sessions: t.max_sessions(),
        luns: t
            .lun_set()
            .map
            .values()
            .map(|l| lun_config(l, &alua))
            .collect(),
        alua: (*alua != config::AluaConfig::default()).then(|| (*alua).clone()),
        ..config::TargetConfig::new(&t.iqn)
    }
}

/// The YAML text, with a comment for what YAML cannot say.
pub fn yaml(reg: &Registry, base: &config::Config) -> String {
    let mut cfg = base.clone();
    cfg.limits = reg.limits.settings();
    cfg.portals = reg
        .portals()
        .iter()
        .map(|p| config::PortalConfig {
            addr: p.addr,
            nop_interval: p.nop_interval,
            nop_count: p.nop_count,
        })
        .collect();
    let mut targets = reg.targets();
    targets.sort_by_key(|t| t.tid);
    let mut notes = String::from("# numatgtd running configuration (numatgtadm --dump)\n");
    // YAML cannot say "nobody" (an empty allow list means everyone): a target without an
    // address rule is left out rather than opened to every initiator
    targets.retain(|t| {
        let closed = t.mgmt().acl.addresses.is_empty();
        if closed {
            notes.push_str(&format!(
                "# not dumped: {} (tid {}) has no initiator-address rule bound, so nobody may\n#   log in; YAML cannot express that (an empty allow list means everyone)\n",
                t.iqn, t.tid
            ));
        }
        !closed
    });
    {
        let a = reg.accounts();
        // oldest first, as they were created
        cfg.accounts = a
            .users
            .iter()
            .rev()
            .map(|(u, p)| config::Account {
                user: u.clone(),
                password: p.clone(),
            })
            .collect();
        cfg.discovery_auth = config::DiscoveryAuth {
            incoming_users: a.discovery.incoming.clone(),
            outgoing_user: a.discovery.outgoing.clone(),
        };
    }
    cfg.targets = targets
        .iter()
        .map(|t| target_config(t, &base.iscsi))
        .collect();
    notes + &cfg.to_yaml()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::registry::Acl;

    #[test]
    fn dump_keeps_the_driver_and_iser_portals() {
        let acl = Acl {
            addresses: vec![(
                "ALL".into(),
                config::AddressRule::parse("ALL").expect("rule"),
            )],
            names: Vec::new(),
        };
        let t = Target::new(
            3,
            "iqn.2026-11.org.numatgt:r".into(),
            None,
            Default::default(),
            iscsi_proto::ConnConfig::default(),
            acl,
        )
        .with_driver(config::Driver::Iser);
        let reg = Registry::new(
            vec![Arc::new(t)],
            vec![crate::registry::Portal {
                addr: "127.0.0.1:3260".parse().expect("addr"),
                nop_interval: None,
                nop_count: None,
            }],
            iscsi_proto::ConnConfig::default(),
        );
        let base = config::Config {
            iser_portals: Some(Vec::new()),
            ..config::Config::default()
        };
        let text = yaml(&reg, &base);
        let back = config::parse(&text, "dump.yaml").unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(back.targets[0].driver, config::Driver::Iser, "{text}");
        assert_eq!(back.iser_portals, Some(Vec::new()), "{text}");
    }
}

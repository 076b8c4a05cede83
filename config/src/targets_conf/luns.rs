//! The LUNs of one imported target, as tgt-admin makes them: numbering
//! (backing-stores by path, then direct-stores, `lun` reservations), the
//! precedence of container and target-level directives, and the meaning of
//! each LUN directive (QoS `qos_*` included), `params` (with `${tid}`/`${lun}`, and
//! `qos_*=` as tgtadm takes them) and `mode_page`.

use std::collections::BTreeSet;

use super::interp::{Interp, R, Setting, Store, err_at, flag, norm, number, qos_key};
use crate::qos::RawQos;
use crate::raw::{RawLun, Word, YesNo};

/// Keys `params k=v,...` may set (tgtd's logical unit parameters).
const PARAM_KEYS: &[&str] = &[
    "scsi_id",
    "scsi_sn",
    "vendor_id",
    "product_id",
    "product_rev",
    "sense_format",
    "removable",
    "readonly",
    "online",
    "thin_provisioning",
    "path",
    "mode_page",
    "lbppbe",
    "la_lba",
    "optimal_xfer_gran",
    "optimal_xfer_len",
    "rotation_rate",
    "bsoflags",
    "bsopts",
];

impl Interp {
    /// Numbers the stores as tgt-admin does and builds their LUNs, sorted by number.
    pub(super) fn luns(
        &mut self,
        base: &str,
        tid: u64,
        stores: Vec<Store>,
        defaults: &[Setting],
    ) -> R<Vec<RawLun>> {
        // Backing-stores sorted by path, then direct-stores sorted by path; a
        // path listed twice is one LUN (tgt-admin keys them by path).
        let mut ordered: Vec<Store> = Vec::new();
        let (mut backing, mut direct): (Vec<Store>, Vec<Store>) =
            stores.into_iter().partition(|s| !s.direct);
        backing.sort_by(|a, b| a.path.cmp(&b.path));
        direct.sort_by(|a, b| a.path.cmp(&b.path));
        for s in backing.into_iter().chain(direct) {
            if let Some(first) = ordered
                .iter()
                .find(|o| o.path == s.path && o.direct == s.direct)
            {
                let msg = format!(
                    "{} is already listed at line {}; one LUN is exported for it",
                    s.path, first.loc.line
                );
                self.warn(&s.loc, s.kind(), &msg);
                continue;
            }
            ordered.push(s);
        }
        let target_lun = defaults.iter().find(|s| s.key == "lun");
        let mut reserved: BTreeSet<u64> = BTreeSet::new();
        let mut explicit: Vec<Option<(u64, Setting)>> = Vec::new();
        for s in &ordered {
            let mut e = None;
            for set in s.settings.iter().chain(target_lun) {
                if set.key != "lun" {
                    continue;
                }
                match number(&set.value) {
                    Ok(n) => {
                        reserved.insert(n);
                        // The target-level `lun` wins (tgt-admin applies it last).
                        e = Some((n, set.clone()));
                    }
                    Err(m) => self.fail(err_at(&set.loc, &set.name, m))?,
                }
            }
            explicit.push(e);
        }
        let mut numbered: Vec<(u64, Store, Option<Setting>)> = Vec::new();
        let mut assigned: BTreeSet<u64> = BTreeSet::new();
        for (s, e) in ordered.into_iter().zip(explicit) {
            let (n, lun_setting) = match e {
                Some((n, set)) => (n, Some(set)),
                None => {
                    let mut n = 1u64;
                    while reserved.contains(&n) || assigned.contains(&n) {
                        n += 1;
                    }
                    (n, None)
                }
            };
            if let Some((_, other, _)) = numbered.iter().find(|(m, _, _)| *m == n) {
                let msg = format!(
                    "LUN {n} is already used by {} {} (line {})",
                    other.kind(),
                    other.path,
                    other.loc.line
                );
                let at = lun_setting.as_ref().map_or(&s.loc, |x| &x.loc);
                self.fail(err_at(at, s.kind(), msg))?;
                continue;
            }
            assigned.insert(n);
            numbered.push((n, s, lun_setting));
        }
        numbered.sort_by_key(|(n, _, _)| *n);
        let mut out = Vec::new();
        for (n, s, lun_setting) in numbered {
            let j = out.len();
            let lp = format!("{base}.luns[{j}]");
            self.locations.set(lp.clone(), &s.loc, s.kind());
            self.locations.set(format!("{lp}.path"), &s.loc, s.kind());
            match &lun_setting {
                Some(set) => self.locations.set(format!("{lp}.lun"), &set.loc, &set.name),
                None => self.locations.set(format!("{lp}.lun"), &s.loc, s.kind()),
            }
            if s.direct {
                self.warn(
                    &s.loc,
                    "direct-store",
                    &format!(
                        "{} is served as a block device; its vendor, product and serial are not \
                         copied (no sg_inq): set vendor_id/product_id/product_rev/scsi_sn to keep them",
                        s.path
                    ),
                );
            }
            let mut l = new_lun(n, &s.path);
            // mode_page first (container, then target), then the container's
            // directives, then the target's for keys the container did not
            // set, then the target's params (tgt-admin's command order).
            let mode_pages: Vec<&Setting> = s
                .settings
                .iter()
                .chain(defaults)
                .filter(|x| x.key == "mode_page")
                .collect();
            for set in mode_pages {
                self.apply(&mut l, &lp, tid, n, set.key, &set.value, set)?;
            }
            for set in s
                .settings
                .iter()
                .filter(|x| !matches!(x.key, "mode_page" | "lun"))
            {
                self.apply(&mut l, &lp, tid, n, set.key, &set.value, set)?;
            }
            for set in defaults.iter().filter(|x| {
                !matches!(x.key, "mode_page" | "lun" | "params")
                    && !s.settings.iter().any(|c| c.key == x.key)
            }) {
                self.apply(&mut l, &lp, tid, n, set.key, &set.value, set)?;
            }
            for set in defaults.iter().filter(|x| x.key == "params") {
                self.apply(&mut l, &lp, tid, n, set.key, &set.value, set)?;
            }
            let rbd = l
                .bs_type
                .as_ref()
                .is_some_and(|w| w.0.trim().eq_ignore_ascii_case("rbd"));
            if let (false, Some(others)) = (rbd, &l.bsopts) {
                let at = s
                    .settings
                    .iter()
                    .chain(defaults)
                    .find(|x| x.key == "bsopts" || x.key == "params");
                let (loc, name) = at.map_or((&s.loc, s.kind()), |x| (&x.loc, x.name.as_str()));
                let msg = format!(
                    "bsopts {others} ignored: numatgt reads only cache=numa|off|page \
                     (the rest is for bs-type rbd)"
                );
                self.warn(loc, name, &msg);
                l.bsopts = None;
            }
            out.push(l);
        }
        Ok(out)
    }

    /// Applies one LUN setting (`key` canonical) to `l`.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        l: &mut RawLun,
        lp: &str,
        tid: u64,
        lun: u64,
        key: &str,
        value: &str,
        set: &Setting,
    ) -> R<()> {
        let field = |f: &str| format!("{lp}.{f}");
        let at = |this: &mut Self, f: &str| this.locations.set(field(f), &set.loc, &set.name);
        let bad = |m: String| err_at(&set.loc, &set.name, m);
        let num = |v: &str| number(v).map_err(bad);
        let fl = |v: &str| flag(v).ok_or_else(|| bad(format!("must be 0 or 1 (got {v:?})")));
        let r: R<()> = (|| {
            match key {
                "write-cache" => match value.trim().to_ascii_lowercase().as_str() {
                    // tgt-admin runs no command for `on` (the default), so a
                    // caching mode_page applied before it stays in force.
                    "on" | "" => {
                        l.write_cache.get_or_insert(YesNo(true));
                    }
                    "off" => l.write_cache = Some(YesNo(false)),
                    _ => return Err(bad(format!("must be on or off (got {value:?})"))),
                },
                "scsi_id" => l.scsi_id = Some(value.to_string()),
                "scsi_sn" => l.serial = Some(value.to_string()),
                "vendor_id" => l.vendor_id = Some(value.to_string()),
                "product_id" => l.product_id = Some(value.to_string()),
                "product_rev" => l.product_rev = Some(value.to_string()),
                "sense_format" => l.sense_format = Some(Word(value.to_string())),
                "removable" => l.removable = Some(YesNo(fl(value)?)),
                "readonly" => l.readonly = Some(YesNo(fl(value)?)),
                "online" => l.online = Some(YesNo(fl(value)?)),
                "thin_provisioning" => l.thin_provisioning = Some(YesNo(fl(value)?)),
                "path" => l.path = value.to_string(),
                "device-type" => l.device_type = Some(Word(value.to_string())),
                "bs-type" => l.bs_type = Some(Word(value.to_string())),
                "bsoflags" => l.bsoflags = Some(Word(value.to_string())),
                // tgt's `key=value;...`: numatgt's `cache=numa|off|page`, and the rest for
                // an rbd LUN (conf, id, cluster, librados settings)
                "bsopts" => {
                    if let Some(mode) = bsopts_cache(value) {
                        l.cache = Some(Word(mode.to_string()));
                    }
                    let others = bsopts_others(value);
                    l.bsopts = (!others.is_empty()).then_some(others);
                }
                "block-size" => l.block_size = Some(num(value)?),
                "lbppbe" => l.lbppbe = Some(num(value)?),
                "la_lba" => l.la_lba = Some(num(value)?),
                "optimal_xfer_gran" => l.optimal_xfer_gran = Some(num(value)?),
                "optimal_xfer_len" => l.optimal_xfer_len = Some(num(value)?),
                // QoS, as tgtadm's `--params qos_...=` means it
                k if qos_key(k).is_some() => {
                    let raw = l.qos.get_or_insert_with(RawQos::default);
                    raw.set_param(k, value).map_err(bad)?;
                }
                _ => {}
            }
            Ok(())
        })();
        if let Err(e) = r {
            return self.fail(e);
        }
        match key {
            "bsopts" => {
                if bsopts_cache(value).is_some() {
                    at(self, "cache");
                }
                if !bsopts_others(value).is_empty() {
                    at(self, "bsopts");
                }
            }
            "allow-in-use" => self.warn(
                &set.loc,
                &set.name,
                "allow-in-use is ignored: numatgt does not check whether a backing store is in use",
            ),
            "rotation_rate" => self.warn(
                &set.loc,
                &set.name,
                "rotation_rate is ignored: not supported",
            ),
            "mode_page" => self.mode_page(l, lp, value, set)?,
            "params" => self.params(l, lp, tid, lun, value, set)?,
            "write-cache" => at(self, "write_cache"),
            "scsi_sn" => at(self, "serial"),
            "device-type" => at(self, "device_type"),
            "bs-type" => at(self, "bs_type"),
            "block-size" => at(self, "block_size"),
            k if qos_key(k).is_some() => {
                let field = k.strip_prefix("qos_").unwrap_or(k);
                at(self, &format!("qos.{field}"));
            }
            other => at(self, other),
        }
        Ok(())
    }

    /// `mode_page PAGE:SUBPAGE:LEN:BYTE...`: the Caching page (8:0) sets the
    /// write cache from its WCE bit; other pages are ignored with a warning.
    fn mode_page(&mut self, l: &mut RawLun, lp: &str, value: &str, set: &Setting) -> R<()> {
        match mode_page_wce(value) {
            Ok(ModePage::Wce(wce)) => {
                l.write_cache = Some(YesNo(wce));
                self.locations
                    .set(format!("{lp}.write_cache"), &set.loc, &set.name);
            }
            Ok(ignored) => self.warn(&set.loc, &set.name, &ignored.to_string()),
            Err(m) => return self.fail(err_at(&set.loc, &set.name, m)),
        }
        Ok(())
    }

    /// `params k=v,...` with `${tid}` and `${lun}` replaced.
    fn params(
        &mut self,
        l: &mut RawLun,
        lp: &str,
        tid: u64,
        lun: u64,
        value: &str,
        set: &Setting,
    ) -> R<()> {
        let text = value
            .replace("${tid}", &tid.to_string())
            .replace("${lun}", &lun.to_string());
        // a medium changer's element configuration: one request, kept whole, in order
        let keys: Vec<&str> = text
            .split(',')
            .filter_map(|p| p.split_once('=').map(|(k, _)| k.trim()))
            .collect();
        if !keys.is_empty() && keys.iter().all(|k| crate::CHANGER_KEYS.contains(k)) {
            l.changer.push(text.trim().to_string());
            return Ok(());
        }
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((k, v)) = part.split_once('=') else {
                self.fail(err_at(
                    &set.loc,
                    &set.name,
                    format!("expected key=value (got {part:?})"),
                ))?;
                continue;
            };
            let v = v.trim().trim_matches('"');
            let n = norm(k.trim());
            let known = PARAM_KEYS.iter().copied().find(|p| norm(p) == n);
            match known.or_else(|| qos_key(k)) {
                Some(key) => self.apply(l, lp, tid, lun, key, v, set)?,
                None => {
                    let msg = format!("unknown parameter {:?}", k.trim());
                    self.fail(err_at(&set.loc, &set.name, msg))?;
                }
            }
        }
        Ok(())
    }
}

/// The `cache=MODE` value of a tgt `bsopts` string (`key=value` pairs separated by `;`).
fn bsopts_cache(value: &str) -> Option<&str> {
    value.split(';').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim().eq_ignore_ascii_case("cache").then(|| v.trim())
    })
}

/// The pairs of a tgt `bsopts` string other than `cache=`, as given (`;`-joined).
fn bsopts_others(value: &str) -> String {
    value
        .split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty() && bsopts_cache(p).is_none())
        .collect::<Vec<_>>()
        .join(";")
}

fn new_lun(lun: u64, path: &str) -> RawLun {
    RawLun {
        lun,
        path: path.to_string(),
        size: None,
        block_size: None,
        write_cache: None,
        readonly: None,
        vendor_id: None,
        product_id: None,
        product_rev: None,
        serial: None,
        cache: None,
        scsi_id: None,
        sense_format: None,
        removable: None,
        thin_provisioning: None,
        online: None,
        device_type: None,
        bs_type: None,
        bsoflags: None,
        bsopts: None,
        lbppbe: None,
        la_lba: None,
        optimal_xfer_gran: None,
        optimal_xfer_len: None,
        alua_owner: None,
        qos: None,
        changer: Vec::new(),
    }
}

/// What a tgt `mode_page PAGE:SUBPAGE:LENGTH:BYTE...` sets in numatgt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModePage {
    /// The Caching page (8:0): the write cache, from the WCE bit (0x04) of its first byte.
    Wce(bool),
    /// The Caching page without data bytes: nothing.
    NoData,
    /// Another page (page, subpage): not configurable, nothing.
    Other(u64, u64),
}

impl std::fmt::Display for ModePage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModePage::Wce(w) => write!(f, "write cache {}", if *w { "on" } else { "off" }),
            ModePage::NoData => f.write_str("ignored: caching page without data bytes"),
            ModePage::Other(p, s) => write!(
                f,
                "ignored: mode page {p}:{s} is not configurable (only the caching page 8:0 WCE bit is)"
            ),
        }
    }
}

/// Reads a tgt mode page setting (`mode_page=8:0:18:0x10:...`, what tgt-admin writes for
/// `write-cache off`), for targets.conf and tgtadm's `--params mode_page=`; numbers in
/// decimal or `0x` hex. `Err` says what is malformed.
pub fn mode_page_wce(value: &str) -> Result<ModePage, String> {
    let parts: Vec<u64> = value
        .split(':')
        .map(super::interp::number)
        .collect::<Result<_, _>>()?;
    if parts.len() < 3 {
        return Err(format!(
            "expected PAGE:SUBPAGE:LENGTH:BYTES... (got {value:?})"
        ));
    }
    Ok(match (parts[0], parts[1], parts.get(3)) {
        (8, 0, Some(b2)) => ModePage::Wce(b2 & 0x04 != 0),
        (8, 0, None) => ModePage::NoData,
        (p, s, _) => ModePage::Other(p, s),
    })
}

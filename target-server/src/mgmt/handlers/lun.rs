//! `--mode logicalunit`: new (any backing-store type of `config::BsType` — a file or block
//! device, `rdwr`/`aio`; an RBD image, `rbd`; no storage, `null` — opened like every other
//! LUN by `runtime::open_lun`: the configured default cache mode or `--bsopts cache=MODE`;
//! `--bsoflags direct` = O_DIRECT, `sync` = every write durable before it completes),
//! delete, update `--params` (identity, flags), stat. A changed LUN replaces the old one in
//! the target's LUN table; sessions see it at their next command.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use super::parse_bool;
use super::target::lookup;
use crate::mgmt::show;
use crate::mgmt::{Ctx, Reply};
use crate::registry::{Lun, LunMeta, Target};
use tgtadm_wire::{ErrCode, NO_LUN, Op, Payload, ReqHeader};

/// Backing-store types tgtd knows but numatgt does not serve.
const OTHER_BSTYPES: [&str; 2] = ["glfs", "sheepdog"];

pub fn handle(ctx: &Ctx, op: Op, h: &ReqHeader, p: &Payload) -> Reply {
    match op {
        Op::New => new(ctx, h, p),
        Op::Delete => delete(ctx, h),
        Op::Update => update(ctx, h, p),
        Op::Stats => {
            let t = lookup(ctx, h)?;
            let lun = need_lun(h)?;
            if lun != 0 && !t.lun_set().map.contains_key(&lun) {
                return Err(ErrCode::NoLun);
            }
            Ok(show::stats(&ctx.registry, &t, Some(lun)))
        }
        _ => Err(ErrCode::UnsupportedOperation),
    }
}

fn need_lun(h: &ReqHeader) -> Result<u64, ErrCode> {
    if h.lun == NO_LUN || h.lun > 16383 {
        return Err(ErrCode::InvalidRequest);
    }
    Ok(h.lun)
}

/// `--op new`: the request checked (nothing opened for a bad one, as tgtd), the LUN opened
/// like every other by `runtime::open_lun` and added to the target; its ALUA ownership
/// started and every nexus told that the LUNs changed.
fn new(ctx: &Ctx, h: &ReqHeader, p: &Payload) -> Reply {
    let t = lookup(ctx, h)?;
    let number = need_lun(h)?;
    // tgt's other device codes (printer, scanner, ...) have no emulation in tgtd either
    let device_type =
        config::DeviceType::from_tgt_code(h.device_type).ok_or(ErrCode::UnsupportedOperation)?;
    let asked = NewLun::parse(p, device_type)?;
    number_free(&t, number)?;
    let lc = asked.lun_config(t.tid, number);
    let settings = loaded_cache_settings(ctx);
    cache_running_for(ctx, &t, &lc, &settings)?;
    let qos = new_qos(p)?;
    let lun = Arc::new(open_new(ctx, &t, &asked, &lc, &settings)?);
    if !qos.is_unlimited() {
        lun.qos.set(&qos, crate::io_stats::now_ns());
        tracing::info!(target = %t.iqn, lun = number, qos = %crate::mgmt::show::qos_text(&qos), "QoS limits set");
    }
    add_to_target(&t, &lun)?;
    // an RBD LUN of several gateways: its ownership thread
    crate::alua::start(&t, &lun, ctx.cache.as_ref());
    luns_changed(&t);
    tracing::info!(tid = t.tid, target = %t.iqn, lun = number, path = asked.path,
        device_type = device_type.as_str(),
        block_size = asked.block_size, direct = lun.store.is_direct(), sync = asked.oflags.sync,
        cache = lun.cache_mode.as_str(), "LUN created");
    Ok(String::new())
}

/// The QoS limits `--op new` asks for (`--params qos_iops=N,…`): a bad value refuses the
/// request before anything is opened.
fn new_qos(p: &Payload) -> Result<config::Qos, ErrCode> {
    let mut q = config::Qos::default();
    for (k, v) in p.pairs.iter().chain(&p.params) {
        if k.starts_with("qos_") {
            match config::set_qos_param(&mut q, k, v) {
                Ok(true) => {}
                Ok(false) => return Err(ErrCode::InvalidRequest),
                Err(e) => {
                    tracing::warn!("{k}={v}: {e}");
                    return Err(ErrCode::InvalidRequest);
                }
            }
        }
    }
    Ok(q)
}

/// What `--op new --mode logicalunit` asks for, checked key by key in tgtd's order.
struct NewLun<'a> {
    bs_type: config::BsType,
    /// `--bsopts cache=`: the LUN's own cache mode (`None`: the configured default).
    cache: Option<config::CacheMode>,
    /// An RBD LUN's other `--bsopts` (its cluster options), as given.
    rbd_opts: Option<String>,
    /// `--bsoflags` as given: tgtadm shows them back so.
    flags: &'a str,
    oflags: config::BsOflags,
    block_size: u32,
    path: &'a str,
    device_type: config::DeviceType,
}

impl<'a> NewLun<'a> {
    fn parse(p: &'a Payload, device_type: config::DeviceType) -> Result<NewLun<'a>, ErrCode> {
        let cd = device_type == config::DeviceType::Cd;
        let tape = device_type == config::DeviceType::Tape;
        let bs_type = match p.get("bstype").unwrap_or("") {
            // tgtd: "Must set bstype to bsg or sg for pt devtype"
            "" if device_type == config::DeviceType::Passthrough => {
                return Err(ErrCode::InvalidRequest);
            }
            // a CD/DVD drive's store is tgt's `mmc` (its image file), a tape drive's `ssc`
            "" => config::BsType::default_for(device_type),
            b => parse_bstype(b)?,
        };
        // tgtd: "Must set device type to pt for bsg/sg bstype", "Must set bstype to bsg or
        // sg for pt devtype"
        let changer = device_type == config::DeviceType::Changer;
        let pt = device_type == config::DeviceType::Passthrough;
        if cd && !bs_type.is_file()
            || tape != (bs_type == config::BsType::Ssc)
            || changer != (bs_type == config::BsType::Smc)
            || pt != bs_type.is_passthrough()
        {
            return Err(ErrCode::InvalidRequest);
        }
        let (cache, rbd_opts) = parse_bsopts(p.get("bsopts").unwrap_or(""), bs_type)?;
        let flags = p.get("bsoflags").unwrap_or("");
        let oflags = parse_bsoflags(flags, bs_type)?;
        let asked = p.get("blocksize").filter(|b| !b.is_empty());
        let block_size = match asked {
            // a tape's blocks are the initiator's choice, a changer has none, a passed-through
            // device its own (tgtd shows 1)
            _ if tape || changer || pt => 1,
            // a disc's sectors are 2048 bytes
            None if cd => 2048,
            b => match parse_block_size(b)? {
                2048 => 2048,
                _ if cd => return Err(ErrCode::InvalidRequest),
                n => n,
            },
        };
        let path = p
            .get("path")
            .filter(|x| !x.is_empty())
            .ok_or(ErrCode::InvalidRequest)?;
        Ok(NewLun {
            bs_type,
            cache,
            rbd_opts,
            flags,
            oflags,
            block_size,
            path,
            device_type,
        })
    }

    /// LUN `number` of target `tid` as the configuration would say it (tgtd's serial).
    fn lun_config(&self, tid: u32, number: u64) -> config::LunConfig {
        let d = LunMeta::tgt_defaults(tid, number, self.path);
        config::LunConfig {
            block_size: self.block_size,
            bs_type: self.bs_type,
            bsoflags: self.oflags,
            bsopts: self.rbd_opts.clone(),
            cache: self.cache,
            serial: Some(d.scsi_sn),
            device_type: self.device_type,
            ..config::LunConfig::new(number, self.path.into())
        }
    }
}

/// `--bstype`: empty is tgtd's default (`rdwr`); tgtd's types numatgt does not serve are
/// refused as unsupported, unknown words as invalid.
fn parse_bstype(bstype: &str) -> Result<config::BsType, ErrCode> {
    match bstype {
        "" => Ok(config::BsType::Rdwr),
        b if OTHER_BSTYPES.contains(&b) => Err(ErrCode::UnsupportedOperation),
        b => config::BsType::parse(b)
            .filter(|t| t.as_str() == b)
            .ok_or(ErrCode::InvalidRequest),
    }
}

/// `--bsoflags`: `direct` and `sync`, `:`-separated; a `null` LUN takes none.
fn parse_bsoflags(flags: &str, bs_type: config::BsType) -> Result<config::BsOflags, ErrCode> {
    let mut oflags = config::BsOflags::default();
    for f in flags.split(':').filter(|f| !f.is_empty()) {
        match f {
            // tgtd: "bsoflags direct not supported by backing store null"; a passed-through
            // device is opened as the kernel's SCSI generic interface wants it
            _ if bs_type == config::BsType::Null || bs_type.is_passthrough() => {
                return Err(ErrCode::InvalidRequest);
            }
            "direct" => oflags.direct = true,
            "sync" => oflags.sync = true,
            _ => return Err(ErrCode::InvalidRequest),
        }
    }
    Ok(oflags)
}

/// `--blocksize`: 512 (absent or empty), 1024, 2048 or 4096.
fn parse_block_size(v: Option<&str>) -> Result<u32, ErrCode> {
    match v {
        None | Some("") => Ok(512),
        Some(v) => match v.parse::<u32>() {
            Ok(n) if [512, 1024, 2048, 4096].contains(&n) => Ok(n),
            _ => Err(ErrCode::InvalidRequest),
        },
    }
}

/// LUN `number` can be made: not LUN 0 (the controller LUN when the target has no real
/// LUN 0, as tgtd) and not one the target has.
fn number_free(t: &Target, number: u64) -> Result<(), ErrCode> {
    if number == 0 || t.lun_set().map.contains_key(&number) {
        return Err(ErrCode::LunExist);
    }
    Ok(())
}

/// The default cache mode (and read-ahead) as last loaded: a reload may change the mode.
fn loaded_cache_settings(ctx: &Ctx) -> config::CacheSettings {
    ctx.loaded
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .config
        .cache
}

/// A LUN that is to use the NUMA block cache needs it running.
fn cache_running_for(
    ctx: &Ctx,
    t: &Target,
    lc: &config::LunConfig,
    settings: &config::CacheSettings,
) -> Result<(), ErrCode> {
    if lc.cache_mode(settings) == config::CacheMode::Numa && ctx.cache.is_none() {
        tracing::warn!(
            tid = t.tid,
            lun = lc.lun,
            "the NUMA block cache is not running; \
            give the LUN --bsopts cache=off or cache=page"
        );
        return Err(ErrCode::InvalidRequest);
    }
    Ok(())
}

/// Opens the new LUN's store and builds the LUN (showing `--bsoflags` as they were given).
fn open_new(
    ctx: &Ctx,
    t: &Target,
    asked: &NewLun<'_>,
    lc: &config::LunConfig,
    settings: &config::CacheSettings,
) -> Result<Lun, ErrCode> {
    let state_dir = ctx
        .registry
        .state_dir()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    crate::runtime::open_lun(
        settings,
        &crate::runtime::LunHome {
            iqn: &t.iqn,
            tid: t.tid,
            alua: &t.alua(),
            defer_media: false,
        },
        lc,
        ctx.registry.alloc_cache_id(),
        &state_dir,
        Some(asked.flags),
    )
    .map_err(|e| {
        tracing::warn!(
            path = asked.path,
            bstype = asked.bs_type.as_str(),
            "cannot open backing store: {e}"
        );
        ErrCode::InvalidRequest
    })
}

/// Puts the new LUN in the target's table, unless the number was taken meanwhile.
fn add_to_target(t: &Target, lun: &Arc<Lun>) -> Result<(), ErrCode> {
    let added = t.update_luns(|m| match m.entry(lun.number) {
        std::collections::btree_map::Entry::Occupied(_) => false,
        std::collections::btree_map::Entry::Vacant(v) => {
            v.insert(Arc::clone(lun));
            true
        }
    });
    if !added {
        return Err(ErrCode::LunExist);
    }
    Ok(())
}

/// tgt's `--bsopts`: `key=value` pairs separated by `;`. numatgt reads `cache` (`numa`,
/// `off` or `page`: this LUN's cache mode; without it, the configured default); an `rbd`
/// LUN's other pairs are its cluster options (tgt's `conf`, `id`, `cluster`, and librados
/// settings), returned as given; a `null` LUN ignores them (as tgtd). Files know only
/// `cache`.
fn parse_bsopts(
    text: &str,
    bs_type: config::BsType,
) -> Result<(Option<config::CacheMode>, Option<String>), ErrCode> {
    let mut cache = None;
    let mut rest = Vec::new();
    for pair in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some((k, v)) if k.trim().eq_ignore_ascii_case("cache") => {
                cache = Some(config::CacheMode::parse(v).ok_or_else(|| {
                    tracing::warn!("--bsopts {pair}: the cache mode is numa, off or page");
                    ErrCode::InvalidRequest
                })?);
            }
            _ if bs_type == config::BsType::Rbd => rest.push(pair),
            _ if bs_type == config::BsType::Null => {}
            _ => {
                tracing::warn!(
                    "--bsopts {pair}: unknown option (numatgt knows cache=numa|off|page, \
                     and the cluster options of --bstype rbd)"
                );
                return Err(ErrCode::InvalidRequest);
            }
        }
    }
    let rest = rest.join(";");
    if let Err(m) = rbd::ClusterOptions::parse(&rest, &[]) {
        tracing::warn!("--bsopts {}: {m}", rbd::redact(&rest));
        return Err(ErrCode::InvalidRequest);
    }
    Ok((cache, (!rest.is_empty()).then_some(rest)))
}

/// REPORTED LUNS DATA HAS CHANGED for every I_T nexus of the target's LUs (as tgtd), so
/// initiators rescan.
fn luns_changed(t: &Target) {
    for l in t.lun_set().map.values() {
        l.scsi.luns_changed();
    }
}

fn existing(t: &Target, h: &ReqHeader) -> Result<Arc<Lun>, ErrCode> {
    let n = need_lun(h)?;
    t.lun_set().map.get(&n).cloned().ok_or(ErrCode::NoLun)
}

fn delete(ctx: &Ctx, h: &ReqHeader) -> Reply {
    let t = lookup(ctx, h)?;
    let lun = existing(&t, h)?;
    t.update_luns(|m| m.remove(&lun.number));
    if let Some(o) = &lun.rbd_ownership {
        o.stop();
    }
    luns_changed(&t);
    match ctx.sync_lun(&lun) {
        Err(e) => {
            tracing::warn!(target = %t.iqn, lun = lun.number, "sync on LUN delete failed: {e}")
        }
        // its cached blocks are of no use any more: give their memory back to the cache
        Ok(()) => {
            if let Some(c) = &ctx.cache {
                c.invalidate_lun(lun.cache_id);
            }
        }
    }
    tracing::info!(tid = t.tid, target = %t.iqn, lun = lun.number, "LUN deleted");
    Ok(String::new())
}

/// `--params` keys tgtd knows that numatgt does not change at run time.
const UNSUPPORTED_KEYS: [&str; 9] = [
    "lbppbe",
    "la_lba",
    "optimal_xfer_gran",
    "optimal_xfer_len",
    "path",
    "bsopts",
    "bsoflags",
    "rotation_rate",
    "element_type",
];

fn fixed_len(v: &str, max: usize) -> Result<String, ErrCode> {
    if v.len() > max || !v.is_ascii() {
        return Err(ErrCode::InvalidRequest);
    }
    Ok(v.to_string())
}

/// `--op update --params k=v,…`: every key is checked before anything changes. Then the
/// store is resized, the ALUA owner moved, and the LUN either rebuilt (INQUIRY data or
/// `readonly` changed: a new SCSI logical unit on the same store) or changed in place.
fn update(ctx: &Ctx, h: &ReqHeader, p: &Payload) -> Reply {
    let t = lookup(ctx, h)?;
    let lun = existing(&t, h)?;
    let mut pairs: Vec<&(String, String)> = p.params.iter().chain(p.pairs.iter()).collect();
    if pairs.is_empty() {
        return Err(ErrCode::InvalidRequest);
    }
    // a changer's element configuration (tgt's smc keys) is one request of its own
    if lun.scsi.params().device_type == scsi::DeviceType::Changer {
        let (elements, rest): (Vec<_>, Vec<_>) = pairs
            .into_iter()
            .partition(|(k, _)| config::CHANGER_KEYS.contains(&k.as_str()));
        if !elements.is_empty() {
            let kv: Vec<(&str, &str)> = elements
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            crate::backend::changer::configure(&ctx.registry, &lun, &kv).map_err(|e| {
                tracing::warn!(target = %t.iqn, lun = lun.number, "changer: {e}");
                ErrCode::InvalidRequest
            })?;
        }
        if rest.is_empty() {
            return Ok(String::new());
        }
        pairs = rest;
    }
    // validate everything first, then apply: a bad key changes nothing
    let mut asked = Update::of(&lun);
    for (k, v) in pairs {
        asked.set(&t, &lun, k, v)?;
    }
    let Update {
        mut params,
        mut meta,
        rebuild,
        resize,
        owner,
        wce,
        disc,
        qos,
    } = asked;
    if let Some(to) = resize {
        params.num_blocks = resize_store(&t, &lun, to)?;
    }
    if let Some(g) = owner {
        crate::alua::set_owner(&lun, &t.alua(), g, ctx.cache.as_ref()).map_err(|e| {
            tracing::warn!(lun = lun.number, "ALUA owner not changed: {e}");
            ErrCode::InvalidRequest
        })?;
        meta.alua_owner = g;
    }
    if let Some(on) = wce {
        params.write_cache = on;
        lun.scsi.set_write_cache(on);
        tracing::info!(target = %t.iqn, lun = lun.number, write_cache = on, "mode_page: write cache");
    }
    if let Some(q) = qos {
        lun.qos.set(&q, crate::io_stats::now_ns());
        tracing::info!(target = %t.iqn, lun = lun.number, qos = %crate::mgmt::show::qos_text(&q), "QoS limits set");
    }
    if lun.scsi.params().device_type == scsi::DeviceType::Tape {
        super::disc::tape_update(&t, &lun, disc.as_deref(), rebuild, params, meta)?;
    } else if let Some(path) = disc {
        super::disc::change(ctx, &t, &lun, &path, params, meta)?;
    } else if rebuild {
        replace_lun(&t, &lun, params, meta, None);
    } else {
        change_in_place(&lun, meta);
    }
    Ok(String::new())
}

/// What an update asks for, checked key by key before anything is applied.
struct Update {
    /// The SCSI logical unit's parameters, as they will be.
    params: scsi::LuParams,
    /// The LUN's description, as it will be.
    meta: LunMeta,
    /// INQUIRY data or `readonly` changed: the SCSI logical unit is rebuilt.
    rebuild: bool,
    /// `size=`: grow the store to this many bytes, or re-measure it (`None`).
    resize: Option<Option<u64>>,
    /// `alua_owner=`: the target port group that is to own the LUN.
    owner: Option<u16>,
    /// `mode_page=8:0:...`: the Caching page's WCE bit.
    wce: Option<bool>,
    /// `path=`: a CD/DVD LUN's new disc, a tape drive's new tape (an image file), put in
    /// while the drive is offline.
    disc: Option<String>,
    /// `qos_*=`: the LUN's QoS limits as they will be.
    qos: Option<config::Qos>,
}

impl Update {
    /// Nothing asked yet: the LUN as it is.
    fn of(lun: &Lun) -> Update {
        let mut params = lun.scsi.params().clone();
        params.write_cache = lun.scsi.write_cache_enabled();
        params.num_blocks = lun.scsi.num_blocks();
        Update {
            params,
            meta: lun.meta.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            rebuild: false,
            resize: None,
            owner: None,
            wce: None,
            disc: None,
            qos: None,
        }
    }

    /// Key `k` set to `v` (tgtd's `--params` keys, and numatgt's `size` and `alua_owner`);
    /// an unknown key or a bad value is the error.
    fn set(&mut self, t: &Target, lun: &Lun, k: &str, v: &str) -> Result<(), ErrCode> {
        let Update {
            params,
            meta,
            rebuild,
            resize,
            owner,
            wce,
            disc,
            qos,
        } = self;
        match k {
            // numatgt: QoS limits (`qos_iops=N`, …, `qos_burst=SECONDS`), applied live
            k if k.starts_with("qos_") => {
                let q = qos.get_or_insert_with(|| lun.qos.limits());
                match config::set_qos_param(q, k, v) {
                    Ok(true) => {}
                    Ok(false) => return Err(ErrCode::InvalidRequest),
                    Err(e) => {
                        tracing::warn!(lun = lun.number, "{k}={v}: {e}");
                        return Err(ErrCode::InvalidRequest);
                    }
                }
            }
            // numatgt: online resize. A file grows to SIZE (K/M/G/T suffixes); a block
            // device is re-measured after it was grown (`size=rescan`). Shrinking is refused.
            "size" if v == "rescan" => *resize = Some(None),
            "size" => {
                *resize = Some(Some(
                    config::parse_size(v).map_err(|_| ErrCode::InvalidRequest)?,
                ));
            }
            "vendor_id" => {
                params.vendor_id = fixed_len(v, 8)?;
                *rebuild = true;
            }
            "product_id" => {
                params.product_id = fixed_len(v, 16)?;
                *rebuild = true;
            }
            "product_rev" => {
                params.product_rev = fixed_len(v, 4)?;
                *rebuild = true;
            }
            "scsi_sn" => {
                params.serial = fixed_len(v, 36)?;
                meta.scsi_sn = params.serial.clone();
                *rebuild = true;
            }
            "scsi_id" => meta.scsi_id = fixed_len(v, 64)?,
            "readonly" => {
                params.readonly = parse_bool(v)?;
                *rebuild = true;
            }
            // a CD/DVD drive's disc, a tape drive's tape are removable by nature
            "removable" if params.device_type != scsi::DeviceType::Disk && !parse_bool(v)? => {
                return Err(ErrCode::InvalidRequest);
            }
            "removable" => meta.removable = parse_bool(v)?,
            // numatgt: ALUA, the target port group that owns the LUN (active/optimized)
            "alua_owner" => {
                let g = v.parse::<u16>().map_err(|_| ErrCode::InvalidRequest)?;
                if !t.alua().has_group(g) {
                    tracing::warn!(
                        lun = lun.number,
                        group = g,
                        "alua_owner: not one of the target's port groups"
                    );
                    return Err(ErrCode::InvalidRequest);
                }
                *owner = Some(g);
            }
            // what tgt-admin sends for `write-cache on|off`: the Caching page's WCE bit;
            // other pages are not configurable (accepted and ignored, as in targets.conf)
            "mode_page" => match config::targets_conf::mode_page_wce(v) {
                Ok(config::targets_conf::ModePage::Wce(on)) => *wce = Some(on),
                Ok(ignored) => tracing::warn!(lun = lun.number, "mode_page={v}: {ignored}"),
                Err(e) => {
                    tracing::warn!(lun = lun.number, "mode_page={v}: {e}");
                    return Err(ErrCode::InvalidRequest);
                }
            },
            "online" => meta.online = parse_bool(v)?,
            // a CD/DVD drive's disc changes while it is out (online=0), as in tgtd
            "path"
                if !matches!(
                    params.device_type,
                    scsi::DeviceType::Disk | scsi::DeviceType::Passthrough
                ) =>
            {
                if meta.online || v.is_empty() {
                    return Err(ErrCode::InvalidRequest);
                }
                *disc = Some(v.to_string());
            }
            "thin_provisioning" => meta.thin_provisioning = parse_bool(v)?,
            "sense_format" => {
                meta.sense_format = match v {
                    "0" => 0,
                    "1" => 1,
                    _ => return Err(ErrCode::InvalidRequest),
                }
            }
            "cache" => {
                tracing::warn!(
                    lun = lun.number,
                    "the cache mode is chosen when a LUN is \
                        created (--bsopts cache=numa|off|page); delete and re-create the LUN"
                );
                return Err(ErrCode::UnsupportedOperation);
            }
            other if UNSUPPORTED_KEYS.contains(&other) => {
                return Err(ErrCode::UnsupportedOperation);
            }
            _ => return Err(ErrCode::InvalidRequest),
        }
        Ok(())
    }
}

/// Resizes the backing store (`to`: bytes, or `None` to re-measure a grown device); every
/// I_T nexus gets CAPACITY DATA HAS CHANGED. Returns the capacity in blocks.
fn resize_store(t: &Target, lun: &Lun, to: Option<u64>) -> Result<u64, ErrCode> {
    let bytes = lun.store.resize(to).map_err(|e| {
        tracing::warn!(lun = lun.number, "resize refused: {e}");
        ErrCode::InvalidRequest
    })?;
    let blocks = bytes / u64::from(lun.store.block_size().max(1));
    if blocks != lun.scsi.num_blocks() {
        tracing::info!(target = %t.iqn, lun = lun.number, bytes, blocks, "LUN resized");
    }
    // every I_T nexus gets CAPACITY DATA HAS CHANGED
    lun.scsi.set_capacity(blocks);
    Ok(blocks)
}

/// LUN `lun` replaced by one with a new SCSI logical unit made of `params`, on the same
/// store, cache and statistics (or on `store`, another store with its own cache identity:
/// a CD/DVD LUN's new disc); its reservations with APTPL and its ALUA state carried over.
/// Returns the new LUN.
pub(super) fn replace_lun(
    t: &Target,
    lun: &Arc<Lun>,
    params: scsi::LuParams,
    meta: LunMeta,
    store: Option<(Arc<cache::BackingStore>, u32)>,
) -> Arc<Lun> {
    let descriptor = meta.sense_format == 1;
    // INQUIRY data lives in the SCSI logical unit's fixed parameters: swap in a new one
    // on the same store (its reservations, unit attentions and mode pages start afresh,
    // as after a power-on)
    let scsi = scsi::LogicalUnit::new(params);
    scsi.set_descriptor_sense(descriptor);
    scsi.set_thin_provisioning(meta.thin_provisioning);
    scsi.set_removable(meta.removable);
    if is_cd(&scsi) {
        // a CD/DVD drive's disc is out while the LUN is offline
        scsi.set_medium_present(meta.online);
    }
    // persistent reservations with APTPL carry over to the rebuilt LU; shared ones (kept
    // in the cluster) carry over whole
    let carried = if lun.shared_pr.is_some() {
        scsi.set_shared_pr(true);
        scsi.set_pr_state(&lun.scsi.pr_state_bytes().bytes)
            .map(drop)
    } else {
        scsi.restore_pr_state(&lun.scsi.pr_state_bytes().bytes)
    };
    if let Err(e) = carried {
        tracing::warn!(lun = lun.number, "reservations not carried over: {e}");
    }
    let (store, cache_id) = store.unwrap_or_else(|| (Arc::clone(&lun.store), lun.cache_id));
    // a changer keeps its elements and cartridges
    scsi.changer_adopt(&lun.scsi);
    // a tape drive's tape goes into the new drive (at its beginning, as after a power on),
    // whose commands run on a thread of its own
    let serial = lun.serial.as_ref().and_then(|_| {
        let kind = scsi.params().device_type.as_str();
        crate::serial_work::SerialWork::start(format!("{kind}-{}", lun.number))
            .map_err(|e| tracing::error!(lun = lun.number, "cannot start the {kind}'s thread: {e}"))
            .ok()
    });
    if let Some(r) = lun.scsi.tape_remove() {
        if let Err(e) = r.synced {
            tracing::error!(
                lun = lun.number,
                "tape not synced when moved to the new drive: {e}"
            );
        }
        if let Err(e) = scsi.tape_insert(r.medium) {
            tracing::error!(
                lun = lun.number,
                "the tape could not be moved to the new drive: {e}"
            );
        }
    }
    let next = Arc::new(Lun {
        number: lun.number,
        scsi,
        store,
        cache_id,
        cache_mode: lun.cache_mode,
        cache_in_use: crate::alua::shared::CacheInUse::off(),
        rbd_ownership: lun.rbd_ownership.clone(),
        shared_pr: lun.shared_pr.clone(),
        read_ahead: lun.read_ahead,
        last_read_end: AtomicU64::new(u64::MAX),
        locks: Default::default(),
        meta: std::sync::Mutex::new(meta),
        stats: Arc::clone(&lun.stats),
        qos: Arc::clone(&lun.qos),
        serial,
        passthrough: lun.passthrough.clone(),
    });
    // the ALUA state and caching mode as they are (an RBD LUN's ownership thread serves
    // the new LUN from now on: it holds the same ownership)
    if let Err(e) = crate::alua::carry_over(lun, &next) {
        tracing::warn!(lun = next.number, "ALUA groups not carried over: {e}");
    }
    t.update_luns(|m| {
        m.insert(next.number, Arc::clone(&next));
    });
    next
}

fn is_cd(scsi: &scsi::LogicalUnit) -> bool {
    scsi.params().device_type == scsi::DeviceType::Cd
}

/// The flags that need no new logical unit (sense format, thin provisioning, removable),
/// applied to the running one where they changed; the description replaced.
pub(super) fn change_in_place(lun: &Lun, meta: LunMeta) {
    let descriptor = meta.sense_format == 1;
    let before = lun.meta.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if descriptor != (before.sense_format == 1) {
        lun.scsi.set_descriptor_sense(descriptor);
    }
    if meta.thin_provisioning != before.thin_provisioning {
        lun.scsi.set_thin_provisioning(meta.thin_provisioning);
    }
    if meta.removable != before.removable {
        lun.scsi.set_removable(meta.removable);
    }
    // a CD/DVD drive: offline is no disc, as in tgtd
    if meta.online != before.online && is_cd(&lun.scsi) {
        lun.scsi.set_medium_present(meta.online);
    }
    *lun.meta.lock().unwrap_or_else(|p| p.into_inner()) = meta;
}

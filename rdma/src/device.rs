//! RDMA device discovery: names, node GUIDs, port states and NUMA nodes.

use std::ffi::CStr;
use std::fmt;
use std::path::Path;

use rdma_mummy_sys as ffi;

use crate::error::{Error, LIBIBVERBS, Result};

/// One RDMA device (an HCA, or a soft device such as `rxe0`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// The kernel name, e.g. `mlx5_0` or `rxe0`.
    pub name: String,
    /// The node GUID, in host order.
    pub node_guid: u64,
    /// The NUMA node the device is attached to; `None` when the kernel does not know (-1) or
    /// the sysfs file is missing.
    pub numa_node: Option<u32>,
    /// Its ports; empty when the device could not be opened or queried.
    pub ports: Vec<Port>,
}

impl Device {
    /// The node GUID as `ibv_devinfo` prints it: `xxxx:xxxx:xxxx:xxxx`.
    pub fn guid_string(&self) -> String {
        let g = self.node_guid;
        format!(
            "{:04x}:{:04x}:{:04x}:{:04x}",
            g >> 48,
            (g >> 32) & 0xffff,
            (g >> 16) & 0xffff,
            g & 0xffff
        )
    }
}

/// One port of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Port {
    /// The port number (from 1).
    pub num: u8,
    /// Its logical state.
    pub state: PortState,
    /// InfiniBand or Ethernet (RoCE, iWARP).
    pub link_layer: LinkLayer,
}

/// A port's logical state (`enum ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    /// No state change.
    Nop,
    /// Down.
    Down,
    /// Initializing.
    Init,
    /// Armed.
    Armed,
    /// Active: traffic can flow.
    Active,
    /// Active, deferring.
    ActiveDefer,
    /// A value this wrapper does not know.
    Other(u32),
}

impl PortState {
    fn from_raw(v: ffi::ibv_port_state::Type) -> PortState {
        use ffi::ibv_port_state::*;
        match v {
            IBV_PORT_NOP => PortState::Nop,
            IBV_PORT_DOWN => PortState::Down,
            IBV_PORT_INIT => PortState::Init,
            IBV_PORT_ARMED => PortState::Armed,
            IBV_PORT_ACTIVE => PortState::Active,
            IBV_PORT_ACTIVE_DEFER => PortState::ActiveDefer,
            o => PortState::Other(o),
        }
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortState::Nop => f.write_str("nop"),
            PortState::Down => f.write_str("down"),
            PortState::Init => f.write_str("init"),
            PortState::Armed => f.write_str("armed"),
            PortState::Active => f.write_str("active"),
            PortState::ActiveDefer => f.write_str("active-defer"),
            PortState::Other(v) => write!(f, "state {v}"),
        }
    }
}

/// A port's link layer (`IBV_LINK_LAYER_*` of verbs.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    /// Not reported (old providers: InfiniBand).
    Unspecified,
    /// InfiniBand.
    InfiniBand,
    /// Ethernet: RoCE or iWARP.
    Ethernet,
    /// A value this wrapper does not know.
    Other(u8),
}

impl LinkLayer {
    fn from_raw(v: u8) -> LinkLayer {
        // IBV_LINK_LAYER_UNSPECIFIED, _INFINIBAND, _ETHERNET (an anonymous enum in verbs.h)
        match v {
            0 => LinkLayer::Unspecified,
            1 => LinkLayer::InfiniBand,
            2 => LinkLayer::Ethernet,
            o => LinkLayer::Other(o),
        }
    }
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkLayer::Unspecified => f.write_str("unspecified"),
            LinkLayer::InfiniBand => f.write_str("InfiniBand"),
            LinkLayer::Ethernet => f.write_str("Ethernet"),
            LinkLayer::Other(v) => write!(f, "link layer {v}"),
        }
    }
}

/// The RDMA devices of this host.
///
/// Errors: [`Error::LibraryMissing`] without libibverbs, [`Error::NoKernelSupport`] when the
/// kernel has no verbs support, [`Error::NoDevices`] when the list is empty, [`Error::Call`]
/// otherwise. A device that cannot be opened is still listed, with no ports.
pub fn devices() -> Result<Vec<Device>> {
    let mut n: libc::c_int = 0;
    // SAFETY: `n` is a valid out pointer; the returned list is freed below, once.
    let list = unsafe { ffi::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Err(Error::last("ibv_get_device_list", LIBIBVERBS));
    }
    let mut out = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: the list holds `n` device pointers (then a NULL); `i < n`.
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: `dev` is a device of the live list; the name is a NUL-terminated string
        // owned by the device, copied before the list is freed.
        let name = unsafe { CStr::from_ptr(ffi::ibv_get_device_name(dev)) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: `dev` is a device of the live list.
        let node_guid = u64::from_be(unsafe { ffi::ibv_get_device_guid(dev) });
        let numa_node = read_numa_node(&Path::new("/sys/class/infiniband").join(&name));
        let ports = query_ports(dev);
        out.push(Device {
            name,
            node_guid,
            numa_node,
            ports,
        });
    }
    // SAFETY: `list` came from ibv_get_device_list and is freed once; nothing borrowed from
    // it outlives this point (names were copied).
    unsafe { ffi::ibv_free_device_list(list) };
    if out.is_empty() {
        return Err(Error::NoDevices);
    }
    Ok(out)
}

/// Opens `dev` for long enough to read its ports; empty on any failure (an unopenable device
/// is still worth listing).
fn query_ports(dev: *mut ffi::ibv_device) -> Vec<Port> {
    // SAFETY: `dev` is a device of a live device list (the caller's).
    let ctx = unsafe { ffi::ibv_open_device(dev) };
    if ctx.is_null() {
        return Vec::new();
    }
    let mut ports = Vec::new();
    // SAFETY: all-zero is a valid ibv_device_attr (plain integers and arrays).
    let mut attr: ffi::ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: `ctx` is open; `attr` is a valid out pointer of the right type.
    if unsafe { ffi::ibv_query_device(ctx, &mut attr) } == 0 {
        for num in 1..=attr.phys_port_cnt {
            // SAFETY: all-zero is a valid ibv_port_attr (integers and C enums with a 0 value).
            let mut pa: ffi::ibv_port_attr = unsafe { std::mem::zeroed() };
            // SAFETY: `ctx` is open, `num` is a port of the device, `pa` a valid out pointer.
            if unsafe { ffi::ibv_query_port(ctx, num, &mut pa) } == 0 {
                ports.push(Port {
                    num,
                    state: PortState::from_raw(pa.state),
                    link_layer: LinkLayer::from_raw(pa.link_layer),
                });
            }
        }
    }
    // SAFETY: `ctx` was opened above and is closed once; nothing borrowed from it remains.
    unsafe { ffi::ibv_close_device(ctx) };
    ports
}

/// `<sysfs device dir>/device/numa_node`, -1 or unreadable → `None`.
fn read_numa_node(dev_dir: &Path) -> Option<u32> {
    std::fs::read_to_string(dev_dir.join("device/numa_node"))
        .ok()
        .and_then(|s| parse_numa_node(&s))
}

/// Parses the content of a sysfs `numa_node` file: `-1` (no affinity) → `None`.
fn parse_numa_node(s: &str) -> Option<u32> {
    s.trim()
        .parse::<i64>()
        .ok()
        .and_then(|v| u32::try_from(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numa_node_parsing() {
        assert_eq!(parse_numa_node("0\n"), Some(0));
        assert_eq!(parse_numa_node("3"), Some(3));
        assert_eq!(parse_numa_node("-1\n"), None);
        assert_eq!(parse_numa_node(""), None);
        assert_eq!(parse_numa_node("x"), None);
    }

    #[test]
    fn numa_node_from_sysfs_dir() {
        let d = std::env::temp_dir().join(format!("rdma-numa-{}", std::process::id()));
        std::fs::create_dir_all(d.join("device")).unwrap();
        assert_eq!(read_numa_node(&d), None);
        std::fs::write(d.join("device/numa_node"), "1\n").unwrap();
        assert_eq!(read_numa_node(&d), Some(1));
        std::fs::write(d.join("device/numa_node"), "-1\n").unwrap();
        assert_eq!(read_numa_node(&d), None);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn guid_format() {
        let d = Device {
            name: "rxe0".into(),
            node_guid: 0x0250_56ff_feab_cdef,
            numa_node: None,
            ports: vec![],
        };
        assert_eq!(d.guid_string(), "0250:56ff:feab:cdef");
    }

    #[test]
    fn enums_from_raw() {
        assert_eq!(PortState::from_raw(4), PortState::Active);
        assert_eq!(PortState::from_raw(99), PortState::Other(99));
        assert_eq!(LinkLayer::from_raw(2), LinkLayer::Ethernet);
        assert_eq!(LinkLayer::Ethernet.to_string(), "Ethernet");
    }

    /// On any host: a list, or one of the documented errors, never a panic. On this project's
    /// build host (no RDMA device) it is an error that says why.
    #[test]
    fn devices_never_panics() {
        match devices() {
            Ok(devs) => assert!(!devs.is_empty()),
            Err(e) => {
                let msg = e.to_string();
                assert!(!msg.is_empty());
                eprintln!("devices(): {msg}");
            }
        }
    }
}

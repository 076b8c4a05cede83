//! NUMA topology: the nodes this daemon runs on and their CPUs, read through hwloc
//! (hwlocality), restricted to the CPUs the process may use; or `N` virtual nodes carved out of
//! the CPUs when the host has fewer real nodes than configured (so routing can be exercised on
//! one socket). Also binds the calling thread to a node's CPUs, and tells which node a
//! network device (found by its address) is attached to.

use std::net::IpAddr;

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

/// One NUMA node as the daemon uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Dense index 0..n (event threads, pools and metrics use this).
    pub index: usize,
    /// The OS node number (for real nodes), or the index (virtual nodes).
    pub os_index: usize,
    /// CPUs of this node that the process may run on.
    pub cpus: Vec<usize>,
}

/// The nodes the daemon uses.
#[derive(Debug, Clone)]
pub struct Topology {
    nodes: Vec<Node>,
    virtual_nodes: bool,
    real_nodes: usize,
}

impl Topology {
    /// Detect the host's nodes. `virtual_nodes = Some(n)` with `n` different from the real
    /// node count splits the allowed CPUs into `n` virtual nodes instead.
    pub fn detect(virtual_nodes: Option<usize>) -> Topology {
        let allowed = allowed_cpus();
        let real = real_nodes(&allowed);
        let real_count = real.len().max(1);
        match virtual_nodes {
            Some(n) if n >= 1 && n != real.len() => Topology::split(&allowed, n, real_count),
            _ if real.is_empty() => {
                let mut t = Topology::split(&allowed, 1, 1);
                t.virtual_nodes = false;
                t
            }
            _ => Topology {
                nodes: real,
                virtual_nodes: false,
                real_nodes: real_count,
            },
        }
    }

    /// `n` virtual nodes over `cpus` (contiguous groups; when there are fewer CPUs than
    /// nodes, nodes share CPUs round-robin).
    pub fn split(cpus: &[usize], n: usize, real_nodes: usize) -> Topology {
        let n = n.max(1);
        let cpus: Vec<usize> = if cpus.is_empty() {
            vec![0]
        } else {
            cpus.to_vec()
        };
        let nodes = (0..n)
            .map(|i| {
                let mine: Vec<usize> = if cpus.len() >= n {
                    let lo = i * cpus.len() / n;
                    let hi = (i + 1) * cpus.len() / n;
                    cpus[lo..hi].to_vec()
                } else {
                    vec![cpus[i % cpus.len()]]
                };
                Node {
                    index: i,
                    os_index: i,
                    cpus: mine,
                }
            })
            .collect();
        Topology {
            nodes,
            virtual_nodes: true,
            real_nodes,
        }
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }
    /// True when the nodes are virtual (carved out of fewer real nodes).
    pub fn is_virtual(&self) -> bool {
        self.virtual_nodes
    }
    /// How many real NUMA nodes the host has.
    pub fn real_node_count(&self) -> usize {
        self.real_nodes
    }
    pub fn cpu_count(&self) -> usize {
        self.nodes.iter().map(|n| n.cpus.len()).sum()
    }
    /// Memory of node `index` as `(total, free)` bytes, where free counts the page cache the
    /// kernel can reclaim: a real node's own numbers from sysfs
    /// (`/sys/devices/system/node/nodeN/meminfo`: MemTotal; MemFree + Active(file) +
    /// Inactive(file)); for virtual nodes (or when sysfs has no node directory) the machine's
    /// MemTotal and MemAvailable (`/proc/meminfo`) shared evenly among the nodes. `None` when
    /// neither can be read.
    pub fn node_memory(&self, index: usize) -> Option<(u64, u64)> {
        let node = self.nodes.get(index)?;
        if !self.virtual_nodes
            && let Ok(text) = std::fs::read_to_string(format!(
                "/sys/devices/system/node/node{}/meminfo",
                node.os_index
            ))
            && let (Some(t), Some(f)) =
                (meminfo_kb(&text, "MemTotal"), meminfo_kb(&text, "MemFree"))
        {
            let file = meminfo_kb(&text, "Active(file)").unwrap_or(0)
                + meminfo_kb(&text, "Inactive(file)").unwrap_or(0);
            return Some((t * 1024, (f + file).min(t) * 1024));
        }
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let total = meminfo_kb(&text, "MemTotal")? * 1024;
        let free =
            meminfo_kb(&text, "MemAvailable").or_else(|| meminfo_kb(&text, "MemFree"))? * 1024;
        let n = self.nodes.len().max(1) as u64;
        Some((total / n, free / n))
    }

    /// A one-line description for logs: "2 real NUMA nodes: node0 cpus [0], node1 cpus [1]".
    pub fn describe(&self) -> String {
        let kind = if self.virtual_nodes {
            "virtual"
        } else {
            "real"
        };
        let list: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("node{} cpus {:?}", n.os_index, n.cpus))
            .collect();
        format!(
            "{} {} NUMA node(s) (host has {} real): {}",
            self.nodes.len(),
            kind,
            self.real_nodes,
            list.join(", ")
        )
    }
}

/// The value in kB of `key` in a meminfo text (`/proc/meminfo` or a node's, whose lines start
/// with `Node N`).
fn meminfo_kb(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        if k.split_whitespace().last()? != key {
            return None;
        }
        v.split_whitespace().next()?.parse().ok()
    })
}

/// The NUMA node (OS number) of the network device that carries address `ip`, read from
/// sysfs (`/sys/class/net/IF/device/numa_node`); `None` for loopback, virtual devices and
/// devices whose node the platform does not report.
pub fn nic_os_node(ip: IpAddr) -> Option<usize> {
    let interface = interface_of(ip)?;
    let path = format!("/sys/class/net/{interface}/device/numa_node");
    let n: i64 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
    usize::try_from(n).ok()
}

/// The name of the interface that has address `ip`.
fn interface_of(ip: IpAddr) -> Option<String> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    for a in addrs {
        let Some(sa) = a.address else { continue };
        let same = match ip {
            IpAddr::V4(v4) => sa.as_sockaddr_in().is_some_and(|s| s.ip() == v4),
            IpAddr::V6(v6) => sa.as_sockaddr_in6().is_some_and(|s| s.ip() == v6),
        };
        if same {
            return Some(a.interface_name);
        }
    }
    None
}

impl Topology {
    /// The dense index of the real node with OS number `os`; `None` for virtual nodes.
    pub fn index_of_os_node(&self, os: usize) -> Option<usize> {
        if self.virtual_nodes {
            return None;
        }
        self.nodes
            .iter()
            .find(|n| n.os_index == os)
            .map(|n| n.index)
    }

    /// The node (dense index) local to the network device carrying `ip`, when known.
    pub fn nic_node(&self, ip: IpAddr) -> Option<usize> {
        self.index_of_os_node(nic_os_node(ip)?)
    }
}

/// Bind the calling thread to `cpus`. Errors are returned, not fatal: a container may forbid it.
pub fn bind_current_thread(cpus: &[usize]) -> nix::Result<()> {
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c)?;
    }
    sched_setaffinity(Pid::from_raw(0), &set)
}

fn allowed_cpus() -> Vec<usize> {
    match sched_getaffinity(Pid::from_raw(0)) {
        Ok(set) => (0..CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect(),
        Err(_) => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
    }
}

fn real_nodes(allowed: &[usize]) -> Vec<Node> {
    use hwlocality::Topology as Hw;
    use hwlocality::object::types::ObjectType;
    let Ok(topo) = Hw::new() else {
        tracing::warn!("hwloc could not read the topology; assuming one node");
        return Vec::new();
    };
    let mut nodes = Vec::new();
    for obj in topo.objects_with_type(ObjectType::NUMANode) {
        let os_index = obj.os_index().unwrap_or(nodes.len());
        let cpus: Vec<usize> = match obj.cpuset() {
            Some(set) => set
                .iter_set()
                .map(usize::from)
                .filter(|c| allowed.contains(c))
                .collect(),
            None => Vec::new(),
        };
        if cpus.is_empty() {
            continue; // memory-only node, or none of its CPUs are ours
        }
        nodes.push(Node {
            index: nodes.len(),
            os_index,
            cpus,
        });
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_lines() {
        let node = "Node 0 MemTotal:       24684084 kB\nNode 0 MemFree:        23627228 kB\n";
        assert_eq!(meminfo_kb(node, "MemTotal"), Some(24684084));
        assert_eq!(meminfo_kb(node, "MemFree"), Some(23627228));
        let proc = "MemTotal:       100 kB\nMemFree:  5 kB\nMemAvailable:   60 kB\n";
        assert_eq!(meminfo_kb(proc, "MemAvailable"), Some(60));
        assert_eq!(meminfo_kb(proc, "Free"), None);
        let t = Topology::split(&[0, 1], 2, 1);
        let (total, free) = t.node_memory(0).expect("meminfo readable");
        assert!(total > 0 && free <= total, "{total} {free}");
        assert!(t.node_memory(2).is_none());
    }

    #[test]
    fn detect_has_every_allowed_cpu_once() {
        let t = Topology::detect(None);
        assert!(t.node_count() >= 1);
        let mut all: Vec<usize> = t.nodes().iter().flat_map(|n| n.cpus.clone()).collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "a CPU appears in two nodes: {}", t.describe());
        assert_eq!(all, allowed_cpus());
    }

    #[test]
    fn virtual_split_even() {
        let t = Topology::split(&[0, 1, 2, 3], 2, 1);
        assert!(t.is_virtual());
        assert_eq!(t.nodes()[0].cpus, vec![0, 1]);
        assert_eq!(t.nodes()[1].cpus, vec![2, 3]);
        let t = Topology::split(&[0, 1], 4, 1);
        assert_eq!(t.node_count(), 4);
        assert_eq!(t.nodes()[3].cpus, vec![1]);
        assert!(t.describe().contains("virtual"));
    }

    #[test]
    fn nic_locality_of_loopback_is_unknown() {
        let t = Topology::detect(None);
        assert_eq!(nic_os_node("127.0.0.1".parse().expect("ip")), None);
        assert_eq!(t.nic_node("127.0.0.1".parse().expect("ip")), None);
        assert_eq!(
            interface_of("127.0.0.1".parse().expect("ip")).as_deref(),
            Some("lo")
        );
        // an address no interface has
        assert_eq!(interface_of("192.0.2.255".parse().expect("ip")), None);
        assert_eq!(Topology::split(&[0, 1], 2, 1).index_of_os_node(0), None);
    }

    #[test]
    fn detect_virtual() {
        let real = Topology::detect(None).node_count();
        let t = Topology::detect(Some(real + 1));
        assert_eq!(t.node_count(), real + 1);
        assert!(t.is_virtual());
    }
}

//! Starting and stopping the daemon: topology, LUNs, per-node I/O pools, event threads bound
//! to their node's CPUs, listeners; and the clean stop (connections closed, LUNs synced).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Instant;

use cache::backing::create_sparse;
use cache::{BackingOptions, BackingStore, IoPool, Topology};
use iscsi_proto::ConnConfig;
use mio::net::TcpListener;

use crate::event_loop::{EventThread, EventThreadSetup, Msg, Shared};
use crate::registry::{Lun, Portal, Registry, Target};

/// Everything needed to start, already validated.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    pub config: config::Config,
    pub numa_nodes: Option<usize>,
    pub event_threads: Option<usize>,
    pub io_threads: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("LUN {lun} of {target}: {source}")]
    Lun {
        target: String,
        lun: u64,
        source: cache::BackingError,
    },
    #[error("LUN {lun} of {target}: block size {block_size} does not match {path}: {why}")]
    LunShape {
        target: String,
        lun: u64,
        block_size: u32,
        path: String,
        why: String,
    },
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start threads: {0}")]
    Threads(std::io::Error),
}

/// A running daemon.
pub struct Daemon {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    listening: Vec<SocketAddr>,
    topology: Topology,
}

/// Stable 64-bit identity for a LUN (FNV-1a of target name and LUN number).
fn lun_identity(iqn: &str, lun: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in iqn.bytes().chain(lun.to_be_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn open_targets(cfg: &config::Config) -> Result<Vec<Arc<Target>>, StartError> {
    let mut out = Vec::new();
    let mut used: Vec<u32> = cfg.targets.iter().filter_map(|t| t.tid).collect();
    for t in &cfg.targets {
        // targets without an explicit tid get the lowest free one
        let tid = t.tid.unwrap_or_else(|| {
            let free = (1..).find(|n| !used.contains(n)).unwrap_or(u32::MAX);
            used.push(free);
            free
        });
        let mut luns = BTreeMap::new();
        for l in &t.luns {
            let lun_err = |source| StartError::Lun {
                target: t.iqn.clone(),
                lun: l.lun,
                source,
            };
            if let Some(size) = l.create_size {
                if create_sparse(&l.path, size).map_err(lun_err)? {
                    tracing::info!(path = %l.path.display(), size, "created sparse backing file");
                }
            }
            let store = BackingStore::open(
                &l.path,
                &BackingOptions {
                    block_size: l.block_size,
                    readonly: l.readonly,
                    direct: true,
                },
            )
            .map_err(lun_err)?;
            let id = lun_identity(&t.iqn, l.lun);
            let params = scsi::LuParams {
                lun: l.lun,
                block_size: l.block_size,
                num_blocks: store.num_blocks(),
                vendor_id: l.vendor_id.clone().unwrap_or_else(|| "NUMATGT".into()),
                product_id: l
                    .product_id
                    .clone()
                    .unwrap_or_else(|| "VIRTUAL-DISK".into()),
                product_rev: l.product_rev.clone().unwrap_or_else(|| "0001".into()),
                serial: l.serial.clone().unwrap_or_else(|| format!("{:016x}", id)),
                naa_id: id,
                write_cache: l.write_cache,
                readonly: l.readonly,
                target_name: t.iqn.clone(),
                rel_port_id: 1,
                tpg: crate::registry::PORTAL_GROUP_TAG,
            };
            tracing::info!(target = %t.iqn, lun = l.lun, path = %l.path.display(),
                blocks = store.num_blocks(), block_size = l.block_size, direct = store.is_direct(),
                write_cache = l.write_cache, "LUN ready");
            luns.insert(
                l.lun,
                Arc::new(Lun {
                    number: l.lun,
                    scsi: scsi::LogicalUnit::new(params),
                    store: Arc::new(store),
                }),
            );
        }
        let lun_numbers = luns.keys().copied().collect();
        out.push(Arc::new(Target {
            tid,
            iqn: t.iqn.clone(),
            alias: t.alias.clone(),
            luns,
            lun_numbers,
            conn_config: conn_config(&t.effective_iscsi(&cfg.iscsi)),
            config: t.clone(),
        }));
    }
    Ok(out)
}

/// The connection limits and offers for one set of iSCSI parameters.
pub fn conn_config(p: &config::IscsiParams) -> ConnConfig {
    let digest = |d: &config::Digest| match d {
        config::Digest::None => iscsi_proto::Digest::None,
        config::Digest::Crc32c => iscsi_proto::Digest::Crc32c,
    };
    ConnConfig {
        max_recv_data_segment_length: p.max_recv_data_segment_length,
        max_burst_length: p.max_burst_length,
        first_burst_length: p.first_burst_length,
        immediate_data: p.immediate_data,
        initial_r2t: p.initial_r2t,
        max_outstanding_r2t: p.max_outstanding_r2t,
        header_digest: p.header_digest.iter().map(digest).collect(),
        data_digest: p.data_digest.iter().map(digest).collect(),
        max_queued_commands: p.max_queued_commands,
        nop_interval_ms: u64::from(p.nop_interval) * 1000,
        nop_count: p.nop_count,
        ..ConnConfig::default()
    }
}

impl Daemon {
    pub fn start(rc: RuntimeConfig) -> Result<Daemon, StartError> {
        let started = Instant::now();
        let topology = Topology::detect(rc.numa_nodes);
        tracing::info!("topology: {}", topology.describe());
        let targets = open_targets(&rc.config)?;

        let mut listeners = Vec::new();
        let mut listening = Vec::new();
        let mut portals = Vec::new();
        for p in &rc.config.portals {
            let addr = p.addr;
            let std_l = std::net::TcpListener::bind(addr)
                .map_err(|source| StartError::Listen { addr, source })?;
            std_l
                .set_nonblocking(true)
                .map_err(|source| StartError::Listen { addr, source })?;
            let local = std_l
                .local_addr()
                .map_err(|source| StartError::Listen { addr, source })?;
            listening.push(local);
            portals.push(Portal {
                addr: local,
                nop_interval: p.nop_interval,
                nop_count: p.nop_count,
            });
            listeners.push(TcpListener::from_std(std_l));
        }

        let mut pools = Vec::new();
        for node in topology.nodes() {
            pools.push(IoPool::start(node, rc.io_threads).map_err(StartError::Threads)?);
        }

        // event threads: one per CPU by default, each bound to the CPUs of its node
        let placements: Vec<usize> = topology
            .nodes()
            .iter()
            .flat_map(|n| n.cpus.iter().map(move |_| n.index))
            .collect();
        let n_threads = rc.event_threads.unwrap_or(placements.len()).max(1);
        let mut setups = Vec::new();
        for _ in 0..n_threads {
            setups.push(EventThreadSetup::new().map_err(StartError::Threads)?);
        }
        let shared = Arc::new(Shared {
            registry: Arc::new(Registry::new(
                targets,
                portals,
                conn_config(&rc.config.iscsi),
            )),
            pools,
            inboxes: OnceLock::new(),
            next_thread: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            started,
        });
        let _ = shared
            .inboxes
            .set(setups.iter().map(|s| Arc::clone(&s.inbox)).collect());

        let mut threads = Vec::new();
        let mut listeners = Some(listeners);
        for (i, setup) in setups.into_iter().enumerate() {
            let node = placements
                .get(i % placements.len().max(1))
                .copied()
                .unwrap_or(0);
            let cpus = topology
                .nodes()
                .get(node)
                .map(|n| n.cpus.clone())
                .unwrap_or_default();
            let mine = if i == 0 {
                listeners.take().unwrap_or_default()
            } else {
                Vec::new()
            };
            let et = EventThread::new(i, node, setup, Arc::clone(&shared), mine);
            let h = std::thread::Builder::new()
                .name(format!("ev-n{node}-{i}"))
                .spawn(move || {
                    if let Err(e) = cache::topology::bind_current_thread(&cpus) {
                        tracing::debug!("cannot bind event thread to {cpus:?}: {e}");
                    }
                    et.run();
                })
                .map_err(StartError::Threads)?;
            threads.push(h);
        }
        for a in &listening {
            tracing::info!("numatgtd: listening on {a}");
        }
        tracing::info!(
            event_threads = n_threads,
            io_threads_per_node = rc.io_threads,
            nodes = topology.node_count(),
            virtual_nodes = topology.is_virtual(),
            "numatgtd ready"
        );
        Ok(Daemon {
            shared,
            threads,
            listening,
            topology,
        })
    }

    pub fn listening(&self) -> &[SocketAddr] {
        &self.listening
    }

    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Close every connection, stop the threads, and make every LUN's data durable.
    pub fn stop(self) {
        if let Some(inboxes) = self.shared.inboxes.get() {
            for i in inboxes {
                i.send(Msg::Shutdown);
            }
        }
        for h in self.threads {
            let _ = h.join();
        }
        // every connection is closed: let the I/O workers finish what is queued, then make
        // everything that was written durable
        match Arc::try_unwrap(self.shared) {
            Ok(shared) => {
                let Shared {
                    registry, pools, ..
                } = shared;
                for p in pools {
                    p.shutdown();
                }
                sync_all(&registry);
            }
            Err(shared) => sync_all(&shared.registry),
        }
    }
}

fn sync_all(registry: &Registry) {
    for t in registry.targets() {
        for lun in t.luns.values() {
            if let Err(e) = lun.store.sync() {
                tracing::error!(target = %t.iqn, lun = lun.number, "final sync failed: {e}");
            }
        }
    }
}

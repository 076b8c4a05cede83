//! What every event thread shares ([`Shared`]): the registry, the node I/O pools, the cache
//! and router, the inboxes, the placement of new connections (admission, then the node a
//! transport names: the NIC's for TCP, the RDMA device's for iSER); and the control the
//! backend and the management plane have over the threads' connections ([`TaskControl`],
//! [`ConnControl`]).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use cache::{BlockCache, Router};

use super::{Inbox, Msg};
use crate::backend::reply::{TaskControl, TasksEnded};
use crate::backend::workers::NodeWorkers;
use crate::conn_id::ConnId;
use crate::registry::{ConnControl, Registry};
use crate::transport::{Accepted, Placement};

/// State every event thread shares.
pub struct Shared {
    pub registry: Arc<Registry>,
    /// One I/O pool per NUMA node.
    pub workers: NodeWorkers,
    /// The NUMA-aware block cache (absent when no LUN uses it).
    pub cache: Option<Arc<BlockCache>>,
    /// Algorithm 1 (absent when routing is off).
    pub router: Option<Router>,
    /// Every thread's inbox, indexed by thread number (set once all threads exist).
    pub inboxes: OnceLock<Vec<Arc<Inbox>>>,
    pub next_thread: AtomicUsize,
    /// Event threads of each node (dense node index), for placing connections.
    pub threads_by_node: Vec<Vec<usize>>,
    /// The topology, to find the node of the network device a connection arrived on.
    pub topology: cache::Topology,
    /// Node of the network device carrying each local address seen (None: unknown).
    pub nic_nodes: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, Option<usize>>>,
    /// Open connections, all threads together.
    pub connections: AtomicUsize,
    /// How long a thread polls without sleeping after its last work (zero: never).
    pub busy_poll: std::time::Duration,
    pub started: Instant,
    /// Per event thread: its node and the time it spent working (indexed by thread number).
    pub thread_stats: Vec<ThreadStats>,
    /// Protocol events (logins, task management, rejects, digest errors) per target.
    pub proto_stats: crate::proto_stats::ProtoStats,
    /// Connections taken out for the next numatgtd (live upgrade, `Msg::Quiesce`).
    pub moved_out: std::sync::Mutex<Vec<MovedOut>>,
}

/// A connection handed over to the next numatgtd: its protocol state and its socket.
pub struct MovedOut {
    pub state: iscsi_proto::MovedConn,
    pub socket: std::os::fd::OwnedFd,
    /// Its session's I_T nexus (its logical units' state goes with it).
    pub nexus: Option<scsi::NexusId>,
}

/// A connection from the previous numatgtd, to be adopted (`Msg::Resume`).
pub struct MovedIn {
    pub state: iscsi_proto::MovedConn,
    pub accepted: Box<dyn crate::transport::Accepted>,
}

/// What an event thread reports about itself; one cache line each (written by its thread
/// once per wakeup, read by scrapes).
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct ThreadStats {
    /// The NUMA node the thread serves.
    pub node: usize,
    /// Nanoseconds spent working (outside poll).
    pub busy_ns: AtomicU64,
}

impl Shared {
    pub fn inbox(&self, thread: usize) -> Option<&Arc<Inbox>> {
        self.inboxes.get().and_then(|v| v.get(thread))
    }

    /// A new connection from `peer` may be adopted: fewer than `limits.max_connections`
    /// are open (else the refusal is counted and logged, and the caller closes it).
    pub fn admit(&self, peer: std::net::SocketAddr) -> bool {
        self.registry
            .limits
            .admit_connection(self.connections.load(Ordering::Relaxed), peer)
    }

    /// The event thread to serve a newly accepted connection, or `None` when the connection
    /// limit refuses it (counted and logged; dropping the connection closes it). Used by the
    /// listeners of the event threads and by the acceptor of portals added at run time.
    pub fn place(&self, a: &dyn Accepted) -> Option<usize> {
        if !self.admit(a.peer()) {
            return None;
        }
        Some(match a.placement(&self.topology) {
            Placement::Nic(ip) => self.thread_for(ip),
            Placement::Node(node) => self.thread_on_node(node),
        })
    }

    fn thread_count(&self) -> usize {
        self.inboxes.get().map_or(1, |v| v.len())
    }

    /// The event thread for a new connection that arrived on local address `ip`: round robin
    /// over the threads of the node its network device is attached to, when that is known
    /// (and has threads), else over all threads.
    pub fn thread_for(&self, ip: std::net::IpAddr) -> usize {
        let node = {
            let mut m = self.nic_nodes.lock().unwrap_or_else(|p| p.into_inner());
            *m.entry(ip).or_insert_with(|| self.topology.nic_node(ip))
        };
        self.thread_on_node(node)
    }

    /// An event thread of dense node `node` (round robin), or of any node when it is
    /// unknown or has no threads.
    pub fn thread_on_node(&self, node: Option<usize>) -> usize {
        let turn = self.next_thread.fetch_add(1, Ordering::Relaxed);
        match node
            .and_then(|n| self.threads_by_node.get(n))
            .filter(|t| !t.is_empty())
        {
            Some(local) => local[turn % local.len()],
            None => turn % self.thread_count(),
        }
    }
}

impl TaskControl for Shared {
    /// Asks every event thread to end the matching tasks of its sessions (see
    /// [`Msg::AbortTasks`]); the connections answer nothing for them.
    fn abort_tasks(
        &self,
        tid: u32,
        lun: Option<u64>,
        nexuses: Option<Vec<scsi::NexusId>>,
        except: Option<ConnId>,
        ended: Option<Arc<TasksEnded>>,
    ) {
        let inboxes: Vec<&Arc<Inbox>> = self.inboxes.get().into_iter().flatten().collect();
        if let Some(e) = &ended {
            // each thread counts itself down once it has looked at its sessions
            e.add(inboxes.len());
        }
        for inbox in inboxes {
            inbox.send(Msg::AbortTasks {
                tid,
                lun,
                nexuses: nexuses.clone(),
                except,
                ended: ended.clone(),
            });
        }
    }
}

impl ConnControl for Shared {
    fn close(&self, id: ConnId, reason: &'static str) {
        if let Some(inbox) = self.inbox(id.thread) {
            inbox.send(Msg::Close(id, reason));
        }
    }
}

//! Router cost per request against the number of cache-block sub-requests (1..128), on a
//! two-node geometry with 4 KiB blocks (so 128 sub-requests = a 512 KiB request, the seed's
//! worst case). Three variants:
//! - `route`: the production path (group-stepped affinity + choice);
//! - `per_block`: the seed's literal Algorithm 1 loop, one step per cache block;
//! - `route_group1`: the production path with group_blocks = 1 (every block its own group),
//!   i.e. the worst case for group stepping.
//!
//! Run: `cargo bench -p cache --bench router`.

use criterion::{BenchmarkId, Criterion, black_box, criterion_group, criterion_main};

use cache::{Geometry, RouteRequest, Router, RouterPolicy};

fn bench(c: &mut Criterion) {
    let policy = RouterPolicy {
        min_forward_bytes: 0,
        max_queue: usize::MAX,
    };
    let grouped = Router::new(Geometry::new(4096, 512, 128, 16, 2).unwrap(), policy);
    let single = Router::new(Geometry::new(4096, 512, 1, 16, 2).unwrap(), policy);
    let mut g = c.benchmark_group("router");
    for n in [1u64, 2, 4, 8, 16, 32, 64, 128] {
        // Start inside a group so larger requests cross a group boundary.
        let req = RouteRequest {
            lun: 1,
            offset: 100 * 4096,
            len: n * 4096,
            conn_node: 0,
            already_routed: false,
        };
        g.bench_with_input(BenchmarkId::new("route", n), &req, |b, req| {
            b.iter(|| grouped.route(black_box(req), |_| 0))
        });
        g.bench_with_input(BenchmarkId::new("per_block", n), &req, |b, req| {
            b.iter(|| {
                let a = grouped
                    .affinity_per_block(req.lun, black_box(req.offset), req.len)
                    .unwrap();
                grouped.choose(&a, req.conn_node, |_| 0)
            })
        });
        g.bench_with_input(BenchmarkId::new("route_group1", n), &req, |b, req| {
            b.iter(|| single.route(black_box(req), |_| 0))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_millis(800))
        .sample_size(30);
    targets = bench
}
criterion_main!(benches);

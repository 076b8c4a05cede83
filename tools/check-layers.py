#!/usr/bin/env python3
"""Checks that target-server's data path imports run one way.

Reads every module of target-server/src (test-only files, `tests.rs`, are left out), finds
the modules each one names (`use crate::…`, `crate::…::` paths, `super::…`), and checks:

  1. the layers of the data path: backend::reply and backend::payload (rank 0) <- the other
     backend modules (rank 1) <- dispatch (rank 2) <- transport, the transports behind their
     seam (rank 3) <- event_loop (rank 4). A module names only modules of its own rank or
     lower ones, never a layer above it;
  2. the base modules every layer may use (registry, serial_work, sgio, conn_id, range_locks, alloc_count, io_stats,
     proto_stats, qos) name none of the data-path modules;
  3. no import circle goes through the event loop, dispatch or the transports (Tarjan's
     strongly connected components over the whole module graph);
  4. the transports are reached through their seam only: no module outside
     `transport` (the event loop, the runtime, the management plane) names a transport's
     internals, `transport::tcp::…`, `transport::iser::…` or any other submodule of
     `transport/` — only the items of `transport/mod.rs` (the traits `Listener`,
     `Accepted`, `Link`, their types, and the functions that open portals).

Prints the graph's circles (there are some in the control plane: runtime, mgmt, reload) and
every violation; exit status 1 when there is one. Run: python3 tools/check-layers.py
"""

import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target-server", "src")

RANK = {"backend::reply": 0, "backend::payload": 0, "dispatch": 2, "transport": 3, "event_loop": 4}
BASE = {"registry", "serial_work", "sgio", "conn_id", "range_locks", "alloc_count", "io_stats", "proto_stats",
        "upgrade_stats", "qos"}
# the seam: its submodules (one per transport) are internals
SEAM = "transport"


def module_of(path):
    rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return "::".join(rel)


# top-level modules whose submodules are nodes of their own: backend's layers, and alua's
# (the registry's `Lun` holds `alua::shared`, which names no LUN; the drivers name the LUN),
# and ship's (dispatch names its route and link; its server names dispatch)
SPLIT = ("backend", "alua", "ship")


def unit(module):
    """The node of the graph a module belongs to: the submodules of SPLIT's modules are
    nodes of their own, every other top-level module is one node with its children."""
    parts = module.split("::")
    if not parts or parts[0] == "":
        return None
    if parts[0] in SPLIT and len(parts) > 1:
        return parts[0] + "::" + parts[1]
    return parts[0]


def rank(u):
    if u in RANK:
        return RANK[u]
    if u == "backend" or u.startswith("backend::"):
        return 1
    return None


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def references(module, text):
    """Modules named in `text` of `module`, as absolute paths."""
    out = set()
    for m in re.finditer(r"\bcrate::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)", text):
        out.add(m.group(1))
    # `use crate::{a, b::c}` and `use crate::a::{b, c::d}` groups (one level of braces)
    for m in re.finditer(r"\bcrate::((?:[a-z_][a-z0-9_]*::)*)\{([^}]*)\}", text):
        for item in m.group(2).split(","):
            item = item.strip().split(" ")[0]
            if item and item != "self":
                out.add(m.group(1) + item)
    parent = module.split("::")[:-1]
    for m in re.finditer(r"\bsuper::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)", text):
        out.add("::".join(parent + [m.group(1)]))
    for m in re.finditer(r"\bsuper::\{([^}]*)\}", text):
        for item in m.group(1).split(","):
            item = item.strip().split(" ")[0]
            if item and item != "self":
                out.add("::".join(parent + [item]))
    return out


def source_modules():
    modules = {}
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".rs") and f != "tests.rs":
                p = os.path.join(dirpath, f)
                modules[module_of(p)] = p
    return modules


def module_text(path):
    """A module's code: comments and its own `#[cfg(test)] mod tests { … }` cut off."""
    with open(path, encoding="utf-8") as fh:
        text = strip_comments(fh.read())
    cut = re.search(r"#\[cfg\(test\)\]\s*mod\s+tests\s*\{", text)
    return text[: cut.start()] if cut else text


def build_graph(modules):
    graph = {}
    for module, path in modules.items():
        src = unit(module)
        if src is None or module == "main":
            continue
        text = module_text(path)
        edges = graph.setdefault(src, set())
        for ref in references(module, text):
            dst = unit(ref)
            if dst and dst != src and (dst in graph or any(unit(m) == dst for m in modules)):
                edges.add(dst)
    return graph


def sccs(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def seam_violations(modules):
    """Modules outside the seam that name a transport's internals (a submodule of it)."""
    internals = {m.split("::")[1] for m in modules if m.startswith(SEAM + "::")}
    bad = []
    for module, path in sorted(modules.items()):
        if module == SEAM or module.startswith(SEAM + "::") or module == "main":
            continue
        for ref in sorted(references(module, module_text(path))):
            parts = ref.split("::")
            if len(parts) > 1 and parts[0] == SEAM and parts[1] in internals:
                bad.append(f"seam: {module} names {ref} (a transport's internals; use {SEAM}::…)")
    return bad


def main():
    modules = source_modules()
    graph = build_graph(modules)
    bad = []
    for src, dsts in sorted(graph.items()):
        rs = rank(src)
        for dst in sorted(dsts):
            rd = rank(dst)
            if rs is not None and rd is not None and rd > rs:
                bad.append(f"layer: {src} (rank {rs}) names {dst} (rank {rd})")
            if src in BASE and rd is not None:
                bad.append(f"base: {src} names data-path module {dst}")
    circles = [c for c in sccs(graph) if len(c) > 1]
    for c in circles:
        print("circle:", " <-> ".join(c))
        for m in ("event_loop", "dispatch", SEAM):
            if m in c:
                bad.append(f"circle through {m}: {' <-> '.join(c)}")
    bad += seam_violations(modules)
    edges = sum(len(d) for d in graph.values())
    print(f"check-layers: {len(graph)} modules, {edges} imports, {len(circles)} circles")
    for b in bad:
        print("VIOLATION", b)
    if bad:
        print(f"check-layers: {len(bad)} violations")
        return 1
    print(
        "check-layers: data path layers hold (reply <- backend <- dispatch <- transport <- "
        "event_loop), transports behind their seam"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

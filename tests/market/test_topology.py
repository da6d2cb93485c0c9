"""Node-aware gang placement (market/topology.py): fewest nodes, stickiness, CPU reservations,
never over any node's GPU or CPU capacity."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from market.placement import PlacementError
from market.topology import ClusterConfig, GangRequest, NodePlacement, Topology, capacity_violations, place_on_nodes

CLUSTER = ClusterConfig(gpus_per_node=4, cpus_per_node=8)


def test_a_uniform_cluster_is_nodes_of_gpus_per_node():
    topo = Topology.uniform(10, CLUSTER)
    assert topo.servers() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [n.cpus for n in topo.nodes] == [8, 8, 8]
    assert topo.node_of(5) == 1 and topo.nodes_spanned([3, 4, 8]) == 3
    assert [topo.min_nodes(n) for n in (1, 4, 5, 8, 9, 10)] == [1, 1, 2, 2, 3, 3]
    assert topo.ring_bandwidth(1) == CLUSTER.local_bytes_s == 50e9
    assert topo.ring_bandwidth(2) == CLUSTER.nic_bytes_s == 25e9 / 8


def test_gangs_go_to_the_fewest_nodes_best_fit_first():
    topo = Topology.uniform(16, CLUSTER)
    out = place_on_nodes([GangRequest(1, 1), GangRequest(2, 8), GangRequest(3, 2), GangRequest(4, 4)], topo, {})
    assert [topo.nodes_spanned(out.gpus[j]) for j in (1, 2, 3, 4)] == [1, 2, 1, 1]
    # the 1-GPU and 2-GPU jobs share the node the 8- and 4-GPU gangs left (best fit)
    assert topo.node_of(out.gpus[1][0]) == topo.node_of(out.gpus[3][0])
    assert capacity_violations(out, topo) == []


def test_a_job_whose_count_is_unchanged_keeps_its_gpus_even_across_nodes():
    topo = Topology.uniform(8, CLUSTER)
    previous = {7: (3, 4)}  # spans two nodes: kept, no restart
    out = place_on_nodes([GangRequest(9, 4), GangRequest(7, 2)], topo, previous)
    assert out.gpus[7] == (3, 4)
    assert len(out.gpus[9]) == 4 and not set(out.gpus[9]) & {3, 4}
    # a resized job prefers its previous GPUs
    out = place_on_nodes([GangRequest(7, 4)], topo, {7: (4, 5)})
    assert set(out.gpus[7]) == {4, 5, 6, 7}


def test_cpu_reservations_hold_cores_and_bound_gpus():
    topo = Topology.uniform(8, CLUSTER)
    out = place_on_nodes([GangRequest(1, 2, cpus_per_gpu=2, cpus={1: 4})], topo, {})
    # node 1 has room for exactly 2 workers beside the 4 reserved cores: best fit puts them there
    assert out.nodes_of(1, topo) == (1,) and out.cpus[1] == {1: 8}
    # 4 GPUs x 3 cores do not fit one 8-core node: the gang spreads over two nodes
    out = place_on_nodes([GangRequest(2, 4, cpus_per_gpu=3)], topo, {})
    assert topo.nodes_spanned(out.gpus[2]) == 2 and all(c <= 8 for c in out.cpus[2].values())
    with pytest.raises(PlacementError, match="job 3"):
        place_on_nodes([GangRequest(3, 1, cpus={0: 9})], topo, {})
    with pytest.raises(PlacementError, match="job 4"):
        place_on_nodes([GangRequest(4, 8, cpus_per_gpu=3)], topo, {})


def test_a_pinned_shape_is_placed_as_given():
    topo = Topology.uniform(8, CLUSTER)
    out = place_on_nodes([GangRequest(1, 3, gpus_on={0: 1, 1: 2}, cpus={0: 4})], topo, {})
    assert sorted(topo.node_of(g) for g in out.gpus[1]) == [0, 1, 1]
    assert out.cpus[1] == {0: 4}
    with pytest.raises(PlacementError, match="does not add up"):
        place_on_nodes([GangRequest(1, 3, gpus_on={0: 1})], topo, {})
    with pytest.raises(PlacementError, match="lack GPUs"):
        place_on_nodes([GangRequest(1, 5, gpus_on={0: 5})], topo, {})


def test_capacity_violations_are_named():
    topo = Topology.uniform(4, CLUSTER)
    bad = NodePlacement(gpus={1: (0, 1), 2: (1,), 3: (9,)}, cpus={1: {0: 6}, 2: {0: 6}})
    problems = capacity_violations(bad, topo)
    assert any("GPU 1 given to jobs 1 and 2" in p for p in problems)
    assert any("unknown GPU 9" in p for p in problems)
    assert any("node 0: 12 cores reserved, 8 exist" in p for p in problems)


@settings(max_examples=60, deadline=None)
@given(
    gpus=st.integers(1, 24),
    per_node=st.sampled_from([1, 2, 4, 8]),
    sizes=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=10),
    cores=st.integers(0, 3),
    keep=st.booleans(),
)
def test_no_placement_exceeds_a_node_and_every_job_gets_its_count(gpus, per_node, sizes, cores, keep):
    topo = Topology.uniform(gpus, ClusterConfig(gpus_per_node=per_node, cpus_per_node=3 * per_node))
    requests, used = [], 0
    for i, n in enumerate(sizes):
        if used + n <= gpus:
            requests.append(GangRequest(i, n, cpus_per_gpu=cores))
            used += n
    first = place_on_nodes(requests, topo, {})  # <= 3 cores per GPU on 3 x per_node cores: always fits
    assert capacity_violations(first, topo) == []
    assert {j: len(g) for j, g in first.gpus.items()} == {r.job_id: r.gpus for r in requests}
    # a second round with the same counts keeps every gang where it was
    again = place_on_nodes(requests[::-1] if keep else requests, topo, first.gpus)
    assert again.gpus == first.gpus

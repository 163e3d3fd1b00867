"""What a start counts as autotuning: ``select_algorithm`` benchmarks only while Inductor lowers a graph, and on an
FX-graph hit Inductor replays the cached graph's counter deltas (``counter_deltas``), so the counter of a process
that lowered nothing is the warm's, not this start's (on the H100 a pulled max-autotune GPT that benchmarked nothing
showed 14, and check called it a miss)."""

from __future__ import annotations

from cachetool.engines.torch.result import counted


def process(hits=0, misses=0, bypasses=0, autotune=0) -> dict:
    return {
        "counters": {
            "inductor": {
                "fxgraph_cache_hit": hits,
                "fxgraph_cache_miss": misses,
                "fxgraph_cache_bypass": bypasses,
                "select_algorithm_autotune": autotune,
            }
        }
    }


def test_the_autotune_count_a_hit_replays_is_not_counted():
    assert counted([process(hits=2, autotune=14)])["autotune_benchmarks"] == 0


def test_autotuning_in_a_process_that_lowered_a_graph_is_counted():
    assert counted([process(misses=1, autotune=14)])["autotune_benchmarks"] == 14
    assert counted([process(bypasses=1, autotune=3)])["autotune_benchmarks"] == 3


def test_each_process_is_judged_on_its_own():
    reports = [process(hits=2, autotune=14), process(misses=1, autotune=5)]
    counts = counted(reports)
    assert counts["autotune_benchmarks"] == 5
    assert counts["fx_graph_hits"] == 2 and counts["fx_graph_misses"] == 1

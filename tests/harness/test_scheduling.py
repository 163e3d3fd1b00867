"""tests/conftest.py's order of the units of work: the long kinds first, taking turns, each unit's tests together."""

from tests.conftest import COMPILES, QUICK, SERVERS, VLLM, long_units_first


def test_long_kinds_take_turns_then_servers_then_the_rest_in_collection_order():
    units = {
        "quick-a": [QUICK],
        "servers": [QUICK, SERVERS],
        "compile-1": [COMPILES],
        "vllm-3": [VLLM] * 3,
        "compile-2": [QUICK, COMPILES, COMPILES],
        "vllm-1": [VLLM, COMPILES],
        "quick-b": [QUICK, QUICK],
        "vllm-2": [VLLM, VLLM],
    }
    assert long_units_first(units) == [
        "vllm-3",
        "compile-2",
        "vllm-2",
        "compile-1",
        "vllm-1",
        "servers",
        "quick-a",
        "quick-b",
    ]


def test_ties_keep_collection_order():
    units = {"b": [COMPILES], "a": [COMPILES], "c": [QUICK]}
    assert long_units_first(units) == ["b", "a", "c"]

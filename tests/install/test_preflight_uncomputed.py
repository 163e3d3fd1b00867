"""A factor value that could not be computed is never reported as a difference (issue 45, item 1).

Where torch's build key or the Inductor config hash cannot be computed, the compiler records a sentinel,
``<unknown: torch_key: ImportError>``. The preflight named it as a difference ("compiler factor 'torch_key' differs:
bundle ..., this machine '<unknown: torch_key: WaitTimeoutError>'"), sending the user after a difference that is
none. Now it says the value could not be computed, and that whether the two match is not known."""

from __future__ import annotations

import pytest

from cachetool.errors import CacheMissError
from tests.cache_trees import dir_is_empty_or_absent, local_factors, make_native_tree
from tests.cli_calls import one_error_line

UNCOMPUTED = "<unknown: {}: ImportError>"  # as the compiler records one (compiler.cache_key.UNKNOWN)


@pytest.mark.parametrize("field", ["torch_key", "inductor_config"])
def test_a_value_that_could_not_be_computed_is_not_a_difference(tmp_path, cli, keys, field):
    # recorded where the value could not be computed, on a build other than this machine's (so the preflight
    # computes this machine's values instead of taking the bundle's)
    factors = local_factors(
        evidence=True, **{"evidence.torch_record": "0" * 64, f"compiler.{field}": UNCOMPUTED.format(field)}
    )
    src = make_native_tree(tmp_path / "src", layers=2, factors=factors)
    assert cli("pack", src, "-o", tmp_path / "b.ctb", "--sign-key", keys["priv"]).rc == 0
    root = tmp_path / "root"
    r = cli("install", tmp_path / "b.ctb", "--cache-root", root, "--trust", keys["pub"])
    assert r.rc == CacheMissError.exit_code, r  # it cannot be told to hit: refused, as a preflight refuses
    line = one_error_line(r.err)
    assert field in line and "differs" not in line and "could not be computed" in line, line
    assert dir_is_empty_or_absent(root)

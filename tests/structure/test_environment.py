"""The environment: every variable either package reads is registered (cachetool/envs.py, compiler/envs.py, an
engine's own) and in the table of docs/configuration.md, every variable that table names is one the code reads, a
variable both packages read has one default, and none is read but through the registries."""

from __future__ import annotations

import re

from tests.structure.modules import ROOT, modules


def _documented() -> list[str]:
    """The variables docs/configuration.md's table names in its first column (`NAME`, or a family `PREFIX_*`)."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    rows = [line.split("|")[1] for line in text.splitlines() if line.startswith("| `")]
    return [name for cell in rows for name in re.findall(r"`([A-Z][A-Z0-9_]*\*?)`", cell)]


def test_every_environment_variable_is_registered_and_documented():
    import cachetool.envs
    from cachetool import engines
    from compiler import envs

    declared = [v for e in engines.ENGINES.values() for v in e.variables]  # an engine's own, beside the registry
    assert [v.name for v in declared if v.name in {w.name for w in cachetool.envs.VARIABLES}] == []
    assert all(isinstance(v, cachetool.envs.EnvVar) for v in declared)
    ours = {v.name: v for v in (*cachetool.envs.VARIABLES, *declared)}
    theirs = {v.name: v for v in envs.VARIABLES.values()}
    # a variable both packages read (the native cache root, the logging level) has one default
    assert [n for n in set(ours) & set(theirs) if ours[n].default != theirs[n].default] == []
    documented = _documented()
    assert [n for n in {**ours, **theirs} if n not in documented] == []
    # and the reverse: a documented variable is registered, or one the env factor hashes (torch's own settings),
    # or a family of them (`TORCHINDUCTOR_*`): a variable the code stopped reading leaves the table
    read = {*ours, *theirs, *envs.ENV_FACTOR_VARS}
    assert [
        n for n in documented if n not in read and not (n.endswith("*") and any(r.startswith(n[:-1]) for r in read))
    ] == []
    assert not any(
        v.name.startswith(("CACHETOOL_STORE", "CACHETOOL_TRUSTED", "AWS_", "DOCKER")) for v in envs.COMPILER_VARIABLES
    )  # the stores' and trust's variables are cachetool's
    read_outside = []
    for mod, path in modules().items():
        if mod in ("compiler.envs", "cachetool.envs"):
            continue
        for m in re.finditer(
            r"os\.environ\.get\(|os\.getenv\(|os\.environ\[[^\]]+\](?!\s*=)|in os\.environ", path.read_text()
        ):
            read_outside.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    # compiler/layout.py saves and restores the two Inductor/Triton cache variables around a compile (its own
    # write, not a setting read); that module belongs to the pipeline and is left as it is.
    assert [r for r in read_outside if not r.startswith("compiler/layout.py")] == []

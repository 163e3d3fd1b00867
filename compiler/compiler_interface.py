"""Compiler adaptors: compile a piece, save it, load it again (vLLM's ``CompilerInterface``).

:class:`InductorStandaloneAdaptor` uses ``torch._inductor.standalone_compile`` and
``CompiledArtifact.save/load`` (``binary`` or ``unpacked``). :class:`EagerAdaptor` runs the piece as is
(useful to test the plumbing without Inductor).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.fx as fx

from compiler import cache_key, torch_compat


class CompilerInterface:
    """compile → (callable, handle); load(handle) → callable. A handle is ``(key, relative artifact path)``."""

    name = "base"

    def compute_hash(self, device: str) -> str:
        return cache_key.factor_hash(cache_key.local_compiler_factors(device))

    def compile(
        self,
        graph: fx.GraphModule,
        example_inputs: list[Any],
        runtime_shape: int | None,
        key: str,
        directory: Path,
        save_format: str,
    ) -> tuple[Callable[..., Any], tuple[str, str] | None]:
        raise NotImplementedError

    def load(
        self,
        handle: tuple[str, str],
        graph: fx.GraphModule,
        example_inputs: list[Any],
        runtime_shape: int | None,
        directory: Path,
        save_format: str,
    ) -> Callable[..., Any]:
        raise NotImplementedError


class EagerAdaptor(CompilerInterface):
    name = "eager"

    def compile(self, graph, example_inputs, runtime_shape, key, directory, save_format):  # noqa: ANN001
        return graph, None

    def load(self, handle, graph, example_inputs, runtime_shape, directory, save_format):  # noqa: ANN001
        return graph


def _standalone_compile(graph: fx.GraphModule, example_inputs: list[Any], runtime_shape: int | None) -> Any:
    if runtime_shape is None:
        dynamic = "from_tracing_context" if torch_compat.tracing_context() is not None else "from_graph"
    else:
        dynamic = "from_example_inputs"
    patches = cache_key.inductor_patches()
    if runtime_shape is not None:  # compile_sizes: max-autotune on CUDA (compiler.autotune)
        from compiler.autotune import size_config_patches

        patches.update(size_config_patches(example_inputs))
    return torch_compat.standalone_compile(graph, example_inputs, dynamic_shapes=dynamic, config_patches=patches)


class InductorStandaloneAdaptor(CompilerInterface):
    """Inductor via ``standalone_compile``; artifacts are ``artifact_<key>`` files (binary) or folders (unpacked)."""

    name = "inductor_standalone"

    @staticmethod
    def artifact_name(key: str, runtime_shape: int | None) -> str:
        shape = "general" if runtime_shape is None else f"s{runtime_shape}"
        return f"artifact_{shape}_{key[:24]}"

    def compile(self, graph, example_inputs, runtime_shape, key, directory, save_format):  # noqa: ANN001
        artifact = _standalone_compile(graph, example_inputs, runtime_shape)
        if directory is None:
            return artifact, None
        name = self.artifact_name(key, runtime_shape)
        path = Path(directory) / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        artifact.save(path=str(path), format=save_format)
        return artifact, (key, name)

    def load(self, handle, graph, example_inputs, runtime_shape, directory, save_format):  # noqa: ANN001
        _, name = handle
        path = Path(directory) / name
        with torch_compat.inductor_config().patch(cache_key.inductor_patches()):
            return torch_compat.load_compiled_artifact(str(path), save_format)


def artifact_digest(path: Path) -> str:
    """sha256 over an artifact file, or over the sorted files of an unpacked artifact folder."""
    h = hashlib.sha256()
    if path.is_dir():
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            h.update(str(f.relative_to(path)).encode())
            h.update(f.read_bytes())
    else:
        h.update(path.read_bytes())
    return h.hexdigest()

"""The native engine: this project's pipeline (:mod:`compiler`), the only part of cachetool that imports it.

- :mod:`.engine`: :class:`NativeEngine`, the :class:`~cachetool.engines.base.Engine` it is;
- :mod:`.start`: a start (warm, check) in this process or in N rank processes, the compilation config's parsing;
- :mod:`.error_mapping`: the pipeline's errors as cachetool's, by kind;
- :mod:`.key`: its cache keys (comparison, prediction, this machine's factors);
- :mod:`.machine`: this machine as the compiler sees it (torch-free), its logging and presets;
- :mod:`.layout`: the tree it writes, as a bundle layout.
"""

from cachetool.engines.native.engine import NativeEngine

__all__ = ["NativeEngine"]

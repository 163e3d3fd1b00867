"""Any torch.compile program as an engine (``--engine torch``): :class:`~.engine.TorchEngine`
(:mod:`~cachetool.engines.torch.engine`). Warm and check run the user's own command with Inductor's and Triton's
cache folders in the root and a probe the program need not know about (:mod:`~cachetool.engines.torch.start`, whose
:class:`~cachetool.engines.torch.start.TorchStartRequest` a start's options parse into, :mod:`~.run`, :mod:`~.probe`);
what it compiled and loaded is the probe's report (:mod:`~.result`); the facts its caches depend on are recorded,
checked and compared in :mod:`~.key`; its root as a bundle layout is :mod:`~.layout`; the arguments after ``--``
are read in :mod:`~.command`. See docs/torch.md."""

from cachetool.engines.torch.engine import TorchEngine

__all__ = ["TorchEngine"]

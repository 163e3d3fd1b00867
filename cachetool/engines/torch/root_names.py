"""The folders at the top of a ``--engine torch`` cache root (the layout: :mod:`cachetool.engines.torch.layout`)."""

from __future__ import annotations

__all__ = ["FACTS", "INDUCTOR", "SITE", "TRITON"]

INDUCTOR = "inductor"  # TORCHINDUCTOR_CACHE_DIR of the program
TRITON = "triton"  # TRITON_CACHE_DIR of the program
FACTS = "facts"  # facts/{key}/cache_key_factors.json: what a warm recorded
SITE = ".cachetool-site"  # written by cachetool, never packed (cachetool.engines.torch.autotune_site)

"""Refs: a ref the user names, read. Its store opened with it (:mod:`.opening`), its index read, the entry for this
machine chosen (:mod:`.choice`: pull's and the readers' one choice), and what ``ls``, ``rm`` and ``gc`` do to a
store's refs (:mod:`.admin`). Above the stores and the engines whose facts the choice reads; below the transfers
(push, pull, reading a ref's bundle) that start from it."""

__all__ = ["admin", "choice", "opening"]

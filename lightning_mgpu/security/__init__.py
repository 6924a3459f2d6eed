"""Trust: the known advisories of what the bundle runs on, and what it loads without being told to trust it.

- :mod:`~lightning_mgpu.security.advisories`: ``advisories.json`` (each advisory's id, package, affected versions, fixed
  version, summary and link, with the date they were checked) and which of them the installed torch, Lightning,
  pytorch-lightning, Ray and horovod have; read without importing any of them.
- :mod:`~lightning_mgpu.security.trust`: the one check at every load of a checkpoint the bundle did not write in this
  run.

It imports :mod:`lightning_mgpu.utilities` at most; ``checkpoint``, the command line and the package's import use it.
SECURITY.md at the repository's root says what is trusted and what is refused.
"""

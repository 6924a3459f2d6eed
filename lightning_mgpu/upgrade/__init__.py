"""``lightning-mgpu upgrade PATH...``: Lightning 1.x multi-GPU scripts -> Lightning 2.x on lightning_mgpu.

The rules live in :mod:`~lightning_mgpu.upgrade.rules`, the libcst transformer in
:mod:`~lightning_mgpu.upgrade.transform` and the files, diff and summary in :mod:`~lightning_mgpu.upgrade.run`. libcst
is imported only when an upgrade runs (the ``upgrade`` extra).
"""

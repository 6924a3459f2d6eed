"""Command-line tools that are not part of training: ``build_horovod`` (``python -m lightning_mgpu build-horovod``)."""

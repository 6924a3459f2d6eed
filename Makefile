# Convenience wrappers around scripts/ (the README's two commands work without make).
.PHONY: setup horovod train test info
setup:
	bash scripts/setup_env.sh
horovod: setup
	bash scripts/build_horovod.sh
train:
	bash scripts/train.sh $(ARGS)
test:
	bash scripts/test.sh $(ARGS)
info: setup
	.venv/bin/python -m lightning_mgpu info

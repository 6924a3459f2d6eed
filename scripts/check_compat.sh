#!/usr/bin/env bash
# The compatibility pass: the unit tier, and a two-process fit per strategy under both Lightning namespaces
# (tests/integration/utilities/test_namespaces.py), on the oldest Lightning the bundle supports.
#
#   bash scripts/check_compat.sh                      # Lightning 2.5.1 (lightning and pytorch-lightning) over .venv
#   LIGHTNING_COMPAT=2.5.6 bash scripts/check_compat.sh
#
# .venv-compat holds only the two Lightning distributions of that version; everything else (torch, fairscale, horovod,
# the test tools) comes from .venv through a .pth file placed after them, so the older Lightning shadows the newer one
# and the set-up takes seconds, not a second install of torch. Built once per version, like the horovod wheel.
# Extra arguments go to both pytest runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
VERSION=${LIGHTNING_COMPAT:-2.5.1}
CPY=.venv-compat/bin/python
stamp=.venv-compat/.lightning_compat
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$VERSION" ]; then
  rm -rf .venv-compat
  "$(.venv/bin/python -c 'import sys; print(sys._base_executable)')" -m venv --without-pip .venv-compat
  site=$($CPY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  .venv/bin/python -m pip install -q --no-deps --target "$site" "lightning==$VERSION" "pytorch-lightning==$VERSION"
  # After .venv-compat's own packages on sys.path: .venv's packages, then the repository (as the editable install does).
  .venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > "$site/zz_lightning_mgpu_base.pth"
  echo "$PWD" >> "$site/zz_lightning_mgpu_base.pth"
  echo "$VERSION" > "$stamp"
fi
# The tests' start-up hook, as in .venv (scripts/setup_env.sh): .pth files on the path the file above adds are not run.
cp tests/helpers/lightning_mgpu_test_startup.pth "$($CPY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/"
$CPY -c "import lightning, pytorch_lightning, torch; print(f'compat pass: lightning {lightning.__version__}, pytorch_lightning {pytorch_lightning.__version__}, torch {torch.__version__}')"
# Lightning 2.5.1 has CVE-2026-58659, so `import lightning_mgpu` warns once per process (SecurityAdvisoryWarning, a
# UserWarning): expected here. pyproject's pytest filterwarnings turns no warning into an error, so the pass goes on.
$CPY - <<'PY'
import warnings

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import lightning_mgpu  # noqa: F401
from lightning_mgpu.security.advisories import SecurityAdvisoryWarning

said = [str(w.message) for w in caught if issubclass(w.category, SecurityAdvisoryWarning)]
if said:
    print("compat pass: import lightning_mgpu warns (expected on this Lightning; the tests run on):", *said, sep="\n  ")
else:
    print("compat pass: import lightning_mgpu warns about no advisory")
PY
export RAY_USAGE_STATS_ENABLED=0 NEPTUNE_MODE=debug PYTHONUNBUFFERED=1
$CPY -m pytest -n "${PYTEST_WORKERS:-2}" tests/unit "$@"
$CPY -m pytest -n "${PYTEST_WORKERS:-2}" tests/integration/utilities/test_namespaces.py "$@"

#!/usr/bin/env bash
# The Python user's route, as docs/python.md gives it: a fresh virtualenv (build-venv/), `pip install .` (the CLI
# built by CMake through scikit-build-core, inside the package), then the CLI through `python -m attncheck` and the
# example pytest file, with no PYTHONPATH, ATTNCHECK_EXE or build tree. Needs PyPI (scikit-build-core, numpy, h5py,
# pytest). Run by .ci/run after tools/bootstrap.sh, whose ccache objects make the pip build cheap.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf build-venv
/usr/bin/python3 -m venv build-venv
unset PYTHONPATH ATTNCHECK_EXE
build-venv/bin/pip install -q . pytest
build-venv/bin/python -m attncheck verify --impl cpu --fixtures golden >build-venv/verify.log \
  || { tail -20 build-venv/verify.log; exit 1; }
tail -1 build-venv/verify.log
(cd build-venv && bin/python -m pytest -q -p no:cacheprovider ../examples/python)

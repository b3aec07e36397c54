#!/bin/sh
# py-env.sh [BUILD_DIR] - the Python environment of the tests that use Hugging
# Face transformers as an independent reference (tests/prog/py/hf_ref.py).
#
# Makes BUILD_DIR/pyenv (default build/pyenv), a venv of Debian's own python
# (/usr/bin/python3) with --system-site-packages, so that it sees Debian's
# python3-torch 1.13, python3-numpy and python3-h5py, and pip-installs the
# pinned packages below into it from PyPI. Idempotent: when the venv already
# holds exactly these pins it does nothing (no network, about a second).
# Installs the Debian packages it needs (python3-venv, python3-torch, ...) with
# apt-get as root, through sudo when that needs no password, otherwise says
# which. Progress and errors go to stderr; the last line on stdout is the
# python to run (absolute path). Exits non-zero with a message on failure.
#
# Why transformers 4.49.0: the newest release that works with torch 1.13.
# 4.50.0 and later import torch.distributed.tensor in modeling_utils, which
# torch 1.13 lacks, and 4.53 and later disable torch < 2.1 outright. The other
# pins are releases of the same weeks (February 2025), within 4.49.0's bounds;
# huggingface_hub before 0.32 needs no hf-xet binary. Nothing here downloads
# models: hf_ref.py runs offline on local folders only.
set -eu

B=${1:-build}
VENV="$B/pyenv"
SYS_PY=/usr/bin/python3
PINS="transformers==4.49.0 tokenizers==0.21.0 safetensors==0.5.3 huggingface_hub==0.29.1"
# their dependencies that Debian's python3-* do not provide
PINS="$PINS filelock==4.3.1 fsspec==2026.9.0 packaging==26.4 regex==2026.11.19 tqdm==4.70.1"
# ml_dtypes: NumPy's float8_e4m3fn and float8_e5m2, the casts tests/prog/fp8_casts.sh
# holds lib/kernels/fp8.h to (0.5.4 still accepts Debian's numpy 1.24)
PINS="$PINS ml_dtypes==0.5.4"
# Jinja2 and MarkupSafe: what transformers' apply_chat_template renders chat
# templates with, the reference of tests/prog/chat_template.sh and
# tests/prog/sft_data.sh (3.1.6: March 2025, within transformers 4.49.0's
# jinja2>=3.1.0)
PINS="$PINS Jinja2==3.1.6 MarkupSafe==3.0.2"
# Debian packages: the interpreter, venv (its ensurepip), and the system
# packages the venv reuses (python3-torch brings python3-yaml and -requests).
DEB_PKGS="python3 python3-venv python3-torch python3-numpy python3-h5py python3-yaml python3-requests"

say() { echo "py-env: $*" >&2; }
die() {
	say "error: $*"
	exit 1
}

# ok_env: the venv runs, has exactly the pinned versions, and imports torch,
# numpy and transformers.
ok_env() {
	py_env_check 'import torch, numpy, safetensors.torch, transformers, ml_dtypes, jinja2  # noqa: E401,F401'
}

# shellcheck source=tests/py-env-common.sh
. "$(dirname "$0")/py-env-common.sh"
py_env_done_if_ready pyenv.lock
py_env_debian
[ -x "$SYS_PY" ] || die "$SYS_PY not found"
"$SYS_PY" -c 'import torch, numpy' 2>/dev/null ||
	die "$SYS_PY cannot import torch and numpy (Debian's python3-torch, python3-numpy)"

# The venv: (re)made when its python does not run.
if ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
	rm -rf "$VENV"
	say "creating $VENV"
	"$SYS_PY" -m venv --system-site-packages "$VENV" >&2 ||
		die "'$SYS_PY -m venv --system-site-packages $VENV' failed (Debian's python3-venv?)"
fi

say "installing into $VENV: $PINS"
t0=$(date +%s)
# Binary wheels only: an sdist of tokenizers would need a Rust toolchain.
# shellcheck disable=SC2086
PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip install --no-input \
	--progress-bar off -q --only-binary=:all: $PINS >&2 ||
	die "pip install into $VENV failed (is PyPI reachable?)"
say "installed in $(($(date +%s) - t0)) s"

if ! ok_env; then
	# show why
	"$VENV/bin/python" -c 'import torch, numpy, safetensors.torch, transformers' >&2 || true
	die "$VENV does not import torch, numpy and transformers with the pinned versions"
fi
py_env_print

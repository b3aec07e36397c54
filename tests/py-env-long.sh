#!/bin/sh
# py-env-long.sh [BUILD_DIR] - the second Python environment of the tests
# that use Hugging Face transformers as an independent reference: a newer
# torch and transformers than tests/py-env.sh's, for the models that only
# newer transformers has (Qwen3ForCausalLM, Qwen3MoeForCausalLM, ...). Only
# make check-long (MEGAC_LONG=1) uses it, never make test.
#
# Makes BUILD_DIR/pyenv-long (default build/pyenv-long), a venv of Debian's
# own python (/usr/bin/python3, 3.11) WITHOUT --system-site-packages, so that
# Debian's python3-torch 1.13 and python3-numpy cannot shadow the pinned
# ones, and pip-installs every pin below into it from PyPI, numpy and h5py
# too. Idempotent: when the venv already holds exactly these pins it does
# nothing (no network, a few seconds: it imports torch and transformers). Installs python3-venv with apt-get
# as root (or through password-less sudo) when it is missing. Progress and
# errors go to stderr; the last line on stdout is the python to run (absolute
# path). Exits non-zero with a message on failure.
#
# Size and time: PyPI's only Linux x86_64 wheel of torch 2.5.1 is the CUDA
# 12.4 build, and it needs its NVIDIA packages (cuBLAS, cuDNN, NCCL, ...,
# exact versions that torch itself pins) and triton to import at all, even
# on a CPU. PyTorch's own CPU-only index is not a package registry this
# project may reach, so the venv is about 5.3 GB (about 3 GB downloaded);
# see docs/testing.md for the time it took. The tests use the CPU only.
#
# Why these versions: transformers 4.53.3 (July 2025) has Qwen3, Qwen3-MoE,
# DeepSeek-V3, Mamba2 and Gemma 2/3 and needs torch >= 2.1; torch 2.5.1 is
# the pinned torch. The other pins are releases of the same months within
# both packages' bounds; huggingface_hub before 0.32 needs no hf-xet binary.
# Nothing here downloads models: the references run offline on local folders.
set -eu

B=${1:-build}
VENV="$B/pyenv-long"
SYS_PY=/usr/bin/python3
PINS="torch==2.5.1 transformers==4.53.3 tokenizers==0.21.2 safetensors==0.5.3 huggingface_hub==0.31.1"
PINS="$PINS numpy==2.1.3 h5py==3.13.0"
# their dependencies but torch's NVIDIA packages and triton (which torch pins
# exactly itself)
PINS="$PINS filelock==3.18.0 fsspec==2025.5.1 packaging==25.0 regex==2024.11.6 tqdm==4.67.1"
PINS="$PINS PyYAML==6.0.2 requests==2.32.4 certifi==2025.7.14 charset-normalizer==3.4.2 idna==3.10"
PINS="$PINS urllib3==2.5.0 typing_extensions==4.14.1 sympy==1.13.1 mpmath==1.3.0 networkx==3.4.2"
PINS="$PINS Jinja2==3.1.6 MarkupSafe==3.0.2"
DEB_PKGS="python3 python3-venv"

say() { echo "py-env-long: $*" >&2; }
die() {
	say "error: $*"
	exit 1
}

# ok_env: the venv runs, has exactly the pinned versions, imports torch,
# numpy, h5py and transformers, and they are the venv's own (not Debian's).
ok_env() {
	py_env_check 'import h5py, numpy, safetensors.torch, torch, transformers  # noqa: E401,F401
if not torch.__file__.startswith(sys.prefix) or not numpy.__file__.startswith(sys.prefix):
    sys.exit(1)'
}

# shellcheck source=tests/py-env-common.sh
. "$(dirname "$0")/py-env-common.sh"
py_env_done_if_ready pyenv-long.lock
py_env_debian
[ -x "$SYS_PY" ] || die "$SYS_PY not found"

# The venv: (re)made when its python does not run, or when it sees the
# system's site-packages (a venv made otherwise by hand).
if ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1 ||
	grep -q '^include-system-site-packages *= *true' "$VENV/pyvenv.cfg" 2>/dev/null; then
	rm -rf "$VENV"
	say "creating $VENV"
	"$SYS_PY" -m venv "$VENV" >&2 ||
		die "'$SYS_PY -m venv $VENV' failed (Debian's python3-venv?)"
fi

say "installing into $VENV (about 3 GB from PyPI: torch's CUDA packages come with it): $PINS"
t0=$(date +%s)
# Binary wheels only: an sdist of tokenizers would need a Rust toolchain.
# No cache: the wheels would double the space taken.
# shellcheck disable=SC2086
PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip install --no-input \
	--progress-bar off -q --no-cache-dir --only-binary=:all: $PINS >&2 ||
	die "pip install into $VENV failed (is PyPI reachable?)"
say "installed in $(($(date +%s) - t0)) s, $(du -sh "$VENV" | cut -f1)"

if ! ok_env; then
	# show why
	"$VENV/bin/python" -c 'import h5py, numpy, safetensors.torch, torch, transformers; print(torch.__file__, numpy.__file__)' >&2 || true
	die "$VENV does not import torch, numpy, h5py and transformers with the pinned versions"
fi
py_env_print

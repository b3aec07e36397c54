#!/bin/sh
# torch_python.sh - prints the path of the first python3 that can import the
# given modules (default: torch): $MEGAC_PYTHON when set (it must have them),
# else each python3 along PATH, in PATH's order. No fixed path: on the GPU
# machine that is the python3 on PATH (/opt/torch/.venv/bin/python3, with
# torch and the CUDA 13 wheels); on a Debian machine the python3 on PATH (a
# pyenv shim, say) may lack torch while /usr/bin/python3, later on PATH, has
# Debian's python3-torch. Modules are looked up (importlib.util.find_spec),
# not imported: a few hundredths of a second per python. Exit 1, with a line
# on stderr naming what was tried, when no python3 has them.
#   sh tests/gpu/torch_python.sh [MODULE...]
set -u
# the top-level names only (find_spec of a dotted name imports its parent)
check='import importlib.util, sys
sys.exit(0 if all(importlib.util.find_spec(m) for m in sys.argv[1:]) else 1)'
[ $# -gt 0 ] || set -- torch

if [ -n "${MEGAC_PYTHON:-}" ]; then
	if "$MEGAC_PYTHON" -c "$check" "$@" 2>/dev/null; then
		echo "$MEGAC_PYTHON"
		exit 0
	fi
	echo "torch_python.sh: MEGAC_PYTHON=$MEGAC_PYTHON cannot import $*" >&2
	exit 1
fi

tried=
IFS=:
set -f
for d in $PATH; do
	[ -n "$d" ] || d=.
	p=$d/python3
	[ -f "$p" ] && [ -x "$p" ] || continue
	case " $tried " in *" $p "*) continue ;; esac
	tried="$tried $p"
	if "$p" -c "$check" "$@" 2>/dev/null; then
		echo "$p"
		exit 0
	fi
done
echo "torch_python.sh: no python3 on PATH can import $* (tried:${tried:- none}); set MEGAC_PYTHON" >&2
exit 1

# py-env-common.sh - the steps tests/py-env.sh and tests/py-env-long.sh
# share, sourced by both after they set B (the build folder), VENV, SYS_PY,
# DEB_PKGS, say/die and ok_env (does the venv hold exactly their pins?).
#
#   py_env_done_if_ready LOCKNAME   print the venv's python and exit 0 when
#                                   ok_env holds; otherwise take B/LOCKNAME
#                                   (one installer at a time: tests may
#                                   start in parallel) and check again,
#                                   since the winner may have done the work
#   py_env_debian                   install the missing DEB_PKGS with
#                                   apt-get (as root or through sudo that
#                                   needs no password; else die saying how)

py_env_check() {
	[ -x "$VENV/bin/python" ] || return 1
	# shellcheck disable=SC2086 # the pins are one word each
	"$VENV/bin/python" -c "import sys
from importlib.metadata import version, PackageNotFoundError
for pin in sys.argv[1:]:
    name, want = pin.split('==')
    try:
        if version(name) != want:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
$1" $PINS >/dev/null 2>&1
}

py_env_print() {
	(cd "$VENV/bin" && echo "$(pwd -P)/python")
}

py_env_done_if_ready() {
	if ok_env; then
		py_env_print
		exit 0
	fi
	mkdir -p "$B" || die "cannot create $B"
	if command -v flock >/dev/null 2>&1; then
		exec 9>"$B/$1"
		flock 9 || die "cannot lock $B/$1"
		if ok_env; then
			py_env_print
			exit 0
		fi
	fi
}

py_env_debian() {
	_missing=""
	for _p in $DEB_PKGS; do
		if ! dpkg-query -W -f='${Status}' "$_p" 2>/dev/null | grep -q "install ok installed"; then
			_missing="$_missing $_p"
		fi
	done
	[ -n "$_missing" ] || return 0
	_cmd="apt-get install -y --no-install-recommends$_missing"
	if [ "$(id -u)" = 0 ]; then
		_sudo=""
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		_sudo="sudo"
	else
		die "needs these Debian packages:$_missing; install them with: sudo apt-get update && sudo $_cmd"
	fi
	say "installing Debian packages:$_missing"
	export DEBIAN_FRONTEND=noninteractive
	$_sudo apt-get update -qq >&2 || die "apt-get update failed"
	# shellcheck disable=SC2086 # $_cmd is words
	$_sudo $_cmd -qq >&2 || die "$_cmd failed"
}

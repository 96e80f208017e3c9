#!/usr/bin/env bash
# The Python packages of the tests that run real Python clients on a mount
# (Ray, PyTorch, safetensors, NumPy: tests/requirements-py.txt, all pinned),
# in a virtual environment under the build tree: BUILD/pyenv. Made once and
# reused; remade only when the requirements file changes (its sha256 is the
# stamp, written last, so a half-made venv is never taken for a good one).
# Packages come from the Python package index through pip (by name and
# version only). Sourced by tests/run_all.sh; the tests that need the venv
# call spw_py_deps themselves too, so a missing venv is made, never skipped.
#
#   . tests/pydeps.sh; spw_py_deps TOP BUILD     # then BUILD/pyenv/bin/python
#
# The interpreter: $SPW_PYTHON if set, else the first Python 3.11 on PATH
# (pyenv's on these machines, Debian 12's /usr/bin/python3.11), else python3
# (Debian 13: 3.13). The pins were made on 3.11, and torch==2.13.0 lies on
# these machines' disk as a CPU wheel for 3.11 only; on another Python pip
# fetches torch 2.13.0 from the index (on x86_64 a CUDA build of several GB).

# The interpreter the venv is made with (a real path, not a pyenv shim).
spw_py_interp() {
	local c py
	for c in "${SPW_PYTHON:-}" python3.11 /usr/bin/python3.11 python3; do
		[ -n "$c" ] || continue
		command -v "$c" >/dev/null 2>&1 || continue
		py=$("$c" -c 'import sys; print(sys.executable)' 2>/dev/null) || continue
		[ -x "$py" ] && { echo "$py"; return 0; }
	done
	echo "spw_py_deps: no python3 found" >&2
	return 1
}

spw_py_deps() {
	local top=$1 build=$2
	local req="$top/tests/requirements-py.txt" venv="$build/pyenv"
	local stamp="$venv/.spw-requirements.sha256" want py ver rc
	[ -f "$req" ] || { echo "spw_py_deps: $req is missing" >&2; return 1; }
	want=$(sha256sum "$req" | cut -d' ' -f1)
	mkdir -p "$build"
	# one installer at a time (ctest runs the tests that call this in parallel)
	exec {lockfd}>"$build/pyenv.lock"
	flock "$lockfd"
	if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] &&
		"$venv/bin/python" -c 'import sys' 2>/dev/null; then
		exec {lockfd}>&-
		return 0
	fi
	rc=0
	py=$(spw_py_interp) || rc=1
	if [ $rc -eq 0 ]; then
		ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
		[ "$ver" = 3.11 ] || echo "spw_py_deps: warning: $py is Python $ver, not 3.11:" \
			"pip will fetch torch 2.13.0 from the index (set SPW_PYTHON to a 3.11)" >&2
		echo "spw_py_deps: making $venv with $py (Python $ver) from $req"
		rm -rf "$venv"
		if ! "$py" -m venv "$venv" >/dev/null 2>&1; then
			# Debian's own Python has venv's ensurepip in a separate package
			rm -rf "$venv"
			case "$py" in
			/usr/bin/*)
				DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
					python3-venv "python$ver-venv" >/dev/null || true ;;
			esac
			"$py" -m venv "$venv" || rc=1
		fi
	fi
	if [ $rc -eq 0 ]; then
		"$venv/bin/python" -m pip install -q --no-input --disable-pip-version-check \
			--prefer-binary -r "$req" || rc=1
	fi
	if [ $rc -eq 0 ]; then
		echo "$want" >"$stamp"
	else
		echo "spw_py_deps: installing $req into $venv failed" >&2
	fi
	exec {lockfd}>&-
	return $rc
}

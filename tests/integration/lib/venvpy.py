"""
venvpy - the Python of the venv that tests/pydeps.sh makes (BUILD/pyenv),
for the integration tests that run real Python clients (Ray, PyTorch,
safetensors) on a mount. ctest runs the tests with the system's python3, so
they run those clients in a subprocess with this interpreter.
"""

import json
import os
import subprocess

import harness

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
INSTALL_DEADLINE = 1500  # seconds for spw_py_deps to make the venv from nothing


def run_shell(script, *args, timeout):
    return subprocess.run(["bash", "-c", script, "spw"] + list(args), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)


def venv_python(modules):
    """(BUILD/pyenv/bin/python, {module: version}) with tests/requirements-py.txt
    installed - made by spw_py_deps now if missing or stale, never skipped;
    AssertionError (with pip's output) if it cannot be made or cannot import
    `modules`."""
    r = run_shell('. "$1/tests/pydeps.sh" && spw_py_deps "$1" "$2"', TOP, harness.BUILD_DIR,
                  timeout=INSTALL_DEADLINE)
    out = r.stdout.decode(errors="replace")
    if r.returncode != 0:
        raise AssertionError("spw_py_deps failed (status %d):\n%s" % (r.returncode, out[-4000:]))
    py = os.path.join(harness.BUILD_DIR, "pyenv", "bin", "python")
    code = ("import importlib, json, sys; print(json.dumps({m: getattr("
            "importlib.import_module(m), '__version__', '?') for m in sys.argv[1:]}))")
    r = subprocess.run([py, "-c", code] + list(modules), capture_output=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError("the venv's python cannot import %s:\n%s"
                             % (", ".join(modules), r.stderr.decode(errors="replace")[-3000:]))
    return py, json.loads(r.stdout.decode())

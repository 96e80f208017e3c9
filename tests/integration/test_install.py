#!/usr/bin/env python3
"""
test_install - what `cmake --install` and `cpack -G DEB` ship.

An install into a temp prefix holds bin/spillway, bin/spillctl and both
manual pages (identical to the sources), and the installed programs run
(spillway --version, spillctl --help through its own #! line, the same
version). The pages render with man(1) and groff without a warning, fit 80
columns, have a NAME line whatis can index, and document every option
`spillway --help` lists (with the same default) and every spillctl command
and option. The .deb built by cpack (into a temp dir; its preinstall build
step is a make dry run, so the build tree is never rebuilt under other tests)
holds the programs and pages under /usr, names the package, version,
maintainer and description, depends on the packages the binary's libraries
come from, and its programs run once extracted. Nothing is installed on the
machine (no dpkg -i).

Run: python3 test_install.py --build BUILD_DIR [-k pattern]
"""

import argparse
import atexit
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import SpwTestCase  # noqa: E402

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = None
PAGES = ("spillway.8", "spillctl.8")
DEB_DEPENDS = ("fuse3", "liburing2", "libcurl4", "libxml2", "libssl3")
# always present on Debian; a package need not name them for the test
BASE_PACKAGES = {"libc6", "libgcc-s1"}


def run(argv, env=None, timeout=120, cwd=None):
    e = dict(os.environ, LC_ALL="C.UTF-8", MANPAGER="cat", PAGER="cat")
    e.update(env or {})
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=e, timeout=timeout, cwd=cwd)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def version_of(spillway):
    rc, out, err = run([spillway, "--version"])
    m = re.match(r"spillway (\S+) ", out)
    if rc != 0 or not m:
        raise AssertionError("%s --version: exit %d: %r %r" % (spillway, rc, out, err))
    return m.group(1)


def help_options(spillway):
    """{option: default or None} from the "spillway options" part of --help."""
    rc, out, err = run([spillway, "--help"])
    if rc != 0:
        raise AssertionError("spillway --help: exit %d: %s" % (rc, err))
    part = out.split("spillway options", 1)[1].split("FUSE options", 1)[0]
    opts = {}
    for line in part.splitlines():
        m = re.match(r"^ {4}([a-z0-9_]+)(?:=|\[=)", line)
        if m:
            d = re.search(r"\(default ([\w.-]+)\)\s*$", line)
            opts[m.group(1)] = d.group(1) if d else None
    return opts


def render(page, width=80):
    """(text, stderr) of man -l with warnings on."""
    rc, out, err = run(["man", "--warnings", "-l", page], env={"MANWIDTH": str(width)})
    if rc != 0:
        raise AssertionError("man -l %s: exit %d: %s" % (page, rc, err))
    return out, err


def option_entries(text):
    """{head: body} of the tagged paragraphs of a rendered page (7-space heads)."""
    entries, head, body = {}, None, []
    for line in text.splitlines():
        if re.match(r"^ {7}\S", line):
            if head:
                entries[head] = " ".join(body)
            head, body = line.strip(), []
        elif head and line.strip():
            body.append(line.strip())
        elif re.match(r"^\S", line):  # a section heading ends the paragraph
            if head:
                entries[head] = " ".join(body)
            head, body = None, []
    if head:
        entries[head] = " ".join(body)
    return entries


class TestInstall(SpwTestCase):
    timeout = 120

    def install(self):
        prefix = self.tmpdir()
        rc, out, err = run(["cmake", "--install", BUILD, "--prefix", prefix])
        self.assertEqual(rc, 0, out + err)
        return prefix

    def test_install_tree_and_programs_run(self):
        prefix = self.install()
        for rel in ("bin/spillway", "bin/spillctl"):
            st = os.stat(os.path.join(prefix, rel))
            self.assertTrue(stat.S_ISREG(st.st_mode), rel)
            self.assertEqual(stat.S_IMODE(st.st_mode) & 0o555, 0o555, "%s: %o" % (rel, st.st_mode))
        for page in PAGES:
            with open(os.path.join(prefix, "share/man/man8", page), "rb") as f, \
                    open(os.path.join(TOP, "man", page), "rb") as g:
                self.assertEqual(f.read(), g.read(), page)
        with open(os.path.join(prefix, "bin/spillctl"), "rb") as f, \
                open(os.path.join(TOP, "mount-helpers/spillctl"), "rb") as g:
            head = f.read()
            self.assertEqual(head, g.read())
            self.assertTrue(head.startswith(b"#!/usr/bin/env python3\n"))
        self.assertTrue(os.path.isfile(os.path.join(prefix, "share/doc/spillway/fstab.example")))

        ver = version_of(os.path.join(prefix, "bin/spillway"))
        self.assertEqual(ver, version_of(harness.SPILLWAY))
        ctl = os.path.join(prefix, "bin/spillctl")
        rc, out, err = run([ctl, "--help"])  # through its #! line
        self.assertEqual(rc, 0, err)
        for verb in ("stats", "status", "pin", "unpin", "evict", "warm", "fsck"):
            self.assertIn(verb, out)
        rc, out, err = run([ctl, "--version"])
        self.assertEqual((rc, out.strip()), (0, "spillctl " + ver), err)

    def test_man_pages_render_without_warnings(self):
        prefix = self.install()
        for page in PAGES:
            for path in (os.path.join(TOP, "man", page),
                         os.path.join(prefix, "share/man/man8", page)):
                text, err = render(path)
                self.assertEqual(err, "", "man -l %s warns:\n%s" % (path, err))
                rc, _, gerr = run(["groff", "-man", "-Tutf8", "-ww", "-z", path])
                self.assertEqual((rc, gerr), (0, ""), "groff -ww %s" % path)
                name = page.split(".")[0]
                self.assertTrue(text.startswith("%s(8)" % name.upper()), text[:200])
                for sec in ("NAME", "SYNOPSIS", "DESCRIPTION", "EXAMPLES", "SEE ALSO"):
                    self.assertRegex(text, r"(?m)^%s$" % sec, "%s: no %s section" % (page, sec))
                wide = [ln for ln in text.splitlines() if len(ln) > 80]
                self.assertEqual(wide, [], "%s: lines wider than 80 columns" % page)
                rc, out, err = run(["lexgrog", path])
                self.assertEqual(rc, 0, out + err)
                self.assertRegex(out, r'"%s - \S' % name)

    def test_spillway_page_documents_every_option(self):
        text, _ = render(os.path.join(TOP, "man", "spillway.8"), width=200)
        section = text.split("\nMOUNT OPTIONS\n", 1)[1].split("\nEXTENDED ATTRIBUTES\n", 1)[0]
        entries = option_entries(section)
        opts = help_options(harness.SPILLWAY)
        self.assertGreater(len(opts), 15, opts)
        for name, default in opts.items():
            found = [b for h, b in entries.items() if re.match(r"%s(=|\[|$)" % name, h)]
            self.assertEqual(len(found), 1, "spillway.8 has no entry for %s (heads: %s)"
                             % (name, sorted(entries)))
            if default is not None:
                self.assertIn("Default: %s." % default, found[0],
                              "%s: --help says default %s" % (name, default))
        for xattr in ("state", "pin", "evict", "warm", "stats", "scrub"):
            self.assertIn("user.spillway." + xattr, text)

    def test_spillctl_page_documents_every_command_and_option(self):
        text, _ = render(os.path.join(TOP, "man", "spillctl.8"), width=200)
        ctl = os.path.join(TOP, "mount-helpers", "spillctl")
        rc, out, err = run([sys.executable, ctl, "--help"])
        self.assertEqual(rc, 0, err)
        verbs = re.findall(r"(?m)^ {4}(\w+) ", out)
        self.assertEqual(verbs, ["stats", "status", "pin", "unpin", "evict", "warm", "scrub",
                                 "fsck"])
        commands = text.split("\nCOMMANDS\n", 1)[1].split("\nOPTIONS\n", 1)[0]
        options = text.split("\nOPTIONS\n", 1)[1].split("\nEXIT STATUS\n", 1)[0]
        for verb in verbs:
            self.assertRegex(commands, r"(?m)^ {7}%s\b" % verb, "no entry for %s" % verb)
            rc, out, err = run([sys.executable, ctl, verb, "--help"])
            self.assertEqual(rc, 0, err)
            for opt in set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", out)) - {"-h", "--help"}:
                self.assertRegex(options, r"(?m)^ {7}(\S+, )?%s\b" % re.escape(opt),
                                 "spillctl.8 OPTIONS lacks %s (of %s)" % (opt, verb))


class TestDebPackage(SpwTestCase):
    timeout = 120

    def test_deb_contents_and_control(self):
        cfg = os.path.join(BUILD, "CPackConfig.cmake")
        self.assertTrue(os.path.isfile(cfg), "%s missing: re-run cmake on the build tree" % cfg)
        out_dir = self.tmpdir()
        # MAKEFLAGS=-n: cpack's preinstall step (make all) only prints what it
        # would do; the package is made of the build tree as it is
        rc, out, err = run(["cpack", "-G", "DEB", "--config", cfg, "-B", out_dir],
                           env={"MAKEFLAGS": "-n"})
        self.assertEqual(rc, 0, out + err)
        debs = [f for f in os.listdir(out_dir) if f.endswith(".deb")]
        ver = version_of(harness.SPILLWAY)
        rc, arch, _ = run(["dpkg", "--print-architecture"])
        self.assertEqual(debs, ["spillway_%s_%s.deb" % (ver, arch.strip())], out)
        deb = os.path.join(out_dir, debs[0])

        rc, listing, err = run(["dpkg-deb", "-c", deb])
        self.assertEqual(rc, 0, err)
        files = {}
        for line in listing.splitlines():
            f = line.split()
            if "->" in f:  # a symlink: "NAME -> TARGET"
                f = f[:f.index("->")]
            files[f[-1]] = f[0]
        for p in ("./usr/bin/spillway", "./usr/bin/spillctl"):
            self.assertEqual(files.get(p), "-rwxr-xr-x", listing)
        for page in PAGES:
            self.assertEqual(files.get("./usr/share/man/man8/" + page), "-rw-r--r--", listing)
        self.assertFalse([p for p in files if not p.startswith("./usr/")], listing)

        fields = {}
        for k in ("Package", "Version", "Architecture", "Maintainer", "Depends", "Description",
                  "Section"):
            rc, v, err = run(["dpkg-deb", "-f", deb, k])
            self.assertEqual(rc, 0, err)
            fields[k] = v.strip()
        self.assertEqual(fields["Package"], "spillway")
        self.assertEqual(fields["Version"], ver)
        self.assertEqual(fields["Architecture"], arch.strip())
        self.assertRegex(fields["Maintainer"], r".+ <[^@\s]+@[^>\s]+>")
        self.assertIn("FUSE", fields["Description"].splitlines()[0])
        self.assertGreater(len(fields["Description"].splitlines()), 2, fields["Description"])
        depends = {d.split()[0] for d in fields["Depends"].split(",")}
        for d in DEB_DEPENDS:
            self.assertIn(d, depends)

        # the packages the binary's libraries come from are all depended on
        rc, dyn, err = run(["objdump", "-p", harness.SPILLWAY])
        self.assertEqual(rc, 0, err)
        needed = re.findall(r"(?m)^\s+NEEDED\s+(\S+)", dyn)
        fuse = [lib for lib in needed if lib.startswith("libfuse3.so.")]
        self.assertEqual(len(fuse), 1, needed)
        for lib in needed:
            if "./usr/lib/spillway/" + lib in files:
                # a private libfuse (built where the system's is older than
                # 3.17) ships inside the package, found through the RPATH
                self.assertEqual(lib, "libfuse3.so.4")
                continue
            pkg = self.package_of_library(lib)
            self.assertTrue(pkg in depends or pkg in BASE_PACKAGES,
                            "%s comes from %s, which Depends (%s) lacks"
                            % (lib, pkg, fields["Depends"]))

        # what was packed runs
        root = self.tmpdir()
        rc, _, err = run(["dpkg-deb", "-x", deb, root])
        self.assertEqual(rc, 0, err)
        self.assertEqual(version_of(os.path.join(root, "usr/bin/spillway")), ver)
        rc, out, err = run([os.path.join(root, "usr/bin/spillctl"), "--version"])
        self.assertEqual((rc, out.strip()), (0, "spillctl " + ver), err)

    def package_of_library(self, lib):
        rc, out, err = run(["ldconfig", "-p"])
        self.assertEqual(rc, 0, err)
        m = re.search(r"(?m)^\s+%s \([^)]*x86-64[^)]*\) => (\S+)" % re.escape(lib), out) or \
            re.search(r"(?m)^\s+%s \([^)]*\) => (\S+)" % re.escape(lib), out)
        self.assertTrue(m, "ldconfig does not know %s" % lib)
        path = m.group(1)
        for p in (path, os.path.realpath(path)):
            for q in (p, p.replace("/usr/lib/", "/lib/", 1), p.replace("/lib/", "/usr/lib/", 1)):
                rc, out, _ = run(["dpkg", "-S", q])
                if rc == 0:
                    return out.split(":", 1)[0].strip()
        self.fail("no package owns %s (%s)" % (lib, path))


def main():
    """Like harness.main, but without the /dev/fuse check: nothing is mounted."""
    global BUILD
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--build", default=os.environ.get("SPILLWAY_BUILD"))
    ns, rest = ap.parse_known_args()
    if not ns.build:
        sys.stderr.write("usage: %s --build BUILD_DIR [unittest args]\n" % sys.argv[0])
        sys.exit(2)
    BUILD = harness.BUILD_DIR = os.path.abspath(ns.build)
    harness.SPILLWAY = os.path.join(BUILD, "spillway")
    if not os.access(harness.SPILLWAY, os.X_OK):
        sys.stderr.write("FAIL: %s is missing or not executable\n" % harness.SPILLWAY)
        sys.exit(1)
    for tool in ("cmake", "cpack", "man", "groff", "lexgrog", "dpkg-deb", "objdump"):
        if not shutil.which(tool):
            sys.stderr.write("FAIL: %s is not installed (man-db, groff-base, dpkg, binutils)\n"
                             % tool)
            sys.exit(1)
    harness.LOG_DIR = os.path.join(BUILD, "integration-logs")
    signal.signal(signal.SIGALRM, harness._on_alarm)
    atexit.register(harness.cleanup_all)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()

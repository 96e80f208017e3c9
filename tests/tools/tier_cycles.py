#!/usr/bin/env python3
"""tier_cycles.py — file-level dependency cycles among tier/'s modules.

Usage: tier_cycles.py [-v] [SRCDIR [FOLDER]]
  SRCDIR: the repository root (default: ../..); FOLDER: the folder under it
  whose files are checked (default: tier; mount-helpers/fsck for
  spillway-fsck's files, run as test_fsck_layers; tier/store, run as
  test_store_layers). Below, "tier/" stands for FOLDER. Includes are
  matched as the sources spell them, from the repository root.
Prints each module's dependencies when -v is given, then every cycle found
(each strongly connected component of more than one module, with its edges
and, for each, the include or name that makes it); exit 1 if there is any,
0 if none.

What counts as a dependency (the definition this tool checks):
- A module is a file stem directly under tier/ (tier/evict.c + tier/evict.h
  are "evict"). A subfolder (tier/s3/, tier/store/) is one module: it is a
  room built as its own library, and cycles inside it are not looked for.
- A depends on B when A's .c or .h
    * includes B's own header (B.h), or
    * (A's .c only; a header's declarations are not calls) names -
      calls, or takes the address of - a function or a global that B's .c
      defines with external linkage (a definition is a non-static name at
      column 0 followed by "(" ... "{", or a non-static global at column 0).
- Headers without a .c of their own that only carry shared private types
  (tier_i.h, store_s3_i.h) are not modules: what they include counts for
  every file that includes them; the functions they declare count for the
  module that defines them (through the call rule above), not for the header.
- Static inline functions in headers belong to no module (no edge).
Comments and string literals are stripped before matching, so a name
mentioned in a comment is not a call.
"""
import os
import re
import sys

C_KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else",
              "case", "goto", "typeof", "__typeof__", "_Static_assert"}


def strip_c(text):
    """Comments and string/char literals replaced by spaces (lines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


FUNC_DEF = re.compile(r"^(?!static\b)(?:[A-Za-z_][\w \t\*]*?[\s\*])"
                      r"([A-Za-z_]\w*)\s*\([^;{]*?\)\s*\{", re.M | re.S)
GLOBAL_DEF = re.compile(r"^(?!static\b|extern\b|typedef\b|struct\b[^=;]*\{)"
                        r"(?:const\s+)?[A-Za-z_][\w \t\*]*?[\s\*]"
                        r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\])*\s*=", re.M)
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
IDENT = re.compile(r"\b([A-Za-z_]\w*)\b")


def load(root, folder="tier"):
    """{name under "tier/": (raw, stripped)}, and {include path as the
    sources spell it (from the repository root): that name}."""
    tier = os.path.join(root, folder)
    files, alias = {}, {}
    for dirpath, _, names in os.walk(tier):
        for name in names:
            if name.endswith((".c", ".h")):
                path = os.path.join(dirpath, name)
                rel = os.path.join("tier", os.path.relpath(path, tier))
                with open(path, encoding="utf-8", errors="replace") as f:
                    raw = f.read()
                files[rel] = (raw, strip_c(raw))
                alias[os.path.relpath(path, root)] = rel
    return files, alias


def module_of(rel, files):
    """Module name of a tier/ file, or None for a shared private header."""
    stem, ext = os.path.splitext(rel)
    parts = stem.split(os.sep)
    if len(parts) > 2:
        return parts[1]
    if ext == ".h" and stem + ".c" not in files and stem.endswith("_i"):
        return None
    return parts[1]


def graph(root, folder="tier"):
    files, alias = load(root, folder)
    mods = {}
    for rel in files:
        m = module_of(rel, files)
        if m is not None:
            mods.setdefault(m, []).append(rel)

    defined = {}  # name -> module
    for rel, (_, code) in files.items():
        if not rel.endswith(".c"):
            continue
        m = module_of(rel, files)
        for rx in (FUNC_DEF, GLOBAL_DEF):
            for mt in rx.finditer(code):
                name = mt.group(1)
                if name not in C_KEYWORDS:
                    defined[name] = m

    def includes(rel, seen):
        """Headers rel includes, through shared private headers."""
        raw = files[rel][0]
        for inc in INCLUDE.findall(raw):
            inc = alias.get(inc, inc)
            if inc in files and inc not in seen:
                seen.add(inc)
                if module_of(inc, files) is None:
                    includes(inc, seen)
        return seen

    deps = {m: set() for m in mods}
    why = {}
    for m, rels in mods.items():
        for rel in rels:
            for inc in includes(rel, set()):
                b = module_of(inc, files)
                if b is not None and b != m:
                    deps[m].add(b)
                    why.setdefault((m, b), "#include \"%s\"" % inc)
            if not rel.endswith(".c"):
                continue
            code = files[rel][1]
            own = set(mt.group(1) for mt in FUNC_DEF.finditer(code))
            for mt in IDENT.finditer(code):
                name = mt.group(1)
                b = defined.get(name)
                if b is not None and b != m and name not in own:
                    deps[m].add(b)
                    why.setdefault((m, b), name)
    return deps, why


def sccs(deps):
    """Tarjan's strongly connected components."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(deps.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(deps):
        if v not in index:
            visit(v)
    return out


def main(argv):
    verbose = "-v" in argv
    args = [a for a in argv[1:] if a != "-v"]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    folder = args[1] if len(args) > 1 else "tier"
    deps, why = graph(root, folder)
    if verbose:
        for m in sorted(deps):
            print("%s -> %s" % (m, ", ".join(sorted(deps[m])) or "-"))
    cycles = [c for c in sccs(deps) if len(c) > 1]
    for comp in cycles:
        pairs = ["%s->%s (%s)" % (a, b, why[(a, b)])
                 for a in comp for b in comp if b in deps[a]]
        print("cycle: %s\n  %s" % (" ".join(comp), "\n  ".join(sorted(pairs))))
    if not cycles:
        print("%s/: no file-level cycles among %d modules" % (folder, len(deps)))
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

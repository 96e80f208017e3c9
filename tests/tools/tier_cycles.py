#!/usr/bin/env python3
"""tier_cycles.py — file-level dependency cycles among tier/'s modules, and
the order of tier/'s rooms (its folders).

Usage: tier_cycles.py [-v] [--rooms] [SRCDIR [FOLDER]]
  SRCDIR: the repository root (default: ../..); FOLDER: the folder under it
  whose files are checked (default: tier; mount-helpers/fsck for
  spillway-fsck's files, run as test_fsck_layers; tier/store, run as
  test_store_layers; index, run as test_index_layers). Below, "tier/"
  stands for FOLDER. Includes are matched as the sources spell them, from
  the repository root.
Prints each module's dependencies when -v is given, then every cycle found
(each strongly connected component of more than one module, with its edges
and, for each, the include or name that makes it); exit 1 if there is any,
0 if none.

--rooms (test_tier_layers): first the rooms. A room is a folder directly
under tier/ (tier/hot/, tier/spill/...); the files directly in tier/ are
the handle, the top room. ROOMS below lists them floor by floor, lowest
first. A room may depend (the rules below, with the room as the module)
only on rooms on lower floors: an arrow to its own floor or up, a room
that is not in ROOMS, or one listed that is gone fails (exit 1), naming
the include or name that makes the arrow. Then the file-level cycle check
over every file of tier/ (a file in a room is a module of its own, except
in s3/ and store/, libraries checked alone).

What counts as a dependency (the definition this tool checks):
- A module is a file stem directly under tier/ (tier/spill/evict.c + tier/spill/evict.h
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


# tier/'s rooms, floor by floor, lowest first (README, "Architecture").
ROOMS = [
    ["s3"],                       # the S3 protocol (spw_s3)
    ["store"],                    # the store_ops backends (spw_store)
    ["segment"],                  # the format, segment table, tiers file (spw_segment)
    ["hot"],                      # hot files, budget, invalidations
    ["extent"],                   # extents: a file's bytes in one file of a cold directory
    ["admit", "chain", "state"],  # admission; cold records and overlays; stores, recovery, S3 state
    ["spill"],                    # candidates, spill, commit, evictor, GC, demotion, maint
    ["restore"],                  # restores, the read's plan, workers
    ["stats"],                    # snapshot, metrics
    ["handle"],                   # tier.c, tier_io.c, tier_open.c (tier/'s own files)
]
# Rooms that are libraries checked alone (one module in the file check).
OPAQUE = {"s3", "store"}


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


def module_of(rel, files, mode="file"):
    """Module name of a tier/ file, or None for a shared private header.
    mode "file": a subfolder's file is its own module ("hot/pressure"),
    but a subfolder in OPAQUE is one module; mode "room": its folder
    ("hot"), and "handle" for the files directly in tier/."""
    stem, ext = os.path.splitext(rel)
    parts = stem.split(os.sep)
    if ext == ".h" and stem + ".c" not in files and stem.endswith("_i"):
        return None
    if mode == "room":
        return parts[1] if len(parts) > 2 else "handle"
    if len(parts) > 2 and parts[1] in OPAQUE:
        return parts[1]
    return "/".join(parts[1:])


def graph(root, folder="tier", mode="file"):
    files, alias = load(root, folder)
    mods = {}
    for rel in files:
        m = module_of(rel, files, mode)
        if m is not None:
            mods.setdefault(m, []).append(rel)

    defined = {}  # name -> module
    for rel, (_, code) in files.items():
        if not rel.endswith(".c"):
            continue
        m = module_of(rel, files, mode)
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
                if module_of(inc, files, mode) is None:
                    includes(inc, seen)
        return seen

    deps = {m: set() for m in mods}
    why = {}
    for m, rels in mods.items():
        for rel in rels:
            for inc in includes(rel, set()):
                b = module_of(inc, files, mode)
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


def check_rooms(root, folder, verbose):
    """The rooms' order (ROOMS): the number of faults found, each printed."""
    deps, why = graph(root, folder, "room")
    floor = {r: i for i, rs in enumerate(ROOMS) for r in rs}
    faults = 0
    if verbose:
        for i, rs in enumerate(ROOMS):
            for r in rs:
                print("floor %d %s -> %s" % (i + 1, r, ", ".join(sorted(deps.get(r, ()))) or "-"))
    for r in sorted(set(floor) - set(deps)):
        print("room %s/ is listed in ROOMS but has no files" % r)
        faults += 1
    for r in sorted(deps):
        if r not in floor:
            print("room %s/ is not in ROOMS (tests/tools/tier_cycles.py): give it a floor" % r)
            faults += 1
            continue
        for b in sorted(deps[r]):
            if b in floor and floor[b] >= floor[r]:
                print("arrow %s -> %s goes %s (%s): a room uses only rooms on lower floors"
                      % (r, b, "up" if floor[b] > floor[r] else "sideways", why[(r, b)]))
                faults += 1
    for comp in sccs(deps):
        if len(comp) > 1:
            print("room cycle: %s" % " ".join(comp))
            faults += 1
    if not faults:
        print("%s/: %d rooms on %d floors, every arrow down" % (folder, len(deps), len(ROOMS)))
    return faults


def main(argv):
    verbose = "-v" in argv
    rooms = "--rooms" in argv
    args = [a for a in argv[1:] if a not in ("-v", "--rooms")]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    folder = args[1] if len(args) > 1 else "tier"
    faults = check_rooms(root, folder, verbose) if rooms else 0
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
    return 1 if cycles or faults else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

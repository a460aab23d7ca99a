#!/usr/bin/env python3
"""The project's structure picture: which module of host/src uses which.

Reads every `.rs` file of the durasync crate (tests excluded: a file's
`#[cfg(test)] mod tests` and everything after it), finds every path it
names through `use` trees and inline `crate::`/`super::`/`durasync::`
paths, resolves each to the module *file* that defines it (following
`pub use` re-exports of a `mod.rs`), and prints:

- file-level circles: strongly connected sets of files that use each other;
- floor-level circles: the same between the top-level modules;
- arrows back up: a use from a lower floor (FLOORS below) to a higher one.

Exit status 1 when any of the three is non-empty and `--check` is given.
Usage: python3 .ci/structure.py [--check] [--edges]
"""
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "host", "src")
# Lower floors first; a module may use its own floor and the ones below.
FLOORS = [
    ["durable"],
    ["services"],
    ["digest", "spawn"],
    ["hooks"],
    ["runtime"],
    ["agent"],
    ["testing"],
    ["fuzzing", "cli"],
]


def module_of(path):
    rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel in (["lib"], ["main"]):
        return ()
    return tuple(rel)


def strip(text):
    """The code of a file without comments, string contents and tests."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif (m := re.compile(r'b?r(#*)"').match(text, i)) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find('"' + m.group(1), m.end())
            out.append('""')
            i = n if end < 0 else end + 1 + len(m.group(1))
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append('""')
            i += 1
        elif c == "'" and (m := re.compile(r"'(\\.[^']*|[^'\\])'").match(text, i)):
            out.append("' '")
            i = m.end()
        else:
            out.append(c)
            i += 1
    code = "".join(out)
    m = re.search(r"#\[cfg\(test\)\]\s*(pub\s+)?mod\s+\w+\s*\{", code)
    return code[: m.start()] if m else code


def use_paths(tree):
    """Expands `a::{b, c::{d, e}}` into [a::b, a::c::d, a::c::e]."""
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix, s):
        depth, start, parts = 0, 0, []
        for i, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:i])
                start = i + 1
        parts.append(s[start:])
        for p in filter(None, parts):
            if "{" in p:
                head, rest = p.split("{", 1)
                walk(prefix + head, rest[: rest.rindex("}")] if "}" in rest else rest)
            else:
                out.append(prefix + re.sub(r"as\w+$", "", p.split(" as ")[0]))

    walk("", tree)
    return out


def main():
    files = {}
    for d, _, names in os.walk(ROOT):
        for n in names:
            if n.endswith(".rs"):
                p = os.path.join(d, n)
                files[module_of(p)] = p
    modules = set(files)
    text = {m: strip(open(p).read()) for m, p in files.items()}
    binary = {m for m in modules if m[:1] == ("cli",)} | {("main",)}
    # `pub use sub::Name` in a module: Name -> the module that defines it.
    reexports = defaultdict(dict)
    for m, t in text.items():
        for tree in re.findall(r"(?m)^\s*pub(?:\([^)]*\))?\s+use\s+([^;]+);", t):
            for p in use_paths(tree):
                segs = [s for s in p.split("::") if s]
                if segs and segs[0] in ("self",):
                    segs = segs[1:]
                if segs and segs[0] not in ("crate", "super") and (m + (segs[0],)) in modules:
                    reexports[m][segs[-1]] = resolve(m, segs, modules, reexports, binary)
    edges = defaultdict(set)
    for m, t in text.items():
        paths = []
        for tree in re.findall(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", t):
            paths += use_paths(tree)
        paths += re.findall(r"\b((?:crate|super|durasync)(?:::\w+)+)", t)
        for p in paths:
            segs = [s for s in p.split("::") if s]
            if not segs or segs[0] not in ("crate", "super", "self", "durasync"):
                # A path through a name this file imported, or a child module.
                if segs and (m + (segs[0],)) in modules:
                    segs = ["self"] + segs
                else:
                    continue
            target = resolve(m, segs, modules, reexports, binary)
            if target is not None and target != m and target[: len(m)] != m or (target and m == ()):
                if target != m:
                    edges[m].add(target)
    return edges, modules


def resolve(m, segs, modules, reexports, binary):
    if segs[0] == "durasync" or (segs[0] == "crate" and m not in binary):
        base, rest = (), segs[1:]
    elif segs[0] == "crate":
        base, rest = (), segs[1:]
    elif segs[0] == "self":
        base, rest = m, segs[1:]
    else:
        base, rest = m, segs
        while rest and rest[0] == "super":
            base, rest = base[:-1], rest[1:]
    cur = base
    for s in rest:
        if cur + (s,) in modules:
            cur = cur + (s,)
        elif s in reexports.get(cur, {}) and reexports[cur][s] is not None:
            return reexports[cur][s]
        else:
            break
    return cur


def floor(m):
    for i, names in enumerate(FLOORS):
        if m and m[0] in names:
            return i
    return None


def sccs(nodes, edges):
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
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
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            strong(v)
    return out


if __name__ == "__main__":
    edges, modules = main()
    name = lambda m: "::".join(m) or "crate"
    file_circles = sccs(modules, edges)
    top = defaultdict(set)
    for a, bs in edges.items():
        for b in bs:
            if a[:1] != b[:1] and a and b:
                top[a[:1]].add(b[:1])
    floor_circles = sccs({m[:1] for m in modules if m}, top)
    up = sorted(
        (name(a), name(b))
        for a, bs in edges.items()
        for b in bs
        if floor(a) is not None and floor(b) is not None and floor(b) > floor(a)
    )
    if "--edges" in sys.argv:
        for a in sorted(edges):
            print(name(a), "->", ", ".join(sorted(map(name, edges[a]))))
    print(f"files: {len(modules)}, uses between files: {sum(len(b) for b in edges.values())}")
    print(f"file-level circles: {len(file_circles)}")
    for c in file_circles:
        print("  " + " <-> ".join(map(name, c)))
    print(f"floor-level circles: {len(floor_circles)}")
    for c in floor_circles:
        print("  " + " <-> ".join(map(name, c)))
    print(f"arrows back up: {len(up)}")
    for a, b in up:
        print(f"  {a} -> {b}")
    if "--check" in sys.argv and (file_circles or floor_circles or up):
        sys.exit(1)

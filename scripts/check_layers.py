#!/usr/bin/env python3
"""Checks every #include of the tree against the layer rules of cmake/layers.txt.

    scripts/check_layers.py [ROOT]

A file belongs to the layer whose listed folder (or file) is the longest prefix of its path; files outside every
layer (tests, bench, tools, fuzz) are not checked. An `#include "..."` is resolved as the compiler does (next to
the including file, then include/, then src/) and must name a file of the same layer, or a public file of a layer
the including layer may use. An `#include <...>` of a vendor GPU header may appear only where layers.txt allows it.
Prints one line per forbidden include and exits 1 when there is any; ctest runs it as `layer_check`.
"""
import pathlib
import re
import sys

SOURCE_SUFFIXES = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".def", ".inc"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


class Layer:
    def __init__(self, name, public, private, uses):
        self.name, self.public, self.private, self.uses = name, public, private, uses


def read_rules(path):
    """layers.txt: `layer | public paths | private paths | layers it uses` lines, and `vendor_headers | paths | header patterns`."""
    layers, vendor_paths, vendor_headers = {}, [], []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = [f.split() for f in line.split("|")]
        if fields[0] == ["vendor_headers"] and len(fields) == 3:
            vendor_paths, vendor_headers = fields[1], fields[2]
            continue
        if len(fields) != 4 or len(fields[0]) != 1:
            sys.exit(f"{path}:{number}: expected 'layer | public paths | private paths | uses'")
        name = fields[0][0]
        layers[name] = Layer(name, fields[1], fields[2], fields[3])
    for layer in layers.values():
        for used in layer.uses:
            if used != "*" and used not in layers:
                sys.exit(f"{path}: layer {layer.name} uses unknown layer {used}")
    return layers, vendor_paths, vendor_headers


def owner(rel, layers):
    """(layer, is_public) of the longest listed path that holds rel, or (None, False)."""
    best, best_len, public = None, -1, False
    for layer in layers.values():
        for is_public, paths in ((True, layer.public), (False, layer.private)):
            for p in paths:
                if (rel == p or rel.startswith(p.rstrip("/") + "/")) and len(p) > best_len:
                    best, best_len, public = layer, len(p), is_public
    return best, public


def under(rel, paths):
    return any(rel == p or rel.startswith(p.rstrip("/") + "/") for p in paths)


def resolve(root, including, spelled):
    for base in (including.parent, root / "include", root / "src"):
        candidate = base / spelled
        if candidate.is_file():
            return candidate.resolve().relative_to(root.resolve()).as_posix()
    return None


def check(root):
    root = pathlib.Path(root)
    layers, vendor_paths, vendor_headers = read_rules(root / "cmake" / "layers.txt")
    problems = []
    for path in sorted(p for d in ("include", "src", "apps") for p in (root / d).rglob("*")):
        if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        layer, _ = owner(rel, layers)
        if layer is None:
            continue
        for number, text in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(text)
            if not m:
                continue
            kind, spelled = m.groups()
            where = f"{rel}:{number}: #include {kind}{spelled}{'>' if kind == '<' else kind}"
            if kind == "<":
                name = spelled.split("/")[-1]
                if any(re.fullmatch(h, spelled) or re.fullmatch(h, name) for h in vendor_headers) and \
                        not under(rel, vendor_paths):
                    problems.append(f"{where}: vendor GPU header outside {' '.join(vendor_paths)}")
                continue
            target = resolve(root, path, spelled)
            if target is None:
                continue  # generated or missing: the compiler says so
            target_layer, public = owner(target, layers)
            if target_layer is None or target_layer is layer:
                continue
            if "*" in layer.uses:
                continue
            if target_layer.name not in layer.uses:
                problems.append(f"{where}: layer {layer.name} may not use layer {target_layer.name} "
                                f"(it may use: {' '.join(layer.uses) or 'nothing'})")
            elif not public:
                problems.append(f"{where}: {target} is private to layer {target_layer.name}")
    return problems


def main():
    problems = check(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} forbidden include(s); the rules are in cmake/layers.txt")
        return 1
    print("layer check: every include follows cmake/layers.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Copies the GPU kernel source tree for the CPU emulator, rewriting the three constructs C++ cannot express:

  kernel<T><<<grid, block, smem, stream>>>(args);  ->  ::emu::launch_kernel(&kernel<T>, [&] { kernel<T>(args); },
                                                                         grid, block, smem, stream);
  extern __shared__ ... name[];                     ->  unsigned char* name = ::emu::dynamic_smem();
  #if defined(__CUDACC__) || defined(__HIPCC__)     ->  #if 1

Usage: rewrite.py SRC_DIR OUT_DIR   (e.g. src/backends/gpu build/emu/src/backends/gpu)
A launch is a statement: the kernel name may follow indentation or a prefix such as `if (c)` / `else` on its line.
"""
import pathlib
import re
import sys


def matching(text, i, open_ch, close_ch):
    """Index just past the bracket that closes the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_ch:
            depth += 1
        elif text[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j + 1
    raise SystemExit(f"unbalanced {open_ch}{close_ch} at offset {i}")


def rewrite_launches(text, name):
    out, pos = [], 0
    while True:
        k = text.find("<<<", pos)
        if k < 0:
            out.append(text[pos:])
            return "".join(out)
        line_start = text.rfind("\n", 0, k) + 1
        head = text[line_start:k]
        # The kernel name (with template arguments) ends the text before <<<; what precedes it on the line
        # (indentation, or a prefix such as `if (c)` / `else`) is kept.
        m = re.search(r"[A-Za-z_][\w:]*(<[^;{}]*>)?$", head)
        if not m or head[:m.start()].strip().endswith(("=", "(", ",")):
            raise SystemExit(f"{name}: cannot find the kernel of the launch in {head!r}")
        kernel = m.group(0)
        end_cfg = text.find(">>>", k)
        config = text[k + 3:end_cfg]
        args_open = end_cfg + 3
        if text[args_open] != "(":
            raise SystemExit(f"{name}: expected '(' after >>>")
        args_close = matching(text, args_open, "(", ")")
        args = text[args_open + 1:args_close - 1]
        out.append(text[pos:line_start])
        out.append(f"{head[:m.start()]}::emu::launch_kernel(reinterpret_cast<const void*>(&{kernel}), "
                   f"[&] {{ {kernel}({args}); }}, {config})")
        pos = args_close


def rewrite(text, name):
    text = rewrite_launches(text, name)
    text = re.sub(r"extern __shared__[^;]*?(\w+)\[\];", r"unsigned char* \1 = ::emu::dynamic_smem();", text)
    text = text.replace("#if defined(__CUDACC__) || defined(__HIPCC__)", "#if 1")
    return text


def main():
    src, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    for path in sorted(src.rglob("*")):
        if path.is_dir():
            continue
        dest = out / path.relative_to(src)
        dest.parent.mkdir(parents=True, exist_ok=True)
        text = path.read_text()
        if path.suffix in (".cu", ".cuh", ".h"):
            text = rewrite(text, str(path))
        if not dest.exists() or dest.read_text() != text:
            dest.write_text(text)
    # Files of an earlier copy whose source is gone (a kernel removed or renamed) would still be compiled and linked.
    for path in sorted(out.rglob("*")):
        if path.is_file() and not (src / path.relative_to(out)).exists():
            path.unlink()


if __name__ == "__main__":
    main()

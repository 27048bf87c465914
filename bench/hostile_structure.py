"""How the tree-sitter structure analysis (stages/lib/syntax.py: analyze) scales on deep or repetitive texts:
generated code and hostile files, where a scan that rereads the text for every match turns quadratic.

For each pattern it analyzes the text at n and 4n repetitions and prints the seconds, the ratio (about 4 when
the cost follows the size, 16 when it follows its square) and the process's peak RSS so far. The patterns are
the ones that were quadratic before bounds went in (docs/DESIGN.md section 6): unclosed macro calls, body-less
class heads followed by words, export-macro classes nested thousands deep, unclosed constructor lines, errors
after macro names thousands of blocks deep, a macro line in each of thousands of nested namespaces, a line of
thousands of `(` (tree-sitter's query engine); class keywords by the thousand in strings, comments, declarations
and one parameter list (each is looked up in the tree); and some that never were, as controls.

    .venv/bin/python bench/hostile_structure.py [--n 4000] [--only nested_export_classes ...]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

PATTERNS = {
    "unclosed_calls": lambda n: "void f() {\n" + "ABC_DEF(x, \n" * n + "}\n",
    "class_heads": lambda n: "class A_API B_API C_API X\n" * n,
    "class_heads_paren": lambda n: "class A_API(" * n + "\n",
    "nested_export_classes": lambda n: "class A_API X {\n" * n + "};\n" * n,
    "unclosed_ctor_lines": lambda n: "FOO_INLINE A::A() : b{x} {\n" * n,
    "nested_macro_namespaces": lambda n: "".join(f"namespace n{i} {{\nFOO_BAR int x{i};\n" for i in range(n))
    + "}\n" * n,
    "deep_macro_errors": lambda n: "void f() {\n" + "{ int FOO_BAR @;\n" * n,
    "macro_lines": lambda n: "FOO_BAR_BAZ\nint x y z;\n" * n,
    "api_declarations": lambda n: "namespace x {\nint broken(;\n" + "LUA_API int f(lua_State *L);\n" * n + "}\n",
    "deep_braces": lambda n: "void f() " + "{" * n + "}" * n + "\n",
    "open_parens": lambda n: "int x = " + "(" * n + ";\n",
    "class_keywords": lambda n: 'auto s = "' + "class " * n + '";\n' + "struct S *p; // union\n" * n
    + "void f(" + "struct T *t, " * n + "int x);\n" + "class" + " A::B" * n + "\n" + ("class " + "x" * 64) * n,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=4000, help="repetitions of the smaller text (default 4000)")
    ap.add_argument("--only", nargs="+", choices=sorted(PATTERNS), default=sorted(PATTERNS))
    a = ap.parse_args(argv)
    from cpp_data.stages.lib.syntax import analyze, new_parser

    parser = new_parser()
    print(f"{'pattern':24} {'KB at n':>8} {'s at n':>7} {'s at 4n':>8} {'ratio':>6} {'peak RSS MiB':>13}")
    for name in a.only:
        secs = []
        for n in (a.n, 4 * a.n):
            text = PATTERNS[name](n)
            t0 = time.process_time()
            analyze(text, parser)
            secs.append(time.process_time() - t0)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{name:24} {len(PATTERNS[name](a.n)) / 1e3:8.0f} {secs[0]:7.2f} {secs[1]:8.2f} "
              f"{secs[1] / max(secs[0], 1e-3):6.1f} {peak:13.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

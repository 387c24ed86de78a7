"""Loaded by every Python of the SGLang engine environment (tests/engine/install_sglang.sh copies it there).

It changes no SGLang file. It only hooks imports (hce_sglang_cpu.hooks: what is replaced and why).
"""

try:
    import hce_sglang_cpu.hooks as _hooks

    _hooks.install()
except Exception as _exc:  # a broken hook must say so, not take the interpreter down
    import sys

    print(f"hce_sglang_cpu: import hooks not installed: {_exc!r}", file=sys.stderr)

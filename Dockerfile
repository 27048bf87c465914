# cpp-data in a container. The image holds the tool and the Debian trees of the default corpus, so the main job
# needs no network:
#   docker build -t cpp-data .          (or podman; scripts/container_check.sh builds and checks it offline)
#   docker run --rm -v $PWD/out:/app/out cpp-data build --version v6 --sources sources/debian.toml --out out
# Build arguments:
#   BASE            a Debian bookworm image (python3 3.11); default debian:bookworm
#   PIP_FIND_LINKS  a directory holding the CPU torch wheel (mount it with -v); without it pip downloads torch
#   PIP_CERT        a CA bundle for pip where TLS to the package index is re-signed
ARG BASE=debian:bookworm
FROM ${BASE} AS app

# python3 + venv (bookworm's python is externally managed); git for pinned sources; the default corpus's C++
# trees; libclang's builtin headers; cmake, ninja, g++ and bubblewrap for sandboxed configure-only runs that
# give libclang a compile database.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv git ca-certificates \
      googletest nlohmann-json3-dev juce-modules-source libpoco-dev \
      libclang-common-19-dev cmake ninja-build g++ bubblewrap \
 && rm -rf /var/lib/apt/lists/*

ARG PIP_CERT
ARG PIP_FIND_LINKS
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# torch first, pinned to the CPU build: megatron-core's unpinned torch would pull a multi-GB CUDA build
RUN python3 -m venv /opt/venv \
 && pip install --upgrade pip \
 && pip install "torch==2.13.0"

WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY pipeline ./pipeline
COPY stages ./stages
COPY schemas ./schemas
COPY tokenizer ./tokenizer
COPY clang_index ./clang_index
COPY harness ./harness
COPY sources ./sources
RUN pip install . && cpp-data --help >/dev/null

ENTRYPOINT ["cpp-data"]
CMD ["--help"]

# The container check: the README's main job inside the image, then verify promotes it. Building this target
# runs it (build with --cap-add=SYS_ADMIN,NET_ADMIN so bubblewrap can sandbox the CMake configure).
FROM app AS check
RUN cpp-data build --version v6 --sources sources/debian.toml --out out \
 && cpp-data verify out \
 && python3 -c "import json,pathlib; b=pathlib.Path('out/builds')/pathlib.Path('out/builds/LATEST').read_text().strip(); \
c=json.loads((b/'manifest.json').read_text())['semantic_coverage']['googletest']; print('libclang TUs', c['tus']); \
assert c['tus'] > 0, c"

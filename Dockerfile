# cpp-data in a container: `docker run --rm -v $PWD/out:/out cpp-data build --version v6 --sources /app/sources/debian.toml --out /out`
FROM python:3.11-slim-bookworm

# git for pinned sources; the Debian C++ trees make the default corpus work with no network.
RUN apt-get update \
 && apt-get install -y --no-install-recommends git googletest nlohmann-json3-dev juce-modules-source libpoco-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY pipeline ./pipeline
COPY stages ./stages
COPY schemas ./schemas
COPY tokenizer ./tokenizer
COPY clang_index ./clang_index
COPY sources ./sources
RUN pip install --no-cache-dir ".[ray]"

ENTRYPOINT ["cpp-data"]
CMD ["--help"]

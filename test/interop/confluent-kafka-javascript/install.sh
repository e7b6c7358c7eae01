#!/usr/bin/env bash
# Installs this interop package: @confluentinc/kafka-javascript (a current librdkafka, built from the sources its npm
# package ships) and bin/rdkafka-configs, a small C program for the admin config calls its JavaScript API lacks.
#
# The package's default build downloads zlib and OpenSSL sources; CKJS_LINKING=dynamic builds librdkafka against
# Debian's libraries instead, so it needs libssl-dev, zlib1g-dev, libzstd-dev and liblz4-dev (.ci/run installs
# them) and a C/C++ toolchain. About 5 minutes on two cores.
#
# The result is kept in a cache keyed by what it is built from (FLOWMQ_INTEROP_CACHE, default
# ~/.cache/flowmq/interop): a machine that built it once copies it in seconds.
set -euo pipefail
cd "$(dirname "$0")"
key=$( (node --version; cat package.json package-lock.json rdkafka-configs.c install.sh) | sha256sum | cut -c1-16)
cache="${FLOWMQ_INTEROP_CACHE:-$HOME/.cache/flowmq/interop}/confluent-kafka-javascript-$key"
deps=node_modules/@confluentinc/kafka-javascript/build/deps

if [ -d "$cache/node_modules" ] && [ -x "$cache/bin/rdkafka-configs" ]; then
  rm -rf node_modules bin
  cp -a "$cache/node_modules" "$cache/bin" .
  echo "interop package from the cache ($cache)"
else
  export CKJS_LINKING=dynamic
  export npm_config_build_from_source=true
  npm ci --no-audit --no-fund
  mkdir -p bin
  # The rpath is relative to the program ($ORIGIN), so a copy of this folder (the cache) works as well.
  cc -O2 -Wall -I"$deps/include" -o bin/rdkafka-configs rdkafka-configs.c -L"$deps" -lrdkafka -Wl,-rpath,"\$ORIGIN/../$deps"
  mkdir -p "$(dirname "$cache")"
  rm -rf "$cache.tmp"
  mkdir "$cache.tmp"
  cp -a node_modules bin "$cache.tmp/"
  # One build kept: those of earlier versions of this package go (a few hundred MB each).
  find "$(dirname "$cache")" -maxdepth 1 -name 'confluent-kafka-javascript-*' ! -name "$(basename "$cache").tmp" -exec rm -rf {} +
  mv "$cache.tmp" "$cache"
fi
node -e "const k = require('@confluentinc/kafka-javascript'); console.log('librdkafka', k.librdkafkaVersion, k.features.join(','))"
./bin/rdkafka-configs 2>&1 | head -1 || true

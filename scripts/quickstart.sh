#!/bin/sh
# Install dependencies, build, and run the main demo on the embedded
# default pool (no daemons, no special hardware).
set -e
cd "$(dirname "$0")/.."
./scripts/deps.sh
./scripts/build.sh
./examples/demo

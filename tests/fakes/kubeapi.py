#!/usr/bin/env python3
"""Fake Kubernetes API server for nodesmith's tests and the local demo.

    python3 tests/fakes/kubeapi.py --port 0 [--grace-scale 0.05] [--node n1] ...

Prints 'listening on 127.0.0.1:PORT' as its first stdout line. The implementation is the
package beside this file (tests/fakes/kubeapi/); tests/fakes/README.md describes what it models,
the /_fake/ control endpoints and the options. Python 3.11 standard library only.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kubeapi.main import main  # noqa: E402  (the package, not this script)

if __name__ == "__main__":
    sys.exit(main())

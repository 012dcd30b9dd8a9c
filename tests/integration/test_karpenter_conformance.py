#!/usr/bin/env python3
"""Karpenter v1 conformance (issue 17): tests/conformance/karpenter/conformance.py runs Karpenter's
published example manifests and those of its documentation through nodesmithctl convert, simulate
and an apply to the local stack; each must be accepted and honoured, or refused with the message
its manifest (and docs/migrating-from-karpenter.md) names."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
r = subprocess.run([sys.executable, os.path.join(HERE, "..", "conformance", "karpenter", "conformance.py")],
                   timeout=540)
sys.exit(r.returncode)

//go:build tools

// Package karpenterbench only pins sigs.k8s.io/karpenter: bench/bench_karpenter.py runs that
// module's own scheduling benchmark package (go test by import path) with one extra test file
// laid over it (overlay/), in the same run as nodesmith's bench/scheduling.
package karpenterbench

import _ "sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
